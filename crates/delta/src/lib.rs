//! The Delta log of a table at a version: read once (the latest version, a fixed one, or the
//! one current at a time) (protocol, metadata, the active data files with
//! their deletion vectors and statistics), its reader features and column mapping checked. It
//! reads no data file and knows nothing of the table's samples (`voxlake-table` does).
//!
//! - [`DeltaLog`]: where a table is and how its log is read; [`DeltaLog::read`] gives the
//!   version ([`LogVersion`]) or, without a log, the folder's files ([`Found`]).
//! - the two readers of the log under one dispatcher (`read`): voxlake's own for a log of
//!   commits, the Delta kernel's for checkpoints and time travel by timestamp.
//! - [`FileList`]: the active files column by column, and its copy in the node's cache.
//! - [`Protocol`], [`ColumnMapping`]: the reader features and column names the log declares.
//! - [`agree`]: one version per job, agreed by its ranks through a marker (or the node's cache).
//! - [`stores`]: stores opened with deltalake's own factories, so sources and tables get the
//!   same settings.
//!
//! ```
//! use voxlake_delta::{AsOf, Protocol};
//!
//! assert_eq!(AsOf::from(Some(3)), AsOf::Version(3));
//! assert!(AsOf::parse_timestamp("2026-11-27T10:00:00Z").is_ok());
//! let protocol = Protocol {
//!     min_reader_version: 3,
//!     min_writer_version: 7,
//!     reader_features: vec!["deletionVectors".into(), "someFutureFeature".into()],
//!     writer_features: vec![],
//! };
//! assert!(protocol.check_readable().is_err());
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod agree;
mod as_of;
mod deletes;
mod error;
mod features;
mod file_list;
mod log_cache;
mod log_file;
mod log_memo;
mod mapping;
mod open;
mod partition;
mod read;
mod replayed;
pub mod stores;
mod version;

pub use as_of::AsOf;
pub use deletes::VectorDescriptor;
pub use error::DeltaError;
pub use features::{Protocol, SUPPORTED_READER_FEATURES};
pub use file_list::{DataFile, Deleted, FileList};
pub use mapping::{ColumnMapping, MappingMode};
pub use open::{DeltaLog, Found, Prior};
pub use partition::{HIVE_NULL, partition_column};
pub use read::LogAhead;
pub use version::LogVersion;
