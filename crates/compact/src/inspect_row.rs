//! `compact inspect TABLE --row ID`: one row found by its id through the scan's row index
//! ([`voxlake_table::Scan::row_index`]) and read alone ([`voxlake_table::Scan::take_ids`]): where
//! it lies, its label, each tensor field's shape, type and values summed up, its text fields.

use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use serde::Serialize;
use voxlake_format::{DType, FieldKind, ID_COLUMN, LABEL_COLUMN};

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
        let position = index.position(id).unwrap_or_default();
        let fields = snapshot
            .sample()
            .fields()
            .iter()
            .map(|field| field_values(&row, &field.name, &field.kind))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| CompactError::Incompatible {
                location: snapshot.location().to_string(),
                reason: format!("row '{id}': {reason}"),
            })?;
        let label = row
            .column_by_name(LABEL_COLUMN)
            .and_then(|c| {
                c.as_primitive_opt::<arrow_array::types::Int64Type>()
                    .cloned()
            })
            .and_then(|c| (!c.is_null(0)).then(|| c.value(0)));
        let id = row
            .column_by_name(ID_COLUMN)
            .and_then(|c| c.as_string_opt::<i32>().map(|s| s.value(0).to_string()))
            .unwrap_or_else(|| id.to_string());
        Ok(RowInfo {
            location: snapshot.location().to_string(),
            version: snapshot.version(),
            id,
            position,
            rows: index.len(),
            label,
            fields,
            index_bytes: index.memory_size(),
            index_seconds,
        })
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
            let bytes = column
                .as_binary_view_opt()
                .filter(|b| !b.is_null(0))
                .map(|b| b.value(0))
                .ok_or_else(|| format!("field '{name}' holds no tensor bytes"))?;
            if bytes.len() != spec.nbytes() {
                return Err(format!(
                    "field '{name}' holds {} bytes, its {spec} takes {}",
                    bytes.len(),
                    spec.nbytes()
                ));
            }
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
