//! The exposed wait of each step as a running histogram: every `next()`'s wait kept in
//! log-linear buckets (32 a power of two: a quantile within 1/64 of the true value), so the
//! quantiles of a run of any length take a fixed 15 KiB.

use std::time::Duration;

/// Buckets a power of two is cut into.
const SUB: u64 = 32;
/// log2(SUB).
const SUB_BITS: u32 = 5;
/// Waits below `SUB` ns have a bucket each; each power of two above has `SUB`.
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * SUB) as usize;

/// Quantiles of the training loop's wait inside `next()`, one value a step
/// ([`Loader::stats`](crate::Loader::stats)); zero before the first step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct StepWaits {
    /// Steps counted.
    pub steps: u64,
    /// The median step's wait.
    pub p50: Duration,
    /// 90 % of the steps waited no longer.
    pub p90: Duration,
    /// 99 % of the steps waited no longer.
    pub p99: Duration,
    /// The longest wait.
    pub max: Duration,
    /// The steps by their wait's power of two: `octaves[k]` counts the waits from
    /// [`octave_floor(k)`](Self::octave_floor), 2^(k+9) ns (0.5 µs, 1 µs, 2 µs, …), up to the
    /// next octave's floor; the first also counts every shorter wait, the last every
    /// longer. What a report draws as the exposed-wait histogram.
    pub octaves: [u64; StepWaits::OCTAVES],
}

/// Shorthand for [`StepWaits::OCTAVES`].
const OCTAVES: usize = StepWaits::OCTAVES;

/// log2 of the first octave's floor, in ns.
const FIRST_OCTAVE_BITS: u32 = 9;

impl StepWaits {
    /// How many octaves [`octaves`](Self::octaves) counts: from 0.5 µs to 2^40 ns (about 18
    /// minutes).
    pub const OCTAVES: usize = 32;

    /// The shortest wait `octaves[k]` counts (the first octave also counts shorter ones).
    ///
    /// ```
    /// use std::time::Duration;
    /// use voxlake_loader::stall::StepWaits;
    ///
    /// assert_eq!(StepWaits::octave_floor(1), Duration::from_nanos(1024));
    /// assert_eq!(StepWaits::octave_floor(11), Duration::from_nanos(1 << 20));
    /// ```
    pub fn octave_floor(k: usize) -> Duration {
        Duration::from_nanos(1u64 << (FIRST_OCTAVE_BITS + k.min(OCTAVES - 1) as u32))
    }
}

/// The histogram the loader keeps of its steps' waits; also for a wait measured elsewhere (a
/// `DataLoader`'s, whose workers' loaders do not see the training loop's wait).
///
/// ```
/// use std::time::Duration;
/// use voxlake_loader::stall::WaitHistogram;
///
/// let mut h = WaitHistogram::default();
/// h.record(Duration::from_millis(3));
/// h.record(Duration::from_millis(1));
/// assert_eq!(h.waits().steps, 2);
/// assert_eq!(h.waits().max, Duration::from_millis(3));
/// ```
#[derive(Debug, Clone)]
pub struct WaitHistogram {
    counts: Box<[u64; BUCKETS]>,
    steps: u64,
    max: Duration,
}

impl Default for WaitHistogram {
    fn default() -> Self {
        WaitHistogram {
            counts: Box::new([0; BUCKETS]),
            steps: 0,
            max: Duration::ZERO,
        }
    }
}

/// The bucket of `ns`: exact below `SUB`, else its power of two and the next `SUB_BITS` bits.
fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exponent = 63 - ns.leading_zeros();
    let shift = exponent - SUB_BITS;
    let mantissa = (ns >> shift) - SUB;
    (SUB + u64::from(shift) * SUB + mantissa) as usize
}

/// The middle of bucket `b`'s values.
fn middle(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let shift = (b - SUB) / SUB;
    let low = (SUB + (b - SUB) % SUB) << shift;
    low + ((1u64 << shift) >> 1)
}

impl WaitHistogram {
    /// Counts one step's wait.
    /// Counts one step that waited `wait`.
    pub fn record(&mut self, wait: Duration) {
        let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)] += 1;
        self.steps += 1;
        self.max = self.max.max(wait);
    }

    /// The quantiles so far.
    /// The quantiles and octaves of the steps counted.
    pub fn waits(&self) -> StepWaits {
        StepWaits {
            steps: self.steps,
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            max: self.max,
            octaves: self.octaves(),
        }
    }

    /// The counts by power of two; exact, as no bucket spans two of them.
    fn octaves(&self) -> [u64; OCTAVES] {
        let mut octaves = [0; OCTAVES];
        for (b, &n) in self.counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            let exponent = 63 - middle(b).max(1).leading_zeros();
            let k = exponent.saturating_sub(FIRST_OCTAVE_BITS) as usize;
            octaves[k.min(OCTAVES - 1)] += n;
        }
        octaves
    }

    /// The wait at quantile `q` (nearest rank: the `⌈q·n⌉`-th shortest), never above the
    /// longest.
    fn quantile(&self, q: f64) -> Duration {
        if self.steps == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.steps as f64).ceil() as u64).clamp(1, self.steps);
        let mut seen = 0;
        for (b, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Duration::from_nanos(middle(b)).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_cover_every_wait_in_order() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(31), 31);
        assert_eq!(bucket(32), 32);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 40, (1 << 40) + 1, u64::MAX / 3]) {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            // The middle of a wait's bucket is within 1/64 of it.
            let m = middle(b) as f64;
            assert!((m - ns as f64).abs() <= ns as f64 / 64.0, "{ns}: {m}");
        }
    }

    #[test]
    fn no_steps_no_waits() {
        assert_eq!(WaitHistogram::default().waits(), StepWaits::default());
    }

    proptest! {
        /// Each quantile is within 1/64 of the exact nearest-rank quantile of the waits.
        #[test]
        fn quantiles_are_the_waits_quantiles(mut waits in prop::collection::vec(0u64..10_000_000_000, 1..400)) {
            let mut h = WaitHistogram::default();
            for &w in &waits {
                h.record(Duration::from_nanos(w));
            }
            waits.sort_unstable();
            let got = h.waits();
            prop_assert_eq!(got.steps, waits.len() as u64);
            prop_assert_eq!(got.max, Duration::from_nanos(*waits.last().unwrap()));
            for (k, &n) in got.octaves.iter().enumerate() {
                let floor = StepWaits::octave_floor(k).as_nanos() as u64;
                let next = StepWaits::octave_floor(k + 1).as_nanos() as u64;
                let exact = waits
                    .iter()
                    .filter(|&&w| (k == 0 || w >= floor) && (k == OCTAVES - 1 || w < next))
                    .count() as u64;
                prop_assert_eq!(n, exact, "octave {}", k);
            }
            for (q, value) in [(0.5, got.p50), (0.9, got.p90), (0.99, got.p99)] {
                let rank = ((q * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
                let exact = waits[rank - 1] as f64;
                let value = value.as_nanos() as f64;
                prop_assert!((value - exact).abs() <= exact / 64.0 + 1.0, "q {}: {} vs {}", q, value, exact);
            }
        }
    }
}
