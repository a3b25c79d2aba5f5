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
    let name = field.name();
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
        DataType::FixedSizeList(item, size) => fixed_size_list(column, item.data_type(), *size)?,
        DataType::List(item) | DataType::LargeList(item) => {
            let dtype = dtype_of(item.data_type()).unwrap_or(DType::F32);
            let Some(shape) = column.shape.clone() else {
                return Err(meta(format!(
                    "column '{name}' is a list of {dtype} without a fixed length: give the shape of one sample (with_tensor_shape, --shape; a field's: with_field_spec, --field {name}=SHAPE)"
                )));
            };
            (TensorEncoding::List, TensorSpec::new(shape, dtype))
        }
        t if is_binary(t) => binary(column, stored, first)?,
        t => return not_a_tensor(column, t, named),
    };
    check_settings(column, &spec)?;
    Ok((encoding, FieldKind::Tensor(spec)))
}

/// What the settings say of `column`'s tensors disagrees with what the table holds.
fn mismatch(column: &NamedColumn<'_>, what: &str, found: String, said: String) -> FormatError {
    let name = column.field.name();
    meta(format!(
        "column '{name}': the table holds {what} {found}, the settings say {said}"
    ))
}

/// A fixed-size list of `size` values of `item`: its shape the one the field records (a
/// fixed-shape tensor), else the settings', else flat.
fn fixed_size_list(
    column: &NamedColumn<'_>,
    item: &DataType,
    size: i32,
) -> Result<(TensorEncoding, TensorSpec), FormatError> {
    let name = column.field.name();
    let dtype = dtype_of(item).unwrap_or(DType::F32);
    let numel = size.max(0) as usize;
    let shape = match (fixed_shape_of(column.field)?, &column.shape) {
        (Some(recorded), Some(said)) if recorded != *said => {
            return Err(mismatch(
                column,
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
    Ok((TensorEncoding::FixedSizeList, TensorSpec::new(shape, dtype)))
}

/// A BINARY column: voxlake's raw bytes (their spec `stored`), `np.save` or
/// `np.savez_compressed` rows (told by `first`, the first value), or raw bytes of the spec the
/// settings give.
fn binary(
    column: &NamedColumn<'_>,
    stored: Option<&TensorSpec>,
    first: Option<&[u8]>,
) -> Result<(TensorEncoding, TensorSpec), FormatError> {
    let name = column.field.name();
    if let Some(spec) = stored {
        return Ok((TensorEncoding::Raw, spec.clone()));
    }
    if let Some(bytes) = first
        && (bytes.starts_with(NPY_MAGIC) || bytes.starts_with(ZIP_MAGIC))
    {
        let (encoding, spec) = if bytes.starts_with(NPY_MAGIC) {
            (TensorEncoding::Npy, npy_spec(bytes))
        } else {
            let inflated = inflate_npz(bytes, crate::npy::NPZ_DEFAULT_CAP);
            (TensorEncoding::Npz, inflated.and_then(|b| npy_spec(&b)))
        };
        let spec = spec.map_err(|e| meta(format!("column '{name}', first row: {e}")))?;
        return Ok((encoding, spec));
    }
    match (&column.shape, column.dtype) {
        (Some(shape), Some(dtype)) => {
            Ok((TensorEncoding::Raw, TensorSpec::new(shape.clone(), dtype)))
        }
        (Some(shape), None) => Err(meta(format!(
            "column '{name}' holds raw bytes, which carry no element type: give the dtype of one sample of shape {shape:?} (with_tensor_shape, --dtype)"
        ))),
        (None, Some(dtype)) => Err(meta(format!(
            "column '{name}' holds raw bytes: give the shape of one sample of {dtype} (with_tensor_shape, --shape)"
        ))),
        (None, None) => Err(meta(format!(
            "column '{name}' holds raw bytes: give the shape and dtype of one sample (with_tensor_shape, --shape, --dtype)"
        ))),
    }
}

/// A column that holds no tensors (of type `t`): a scalar or text field where the sample's
/// fields were named, else an error naming what is read.
fn not_a_tensor(
    column: &NamedColumn<'_>,
    t: &DataType,
    named: bool,
) -> Result<(TensorEncoding, FieldKind), FormatError> {
    let name = column.field.name();
    let scalar = dtype_of(t).or_else(|| temporal_dtype_of(t));
    let spec = match t {
        _ if !named => {
            return Err(meta(format!(
                "column '{name}' is {t}: tensors are read from BINARY, LIST or FIXED_SIZE_LIST columns"
            )));
        }
        _ if scalar.is_some() => TensorSpec::new(Vec::new(), scalar.unwrap_or(DType::F32)),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            return Err(meta(format!(
                "column '{name}' is decimal({p},{s}): more than {MAX_EXACT_DECIMAL_PRECISION} digits do not fit an f64 exactly, so it is not read as a field (cast it in the table, or read a column of fewer digits)"
            )));
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            if column.shape.is_some() || column.dtype.is_some() {
                return Err(meta(format!(
                    "column '{name}' holds strings: a text field takes no shape or dtype"
                )));
            }
            return Ok((TensorEncoding::Text, FieldKind::Text));
        }
        other => {
            return Err(meta(format!(
                "column '{name}' is {other}: fields are read from BINARY, LIST or FIXED_SIZE_LIST columns (tensors), number, bool, date, timestamp and decimal columns (scalars) and string columns (text)"
            )));
        }
    };
    check_settings(column, &spec)?;
    Ok((TensorEncoding::Scalar, FieldKind::Tensor(spec)))
}

/// The shape and dtype the settings give `column`, where given, are those of `spec`.
fn check_settings(column: &NamedColumn<'_>, spec: &TensorSpec) -> Result<(), FormatError> {
    if let Some(shape) = &column.shape
        && shape != spec.shape()
    {
        return Err(mismatch(
            column,
            "tensors of shape",
            format!("{:?}", spec.shape()),
            format!("{shape:?}"),
        ));
    }
    if let Some(dtype) = column.dtype
        && dtype != spec.dtype()
    {
        return Err(mismatch(
            column,
            "elements of type",
            spec.dtype().to_string(),
            dtype.to_string(),
        ));
    }
    Ok(())
}
