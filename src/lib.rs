//! voxlake: stream numpy volumes from a Delta table on cloud storage into Rust training loops.
//!
//! This facade re-exports the member crates:
//!
//! - [`format`](mod@format): the table contract (tensor spec, schema, metadata keys, npy codec);
//! - [`compact`]: `.npy` blobs → one Delta table laid out for streaming;
//! - [`plan`]: the pure order of an epoch (files, row groups, ranks, shuffle buffer, resume);
//! - [`io`]: locations, the local and remote stores, the disk cache, reads in flight;
//! - [`delta`]: the Delta log at a version (readers, time travel, features, column mapping,
//!   deletion vectors, the file list);
//! - [`table`]: a table's data at a version (samples, filters, row-group reads);
//! - [`stream`]: the budgeted prefetch pipeline over a table's row groups;
//! - [`loader`]: the batching iterator a training loop calls;
//! - [`kernels`]: the copy kernels that fill a batch's memory from stored samples.
//!
//! The `voxlake` and `compact` command lines are the `voxlake-cli` crate's; test and bench
//! tooling (the fault proxy) lives in the unpublished `voxlake-testkit` crate.
#![warn(missing_docs)]

pub use voxlake_compact as compact;
pub use voxlake_delta as delta;
pub use voxlake_format as format;
pub use voxlake_io as io;
pub use voxlake_kernels as kernels;
pub use voxlake_loader as loader;
pub use voxlake_plan as plan;
pub use voxlake_stream as stream;
pub use voxlake_table as table;

pub use voxlake_delta::AsOf;
pub use voxlake_loader::{Batch, Loader, LoaderBuilder, LoaderState, Tensors};
pub use voxlake_plan::order::Uneven;

/// The README's examples, compiled as doctests so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// docs/usage.md's examples, compiled as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../docs/usage.md")]
pub struct UsageDoctests;
