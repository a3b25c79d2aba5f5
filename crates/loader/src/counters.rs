//! The loader's counters, shared by its producer, its assembler and the caller's iterator:
//! what was delivered and where the time went (`LoaderStats` reads them).

use std::sync::atomic::AtomicU64;

/// Counts and nanoseconds, updated with relaxed atomics from every thread of a loader.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub samples: AtomicU64,
    pub batches: AtomicU64,
    pub tensor_bytes: AtomicU64,
    pub assemble_ns: AtomicU64,
    pub batch_transform_ns: AtomicU64,
    pub check_ns: AtomicU64,
    pub device_copy_ns: AtomicU64,
    pub batches_ready_peak: AtomicU64,
    pub recycled: AtomicU64,
    pub staging_waits: AtomicU64,
    pub loosened_rows: AtomicU64,
    pub producer_wait_ns: AtomicU64,
    pub consumer_wait_ns: AtomicU64,
    pub first_batch_ns: AtomicU64,
}
