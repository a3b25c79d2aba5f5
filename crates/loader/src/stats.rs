//! [`LoaderStats`]: what a loader has done so far, and the draws it handed out per label.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use voxlake_stream::StreamStats;

use crate::Loader;

/// What the loader has done so far; by name: [`metrics`](Self::metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct LoaderStats {
    /// Samples handed out.
    pub samples: u64,
    /// Batches handed out.
    pub batches: u64,
    /// Tensor bytes handed out (every tensor field).
    pub tensor_bytes: u64,
    /// From `build()` to the first batch handed out (zero before it).
    pub first_batch: Duration,
    /// Time assembling batches (shuffle-buffer gather and copy into the batch, the
    /// transforms included).
    pub assemble: Duration,
    /// Of `assemble`, the time in the per-batch transform
    /// ([`with_batch_transform`](crate::LoaderBuilder::with_batch_transform)).
    pub batch_transform: Duration,
    /// Of `assemble`, the time checking rows against their checksums (summed over threads;
    /// one row in 8 timed, scaled up: two clock reads cost as much as a small row's check).
    pub check: Duration,
    /// Of `assemble`, the time staging batches for a CUDA device and queueing their copies
    /// (zero on the CPU).
    pub device_copy: Duration,
    /// Batches assembled and waiting for the training loop now (the queue the loader fills
    /// ahead: [`with_prefetch`](crate::LoaderBuilder::with_prefetch)).
    pub batches_ready: u64,
    /// The most batches in that queue at once (1 once a batch came): at the prefetch bound,
    /// the loader ran ahead; at 1 with waits inside `next()`, the loop waited on it.
    pub batches_ready_peak: u64,
    /// Batches assembled into memory given back with [`Loader::recycle`].
    pub recycled: u64,
    /// Batches for a CUDA device that found their staging buffer still being copied from
    /// (the assembler waited for that copy to finish): a device too busy to take the copies.
    pub staging_waits: u64,
    /// Rows copied out of row groups that had only those rows left in the shuffle buffer (a
    /// piece at the edge of the rank's span, stragglers of a buffer close to a batch), so that
    /// the rest of the row group could be freed.
    pub loosened_rows: u64,
    /// Time the assembler waited for row groups from the stream.
    pub producer_wait: Duration,
    /// Time the training loop waited inside `next()`: input-bound time.
    pub consumer_wait: Duration,
    /// Quantiles of the wait inside `next()`, a value a step (zero for a [`Lookup`](crate::Lookup)).
    pub step_waits: crate::stall::StepWaits,
    /// Of the training loop's time, the share it waited inside `next()`
    /// ([`StallMeter::input_bound_fraction`](crate::stall::StallMeter::input_bound_fraction)).
    pub input_bound_fraction: f64,
    /// Since `build()`.
    pub elapsed: Duration,
    /// The stream's counters (fetch, decode, budget wait).
    pub stream: StreamStats,
}

impl Loader {
    /// Samples handed out so far per label value (`None`: a row without one), in label order:
    /// what a balanced or weighted run drew of each.
    pub fn labels_delivered(&self) -> Vec<(Option<i64>, u64)> {
        self.labels.iter().map(|(l, n)| (*l, *n)).collect()
    }

    /// Of a mixture, samples handed out so far per source, in the sources' order (empty for
    /// one table).
    pub fn sources_delivered(&self) -> Vec<u64> {
        self.sources_delivered.clone()
    }

    /// What the loader has done so far.
    pub fn stats(&self) -> LoaderStats {
        LoaderStats {
            step_waits: self.waits.waits(),
            input_bound_fraction: self.meter.input_bound_fraction(),
            batches_ready: self.rx.len() as u64,
            ..self
                .counters
                .stats(self.started.elapsed(), self.stream.stats())
        }
    }
}

impl crate::counters::Counters {
    /// The counts so far, with the time since the start and the stream's counters.
    pub(crate) fn stats(&self, elapsed: Duration, stream: StreamStats) -> LoaderStats {
        let c = self;
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        LoaderStats {
            samples: c.samples.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            tensor_bytes: c.tensor_bytes.load(Ordering::Relaxed),
            first_batch: ns(&c.first_batch_ns),
            assemble: ns(&c.assemble_ns),
            batch_transform: ns(&c.batch_transform_ns),
            check: ns(&c.check_ns),
            device_copy: ns(&c.device_copy_ns),
            batches_ready: 0,
            batches_ready_peak: c.batches_ready_peak.load(Ordering::Relaxed),
            recycled: c.recycled.load(Ordering::Relaxed),
            staging_waits: c.staging_waits.load(Ordering::Relaxed),
            loosened_rows: c.loosened_rows.load(Ordering::Relaxed),
            producer_wait: ns(&c.producer_wait_ns),
            consumer_wait: ns(&c.consumer_wait_ns),
            step_waits: Default::default(),
            input_bound_fraction: 0.0,
            elapsed,
            stream,
        }
    }
}
