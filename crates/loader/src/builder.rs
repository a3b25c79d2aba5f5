//! [`LoaderBuilder`]: the loader's settings, checked at `build()`, and the start of its work.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use voxlake_format::SampleSpec;
use voxlake_stream::order::Uneven;
use voxlake_stream::replay::OrderSettings;
use voxlake_stream::{AsOf, Shard, Snapshot, TableStream, default_columns};

use crate::batch::Batch;
use crate::producer::{Counters, Producer};
use crate::state::{LoaderState, Position, STATE_FORMAT};
use crate::transform::{Sample, TransformError, TransformRng};
use crate::{Epochs, Loader, LoaderError, budget, stall};

/// Configures a [`Loader`].
#[derive(Clone)]
pub struct LoaderBuilder {
    pub(crate) table: String,
    pub(crate) storage_options: HashMap<String, String>,
    pub(crate) as_of: AsOf,
    pub(crate) batch_size: usize,
    pub(crate) epochs: Epochs,
    pub(crate) start_epoch: u64,
    pub(crate) shuffle: Option<(u64, usize)>,
    pub(crate) drop_last: bool,
    pub(crate) uneven: Uneven,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    /// Take the rank and world size from the launcher's variables at `build()`.
    pub(crate) rank_from_env: bool,
    /// Columns to read (`None`: id, label and every field of the sample).
    pub(crate) columns: Option<Vec<String>>,
    pub(crate) channels_first: bool,
    pub(crate) memory_budget: u64,
    pub(crate) prefetch: usize,
    /// Row-group reads in flight (`None`: sized to the store as it runs).
    pub(crate) row_group_prefetch: Option<usize>,
    pub(crate) runtime_threads: usize,
    pub(crate) assembly_threads: usize,
    pub(crate) root_store: Option<Arc<dyn voxlake_stream::ObjectStore>>,
    pub(crate) state: Option<LoaderState>,
    pub(crate) hooks: voxlake_stream::hooks::Hooks,
    pub(crate) verify: bool,
    pub(crate) hints: voxlake_format::sample::ColumnHints,
    pub(crate) transforms: crate::transform::Transforms,
    pub(crate) filter: Option<String>,
    #[cfg(unix)]
    pub(crate) cache: voxlake_stream::cache::CacheChoice,
    #[cfg(feature = "fault-hooks")]
    pub(crate) fault_hook: Option<voxlake_stream::hooks::FaultHook>,
    #[cfg(feature = "tch")]
    pub(crate) device: Option<tch::Device>,
}

/// A quarter of the cores, 1 to 4.
fn default_assembly_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).clamp(1, 4))
}

/// Files whose row groups are read round-robin when shuffling.
const INTERLEAVE: usize = 4;

/// Batches given back with `Loader::recycle` kept for reuse.
pub(crate) const RECYCLED_SPARES: usize = 2;

/// Batches the loader holds outside the stream: `prefetch` queued for the caller, the one
/// being assembled, the caller's, and the recycled spares.
pub(crate) fn batches_outside(prefetch: usize) -> u64 {
    (prefetch + 2 + RECYCLED_SPARES) as u64
}

impl LoaderBuilder {
    /// Host bytes the loader holds outside the stream: [`batches_outside`] batches, or for a
    /// CUDA device (whose queued batches are in device memory) the staging ring's buffers of
    /// a batch and its labels, whichever is more.
    pub(crate) fn outside_bytes(&self, batch_size: usize, sample_bytes: u64) -> u64 {
        let batches = batches_outside(self.prefetch) * batch_size as u64 * sample_bytes;
        #[cfg(feature = "tch")]
        if self.device.is_some_and(|d| d.is_cuda()) {
            let staged =
                crate::feed::STAGING_BUFFERS as u64 * batch_size as u64 * (sample_bytes + 8);
            return batches.max(staged);
        }
        batches
    }
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
            .field("as_of", &self.as_of)
            .field("batch_size", &self.batch_size)
            .field("epochs", &self.epochs)
            .field("shuffle", &self.shuffle)
            .field("uneven", &self.uneven)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("rank_from_env", &self.rank_from_env)
            .field("memory_budget", &self.memory_budget)
            .field("custom_store", &self.root_store.is_some())
            .field("resumed", &self.state.is_some())
            .finish()
    }
}

impl LoaderBuilder {
    pub(crate) fn new(table: String) -> Self {
        LoaderBuilder {
            table,
            storage_options: HashMap::new(),
            as_of: AsOf::Latest,
            batch_size: 32,
            epochs: Epochs::Count(1),
            start_epoch: 0,
            shuffle: None,
            drop_last: false,
            uneven: Uneven::Pad,
            rank: 0,
            world_size: 1,
            rank_from_env: false,
            columns: None,
            channels_first: false,
            memory_budget: 1 << 30,
            prefetch: 2,
            row_group_prefetch: None,
            runtime_threads: 2,
            assembly_threads: default_assembly_threads(),
            root_store: None,
            state: None,
            hooks: Default::default(),
            verify: true,
            hints: Default::default(),
            transforms: Default::default(),
            filter: None,
            #[cfg(unix)]
            cache: Default::default(),
            #[cfg(feature = "fault-hooks")]
            fault_hook: None,
            #[cfg(feature = "tch")]
            device: None,
        }
    }

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
    pub fn with_object_store(mut self, store: Arc<dyn voxlake_stream::ObjectStore>) -> Self {
        self.root_store = Some(store);
        self
    }

    /// Reads a remote table through a disk cache in `dir` holding at most `max_bytes`: the
    /// first epoch fills it, later epochs (and every other loader of the node using the same
    /// folder: one per rank) read from local disk. Entries are checksummed, shared without a
    /// daemon, evicted least recently used first; the memory budget does not change (see
    /// `voxlake_stream::cache`). Default: the cache `VOXLAKE_CACHE_DIR` names (capped at
    /// `VOXLAKE_CACHE_MAX_MB`), if set. Local tables are never cached.
    #[cfg(unix)]
    pub fn with_cache(mut self, dir: impl Into<std::path::PathBuf>, max_bytes: u64) -> Self {
        self.cache = voxlake_stream::cache::CacheChoice::Folder(dir.into(), max_bytes);
        self
    }

    /// Which disk cache to read through: one already open (shared by loaders of a process),
    /// none whatever the environment says, or as [`with_cache`](Self::with_cache).
    #[cfg(unix)]
    pub fn with_cache_choice(mut self, cache: voxlake_stream::cache::CacheChoice) -> Self {
        self.cache = cache;
        self
    }

    /// Storage settings on top of the standard environment variables.
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// Pins the table version (default: the latest at build, or the state's). A version the
    /// log does not have is an error saying which is the latest.
    pub fn with_version(mut self, version: u64) -> Self {
        self.as_of = AsOf::Version(version);
        self
    }

    /// Reads the table as it was at `at`: the latest version committed at or before it (by
    /// the commits' in-commit timestamps where the table records them, else by their log
    /// files' modification times). A time before the first commit is an error saying when the
    /// table starts; `Loader::version` then says which version was read, and a saved state
    /// pins it. `AsOf::parse_timestamp` reads RFC 3339 text.
    ///
    /// ```no_run
    /// use std::time::{Duration, SystemTime};
    /// use voxlake_loader::Loader;
    ///
    /// // The table as it was a day ago.
    /// let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    /// let loader = Loader::builder("az://cubes/table").with_timestamp(day_ago).build()?;
    /// println!("reading version {}", loader.version());
    /// # Ok::<(), voxlake_loader::LoaderError>(())
    /// ```
    pub fn with_timestamp(mut self, at: std::time::SystemTime) -> Self {
        self.as_of = AsOf::Timestamp(at);
        self
    }

    /// The version to read, as [`with_version`](Self::with_version) or
    /// [`with_timestamp`](Self::with_timestamp) say it.
    pub fn with_as_of(mut self, as_of: AsOf) -> Self {
        self.as_of = as_of;
        self
    }

    /// Samples per batch (default 32).
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Number of epochs (default 1), counted from the start epoch.
    pub fn with_epochs(mut self, epochs: u64) -> Self {
        self.epochs = Epochs::Count(epochs);
        self
    }

    /// Repeat epochs until the loader is dropped.
    pub fn with_infinite_epochs(mut self) -> Self {
        self.epochs = Epochs::Infinite;
        self
    }

    /// The first epoch's number (default 0): the epochs run are `start..start + epochs`.
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

    /// Drop each epoch's last batch if it is short (default: keep it). Every rank has the
    /// same number of batches either way.
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// What to do with rows that do not divide evenly over the ranks (default
    /// [`Uneven::Pad`]: repeat a few; [`Uneven::Drop`]: leave a few out).
    pub fn with_uneven(mut self, uneven: Uneven) -> Self {
        self.uneven = uneven;
        self
    }

    /// Read only this process's share: rank `rank` of `world_size` (default 0 of 1). Every
    /// rank gets the same number of rows and batches in every epoch.
    pub fn with_rank(mut self, rank: usize, world_size: usize) -> Self {
        self.rank = rank;
        self.world_size = world_size;
        self.rank_from_env = false;
        self
    }

    /// Take the rank and world size from the variables the launcher set, read at `build()`:
    /// torchrun's `RANK`/`WORLD_SIZE` first, then Open MPI's, MPICH's (PMI) and a Slurm step's
    /// (see [`launch::LAUNCHERS`](crate::launch::LAUNCHERS)); rank 0 of 1 where none are set
    /// (a process started on its own, an `sbatch` script). `build()` fails, naming the
    /// variables, where only one of a pair is set or a value is not a valid rank. The loader
    /// logs where its rank came from; [`Loader::rank`](crate::Loader::rank) says it.
    pub fn with_rank_from_env(mut self) -> Self {
        self.rank_from_env = true;
        self
    }

    /// Resume from a state taken with [`Loader::state`]: the batches that follow are those
    /// the uninterrupted run would have given. The table is read at the state's version. The
    /// rank and world size are this builder's: with another world size, the rows of the
    /// epoch no rank has delivered yet are dealt over the new ranks. The order settings
    /// (batch size, shuffle, `drop_last`, uneven policy) must be the state's.
    pub fn with_state(mut self, state: LoaderState) -> Self {
        self.state = Some(state);
        self
    }

    /// Columns to read (default `id`, `label` and every field of the sample). Without the
    /// first field the batches' tensors are empty and other fields left out are not in the
    /// batches; without `id` or `label` the ids are empty strings and the labels `None`.
    pub fn with_columns(mut self, columns: Vec<String>) -> Self {
        self.columns = Some(columns);
        self
    }

    /// Move the tensor's last axis (channels) right after the batch axis: `[B, C, …]`.
    pub fn with_channels_first(mut self, channels_first: bool) -> Self {
        self.channels_first = channels_first;
        self
    }

    /// Bytes for everything the loader holds (default 1 GiB): the batches queued for you, being
    /// assembled, yours and two recycled spares, and the rest for row groups fetched, decoded
    /// and buffered, of which the shuffle buffer takes at most half. `build()` refuses a budget
    /// that cannot stream the table, naming the smallest that can.
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Batches assembled ahead of the training loop (default 2).
    pub fn with_prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// Threads that copy each batch's samples into its tensor at once (default: a quarter of
    /// the cores, 1 to 4: a node's other ranks and the training loop need the rest). With 1 the
    /// loader's own thread does it. The batches are the same, bit for bit, with any number.
    pub fn with_assembly_threads(mut self, threads: usize) -> Self {
        self.assembly_threads = threads;
        self
    }

    /// Row groups fetched and decoded at once, always `row_groups`. Default: sized to the
    /// store as the loader runs (Little's law over the measured read time and the loader's
    /// pace, no more than the store's bandwidth-delay product; see `voxlake_stream::depth`),
    /// within the memory budget.
    pub fn with_row_group_prefetch(mut self, row_groups: usize) -> Self {
        self.row_group_prefetch = Some(row_groups.max(1));
        self
    }

    /// Verify each row's checksum (id, label and tensor, where the table has the `row_crc32`
    /// column; default on): a corrupt row is an error naming file, row group, row and id.
    /// Costs a CRC-32 of every row on the decode pool: a local epoch on 2 cores ran at 0.83
    /// of the rate without it (docs/benchmarks.md).
    pub fn with_verify_checksums(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// How samples are read from a table other tools wrote, all at once (the same settings
    /// as the `with_tensor_*`, `with_label_column` and `with_id_column` methods).
    pub fn with_sample_columns(mut self, hints: voxlake_format::sample::ColumnHints) -> Self {
        self.hints = hints;
        self
    }

    /// The column holding the tensors, for tables other tools wrote (default: `tensor`, else
    /// the only BINARY, LIST or FIXED_SIZE_LIST column of numbers). The table may be any Delta
    /// table or a folder of Parquet files; see [`voxlake_format::sample`] for the encodings
    /// read (Spark `array<float>`, Arrow fixed-size lists and `arrow.fixed_shape_tensor`,
    /// Petastorm's `np.save`/`np.savez_compressed` bytes, raw bytes).
    pub fn with_tensor_column(mut self, name: impl Into<String>) -> Self {
        self.hints = self.hints.with_tensor_column(name);
        self
    }

    /// The shape (C order) and element type of one sample: needed for LIST and raw BINARY
    /// columns, checked against what the table records otherwise.
    pub fn with_tensor_shape(mut self, shape: Vec<usize>, dtype: voxlake_format::DType) -> Self {
        self.hints = self.hints.with_tensor_shape(shape, dtype);
        self
    }

    /// The shape (C order) of one sample, its element type taken from the column: for LIST
    /// and FIXED_SIZE_LIST columns, whose schema says it (raw bytes need
    /// [`with_tensor_shape`](Self::with_tensor_shape)).
    pub fn with_tensor_dims(mut self, shape: Vec<usize>) -> Self {
        self.hints = self.hints.with_shape(shape);
        self
    }

    /// A field of the sample (repeatable, in order; the first a tensor): column `name` (its
    /// logical name), found from the table: a tensor of any encoding the loader reads, a
    /// number or bool column (a `[B]` tensor), a string column or partition value (text).
    /// When fields are named, the sample is them (with the label and id); `Batch::tensors` is
    /// the first, [`Batch::field`](crate::Batch::field) gives each.
    pub fn with_field(mut self, name: impl Into<String>) -> Self {
        self.hints = self
            .hints
            .with_field(voxlake_format::sample::FieldHint::new(name));
        self
    }

    /// [`with_field`](Self::with_field) for a column whose bytes need a shape or an element
    /// type (raw BINARY, LIST): checked against what the table records otherwise.
    pub fn with_field_spec(
        mut self,
        name: impl Into<String>,
        shape: Vec<usize>,
        dtype: voxlake_format::DType,
    ) -> Self {
        self.hints = self.hints.with_field(voxlake_format::sample::FieldHint {
            shape: Some(shape),
            dtype: Some(dtype),
            ..voxlake_format::sample::FieldHint::new(name)
        });
        self
    }

    /// The label column: integers, bools or integral floats, handed out as `i64` (default:
    /// `label` where the table has one, else no labels).
    pub fn with_label_column(mut self, name: impl Into<String>) -> Self {
        self.hints = self.hints.with_label_column(name);
        self
    }

    /// The id column, strings or integers (default: `id` where the table has one, else each
    /// row is named `<file>#<row in file>`).
    pub fn with_id_column(mut self, name: impl Into<String>) -> Self {
        self.hints = self.hints.with_id_column(name);
        self
    }

    /// Delivers only the rows `filter` keeps: one SQL boolean expression over the table's
    /// columns (as the files name them) and partition values, e.g.
    /// `label = 1 AND region IN ('a', 'b') AND depth >= 100`. It is applied at `build()` where
    /// it is cheapest: files and row groups that cannot match are skipped unread (partition
    /// values, Delta and Parquet statistics), the filter's columns of the rest read and decided
    /// row by row; ranks then share the kept rows in equal batch counts as without a filter,
    /// and a state resumes only under the same filter. [`Loader::filter_stats`] counts what was
    /// skipped.
    pub fn with_filter(mut self, filter: impl Into<String>) -> Self {
        self.filter = Some(filter.into());
        self
    }

    /// Runs `f` on every sample before it is copied into its batch, on the assembly threads
    /// (see [`with_assembly_threads`](Self::with_assembly_threads)), not the training thread:
    /// normalisation, crops, flips. It gets the sample (tensor without batch axis, label, id)
    /// and a generator seeded from (seed, epoch, row id): the same on every run and after a
    /// resume. It must hand back a tensor of the table's shape and type; use
    /// [`with_transform_to`](Self::with_transform_to) when it changes them. An error or panic
    /// in it ends the run with [`LoaderError::Transform`](crate::LoaderError::Transform)
    /// naming the row.
    pub fn with_transform<F>(mut self, f: F) -> Self
    where
        F: Fn(&mut Sample<'_>, &mut TransformRng) -> Result<(), TransformError>
            + Send
            + Sync
            + 'static,
    {
        self.transforms.sample = Some(Arc::new(f));
        self.transforms.output = None;
        self
    }

    /// [`with_transform`](Self::with_transform) for a transform that hands back samples of
    /// `output`'s fields, shapes and element types (a cast to f16, a crop): batches, the memory
    /// budget and [`Loader::spec`] follow `output`. A `TensorSpec` declares the first field
    /// (the one tensor of a one-tensor table), the others unchanged; a `SampleSpec` every
    /// field.
    pub fn with_transform_to<F>(mut self, output: impl Into<SampleSpec>, f: F) -> Self
    where
        F: Fn(&mut Sample<'_>, &mut TransformRng) -> Result<(), TransformError>
            + Send
            + Sync
            + 'static,
    {
        self.transforms.sample = Some(Arc::new(f));
        self.transforms.output = Some(output.into());
        self
    }

    /// Runs `f` on every batch after it is assembled, on the loader's thread (not the
    /// training thread), with a generator seeded from (seed, epoch, batch index). An error or
    /// panic in it ends the run with [`LoaderError::Transform`](crate::LoaderError::Transform)
    /// naming the batch.
    pub fn with_batch_transform<F>(mut self, f: F) -> Self
    where
        F: Fn(&mut Batch, &mut TransformRng) -> Result<(), TransformError> + Send + Sync + 'static,
    {
        self.transforms.batch = Some(Arc::new(f));
        self
    }

    /// Threads of the I/O runtime (default 2); decoding runs on its blocking pool.
    pub fn with_runtime_threads(mut self, threads: usize) -> Self {
        self.runtime_threads = threads.max(1);
        self
    }

    /// Calls `hook` at every stage (footer, fetch, decode, assemble) so tests can inject
    /// errors and panics (feature `fault-hooks`).
    #[cfg(feature = "fault-hooks")]
    pub fn with_fault_hook(mut self, hook: voxlake_stream::hooks::FaultHook) -> Self {
        self.hooks = voxlake_stream::hooks::Hooks::new(hook.clone());
        self.fault_hook = Some(hook);
        self
    }

    /// Opens the table (its log only) and starts the background work.
    pub fn build(mut self) -> Result<Loader, LoaderError> {
        if self.rank_from_env {
            let launch = crate::launch::from_env()
                .map_err(|e| LoaderError::Config(format!("the rank from the environment: {e}")))?;
            (self.rank, self.world_size) = match launch {
                Some(l) => {
                    tracing::info!(rank = l.rank, world_size = l.world_size, source = %l.source, "rank from the launcher");
                    (l.rank, l.world_size)
                }
                None => {
                    tracing::info!(
                        "no launcher's rank variables are set: one process, rank 0 of 1"
                    );
                    (0, 1)
                }
            };
        }
        if self.batch_size == 0 {
            return Err(LoaderError::Config("batch size must be at least 1".into()));
        }
        if self.assembly_threads == 0 {
            return Err(LoaderError::Config(
                "assembly threads must be at least 1".into(),
            ));
        }
        let shard = Shard::new(self.rank, self.world_size).ok_or_else(|| {
            LoaderError::Config(format!(
                "rank {} must be below the world size {} (ranks count from 0)",
                self.rank, self.world_size
            ))
        })?;
        let version = match (&self.state, self.as_of) {
            (Some(s), AsOf::Version(v)) if s.version != v => {
                return Err(LoaderError::State(format!(
                    "the state is of version {}, the builder pins version {v}",
                    s.version
                )));
            }
            // A state pins the version it was read at, whatever time named it.
            (Some(s), _) => AsOf::Version(s.version),
            (None, as_of) => as_of,
        };
        let started = Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.runtime_threads)
            .thread_name("voxlake-io")
            .enable_all()
            .build()
            .map_err(|e| LoaderError::Internal(format!("tokio runtime: {e}")))?;
        let mut settings = OrderSettings {
            seed: self.shuffle.map_or(0, |s| s.0),
            shuffle: self.shuffle.is_some(),
            buffer_rows: self.batch_size,
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            uneven: self.uneven,
            interleave: INTERLEAVE,
        };
        let snapshot = runtime.block_on(async {
            let snapshot = Snapshot::open_with(
                &self.table,
                &self.storage_options,
                version,
                self.root_store.clone(),
                &self.hints,
            )
            .await?;
            #[cfg(unix)]
            let snapshot = match self.cache.open()? {
                Some(cache) => snapshot.with_cache(cache),
                None => snapshot,
            };
            let snapshot = snapshot.with_row_counts().await?;
            match &self.filter {
                Some(filter) => snapshot.with_filter(filter).await,
                None => Ok(snapshot),
            }
        })?;
        // The table's samples, and what the loader hands out (a transform may change them).
        let input_spec = snapshot.sample().clone();
        let spec = match &self.transforms.output {
            Some(output) => crate::transform::output_of(&input_spec, output),
            None => input_spec.clone(),
        };
        let sample_bytes = spec.tensor_bytes().max(input_spec.tensor_bytes()).max(1) as u64;
        let batch_bytes = self.batch_size as u64 * sample_bytes;
        // The budget covers the batches outside the stream too: those queued for the caller,
        // the one being assembled, the caller's, and the spares kept for recycling.
        let outside = self.outside_bytes(self.batch_size, sample_bytes);
        // (Too little left for the stream is refused below, with the smallest budget that works.)
        let stream_budget = self.memory_budget.saturating_sub(outside).max(1024);
        let stream = TableStream::builder(self.table.clone())
            .with_shard(shard)
            .with_uneven(self.uneven)
            .with_shuffle(settings.shuffle)
            .with_seed(settings.seed)
            .with_interleave(INTERLEAVE)
            .with_columns(
                self.columns
                    .clone()
                    .unwrap_or_else(|| default_columns(&snapshot)),
            )
            .with_memory_budget(stream_budget)
            .with_verify_checksums(self.verify);
        let stream = match self.row_group_prefetch {
            Some(n) => stream.with_prefetch(n),
            None => stream,
        };
        #[cfg(feature = "fault-hooks")]
        let stream = match self.fault_hook.clone() {
            Some(hook) => stream.with_fault_hook(hook),
            None => stream,
        };
        let stream = stream.build_on(Arc::new(snapshot));
        // Buffered row groups keep their budget share: the buffer takes at most half of the
        // stream's.
        if let Some((_, rows)) = self.shuffle {
            settings.buffer_rows =
                budget::buffer_rows(stream_budget, sample_bytes, rows, self.batch_size);
            if settings.buffer_rows < rows {
                tracing::warn!(
                    requested = rows,
                    fits = settings.buffer_rows,
                    "shuffle buffer reduced to fit the memory budget"
                );
            }
        }
        let files = stream.snapshot().file_set_hash();
        // A state brings its own order settings: check them before the budget, which depends
        // on them.
        let start = match &self.state {
            Some(state) => self.check_state(state, &mut settings, &files, sample_bytes)?,
            None => Position {
                epoch: self.start_epoch,
                closed: Vec::new(),
                world_size: self.world_size,
                batches: 0,
            },
        };
        if !stream.snapshot().files().is_empty() {
            self.check_budget(&runtime, &stream, &settings, sample_bytes)?;
        } else if outside + batch_bytes > self.memory_budget {
            return Err(LoaderError::Config(format!(
                "a memory budget of {} bytes cannot hold the {} batches of {} samples of {sample_bytes} bytes the loader keeps ({} queued ahead, the one being assembled, yours, {RECYCLED_SPARES} spares); the smallest budget that works is {} bytes",
                self.memory_budget,
                batches_outside(self.prefetch),
                self.batch_size,
                self.prefetch,
                outside + batch_bytes
            )));
        }
        let total: u64 = stream.rows_per_file().iter().sum();
        if self.epochs == Epochs::Infinite && settings.batches(total, self.world_size) == 0 {
            return Err(LoaderError::Config(format!(
                "endless epochs of no batch: the table has {total} rows, {} per rank of {}, batches of {}{}",
                voxlake_stream::order::rows_per_rank(total, self.world_size, self.uneven),
                self.world_size,
                self.batch_size,
                if self.drop_last {
                    " with drop_last"
                } else {
                    ""
                }
            )));
        }
        // Channels first applies to the first field (the volume; a mask has no channel axis).
        let first = spec.first();
        let channels = match (self.channels_first, first.shape().last()) {
            (true, Some(&c)) if first.shape().len() >= 2 => Some(c),
            (true, _) => {
                return Err(LoaderError::Config(format!(
                    "channels first needs at least two axes, the tensors are {:?}",
                    first.shape()
                )));
            }
            (false, _) => None,
        };
        // CUDA set up now (context, staging ring), not at the first batch.
        #[cfg(feature = "tch")]
        let feed = match self.device {
            Some(device) => {
                for (_, field) in spec.tensors() {
                    crate::torch::kind_of(field.dtype())?;
                }
                crate::torch::check_device(device)?;
                crate::torch::warm_up(device)?;
                let fields: Vec<usize> = spec.tensors().map(|(_, s)| s.nbytes()).collect();
                crate::feed::cuda(device, self.batch_size, &fields)?.map(Mutex::new)
            }
            None => None,
        };
        let end_epoch = match self.epochs {
            Epochs::Count(n) => Some(self.start_epoch.saturating_add(n)),
            Epochs::Infinite => None,
        };
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let shutdown = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = crossbeam_channel::bounded(self.prefetch);
        let recycled = Arc::new(Mutex::new(Vec::new()));
        let pool = match self.assembly_threads {
            1 => None,
            n => Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("voxlake-assemble-{i}"))
                    .build()
                    .map_err(|e| LoaderError::Internal(format!("the assembly threads: {e}")))?,
            )),
        };
        let producer = Producer {
            stream: stream.clone(),
            spec: spec.clone(),
            input_spec,
            transforms: self.transforms.clone(),
            settings,
            rank: self.rank,
            world_size: self.world_size,
            end_epoch,
            start: start.clone(),
            channels,
            counters: counters.clone(),
            stop: stop.clone(),
            shutdown: shutdown.clone(),
            hooks: self.hooks.clone(),
            #[cfg(feature = "tch")]
            device: self.device,
            #[cfg(feature = "tch")]
            feed,
            tx,
            recycled: recycled.clone(),
            pool,
            received: Default::default(),
        };
        let thread = std::thread::Builder::new()
            .name("voxlake-loader".into())
            .spawn(move || {
                runtime.block_on(producer.run());
                // Blocking decodes still running are not waited for.
                runtime.shutdown_background();
            })
            .map_err(|e| LoaderError::Internal(format!("spawning the loader thread: {e}")))?;
        let state_template = LoaderState {
            format: STATE_FORMAT,
            table: voxlake_stream::redact(&self.table),
            version: stream.snapshot().version(),
            files,
            file_count: stream.snapshot().files().len(),
            seed: settings.seed,
            shuffle: settings.shuffle,
            shuffle_buffer: self.shuffle.map_or(0, |s| s.1),
            buffer_rows: settings.buffer_rows,
            batch_size: settings.batch_size,
            drop_last: settings.drop_last,
            uneven: settings.uneven.as_str().to_string(),
            interleave: settings.interleave,
            world_size: self.world_size,
            rank: self.rank,
            epoch: start.epoch,
            closed: Vec::new(),
            batches: 0,
            samples_in_epoch: 0,
        };
        Ok(Loader {
            rx,
            stop,
            shutdown,
            _thread: thread,
            counters,
            stream,
            spec,
            started,
            settings,
            world_size: self.world_size,
            position: start,
            state_template,
            finished: false,
            meter: stall::StallMeter::default(),
            last_return: None,
            recycled,
            recycle_max: RECYCLED_SPARES,
        })
    }
}
