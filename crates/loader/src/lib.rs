//! The batching iterator a training loop calls.
//!
//! [`Loader`] streams a voxlake table (see `voxlake-stream`) on background threads, mixes rows
//! in a shuffle buffer, and hands out fixed-shape [`Batch`]es of `ndarray` tensors in the
//! table's element type through a bounded channel. Dropping it stops all work.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let data = voxlake_compact::synth::generate(dir.path(), 10, 1)?;
//! # let table = dir.path().join("table").to_string_lossy().into_owned();
//! # tokio::runtime::Runtime::new()?.block_on(
//! #     voxlake_compact::Compactor::new(&table).with_labels(data.labels.to_string_lossy())
//! #         .convert(&data.cubes.to_string_lossy()))?;
//! use voxlake_loader::Loader;
//!
//! let loader = Loader::builder(&table)
//!     .with_batch_size(4)
//!     .with_shuffle(42, 64)
//!     .with_channels_first(true)
//!     .build()?;
//! let mut samples = 0;
//! for batch in loader {
//!     let batch = batch?;
//!     assert_eq!(&batch.tensors.shape()[1..], &[10, 30, 30, 10]);
//!     samples += batch.len();
//! }
//! assert_eq!(samples, 10);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arrow_array::{Array, BinaryViewArray, Int64Array, StringArray};
use crossbeam_channel::{Receiver, Sender};
use futures::StreamExt;
use voxlake_format::{ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN, TensorSpec};
use voxlake_stream::plan::SeededRng;
use voxlake_stream::{RowGroupBatch, Shard, StreamError, StreamStats, TableStream};

mod batch;
pub mod stall;
#[cfg(feature = "tch")]
pub mod torch;

pub use batch::{Batch, Tensors};
#[cfg(feature = "tch")]
pub use tch;

/// Errors of the loader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// Opening or streaming the table failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A setting that cannot work, e.g. a memory budget too small for one batch.
    #[error("invalid loader configuration: {0}")]
    Config(String),
    /// A row whose tensor does not have the table's size (a corrupt or foreign file).
    #[error(
        "table {location}, file {file}: row {id} holds {found} tensor bytes, the spec {spec} needs {expected}"
    )]
    BadRow {
        /// Table location.
        location: String,
        /// Data file.
        file: String,
        /// The row's id.
        id: String,
        /// Bytes found.
        found: usize,
        /// Bytes expected.
        expected: usize,
        /// The table's tensor spec.
        spec: String,
    },
    /// The background thread or runtime failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl LoaderError {
    /// Whether retrying later may succeed (a store or network fault).
    pub fn is_transient(&self) -> bool {
        matches!(self, LoaderError::Stream(e) if e.is_transient())
    }
}

/// How many epochs to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epochs {
    /// This many, then the iterator ends.
    Count(u64),
    /// Until the loader is dropped.
    Infinite,
}

/// Configures a [`Loader`].
#[derive(Clone)]
pub struct LoaderBuilder {
    table: String,
    storage_options: HashMap<String, String>,
    version: Option<u64>,
    batch_size: usize,
    epochs: Epochs,
    start_epoch: u64,
    shuffle: Option<(u64, usize)>,
    drop_last: bool,
    shard: Shard,
    columns: Vec<String>,
    channels_first: bool,
    memory_budget: u64,
    prefetch: usize,
    row_group_prefetch: usize,
    runtime_threads: usize,
    root_store: Option<std::sync::Arc<dyn voxlake_stream::ObjectStore>>,
    #[cfg(feature = "tch")]
    device: Option<tch::Device>,
}

impl std::fmt::Debug for LoaderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only.
        f.debug_struct("LoaderBuilder")
            .field("table", &voxlake_stream::redact(&self.table))
            .field(
                "storage_option_keys",
                &self.storage_options.keys().collect::<Vec<_>>(),
            )
            .field("version", &self.version)
            .field("batch_size", &self.batch_size)
            .field("epochs", &self.epochs)
            .field("shuffle", &self.shuffle)
            .field("shard", &self.shard)
            .field("memory_budget", &self.memory_budget)
            .field("custom_store", &self.root_store.is_some())
            .finish()
    }
}

impl LoaderBuilder {
    /// Hand out the tensors as libtorch tensors on `device` (feature `tch`): assembled in
    /// one copy from the Arrow buffers; for CUDA, into pinned memory and copied asynchronously,
    /// with the channel axis moved on the device. Without it, batches are `ndarray`s.
    #[cfg(feature = "tch")]
    pub fn with_device(mut self, device: tch::Device) -> Self {
        self.device = Some(device);
        self
    }

    /// Reads through this store (with `/` at the root of the store the table's location
    /// names) instead of one built from the location and options: custom clients, object
    /// store's `ThrottledStore` for latency experiments, …
    pub fn with_object_store(
        mut self,
        store: std::sync::Arc<dyn voxlake_stream::ObjectStore>,
    ) -> Self {
        self.root_store = Some(store);
        self
    }

    /// Storage settings on top of the standard environment variables.
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// Pins the table version (default: the latest at build).
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = Some(version);
        self
    }

    /// Samples per batch (default 32).
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Number of epochs (default 1).
    pub fn with_epochs(mut self, epochs: u64) -> Self {
        self.epochs = Epochs::Count(epochs);
        self
    }

    /// Repeat epochs until the loader is dropped.
    pub fn with_infinite_epochs(mut self) -> Self {
        self.epochs = Epochs::Infinite;
        self
    }

    /// The first epoch's number (default 0): a resumed run continues the shuffle sequence.
    pub fn with_start_epoch(mut self, epoch: u64) -> Self {
        self.start_epoch = epoch;
        self
    }

    /// Shuffles files and row groups per epoch from `seed`, and rows through a buffer of
    /// `buffer_rows` rows (default: no shuffling, table order).
    pub fn with_shuffle(mut self, seed: u64, buffer_rows: usize) -> Self {
        self.shuffle = Some((seed, buffer_rows));
        self
    }

    /// Drop each epoch's last batch if it is short (default: keep it).
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Read only this process's share: rank `rank` of `world_size` (default 0 of 1).
    pub fn with_rank(mut self, rank: usize, world_size: usize) -> Self {
        self.shard = Shard::new(rank, world_size);
        self
    }

    /// Columns to read (default all three). Without `tensor` the batches' tensors are empty;
    /// without `id` or `label` the ids are empty strings and the labels `None`.
    pub fn with_columns(mut self, columns: Vec<String>) -> Self {
        self.columns = columns;
        self
    }

    /// Move the tensor's last axis (channels) right after the batch axis: `[B, C, …]`.
    pub fn with_channels_first(mut self, channels_first: bool) -> Self {
        self.channels_first = channels_first;
        self
    }

    /// Bytes for everything fetched, decoded and buffered but not yet handed out (default
    /// 1 GiB). The shuffle buffer takes at most half of it.
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Batches assembled ahead of the training loop (default 2).
    pub fn with_prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// Row groups fetched and decoded at once (default 16, after a slow start from 4).
    pub fn with_row_group_prefetch(mut self, row_groups: usize) -> Self {
        self.row_group_prefetch = row_groups.max(1);
        self
    }

    /// Threads of the I/O runtime (default 2); decoding runs on its blocking pool.
    pub fn with_runtime_threads(mut self, threads: usize) -> Self {
        self.runtime_threads = threads.max(1);
        self
    }

    /// Opens the table (its log only) and starts the background work.
    pub fn build(self) -> Result<Loader, LoaderError> {
        if self.batch_size == 0 {
            return Err(LoaderError::Config("batch size must be at least 1".into()));
        }
        let started = Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.runtime_threads)
            .thread_name("voxlake-io")
            .enable_all()
            .build()
            .map_err(|e| LoaderError::Internal(format!("tokio runtime: {e}")))?;
        let stream_budget = self.memory_budget;
        let stream = runtime.block_on(
            TableStream::builder(self.table.clone())
                .with_storage_options(self.storage_options.clone())
                .with_shard(self.shard)
                .with_shuffle(self.shuffle.is_some())
                .with_seed(self.shuffle.map_or(0, |s| s.0))
                .with_columns(self.columns.clone())
                .with_memory_budget(stream_budget)
                .with_prefetch(self.row_group_prefetch)
                .with_version_opt(self.version)
                .with_store_opt(self.root_store.clone())
                .build(),
        )?;
        let spec = stream.snapshot().spec().clone();
        let sample_bytes = spec.nbytes().max(1) as u64;
        if (self.batch_size as u64) * sample_bytes > self.memory_budget {
            return Err(LoaderError::Config(format!(
                "a memory budget of {} bytes cannot hold one batch of {} samples of {sample_bytes} bytes",
                self.memory_budget, self.batch_size
            )));
        }
        // Buffered row groups keep their budget share: the buffer takes at most half.
        let buffer_rows = match self.shuffle {
            Some((_, rows)) => {
                let fits = (self.memory_budget / 2 / sample_bytes) as usize;
                if rows > fits {
                    tracing::warn!(
                        requested = rows,
                        fits,
                        "shuffle buffer reduced to fit the memory budget"
                    );
                }
                rows.min(fits).max(self.batch_size)
            }
            None => self.batch_size,
        };
        let channels = match (self.channels_first, spec.shape().last()) {
            (true, Some(&c)) if spec.shape().len() >= 2 => Some(c),
            (true, _) => {
                return Err(LoaderError::Config(format!(
                    "channels first needs at least two axes, the tensors are {:?}",
                    spec.shape()
                )));
            }
            (false, _) => None,
        };
        #[cfg(feature = "tch")]
        if self.device.is_some() {
            torch::kind_of(spec.dtype())?;
        }
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let shutdown = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = crossbeam_channel::bounded(self.prefetch);
        let recycled = Arc::new(Mutex::new(Vec::new()));
        let producer = Producer {
            stream: stream.clone(),
            spec: spec.clone(),
            batch_size: self.batch_size,
            buffer_rows,
            shuffle_seed: self.shuffle.map(|s| s.0),
            drop_last: self.drop_last,
            epochs: self.epochs,
            start_epoch: self.start_epoch,
            channels,
            counters: counters.clone(),
            stop: stop.clone(),
            shutdown: shutdown.clone(),
            #[cfg(feature = "tch")]
            device: self.device,
            tx,
            recycled: recycled.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("voxlake-loader".into())
            .spawn(move || {
                runtime.block_on(producer.run());
                // Blocking decodes still running are not waited for.
                runtime.shutdown_background();
            })
            .map_err(|e| LoaderError::Internal(format!("spawning the loader thread: {e}")))?;
        Ok(Loader {
            rx,
            stop,
            shutdown,
            thread: Some(thread),
            counters,
            stream,
            spec,
            started,
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            meter: stall::StallMeter::default(),
            last_return: None,
            recycled,
            recycle_max: self.prefetch + 2,
        })
    }
}

/// Optional settings passed on to the stream builder.
trait OptionalSettings {
    fn with_version_opt(self, version: Option<u64>) -> Self;
    fn with_store_opt(self, store: Option<std::sync::Arc<dyn voxlake_stream::ObjectStore>>)
    -> Self;
}

impl OptionalSettings for voxlake_stream::StreamBuilder {
    fn with_version_opt(self, version: Option<u64>) -> Self {
        match version {
            Some(v) => self.with_version(v),
            None => self,
        }
    }
    fn with_store_opt(
        self,
        store: Option<std::sync::Arc<dyn voxlake_stream::ObjectStore>>,
    ) -> Self {
        match store {
            Some(s) => self.with_object_store(s),
            None => self,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    samples: AtomicU64,
    batches: AtomicU64,
    tensor_bytes: AtomicU64,
    assemble_ns: AtomicU64,
    recycled: AtomicU64,
    producer_wait_ns: AtomicU64,
    consumer_wait_ns: AtomicU64,
    first_batch_ns: AtomicU64,
}

/// What the loader has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoaderStats {
    /// Samples handed out.
    pub samples: u64,
    /// Batches handed out.
    pub batches: u64,
    /// Tensor bytes handed out.
    pub tensor_bytes: u64,
    /// From `build()` to the first batch handed out (zero before it).
    pub first_batch: Duration,
    /// Time assembling batches (shuffle-buffer gather and copy into the batch).
    pub assemble: Duration,
    /// Batches assembled into memory given back with [`Loader::recycle`].
    pub recycled: u64,
    /// Time the assembler waited for row groups from the stream.
    pub producer_wait: Duration,
    /// Time the training loop waited inside `next()`: input-bound time.
    pub consumer_wait: Duration,
    /// Since `build()`.
    pub elapsed: Duration,
    /// The stream's counters (fetch, decode, budget wait).
    pub stream: StreamStats,
}

/// The batching iterator. See the crate documentation.
#[derive(Debug)]
pub struct Loader {
    rx: Receiver<Result<Batch, LoaderError>>,
    stop: Arc<AtomicBool>,
    shutdown: Arc<tokio::sync::Notify>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    stream: TableStream,
    spec: TensorSpec,
    started: Instant,
    batch_size: usize,
    drop_last: bool,
    meter: stall::StallMeter,
    /// When the last batch was handed out (the training loop computes from then on).
    last_return: Option<Instant>,
    /// Tensor memory given back with `recycle`, for the assembler to fill again.
    recycled: Arc<Mutex<Vec<Tensors>>>,
    recycle_max: usize,
}

impl Loader {
    /// A builder for the table at `table` (a local path or URL).
    pub fn builder(table: impl Into<String>) -> LoaderBuilder {
        LoaderBuilder {
            table: table.into(),
            storage_options: HashMap::new(),
            version: None,
            batch_size: 32,
            epochs: Epochs::Count(1),
            start_epoch: 0,
            shuffle: None,
            drop_last: false,
            shard: Shard::default(),
            columns: [ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN]
                .map(String::from)
                .to_vec(),
            channels_first: false,
            memory_budget: 1 << 30,
            prefetch: 2,
            row_group_prefetch: 16,
            runtime_threads: 2,
            root_store: None,
            #[cfg(feature = "tch")]
            device: None,
        }
    }

    /// The table's tensor spec (per sample, as stored).
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The pinned table version.
    pub fn version(&self) -> u64 {
        self.stream.snapshot().version()
    }

    /// Rows of the whole table, if the log records row counts.
    pub fn table_rows(&self) -> Option<u64> {
        self.stream.snapshot().num_rows()
    }

    /// Batches per epoch for this rank (from the epoch-0 plan; shares differ by at most one
    /// file between epochs when shuffling).
    pub fn iterations_per_epoch(&self) -> u64 {
        let (rows, batch) = (self.stream.rows_per_epoch(), self.batch_size as u64);
        if self.drop_last {
            rows / batch
        } else {
            rows.div_ceil(batch)
        }
    }

    /// The stall meter: per-step waits and compute times of the training loop.
    pub fn stall_meter(&self) -> stall::StallMeter {
        self.meter
    }

    /// Forecasts an epoch of `iterations_per_epoch` steps and a run of `epochs`, from the
    /// timings so far (`None` before the third batch). See [`stall`].
    pub fn forecast(
        &self,
        iterations_per_epoch: u64,
        epochs: u64,
        validation_per_epoch: Duration,
        price_per_hour: Option<f64>,
    ) -> Option<stall::Forecast> {
        let m = &self.meter;
        Some(stall::Forecast::compute(
            m.init,
            m.first_iteration,
            m.steady_iteration()?,
            iterations_per_epoch,
            epochs,
            validation_per_epoch,
            price_per_hour,
        ))
    }

    /// Gives a batch's tensor memory back: a later batch of the same shape is assembled into
    /// it instead of fresh memory (fresh memory costs a page fault per 4 KiB on first touch:
    /// 7 % of a local epoch's profile). Optional: call it when done with a batch's `ndarray`
    /// tensors; a few are kept, libtorch tensors and the rest are dropped.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), voxlake_loader::LoaderError> {
    /// let mut loader = voxlake_loader::Loader::builder("/data/cubes-table").build()?;
    /// while let Some(batch) = loader.next() {
    ///     let batch = batch?;
    ///     // … train on batch.tensors …
    ///     loader.recycle(batch);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recycle(&self, batch: Batch) {
        #[cfg(feature = "tch")]
        if matches!(batch.tensors, Tensors::Tch(_)) {
            return;
        }
        let mut recycled = self.recycled.lock().expect("recycle lock");
        if recycled.len() < self.recycle_max {
            recycled.push(batch.tensors);
        }
    }

    /// What the loader has done so far.
    pub fn stats(&self) -> LoaderStats {
        let c = &self.counters;
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        LoaderStats {
            samples: c.samples.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            tensor_bytes: c.tensor_bytes.load(Ordering::Relaxed),
            first_batch: ns(&c.first_batch_ns),
            assemble: ns(&c.assemble_ns),
            recycled: c.recycled.load(Ordering::Relaxed),
            producer_wait: ns(&c.producer_wait_ns),
            consumer_wait: ns(&c.consumer_wait_ns),
            elapsed: self.started.elapsed(),
            stream: self.stream.stats(),
        }
    }
}

impl Iterator for Loader {
    type Item = Result<Batch, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = Instant::now();
        let item = self.rx.recv().ok();
        let now = Instant::now();
        let waited = now - start;
        let c = &self.counters;
        c.consumer_wait_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        if let Some(Ok(batch)) = &item {
            let m = &mut self.meter;
            m.waited += waited;
            m.samples += batch.len() as u64;
            match self.last_return {
                None => m.init = now - self.started,
                Some(last) => {
                    m.computed += start - last;
                    if m.steps == 1 {
                        m.first_iteration = now - last;
                    } else {
                        m.record_steady(now - last);
                    }
                }
            }
            m.steps += 1;
            self.last_return = Some(now);
            if m.steps == STALL_LOG_AFTER
                && let Some(f) = self.forecast(self.iterations_per_epoch(), 1, Duration::ZERO, None)
            {
                tracing::info!(
                    input_bound = format!("{:.0}%", 100.0 * self.meter.input_bound_fraction()),
                    samples_per_s = format!("{:.0}", self.meter.samples_per_s(self.batch_size)),
                    epoch_s = format!("{:.1}", f.epoch.as_secs_f64()),
                    "stall meter"
                );
            }
        }
        if let Some(Ok(batch)) = &item {
            if c.batches.fetch_add(1, Ordering::Relaxed) == 0 {
                c.first_batch_ns
                    .store(self.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            c.samples.fetch_add(batch.len() as u64, Ordering::Relaxed);
            c.tensor_bytes
                .fetch_add(batch.tensors.nbytes() as u64, Ordering::Relaxed);
        }
        item
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake a producer waiting on the stream (a permit is stored if it is not waiting).
        self.shutdown.notify_one();
        // Unblock a producer waiting to send: its send fails once the receiver is gone.
        let (_, dead) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.rx, dead));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One buffered row: its row group and index.
struct Row {
    group: Arc<Group>,
    index: usize,
}

/// A decoded row group and typed views of its columns.
struct Group {
    data: RowGroupBatch,
    /// Arrival order in the epoch.
    sequence: u64,
    ids: Option<StringArray>,
    labels: Option<Int64Array>,
    tensors: Option<BinaryViewArray>,
}

struct Producer {
    stream: TableStream,
    spec: TensorSpec,
    batch_size: usize,
    buffer_rows: usize,
    shuffle_seed: Option<u64>,
    drop_last: bool,
    epochs: Epochs,
    start_epoch: u64,
    channels: Option<usize>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    shutdown: Arc<tokio::sync::Notify>,
    #[cfg(feature = "tch")]
    device: Option<tch::Device>,
    tx: Sender<Result<Batch, LoaderError>>,
    recycled: Arc<Mutex<Vec<Tensors>>>,
}

/// Steps after which the stall meter logs its first reading.
const STALL_LOG_AFTER: u64 = 20;

/// Row groups in the shuffle buffer before the first batch; one more per batch after it.
const WARM_UP_GROUPS: usize = 4;

/// A salt keeping the row shuffle apart from the planner's streams.
const ROWS: u64 = 3;

impl Producer {
    async fn run(self) {
        let mut epoch = self.start_epoch;
        loop {
            if let Epochs::Count(n) = self.epochs
                && epoch >= self.start_epoch + n
            {
                return;
            }
            match self.run_epoch(epoch).await {
                Ok(true) => epoch += 1,
                Ok(false) => return,
                Err(e) => {
                    let _ = self.tx.send(Err(e));
                    return;
                }
            }
        }
    }

    /// One epoch; `Ok(false)` when the consumer is gone.
    async fn run_epoch(&self, epoch: u64) -> Result<bool, LoaderError> {
        let mut stream = self.stream.epoch(epoch);
        let mut rng = self
            .shuffle_seed
            .map(|seed| SeededRng::for_stream(&[seed, epoch, ROWS]));
        // The buffer holds whole row groups (zero copy), and a row group's memory is freed
        // only when its last row leaves. So the buffer is bounded in row groups, not rows:
        // a new group comes in when one is used up, and rows are drawn uniformly from all the
        // rows left. This keeps memory at `max_groups` row groups and the order deterministic.
        let mut buffer: VecDeque<Row> = VecDeque::with_capacity(self.buffer_rows);
        let mut remaining: HashMap<u64, usize> = HashMap::new();
        // Shuffling starts from a few row groups and grows by one per batch up to the full
        // buffer, so the first batch does not wait for the whole buffer to fill.
        let mut max_groups = if rng.is_some() { None } else { Some(1) };
        let mut full_groups = 1;
        let mut sequence = 0u64;
        let mut exhausted = false;
        let mut index = 0;
        loop {
            while !exhausted
                && (max_groups.is_none_or(|m| remaining.len() < m)
                    || buffer.len() < self.batch_size)
            {
                if self.stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
                let start = Instant::now();
                let next = tokio::select! {
                    next = stream.next() => next,
                    _ = self.shutdown.notified() => return Ok(false),
                };
                self.counters
                    .producer_wait_ns
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match next {
                    Some(group) => {
                        let group = Arc::new(self.group(group?, sequence)?);
                        sequence += 1;
                        let rows = group.data.batch.num_rows();
                        if rows == 0 {
                            continue;
                        }
                        if max_groups.is_none() {
                            full_groups = self.buffer_rows.div_ceil(rows).max(1);
                            max_groups = Some(full_groups.min(WARM_UP_GROUPS));
                        }
                        remaining.insert(group.sequence, rows);
                        buffer.extend((0..rows).map(|index| Row {
                            group: group.clone(),
                            index,
                        }));
                    }
                    None => exhausted = true,
                }
            }
            if buffer.is_empty() || (exhausted && buffer.len() < self.batch_size && self.drop_last)
            {
                return Ok(true);
            }
            let take = self.batch_size.min(buffer.len());
            let start = Instant::now();
            let rows: Vec<Row> = (0..take)
                .map(|_| match &mut rng {
                    Some(rng) => {
                        let i = rng.below(buffer.len());
                        buffer.swap_remove_back(i).expect("index below the length")
                    }
                    None => buffer.pop_front().expect("buffer is not empty"),
                })
                .collect();
            if rng.is_some() {
                max_groups = max_groups.map(|m| (m + 1).min(full_groups));
            }
            for row in &rows {
                let left = remaining
                    .get_mut(&row.group.sequence)
                    .expect("a buffered group");
                *left -= 1;
                if *left == 0 {
                    remaining.remove(&row.group.sequence);
                }
            }
            let batch = self.assemble(&rows, epoch, index)?;
            drop(rows); // releases row groups (and their budget) no longer buffered
            self.counters
                .assemble_ns
                .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            index += 1;
            if self.tx.send(Ok(batch)).is_err() {
                return Ok(false);
            }
        }
    }

    fn group(&self, data: RowGroupBatch, sequence: u64) -> Result<Group, LoaderError> {
        let column = |name: &str| data.batch.column_by_name(name).cloned();
        let ids = column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let labels =
            column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
        let tensors = column(TENSOR_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<BinaryViewArray>().cloned());
        let group = Group {
            sequence,
            ids,
            labels,
            tensors,
            data,
        };
        if let Some(tensors) = &group.tensors {
            let expected = self.spec.nbytes();
            for i in 0..tensors.len() {
                let found = tensors.value(i).len();
                if found != expected || tensors.is_null(i) {
                    let snapshot = self.stream.snapshot();
                    return Err(LoaderError::BadRow {
                        location: snapshot.location().to_string(),
                        file: snapshot.files()[group.data.file].path.clone(),
                        id: group
                            .ids
                            .as_ref()
                            .map_or_else(|| format!("#{i}"), |ids| ids.value(i).to_string()),
                        found,
                        expected,
                        spec: self.spec.to_string(),
                    });
                }
            }
        }
        Ok(group)
    }

    fn assemble(&self, rows: &[Row], epoch: u64, index: u64) -> Result<Batch, LoaderError> {
        let shape = self.spec.shape();
        let mut batch_shape = vec![rows.len()];
        match self.channels {
            Some(c) => {
                batch_shape.push(c);
                batch_shape.extend_from_slice(&shape[..shape.len() - 1]);
            }
            None => batch_shape.extend_from_slice(shape),
        }
        let samples: Vec<&[u8]> = rows
            .iter()
            .map(|r| {
                r.group
                    .tensors
                    .as_ref()
                    .map_or(&[][..], |t| t.value(r.index))
            })
            .collect();
        #[cfg(feature = "tch")]
        if let (Some(device), true) = (
            self.device,
            rows.first().is_some_and(|r| r.group.tensors.is_some()),
        ) {
            let tensors =
                torch::assemble(self.spec.dtype(), shape, &samples, self.channels, device)?;
            return Ok(self.batch_of(rows, tensors, epoch, index));
        }
        let tensors = if rows.first().is_some_and(|r| r.group.tensors.is_some()) {
            let reuse = self.recycled.lock().expect("recycle lock").pop();
            let (tensors, recycled) = batch::build_tensors_into(
                self.spec.dtype(),
                &batch_shape,
                &samples,
                self.channels,
                reuse,
            );
            if recycled {
                self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            }
            tensors
        } else {
            batch_shape.truncate(1);
            batch_shape.push(0);
            batch::build_tensors(self.spec.dtype(), &batch_shape, &[], None)
        };
        Ok(self.batch_of(rows, tensors, epoch, index))
    }

    fn batch_of(&self, rows: &[Row], tensors: Tensors, epoch: u64, index: u64) -> Batch {
        Batch {
            tensors,
            labels: rows
                .iter()
                .map(|r| {
                    r.group
                        .labels
                        .as_ref()
                        .and_then(|l| (!l.is_null(r.index)).then(|| l.value(r.index)))
                })
                .collect(),
            ids: rows
                .iter()
                .map(|r| {
                    r.group
                        .ids
                        .as_ref()
                        .map_or_else(String::new, |ids| ids.value(r.index).to_string())
                })
                .collect(),
            epoch,
            index,
        }
    }
}
