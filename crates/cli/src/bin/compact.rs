//! `compact`: numpy blobs → one Delta table of streaming-friendly Parquet files.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(voxlake_cli::compact(std::env::args_os()))
}
