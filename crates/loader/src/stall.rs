//! The stall meter: how long the training loop waits for data, and what the run will take.
//!
//! The loader times every step: the wait inside `next()` (input-bound time) and the time the
//! training loop computed between two calls. From the time to the first batch, the first
//! iteration and the steady iteration time it forecasts an epoch and the whole run:
//!
//! `total = T_init + T_it1 + (N_it − 1)·T_it + (N_ep − 1)·N_it·T_it + N_ep·T_val`
//!
//! ```
//! use std::time::Duration;
//! use voxlake_loader::stall::Forecast;
//!
//! let f = Forecast::compute(
//!     Duration::from_secs(2),         // T_init: build → first batch
//!     Duration::from_millis(500),     // T_it1
//!     Duration::from_millis(100),     // steady T_it
//!     100, 3,                          // N_it, N_ep
//!     Duration::from_secs(1),         // validation per epoch
//!     Some(3.6),                       // price per hour
//! );
//! assert!((f.total.as_secs_f64() - (2.0 + 0.5 + 9.9 + 20.0 + 3.0)).abs() < 1e-9);
//! assert!((f.cost.unwrap() - 0.0354).abs() < 1e-9);
//! ```

use std::time::Duration;

pub use waits::{StepWaits, WaitHistogram};

mod waits;

/// Per-step timings gathered by the loader.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StallMeter {
    /// Steps (batches handed out).
    pub steps: u64,
    /// From `build()` to the first batch: T_init.
    pub init: Duration,
    /// From the first batch to the second: T_it1 (includes the first training step).
    pub first_iteration: Duration,
    /// Sum of the iteration times after the first (batch to batch).
    pub steady_total: Duration,
    /// Time the training loop waited in `next()` (all steps).
    pub waited: Duration,
    /// Time the training loop spent between calls (all steps).
    pub computed: Duration,
    /// Samples handed out.
    pub samples: u64,
    /// The most recent steady iteration times (a ring).
    recent: [Duration; RECENT],
    recent_len: usize,
}

/// Steady iterations the median is taken over.
const RECENT: usize = 32;

impl StallMeter {
    /// Records one steady iteration (batch to batch, after the first).
    pub(crate) fn record_steady(&mut self, iteration: Duration) {
        self.steady_total += iteration;
        self.recent[self.recent_len % RECENT] = iteration;
        self.recent_len += 1;
    }

    /// The steady iteration time: the median of the last 32 iterations after the first (robust
    /// to the odd slow step: a GC pause, a thread pool warming up), if there has been one.
    pub fn steady_iteration(&self) -> Option<Duration> {
        let n = self.recent_len.min(RECENT);
        if n == 0 {
            return None;
        }
        let mut recent = self.recent[..n].to_vec();
        recent.sort();
        Some(recent[n / 2])
    }

    /// The fraction of the training loop's time spent waiting for input.
    pub fn input_bound_fraction(&self) -> f64 {
        let total = (self.waited + self.computed).as_secs_f64();
        if total > 0.0 {
            self.waited.as_secs_f64() / total
        } else {
            0.0
        }
    }

    /// Samples per second over the steady iterations.
    pub fn samples_per_s(&self, batch_size: usize) -> f64 {
        self.steady_iteration()
            .map_or(0.0, |t| batch_size as f64 / t.as_secs_f64().max(1e-12))
    }
}

/// A forecast of an epoch and of a whole run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// One epoch in the steady state: `N_it · T_it` (+ validation).
    pub epoch: Duration,
    /// The whole run.
    pub total: Duration,
    /// Its cost at the given price per hour.
    pub cost: Option<f64>,
}

impl Forecast {
    /// `total = T_init + T_it1 + (N_it − 1)·T_it + (N_ep − 1)·N_it·T_it + N_ep·T_val`.
    pub fn compute(
        init: Duration,
        first_iteration: Duration,
        steady_iteration: Duration,
        iterations_per_epoch: u64,
        epochs: u64,
        validation_per_epoch: Duration,
        price_per_hour: Option<f64>,
    ) -> Forecast {
        let it = steady_iteration.as_secs_f64();
        let n_it = iterations_per_epoch as f64;
        let n_ep = epochs as f64;
        let total = init.as_secs_f64()
            + first_iteration.as_secs_f64()
            + (n_it - 1.0).max(0.0) * it
            + (n_ep - 1.0).max(0.0) * n_it * it
            + n_ep * validation_per_epoch.as_secs_f64();
        Forecast {
            epoch: Duration::from_secs_f64(n_it * it + validation_per_epoch.as_secs_f64()),
            total: Duration::from_secs_f64(total),
            cost: price_per_hour.map(|p| p * total / 3600.0),
        }
    }
}
