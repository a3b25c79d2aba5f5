//! [`StreamBuilder`]: a stream's settings, and opening it.

use std::sync::Arc;

use tokio::sync::Semaphore;
use voxlake_format::{CHECKSUM_COLUMN, ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};
use voxlake_table::{ScanOptions, Snapshot, TableOptions};

use crate::error::StreamError;
use crate::kept::Kept;
use crate::pipeline::{Inner, TableStream};
use crate::read_options::{ReadOptions, Verify};
use crate::sources::Sources;
use crate::stats::Counters;
use voxlake_io::depth::Depth;
use voxlake_io::inflight::Slots;
use voxlake_plan::affinity::Affinity;
use voxlake_plan::plan::{Planner, Shard};

/// Row-group reads in flight at the start (the loader's shuffle buffer waits for about 4 row
/// groups before its first batch).
const START_IN_FLIGHT: usize = 4;
/// The most row-group reads in flight on a remote store: each pays the store's latency (AWS's
/// CRT client keeps 64–256 parts in flight); the memory budget bounds them besides.
const REMOTE_IN_FLIGHT: usize = 64;
/// The most on a local disk, where a read is a mapping and a decode.
const LOCAL_IN_FLIGHT: usize = 16;

/// Configures and opens a [`TableStream`]: over a table it opens at `build()`
/// ([`TableStream::builder`]: the table settings, `with_version`, `with_filter`, …, are
/// setters of `StreamBuilder<AtLocation>` only), or over scans already made
/// ([`TableStream::over`]: opened with their own settings, which a builder cannot change).
#[derive(Clone)]
pub struct StreamBuilder<T = AtLocation> {
    /// What it reads.
    target: T,
    shard: Shard,
    /// The ranks' nodes, when each node's ranks keep to the same files every epoch.
    affinity: Option<Affinity>,
    /// What is read of each row group, and the uneven policy.
    read: ReadOptions,
    seed: u64,
    shuffle: bool,
    interleave: usize,
    memory_budget: u64,
    /// Row-group reads in flight (`None`: sized to the store, see `depth`).
    prefetch: Option<usize>,
}

/// A table by its location, opened by `build()` with the builder's table settings.
#[derive(Clone)]
pub struct AtLocation {
    location: String,
    /// How the table is opened.
    table: TableOptions,
    /// What is read of it.
    scan: ScanOptions,
}

impl std::fmt::Debug for AtLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtLocation")
            .field("location", &voxlake_io::redact(&self.location))
            .field("table", &self.table)
            .field("scan", &self.scan)
            .finish()
    }
}

/// Scans already made (one table's, or a mixture's [`Sources`]): `build()` opens nothing.
#[derive(Clone, Debug)]
pub struct OverSources(Sources);

impl StreamBuilder<AtLocation> {
    voxlake_table::table_options_setters!(target.table);
    voxlake_table::scan_options_setters!(target.scan);

    /// Opens the snapshot (a voxlake table's log only; another table's log or listing and its
    /// first footer) and makes its scan.
    pub async fn build(self) -> Result<TableStream, StreamError> {
        let AtLocation {
            location,
            table,
            scan,
        } = &self.target;
        let scan = Snapshot::builder(location)
            .with_options(table.clone())
            .build_scan(scan.clone())
            .await?;
        let sources = Sources::from(Arc::new(scan));
        Ok(self.with_target(OverSources(sources)).build())
    }
}

impl StreamBuilder<OverSources> {
    /// The stream over the scans (several shards can share them).
    pub fn build(self) -> TableStream {
        let sources = self.target.0;
        // Semaphore permits are counted in KiB so budgets above 2^32 bytes fit.
        let kib = self
            .memory_budget
            .div_ceil(1024)
            .min(Semaphore::MAX_PERMITS as u64) as usize;
        let (depth, max_in_flight) = match self.prefetch {
            Some(n) => (Depth::fixed(n), n),
            None if sources.scans().iter().any(|s| s.snapshot().is_remote()) => (
                Depth::new(START_IN_FLIGHT, REMOTE_IN_FLIGHT),
                REMOTE_IN_FLIGHT,
            ),
            None => (
                Depth::new(START_IN_FLIGHT, LOCAL_IN_FLIGHT),
                LOCAL_IN_FLIGHT,
            ),
        };
        let verify = self.read.verify != Verify::Off;
        let columns = sources
            .scans()
            .iter()
            .map(|scan| with_checksum(scan.columns().to_vec(), verify, scan.snapshot()))
            .collect();
        TableStream {
            inner: Arc::new(Inner {
                // Unshuffled means table order: read files one after the other.
                planner: Planner::new(self.seed, self.shuffle).with_interleave(if self.shuffle {
                    self.interleave
                } else {
                    1
                }),
                shard: self.shard,
                affinity: self.affinity,
                uneven: self.read.uneven,
                rows_per_file: sources
                    .scans()
                    .iter()
                    .flat_map(|s| s.files().iter().map(|f| f.rows().unwrap_or(0)))
                    .collect(),
                sources,
                columns,
                hooks: self.read.hooks,
                verify: self.read.verify,
                budget: Arc::new(Semaphore::new(kib)),
                budget_bytes: kib as u64 * 1024,
                slots: Slots::new(depth),
                max_in_flight,
                counters: Counters::default(),
                kept: Arc::new(Kept::new(self.read.keep)),
            }),
        }
    }
}

impl<T> StreamBuilder<T> {
    crate::read_options_setters!(read);

    /// The same settings over another target.
    fn with_target<U>(self, target: U) -> StreamBuilder<U> {
        StreamBuilder {
            target,
            shard: self.shard,
            affinity: self.affinity,
            read: self.read,
            seed: self.seed,
            shuffle: self.shuffle,
            interleave: self.interleave,
            memory_budget: self.memory_budget,
            prefetch: self.prefetch,
        }
    }

    /// All the read settings at once (see [`ReadOptions`]).
    pub fn with_read_options(mut self, read: ReadOptions) -> Self {
        self.read = read;
        self
    }

    /// The share of the table [`epoch`](TableStream::epoch) reads (default: all of it).
    pub fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// Keep each node's ranks on the same files every epoch, so that a node's cache holds
    /// what its next epoch reads ([`voxlake_plan::affinity`]; only when shuffling). The affinity's
    /// world must be the shard's (the loader checks both against the launcher's).
    pub fn with_affinity(mut self, affinity: Option<Affinity>) -> Self {
        self.affinity = affinity;
        self
    }

    /// The seed of the per-epoch shuffle (default 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Shuffle files and row groups every epoch (default off: table order).
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Files whose row groups are read round-robin when shuffling (default 4).
    pub fn with_interleave(mut self, files: usize) -> Self {
        self.interleave = files;
        self
    }

    /// Bytes for row groups (default 1 GiB): those fetched and decoded not yet released, and
    /// those kept between epochs. The stream's whole share of memory; the loader's
    /// `with_memory_budget` covers everything it holds and gives the stream what its batches
    /// leave.
    pub fn with_row_group_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes.max(1);
        self
    }

    /// Row groups fetched and decoded at once, always `row_groups`. Default: sized to the
    /// store as it runs ([`voxlake_io::depth`]: Little's law over the measured read time and the
    /// consumer's pace, no more than the store's bandwidth-delay product, from 4 up to 64 for a
    /// remote table, 16 for a local one). Either way the
    /// memory budget bounds them (each read holds its budget share).
    pub fn with_row_group_prefetch(mut self, row_groups: usize) -> Self {
        self.prefetch = Some(row_groups.max(1));
        self
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for StreamBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only (`TableOptions`' Debug).
        f.debug_struct("StreamBuilder")
            .field("target", &self.target)
            .field("shard", &self.shard)
            .field("affinity", &self.affinity)
            .field("read", &self.read)
            .field("seed", &self.seed)
            .field("shuffle", &self.shuffle)
            .field("memory_budget", &self.memory_budget)
            .field("prefetch", &self.prefetch)
            .finish()
    }
}

impl TableStream {
    /// A builder for the table at `location` (a local path or URL), opened by `build()`.
    pub fn builder(location: impl Into<String>) -> StreamBuilder<AtLocation> {
        StreamBuilder::new(AtLocation {
            location: location.into(),
            table: TableOptions::default(),
            scan: ScanOptions::default(),
        })
    }

    /// A builder for a stream over scans already made: one (`Arc<Scan>`), or a mixture's
    /// [`Sources`]. Their table and scan settings are those they were made with.
    pub fn over(sources: impl Into<Sources>) -> StreamBuilder<OverSources> {
        StreamBuilder::new(OverSources(sources.into()))
    }
}

impl<T> StreamBuilder<T> {
    fn new(target: T) -> Self {
        StreamBuilder {
            target,
            shard: Shard::default(),
            affinity: None,
            read: ReadOptions::default(),
            seed: 0,
            shuffle: false,
            interleave: 4,
            memory_budget: 1 << 30,
            prefetch: None,
        }
    }
}

/// `columns`, with the checksum column when verifying and whole rows are read: id, label and
/// every field the table stores (the checksum covers them all).
fn with_checksum(mut columns: Vec<String>, verify: bool, snapshot: &Snapshot) -> Vec<String> {
    let stored: Vec<&str> = snapshot
        .stored_sample()
        .map(|s| s.fields().iter().map(|f| f.name.as_str()).collect())
        .unwrap_or_else(|| vec![TENSOR_COLUMN]);
    let whole = [ID_COLUMN, LABEL_COLUMN]
        .iter()
        .chain(stored.iter())
        .all(|c| columns.iter().any(|n| n == c));
    if verify && whole && !columns.iter().any(|c| c == CHECKSUM_COLUMN) {
        columns.push(CHECKSUM_COLUMN.to_string());
    }
    columns
}
