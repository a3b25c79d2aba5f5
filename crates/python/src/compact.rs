//! `voxlake.convert` and `voxlake.inspect`: the `compact` operations, run on a tokio runtime of
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
fn compact_error(e: CompactError) -> PyErr {
    let kind = match &e {
        CompactError::Read(voxlake_stream::StreamError::Table(t)) => table_kind(t),
        CompactError::Labels { .. } | CompactError::EmptySource { .. } => Kind::Config,
        CompactError::Internal(_) => Kind::Voxlake,
        _ => Kind::Table,
    };
    raise(kind, e.to_string(), e.is_transient())
}

/// A runtime of its own for one `compact` operation (logs forwarded to Python's).
fn runtime() -> PyResult<tokio::runtime::Runtime> {
    crate::logs::install();
    voxlake_loader::tokio_runtime(2, "voxlake-compact")
        .map_err(|e| config(format!("cannot start the runtime: {e}")))
}

/// Ends `runtime`, waiting (the GIL released) for its threads and the blocking writes under
/// way: a process that forks next hands none of them on.
fn shut_down(py: Python<'_>, runtime: tokio::runtime::Runtime) {
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

fn to_python<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
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
    let mut compactor = Compactor::new(table);
    if let Some(options) = storage_options {
        compactor = compactor.with_storage_options(options);
    }
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
/// `compact inspect --json` does: version, files, rows, bytes, row groups, tensor spec, labels.
#[pyfunction]
#[pyo3(signature = (table, *, storage_options=None))]
pub(crate) fn inspect<'py>(
    py: Python<'py>,
    table: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut compactor = Compactor::new(table);
    if let Some(options) = storage_options {
        compactor = compactor.with_storage_options(options);
    }
    let info = run(py, async move { compactor.inspect().await })?;
    to_python(py, &info)
}

/// A row for [`write_rows`]: id, label and each field's little-endian C-order bytes (a text
/// field's UTF-8).
type PyRow = (String, Option<i64>, Vec<Vec<u8>>);

/// Writes the rows `rows` yields (`(id, label, [field bytes…])`, each field as `fields` says:
/// `(name, shape, dtype)`, dtype `"text"` for a text field) into `table` through `compact`'s writer (row groups sized for
/// streaming, commits in windows; rows whose id the table holds are skipped); `progress` is
/// called with the rows taken so far. Returns the summary as a dict. The Python `voxlake.write`
/// makes the rows from dicts of numpy arrays.
#[pyfunction]
#[pyo3(signature = (table, fields, rows, *, storage_options=None, progress=None))]
pub(crate) fn write_rows<'py>(
    py: Python<'py>,
    table: String,
    fields: Vec<(String, Vec<usize>, String)>,
    rows: Bound<'py, PyAny>,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    use voxlake_format::{FieldKind, SampleSpec, TensorSpec};
    let mut specs = Vec::with_capacity(fields.len());
    for (name, shape, dtype) in fields {
        if dtype == "text" {
            specs.push((name, FieldKind::Text));
            continue;
        }
        let dtype: DType = dtype
            .parse()
            .map_err(|e| config(format!("field {name}: dtype {dtype}: {e}")))?;
        specs.push((name, FieldKind::Tensor(TensorSpec::new(shape, dtype))));
    }
    let sample = SampleSpec::new(specs).map_err(|e| config(format!("fields: {e}")))?;
    let mut compactor = Compactor::new(table);
    if let Some(options) = storage_options {
        compactor = compactor.with_storage_options(options);
    }
    let runtime = runtime()?;
    // A few rows ahead of the writer; the writer's task ends the channel on its first error.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<PyRow>(16);
    let writing = runtime.spawn(async move {
        let mut writer = compactor.writer(sample).await?;
        while let Some((id, label, fields)) = rx.recv().await {
            writer.push(&id, label, fields).await?;
        }
        writer.finish().await
    });
    let mut taken = 0u64;
    let fed: PyResult<()> = (|| {
        for row in rows.try_iter()? {
            let row: PyRow = row?.extract()?;
            // The writer's error, if it stopped, is raised below.
            if py.detach(|| tx.blocking_send(row)).is_err() {
                return Ok(());
            }
            taken += 1;
            if let Some(progress) = &progress {
                progress.call1((taken,))?;
            }
            py.check_signals()?;
        }
        Ok(())
    })();
    // Rows that failed abort the writer while it still waits for more (the sender alive), so
    // nothing of its open window is committed; else, without the sender, it commits the rest.
    if fed.is_err() {
        writing.abort();
    }
    drop(tx);
    let summary = py.detach(|| runtime.block_on(writing));
    shut_down(py, runtime);
    crate::logs::drain(py)?;
    fed?;
    let summary = summary
        .map_err(|e| internal(format!("the writer's task ended without an answer: {e}")))?
        .map_err(compact_error)?;
    to_python(py, &summary)
}
