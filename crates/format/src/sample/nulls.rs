//! A field's nulls, as its [`NullPolicy`] says: an error naming the row (the default), a fill
//! value, or zeros and a validity field. Only the rows a read keeps are looked at.

use std::sync::Arc;

use arrow_array::builder::BinaryViewBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BinaryViewArray, StringArray};
use arrow_data::{ByteView, MAX_INLINE_VIEW_LEN};
use arrow_schema::DataType;

use super::convert::field_of;
use super::{FieldColumn, NullPolicy, RowError, TensorEncoding};
use crate::{FieldKind, TensorSpec};

/// Field `field` of the rows at `rows` of its column `values` (all when `None`; `kept` takes
/// them from a column) in voxlake's layout, its nulls as its [`NullPolicy`] says. A row is
/// named by its place among those kept.
pub(super) fn field_rows(
    field: &FieldColumn,
    values: &ArrayRef,
    rows: Option<&[u32]>,
    kept: &dyn Fn(&ArrayRef) -> Result<ArrayRef, RowError>,
) -> Result<ArrayRef, RowError> {
    // A list's tensors are views into its values: only the kept rows' are made.
    let listed = matches!(
        field.encoding,
        TensorEncoding::List | TensorEncoding::FixedSizeList
    );
    let taken = match listed {
        true => None,
        false => Some(kept(values)?),
    };
    // Per kept row, only where the column holds a null at all.
    let nulls = values.logical_nulls().filter(|n| n.null_count() > 0);
    let valid: Option<Vec<bool>> = nulls.map(|nulls| match rows {
        Some(rows) => rows.iter().map(|&r| nulls.is_valid(r as usize)).collect(),
        None => (0..values.len()).map(|r| nulls.is_valid(r)).collect(),
    });
    if field.encoding == TensorEncoding::Validity {
        let n = rows.map_or(values.len(), <[u32]>::len);
        let bytes = (0..n).map(|i| [u8::from(valid.as_ref().is_none_or(|v| v[i]))]);
        return Ok(Arc::new(BinaryViewArray::from_iter_values(bytes)));
    }
    let valid = valid.filter(|v| v.contains(&false));
    if let (Some(valid), NullPolicy::Error, FieldKind::Text) = (&valid, &field.null, &field.kind) {
        let row = valid.iter().position(|v| !v).unwrap_or(0);
        return Err(RowError {
            row,
            reason:
                "the text is null (a null policy reads it: --null FIELD=fill:TEXT or FIELD=mask)"
                    .into(),
        });
    }
    let (Some(valid), false) = (&valid, field.null == NullPolicy::Error) else {
        return match taken {
            Some(taken) => field_of(field, &taken, None),
            None => field_of(field, values, rows),
        };
    };
    // The rows that hold a value are read as usual; the null ones get the fill.
    let present: Vec<u32> = (0..valid.len() as u32)
        .filter(|&i| valid[i as usize])
        .collect();
    let part = match taken {
        Some(taken) => {
            let indices = arrow_array::UInt32Array::from(present.clone());
            let taken = arrow_select::take::take(&taken, &indices, None).map_err(|e| RowError {
                row: 0,
                reason: e.to_string(),
            })?;
            field_of(field, &taken, None)
        }
        None => {
            let original: Vec<u32> = match rows {
                Some(rows) => present.iter().map(|&i| rows[i as usize]).collect(),
                None => present.clone(),
            };
            field_of(field, values, Some(&original))
        }
    }
    .map_err(|e| RowError {
        row: present.get(e.row).map_or(e.row, |&i| i as usize),
        reason: e.reason,
    })?;
    let fill = match &field.null {
        NullPolicy::Fill(value) => Some(value.as_str()),
        _ => None,
    };
    match &field.kind {
        FieldKind::Text => {
            let part = part.as_string::<i32>();
            let mut next = 0;
            let filled: StringArray = valid
                .iter()
                .map(|&v| match v {
                    true => {
                        next += 1;
                        part.is_valid(next - 1)
                            .then(|| part.value(next - 1).to_string())
                    }
                    false => Some(fill.unwrap_or("").to_string()),
                })
                .collect();
            Ok(Arc::new(filled))
        }
        FieldKind::Tensor(spec) => {
            let bytes = fill_bytes(spec, fill.unwrap_or("0")).map_err(|reason| RowError {
                row: 0,
                reason: format!("the fill for nulls: {reason}"),
            })?;
            Ok(Arc::new(expand_views(part.as_binary_view(), valid, &bytes)))
        }
    }
}

/// The bytes of a tensor of `spec` whose every element is `value` (a number, or `true` /
/// `false`).
fn fill_bytes(spec: &TensorSpec, value: &str) -> Result<Vec<u8>, String> {
    use crate::DType;
    let number: f64 = match value {
        "true" => 1.0,
        "false" => 0.0,
        v => v
            .trim()
            .parse()
            .map_err(|_| format!("'{v}' is not a number"))?,
    };
    let to = match spec.dtype() {
        DType::Bool => DataType::Boolean,
        DType::I8 => DataType::Int8,
        DType::I16 => DataType::Int16,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::UInt8,
        DType::U16 => DataType::UInt16,
        DType::U32 => DataType::UInt32,
        DType::U64 => DataType::UInt64,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
        other => return Err(format!("{other} tensors take no fill")),
    };
    let one: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![number]));
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = arrow_cast::cast_with_options(&one, &to, &options)
        .map_err(|e| format!("{value} is not a {}: {e}", spec.dtype()))?;
    if matches!(
        to,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    ) && number.fract() != 0.0
    {
        return Err(format!("{value} is not a {}", spec.dtype()));
    }
    let element: Vec<u8> = match to {
        DataType::Boolean => vec![u8::from(cast.as_boolean().value(0))],
        _ => {
            let data = cast.to_data();
            let size = spec.dtype().size();
            data.buffers()[0].as_slice()[data.offset() * size..][..size].to_vec()
        }
    };
    Ok(element.repeat(spec.numel()))
}

/// `part` (the rows where `valid` holds) with `fill` at the other rows; `part`'s values stay
/// where they are (views into the same buffers).
fn expand_views(part: &BinaryViewArray, valid: &[bool], fill: &[u8]) -> BinaryViewArray {
    let mut out = BinaryViewBuilder::with_capacity(valid.len());
    let blocks: Vec<u32> = part
        .data_buffers()
        .iter()
        .map(|b| out.append_block(b.clone()))
        .collect();
    let mut next = 0;
    for &v in valid {
        if !v {
            out.append_value(fill);
            continue;
        }
        let (view, len) = (part.views()[next], part.value(next).len());
        next += 1;
        if len <= MAX_INLINE_VIEW_LEN as usize {
            out.append_value(part.value(next - 1));
        } else {
            let view = ByteView::from(view);
            // The views were made by this crate: their blocks exist.
            if out
                .try_append_view(blocks[view.buffer_index as usize], view.offset, view.length)
                .is_err()
            {
                out.append_value(part.value(next - 1));
            }
        }
    }
    out.finish()
}
