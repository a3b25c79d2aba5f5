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
//!
//! The table as it was at a time (`with_timestamp`; `with_version` fixes a version), one of
//! the table settings every builder that opens a table shares (`voxlake_table::TableOptions`):
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//! use voxlake_loader::Loader;
//!
//! // The table as it was a day ago.
//! let day_ago = SystemTime::now() - Duration::from_secs(86_400);
//! let loader = Loader::builder("az://cubes/table").with_timestamp(day_ago).build()?;
//! println!("reading version {}", loader.version());
//! # Ok::<(), voxlake_loader::LoaderError>(())
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod assemble;
mod batch;
pub mod budget;
mod builder;
mod checks;
mod counters;
mod device;
mod endpoint;
#[cfg(feature = "tch")]
mod feed;
mod fork;
mod loader;
mod lookup;
mod metrics;
mod mixture;
mod open;
mod patches;
mod producer;
mod recycle;
mod sampling;
// The staging ring feeds the CUDA path; pure, so it is built and tested without libtorch.
#[cfg_attr(not(feature = "tch"), allow(dead_code))]
mod ring;
pub mod stall;
mod start;
pub mod state;
mod stats;
#[cfg(feature = "tch")]
pub mod torch;
mod trace;
pub mod transform;
pub mod workers;

pub use batch::{Batch, FieldBatch, FieldRef, RowOrigin, Tensors};
pub use builder::{DEFAULT_MEMORY_BUDGET, DEFAULT_SHUFFLE_BUFFER, LoaderBuilder};
pub use device::TchTensor;
pub use fork::{live_threads, tokio_runtime};
pub use loader::Loader;
pub use lookup::Lookup;
pub use metrics::{Metric, MetricValue};
pub use mixture::Source;
pub use recycle::Recycler;
pub use start::launcher_job;
pub use state::LoaderState;
pub use stats::LoaderStats;
#[cfg(feature = "tch")]
pub use tch;
pub use trace::rank_path;

use voxlake_stream::StreamError;

/// Staging buffers in a CUDA feed's ring (feature `tch`), and in the Python package's
/// `voxlake.torch.to_device`: a batch's copy should finish long before the ring comes round
/// (11.5 MB at PCIe gen4's ~25 GB/s is ~0.5 ms: an estimate), so three keep the assembler from
/// waiting while the previous batch's copy is queued; `staging_waits` says when they do not.
/// Counted in the memory budget (see `LoaderBuilder::with_memory_budget`).
pub const STAGING_BUFFERS: usize = 3;

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
    /// A row whose field does not have the table's size (a corrupt or foreign file, a mask of
    /// another grid).
    #[error(
        "table {location}, file {file}: row {id} holds {found} bytes in field '{field}', its spec {spec} needs {expected}"
    )]
    BadRow {
        /// Table location.
        location: String,
        /// Data file.
        file: String,
        /// The row's id.
        id: String,
        /// The field (boxed: the error stays small).
        field: Box<str>,
        /// Bytes found.
        found: usize,
        /// Bytes expected.
        expected: usize,
        /// The field's spec.
        spec: Box<str>,
    },
    /// A state that cannot be resumed here: another table, file set or version, other order
    /// settings, or not a state at all.
    #[error("cannot resume from this state: {0}")]
    State(String),
    /// A stage of the loader panicked; the panic is reported here, never taken for the end of
    /// the data.
    #[error("the {stage} stage panicked on {object}: {message}")]
    Panicked {
        /// The stage (`assemble`, `loader`, …).
        stage: String,
        /// What it was working on.
        object: String,
        /// The panic's message.
        message: String,
    },
    /// A user transform returned an error or panicked.
    #[error("the transform failed on {object}: {message}")]
    Transform {
        /// The row (id and file) or the batch it was given.
        object: String,
        /// Its error, or its panic's message.
        message: String,
    },
    /// Staging or copying a batch to the device failed (libtorch's or CUDA's reason).
    #[error("copying {object} to {device} failed: {message}")]
    Device {
        /// The device (`Cuda(0)`, …).
        device: String,
        /// The batch (epoch and index).
        object: String,
        /// libtorch's message.
        message: String,
    },
    /// The background thread or runtime failed.
    #[error("internal error: {0}")]
    Internal(String),
    /// The trace asked for ([`LoaderBuilder::with_trace`]) could not be written (a disk that
    /// filled while it was written): said once, by the `next()` after the batch that ended
    /// it; the run goes on.
    #[error("the trace {path} could not be written: {message}")]
    Trace {
        /// The trace's file.
        path: String,
        /// Why.
        message: String,
    },
    /// This process was forked while loaders of its parent ran: their threads' entries in the
    /// lock table tokio shares are left dangling here, and a loader could crash on them.
    #[error(
        "this process was forked while {threads} thread(s) of its parent's voxlake loaders ran; a loader here could crash on what those threads left behind. Close or finish the parent's loaders before it forks (Python: `with Loader(...)`, `loader.close()`), or start the processes with 'spawn' or 'forkserver' (DataLoader's multiprocessing_context)"
    )]
    Forked {
        /// The parent's threads at the fork.
        threads: usize,
    },
}

/// A row's check (its checksum) run just before its sample's copy, on the copying thread
/// ([`voxlake_kernels::Check`]).
pub(crate) type Check<'a> = voxlake_kernels::Check<'a, LoaderError>;

impl LoaderError {
    /// Whether retrying later may succeed (a store or network fault).
    pub fn is_transient(&self) -> bool {
        matches!(self, LoaderError::Stream(e) if e.is_transient())
    }
}

/// How many epochs to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Epochs {
    /// This many, then the iterator ends.
    Count(u64),
    /// Until the loader is dropped.
    Infinite,
}
