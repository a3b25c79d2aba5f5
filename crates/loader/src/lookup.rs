//! [`Lookup`]: a table's rows by their positions or ids, as the loader's [`Batch`]es — what a
//! map-style dataset (any torch `Sampler`) reads. The version is the builder's, fixed when it
//! opens; the rows are numbered `0..len()` in the order the version fixes (the scan's
//! positions: `voxlake_table::Scan::take`). Only the row groups holding an asked row are read,
//! through the stream's reads (the memory budget, the node cache, the checksums); of a row
//! group asked for few of its rows, only those rows' tensors, where the file's layout allows
//! (`voxlake_table::Scan::read_rows_hooked`). The batch is assembled as the loader assembles
//! one (its checks, transforms and copy kernels).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use voxlake_format::SampleSpec;
use voxlake_stream::{StreamError, TableStream};
use voxlake_table::{RowIndex, TableError};

use crate::assemble::{Assembler, Row};
use crate::counters::Counters;
use crate::{Batch, LoaderError, LoaderStats};

/// A table's rows by position or id, as [`Batch`]es (see the module docs); made by
/// [`LoaderBuilder::build_lookup`](crate::LoaderBuilder::build_lookup).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let data = voxlake_compact::synth::generate(dir.path(), 10, 1)?;
/// # let table = dir.path().join("table").to_string_lossy().into_owned();
/// # tokio::runtime::Runtime::new()?.block_on(
/// #     voxlake_compact::Compactor::new(&table).with_labels(data.labels.to_string_lossy())
/// #         .convert(&data.cubes.to_string_lossy()))?;
/// use voxlake_loader::Loader;
///
/// let rows = Loader::builder(&table).build_lookup()?;
/// assert_eq!(rows.len(), 10);
/// let batch = rows.take(&[7, 0, 7])?;
/// assert_eq!(batch.tensors.shape(), &[3, 30, 30, 10, 10]);
/// assert_eq!(batch.ids[0], batch.ids[2]);
/// let again = rows.take_ids(&[batch.ids[1].as_str()])?;
/// assert_eq!(again.tensors, rows.take(&[0])?.tensors);
/// # Ok(())
/// # }
/// ```
pub struct Lookup {
    // Dropped first: the stream's tasks end with the runtime below.
    stream: TableStream,
    assembler: Assembler,
    /// `starts[i]`: the position of file i's first row; last, the rows.
    starts: Vec<u64>,
    /// The ids by position, made at the first lookup by id.
    index: Mutex<Option<Arc<RowIndex>>>,
    /// A bricked table's volumes, read at the first lookup of a patch.
    volumes: Mutex<Option<Arc<voxlake_table::Volumes>>>,
    /// Of a split, the scan positions of its rows (ascending): position `i` of the lookup is
    /// `rows[i]` of the scan.
    rows: Option<Vec<u64>>,
    epoch: AtomicU64,
    /// One sample's tensor bytes (the larger of the table's and the transforms' output).
    sample_bytes: u64,
    counters: Arc<Counters>,
    started: Instant,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookup")
            .field("table", &self.stream.scan().snapshot().location())
            .field("version", &self.version())
            .field("rows", &self.len())
            .finish()
    }
}

impl Lookup {
    pub(crate) fn new(
        stream: TableStream,
        assembler: Assembler,
        sample_bytes: u64,
        counters: Arc<Counters>,
        runtime: tokio::runtime::Runtime,
    ) -> Lookup {
        let mut starts = Vec::with_capacity(stream.rows_per_file().len() + 1);
        let mut at = 0u64;
        for &rows in stream.rows_per_file() {
            starts.push(at);
            at += rows;
        }
        starts.push(at);
        Lookup {
            stream,
            assembler,
            starts,
            index: Mutex::default(),
            volumes: Mutex::default(),
            rows: None,
            epoch: AtomicU64::new(0),
            sample_bytes,
            counters,
            started: Instant::now(),
            runtime: Some(runtime),
        }
    }

    /// The stream the lookup reads through.
    pub(crate) fn stream(&self) -> &TableStream {
        &self.stream
    }

    /// Bytes of one sample's tensors.
    pub(crate) fn sample_bytes(&self) -> u64 {
        self.sample_bytes
    }

    /// The lookup's counters.
    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Rows of the version (those the filter selects; of a split, its rows).
    pub fn len(&self) -> u64 {
        match &self.rows {
            Some(rows) => rows.len() as u64,
            None => self.starts.last().copied().unwrap_or(0),
        }
    }

    /// Keeps only the rows of `split` (by their ids: the table's id column).
    pub(crate) fn keep_split(
        &mut self,
        split: &voxlake_plan::split::Split,
    ) -> Result<(), LoaderError> {
        let snapshot = self.stream.scan().snapshot();
        if snapshot.columns().id.is_none() {
            return Err(LoaderError::Config(format!(
                "{} has no id column: a split needs a stable id per row (name it with the id column option)",
                snapshot.location()
            )));
        }
        let index = self.ids()?;
        let rows = index
            .ids()
            .enumerate()
            .filter(|(_, id)| split.contains(id))
            .map(|(p, _)| p as u64)
            .collect();
        self.rows = Some(rows);
        Ok(())
    }

    /// The scan's positions of the lookup's `positions` (a split's rows); a position past
    /// [`len`](Self::len) is [`TableError::NoRow`].
    fn scan_positions(&self, positions: &[u64]) -> Result<Vec<u64>, LoaderError> {
        let Some(rows) = &self.rows else {
            return Ok(positions.to_vec());
        };
        positions
            .iter()
            .map(|&p| {
                rows.get(p as usize).copied().ok_or_else(|| {
                    let snapshot = self.stream.scan().snapshot();
                    LoaderError::Stream(StreamError::Table(TableError::NoRow {
                        location: snapshot.location().to_string(),
                        position: p,
                        rows: rows.len() as u64,
                        version: snapshot.version(),
                    }))
                })
            })
            .collect()
    }

    /// Whether the version has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table version read.
    pub fn version(&self) -> u64 {
        self.stream.scan().snapshot().version()
    }

    /// The samples handed out (after the transforms).
    pub fn spec(&self) -> &SampleSpec {
        &self.assembler.spec
    }

    /// The table's label column, if it has one, and whether it may be null (as
    /// [`Loader::label_column`](crate::Loader::label_column)).
    pub fn label_column(&self) -> Option<(&str, bool)> {
        crate::open::label_column(&self.stream)
    }

    /// Takes a batch's first field back for a later take's (as
    /// [`Loader::recycler`](crate::Loader::recycler)).
    pub fn recycler(&self) -> crate::Recycler {
        crate::Recycler::new(
            self.assembler.recycled.clone(),
            crate::builder::RECYCLED_SPARES,
        )
    }

    /// The epoch the transforms are seeded with (as a sampler's `set_epoch`): each sample's
    /// generator derives from the seed, this epoch and its id, a batch transform's from the
    /// seed, this epoch and the batch's first position.
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// The rows at `positions` (each below [`len`](Self::len); a position may repeat), in the
    /// order asked, as one batch: the batch's `index` is its first position. A position past
    /// the rows is [`TableError::NoRow`] before anything is read; rows that the memory budget
    /// cannot hold at once are a [`LoaderError::Config`] (take fewer at a time).
    pub fn take(&self, positions: &[u64]) -> Result<Batch, LoaderError> {
        let positions = self.scan_positions(positions)?;
        self.on_runtime(self.take_async(&positions))
    }

    /// The rows of `ids`, in the order asked, as [`take`](Self::take) gives them. The first
    /// lookup by id reads the id column of every file once ([`ids`](Self::ids)); an id the
    /// version has no (selected) row of is [`TableError::NoId`].
    pub fn take_ids(&self, ids: &[&str]) -> Result<Batch, LoaderError> {
        let positions = self.positions(ids)?;
        self.take(&positions)
    }

    /// The position of each of `ids`; [`TableError::NoId`] for the first the version lacks.
    pub fn positions(&self, ids: &[&str]) -> Result<Vec<u64>, LoaderError> {
        let index = self.ids()?;
        let scan = self.stream.scan();
        ids.iter()
            .map(|&id| {
                let at = index.position(id).and_then(|p| match &self.rows {
                    Some(rows) => rows.binary_search(&p).ok().map(|i| i as u64),
                    None => Some(p),
                });
                at.ok_or_else(|| {
                    LoaderError::Stream(StreamError::Table(TableError::NoId {
                        location: scan.snapshot().location().to_string(),
                        id: id.to_string(),
                        version: scan.snapshot().version(),
                    }))
                })
            })
            .collect()
    }

    /// The ids in the lookup's position order (of a split, its rows' alone).
    pub fn id_list(&self) -> Result<Vec<String>, LoaderError> {
        let index = self.ids()?;
        Ok(match &self.rows {
            Some(rows) => rows
                .iter()
                .filter_map(|&p| index.id(p).map(str::to_string))
                .collect(),
            None => index.ids().map(str::to_string).collect(),
        })
    }

    /// The version's ids by scan position, every row's (`voxlake_table::Scan::row_index`), read
    /// once: of a split, [`id_list`](Self::id_list) gives its rows' in the lookup's order.
    pub fn ids(&self) -> Result<Arc<RowIndex>, LoaderError> {
        let mut index = self
            .index
            .lock()
            .map_err(|_| LoaderError::Internal("the row index's lock".into()))?;
        if let Some(made) = index.as_ref() {
            return Ok(made.clone());
        }
        let scan = self.stream.scan().clone();
        let made = Arc::new(self.on_runtime(async move {
            scan.row_index()
                .await
                .map_err(|e| LoaderError::Stream(e.into()))
        })?);
        *index = Some(made.clone());
        Ok(made)
    }

    /// What the lookups have done so far: the samples and batches handed out, the time
    /// assembling them, and the stream's reads (`stream.bytes`: bytes of column chunks fetched).
    pub fn stats(&self) -> LoaderStats {
        self.counters
            .stats(self.started.elapsed(), self.stream.stats())
    }

    /// Ends the lookup's threads, waiting for them (a process that forks after this hands its
    /// child none: `voxlake_loader::live_threads`).
    pub fn close(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // The node cache's entries written in the background (the row index, rows read)
            // in place first: the runtime's end drops the writes not yet begun.
            if let Some(cache) = self.stream.scan().snapshot().cache().cloned() {
                let flush = || runtime.block_on(cache.flush());
                match tokio::runtime::Handle::try_current() {
                    Err(_) => flush(),
                    Ok(_) => std::thread::scope(|s| {
                        s.spawn(flush);
                    }),
                }
            }
            runtime.shutdown_timeout(crate::loader::THREADS_WAIT);
        }
    }

    /// Runs `work` on the lookup's runtime, from the caller's thread (from a thread of its
    /// own where the caller is in another runtime, which cannot block on this one).
    fn on_runtime<T: Send>(
        &self,
        work: impl std::future::Future<Output = Result<T, LoaderError>> + Send,
    ) -> Result<T, LoaderError> {
        crate::fork::check()?;
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| LoaderError::Internal("the lookup was closed".into()))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return runtime.block_on(work);
        }
        std::thread::scope(|s| s.spawn(|| runtime.block_on(work)).join()).map_err(|panic| {
            LoaderError::Panicked {
                stage: "lookup".into(),
                object: self.stream.scan().snapshot().location().to_string(),
                message: voxlake_io::panic_message(panic.as_ref()),
            }
        })?
    }

    async fn take_async(&self, positions: &[u64]) -> Result<Batch, LoaderError> {
        let rows = self.read_rows(positions).await?;
        let start = Instant::now();
        let epoch = self.epoch.load(Ordering::Relaxed);
        let batch = match rows.is_empty() {
            true => return Err(LoaderError::Config("a take of no rows".into())),
            false => self.assembler.assemble_caught(&rows, epoch, positions[0])?,
        };
        self.count(&batch, start);
        Ok(batch)
    }

    /// Counts a batch handed out, assembled since `start`.
    fn count(&self, batch: &Batch, start: Instant) {
        let c = &self.counters;
        c.assemble_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.samples.fetch_add(batch.len() as u64, Ordering::Relaxed);
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.tensor_bytes
            .fetch_add(batch.tensor_bytes() as u64, Ordering::Relaxed);
    }

    /// The rows at the scan's `positions`, read (each row group once, only the asked rows'
    /// tensors of a row group asked for few) and checked, in the order asked.
    async fn read_rows(&self, positions: &[u64]) -> Result<Vec<Row>, LoaderError> {
        let places = self.locate(positions).await?;
        // Each row group read once; its slot in `reads`.
        let mut slots: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        let mut reads: Vec<(usize, usize, Vec<u64>)> = Vec::new();
        for p in &places {
            let slot = *slots.entry((p.file, p.row_group)).or_insert_with(|| {
                reads.push((p.file, p.row_group, Vec::new()));
                reads.len() - 1
            });
            reads[slot].2.push(p.row as u64);
        }
        let concurrency = self.check_budget(positions.len(), &reads).await?;
        let several = reads.len() > 1;
        let groups: Vec<Arc<crate::assemble::Group>> = futures::stream::iter(reads)
            .map(|(file, row_group, mut rows)| async move {
                let unit = self.unit(file, row_group).await?;
                let whole = unit.rows;
                rows.sort_unstable();
                rows.dedup();
                // A few rows of a row group: only their tensors fetched, where the file
                // allows (else its read falls back to the whole row group).
                if (rows.len() as u64) * 2 <= whole {
                    let data = self.stream.read_unit_rows(unit, &rows, 0).await?;
                    return Ok(Arc::new(self.assembler.group(data)?));
                }
                let data = self.stream.read_unit(unit, 0).await?;
                let group = Arc::new(self.assembler.group(data)?);
                // Of several row groups, only the asked rows are held while the others are
                // read: the budget follows the rows asked, not their row groups.
                match several && (rows.len() as u64) < whole {
                    true => self.assembler.loosen(group, &rows),
                    false => Ok(group),
                }
            })
            .buffered(concurrency)
            .try_collect()
            .await?;
        places
            .iter()
            .map(|p| {
                let group = groups[slots[&(p.file, p.row_group)]].clone();
                let index = group.index_of(p.row as u64).ok_or_else(|| {
                    LoaderError::Internal(format!(
                        "row {} of row group {} of file #{} is not in its read",
                        p.row, p.row_group, p.file
                    ))
                })?;
                Ok(Row { group, index })
            })
            .collect()
    }
}

impl Drop for Lookup {
    fn drop(&mut self) {
        self.shut_down();
    }
}

mod build;
mod locate;
mod patches;
