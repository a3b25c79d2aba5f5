//! `voxlake.convert`, `voxlake.inspect` and `voxlake.show`'s picture: the `compact` operations, run on a tokio runtime of
//! their own with the GIL released and Ctrl-C looked for every 50 ms (a conversion stopped so
//! resumes where it stood: its commits are whole). `convert` draws the `compact` CLI's progress
//! bar on stderr when it is a terminal.

use std::collections::HashMap;
use std::future::Future;

use pyo3::prelude::*;
use voxlake_compact::{CompactError, Compactor};
use voxlake_format::DType;

use crate::errors::{Kind, config, internal, raise, table_kind};
use crate::options::SIGNAL_CHECK;

/// A `compact` error as the exception of its kind.
pub(crate) fn compact_error(e: CompactError) -> PyErr {
    let kind = match &e {
        CompactError::Read(voxlake_stream::StreamError::Table(t)) => table_kind(t),
        CompactError::Labels { .. }
        | CompactError::EmptySource { .. }
        | CompactError::Arrow { .. } => Kind::Config,
        CompactError::Internal(_) => Kind::Voxlake,
        _ => Kind::Table,
    };
    raise(kind, e.to_string(), e.is_transient())
}

/// A compactor of `table` with the caller's store settings, if any.
pub(crate) fn compactor(
    table: String,
    storage_options: Option<HashMap<String, String>>,
) -> Compactor {
    let compactor = Compactor::new(table);
    match storage_options {
        Some(options) => compactor.with_storage_options(options),
        None => compactor,
    }
}

/// A runtime of its own for one `compact` operation (logs forwarded to Python's).
pub(crate) fn runtime() -> PyResult<tokio::runtime::Runtime> {
    crate::logs::install();
    voxlake_loader::tokio_runtime(2, "voxlake-compact")
        .map_err(|e| config(format!("cannot start the runtime: {e}")))
}

/// Ends `runtime`, waiting (the GIL released) for its threads and the blocking writes under
/// way: a process that forks next hands none of them on.
pub(crate) fn shut_down(py: Python<'_>, runtime: tokio::runtime::Runtime) {
    py.detach(|| runtime.shutdown_timeout(SHUTDOWN_WAIT));
}

/// The longest [`shut_down`] waits.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `work` on a runtime of its own thread, awaited with the GIL released; Ctrl-C ends the wait
/// (`KeyboardInterrupt`) and the runtime with it.
fn run<T: Send + 'static>(
    py: Python<'_>,
    work: impl Future<Output = Result<T, CompactError>> + Send + 'static,
) -> PyResult<T> {
    let runtime = runtime()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    runtime.spawn(async move {
        let _ = tx.send(work.await);
    });
    let outcome = loop {
        match py.detach(|| rx.recv_timeout(SIGNAL_CHECK)) {
            Ok(done) => break done.map_err(compact_error),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    break Err(interrupt);
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                break Err(internal(
                    "the conversion's task ended without an answer (a panic)",
                ));
            }
        }
    };
    shut_down(py, runtime);
    crate::logs::drain(py)?;
    outcome
}

pub(crate) fn to_python<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_string(value).map_err(|e| config(e.to_string()))?;
    py.import("json")?.call_method1("loads", (json,))
}

/// Converts the `.npy` objects under `src` (a local folder or a URL prefix) that are not in
/// `table` yet, creating it if needed, as `compact convert` does; returns the summary (files,
/// rows, bytes, version, where the time went) as a dict.
#[pyfunction]
#[pyo3(signature = (src, table, *, labels=None, shape=None, dtype=None, shard=None, storage_options=None, progress=true))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert<'py>(
    py: Python<'py>,
    src: String,
    table: String,
    labels: Option<String>,
    shape: Option<Vec<usize>>,
    dtype: Option<String>,
    shard: Option<(u32, u32)>,
    storage_options: Option<HashMap<String, String>>,
    progress: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mut compactor = compactor(table, storage_options);
    if let Some(labels) = labels {
        compactor = compactor.with_labels(labels);
    }
    if let Some(shape) = shape {
        compactor = compactor.with_shape(shape);
    }
    if let Some(dtype) = dtype {
        let dtype: DType = dtype
            .parse()
            .map_err(|e| config(format!("dtype {dtype}: {e}")))?;
        compactor = compactor.with_dtype(dtype);
    }
    if let Some((index, count)) = shard {
        if count == 0 || index >= count {
            return Err(config(format!(
                "shard ({index}, {count}): the index must be below the count"
            )));
        }
        compactor = compactor.with_shard(index, count);
    }
    let bar = progress.then(voxlake_cli::progress_bar);
    if let Some(bar) = &bar {
        compactor = voxlake_cli::with_progress_bar(compactor, bar);
    }
    let summary = run(py, async move { compactor.convert(&src).await });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    to_python(py, &summary?)
}

/// Describes `table` (any Delta table or folder of Parquet files voxlake can stream) as
/// `compact inspect --json` does: version, files, rows, bytes, row groups, tensor spec, labels;
/// with `row`, that one row as `compact inspect --row ID --json` does.
#[pyfunction]
#[pyo3(signature = (table, *, row=None, storage_options=None))]
pub(crate) fn inspect<'py>(
    py: Python<'py>,
    table: String,
    row: Option<String>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Bound<'py, PyAny>> {
    let compactor = compactor(table, storage_options);
    match row {
        Some(id) => {
            let info = run(py, async move { compactor.inspect_row(&id).await })?;
            to_python(py, &info)
        }
        None => {
            let info = run(py, async move { compactor.inspect().await })?;
            to_python(py, &info)
        }
    }
}

/// `voxlake.show`'s picture of the row `id` (as `compact inspect --row ID --png`): its width,
/// height, RGB bytes (row after row) and PNG bytes.
#[pyfunction]
#[pyo3(signature = (table, id, *, storage_options=None))]
pub(crate) fn picture<'py>(
    py: Python<'py>,
    table: String,
    id: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<(
    u32,
    u32,
    Bound<'py, pyo3::types::PyBytes>,
    Bound<'py, pyo3::types::PyBytes>,
)> {
    let compactor = compactor(table, storage_options);
    let picture = run(py, async move { compactor.row_picture(&id).await })?;
    let png = picture.png().map_err(compact_error)?;
    Ok((
        picture.width,
        picture.height,
        pyo3::types::PyBytes::new(py, &picture.rgb),
        pyo3::types::PyBytes::new(py, &png),
    ))
}
