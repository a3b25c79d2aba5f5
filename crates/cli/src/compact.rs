//! The `compact` command line ([`main`]) and the pieces it shares with `voxlake`'s.
//!
//! The `compact` binary is [`main`] over the process's arguments; the Python package's
//! `compact` console script is the same function, so both parse, print and fail alike.

mod args;
mod command;
mod print;

pub(crate) use args::{SampleArgs, StorageArgs, VersionArgs, say};
pub use args::{init_tracing, progress_bar, with_progress_bar};
pub use command::main;
