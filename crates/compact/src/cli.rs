//! The `compact` command line ([`main`]) and the pieces it shares with `voxlake`'s.
//!
//! The `compact` binary is [`main`] over the process's arguments; the Python package's
//! `compact` console script is the same function, so both parse, print and fail alike.

mod args;
mod command;
mod print;

pub use args::{
    DEFAULT_LOG_FILTER, SampleArgs, StorageArgs, VersionArgs, init_tracing, parse_field,
    parse_key_value, parse_null, progress_bar, say, with_progress_bar,
};
pub use command::main;
