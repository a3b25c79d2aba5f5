//! [`LoaderBuilder`]: the loader's settings, checked at `build()`, and the start of its work.

use std::sync::Arc;

use voxlake_format::SampleSpec;
use voxlake_stream::ReadOptions;
use voxlake_table::{ScanOptions, TableOptions};

use crate::Epochs;
use crate::batch::Batch;
use crate::state::LoaderState;
use crate::transform::{Sample, TransformError, TransformRng};

/// Configures a [`Loader`](crate::Loader).
#[derive(Clone)]
pub struct LoaderBuilder {
    pub(crate) table: String,
    /// How the table is opened (version, store settings, sample columns, cache, job).
    pub(crate) options: TableOptions,
    /// What is read of it (a filter).
    pub(crate) scan: ScanOptions,
    pub(crate) batch_size: usize,
    pub(crate) epochs: Epochs,
    pub(crate) start_epoch: u64,
    pub(crate) shuffle: Option<(u64, usize)>,
    pub(crate) drop_last: bool,
    /// What the stream reads of each row group (columns, checksums), the uneven policy, hooks.
    pub(crate) read: ReadOptions,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    /// Take the rank and world size from the launcher's variables at `build()`.
    pub(crate) rank_from_env: bool,
    pub(crate) node_affinity: voxlake_plan::launch::NodeAffinity,
    pub(crate) channels_first: bool,
    pub(crate) memory_budget: u64,
    pub(crate) prefetch: usize,
    /// Row-group reads in flight (`None`: sized to the store as it runs).
    pub(crate) row_group_prefetch: Option<usize>,
    /// Where the metrics are served (`with_metrics_port`), if anywhere.
    pub(crate) metrics_port: Option<u16>,
    /// Where the trace of the first batches goes (`with_trace`).
    pub(crate) trace: Option<std::path::PathBuf>,
    /// The batches it covers.
    pub(crate) trace_batches: u64,
    pub(crate) runtime_threads: usize,
    pub(crate) assembly_threads: usize,
    pub(crate) state: Option<LoaderState>,
    /// How each epoch draws its rows.
    pub(crate) sampling: voxlake_plan::sample::Sampling,
    /// A mixture's sources (`None`: the one table `table`).
    pub(crate) sources: Option<Vec<crate::Source>>,
    pub(crate) transforms: crate::transform::Transforms,
    pub(crate) device: Option<crate::device::Device>,
}

/// A quarter of the cores, 1 to 4.
fn default_assembly_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).clamp(1, 4))
}

/// The shuffle buffer's rows where a front end (the `voxlake` CLI, the Python package) shuffles
/// without being told a size ([`LoaderBuilder::with_shuffle`]).
pub const DEFAULT_SHUFFLE_BUFFER: usize = 1024;

/// Bytes a loader holds at most unless [`LoaderBuilder::with_memory_budget`] says otherwise.
pub const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;

/// Batches a trace covers unless [`LoaderBuilder::with_trace_batches`] says otherwise.
pub(crate) const DEFAULT_TRACE_BATCHES: u64 = 200;

/// Files whose row groups are read round-robin when shuffling.
pub(crate) const INTERLEAVE: usize = 4;

/// Batches given back with `Loader::recycle` kept for reuse: enough that the loader's and the
/// loop's paces drifting apart neither drops one nor makes a fresh one mid-epoch (each fresh
/// batch's pages are faulted and zeroed: docs/benchmarks.md).
pub(crate) const RECYCLED_SPARES: usize = 4;

/// Batches the loader holds outside the stream: `prefetch` queued for the caller, the one
/// being assembled, the caller's, and the recycled spares.
pub(crate) fn batches_outside(prefetch: usize) -> u64 {
    (prefetch + 2 + RECYCLED_SPARES) as u64
}

impl LoaderBuilder {
    /// The order settings the builder's options make (the shuffle buffer at a batch until the
    /// budget sizes it; no node affinity).
    pub(crate) fn order_settings(&self) -> voxlake_plan::resume::OrderSettings {
        voxlake_plan::resume::OrderSettings {
            seed: self.shuffle.map_or(0, |s| s.0),
            shuffle: self.shuffle.is_some(),
            buffer_rows: self.batch_size,
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            uneven: self.read.uneven,
            interleave: INTERLEAVE,
            ..voxlake_plan::resume::OrderSettings::plain()
        }
    }

    /// Host bytes the loader holds outside the stream: [`batches_outside`] batches, or for a
    /// CUDA device (whose queued batches are in device memory) the staging ring's buffers of
    /// a batch and its labels, whichever is more.
    pub(crate) fn outside_bytes(&self, batch_size: usize, sample_bytes: u64) -> u64 {
        let batches = batches_outside(self.prefetch) * batch_size as u64 * sample_bytes;
        if self.device.is_some_and(crate::device::is_cuda) {
            let staged = crate::STAGING_BUFFERS as u64 * batch_size as u64 * (sample_bytes + 8);
            return batches.max(staged);
        }
        batches
    }
}

impl std::fmt::Debug for LoaderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only.
        f.debug_struct("LoaderBuilder")
            .field("table", &voxlake_io::redact(&self.table))
            .field("options", &self.options)
            .field("batch_size", &self.batch_size)
            .field("epochs", &self.epochs)
            .field("shuffle", &self.shuffle)
            .field("read", &self.read)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("rank_from_env", &self.rank_from_env)
            .field("node_affinity", &self.node_affinity)
            .field("memory_budget", &self.memory_budget)
            .field("resumed", &self.state.is_some())
            .field("sampling", &self.sampling)
            .finish()
    }
}

impl LoaderBuilder {
    pub(crate) fn new(table: String) -> Self {
        LoaderBuilder {
            table,
            options: TableOptions::default(),
            scan: ScanOptions::default(),
            batch_size: 32,
            epochs: Epochs::Count(1),
            start_epoch: 0,
            shuffle: None,
            drop_last: false,
            read: ReadOptions::default(),
            rank: 0,
            world_size: 1,
            rank_from_env: false,
            node_affinity: voxlake_plan::launch::NodeAffinity::Off,
            channels_first: false,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            prefetch: 2,
            row_group_prefetch: None,
            metrics_port: None,
            trace: None,
            trace_batches: DEFAULT_TRACE_BATCHES,
            runtime_threads: 2,
            assembly_threads: default_assembly_threads(),
            state: None,
            sampling: Default::default(),
            sources: None,
            transforms: Default::default(),
            device: None,
        }
    }

    voxlake_table::table_options_setters!(options);
    voxlake_table::scan_options_setters!(scan);
    voxlake_stream::read_options_setters!(read);

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
    /// (see [`launch::LAUNCHERS`](voxlake_plan::launch::LAUNCHERS)); rank 0 of 1 where none are set
    /// (a process started on its own, an `sbatch` script). `build()` fails, naming the
    /// variables, where only one of a pair is set or a value is not a valid rank. The loader
    /// logs where its rank came from; [`Loader::rank`](crate::Loader::rank) says it.
    pub fn with_rank_from_env(mut self) -> Self {
        self.rank_from_env = true;
        self
    }

    /// Keep each node's ranks on the same files every epoch, so that a node's cache
    /// ([`with_cache`](Self::with_cache)) holds what its next epoch reads: this rank runs on
    /// node `node` of `nodes`, the ranks numbered in blocks node after node (ranks
    /// `k·L … (k+1)·L − 1` on node `k`, as torchrun numbers them). Every row is still read once
    /// an epoch and every rank gets as many batches, but a node's ranks see only their node's
    /// share of the table, reshuffled each epoch ([`affinity`](voxlake_plan::affinity);
    /// the trade is measured in `docs/scale-out.md`). Only when shuffling; `build()` fails
    /// where `nodes` does not divide the world size or the rank is not in its node's block.
    pub fn with_node_affinity(mut self, node: usize, nodes: usize) -> Self {
        self.node_affinity = voxlake_plan::launch::NodeAffinity::Given(node, nodes);
        self
    }

    /// [`with_node_affinity`](Self::with_node_affinity) with the node and the number of nodes
    /// from the launcher's variables, read at `build()` ([`NodeVars`](voxlake_plan::launch::NodeVars):
    /// torchrun's `GROUP_RANK` and `LOCAL_WORLD_SIZE`, Open MPI's and MPICH's ranks per
    /// node, Slurm's `SLURM_NODEID` and `SLURM_STEP_NUM_NODES`). A process started on its own
    /// is one node; a launcher that says no node is an error.
    pub fn with_node_affinity_from_env(mut self) -> Self {
        self.node_affinity = voxlake_plan::launch::NodeAffinity::FromEnv;
        self
    }

    /// How each epoch draws its rows ([`voxlake_plan::sample`]): a split that never moves,
    /// class-balanced or weighted draws (with replacement), an epoch size, a new subset each
    /// epoch. Checked at `build()` before the table opens (an error names the option); the
    /// columns it needs (`id`, `label`, a weight column) are read once then. Draws are dealt
    /// so that every rank gets each label's share; a state records the spec, and resumes only
    /// under the same one.
    ///
    /// ```no_run
    /// use voxlake_loader::Loader;
    /// use voxlake_plan::sample::Sampling;
    /// use voxlake_plan::split::Split;
    ///
    /// let shares = vec![("train".to_string(), 0.9), ("val".to_string(), 0.1)];
    /// let loader = Loader::builder("/data/cubes-table")
    ///     .with_shuffle(7, 1024)
    ///     .with_sampling(
    ///         Sampling::default()
    ///             .with_balance_labels()
    ///             .with_split(Split::new("train", shares)),
    ///     )
    ///     .build()?;
    /// # Ok::<(), voxlake_loader::LoaderError>(())
    /// ```
    pub fn with_sampling(mut self, sampling: voxlake_plan::sample::Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Resume from a state taken with [`Loader::state`](crate::Loader::state): the batches that follow are those
    /// the uninterrupted run would have given. The table is read at the state's version. The
    /// rank and world size are this builder's: with another world size, the rows of the
    /// epoch no rank has delivered yet are dealt over the new ranks. The order settings
    /// (batch size, shuffle, `drop_last`, uneven policy) must be the state's. The state's
    /// epoch and position win over [`with_start_epoch`](Self::with_start_epoch): the run
    /// ends where `start + epochs` says, but not before the state's epoch is done (a state
    /// taken at that end, between two epochs, leaves nothing to run).
    pub fn with_state(mut self, state: LoaderState) -> Self {
        self.state = Some(state);
        self
    }

    /// Move the tensor's last axis (channels) right after the batch axis: `[B, C, …]`.
    pub fn with_channels_first(mut self, channels_first: bool) -> Self {
        self.channels_first = channels_first;
        self
    }

    /// Bytes for everything the loader holds (default 1 GiB): the table's file list (~80 bytes
    /// a file), the batches queued for you, being assembled, yours and four recycled spares, and
    /// the rest for row groups fetched, decoded and buffered, of which the shuffle buffer takes
    /// at most half, and what no read asks for to keep row groups between epochs
    /// ([`with_keep_row_groups`](Self::with_keep_row_groups)). `build()` refuses a budget that cannot stream the table, naming the
    /// smallest that can. Not in it: footers (at most `FOOTER_CACHE_BYTES`, 64 MiB, of the
    /// most recently used) and the open's own peak (deltalake's replay of the log).
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Serves the loader's [`metrics`](crate::Loader::metrics) on `http://127.0.0.1:{port}/metrics`
    /// in Prometheus' text format while it lives (off by default; 0: a port the system picks,
    /// [`Loader::metrics_address`](crate::Loader::metrics_address)); rendered at most every
    /// 100 ms from the loop's thread. A port another process holds fails `build()` naming it:
    /// give each process (each rank, each `DataLoader` worker) its own.
    pub fn with_metrics_port(mut self, port: u16) -> Self {
        self.metrics_port = Some(port);
        self
    }

    /// Writes a Chrome trace-event file of the first 200 batches to `path` (opens in Perfetto
    /// and `chrome://tracing`): a track per thread, a span for each wait inside `next()`, each
    /// batch's assembly, each row group's fetch and decode, each store request (arguments:
    /// the batch, the file and row group, the object and bytes). Off by default. `{rank}` in
    /// `path` is replaced by the rank; with several ranks and no `{rank}`, the rank goes before
    /// the extension (`trace.rank3.json`). A path that cannot be written fails `build()`.
    ///
    /// ```no_run
    /// let loader = voxlake_loader::Loader::builder("az://cubes/table")
    ///     .with_trace("trace-{rank}.json")
    ///     .with_trace_batches(50)
    ///     .build()?;
    /// # Ok::<(), voxlake_loader::LoaderError>(())
    /// ```
    pub fn with_trace(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// The batches [`with_trace`](Self::with_trace) covers (default 200): the file is complete
    /// once the loop received that many (or the run ended, or the loader was dropped).
    pub fn with_trace_batches(mut self, batches: u64) -> Self {
        self.trace_batches = batches;
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
    /// pace, no more than the store's bandwidth-delay product; see `voxlake_io::depth`),
    /// within the memory budget.
    pub fn with_row_group_prefetch(mut self, row_groups: usize) -> Self {
        self.row_group_prefetch = Some(row_groups.max(1));
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
    /// budget and [`Loader::spec`](crate::Loader::spec) follow `output`. A `TensorSpec` declares the first field
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

    /// Runs `augments` in order on every sample, on the assembly threads: transforms chosen by
    /// name with parameters (random flips and crops, normalization, casts; see
    /// [`Augment`](crate::transform::Augment)), seeded like [`with_transform`](Self::with_transform)'s.
    /// The sample handed out follows from the table's (a crop's shape, a cast's type). Not
    /// with `with_transform`: a closure can do what these do itself.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let data = voxlake_compact::synth::generate(dir.path(), 4, 1)?;
    /// # let table = dir.path().join("table").to_string_lossy().into_owned();
    /// # tokio::runtime::Runtime::new()?.block_on(
    /// #     voxlake_compact::Compactor::new(&table).convert(&data.cubes.to_string_lossy()))?;
    /// use voxlake_format::DType;
    /// use voxlake_loader::Loader;
    /// use voxlake_loader::transform::Augment;
    ///
    /// let loader = Loader::builder(&table)
    ///     .with_batch_size(2)
    ///     .with_augment(vec![
    ///         Augment::Flip { axes: vec![0, 1, 2], p: 0.5 },
    ///         Augment::Crop { shape: vec![24, 24, 8, 10] },
    ///         Augment::Normalize { mean: 0.5, std: 0.25 },
    ///         Augment::Cast(DType::F16),
    ///     ])
    ///     .build()?;
    /// for batch in loader {
    ///     let batch = batch?;
    ///     assert_eq!(batch.tensors.shape(), [2, 24, 24, 8, 10]);
    ///     assert_eq!(batch.tensors.dtype(), DType::F16);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_augment(mut self, augments: Vec<crate::transform::Augment>) -> Self {
        self.transforms.named = augments;
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
}
