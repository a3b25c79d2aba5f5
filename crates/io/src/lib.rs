//! Everything of voxlake that reads bytes: locations turned into URLs and store settings, the
//! mapped local store, the remote store with its node-local disk cache, reads in flight sized
//! to the store, work started ahead, and the Parquet reader over any store. It knows nothing
//! of Delta (no deltalake in its tree) nor of the pipeline above it.
//!
//! - [`location`]: paths and URLs, storage settings from the environment, reachability.
//! - [`local`]: local tables read as views of the page cache or into recycled buffers.
//! - [`remote`]: the store a remote table's data files are read through (parts, cache, counts).
//! - [`cache`]: the node-local disk cache of remote reads.
//! - [`reask`]: when a stalled read is asked again.
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

// The disk cache (`flock`, private folders), mapped reads and job folders are POSIX: voxlake
// runs on Linux (and builds on other Unixes), and says so rather than carrying branches no
// build compiles.
#[cfg(not(unix))]
compile_error!(
    "voxlake runs on Unix (Linux): its disk cache, mapped reads and job folders use POSIX calls"
);

pub mod ahead;
pub mod broken;
pub mod cache;
pub mod depth;
mod error;
pub mod inflight;
pub mod local;
pub mod location;
mod passthrough;
pub mod private;
pub mod reader;
pub mod reask;
pub mod remote;

pub use ahead::{AbortOnDrop, spawn_ahead};
pub use broken::RetryBroken;
pub use error::{IoError, panic_message, redact, store_error_is_transient};
pub use reader::ObjectFileReader;

// What `wrapper_store!` names from the crate that expands it.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
}
