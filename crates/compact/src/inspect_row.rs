//! `compact inspect TABLE --row ID`: one row found by its id through the scan's row index
//! ([`voxlake_table::Scan::row_index`]) and read alone ([`voxlake_table::Scan::take_ids`]): where
//! it lies, its label, each tensor field's shape, type and values summed up, its text fields;
//! with `--png`, its picture ([`Picture`]).

use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use serde::Serialize;
use voxlake_format::{DType, FieldKind, ID_COLUMN, LABEL_COLUMN};

use crate::picture::Picture;
use crate::{CompactError, Compactor};

/// One row of a table ([`Compactor::inspect_row`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RowInfo {
    /// The table location (without query string).
    pub location: String,
    /// The version read.
    pub version: u64,
    /// The row's id.
    pub id: String,
    /// Its position among the version's rows (`0..rows`, the order of `Scan::take`).
    pub position: u64,
    /// Rows of the version.
    pub rows: u64,
    /// Its label, where it has one.
    pub label: Option<i64>,
    /// Each field of the sample, in order.
    pub fields: Vec<FieldValues>,
    /// Bytes the row index holds (the version's ids).
    pub index_bytes: usize,
    /// Seconds to build the row index (every id read once).
    pub index_seconds: f64,
}

/// One field of a row: a tensor summed up, or a text.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FieldValues {
    /// The field's name.
    pub name: String,
    /// Its shape (empty for a text field).
    pub shape: Vec<usize>,
    /// Its element type (`text` for a text field).
    pub dtype: String,
    /// The smallest, largest and mean value, over the values that are not NaN (`None`
    /// without any).
    pub min: Option<f64>,
    /// See `min`.
    pub max: Option<f64>,
    /// See `min`.
    pub mean: Option<f64>,
    /// Values that are NaN.
    pub nans: u64,
    /// A text field's value.
    pub text: Option<String>,
}

impl Compactor {
    /// The row `id` of the table's version (as the compactor's `with_as_of` says): its
    /// position, label and fields, read alone. An id the version has no row of is
    /// [`voxlake_table::TableError::NoId`], naming it and the version.
    pub async fn inspect_row(&self, id: &str) -> Result<RowInfo, CompactError> {
        info_of(self.read_row(id).await?)
    }

    /// [`inspect_row`](Self::inspect_row) and [`row_picture`](Self::row_picture) of one read
    /// of the row (`compact inspect --row ID --png FILE`).
    pub async fn inspect_row_with_picture(
        &self,
        id: &str,
    ) -> Result<(RowInfo, Picture), CompactError> {
        let read = self.read_row(id).await?;
        let picture = picture_of(&read)?;
        Ok((info_of(read)?, picture))
    }

    /// A picture of the row `id` ([`Picture`]): its first field's middle slices, each
    /// channel's, on one colour scale, a mask field of the same grid overlaid, and a title
    /// naming the id, label and version. A first field of fewer than two axes is
    /// [`CompactError::Incompatible`].
    pub async fn row_picture(&self, id: &str) -> Result<Picture, CompactError> {
        picture_of(&self.read_row(id).await?)
    }

    /// The row `id` of the version, read alone through the version's row index.
    async fn read_row(&self, id: &str) -> Result<ReadRow, CompactError> {
        let (snapshot, scan) = self.open_to_inspect().await?;
        let started = Instant::now();
        let index = scan.row_index().await?;
        let index_seconds = started.elapsed().as_secs_f64();
        tracing::debug!(
            rows = index.len(),
            bytes = index.memory_size(),
            seconds = index_seconds,
            "row index built"
        );
        let row = scan.take_ids(&index, &[id]).await?;
        let label = row
            .column_by_name(LABEL_COLUMN)
            .and_then(|c| {
                c.as_primitive_opt::<arrow_array::types::Int64Type>()
                    .cloned()
            })
            .and_then(|c| (!c.is_null(0)).then(|| c.value(0)));
        let found = row
            .column_by_name(ID_COLUMN)
            .and_then(|c| c.as_string_opt::<i32>().map(|s| s.value(0).to_string()))
            .unwrap_or_else(|| id.to_string());
        Ok(ReadRow {
            position: index.position(id).unwrap_or_default(),
            rows: index.len(),
            index_bytes: index.memory_size(),
            index_seconds,
            id: found,
            label,
            row,
            snapshot,
        })
    }
}

/// The row `read` summed up.
fn info_of(read: ReadRow) -> Result<RowInfo, CompactError> {
    let snapshot = &read.snapshot;
    let id = read.id.as_str();
    let fields = snapshot
        .sample()
        .fields()
        .iter()
        .map(|field| field_values(&read.row, &field.name, &field.kind))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| CompactError::Incompatible {
            location: snapshot.location().to_string(),
            reason: format!("row '{id}': {reason}"),
        })?;
    Ok(RowInfo {
        location: snapshot.location().to_string(),
        version: snapshot.version(),
        id: read.id,
        position: read.position,
        rows: read.rows,
        label: read.label,
        fields,
        index_bytes: read.index_bytes,
        index_seconds: read.index_seconds,
    })
}

/// The picture of the row `read` (see [`Compactor::row_picture`]).
fn picture_of(read: &ReadRow) -> Result<Picture, CompactError> {
    let snapshot = &read.snapshot;
    let id = read.id.as_str();
    let refused = |reason: String| CompactError::Incompatible {
        location: snapshot.location().to_string(),
        reason: format!("row '{id}': {reason}"),
    };
    let tensors: Vec<(&str, &voxlake_format::TensorSpec)> = snapshot.sample().tensors().collect();
    let Some(&(name, spec)) = tensors.first() else {
        return Err(refused("the sample has no tensor field".into()));
    };
    let values: Vec<f64> = as_f64(
        spec.dtype(),
        tensor_bytes(&read.row, name, spec).map_err(refused)?,
    )
    .collect();
    // A mask: an integer (or bool) field of the volume's spatial grid.
    let spatial = &spec.shape()[..spec.shape().len().min(3)];
    let mask = tensors
        .iter()
        .skip(1)
        .find(|(_, s)| is_mask(s.dtype()) && s.shape() == spatial)
        .map(|&(n, s)| {
            tensor_bytes(&read.row, n, s).map(|b| as_f64(s.dtype(), b).collect::<Vec<f64>>())
        })
        .transpose()
        .map_err(refused)?;
    let label = read
        .label
        .map_or_else(|| "-".to_string(), |l| l.to_string());
    let title = format!(
        "{}  label {label}  v{}  {name}",
        read.id,
        snapshot.version()
    );
    crate::picture::render(&crate::picture::Scene {
        values: &values,
        shape: spec.shape(),
        mask: mask.as_deref(),
        title,
    })
    .map_err(refused)
}

/// A row read by its id, with where it lies and what finding it cost.
struct ReadRow {
    snapshot: std::sync::Arc<voxlake_table::Snapshot>,
    row: RecordBatch,
    id: String,
    label: Option<i64>,
    position: u64,
    rows: u64,
    index_bytes: usize,
    index_seconds: f64,
}

/// The bytes of tensor field `name` (of `spec`) in the one row `row` holds.
fn tensor_bytes<'a>(
    row: &'a RecordBatch,
    name: &str,
    spec: &voxlake_format::TensorSpec,
) -> Result<&'a [u8], String> {
    let bytes = row
        .column_by_name(name)
        .and_then(|c| c.as_binary_view_opt())
        .filter(|b| !b.is_null(0))
        .map(|b| b.value(0))
        .ok_or_else(|| format!("field '{name}' holds no tensor bytes"))?;
    match bytes.len() == spec.nbytes() {
        true => Ok(bytes),
        false => Err(format!(
            "field '{name}' holds {} bytes, its {spec} takes {}",
            bytes.len(),
            spec.nbytes()
        )),
    }
}

/// Field `name` of the one row `row` holds, summed up.
fn field_values(row: &RecordBatch, name: &str, kind: &FieldKind) -> Result<FieldValues, String> {
    let column = row
        .column_by_name(name)
        .ok_or_else(|| format!("field '{name}' was not read"))?;
    let mut values = FieldValues {
        name: name.to_string(),
        shape: Vec::new(),
        dtype: "text".to_string(),
        min: None,
        max: None,
        mean: None,
        nans: 0,
        text: None,
    };
    match kind {
        FieldKind::Tensor(spec) => {
            let bytes = tensor_bytes(row, name, spec)?;
            values.shape = spec.shape().to_vec();
            values.dtype = spec.dtype().to_string();
            let (mut n, mut sum) = (0u64, 0f64);
            for v in as_f64(spec.dtype(), bytes) {
                if v.is_nan() {
                    values.nans += 1;
                    continue;
                }
                values.min = Some(values.min.map_or(v, |m| m.min(v)));
                values.max = Some(values.max.map_or(v, |m| m.max(v)));
                (n, sum) = (n + 1, sum + v);
            }
            values.mean = (n > 0).then(|| sum / n as f64);
        }
        _ => {
            values.text = column
                .as_string_opt::<i32>()
                .filter(|t| !t.is_null(0))
                .map(|t| t.value(0).to_string());
        }
    }
    Ok(values)
}

/// Whether a field of `dtype` can be a mask (integers and booleans).
fn is_mask(dtype: DType) -> bool {
    !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

/// Little-endian values of `dtype` as `f64`s.
fn as_f64(dtype: DType, bytes: &[u8]) -> impl Iterator<Item = f64> + '_ {
    bytes.chunks_exact(dtype.size()).map(move |b| {
        let at = |n: usize| -> [u8; 8] {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(&b[..n]);
            a
        };
        match dtype {
            DType::Bool | DType::U8 => f64::from(b[0]),
            DType::I8 => f64::from(b[0] as i8),
            DType::I16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
            DType::U16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
            DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::I64 => i64::from_le_bytes(at(8)) as f64,
            DType::U64 => u64::from_le_bytes(at(8)) as f64,
            DType::F16 => f64::from(half::f16::from_le_bytes([b[0], b[1]])),
            DType::BF16 => f64::from(half::bf16::from_le_bytes([b[0], b[1]])),
            DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::F64 => f64::from_le_bytes(at(8)),
            // A type added later: not summed up (NaN is counted, not shown).
            #[allow(unreachable_patterns)]
            _ => f64::NAN,
        }
    })
}
