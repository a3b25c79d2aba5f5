//! The async pipeline: footers ahead, row groups fetched with ranged reads and decoded on the
//! blocking pool, all within a memory budget in bytes.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use voxlake_format::{ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};

use crate::error::{StreamError, panic_message};
use crate::hooks::{Hooks, Stage};
use crate::order::{EpochOrder, Piece, RowSet, Uneven, Unit, deal, rows_per_rank, units_of};
use crate::plan::{Planner, Shard};
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
    /// The projected columns of the whole row group.
    pub batch: RecordBatch,
    /// The unit read: file, row group, and the rows of it this rank keeps.
    pub unit: Arc<Unit>,
    /// The unit's index in the rank's reading order for the epoch.
    pub position: u64,
    _permit: Arc<OwnedSemaphorePermit>,
}

impl RowGroupBatch {
    /// Index of the file in the snapshot.
    pub fn file(&self) -> usize {
        self.unit.file
    }

    /// The row group inside the file.
    pub fn row_group(&self) -> usize {
        self.unit.row_group
    }
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
    /// Units that took their budget share.
    reserved_units: AtomicU64,
    /// The budget (KiB) the head of the line waits for; 0 when none waits.
    waiting_kib: AtomicU64,
}

/// Where the budget stands: for telling a stalled pipeline from a slow one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetProgress {
    /// Units that took their budget share so far (the stream's and [`TableStream::read_unit`]'s).
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
/// let rows: u64 = row_groups.iter().map(|g| g.unit.kept()).sum();
/// assert_eq!(rows, stream.snapshot().num_rows().unwrap());
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
    uneven: Uneven,
    rows_per_file: Vec<u64>,
    columns: Vec<String>,
    hooks: Hooks,
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
    uneven: Uneven,
    seed: u64,
    shuffle: bool,
    interleave: usize,
    columns: Vec<String>,
    memory_budget: u64,
    prefetch: usize,
    root_store: Option<Arc<dyn object_store::ObjectStore>>,
    hooks: Hooks,
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

    /// The share of the table [`epoch`](TableStream::epoch) reads (default: all of it).
    pub fn with_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// Pad or drop the rows that do not divide evenly over the ranks (default pad).
    pub fn with_uneven(mut self, uneven: Uneven) -> Self {
        self.uneven = uneven;
        self
    }

    /// Calls `hook` at every stage (footer, fetch, decode) so tests can inject errors and
    /// panics (feature `fault-hooks`).
    #[cfg(feature = "fault-hooks")]
    pub fn with_fault_hook(mut self, hook: crate::hooks::FaultHook) -> Self {
        self.hooks = Hooks::new(hook);
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
        .await?
        .with_row_counts()
        .await?;
        Ok(self.build_on(Arc::new(snapshot)))
    }

    /// A stream over an already opened snapshot (several shards can share one). Files whose
    /// add action has no row count count as empty: open it with [`build`](Self::build), which
    /// reads their footers.
    pub fn build_on(self, snapshot: Arc<Snapshot>) -> TableStream {
        // Semaphore permits are counted in KiB so budgets above 2^32 bytes fit.
        let kib = self
            .memory_budget
            .div_ceil(1024)
            .min(Semaphore::MAX_PERMITS as u64) as usize;
        TableStream {
            inner: Arc::new(Inner {
                // Unshuffled means table order: read files one after the other.
                planner: Planner::new(self.seed, self.shuffle).with_interleave(if self.shuffle {
                    self.interleave
                } else {
                    1
                }),
                shard: self.shard,
                uneven: self.uneven,
                rows_per_file: snapshot
                    .files()
                    .iter()
                    .map(|f| f.rows.unwrap_or(0))
                    .collect(),
                snapshot,
                columns: self.columns,
                hooks: self.hooks,
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
            .field("uneven", &self.uneven)
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
            uneven: Uneven::Pad,
            seed: 0,
            shuffle: false,
            interleave: 4,
            columns: [ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN]
                .map(String::from)
                .to_vec(),
            memory_budget: 512 << 20,
            prefetch: 16,
            root_store: None,
            hooks: Hooks::default(),
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

    /// The planner (file and row-group order) of this stream.
    pub fn planner(&self) -> &Planner {
        &self.inner.planner
    }

    /// Rows per file, from the log (or the footer where the log has none).
    pub fn rows_per_file(&self) -> &[u64] {
        &self.inner.rows_per_file
    }

    /// The epoch's global row order.
    pub fn order(&self, epoch: u64) -> EpochOrder {
        EpochOrder::new(&self.inner.planner, &self.inner.rows_per_file, epoch)
    }

    /// Rows this shard reads per epoch: the same on every rank (see [`crate::order`]).
    pub fn rows_per_epoch(&self) -> u64 {
        let total = self.inner.rows_per_file.iter().sum();
        rows_per_rank(total, self.inner.shard.world_size(), self.inner.uneven)
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

    /// Where the budget stands.
    pub fn budget_progress(&self) -> BudgetProgress {
        let c = &self.inner.counters;
        BudgetProgress {
            reserved_units: c.reserved_units.load(Ordering::SeqCst),
            waiting_bytes: c.waiting_kib.load(Ordering::SeqCst) * 1024,
            available_bytes: self.inner.budget.available_permits() as u64 * 1024,
            budget_bytes: self.inner.budget_bytes,
        }
    }

    /// Each row group of file `file`: rows and budget shares (from its footer).
    pub async fn group_budgets(&self, file: usize) -> Result<Vec<GroupBudget>, StreamError> {
        let inner = &self.inner;
        let meta = inner.snapshot.reader_metadata(file).await?;
        let projection = inner.snapshot.projection(&meta, &inner.columns)?;
        Ok(meta
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| {
                let (compressed, uncompressed) = rg
                    .columns()
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| projection.leaf_included(*i))
                    .fold((0u64, 0u64), |(c, u), (_, col)| {
                        (
                            c + col.compressed_size().max(0) as u64,
                            u + col.uncompressed_size().max(0) as u64,
                        )
                    });
                GroupBudget {
                    rows: rg.num_rows().max(0) as u64,
                    held: uncompressed.max(1024),
                    peak: (compressed + uncompressed).max(1024),
                }
            })
            .collect())
    }

    /// The row groups of this shard for `epoch`, in reading order: the shard's span of the
    /// epoch's rows (see [`crate::order`]); each unit says which rows of its row group are
    /// the shard's.
    pub fn epoch(&self, epoch: u64) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let order = self.order(epoch);
        let all = RowSet::full(order.total());
        let shard = self.inner.shard;
        let pieces = deal(
            &order,
            &all,
            shard.world_size(),
            shard.rank(),
            self.inner.uneven,
        );
        self.pieces(epoch, pieces, 0)
    }

    /// The units of `pieces` (a span from [`crate::order::deal`]) in reading order, from the
    /// unit at `from` on: earlier units are skipped without being fetched (their files'
    /// footers are read: only footers tell a file's row groups).
    ///
    /// The pipeline runs in a task of its own, so it keeps prefetching while the consumer is
    /// busy; it must be called inside a tokio runtime. Dropping the stream stops the task. A
    /// panic in any of its stages is an error item, never the end of the stream.
    pub fn pieces(
        &self,
        epoch: u64,
        pieces: Vec<Piece>,
        from: u64,
    ) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let location = self.inner.snapshot.location().to_string();
        spawn_ahead(
            self.plan_stream(epoch, pieces, from),
            self.inner.prefetch,
            move |panic| StreamError::Panicked {
                location: location.clone(),
                stage: "fetch".into(),
                object: "the row-group pipeline".into(),
                message: panic,
            },
        )
    }

    /// Row counts of file `file`'s row groups, from its footer (read once); checked against
    /// the log's row count.
    pub async fn row_group_rows(&self, file: usize) -> Result<Vec<u64>, StreamError> {
        self.inner.row_group_rows(file).await
    }

    /// [`row_group_rows`](Self::row_group_rows) of several files, read concurrently.
    pub async fn footers(
        &self,
        files: impl IntoIterator<Item = usize>,
    ) -> Result<HashMap<usize, Vec<u64>>, StreamError> {
        let mut files: Vec<usize> = files.into_iter().collect();
        files.sort_unstable();
        files.dedup();
        futures::stream::iter(files)
            .map(|f| async move { Ok((f, self.row_group_rows(f).await?)) })
            .buffer_unordered(crate::READ_CONCURRENCY)
            .try_collect()
            .await
    }

    /// Reads one unit (its whole row group) within the budget; `position` is its place in
    /// the rank's reading order.
    pub async fn read_unit(&self, unit: Unit, position: u64) -> Result<RowGroupBatch, StreamError> {
        let inner = &self.inner;
        let (permit, projection) = inner.reserve(&unit).await?;
        inner
            .finish_read(Arc::new(unit), position, permit, projection)
            .await
    }

    fn plan_stream(
        &self,
        epoch: u64,
        pieces: Vec<Piece>,
        from: u64,
    ) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let inner = self.inner.clone();
        let location = inner.snapshot.location().to_string();

        // Footers, in plan order, a few files ahead, in a task of their own: the windows below
        // stop polling them while a window's row groups are read, and a footer fetched only then
        // would stall the pipeline at every window boundary (a round trip queued behind the
        // row-group reads in flight).
        let footers = {
            let inner = inner.clone();
            futures::stream::iter(pieces)
                .map(move |piece| {
                    let inner = inner.clone();
                    async move {
                        let rows = inner
                            .caught(Stage::Footer, piece.file, inner.row_group_rows(piece.file))
                            .await?;
                        Ok::<_, StreamError>(units_of(&inner.planner, &piece, &rows, epoch))
                    }
                })
                .buffered(FOOTERS_AHEAD)
                .boxed()
        };
        let footers = spawn_ahead(footers, FOOTERS_AHEAD, move |panic| StreamError::Panicked {
            location: location.clone(),
            stage: Stage::Footer.to_string(),
            object: "the footer reader".into(),
            message: panic,
        });
        // Windows of pieces → their units interleaved → numbered units.
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
            .filter(move |(position, _)| futures::future::ready(*position as u64 >= from))
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
                    let slot = ramp.slot().await?;
                    let file = unit.file;
                    let read = inner
                        .caught(
                            Stage::Fetch,
                            file,
                            inner.finish_read(Arc::new(unit), position, permit, projection),
                        )
                        .await?;
                    drop(slot);
                    ramp.grow();
                    Ok(read)
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
    /// Runs `work` on file `file`; a panic in it is an error naming the stage and the file.
    async fn caught<T>(
        &self,
        stage: Stage,
        file: usize,
        work: impl std::future::Future<Output = Result<T, StreamError>>,
    ) -> Result<T, StreamError> {
        AssertUnwindSafe(work)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                Err(StreamError::Panicked {
                    location: self.snapshot.location().to_string(),
                    stage: stage.to_string(),
                    object: self.snapshot.files()[file].path.clone(),
                    message: panic_message(panic.as_ref()),
                })
            })
    }

    /// Row counts of a file's row groups, from its footer, checked against the log.
    async fn row_group_rows(&self, file: usize) -> Result<Vec<u64>, StreamError> {
        let snapshot = &self.snapshot;
        let path = &snapshot.file(file)?.path;
        self.hooks
            .check(Stage::Footer, path)
            .map_err(StreamError::Internal)?;
        let meta = snapshot.reader_metadata(file).await?;
        let rows: Vec<u64> = meta
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .collect();
        let total: u64 = rows.iter().sum();
        if total != self.rows_per_file[file] {
            return Err(StreamError::Corrupt {
                location: snapshot.location().to_string(),
                file: path.clone(),
                reason: format!(
                    "the footer counts {total} rows, the Delta log {}",
                    self.rows_per_file[file]
                ),
            });
        }
        Ok(rows)
    }

    /// Fetches and decodes a reserved unit, then gives back the fetched bytes' budget.
    async fn finish_read(
        &self,
        unit: Arc<Unit>,
        position: u64,
        mut permit: OwnedSemaphorePermit,
        projection: ProjectionMask,
    ) -> Result<RowGroupBatch, StreamError> {
        let (batch, fetched) = self.read(&unit, projection).await?;
        // The fetched bytes are gone once decoded: give their share back.
        let fetched_kib = fetched.div_ceil(1024) as usize;
        let keep = permit.num_permits().saturating_sub(fetched_kib).max(1);
        drop(permit.split(permit.num_permits() - keep));
        Ok(RowGroupBatch {
            batch,
            unit,
            position,
            _permit: Arc::new(permit),
        })
    }

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
        let c = &self.counters;
        c.waiting_kib.store(u64::from(kib), Ordering::SeqCst);
        let permit = self.budget.clone().acquire_many_owned(kib).await;
        c.waiting_kib.store(0, Ordering::SeqCst);
        let permit = permit.map_err(|e| StreamError::Internal(e.to_string()))?;
        c.reserved_units.fetch_add(1, Ordering::SeqCst);
        c.budget_wait_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok((permit, projection))
    }

    /// Fetches and decodes a row group; returns it and the bytes fetched.
    async fn read(
        &self,
        unit: &Unit,
        projection: ProjectionMask,
    ) -> Result<(RecordBatch, u64), StreamError> {
        self.hooks
            .check(Stage::Fetch, &self.snapshot.files()[unit.file].path)
            .map_err(StreamError::Internal)?;
        let (batch, timings) = self
            .snapshot
            .read_row_group_hooked(unit.file, unit.row_group, projection, &self.hooks)
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
/// after the first error. A panic while polling `stream` becomes the error `on_panic(message)`
/// (never a silent end of the stream). Dropping the returned stream aborts the task. Must be
/// called inside a tokio runtime.
pub fn spawn_ahead<T: Send + 'static, E: Send + 'static>(
    stream: BoxStream<'static, Result<T, E>>,
    ahead: usize,
    on_panic: impl Fn(String) -> E + Send + 'static,
) -> BoxStream<'static, Result<T, E>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ahead.max(1));
    let task = tokio::spawn(async move {
        let mut stream = stream;
        loop {
            let item = match AssertUnwindSafe(stream.next()).catch_unwind().await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(panic) => Err(on_panic(panic_message(panic.as_ref()))),
            };
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
