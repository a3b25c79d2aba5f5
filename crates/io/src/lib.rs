//! Everything of voxlake that reads bytes: locations turned into URLs and store settings, the
//! mapped local store, the remote store with its node-local disk cache, reads in flight sized
//! to the store, work started ahead, and the Parquet reader over any store. It knows nothing
//! of Delta (no deltalake in its tree) nor of the pipeline above it.
//!
//! - [`location`]: paths and URLs, storage settings from the environment, reachability.
//! - [`local`]: local tables read as views of the page cache or into recycled buffers.
//! - [`remote`]: the store a remote table's data files are read through (parts, cache, counts).
//! - [`cache`]: the node-local disk cache of remote reads.
//! - [`log_cache`]: a store that reads a Delta log's immutable objects through that cache.
//! - [`stall`]: when a read has stalled and is asked again.
//! - [`depth`], [`inflight`]: reads in flight sized to the store (Little's law).
//! - [`ahead`]: futures run ahead of their consumer, a panic an error.
//! - [`broken`]: a store that asks again where an answer broke and object_store does not.
//! - [`reader`]: parquet's `AsyncFileReader` over any store, given the file's size.
//!
//! ```
//! use voxlake_io::location::to_url;
//!
//! assert_eq!(to_url("/data/cubes", true)?.as_str(), "file:///data/cubes/");
//! assert!(to_url("ftp://host/x", true).is_err());
//! # Ok::<(), voxlake_io::IoError>(())
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod ahead;
pub mod broken;
#[cfg(unix)]
pub mod cache;
pub mod depth;
mod error;
pub mod inflight;
#[cfg(unix)]
pub mod local;
pub mod location;
#[cfg(unix)]
pub mod log_cache;
#[cfg(unix)]
pub mod log_memo;
mod passthrough;
#[cfg(unix)]
pub mod private;
pub mod reader;
#[cfg(unix)]
pub mod remote;
pub mod stall;

pub use ahead::{AbortOnDrop, spawn_ahead};
pub use broken::RetryBroken;
pub use error::{IoError, panic_message, redact, store_error_is_transient};
pub use reader::ObjectFileReader;
