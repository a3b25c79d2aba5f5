//! [`SampleColumns::normalize`]: decoded record batches of any encoding in voxlake's layout,
//! pointing into the decoded buffers wherever the layout allows.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::nulls::field_rows;
use super::{RowError, SampleColumns};
use crate::{ID_COLUMN, LABEL_COLUMN};

impl SampleColumns {
    /// `batch` (read from the source columns) in voxlake's layout: `id` (Utf8; from
    /// `make_id(row)` when the table has no id column), `label` (Int64) and each field under
    /// its name (a tensor field as BinaryView of its spec's little-endian bytes per row, a
    /// text field as Utf8), where `batch` has them; other columns as they are. A row that does
    /// not decode is an error naming it and its field's column.
    pub fn normalize(
        &self,
        batch: &RecordBatch,
        make_id: impl Fn(usize) -> String,
    ) -> Result<RecordBatch, RowError> {
        self.normalize_rows(batch, None, make_id)
    }

    /// [`normalize`](Self::normalize) of the rows at `rows` of `batch` only (ascending; all
    /// when `None`): a row left out (deleted, or not selected by a filter) is never converted
    /// or checked. `make_id` and a [`RowError`] name rows by their place in `batch`. Tensors of
    /// the rows kept still point into `batch`'s buffers.
    pub fn normalize_rows(
        &self,
        batch: &RecordBatch,
        rows: Option<&[u32]>,
        make_id: impl Fn(usize) -> String,
    ) -> Result<RecordBatch, RowError> {
        let original = |row: usize| rows.map_or(row, |r| r.get(row).map_or(row, |&i| i as usize));
        self.normalize_kept(batch, rows, &|row| make_id(original(row)))
            .map_err(|e| RowError {
                row: original(e.row),
                reason: e.reason,
            })
    }

    /// The rows at `rows` of `batch` in voxlake's layout; rows are named by their place among
    /// those kept.
    fn normalize_kept(
        &self,
        batch: &RecordBatch,
        rows: Option<&[u32]>,
        make_id: &dyn Fn(usize) -> String,
    ) -> Result<RecordBatch, RowError> {
        let indices = rows.map(|r| arrow_array::UInt32Array::from(r.to_vec()));
        let kept = |array: &ArrayRef| -> Result<ArrayRef, RowError> {
            match &indices {
                None => Ok(array.clone()),
                Some(indices) => {
                    arrow_select::take::take(array, indices, None).map_err(|e| RowError {
                        row: 0,
                        reason: e.to_string(),
                    })
                }
            }
        };
        if self.native {
            let columns = batch
                .columns()
                .iter()
                .map(kept)
                .collect::<Result<Vec<_>, _>>()?;
            return RecordBatch::try_new_with_options(
                batch.schema(),
                columns,
                &arrow_array::RecordBatchOptions::new()
                    .with_row_count(Some(rows.map_or(batch.num_rows(), <[u32]>::len))),
            )
            .map_err(|e| RowError {
                row: 0,
                reason: e.to_string(),
            });
        }
        let rows_kept = rows.map_or(batch.num_rows(), <[u32]>::len);
        let mut fields = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut push = |name: &str, array: ArrayRef| {
            fields.push(Field::new(name, array.data_type().clone(), true));
            columns.push(array);
        };
        let used: Vec<&str> = [self.label.as_deref(), self.id.as_deref()]
            .into_iter()
            .flatten()
            .chain(self.fields.iter().map(|f| f.column.as_str()))
            .collect();
        let made: Vec<&str> = [ID_COLUMN, LABEL_COLUMN]
            .into_iter()
            .chain(self.fields.iter().map(|f| f.name.as_str()))
            .collect();
        match self.id.as_deref().and_then(|c| batch.column_by_name(c)) {
            Some(ids) => push(ID_COLUMN, Arc::new(ids_of(&kept(ids)?)?)),
            None => push(
                ID_COLUMN,
                Arc::new(StringArray::from_iter_values((0..rows_kept).map(make_id))),
            ),
        }
        if let Some(labels) = self.label.as_deref().and_then(|c| batch.column_by_name(c)) {
            let labels = labels_of(&kept(labels)?).map_err(|e| RowError {
                row: e.row,
                reason: format!(
                    "label column '{}': {}",
                    self.label.as_deref().unwrap_or(""),
                    e.reason
                ),
            })?;
            push(LABEL_COLUMN, Arc::new(labels));
        }
        for field in &self.fields {
            if let Some(values) = batch.column_by_name(&field.column) {
                let normalized = field_rows(field, values, rows, &kept).map_err(|e| RowError {
                    row: e.row,
                    reason: format!("column '{}': {}", field.column, e.reason),
                })?;
                push(&field.name, normalized);
            }
        }
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            let name = field.name().as_str();
            if !used.contains(&name) && !made.contains(&name) {
                push(name, kept(column)?);
            }
        }
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows_kept)),
        )
        .map_err(|e| RowError {
            row: 0,
            reason: e.to_string(),
        })
    }
}

/// Ids as strings: string columns as they are, integers written out.
fn ids_of(array: &ArrayRef) -> Result<StringArray, RowError> {
    let err = |reason: String| RowError { row: 0, reason };
    match array.data_type() {
        DataType::Utf8 => Ok(array.as_string::<i32>().clone()),
        t if t.is_integer() || matches!(t, DataType::LargeUtf8 | DataType::Utf8View) => {
            let cast = arrow_cast::cast(array, &DataType::Utf8).map_err(|e| err(e.to_string()))?;
            Ok(cast.as_string::<i32>().clone())
        }
        other => Err(err(format!("ids of {other} are not strings or integers"))),
    }
}

/// Labels as Int64: integers as they are, bools as 0/1, floats only when integral.
fn labels_of(array: &ArrayRef) -> Result<Int64Array, RowError> {
    let err = |row: usize, reason: String| RowError { row, reason };
    let floats: Option<Vec<Option<f64>>> = match array.data_type() {
        DataType::Float32 => Some(
            array
                .as_primitive::<Float32Type>()
                .iter()
                .map(|v| v.map(f64::from))
                .collect(),
        ),
        DataType::Float64 => Some(array.as_primitive::<Float64Type>().iter().collect()),
        _ => None,
    };
    if let Some(floats) = floats {
        if let Some(row) = floats
            .iter()
            .position(|v| v.is_some_and(|v| v.fract() != 0.0 || !v.is_finite() || v.abs() > 9.0e15))
        {
            return Err(err(
                row,
                format!("label {:?} is not an integer", floats[row]),
            ));
        }
        return Ok(floats.iter().map(|v| v.map(|v| v as i64)).collect());
    }
    if !(array.data_type().is_integer() || *array.data_type() == DataType::Boolean) {
        return Err(err(
            0,
            format!("labels of {} are not numbers", array.data_type()),
        ));
    }
    let cast = arrow_cast::cast(array, &DataType::Int64).map_err(|e| err(0, e.to_string()))?;
    if let Some(row) = (0..array.len()).find(|&i| array.is_valid(i) && cast.is_null(i)) {
        return Err(err(row, "label out of the range of an Int64".into()));
    }
    Ok(cast.as_primitive::<Int64Type>().clone())
}
