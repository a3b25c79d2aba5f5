//! Arrow record batches as rows for [`RowWriter`](crate::RowWriter): which column is the id,
//! the label and each field, and each row's bytes cut from the columns' buffers (no per-value
//! work for numbers). Pure: the caller reads the batches (an Arrow C stream from Python, a
//! Parquet reader, a program's own) and pushes the rows.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use bytes::Bytes;
use voxlake_format::{DType, FieldKind, SampleSpec, TensorSpec};

use crate::CompactError;

/// How a batch's columns become samples: the `id` column (strings), an optional `label`
/// column (integers, null for no label) and one field per other column, in the schema's order:
/// a `fixed_shape_tensor` column (its shape from the type), a list of numbers per row
/// (fixed-size or not; every row the same length), reshaped where a shape is given, or a
/// string column (a text field).
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{FixedSizeListArray, Float32Array, RecordBatch, StringArray};
/// use arrow_schema::{DataType, Field, SchemaRef};
/// use voxlake_compact::ArrowSamples;
///
/// let values = Float32Array::from((0..8).map(|v| v as f32).collect::<Vec<_>>());
/// let item = Arc::new(Field::new("item", DataType::Float32, false));
/// let tensor = FixedSizeListArray::new(item, 4, Arc::new(values), None);
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(StringArray::from(vec!["a", "b"])) as _),
///     ("tensor", Arc::new(tensor) as _),
/// ])?;
/// let samples = ArrowSamples::try_new(&batch, &[("tensor".into(), vec![2, 2])].into())?;
/// assert_eq!(samples.sample().to_string(), "[2, 2] f32");
/// let rows = samples.rows(&batch)?;
/// assert_eq!(rows[1].id, "b");
/// assert_eq!(rows[1].fields[0].as_ref(), [4f32, 5., 6., 7.].map(f32::to_le_bytes).concat());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ArrowSamples {
    schema: SchemaRef,
    sample: SampleSpec,
    id: usize,
    label: Option<usize>,
    /// Each field's column and the values a row holds (0 for a text field).
    fields: Vec<(usize, usize)>,
}

/// One row for [`RowWriter::push`](crate::RowWriter::push).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ArrowRow {
    /// The sample's id.
    pub id: String,
    /// Its label, where the label column has one.
    pub label: Option<i64>,
    /// Each field's little-endian C-order bytes (a text field's UTF-8), in the sample's order.
    pub fields: Vec<Bytes>,
}

fn refused(column: &str, reason: impl Into<String>) -> CompactError {
    CompactError::Arrow {
        column: column.to_string(),
        reason: reason.into(),
    }
}

impl ArrowSamples {
    /// The sample `first`'s columns make (`shapes`: a tensor column's shape by its name, for a
    /// list column whose rows are not already shaped). A list column without a shape is one
    /// axis of its first row's length. A column Arrow types cannot make a field of, or a
    /// shape naming no tensor column, is an error naming the column.
    pub fn try_new(
        first: &RecordBatch,
        shapes: &HashMap<String, Vec<usize>>,
    ) -> Result<ArrowSamples, CompactError> {
        let schema = first.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let Some(id) = names.iter().position(|n| *n == "id") else {
            return Err(refused(
                "id",
                format!("no 'id' column (the columns: {names:?})"),
            ));
        };
        if !is_text(schema.field(id).data_type()) {
            return Err(refused(
                "id",
                format!("{} is not a string type", schema.field(id).data_type()),
            ));
        }
        let label = names.iter().position(|n| *n == "label");
        if let Some(i) = label
            && !schema.field(i).data_type().is_integer()
        {
            return Err(refused(
                "label",
                format!("{} is not an integer type", schema.field(i).data_type()),
            ));
        }
        let mut specs = Vec::new();
        let mut fields = Vec::new();
        for (i, field) in schema.fields().iter().enumerate() {
            if i == id || Some(i) == label {
                continue;
            }
            let kind = field_kind(field, first.column(i), shapes.get(field.name()))?;
            let per_row = match &kind {
                FieldKind::Tensor(spec) => spec.numel(),
                _ => 0,
            };
            specs.push((field.name().clone(), kind));
            fields.push((i, per_row));
        }
        if let Some(name) = shapes
            .keys()
            .find(|n| !fields.iter().any(|(i, _)| names[*i] == n.as_str()))
        {
            return Err(refused(
                name,
                "a shape is given for it, but no tensor column has this name",
            ));
        }
        let sample = SampleSpec::new(specs).map_err(|e| refused("*", e.to_string()))?;
        Ok(ArrowSamples {
            schema,
            sample,
            id,
            label,
            fields,
        })
    }

    /// The sample the rows are of (for [`Compactor::writer`](crate::Compactor::writer)).
    pub fn sample(&self) -> &SampleSpec {
        &self.sample
    }

    /// `batch`'s rows. A batch whose schema differs from the first's, a null id or value, or
    /// a row of another length is an error naming the column (and the row's id).
    pub fn rows(&self, batch: &RecordBatch) -> Result<Vec<ArrowRow>, CompactError> {
        let (want, got) = (self.schema.fields(), batch.schema_ref().fields());
        if want.len() != got.len()
            || want
                .iter()
                .zip(got)
                .any(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
        {
            return Err(refused(
                "*",
                format!("a batch of columns {got:?}, the first batch's {want:?}"),
            ));
        }
        let ids = batch.column(self.id);
        if ids.null_count() > 0 {
            return Err(refused("id", "a row has a null id"));
        }
        let ids = strings(ids);
        let labels = match self.label {
            Some(i) => labels(batch.column(i))?,
            None => vec![None; batch.num_rows()],
        };
        let mut rows: Vec<ArrowRow> = ids
            .into_iter()
            .zip(labels)
            .map(|(id, label)| ArrowRow {
                id: id.to_string(),
                label,
                fields: Vec::with_capacity(self.fields.len()),
            })
            .collect();
        for ((column, per_row), field) in self.fields.iter().zip(self.sample.fields()) {
            let array = batch.column(*column);
            let name = &field.name;
            let cut = match &field.kind {
                FieldKind::Tensor(spec) => tensor_rows(name, array, *per_row, spec.dtype(), &rows)?,
                _ if is_text(array.data_type()) && array.null_count() == 0 => text_rows(array),
                _ => {
                    return Err(refused(
                        name,
                        format!(
                            "{} (a text field) with nulls or another type",
                            array.data_type()
                        ),
                    ));
                }
            };
            for (row, bytes) in rows.iter_mut().zip(cut) {
                row.fields.push(bytes);
            }
        }
        Ok(rows)
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The field a column makes.
fn field_kind(
    field: &Field,
    array: &ArrayRef,
    shape: Option<&Vec<usize>>,
) -> Result<FieldKind, CompactError> {
    let name = field.name();
    if is_text(field.data_type()) {
        if shape.is_some() {
            return Err(refused(name, "a shape is given for a text column"));
        }
        return Ok(FieldKind::Text);
    }
    let (item, typed_shape) = match field.data_type() {
        DataType::FixedSizeList(item, size) => {
            let typed = voxlake_format::sample::fixed_shape_of(field)
                .map_err(|e| refused(name, e.to_string()))?
                .unwrap_or(vec![*size as usize]);
            if numel(&typed) != Some(*size as usize) {
                return Err(refused(
                    name,
                    format!("a fixed_shape_tensor of shape {typed:?} in lists of {size}"),
                ));
            }
            (item, Some(typed))
        }
        DataType::List(item) | DataType::LargeList(item) => (item, None),
        other => {
            return Err(refused(
                name,
                format!("{other}: a tensor column is a fixed_shape_tensor or a list of numbers"),
            ));
        }
    };
    let dtype = dtype_of(name, item.data_type())?;
    let per_row = match (&typed_shape, array.len()) {
        (Some(s), _) => s.iter().product(),
        (None, 0) if shape.is_none() => {
            return Err(refused(
                name,
                "a list column's shape comes from its first row, and the first batch has none: give its shape",
            ));
        }
        (None, 0) => shape.and_then(|s| numel(s)).unwrap_or(usize::MAX),
        (None, _) => list_bounds(array, 0).1 - list_bounds(array, 0).0,
    };
    let shape = match shape {
        Some(s) if numel(s) != Some(per_row) => {
            return Err(refused(
                name,
                format!("{per_row} values a row, shape {s:?} takes another count"),
            ));
        }
        Some(s) => s.clone(),
        None => typed_shape.unwrap_or(vec![per_row]),
    };
    let spec = TensorSpec::new(shape, dtype)
        .checked()
        .map_err(|e| refused(name, e.to_string()))?;
    Ok(FieldKind::Tensor(spec))
}

/// The values a shape holds; `None` where the product overflows.
fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

fn dtype_of(column: &str, t: &DataType) -> Result<DType, CompactError> {
    DType::of_arrow(t).ok_or_else(|| {
        refused(
            column,
            format!("values of {t}: not a number type voxlake stores"),
        )
    })
}

/// Row `row`'s range in a list column's values.
fn list_bounds(array: &dyn Array, row: usize) -> (usize, usize) {
    match array.data_type() {
        DataType::LargeList(_) => {
            let o = array.as_list::<i64>().value_offsets();
            (o[row] as usize, o[row + 1] as usize)
        }
        DataType::FixedSizeList(_, size) => {
            let start = array.as_fixed_size_list().value_offset(row) as usize;
            (start, start + *size as usize)
        }
        _ => {
            let o = array.as_list::<i32>().value_offsets();
            (o[row] as usize, o[row + 1] as usize)
        }
    }
}

/// Each row's tensor bytes, cut from the values' buffer.
fn tensor_rows(
    name: &str,
    array: &ArrayRef,
    per_row: usize,
    dtype: DType,
    rows: &[ArrowRow],
) -> Result<Vec<Bytes>, CompactError> {
    if array.null_count() > 0
        && let Some(row) = (0..array.len()).find(|r| array.is_null(*r))
    {
        return Err(refused(name, format!("row '{}' is null", rows[row].id)));
    }
    let values = match array.data_type() {
        DataType::FixedSizeList(..) => array.as_fixed_size_list().values().clone(),
        DataType::LargeList(_) => array.as_list::<i64>().values().clone(),
        DataType::List(_) => array.as_list::<i32>().values().clone(),
        other => {
            return Err(refused(
                name,
                format!("{other}, the first batch's was a list"),
            ));
        }
    };
    if dtype_of(name, values.data_type())? != dtype || values.null_count() > 0 {
        return Err(refused(
            name,
            format!(
                "values of {} with {} nulls, the first batch's {dtype} without",
                values.data_type(),
                values.null_count()
            ),
        ));
    }
    let bytes = value_bytes(&values);
    let size = dtype.size();
    let mut out = Vec::with_capacity(array.len());
    for (row, sample) in rows.iter().enumerate() {
        let (start, end) = list_bounds(array.as_ref(), row);
        if end - start != per_row {
            return Err(refused(
                name,
                format!(
                    "row '{}' has {} values, the sample's {per_row}",
                    sample.id,
                    end - start
                ),
            ));
        }
        out.push(bytes.slice(start * size..end * size));
    }
    Ok(out)
}

/// A list column's values as little-endian bytes, one buffer for the batch: the column's own
/// memory where it is little-endian already (no copy: each row's bytes keep the Arrow buffer
/// alive), booleans a byte each as voxlake stores them.
fn value_bytes(values: &ArrayRef) -> Bytes {
    if let DataType::Boolean = values.data_type() {
        let bits = values.as_boolean();
        return Bytes::from_iter(bits.iter().map(|b| u8::from(b == Some(true))));
    }
    let data = values.to_data();
    let size = data.data_type().primitive_width().unwrap_or(1);
    let buffer = data.buffers()[0].slice_with_length(data.offset() * size, data.len() * size);
    if cfg!(target_endian = "little") {
        return Bytes::from_owner(ArrowBytes(buffer));
    }
    // Arrow's buffers are native-endian: on a big-endian host each value is turned around.
    Bytes::from_iter(
        buffer
            .chunks_exact(size)
            .flat_map(|v| v.iter().rev().copied()),
    )
}

/// An Arrow buffer as the owner of [`Bytes`].
struct ArrowBytes(arrow_buffer::Buffer);

impl AsRef<[u8]> for ArrowBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// A string column's rows (checked for nulls by the caller).
fn strings(array: &ArrayRef) -> Vec<&str> {
    match array.data_type() {
        DataType::LargeUtf8 => array
            .as_string::<i64>()
            .iter()
            .map(|v| v.unwrap_or(""))
            .collect(),
        DataType::Utf8View => array
            .as_string_view()
            .iter()
            .map(|v| v.unwrap_or(""))
            .collect(),
        _ => array
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap_or(""))
            .collect(),
    }
}

/// A string column's rows as UTF-8 bytes.
fn text_rows(array: &ArrayRef) -> Vec<Bytes> {
    strings(array)
        .into_iter()
        .map(|t| Bytes::copy_from_slice(t.as_bytes()))
        .collect()
}

/// A label column's values as `i64` (null: no label); a value beyond `i64` is an error.
fn labels(array: &ArrayRef) -> Result<Vec<Option<i64>>, CompactError> {
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let wide = arrow_cast::cast_with_options(array, &DataType::Int64, &options)
        .map_err(|e| refused("label", e.to_string()))?;
    Ok(wide.as_primitive::<Int64Type>().iter().collect())
}

#[cfg(test)]
mod tests;
