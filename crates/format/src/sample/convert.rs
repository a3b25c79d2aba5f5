//! One field's column in voxlake's layout, for each encoding: tensors as BinaryView of each
//! row's little-endian C-order bytes (views into the decoded buffers wherever the layout
//! allows), text as Utf8.

use std::sync::Arc;

use arrow_array::builder::BinaryViewBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BinaryViewArray, GenericListArray, OffsetSizeTrait};
use arrow_buffer::Buffer;
use arrow_data::{ByteView, MAX_INLINE_VIEW_LEN};
use arrow_schema::DataType;

use super::{FieldColumn, RowError, TensorEncoding, inflate_npz};
use crate::npy::NpyArray;
use crate::{Casting, FieldKind, TensorSpec};

/// A field's column in voxlake's layout: a tensor field as BinaryView of each row's
/// little-endian C-order bytes, a text field as Utf8. `rows`: the rows of a LIST or
/// FIXED_SIZE_LIST column made (all when `None`); a row is named by its place among them.
pub(super) fn field_of(
    field: &FieldColumn,
    array: &ArrayRef,
    rows: Option<&[u32]>,
) -> Result<ArrayRef, RowError> {
    match &field.kind {
        FieldKind::Tensor(spec) => Ok(Arc::new(tensors_of(spec, field.encoding, array, rows)?)),
        FieldKind::Text => texts_of(array),
    }
}

/// A string column as Utf8 (nulls kept).
fn texts_of(array: &ArrayRef) -> Result<ArrayRef, RowError> {
    match array.data_type() {
        DataType::Utf8 => Ok(array.clone()),
        DataType::LargeUtf8 | DataType::Utf8View | DataType::Int64 => {
            arrow_cast::cast(array, &DataType::Utf8).map_err(|e| RowError {
                row: 0,
                reason: e.to_string(),
            })
        }
        other => Err(RowError {
            row: 0,
            reason: format!("expected strings, found {other}"),
        }),
    }
}

/// A tensor column of `encoding` as BinaryView of each row's little-endian C-order bytes, of
/// the rows at `rows` (all when `None`; LIST and FIXED_SIZE_LIST columns only, others come
/// taken already).
fn tensors_of(
    spec: &TensorSpec,
    encoding: TensorEncoding,
    array: &ArrayRef,
    rows: Option<&[u32]>,
) -> Result<BinaryViewArray, RowError> {
    let numel = spec.numel();
    let size = spec.dtype().size();
    let err = |row: usize, reason: String| RowError { row, reason };
    // The rows made (positions in `array`), listed only where some are left out.
    let picked: Option<Vec<usize>> = rows.map(|rows| rows.iter().map(|&r| r as usize).collect());
    let row_at = |k: usize| picked.as_ref().map_or(k, |p| p[k]);
    let made = picked.as_ref().map_or(array.len(), Vec::len);
    if let Some(nulls) = array.logical_nulls().filter(|n| n.null_count() > 0)
        && let Some(row) = (0..made).position(|k| nulls.is_null(row_at(k)))
    {
        return Err(err(
            row,
            "the value is null (a null policy reads it: --null FIELD=fill:VALUE or FIELD=mask)"
                .into(),
        ));
    }
    match encoding {
        TensorEncoding::Raw => {
            let views = binary_views(array).map_err(|e| err(0, e))?;
            let expected = spec.nbytes();
            if let Some(row) = (0..views.len()).find(|&i| views.value(i).len() != expected) {
                return Err(err(
                    row,
                    format!(
                        "{} bytes, a tensor of {spec} is {expected}",
                        views.value(row).len(),
                    ),
                ));
            }
            Ok(views)
        }
        TensorEncoding::FixedSizeList => {
            let lists = array.as_fixed_size_list_opt().ok_or_else(|| {
                err(
                    0,
                    format!("expected a fixed-size list, found {}", array.data_type()),
                )
            })?;
            // The values of row i start at element (offset + i) * numel of the child.
            let values = lists.values();
            let starts = (0..made)
                .map(|k| (lists.value_offset(row_at(k)) as usize, numel))
                .collect();
            views_into(values, starts, size)
        }
        TensorEncoding::List => {
            let (values, bounds) = match array.data_type() {
                DataType::List(_) => list_bounds(array.as_list::<i32>()),
                DataType::LargeList(_) => list_bounds(array.as_list::<i64>()),
                other => return Err(err(0, format!("expected a list, found {other}"))),
            };
            let bounds: Vec<(usize, usize)> = match &picked {
                Some(picked) => picked.iter().map(|&i| bounds[i]).collect(),
                None => bounds,
            };
            if let Some(row) = bounds.iter().position(|&(_, len)| len != numel) {
                return Err(err(
                    row,
                    format!(
                        "a list of {} values, a tensor of {spec} has {numel}",
                        bounds[row].1
                    ),
                ));
            }
            views_into(values, bounds, size)
        }
        // One value a row: views into the decoded values.
        TensorEncoding::Scalar => {
            let array = scalar_values(array).map_err(|e| err(0, e))?;
            views_into(&array, (0..array.len()).map(|i| (i, 1)).collect(), size)
        }
        TensorEncoding::Npy | TensorEncoding::Npz => npy_rows(spec, encoding, array),
        TensorEncoding::Text | TensorEncoding::Validity => {
            Err(err(0, "not a tensor column".into()))
        }
    }
}

/// A scalar column's values as its field's dtype holds them: numbers and dates (days, i32) as
/// they are, timestamps as microseconds (i64), decimals as the nearest f64.
fn scalar_values(array: &ArrayRef) -> Result<ArrayRef, String> {
    use arrow_schema::TimeUnit;
    let to = match array.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => return Ok(array.clone()),
        DataType::Timestamp(_, zone) => DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
        DataType::Decimal128(_, _) => DataType::Float64,
        _ => return Ok(array.clone()),
    };
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(array, &to, &options).map_err(|e| e.to_string())
}

/// Rows of `np.save` / `np.savez_compressed` bytes: each header is checked against the spec;
/// little-endian C-order data is used in place, the rest converted.
fn npy_rows(
    spec: &TensorSpec,
    encoding: TensorEncoding,
    array: &ArrayRef,
) -> Result<BinaryViewArray, RowError> {
    let err = |row: usize, reason: String| RowError { row, reason };
    let views = binary_views(array).map_err(|e| err(0, e))?;
    let mut out = BinaryViewBuilder::with_capacity(views.len());
    let blocks: Vec<u32> = views
        .data_buffers()
        .iter()
        .map(|b| out.append_block(b.clone()))
        .collect();
    let mut converted = Vec::new();
    for (row, view) in views.views().iter().enumerate() {
        let bytes = views.value(row);
        let inflated = match encoding {
            // Each row's array is the spec's size: it inflates to no more.
            TensorEncoding::Npz => Some(
                inflate_npz(bytes, spec.nbytes() as u64 + crate::npy::NPY_HEADER_ROOM)
                    .map_err(|e| err(row, e))?,
            ),
            _ => None,
        };
        let file: &[u8] = inflated.as_deref().unwrap_or(bytes);
        let npy = NpyArray::parse(file).map_err(|e| err(row, e.to_string()))?;
        if npy.shape() != spec.shape() || npy.dtype() != spec.dtype() {
            return Err(err(
                row,
                format!(
                    "an array of {:?} {}, the table's tensors are {spec}",
                    npy.shape(),
                    npy.dtype(),
                ),
            ));
        }
        let header = (file.len() - npy.data().len()) as u32;
        let len = npy.data().len() as u32;
        if !npy.is_le_c(spec.dtype()) {
            converted.clear();
            npy.write_le_c(spec.dtype(), Casting::Safe, &mut converted)
                .map_err(|e| err(row, e.to_string()))?;
            out.append_value(&converted);
        } else if let Some(inflated) = inflated {
            // The inflated file becomes a block of its own: the view skips its header.
            let block = out.append_block(Buffer::from_vec(inflated));
            out.try_append_view(block, header, len)
                .map_err(|e| err(row, e.to_string()))?;
        } else if bytes.len() > MAX_INLINE_VIEW_LEN as usize {
            // The data is the tail of the row's bytes: a view into the same buffer.
            let view = ByteView::from(*view);
            let block = blocks[view.buffer_index as usize];
            out.try_append_view(block, view.offset + header, len)
                .map_err(|e| err(row, e.to_string()))?;
        } else {
            out.append_value(npy.data());
        }
    }
    Ok(out.finish())
}

/// A list array's values and each row's (start, length) in them.
fn list_bounds<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> (&ArrayRef, Vec<(usize, usize)>) {
    let bounds = list
        .value_offsets()
        .windows(2)
        .map(|w| (w[0].as_usize(), (w[1] - w[0]).as_usize()))
        .collect();
    (list.values(), bounds)
}

/// Any binary column as BinaryView (the pipeline decodes BINARY as views already; arrow's
/// cast views the same buffers).
fn binary_views(array: &ArrayRef) -> Result<BinaryViewArray, String> {
    match array.data_type() {
        DataType::BinaryView | DataType::Binary | DataType::LargeBinary => {
            let views =
                arrow_cast::cast(array, &DataType::BinaryView).map_err(|e| e.to_string())?;
            Ok(views.as_binary_view().clone())
        }
        other => Err(format!("expected binary values, found {other}")),
    }
}

/// Views of `numel` values of `size` bytes each from element `start` of `values`, for each
/// `(start, len)`: no copy, the views point into the values' buffer (booleans, bits in Arrow
/// and a byte each in a tensor, are unpacked first: one copy).
fn views_into(
    values: &ArrayRef,
    rows: Vec<(usize, usize)>,
    size: usize,
) -> Result<BinaryViewArray, RowError> {
    let err = |row: usize, reason: String| RowError { row, reason };
    // Only the rows made are checked: a row left out may hold anything.
    if values.null_count() > 0
        && let Some(nulls) = values.logical_nulls()
        && let Some(row) = rows
            .iter()
            .position(|&(start, len)| (start..start + len).any(|i| nulls.is_null(i)))
    {
        return Err(err(row, "a null value inside the tensor".into()));
    }
    let unpacked: ArrayRef;
    let values = match values.data_type() {
        DataType::Boolean => {
            unpacked =
                arrow_cast::cast(values, &DataType::UInt8).map_err(|e| err(0, e.to_string()))?;
            &unpacked
        }
        _ => values,
    };
    // The values' buffer, from the values' first element (a sliced array starts inside it).
    let data = values.to_data();
    let buffer: Buffer = match (values.data_type().primitive_width(), data.buffers().first()) {
        (Some(width), Some(buffer)) if width == size => {
            buffer.slice_with_length(data.offset() * size, data.len() * size)
        }
        _ => {
            return Err(err(
                0,
                format!(
                    "values of {} are not {size}-byte numbers",
                    values.data_type()
                ),
            ));
        }
    };
    if buffer.len() >= u32::MAX as usize {
        return Err(err(
            0,
            format!(
                "{} bytes of values in one row group: views address at most 4 GiB; write smaller row groups",
                buffer.len()
            ),
        ));
    }
    let mut out = BinaryViewBuilder::with_capacity(rows.len());
    let block = out.append_block(buffer);
    for (row, (start, len)) in rows.into_iter().enumerate() {
        out.try_append_view(block, (start * size) as u32, (len * size) as u32)
            .map_err(|e| err(row, e.to_string()))?;
    }
    Ok(out.finish())
}
