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
use parquet::file::metadata::RowGroupMetaData;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::StreamError;
use crate::group::RowGroupBatch;
use crate::kept::Kept;
use crate::sources::Sources;
use crate::stats::{BudgetProgress, Counters, GroupBudget, StreamStats};
use voxlake_io::ahead::spawn_ahead;
use voxlake_io::inflight::{Metered, Slots};
use voxlake_io::panic_message;
use voxlake_plan::affinity::Affinity;
use voxlake_plan::draws::Draws;
use voxlake_plan::order::{EpochOrder, Piece, Uneven, Unit, deal, rows_per_rank, units_of};
use voxlake_plan::plan::{Planner, Shard};
use voxlake_table::hooks::{Hooks, Stage};
use voxlake_table::{Scan, TableError};

/// Footers read ahead of the row groups that need them.
const FOOTERS_AHEAD: usize = 16;

mod read;

use read::Obtained;

/// Streams the row groups of a snapshot for one shard, epoch by epoch.
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
/// let rows: u64 = row_groups.iter().map(|g| g.unit.drawn()).sum();
/// assert_eq!(rows, stream.scan().num_rows());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TableStream {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// The snapshots read: one table, or a mixture's sources.
    pub(crate) sources: Sources,
    pub(crate) planner: Planner,
    pub(crate) shard: Shard,
    /// The ranks' nodes, when each node keeps to its files (see `voxlake_plan::affinity`).
    pub(crate) affinity: Option<Affinity>,
    pub(crate) uneven: Uneven,
    pub(crate) rows_per_file: Vec<u64>,
    /// The columns read of each source's row groups.
    pub(crate) columns: Vec<Vec<String>>,
    pub(crate) hooks: Hooks,
    /// When rows are checked: on read here, or by the consumer (their checks handed out).
    pub(crate) verify: crate::Verify,
    pub(crate) budget: Arc<Semaphore>,
    pub(crate) budget_bytes: u64,
    /// Row-group reads in flight (see `depth`), and their most.
    pub(crate) slots: Arc<Slots>,
    pub(crate) max_in_flight: usize,
    pub(crate) counters: Counters,
    /// Row groups kept in the budget for the next epoch's reads of them.
    pub(crate) kept: Arc<Kept>,
}

impl TableStream {
    /// The scan read (of a mixture, the first source's: see [`sources`](Self::sources)); its
    /// snapshot is `scan().snapshot()`.
    pub fn scan(&self) -> &Arc<Scan> {
        &self.inner.sources.scans()[0]
    }

    /// The scans read, with the numbering of their files.
    pub fn sources(&self) -> &Sources {
        &self.inner.sources
    }

    /// The row-group budget in bytes ([`with_row_group_budget`](crate::StreamBuilder::with_row_group_budget)).
    pub fn row_group_budget(&self) -> u64 {
        self.inner.budget_bytes
    }

    /// The shard this stream reads.
    pub fn shard(&self) -> Shard {
        self.inner.shard
    }

    /// Rows per file, from the log (or the footer where the log has none).
    pub fn rows_per_file(&self) -> &[u64] {
        &self.inner.rows_per_file
    }

    /// The epoch's global row order.
    pub fn order(&self, epoch: u64) -> EpochOrder {
        match self.inner.affinity {
            Some(affinity) => EpochOrder::with_affinity(
                &self.inner.planner,
                &self.inner.rows_per_file,
                epoch,
                affinity,
                self.inner.uneven,
            ),
            None => EpochOrder::new(&self.inner.planner, &self.inner.rows_per_file, epoch),
        }
    }

    /// Rows this shard reads per epoch: the same on every rank (see [`voxlake_plan::order`]).
    pub fn rows_per_epoch(&self) -> u64 {
        let total = self.inner.rows_per_file.iter().sum();
        rows_per_rank(total, self.inner.shard.world_size(), self.inner.uneven)
    }

    /// What the pipeline has done so far.
    pub fn stats(&self) -> StreamStats {
        let c = &self.inner.counters;
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        let snapshots: Vec<&voxlake_table::Snapshot> = self
            .inner
            .sources
            .scans()
            .iter()
            .map(|s| s.snapshot().as_ref())
            .collect();
        StreamStats {
            row_groups: c.row_groups.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            fetch: ns(&c.fetch_ns),
            decode: ns(&c.decode_ns),
            budget_wait: ns(&c.budget_wait_ns),
            in_flight: self.inner.slots.measured(),
            read_latency: self.inner.slots.read_latency().unwrap_or_default(),
            store_bytes: snapshots.iter().map(|s| s.store_bytes_fetched()).sum(),
            reasked: snapshots.iter().map(|s| s.store_reads_reasked()).sum(),
            store_requests: snapshots.iter().map(|s| s.store_requests()).sum(),
            kept_hits: c.kept_hits.load(Ordering::Relaxed),
            cache: crate::stats::cache_stats(&snapshots),
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
        self.budgets_of(file, None).await
    }

    /// The budget shares of row groups `row_groups` of file `file` alone (a lookup's: not
    /// every row group of a file of thousands, at each take).
    pub async fn row_group_budgets(
        &self,
        file: usize,
        row_groups: &[usize],
    ) -> Result<Vec<GroupBudget>, StreamError> {
        self.budgets_of(file, Some(row_groups)).await
    }

    async fn budgets_of(
        &self,
        file: usize,
        row_groups: Option<&[usize]>,
    ) -> Result<Vec<GroupBudget>, StreamError> {
        let inner = &self.inner;
        let (source, scan, local) = inner.sources.locate(file);
        let meta = inner
            .caught(Stage::Footer, file, scan.reader_metadata(local))
            .await?;
        let projection = scan.snapshot().projection(&meta, &inner.columns[source])?;
        let groups = meta.metadata().row_groups();
        let budget = |rg| group_budget(rg, &projection, inner.sample_bytes());
        match row_groups {
            None => Ok(groups.iter().map(budget).collect()),
            Some(asked) => asked
                .iter()
                .map(|&g| {
                    groups.get(g).map(budget).ok_or_else(|| {
                        StreamError::Internal(format!(
                            "row group {g} of file #{file}, which has {}",
                            groups.len()
                        ))
                    })
                })
                .collect(),
        }
    }

    /// The row groups of this shard for `epoch`, in reading order: the shard's span of the
    /// epoch's rows (see [`voxlake_plan::order`]); each unit says which rows of its row group are
    /// the shard's.
    pub fn epoch(&self, epoch: u64) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let order = self.order(epoch);
        let all = Draws::full(order.total());
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

    /// The units of `pieces` (a span from [`voxlake_plan::order::deal`]) in reading order, from the
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
        let location = self.scan().snapshot().location().to_string();
        let ahead = spawn_ahead(
            self.plan_stream(epoch, pieces, from),
            self.inner.max_in_flight,
            move |panic| {
                StreamError::from(TableError::Panicked {
                    location: location.clone(),
                    stage: "fetch".into(),
                    object: "the row-group pipeline".into(),
                    message: panic,
                })
            },
        );
        // The consumer's pace sizes the reads in flight.
        Metered::new(ahead, self.inner.slots.clone()).boxed()
    }

    /// Row counts of file `file`'s row groups, from its footer (read once); checked against
    /// the log's row count.
    pub async fn row_group_rows(&self, file: usize) -> Result<Vec<u64>, StreamError> {
        self.inner.row_group_rows(file).await
    }

    /// [`row_group_rows`](Self::row_group_rows) of several files, read concurrently; a panic
    /// while reading one is [`TableError::Panicked`](voxlake_table::TableError::Panicked) naming its file.
    pub async fn footers(
        &self,
        files: impl IntoIterator<Item = usize>,
    ) -> Result<HashMap<usize, Vec<u64>>, StreamError> {
        let mut files: Vec<usize> = files.into_iter().collect();
        files.sort_unstable();
        files.dedup();
        let inner = &self.inner;
        futures::stream::iter(files)
            .map(|f| async move {
                let rows = inner
                    .caught(Stage::Footer, f, inner.row_group_rows(f))
                    .await?;
                Ok((f, rows))
            })
            .buffer_unordered(voxlake_table::READ_CONCURRENCY)
            .try_collect()
            .await
    }

    /// Reads one unit (its whole row group) within the budget; `position` is its place in
    /// the rank's reading order.
    pub async fn read_unit(&self, unit: Unit, position: u64) -> Result<RowGroupBatch, StreamError> {
        let inner = &self.inner;
        let unit = Arc::new(unit);
        let file = unit.file;
        match inner.reserve(&unit).await? {
            Obtained::Reserved(reserved) => {
                inner
                    .caught(
                        Stage::Fetch,
                        file,
                        inner.finish_read(unit, position, reserved),
                    )
                    .await
            }
            Obtained::Reused(reused) => inner.reuse(reused, unit, position).await,
        }
    }

    /// Rows `rows` (ascending, among those the unit's row group reads) within the budget:
    /// only their tensors fetched where the file's layout allows
    /// ([`Scan::read_rows_hooked`](voxlake_table::Scan::read_rows_hooked)), else the row
    /// group read whole ([`read_unit`](Self::read_unit)) and the rows copied out of it.
    pub async fn read_unit_rows(
        &self,
        unit: Unit,
        rows: &[u64],
        position: u64,
    ) -> Result<RowGroupBatch, StreamError> {
        let inner = &self.inner;
        let file = unit.file;
        let partial = inner.read_rows(unit.clone(), rows, position);
        match inner.caught(Stage::Fetch, file, partial).await? {
            Some(batch) => Ok(batch),
            None => self.read_unit(unit, position).await?.take(rows),
        }
    }

    fn plan_stream(
        &self,
        epoch: u64,
        pieces: Vec<Piece>,
        from: u64,
    ) -> BoxStream<'static, Result<RowGroupBatch, StreamError>> {
        let inner = self.inner.clone();
        let location = inner.sources.scans()[0].snapshot().location().to_string();

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
        let footers = spawn_ahead(footers, FOOTERS_AHEAD, move |panic| {
            StreamError::from(TableError::Panicked {
                location: location.clone(),
                stage: Stage::Footer.to_string(),
                object: "the footer reader".into(),
                message: panic,
            })
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
        // groups holding memory), then fetch + decode as many at a time as `slots` allows
        // (Little's law over the measured read time and consumer pace), order kept.
        let reserve = {
            let inner = inner.clone();
            units.and_then(move |(position, unit)| {
                let inner = inner.clone();
                async move {
                    let obtained = inner.reserve(&unit).await?;
                    Ok((position, unit, obtained))
                }
            })
        };
        let (slots, most) = (inner.slots.clone(), inner.max_in_flight);
        reserve
            .map_ok(move |(position, unit, obtained)| {
                let inner = inner.clone();
                let slots = slots.clone();
                async move {
                    let unit = Arc::new(unit);
                    let reserved = match obtained {
                        Obtained::Reserved(reserved) => reserved,
                        Obtained::Reused(reused) => {
                            return inner.reuse(reused, unit, position).await;
                        }
                    };
                    let slot = slots.acquire().await?;
                    let file = unit.file;
                    let read = inner
                        .caught(
                            Stage::Fetch,
                            file,
                            inner.finish_read(unit, position, reserved),
                        )
                        .await?;
                    slot.done();
                    Ok(read)
                }
            })
            .try_buffered(most)
            .boxed()
    }
}

/// A row group's rows and budget shares for `projection`: its projected chunks decoded
/// (`held`), and as fetched plus decoded (`peak`). `sample_bytes` is one sample's tensor in
/// voxlake's layout: a foreign encoding may decode to more than its chunks hold (an inflated
/// `np.savez_compressed` row), so rows × sample bytes bound `held` from below. Repeated
/// columns (Parquet LISTs: Spark's `array<float>`) decode each value's repetition and
/// definition levels (two `i16`s) before the values: 4 bytes per value more at the peak.
fn group_budget(
    rg: &RowGroupMetaData,
    projection: &ProjectionMask,
    sample_bytes: u64,
) -> GroupBudget {
    let (compressed, uncompressed, levels) = rg
        .columns()
        .iter()
        .enumerate()
        .filter(|(i, _)| projection.leaf_included(*i))
        .fold((0u64, 0u64, 0u64), |(c, u, l), (_, col)| {
            let repeated = col.column_descr().max_rep_level() > 0;
            (
                c + col.compressed_size().max(0) as u64,
                u + col.uncompressed_size().max(0) as u64,
                l + if repeated {
                    col.num_values().max(0) as u64 * 4
                } else {
                    0
                },
            )
        });
    let rows = rg.num_rows().max(0) as u64;
    let held = uncompressed.max(rows * sample_bytes).max(1024);
    GroupBudget {
        rows,
        held,
        peak: compressed + held + levels,
    }
}
