//! How many row-group reads to keep in flight (pure): Little's law over what is measured, so
//! that nothing needs tuning for a local disk, a store 20 ms away or one 100 ms away.
//!
//! To deliver row groups as fast as the consumer takes them, reads in flight must cover a read's
//! latency at the consumer's pace: `N = L / S`, with `L` a read's time (request to decoded) and
//! `S` the consumer's own time per row group (between taking one and asking for the next, its
//! waits left out: the pace it would keep if never starved). `L` is the lower quartile of the
//! last reads' times: reads that share a saturated link take longer the more there are, and
//! counting that queueing as latency would ask for ever more reads that cannot arrive sooner.
//! The depth is `1.25 L / S + 1`, between a floor and a cap; the memory budget bounds it
//! besides (each read in flight holds its budget share). A link the reads saturate for good
//! (the consumer faster than the store can send) makes every read slower the more there are:
//! the depth then climbs to the cap or the budget, which costs memory the budget allows, not
//! speed. Until both are measured, a slow start:
//! the floor, one more after each read (the first row groups, which the first batch waits for,
//! do not share the store with many others).
//!
//! ```
//! use std::time::Duration;
//! use voxlake_stream::depth::Depth;
//!
//! let mut depth = Depth::new(4, 64);
//! assert_eq!(depth.target(), 4);
//! for _ in 0..8 {
//!     depth.read_done(Duration::from_millis(100)); // a store 100 ms away
//!     depth.item_taken(Duration::from_millis(5)); // 200 row groups a second
//! }
//! assert_eq!(depth.target(), 26); // 1.25 × 100 / 5 + 1
//! ```

use std::time::Duration;

/// Samples of each kind before Little's law replaces the slow start.
const WARM: u32 = 4;
/// Read times remembered for the latency's lower quartile.
const RECENT: usize = 32;
/// Weight of a new sample in the moving averages.
const ALPHA: f64 = 0.125;
/// Headroom over Little's law: latencies and the consumer's pace vary.
const HEADROOM: f64 = 1.25;

/// An exponentially weighted moving average (the first sample starts it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Ewma {
    value: f64,
    samples: u32,
}

impl Ewma {
    fn add(&mut self, x: f64) {
        self.value = if self.samples == 0 {
            x
        } else {
            self.value + ALPHA * (x - self.value)
        };
        self.samples = self.samples.saturating_add(1);
    }
}

/// The depth of reads in flight, from measured read latency and consumer pace.
#[derive(Debug, Clone, PartialEq)]
pub struct Depth {
    min: usize,
    max: usize,
    /// The last reads' times, oldest first.
    reads_recent: std::collections::VecDeque<f64>,
    pace: Ewma,
    /// Reads finished (the slow start's count).
    reads: usize,
}

impl Depth {
    /// A depth between `min` and `max` (at least 1; `max` at least `min`).
    pub fn new(min: usize, max: usize) -> Depth {
        let min = min.max(1);
        Depth {
            min,
            max: max.max(min),
            reads_recent: std::collections::VecDeque::with_capacity(RECENT),
            pace: Ewma::default(),
            reads: 0,
        }
    }

    /// Always `n`, whatever is measured.
    pub fn fixed(n: usize) -> Depth {
        Depth::new(n, n)
    }

    /// A read finished after `took` (request to decoded).
    pub fn read_done(&mut self, took: Duration) {
        if self.reads_recent.len() == RECENT {
            self.reads_recent.pop_front();
        }
        self.reads_recent.push_back(took.as_secs_f64());
        self.reads = self.reads.saturating_add(1);
    }

    /// The consumer took a row group after `busy` of its own work since it took the one before
    /// (its waits for the stream left out).
    pub fn item_taken(&mut self, busy: Duration) {
        self.pace.add(busy.as_secs_f64());
    }

    /// A read's time as the depth counts it: the lower quartile of the last reads'.
    pub fn read_latency(&self) -> Option<Duration> {
        let mut times: Vec<f64> = self.reads_recent.iter().copied().collect();
        if times.is_empty() {
            return None;
        }
        let at = (times.len() - 1) / 4;
        let (_, quartile, _) = times.select_nth_unstable_by(at, f64::total_cmp);
        Some(Duration::from_secs_f64(*quartile))
    }

    /// Reads to keep in flight now.
    pub fn target(&self) -> usize {
        let latency = match self.read_latency() {
            Some(l) if self.reads_recent.len() >= WARM as usize && self.pace.samples >= WARM => l,
            _ => return self.min.saturating_add(self.reads).min(self.max),
        };
        // A consumer that takes row groups faster than a microsecond apart is as fast as can be.
        let pace = self.pace.value.max(1e-6);
        let little = (HEADROOM * latency.as_secs_f64() / pace).ceil() + 1.0;
        if little.is_finite() {
            (little.min(self.max as f64) as usize).clamp(self.min, self.max)
        } else {
            self.max
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slow_start_then_littles_law() {
        let mut d = Depth::new(4, 64);
        assert_eq!(d.target(), 4);
        d.read_done(ms(20));
        d.read_done(ms(20));
        assert_eq!(d.target(), 6, "one more per read before the pace is known");
        for _ in 0..10 {
            d.read_done(ms(20));
            d.item_taken(ms(2));
        }
        assert_eq!(d.target(), 14, "1.25 × 20 / 2 + 1 = 13.5");
        // A local disk: reads faster than the consumer needs; the floor.
        let mut local = Depth::new(4, 16);
        for _ in 0..10 {
            local.read_done(ms(3));
            local.item_taken(ms(3));
        }
        assert_eq!(local.target(), 4);
        // A store 100 ms away and a fast consumer: the cap.
        let mut far = Depth::new(4, 64);
        for _ in 0..10 {
            far.read_done(ms(130));
            far.item_taken(ms(1));
        }
        assert_eq!(far.target(), 64);
        assert_eq!(Depth::fixed(16).target(), 16);
        // Reads slowed by a burst of queueing: the lower quartile keeps the store's latency.
        let mut queued = Depth::new(1, 64);
        for i in 0..32 {
            queued.read_done(ms(if i % 4 == 0 { 200 } else { 20 }));
            queued.item_taken(ms(5));
        }
        assert_eq!(queued.read_latency(), Some(ms(20)));
        assert_eq!(queued.target(), 6);
    }

    proptest! {
        /// Always within the floor and the cap; more latency or a faster consumer never asks
        /// for fewer reads.
        #[test]
        fn within_bounds_and_monotone(
            min in 1usize..10,
            extra in 0usize..100,
            reads in proptest::collection::vec(0u64..1_000_000, 0..20),
            takes in proptest::collection::vec(0u64..1_000_000, 0..20),
            scale in 1u64..5,
        ) {
            let max = min + extra;
            let (mut d, mut slower_reads, mut faster_consumer) =
                (Depth::new(min, max), Depth::new(min, max), Depth::new(min, max));
            for &r in &reads {
                d.read_done(Duration::from_micros(r));
                slower_reads.read_done(Duration::from_micros(r * scale));
                faster_consumer.read_done(Duration::from_micros(r));
            }
            for &t in &takes {
                d.item_taken(Duration::from_micros(t));
                slower_reads.item_taken(Duration::from_micros(t));
                faster_consumer.item_taken(Duration::from_micros(t / scale));
            }
            let t = d.target();
            prop_assert!((min..=max).contains(&t));
            prop_assert!(slower_reads.target() >= t);
            prop_assert!(faster_consumer.target() >= t);
        }
    }
}
