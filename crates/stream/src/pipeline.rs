//! The async pipeline: footers ahead, row groups fetched with ranged reads and decoded on the
//! blocking pool, all within a memory budget in bytes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use voxlake_format::{ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};

use crate::error::StreamError;
use crate::plan::{Cursor, Planner, Shard, Unit};
use crate::snapshot::Snapshot;

/// Footers read ahead of the row groups that need them.
const FOOTERS_AHEAD: usize = 16;
/// Reads in flight at the start of a stream, before the slow start grows them to the prefetch
/// depth (the loader's shuffle buffer waits for 4 row groups before its first batch).
const RAMP_START: usize = 4;

/// A decoded row group, with its share of the memory budget: the budget is given back when
/// the last clone of this value is dropped.
#[derive(Debug, Clone)]
pub struct RowGroupBatch {
    /// The projected columns of the row group.
    pub batch: RecordBatch,
    /// Index of the file in the snapshot.
    pub file: usize,
    /// The row group inside the file.
    pub row_group: usize,
    /// The stream position after this row group.
    pub cursor: Cursor,
    _permit: Arc<OwnedSemaphorePermit>,
}

/// Counters of the pipeline's work (monotonic; read with [`TableStream::stats`]).
#[derive(Debug, Default)]
struct Counters {
    row_groups: AtomicU64,
    rows: AtomicU64,
    bytes: AtomicU64,
    fetch_ns: AtomicU64,
    decode_ns: AtomicU64,
    budget_wait_ns: AtomicU64,
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
}

/// Streams the row groups of a pinned snapshot for one shard, epoch by epoch.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let data = voxlake_compact::synth::generate(dir.path(), 10, 1)?;
/// # let table = dir.path().join("table").to_string_lossy().into_owned();
/// # voxlake_compact::Compactor::new(&table).convert(&data.cubes.to_string_lossy()).await?;
/// use futures::TryStreamExt;
/// use voxlake_stream::TableStream;
///
/// let stream = TableStream::builder(&table).with_shuffle(true).with_seed(7).build().await?;
/// let row_groups: Vec<_> = stream.epoch(0).try_collect().await?;
/// let rows: usize = row_groups.iter().map(|g| g.batch.num_rows()).sum();
/// assert_eq!(rows as u64, stream.snapshot().num_rows().unwrap());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TableStream {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    snapshot: Arc<Snapshot>,
    planner: Planner,
    shard: Shard,
    columns: Vec<String>,
    budget: Arc<Semaphore>,
    budget_bytes: u64,
    prefetch: usize,
    counters: Counters,
}

/// Configures and opens a [`TableStream`].
#[derive(Clone)]
pub struct StreamBuilder {
    location: String,
    storage_options: HashMap<String, String>,
    version: Option<u64>,
    shard: Shard,
    seed: u64,
    shuffle: bool,
    interleave: usize,
    columns: Vec<String>,
    memory_budget: u64,
    prefetch: usize,
    root_store: Option<Arc<dyn object_store::ObjectStore>>,
}

impl StreamBuilder {
    /// Reads through this store instead of one built from the location and options: `/` of
    /// `store` is the root of the store the location names (see [`Snapshot::open_with_store`]).
    pub fn with_object_store(mut self, store: Arc<dyn object_store::ObjectStore>) -> Self {
        self.root_store = Some(store);
        self
    }

    /// Storage settings on top of the standard environment variables.
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// Pins the table version (default: the latest at open).
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = Some(version);
        self
    }

    /// The share of the table to read (default: all of it).
    pub fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
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

    /// Columns to read (default `id`, `label`, `tensor`): only their byte ranges are fetched.
    pub fn with_columns(mut self, columns: Vec<String>) -> Self {
        self.columns = columns;
        self
    }

    /// Bytes that fetched and decoded row groups not yet released may hold (default 512 MiB).
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes.max(1);
        self
    }

    /// Row groups fetched and decoded at once (default 16, reached by a slow start from 4). Each
    /// request pays the store's latency: enough in flight keep the store busy meanwhile; the
    /// memory budget bounds them whatever the depth.
    pub fn with_prefetch(mut self, row_groups: usize) -> Self {
        self.prefetch = row_groups.max(1);
        self
    }

    /// Opens the snapshot (the log only: no listing, no footer yet).
    pub async fn build(self) -> Result<TableStream, StreamError> {
        let snapshot = Snapshot::open_with_store(
            &self.location,
            &self.storage_options,
            self.version,
            self.root_store.clone(),
        )
        .await?;
        Ok(self.build_on(Arc::new(snapshot)))
    }

    /// A stream over an already opened snapshot (several shards can share one).
    pub fn build_on(self, snapshot: Arc<Snapshot>) -> TableStream {
        // Semaphore permits are counted in KiB so budgets above 2^32 bytes fit.
        let kib = self
            .memory_budget
            .div_ceil(1024)
            .min(Semaphore::MAX_PERMITS as u64) as usize;
        TableStream {
            inner: Arc::new(Inner {
                snapshot,
                // Unshuffled means table order: read files one after the other.
                planner: Planner::new(self.seed, self.shuffle).with_interleave(if self.shuffle {
                    self.interleave
                } else {
                    1
                }),
                shard: self.shard,
                columns: self.columns,
                budget: Arc::new(Semaphore::new(kib)),
                budget_bytes: kib as u64 * 1024,
                prefetch: self.prefetch,
                counters: Counters::default(),
            }),
        }
    }
}

impl std::fmt::Debug for StreamBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only.
        f.debug_struct("StreamBuilder")
            .field("location", &crate::redact(&self.location))
            .field(
                "storage_option_keys",
                &self.storage_options.keys().collect::<Vec<_>>(),
            )
            .field("version", &self.version)
            .field("shard", &self.shard)
            .field("seed", &self.seed)
            .field("shuffle", &self.shuffle)
            .field("columns", &self.columns)
            .field("memory_budget", &self.memory_budget)
            .field("prefetch", &self.prefetch)
            .field("custom_store", &self.root_store.is_some())
            .finish()
    }
}

impl TableStream {
    /// A builder for the table at `location` (a local path or URL).
    pub fn builder(location: impl Into<String>) -> StreamBuilder {
        StreamBuilder {
            location: location.into(),
            storage_options: HashMap::new(),
            version: None,
            shard: Shard::default(),
            seed: 0,
            shuffle: false,
            interleave: 4,
            columns: [ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN]
                .map(String::from)
                .to_vec(),
            memory_budget: 512 << 20,
            prefetch: 16,
            root_store: None,
        }
    }

    /// The pinned snapshot.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.inner.snapshot
    }

    /// The memory budget in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.inner.budget_bytes
    }

    /// The shard this stream reads.
    pub fn shard(&self) -> Shard {
        self.inner.shard
    }

    /// Rows this shard reads in epoch 0 (from the log's row counts, or sizes if missing).
    pub fn rows_per_epoch(&self) -> u64 {
        let weights = self.inner.snapshot.plan_weights();
        self.inner
            .planner
            .files(&weights, self.inner.shard, 0)
            .iter()
            .map(|&f| weights[f])
            .sum()
    }

    /// What the pipeline has done so far.
    pub fn stats(&self) -> StreamStats {
        let c = &self.inner.counters;
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        StreamStats {
            row_groups: c.row_groups.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            fetch: ns(&c.fetch_ns),
            decode: ns(&c.decode_ns),
            budget_wait: ns(&c.budget_wait_ns),
        }
    }

    /// The row groups of this shard for `epoch`, in plan order.
    pub fn epoch(&self, epoch: u64) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        self.resume(Cursor { epoch, position: 0 })
    }

    /// The rest of an epoch from `cursor`: the first `cursor.position` row groups of the plan
    /// are skipped without being fetched (their files' footers are read: the plan of an epoch
    /// is made of row groups, which only the footers tell).
    ///
    /// The pipeline runs in a task of its own, so it keeps prefetching while the consumer is
    /// busy; it must be called inside a tokio runtime. Dropping the stream stops the task.
    pub fn resume(&self, cursor: Cursor) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        spawn_ahead(self.plan_stream(cursor), self.inner.prefetch)
    }

    fn plan_stream(
        &self,
        cursor: Cursor,
    ) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let inner = self.inner.clone();
        let weights = inner.snapshot.plan_weights();
        let files = inner.planner.files(&weights, inner.shard, cursor.epoch);
        let epoch = cursor.epoch;

        // Footers, in plan order, a few files ahead, in a task of their own: the windows below
        // stop polling them while a window's row groups are read, and a footer fetched only then
        // would stall the pipeline at every window boundary (a round trip queued behind the
        // row-group reads in flight).
        let footers = {
            let inner = inner.clone();
            futures::stream::iter(files)
                .map(move |file| {
                    let inner = inner.clone();
                    async move {
                        let meta = inner.snapshot.reader_metadata(file).await?;
                        let rows: Vec<u64> = meta
                            .metadata()
                            .row_groups()
                            .iter()
                            .map(|rg| rg.num_rows() as u64)
                            .collect();
                        Ok::<_, StreamError>(inner.planner.row_groups(file, &rows, epoch))
                    }
                })
                .buffered(FOOTERS_AHEAD)
                .boxed()
        };
        let footers = spawn_ahead(footers, FOOTERS_AHEAD);
        // Windows of files → their row groups interleaved → numbered units.
        let width = inner.planner.interleave_width();
        let planner = inner.planner.clone();
        let units = footers
            .try_chunks(width)
            .map_err(|e| e.1)
            .map_ok(move |window| {
                futures::stream::iter(planner.interleave(window).into_iter().map(Ok))
            })
            .try_flatten()
            .enumerate()
            .filter(move |(position, _)| {
                futures::future::ready(*position as u64 >= cursor.position)
            })
            .map(|(position, unit)| unit.map(|u| (position as u64, u)));

        // Budget taken in plan order (so the head of the line never waits behind later row
        // groups holding memory), then fetch + decode `prefetch` at a time, order kept.
        let reserve = {
            let inner = inner.clone();
            units.and_then(move |(position, unit)| {
                let inner = inner.clone();
                async move {
                    let (permit, projection) = inner.reserve(&unit).await?;
                    Ok((position, unit, permit, projection))
                }
            })
        };
        let prefetch = inner.prefetch;
        // Slow start: RAMP_START reads at once, one more after each completed read, up to
        // `prefetch`. Reads share the store's bandwidth, so the first row groups (the ones the
        // first batch waits for) arrive sooner than with `prefetch` reads all started at once.
        let ramp = Arc::new(Ramp::new(prefetch));
        reserve
            .map_ok(move |(position, unit, permit, projection)| {
                let inner = inner.clone();
                let ramp = ramp.clone();
                async move {
                    let mut permit = permit;
                    let slot = ramp.slot().await?;
                    let (batch, fetched) = inner.read(&unit, projection).await?;
                    drop(slot);
                    ramp.grow();
                    // The fetched bytes are gone once decoded: give their share back.
                    let fetched_kib = fetched.div_ceil(1024) as usize;
                    let keep = permit.num_permits().saturating_sub(fetched_kib).max(1);
                    drop(permit.split(permit.num_permits() - keep));
                    Ok(RowGroupBatch {
                        batch,
                        file: unit.file,
                        row_group: unit.row_group,
                        cursor: Cursor {
                            epoch,
                            position: position + 1,
                        },
                        _permit: Arc::new(permit),
                    })
                }
            })
            .try_buffered(prefetch)
            .boxed()
    }
}

/// Reads in flight: a slow start from [`RAMP_START`] up to the prefetch depth.
#[derive(Debug)]
struct Ramp {
    slots: Arc<Semaphore>,
    granted: std::sync::atomic::AtomicUsize,
    max: usize,
}

impl Ramp {
    fn new(max: usize) -> Self {
        let start = RAMP_START.min(max);
        Ramp {
            slots: Arc::new(Semaphore::new(start)),
            granted: start.into(),
            max,
        }
    }

    async fn slot(&self) -> Result<OwnedSemaphorePermit, StreamError> {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StreamError::Internal(e.to_string()))
    }

    /// One more read may run at once, until `max`.
    fn grow(&self) {
        let more = self
            .granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                (g < self.max).then_some(g + 1)
            })
            .is_ok();
        if more {
            self.slots.add_permits(1);
        }
    }
}

impl Inner {
    /// Takes this row group's share of the budget: its projected chunks as fetched plus as
    /// decoded, capped at the whole budget so one large row group cannot wait forever. Returns
    /// the permit and the projection, which the read reuses.
    async fn reserve(
        &self,
        unit: &Unit,
    ) -> Result<(OwnedSemaphorePermit, ProjectionMask), StreamError> {
        let meta = self.snapshot.reader_metadata(unit.file).await?;
        let projection = self.snapshot.projection(&meta, &self.columns)?;
        let rg = meta.metadata().row_group(unit.row_group);
        let bytes: i64 = rg
            .columns()
            .iter()
            .enumerate()
            .filter(|(i, _)| projection.leaf_included(*i))
            .map(|(_, c)| c.compressed_size() + c.uncompressed_size())
            .sum();
        let kib = (bytes.max(0) as u64).div_ceil(1024).max(1);
        let kib = kib.min(self.budget_bytes / 1024).max(1) as u32;
        let start = Instant::now();
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(kib)
            .await
            .map_err(|e| StreamError::Internal(e.to_string()))?;
        self.counters
            .budget_wait_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok((permit, projection))
    }

    /// Fetches and decodes a row group; returns it and the bytes fetched.
    async fn read(
        &self,
        unit: &Unit,
        projection: ProjectionMask,
    ) -> Result<(RecordBatch, u64), StreamError> {
        let (batch, timings) = self
            .snapshot
            .read_row_group_timed(unit.file, unit.row_group, projection)
            .await?;
        let c = &self.counters;
        c.fetch_ns
            .fetch_add(timings.fetch.as_nanos() as u64, Ordering::Relaxed);
        c.decode_ns
            .fetch_add(timings.decode.as_nanos() as u64, Ordering::Relaxed);
        c.bytes.fetch_add(timings.bytes, Ordering::Relaxed);
        c.row_groups.fetch_add(1, Ordering::Relaxed);
        c.rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        Ok((batch, timings.bytes))
    }
}

/// Aborts a spawned task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Drives `stream` in a task of its own, up to `ahead` items ahead of the consumer, and stops
/// after the first error. Dropping the returned stream aborts the task. Must be called inside a
/// tokio runtime.
pub fn spawn_ahead<T: Send + 'static, E: Send + 'static>(
    stream: BoxStream<'static, Result<T, E>>,
    ahead: usize,
) -> BoxStream<'static, Result<T, E>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ahead.max(1));
    let task = tokio::spawn(async move {
        let mut stream = stream;
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    futures::stream::unfold((rx, AbortOnDrop(task)), |(mut rx, task)| async move {
        rx.recv().await.map(|item| (item, (rx, task)))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ramp_starts_at_four_and_grows_by_one_per_read_to_the_depth() {
        let ramp = Ramp::new(16);
        assert_eq!(ramp.slots.available_permits(), RAMP_START);
        for grown in 1..=12 {
            ramp.grow();
            assert_eq!(ramp.slots.available_permits(), RAMP_START + grown);
        }
        ramp.grow();
        assert_eq!(ramp.slots.available_permits(), 16, "never past the depth");
        // A depth below the start is the depth from the start.
        let shallow = Ramp::new(2);
        shallow.grow();
        assert_eq!(shallow.slots.available_permits(), 2);
    }
}
