//! Streams the row groups of a voxlake Delta table: a pinned snapshot is the manifest (no
//! listing), a pure [`plan::Planner`] shards and shuffles, and an async pipeline fetches only
//! the projected byte ranges and decodes them off the runtime threads, within a memory budget.
//!
//! - [`Snapshot`]: the table at a version: files from the log, tensor spec, cached footers,
//!   row-group and column reads through [`object_store`].
//! - [`local`]: local tables read into recycled buffers.
//! - [`plan`]: which files and row groups a shard reads in an epoch, and in which order.
//! - [`TableStream`]: the entry point; `TableStream::builder(table).with_…().build()`.
#![warn(missing_docs)]

mod error;
#[cfg(unix)]
pub mod local;
pub mod location;
mod pipeline;
pub mod plan;
mod snapshot;

pub use error::{StreamError, redact, store_error_is_transient};
pub use object_store::ObjectStore;
pub use pipeline::{
    AbortOnDrop, RowGroupBatch, StreamBuilder, StreamStats, TableStream, spawn_ahead,
};
pub use plan::{Cursor, Shard};
pub use snapshot::{DataFile, READ_CONCURRENCY, ReadTimings, Snapshot};
