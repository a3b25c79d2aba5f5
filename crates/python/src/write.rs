//! `voxlake.write`: samples a program holds written by `compact`'s row writer, either rows the
//! Python side made from dicts of numpy arrays ([`write_rows`]) or Arrow data taken through the
//! Arrow C stream interface ([`write_arrow`]: record batches cut into rows in Rust, no Python
//! code per row). The writer runs on a runtime of its own; the caller's thread feeds it with
//! the GIL released.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use arrow_array::ffi_stream::ArrowArrayStreamReader;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use voxlake_compact::ArrowSamples;
use voxlake_format::DType;

use crate::compact::{compact_error, compactor, runtime, shut_down, to_python};
use crate::errors::{Kind, config, internal, raise};

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
    let compactor = compactor(table, storage_options);
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
    let fed = feed::<PyRow>(py, &rows, &tx, progress.as_ref());
    finish(py, runtime, writing, tx, fed)
}

/// Sends what `items` yields, each extracted as a `T`, to the writer's task through `tx` with
/// the GIL released while it waits, calling `progress` with the count taken so far; a writer
/// that stopped ends the feed (its error is `finish`'s to raise).
pub(crate) fn feed<'py, T>(
    py: Python<'py>,
    items: &Bound<'py, PyAny>,
    tx: &tokio::sync::mpsc::Sender<T>,
    progress: Option<&Bound<'py, PyAny>>,
) -> PyResult<()>
where
    T: for<'a> FromPyObject<'a, 'py> + Send,
{
    let mut taken = 0u64;
    for item in items.try_iter()? {
        let item: T = item?.extract().map_err(Into::into)?;
        if py.detach(|| tx.blocking_send(item)).is_err() {
            return Ok(());
        }
        taken += 1;
        if let Some(progress) = progress {
            progress.call1((taken,))?;
        }
        py.check_signals()?;
    }
    Ok(())
}

/// Ends a write: rows that failed (`fed`) abort the writer while it still waits for more (the
/// sender alive), so nothing of its open window is committed; else, without the sender, it
/// commits the rest. The summary, or the first error.
pub(crate) fn finish<'py, T>(
    py: Python<'py>,
    runtime: tokio::runtime::Runtime,
    writing: tokio::task::JoinHandle<
        Result<voxlake_compact::ConvertSummary, voxlake_compact::CompactError>,
    >,
    tx: tokio::sync::mpsc::Sender<T>,
    fed: PyResult<()>,
) -> PyResult<Bound<'py, PyAny>> {
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

/// Writes the Arrow data `data` holds (any object with `__arrow_c_stream__`: a pyarrow `Table`
/// or `RecordBatchReader`, a polars `DataFrame`, …) into `table`: an `id` column, an optional
/// `label` and one field per other column as [`ArrowSamples`] reads them (`shapes`: a list
/// column's shape by its name). Batches are read here with the GIL released (a stream a
/// Python generator feeds takes it when it needs it) and cut into rows on the writer's runtime;
/// `progress` is called with the rows taken so far after each batch. Returns the summary.
#[pyfunction]
#[pyo3(signature = (table, data, *, shapes=None, storage_options=None, progress=None))]
pub(crate) fn write_arrow<'py>(
    py: Python<'py>,
    table: String,
    data: Bound<'py, PyAny>,
    shapes: Option<HashMap<String, Vec<usize>>>,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut reader = arrow_stream(&data)?;
    let read = |py: Python<'_>, reader: &mut ArrowArrayStreamReader| {
        py.detach(|| reader.next())
            .transpose()
            // The source's own failure (a generator's exception, as its message): not a setting.
            .map_err(|e| {
                raise(
                    Kind::Voxlake,
                    format!("write: reading the Arrow data: {e}"),
                    false,
                )
            })
    };
    // The sample comes from the first batch that has rows.
    let first = loop {
        match read(py, &mut reader)? {
            None => return Err(config("write: no samples")),
            Some(batch) if batch.num_rows() > 0 => break batch,
            Some(_) => {}
        }
    };
    let samples = ArrowSamples::try_new(&first, &shapes.unwrap_or_default())
        .map_err(|e| config(format!("write: {e}")))?;
    let compactor = compactor(table, storage_options);
    let runtime = runtime()?;
    // A batch ahead of the writer; its task ends the channel on its first error.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<RecordBatch>(1);
    let writing = runtime.spawn(async move {
        let mut writer = compactor.writer(samples.sample().clone()).await?;
        while let Some(batch) = rx.recv().await {
            for row in samples.rows(&batch)? {
                writer.push(&row.id, row.label, row.fields).await?;
            }
        }
        writer.finish().await
    });
    let mut taken = 0u64;
    let mut next = Some(first);
    let fed: PyResult<()> = (|| {
        while let Some(batch) = next.take() {
            let rows = batch.num_rows() as u64;
            // The writer's error, if it stopped, is raised below.
            if py.detach(|| tx.blocking_send(batch)).is_err() {
                return Ok(());
            }
            taken += rows;
            if let Some(progress) = &progress {
                progress.call1((taken,))?;
            }
            py.check_signals()?;
            next = read(py, &mut reader)?;
        }
        Ok(())
    })();
    finish(py, runtime, writing, tx, fed)
}

/// `data`'s Arrow C stream, imported (the capsule's stream moved out: its release is ours).
fn arrow_stream(data: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !data.hasattr("__arrow_c_stream__")? {
        return Err(config(format!(
            "write: a {} has no __arrow_c_stream__ (Arrow data is a pyarrow Table or RecordBatchReader, pyarrow >= 14)",
            data.get_type().name()?
        )));
    }
    let capsule = data.call_method1("__arrow_c_stream__", (data.py().None(),))?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let stream = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: the capsule holds a valid FFI_ArrowArrayStream (the PyCapsule interface's
    // contract, its name checked above); from_raw moves it out and leaves a released one, so
    // the capsule's destructor frees nothing twice.
    unsafe { ArrowArrayStreamReader::from_raw(stream.as_ptr().cast()) }
        .map_err(|e| config(format!("write: importing the Arrow stream: {e}")))
}
