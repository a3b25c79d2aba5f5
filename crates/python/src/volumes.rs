//! Bricked volumes from Python: `voxlake.write_volumes` (volumes a program holds, dicts of
//! numpy arrays, written as bricks by `compact`'s volume writer, fed from the caller's thread
//! with the GIL released, as `voxlake.write` feeds rows) and the inference grid's origins.

use std::collections::HashMap;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use voxlake_compact::Volume;
use voxlake_format::DType;
use voxlake_format::volume::{BrickSpec, VolumeField};

use crate::compact::{compactor, runtime};
use crate::errors::config;
use crate::write::{feed, finish};

/// A volume for [`write_volumes`]: id, label, spatial shape (z, y, x), spacing, and each
/// field's little-endian C-order bytes (channels first).
/// The bytes are Python's own, borrowed without a copy until the bricks are cut.
type PyVolume = (
    String,
    Option<i64>,
    [u64; 3],
    Option<[f64; 3]>,
    Vec<PyBackedBytes>,
);

/// Writes the volumes `volumes` yields into `table` as bricks of `brick` voxels, each field as
/// `fields` says (`(name, dtype, channels or None)`); `class_fields` names the label maps whose
/// classes each volume's info counts (None: the one-byte fields after the first),
/// `class_coords` the voxel coordinates kept a class. Volumes the table holds are skipped;
/// `progress` is called with the volumes taken so far. Returns the summary as a dict (its
/// rows are bricks). The Python `voxlake.write_volumes` makes the volumes from dicts of numpy
/// arrays.
#[pyfunction]
#[pyo3(signature = (table, fields, brick, volumes, *, class_fields=None, class_coords=None,
    storage_options=None, progress=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_volumes<'py>(
    py: Python<'py>,
    table: String,
    fields: Vec<(String, String, Option<u64>)>,
    brick: [u64; 3],
    volumes: Bound<'py, PyAny>,
    class_fields: Option<Vec<String>>,
    class_coords: Option<usize>,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut layout = Vec::with_capacity(fields.len());
    for (name, dtype, channels) in fields {
        let dtype: DType = dtype
            .parse()
            .map_err(|e| config(format!("write_volumes: field {name}: dtype {dtype}: {e}")))?;
        let field = VolumeField::new(name, dtype);
        layout.push(match channels {
            Some(c) => field.with_channels(c),
            None => field,
        });
    }
    let bad = |e: voxlake_format::FormatError| config(format!("write_volumes: {e}"));
    let mut spec = BrickSpec::new(brick, layout).map_err(bad)?;
    if let Some(names) = class_fields {
        spec = spec.with_class_fields(names).map_err(bad)?;
    }
    let compactor = compactor(table, storage_options);
    let runtime = runtime()?;
    // A volume ahead of the writer: each may be hundreds of MB.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<PyVolume>(1);
    let writing = runtime.spawn(async move {
        let mut writer = compactor.volume_writer(spec).await?;
        if let Some(n) = class_coords {
            writer = writer.with_class_coords(n)?;
        }
        while let Some((id, label, shape, spacing, fields)) = rx.recv().await {
            let fields = fields.into_iter().map(Bytes::from_owner).collect();
            let volume = Volume::new(id, shape, fields)
                .with_label(label)
                .with_spacing(spacing);
            writer.push(volume).await?;
        }
        writer.finish().await
    });
    let fed = feed::<PyVolume>(py, &volumes, &tx, progress.as_ref());
    finish(py, runtime, writing, tx, fed)
}

/// The origins of the patches of `size` voxels, `overlap` apart, that cover a volume of
/// `shape` (z, y, x) in C order, the last of each axis at the far edge
/// (`voxlake_plan::patch::grid_origins`): what `MapDataset.grid` reads for inference.
#[pyfunction]
pub(crate) fn grid_origins(
    shape: [u64; 3],
    size: [u64; 3],
    overlap: [u64; 3],
) -> PyResult<Vec<[u64; 3]>> {
    voxlake::plan::patch::grid_origins(shape, size, overlap).map_err(|e| config(e.to_string()))
}
