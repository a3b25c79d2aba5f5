//! What `voxlake.torch` asks of the Rust side about its `DataLoader` workers
//! (`voxlake_loader::workers`): a worker's rank, a state fitted to this run's workers, the
//! pass's state after a batch, the versions a state names. States cross as the dicts
//! `Loader.state_dict()` gives; no Python code reads or writes their segment keys.

use pyo3::prelude::*;
use voxlake_loader::LoaderState;
use voxlake_loader::workers;

use crate::errors::loader_error;

/// A state dict as the Rust state.
fn state_of(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<LoaderState> {
    let json: String = py
        .import("json")?
        .call_method1("dumps", (state,))?
        .extract()?;
    LoaderState::from_json(&json).map_err(loader_error)
}

/// The Rust state as a dict.
fn dict_of<'py>(py: Python<'py>, state: &LoaderState) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (state.to_json(),))
}

/// `(rank, world_size)` the loader of worker `slot` of `workers` on rank `rank` of
/// `world_size` reads as.
#[pyfunction]
#[pyo3(name = "_worker_rank")]
pub(crate) fn worker_rank(
    rank: usize,
    world_size: usize,
    slot: usize,
    workers: usize,
) -> (usize, usize) {
    workers::worker_rank(rank, world_size, slot, workers)
}

/// `(state, shift)`: `state` fitted to `workers` workers on each of `world_size` ranks, and
/// the slot worker 0 plays.
#[pyfunction]
#[pyo3(name = "_state_fit")]
pub(crate) fn state_fit<'py>(
    py: Python<'py>,
    state: &Bound<'py, PyAny>,
    world_size: usize,
    workers: usize,
) -> PyResult<(Bound<'py, PyAny>, usize)> {
    let (fitted, shift) = workers::fit(state_of(py, state)?, world_size, workers);
    Ok((dict_of(py, &fitted)?, shift))
}

/// The pass's state on rank `rank` of `world_size` after the batch a worker handed out
/// between its states `before` and `after`.
#[pyfunction]
#[pyo3(name = "_state_compose")]
pub(crate) fn state_compose<'py>(
    py: Python<'py>,
    before: &Bound<'py, PyAny>,
    after: &Bound<'py, PyAny>,
    rank: usize,
    world_size: usize,
    workers: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let (before, after) = (state_of(py, before)?, state_of(py, after)?);
    dict_of(
        py,
        &workers::compose(&before, &after, rank, world_size, workers),
    )
}

/// Whether a state stands between two epochs.
#[pyfunction]
#[pyo3(name = "_state_at_boundary")]
pub(crate) fn state_at_boundary(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(state_of(py, state)?.at_boundary())
}

/// The versions a state names: each source's of a mixture, else the table's.
#[pyfunction]
#[pyo3(name = "_state_versions")]
pub(crate) fn state_versions(py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let state = state_of(py, state)?;
    Ok(match state.sources.is_empty() {
        true => vec![state.version],
        false => state.sources.iter().map(|s| s.version).collect(),
    })
}
