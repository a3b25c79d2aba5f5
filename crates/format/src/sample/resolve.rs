//! One field's column, decided: its encoding (raw bytes, LIST, fixed-size list or fixed-shape
//! tensor, `np.save`/`np.savez_compressed` rows, a number or text) and what the field is, from
//! the schema, what the table records and what the user said.

use super::*;

/// How the column of `column` holds its field: the encoding and what the field is. `stored` is
/// its spec where a voxlake table records it; `first` its first value where it is BINARY and
/// not voxlake's; `named`: the sample's fields were named (scalars and strings may be fields).
pub(super) fn resolve_field(
    column: &NamedColumn<'_>,
    stored: Option<&TensorSpec>,
    first: Option<&[u8]>,
    named: bool,
) -> Result<(TensorEncoding, FieldKind), FormatError> {
    let field = column.field;
    let name = field.name().clone();
    let given = match (&column.shape, column.dtype) {
        (Some(shape), Some(dtype)) => Some(TensorSpec::new(shape.clone(), dtype)),
        _ => None,
    };
    let mismatch = |what: &str, found: String, said: String| {
        meta(format!(
            "column '{name}': the table holds {what} {found}, the settings say {said}"
        ))
    };
    if let DataType::FixedSizeList(item, _) | DataType::List(item) | DataType::LargeList(item) =
        field.data_type()
        && dtype_of(item.data_type()).is_none()
    {
        return Err(meta(format!(
            "column '{name}': lists of {} cannot be read as tensors (numbers and booleans only)",
            item.data_type()
        )));
    }
    let (encoding, spec) = match field.data_type() {
        DataType::FixedSizeList(item, size) => {
            let dtype = dtype_of(item.data_type()).unwrap_or(DType::F32);
            let numel = (*size).max(0) as usize;
            let shape = match (fixed_shape_of(field)?, &column.shape) {
                (Some(recorded), Some(said)) if recorded != *said => {
                    return Err(mismatch(
                        "tensors of shape",
                        format!("{recorded:?}"),
                        format!("{said:?}"),
                    ));
                }
                (Some(recorded), _) => recorded,
                (None, Some(said)) => said.clone(),
                (None, None) => vec![numel],
            };
            if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(numel) {
                return Err(meta(format!(
                    "column '{name}': shape {shape:?} is not {numel} values, the list size"
                )));
            }
            (TensorEncoding::FixedSizeList, TensorSpec::new(shape, dtype))
        }
        DataType::List(item) | DataType::LargeList(item) => {
            let dtype = dtype_of(item.data_type()).unwrap_or(DType::F32);
            let Some(shape) = column.shape.clone() else {
                return Err(meta(format!(
                    "column '{name}' is a list of {dtype} without a fixed length: give the shape of one sample (with_tensor_shape, --shape; a field's: with_field_spec, --field {name}=SHAPE)"
                )));
            };
            (TensorEncoding::List, TensorSpec::new(shape, dtype))
        }
        t if is_binary(t) && stored.is_some() => {
            let spec = stored
                .cloned()
                .unwrap_or_else(|| TensorSpec::new(Vec::new(), DType::U8));
            (TensorEncoding::Raw, spec)
        }
        t if is_binary(t) => match first {
            Some(bytes) if bytes.starts_with(NPY_MAGIC) || bytes.starts_with(ZIP_MAGIC) => {
                let encoding = if bytes.starts_with(NPY_MAGIC) {
                    TensorEncoding::Npy
                } else {
                    TensorEncoding::Npz
                };
                let spec = match encoding {
                    TensorEncoding::Npz => {
                        inflate_npz(bytes, crate::npy::NPZ_DEFAULT_CAP).and_then(|b| npy_spec(&b))
                    }
                    _ => npy_spec(bytes),
                }
                .map_err(|e| meta(format!("column '{name}', first row: {e}")))?;
                (encoding, spec)
            }
            _ => match (&given, &column.shape, column.dtype) {
                (Some(spec), _, _) => (TensorEncoding::Raw, spec.clone()),
                (None, Some(shape), None) => {
                    return Err(meta(format!(
                        "column '{name}' holds raw bytes, which carry no element type: give the dtype of one sample of shape {shape:?} (with_tensor_shape, --dtype)"
                    )));
                }
                (None, None, Some(dtype)) => {
                    return Err(meta(format!(
                        "column '{name}' holds raw bytes: give the shape of one sample of {dtype} (with_tensor_shape, --shape)"
                    )));
                }
                _ => {
                    return Err(meta(format!(
                        "column '{name}' holds raw bytes: give the shape and dtype of one sample (with_tensor_shape, --shape, --dtype)"
                    )));
                }
            },
        },
        t if named && dtype_of(t).is_some() => {
            let dtype = dtype_of(t).unwrap_or(DType::F32);
            (TensorEncoding::Scalar, TensorSpec::new(Vec::new(), dtype))
        }
        t if named && temporal_dtype_of(t).is_some() => {
            let dtype = temporal_dtype_of(t).unwrap_or(DType::I64);
            (TensorEncoding::Scalar, TensorSpec::new(Vec::new(), dtype))
        }
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) if named => {
            return Err(meta(format!(
                "column '{name}' is decimal({p},{s}): more than {MAX_EXACT_DECIMAL_PRECISION} digits do not fit an f64 exactly, so it is not read as a field (cast it in the table, or read a column of fewer digits)"
            )));
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View if named => {
            if column.shape.is_some() || column.dtype.is_some() {
                return Err(meta(format!(
                    "column '{name}' holds strings: a text field takes no shape or dtype"
                )));
            }
            return Ok((TensorEncoding::Text, FieldKind::Text));
        }
        other if named => {
            return Err(meta(format!(
                "column '{name}' is {other}: fields are read from BINARY, LIST or FIXED_SIZE_LIST columns (tensors), number, bool, date, timestamp and decimal columns (scalars) and string columns (text)"
            )));
        }
        other => {
            return Err(meta(format!(
                "column '{name}' is {other}: tensors are read from BINARY, LIST or FIXED_SIZE_LIST columns"
            )));
        }
    };
    if let Some(shape) = &column.shape
        && shape != spec.shape()
    {
        return Err(mismatch(
            "tensors of shape",
            format!("{:?}", spec.shape()),
            format!("{shape:?}"),
        ));
    }
    if let Some(dtype) = column.dtype
        && dtype != spec.dtype()
    {
        return Err(mismatch(
            "elements of type",
            spec.dtype().to_string(),
            dtype.to_string(),
        ));
    }
    Ok((encoding, FieldKind::Tensor(spec)))
}
