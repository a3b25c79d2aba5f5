//! Which data read gets which fault: a plan of periods (every n-th read a 503, a reset, …) or
//! a seeded random schedule, the same read numbers getting the same faults on every run. Pure:
//! the proxy (`fault.rs`) asks it once per data read.

use std::time::Duration;

/// Which faults to inject, and the added latency.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// Delay before each request is forwarded (every request, not only data reads).
    pub latency: Duration,
    /// Response bodies are paced to this many bytes per second on each connection (a link of
    /// this speed per TCP connection, like a per-blob or per-flow limit). Bodies a fault cuts
    /// or delays are sent as the fault says, unpaced.
    pub bytes_per_second: Option<u64>,
    /// Every n-th data read starts a burst of `error_burst` data reads answered
    /// `503 Service Unavailable` without reaching the store.
    pub error_503_every: Option<u64>,
    /// The same with `500 Internal Server Error`.
    pub error_500_every: Option<u64>,
    /// Consecutive data reads each error burst answers (0 counts as 1). A burst longer than the
    /// client's retries fails the read.
    pub error_burst: u64,
    /// Every n-th data read: the connection is reset after half of the body.
    pub reset_every: Option<u64>,
    /// Every n-th data read: the body is cut short (the `Content-Length` promises more).
    pub truncate_every: Option<u64>,
    /// Every n-th data read stalls this long before its response.
    pub stall_every: Option<(u64, Duration)>,
    /// Faults drawn at random (seeded) instead of, or besides, the periods above.
    pub random: Option<RandomFaults>,
    /// The faults above hit every request (listings, heads, log reads, uploads), counted over
    /// all of them, not data reads only.
    pub every_request: bool,
    /// A reply lost: the first PUT whose target contains this text reaches the store, which
    /// does it, and the connection is then reset before any of the answer (a commit's reply
    /// lost on the way back). Retries of it are answered.
    pub lose_reply: Option<String>,
    /// The store away: from the n-th data read on, for this long, every request of any kind
    /// is answered `503 Service Unavailable` without reaching the store.
    pub outage: Option<(u64, Duration)>,
}

/// A seeded random fault schedule over data reads: each read independently gets a fault with
/// probability `rate` (the kind drawn uniformly from 503, 500, reset, truncated body, stall),
/// except that status errors come in bursts: reads are grouped in windows of `burst`, and a
/// window drawn for an error answers every read in it with that status.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomFaults {
    /// The seed: the same seed gives the same faults at the same read numbers.
    pub seed: u64,
    /// Probability of a fault per data read (per window for status bursts).
    pub rate: f64,
    /// Reads per status burst window (0 counts as 1).
    pub burst: u64,
    /// How long a stalled read waits.
    pub stall: Duration,
}

impl RandomFaults {
    pub(super) fn fault_for(&self, n: u64) -> Fault {
        use voxlake_plan::plan::SeededRng;
        let burst = self.burst.max(1);
        let draw = |salt: u64, k: u64| {
            let mut rng = SeededRng::for_stream(&[self.seed, salt, k]);
            (f64::from(rng.uniform()), rng.below(5))
        };
        // Status bursts: one draw per window of reads.
        let (p, kind) = draw(1, n / burst);
        if p < self.rate / 2.0 {
            return match kind % 2 {
                0 => Fault::Status("503 Service Unavailable"),
                _ => Fault::Status("500 Internal Server Error"),
            };
        }
        // Other faults: one draw per read.
        let (p, kind) = draw(2, n);
        if p >= self.rate / 2.0 {
            return Fault::None;
        }
        match kind {
            0 | 1 => Fault::Reset,
            2 | 3 => Fault::Truncate,
            _ => Fault::Stall(self.stall),
        }
    }
}

pub(super) enum Fault {
    None,
    Status(&'static str),
    Reset,
    Truncate,
    Stall(Duration),
    LoseReply,
}

impl FaultPlan {
    pub(super) fn fault_for(&self, n: u64) -> Fault {
        let hits = |every: Option<u64>| every.is_some_and(|e| e > 0 && n.is_multiple_of(e));
        // Within a burst: one of the last `error_burst` reads started it.
        let in_burst = |every: Option<u64>| {
            every.is_some_and(|e| {
                e > 0 && (0..self.error_burst.max(1)).any(|k| n > k && (n - k).is_multiple_of(e))
            })
        };
        if in_burst(self.error_503_every) {
            Fault::Status("503 Service Unavailable")
        } else if in_burst(self.error_500_every) {
            Fault::Status("500 Internal Server Error")
        } else if hits(self.reset_every) {
            Fault::Reset
        } else if hits(self.truncate_every) {
            Fault::Truncate
        } else if let Some((_, d)) = self
            .stall_every
            .filter(|(e, _)| *e > 0 && n.is_multiple_of(*e))
        {
            Fault::Stall(d)
        } else if let Some(random) = &self.random {
            random.fault_for(n)
        } else {
            Fault::None
        }
    }
}
