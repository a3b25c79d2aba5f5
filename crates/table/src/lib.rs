//! A Delta table's data at a version: the version's log as `voxlake-delta` reads it, its
//! samples (the tensor column and its fields), a filter's selection, and reads of its row
//! groups, files and columns through `voxlake-io`'s stores. It knows nothing of the pipeline
//! that streams it.
//!
//! - [`Snapshot`]: the table at a version (its files, samples, schema, store), opened by
//!   [`SnapshotBuilder`] (`Snapshot::builder(location)…build()`).
//! - [`Scan`]: what a reader reads of a snapshot and the reads, made by [`ScanBuilder`]
//!   (`snapshot.scan_builder().with_filter(…).build()`).
//! - [`filter`]: the filter language and the statistics it skips by.
//! - [`rows`]: which rows of a row group are read (deletion vectors, a selection), as pure
//!   arithmetic.
//! - `options`: [`TableOptions`], how a table is opened, and the `with_*` setters every
//!   builder that opens one shares; [`ScanOptions`] and its setters likewise for a scan.
//! - [`hooks`]: fault injection at each stage of a read (feature `fault-hooks`, tests only).
//!
//! ```
//! use voxlake_table::filter::Filter;
//! use voxlake_table::rows::intersect;
//!
//! assert!(Filter::parse("label = 1 AND depth < 300").is_ok());
//! let both = intersect(Some([0, 2, 5].into()), Some(&[2, 5, 7].into()));
//! assert_eq!(both.as_deref(), Some(&[2, 5][..]));
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod checksums;
mod error;
pub mod filter;
pub mod hooks;
mod options;
mod row_index;
pub mod rows;
mod scan;
mod select;
mod snapshot;
mod values;
mod volumes;

pub use error::TableError;
pub use filter::FilterStats;
pub use options::{ScanOptions, TableOptions};
pub use row_index::{DuplicateId, RowIndex, RowIndexBuilder};
pub use scan::{RowPlace, Scan, ScanBuilder};
pub use snapshot::{FOOTER_CACHE_BYTES, READ_CONCURRENCY, ReadTimings, Snapshot, SnapshotBuilder};
pub use volumes::{Volume, Volumes};
