//! voxlake for Python and PyTorch: the Rust [`Loader`](voxlake_loader::Loader) as the
//! `voxlake._voxlake` extension module, which the `voxlake` package (`python/voxlake`)
//! re-exports. Built as an abi3 wheel by maturin (`pyproject.toml` at the repository root).
//!
//! One job per module: `options` applies the Python keyword arguments to the Rust builder
//! (the one list of them), `loader` is the `Loader` class (iteration with the GIL released,
//! state, epochs), `lookup` the `Lookup` class (rows by position or id, for `MapDataset`), `arrays` hands a batch's buffers to numpy without a copy, `batch_transform` runs a
//! Python callable on each batch on the loader's thread, `compact`
//! runs `convert` and `inspect`, `cli` the console scripts, `staging` copies a batch into
//! `voxlake.torch.to_device`'s page-locked buffers, `logs` hands the crates' `tracing` events to Python's `logging`, `shared` the
//! compare-and-swap
//! `voxlake.torch.Dataset`'s passes agree on, `workers` a DataLoader worker's rank and the pass's state, `errors` turns the crates' errors into
//! the exceptions of `python/voxlake/_errors.py`.

#![warn(missing_docs)]
// Errors are exceptions: a panic here would reach Python as pyo3's `PanicException`.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod arrays;
mod batch_transform;
mod cli;
mod compact;
mod errors;
mod extract;
mod loader;
mod logs;
mod lookup;
mod metrics;
mod mixture;
mod options;
mod sampling;
mod setters;
mod shared;
mod staging;
mod transforms;
mod volumes;
mod workers;
mod write;

use pyo3::prelude::*;

/// The extension module: `voxlake._voxlake`.
#[pymodule]
fn _voxlake(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loader::Loader>()?;
    m.add_class::<arrays::TensorOwner>()?;
    m.add_class::<lookup::Lookup>()?;
    m.add_class::<metrics::WaitMeter>()?;
    m.add_function(wrap_pyfunction!(options::loader_options, m)?)?;
    m.add_function(wrap_pyfunction!(setters::_setters, m)?)?;
    m.add_function(wrap_pyfunction!(loader::default_rank, m)?)?;
    m.add_function(wrap_pyfunction!(loader::default_job, m)?)?;
    m.add_function(wrap_pyfunction!(loader::live_threads, m)?)?;
    m.add_function(wrap_pyfunction!(compact::convert, m)?)?;
    m.add_function(wrap_pyfunction!(compact::inspect, m)?)?;
    m.add_function(wrap_pyfunction!(compact::picture, m)?)?;
    m.add_function(wrap_pyfunction!(write::write_rows, m)?)?;
    m.add_function(wrap_pyfunction!(write::write_arrow, m)?)?;
    m.add_function(wrap_pyfunction!(volumes::write_volumes, m)?)?;
    m.add_function(wrap_pyfunction!(volumes::grid_origins, m)?)?;
    m.add_function(wrap_pyfunction!(cli::run_command, m)?)?;
    m.add_function(wrap_pyfunction!(staging::copy_into, m)?)?;
    m.add_function(wrap_pyfunction!(shared::compare_exchange, m)?)?;
    m.add_function(wrap_pyfunction!(workers::worker_rank, m)?)?;
    m.add_function(wrap_pyfunction!(workers::state_fit, m)?)?;
    m.add_function(wrap_pyfunction!(workers::state_compose, m)?)?;
    m.add_function(wrap_pyfunction!(workers::state_at_boundary, m)?)?;
    m.add_function(wrap_pyfunction!(workers::state_versions, m)?)?;
    let at_exit = wrap_pyfunction!(batch_transform::at_exit, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (at_exit,))?;
    let kwargs = pyo3::types::PyDict::new(m.py());
    kwargs.set_item(
        "after_in_child",
        wrap_pyfunction!(batch_transform::after_fork_in_child, m)?,
    )?;
    m.py()
        .import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("STAGING_BUFFERS", voxlake_loader::STAGING_BUFFERS)?;
    m.add("COUNTERS", metrics::counters())?;
    m.add(
        "DEFAULT_MEMORY_BUDGET",
        voxlake_loader::DEFAULT_MEMORY_BUDGET,
    )?;
    Ok(())
}
