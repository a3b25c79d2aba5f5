//! `voxlake`: tools around the loader. `voxlake bench TABLE` measures it.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(voxlake_cli::voxlake(std::env::args_os()))
}
