//! The command lines, as the binaries and the Python package's console scripts run them:
//! [`voxlake`] (`voxlake bench`) and [`compact`] (`compact convert`, `optimize`, `inspect`, …).
//!
//! Each takes the process's arguments (the first is the program's name, as in
//! [`std::env::args_os`]) and returns its exit status. The libraries (`voxlake-compact`, the
//! `voxlake` facade) hold no argument parsing, progress bar or log subscriber: those are here.
//!
//! ```
//! // `--version` prints and succeeds; an unknown command is clap's usage error, status 2.
//! assert_eq!(voxlake_cli::voxlake(["voxlake", "--version"]), 0);
//! assert_eq!(voxlake_cli::voxlake(["voxlake", "no-such-command"]), 2);
//! assert_eq!(voxlake_cli::compact(["compact", "--version"]), 0);
//! ```
#![warn(missing_docs)]
// serde_json's `json!` recurses once per field of `voxlake bench`'s report.
#![recursion_limit = "256"]

mod compact;
mod voxlake;

pub use compact::{init_tracing, main as compact, progress_bar, with_progress_bar};
pub use voxlake::voxlake;
