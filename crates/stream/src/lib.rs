//! The budgeted prefetch pipeline: a pinned snapshot's row groups, in the order
//! [`voxlake_plan`] deals them to this rank, fetched ahead and decoded off the runtime threads
//! within a memory budget, handed out as [`RowGroupBatch`]es.
//!
//! - [`TableStream`]: the entry point; `TableStream::builder(table).with_…().build()`.
//! - [`StreamBuilder`]: what to read (version, columns, filter, shard, seed) and how (budget,
//!   reads in flight, cache).
//! - [`StreamStats`]: where the time went, the reads in flight, the cache's counts.
//!
//! The layers below are re-exported under their old paths, so a user of this crate sees one
//! API: [`Snapshot`] and [`filter`] from `voxlake-table`; [`location`], [`local`], [`cache`],
//! [`depth`], [`inflight`] from `voxlake-io`; [`plan`], [`order`], [`mixer`], [`replay`] from
//! `voxlake-plan`.
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod builder;
mod error;
mod group;
mod pipeline;
mod read_options;
mod stats;

pub use voxlake_io::{
    AbortOnDrop, IoError, ObjectFileReader, ahead, depth, inflight, panic_message, redact,
    spawn_ahead, store_error_is_transient,
};
pub use voxlake_io::{cache, local};
pub use voxlake_plan::{affinity, mixer, order, plan, replay};
pub use voxlake_table::{
    AsOf, DataFile, FileList, FilterStats, MappingMode, Protocol, READ_CONCURRENCY, ReadTimings,
    SUPPORTED_READER_FEATURES, Snapshot, TableError, TableOptions, filter, hooks, options, rows,
    stores,
};

/// Locations (`voxlake_io::location`) and the stores opened from them with deltalake's
/// factories (`voxlake_table::stores`), under the one path they had before the split.
pub mod location {
    pub use voxlake_io::location::*;
    pub use voxlake_table::stores::{ensure_reachable, open_store, register_handlers};
}

pub use builder::{StreamBuilder, default_columns};
pub use error::StreamError;
pub use group::RowGroupBatch;
pub use object_store::ObjectStore;
pub use order::Uneven;
pub use pipeline::TableStream;
pub use plan::Shard;
pub use read_options::ReadOptions;
pub use stats::{BudgetProgress, GroupBudget, StreamStats};
