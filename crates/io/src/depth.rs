//! How many row-group reads to keep in flight (pure): Little's law over what is measured, so
//! that nothing needs tuning for a local disk, a store 20 ms away or one 100 ms away.
//!
//! To deliver row groups as fast as the consumer takes them, reads in flight must cover a read's
//! latency at the consumer's pace: `N = L / S`, with `L` a read's time (request to decoded) and
//! `S` the consumer's own time per row group (between taking one and asking for the next, its
//! waits left out: the pace it would keep if never starved). `L` is the lower quartile of the
//! last reads' times. The consumer's depth is `1.25 L / S + 1`.
//!
//! A store slower than the consumer (its link or its servers saturated) makes every read slower
//! the more there are: more reads then only queue, holding memory (and, measured, costing the
//! kernel time) without delivering sooner. So the depth is also bounded by the store's own
//! bandwidth-delay product, as TCP BBR bounds a congestion window: `2 X L₀ + 1`, with `X` the
//! most row groups per second the store delivered over runs of the last reads (Little's law
//! again: a run's reads in flight over their times) and `L₀` a read's time when few are in
//! flight (the least of the last two reads started with at most the floor in flight, in the slow
//! start or in a probe). While the depth stays above the floor no such read happens (an epoch's
//! last few reads were measured slow for other reasons: they do not count), so after
//! [`PROBE_FIRST`] reads without one (the slow start's reads also opened connections), then
//! every [`PROBE_EVERY`], the depth drops to the floor until two are timed (a store that got
//! slower is then seen).
//! The memory budget bounds the depth besides. Until the reads and the pace are measured, a slow
//! start: the floor, one more after each read (the first row groups, which the first batch
//! waits for, do not share the store with many others).
//!
//! ```
//! use std::time::Duration;
//! use voxlake_io::depth::Depth;
//!
//! let mut depth = Depth::new(4, 64);
//! assert_eq!(depth.target(), 4);
//! // A store 100 ms away, not saturated (as long with 1 or 24 reads in flight), and 200 row
//! // groups a second taken.
//! depth.read_done(Duration::from_millis(100), 1);
//! for _ in 0..31 {
//!     depth.read_done(Duration::from_millis(100), 24);
//!     depth.item_taken(Duration::from_millis(5));
//! }
//! assert_eq!(depth.target(), 26); // 1.25 × 100 / 5 + 1
//! // The same store saturated at 16 reads: each takes 16 × 25 ms, the most it sends is 40 a
//! // second; 2 × 40 × 100 ms + 1 reads cover its latency at that rate.
//! for _ in 0..32 {
//!     depth.read_done(Duration::from_millis(400), 16);
//! }
//! // No read with few in flight for a while: the floor, to time two.
//! assert_eq!(depth.target(), 4);
//! depth.read_done(Duration::from_millis(100), 4);
//! depth.read_done(Duration::from_millis(100), 3);
//! assert_eq!(depth.target(), 9);
//! ```

use std::collections::VecDeque;
use std::time::Duration;

/// Samples of each kind before Little's law replaces the slow start.
const WARM: u32 = 4;
/// Read times (and delivery rates) remembered for the latency's lower quartile (and the most
/// the store delivered).
const RECENT: usize = 32;
/// Reads a delivery rate is averaged over.
const RATE_RUN: usize = 8;
/// Reads at the floor a probe measures, and the times of such reads remembered for the unloaded
/// latency (the last probe's replace what came before).
const PROBE_READS: usize = 2;
/// Reads without one started at the floor before the depth drops there to time one, the first
/// time.
pub const PROBE_FIRST: usize = 32;
/// The same, after the first probe.
pub const PROBE_EVERY: usize = 256;
/// Weight of a new sample in the moving averages.
const ALPHA: f64 = 0.125;
/// Headroom over Little's law: latencies and the consumer's pace vary.
const HEADROOM: f64 = 1.25;
/// Headroom over the store's bandwidth-delay product (BBR's congestion-window gain).
const STORE_GAIN: f64 = 2.0;

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

/// Pushes `x` onto `q`, keeping the last `n`.
fn remember(q: &mut VecDeque<f64>, n: usize, x: f64) {
    if q.len() == n {
        q.pop_front();
    }
    q.push_back(x);
}

/// The depth of reads in flight, from measured read latency, consumer pace and store rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Depth {
    min: usize,
    max: usize,
    /// The last reads' times, oldest first.
    reads_recent: VecDeque<f64>,
    /// The last reads' reads in flight when they started (themselves included).
    in_flight_recent: VecDeque<f64>,
    /// Times of the last reads started with at most `min` in flight.
    unloaded: VecDeque<f64>,
    pace: Ewma,
    /// Reads finished (the slow start's count).
    reads: usize,
    /// Reads finished since the last started with at most `min` in flight.
    since_unloaded: usize,
    /// Reads at the floor still to measure in a probe (0: not probing).
    probe_left: usize,
    /// Probes started.
    probes: usize,
}

impl Depth {
    /// A depth between `min` and `max` (at least 1; `max` at least `min`).
    pub fn new(min: usize, max: usize) -> Depth {
        let min = min.max(1);
        Depth {
            min,
            max: max.max(min),
            reads_recent: VecDeque::with_capacity(RECENT),
            in_flight_recent: VecDeque::with_capacity(RECENT),
            unloaded: VecDeque::with_capacity(PROBE_READS),
            pace: Ewma::default(),
            reads: 0,
            since_unloaded: 0,
            probe_left: 0,
            probes: 0,
        }
    }

    /// Always `n`, whatever is measured.
    pub fn fixed(n: usize) -> Depth {
        Depth::new(n, n)
    }

    /// A read finished after `took` (request to decoded); `in_flight` reads (itself included)
    /// were in flight when it started.
    pub fn read_done(&mut self, took: Duration, in_flight: usize) {
        let secs = took.as_secs_f64();
        remember(&mut self.reads_recent, RECENT, secs);
        let in_flight = in_flight.max(1);
        remember(&mut self.in_flight_recent, RECENT, in_flight as f64);
        self.reads = self.reads.saturating_add(1);
        // Reads with few in flight time the store unloaded in the slow start and in probes;
        // elsewhere (an epoch's last reads) they were measured slow for other reasons.
        let probing = self.probe_left > 0;
        if in_flight <= self.min && (self.probes == 0 || probing) {
            remember(&mut self.unloaded, PROBE_READS, secs);
            self.since_unloaded = 0;
            self.probe_left = self.probe_left.saturating_sub(1);
        } else {
            self.since_unloaded += 1;
            let every = if self.probes == 0 {
                PROBE_FIRST
            } else {
                PROBE_EVERY
            };
            if self.since_unloaded >= every && self.probe_left == 0 {
                self.probe_left = PROBE_READS;
                self.probes += 1;
            }
        }
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

    /// The consumer's own time per row group as the depth counts it, once measured.
    pub fn consumer_pace(&self) -> Option<Duration> {
        (self.pace.samples > 0).then(|| Duration::from_secs_f64(self.pace.value))
    }

    /// Whether the depth is at the floor to measure a read's unloaded time.
    pub fn probing(&self) -> bool {
        self.probe_left > 0
    }

    /// Reads in flight the store itself can use: `2 X L₀ + 1`, once measured.
    fn store_depth(&self) -> Option<f64> {
        // The most of its rates over runs of RATE_RUN reads: each rate averaged over a run
        // (one read served early is no rate), the most because a depth below the store's
        // needs measures less than the store can do.
        let reads: Vec<(f64, f64)> = self
            .in_flight_recent
            .iter()
            .copied()
            .zip(self.reads_recent.iter().copied())
            .collect();
        let rate = reads
            .rchunks(RATE_RUN)
            .map(|run| {
                let (n, busy) = run.iter().fold((0.0, 0.0), |(n, b), (i, t)| (n + i, b + t));
                n / f64::max(busy, 1e-6)
            })
            .reduce(f64::max)?;
        let unloaded = self.unloaded.iter().copied().reduce(f64::min)?;
        // Less a hair, so that rounding never tips it over a whole read.
        Some((STORE_GAIN * rate * unloaded - 1e-9).ceil() + 1.0)
    }

    /// Reads to keep in flight now.
    pub fn target(&self) -> usize {
        if self.probing() {
            return self.min;
        }
        self.measured()
    }

    /// Reads in flight as measured, a probe's floor left out (what statistics report).
    pub fn measured(&self) -> usize {
        let latency = match self.read_latency() {
            Some(l) if self.reads_recent.len() >= WARM as usize && self.pace.samples >= WARM => l,
            _ => return self.min.saturating_add(self.reads).min(self.max),
        };
        // A consumer that takes row groups faster than a microsecond apart is as fast as can be.
        let pace = self.pace.value.max(1e-6);
        let little = (HEADROOM * latency.as_secs_f64() / pace).ceil() + 1.0;
        let depth = self.store_depth().map_or(little, |store| little.min(store));
        if depth.is_finite() {
            (depth.min(self.max as f64) as usize).clamp(self.min, self.max)
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
        d.read_done(ms(20), 1);
        d.read_done(ms(20), 2);
        assert_eq!(d.target(), 6, "one more per read before the pace is known");
        for _ in 0..10 {
            d.read_done(ms(20), 12);
            d.item_taken(ms(2));
        }
        assert_eq!(d.target(), 14, "1.25 × 20 / 2 + 1 = 13.5");
        // A local disk: reads faster than the consumer needs; the floor.
        let mut local = Depth::new(4, 16);
        for _ in 0..10 {
            local.read_done(ms(3), 4);
            local.item_taken(ms(3));
        }
        assert_eq!(local.target(), 4);
        // A store 100 ms away and a fast consumer: the cap.
        let mut far = Depth::new(4, 64);
        for in_flight in 1..=16 {
            far.read_done(ms(130), in_flight * 4);
            far.item_taken(ms(1));
        }
        assert_eq!(far.target(), 64);
        assert_eq!(Depth::fixed(16).target(), 16);
        // Reads slowed by a burst of queueing: the lower quartile keeps the store's latency.
        let mut queued = Depth::new(1, 64);
        for i in 0..PROBE_FIRST - 1 {
            queued.read_done(ms(if i % 4 == 0 { 200 } else { 20 }), 8);
            queued.item_taken(ms(5));
        }
        assert_eq!(queued.read_latency(), Some(ms(20)));
        assert_eq!(queued.target(), 6);
    }

    /// Reads at the depth's target (the floor while it probes), each taking `took(n)` with `n`
    /// in flight, the consumer 1 ms per row group; the steps that probed.
    fn run(d: &mut Depth, steps: usize, took: impl Fn(u64) -> Duration) -> Vec<usize> {
        let mut probed = Vec::new();
        for step in 0..steps {
            if d.probing() {
                probed.push(step);
                assert_eq!(d.target(), d.min, "a probe asks for the floor");
                assert!(d.measured() >= d.min, "and reports what it measured");
            }
            let n = d.target();
            d.read_done(took(n as u64), n);
            d.item_taken(ms(1));
        }
        probed
    }

    #[test]
    fn a_saturated_store_gets_its_bandwidth_delay_product() {
        // 20 ms a read with few in flight; the store sends at most 400 a second, so each of n
        // reads takes max(20 ms, n × 2.5 ms).
        let took = |n: u64| Duration::from_micros((n * 2_500).max(20_000));
        let mut d = Depth::new(4, 64);
        let probed = run(&mut d, 4, took);
        assert_eq!(
            d.target(),
            12,
            "unsaturated: 2 × 275/s (4 to 7 in flight, 20 ms each) × 20 ms + 1"
        );
        assert!(probed.is_empty());
        // Not Little's 1.25 × 42.5 / 1 + 1 = 55: the store cannot send them sooner.
        let probed = run(&mut d, 600, took);
        assert_eq!(d.target(), 17, "2 × 400/s × 20 ms + 1");
        // Probes after 32 reads, then every 256, two reads each; what is reported meanwhile
        // is the measured depth, not the probe's floor.
        assert_eq!(probed, [29, 30, 287, 288, 545, 546]);
        while !d.probing() {
            d.read_done(took(17), 17);
        }
        assert_eq!((d.target(), d.measured()), (4, 17));
    }

    #[test]
    fn a_store_that_got_slower_is_seen_at_the_next_probe() {
        let mut d = Depth::new(2, 64);
        run(&mut d, 100, |n| Duration::from_millis((n * 5).max(10)));
        assert_eq!(d.target(), 5, "2 × 200/s × 10 ms + 1");
        // Now 60 ms for few reads, 100 a second at most.
        let slower = |n: u64| Duration::from_millis((n * 10).max(60));
        run(&mut d, 400, slower);
        assert_eq!(d.target(), 13, "2 × 100/s × 60 ms + 1");
    }

    proptest! {
        /// Always within the floor and the cap; more latency or a faster consumer never asks
        /// for fewer reads.
        #[test]
        fn within_bounds_and_monotone(
            min in 1usize..10,
            extra in 0usize..100,
            reads in proptest::collection::vec((0u64..1_000_000, 1usize..100), 0..300),
            takes in proptest::collection::vec(0u64..1_000_000, 0..20),
            scale in 1u64..5,
        ) {
            let max = min + extra;
            let (mut d, mut slower_reads, mut faster_consumer) =
                (Depth::new(min, max), Depth::new(min, max), Depth::new(min, max));
            for &(r, n) in &reads {
                d.read_done(Duration::from_micros(r), n);
                slower_reads.read_done(Duration::from_micros(r * scale), n);
                faster_consumer.read_done(Duration::from_micros(r), n);
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

        /// A probe asks for the floor and ends after its reads there, whatever came before;
        /// there is one at least every PROBE_EVERY reads.
        #[test]
        fn probes_end(
            reads in proptest::collection::vec((0u64..1_000_000, 1usize..100), 0..600),
        ) {
            let mut d = Depth::new(4, 64);
            let (mut probed, mut since_timed) = (false, 0);
            for &(r, n) in &reads {
                let was_probing = d.probing();
                d.read_done(Duration::from_micros(r), n);
                probed |= d.probing();
                // Timed unloaded: at the floor in the slow start or in a probe.
                let timed = n <= 4 && (!probed || was_probing);
                since_timed = if d.probing() || timed { 0 } else { since_timed + 1 };
                prop_assert!(since_timed < PROBE_EVERY);
            }
            if d.probing() {
                prop_assert_eq!(d.target(), 4);
                for _ in 0..PROBE_READS {
                    d.read_done(ms(1), 4);
                }
                prop_assert!(!d.probing());
            }
        }
    }
}
