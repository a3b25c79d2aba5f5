//! The `compact` and `voxlake` console scripts: the Rust command lines run in the Python
//! process (`python/voxlake/_cli.py` calls this), so the wheel needs no binaries of its own.

use std::ffi::OsString;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::no_panic;

/// The exit status of a Rust program that panicked.
const PANICKED: u8 = 101;

/// Runs the command line `name` (`compact` or `voxlake`) with `argv` (`sys.argv`: the program
/// first) with the GIL released, and returns its exit status. It prints as the binary does and
/// handles signals as the binary does: the caller restores their default actions first.
#[pyfunction]
pub(crate) fn run_command(py: Python<'_>, name: &str, argv: Vec<OsString>) -> PyResult<u8> {
    let command: fn(Vec<OsString>) -> u8 = match name {
        "compact" => voxlake_cli::compact,
        "voxlake" => voxlake_cli::voxlake,
        other => {
            return Err(PyValueError::new_err(format!(
                "no command line named {other:?} (compact, voxlake)"
            )));
        }
    };
    // A panic has printed its message (the panic hook) as the binary's would; its status is
    // the binary's too.
    Ok(py
        .detach(|| no_panic(name, || command(argv)))
        .unwrap_or(PANICKED))
}
