//! The budgeted prefetch pipeline: a scan's row groups, in the order
//! [`voxlake_plan`] deals them to this rank, fetched ahead and decoded off the runtime threads
//! within a memory budget, handed out as [`RowGroupBatch`]es.
//!
//! - [`TableStream`]: the entry point; `TableStream::builder(table).with_…().build()`.
//! - [`StreamBuilder`]: what to read (a table it opens, with its version, filter, columns,
//!   cache…; or scans already made: [`TableStream::over`]) and how (checks, shard, seed,
//!   budget, reads in flight).
//! - [`StreamStats`]: where the time went, the reads in flight, the cache's counts.
//! - [`Sources`]: the scans read, one table's or a mixture's sources'.
//!
//! It re-exports nothing of the crates below it: a snapshot, a filter or the store settings are
//! `voxlake_table`'s, locations, the cache and reads in flight `voxlake_io`'s, orders and
//! shards `voxlake_plan`'s, each under its one path.
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod builder;
mod error;
mod group;
mod kept;
mod pipeline;
mod read_options;
mod sources;
mod stats;

pub use builder::{AtLocation, OverSources, StreamBuilder};
pub use error::StreamError;
pub use group::RowGroupBatch;
pub use pipeline::TableStream;
pub use read_options::{ReadOptions, Verify};
pub use sources::Sources;
pub use stats::{BudgetProgress, GroupBudget, StreamStats};
