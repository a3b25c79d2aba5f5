//! Streams the row groups of a voxlake Delta table: a pinned snapshot is the manifest (no
//! listing), a pure [`plan::Planner`] shards and shuffles, and an async pipeline fetches only
//! the projected byte ranges and decodes them off the runtime threads, within a memory budget.
//!
//! - [`Snapshot`]: the table at a version: files from the log, tensor spec, cached footers,
//!   row-group and column reads through [`object_store`].
//! - [`local`]: local tables read into recycled buffers.
//! - [`cache`]: the node-local disk cache of remote reads (`with_cache`).
//! - [`depth`], [`inflight`]: reads in flight sized to the store (Little's law).
//! - [`plan`]: the order of files and row groups in an epoch; the seeded generator.
//! - [`order`]: the epoch's rows dealt to ranks (equal counts, pad or drop), as units of reading.
//! - [`mixer`]: the shuffle buffer as a pure state machine.
//! - [`replay`]: where an epoch stands after some batches, for exact and elastic resume.
//! - [`hooks`]: fault injection for tests (feature `fault-hooks`).
//! - [`TableStream`]: the entry point; `TableStream::builder(table).with_…().build()`.
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod ahead;
mod builder;
#[cfg(unix)]
pub mod cache;
pub mod depth;
mod error;
pub mod filter;
mod group;
pub mod hooks;
pub mod inflight;
#[cfg(unix)]
pub mod local;
pub mod location;
pub mod mixer;
pub mod order;
mod pipeline;
pub mod plan;
#[cfg(unix)]
mod remote;
pub mod replay;
mod select;
mod snapshot;
mod stats;

pub use ahead::{AbortOnDrop, spawn_ahead};
pub use builder::{StreamBuilder, default_columns};
pub use error::{StreamError, panic_message, redact, store_error_is_transient};
pub use group::RowGroupBatch;
pub use object_store::ObjectStore;
pub use order::Uneven;
pub use pipeline::TableStream;
pub use plan::Shard;
pub use select::FilterStats;
pub use snapshot::{
    AsOf, DataFile, MappingMode, Protocol, READ_CONCURRENCY, ReadTimings,
    SUPPORTED_READER_FEATURES, Snapshot,
};
pub use stats::{BudgetProgress, GroupBudget, StreamStats};
