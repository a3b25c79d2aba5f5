//! What the pipeline counts and reports: its work, and where its budget stands.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Counters of the pipeline's work (monotonic; read with [`TableStream::stats`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) row_groups: AtomicU64,
    pub(crate) rows: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) fetch_ns: AtomicU64,
    pub(crate) decode_ns: AtomicU64,
    pub(crate) budget_wait_ns: AtomicU64,
    /// Units that took their budget share.
    pub(crate) reserved_units: AtomicU64,
    /// The budget (KiB) the head of the line waits for; 0 when none waits.
    pub(crate) waiting_kib: AtomicU64,
    /// Row groups taken back from those kept since an earlier epoch (not read again).
    pub(crate) kept_hits: AtomicU64,
}

/// Where the budget stands: for telling a stalled pipeline from a slow one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetProgress {
    /// Units that took their budget share so far (the stream's and [`read_unit`](crate::TableStream::read_unit)'s).
    pub reserved_units: u64,
    /// Bytes the next unit waits for (0: none waits).
    pub waiting_bytes: u64,
    /// Bytes of the budget not taken.
    pub available_bytes: u64,
    /// The whole budget.
    pub budget_bytes: u64,
}

/// One row group's rows and its budget shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupBudget {
    /// Rows in the row group.
    pub rows: u64,
    /// Bytes it keeps while buffered: its projected chunks decoded.
    pub held: u64,
    /// Bytes it takes while fetched and decoded.
    pub peak: u64,
}

/// A snapshot of the pipeline's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamStats {
    /// Row groups delivered.
    pub row_groups: u64,
    /// Rows delivered.
    pub rows: u64,
    /// Bytes of column chunks fetched.
    pub bytes: u64,
    /// Time spent fetching (summed over concurrent fetches).
    pub fetch: Duration,
    /// Time spent decoding (summed over the blocking pool).
    pub decode: Duration,
    /// Time the pipeline waited for the memory budget.
    pub budget_wait: Duration,
    /// Row-group reads kept in flight as measured now (see [`voxlake_io::depth`]; a probe's brief
    /// drop to the floor left out).
    pub in_flight: usize,
    /// A row-group read's time (request to decoded) as the depth counts it: the lower quartile
    /// of the last 32 reads'.
    pub read_latency: Duration,
    /// Bytes of data files fetched from a remote table's store (not counting cache hits).
    pub store_bytes: u64,
    /// Reads of the store asked again because they stalled (`voxlake_io::reask`).
    pub reasked: u64,
    /// Ranged requests made of a remote table's store for data files (each part of a large
    /// read, each read asked again; none for the cache's hits).
    pub store_requests: u64,
    /// Row groups delivered from those kept in the memory budget since an earlier epoch's read
    /// of them (counted in `row_groups`, not fetched or decoded again).
    pub kept_hits: u64,
    /// The disk cache's counters (zero without one).
    pub cache: voxlake_io::cache::CacheStats,
}

/// The node caches' counts over the sources' snapshots (each cache counted once where sources
/// share it).
pub(crate) fn cache_stats(snapshots: &[&voxlake_table::Snapshot]) -> voxlake_io::cache::CacheStats {
    let mut seen: Vec<*const voxlake_io::cache::DiskCache> = Vec::new();
    let mut out = voxlake_io::cache::CacheStats::default();
    for cache in snapshots.iter().filter_map(|s| s.cache()) {
        if seen.contains(&std::sync::Arc::as_ptr(cache)) {
            continue;
        }
        seen.push(std::sync::Arc::as_ptr(cache));
        let s = cache.stats();
        out.hits += s.hits;
        out.misses += s.misses;
        out.bytes_read += s.bytes_read;
        out.bytes_written += s.bytes_written;
        out.corrupt += s.corrupt;
        out.evicted += s.evicted;
        out.log_hits += s.log_hits;
        out.log_misses += s.log_misses;
    }
    out
}
