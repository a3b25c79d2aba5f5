//! How a sample is read from a table's columns, for voxlake's own tables and for tables other
//! tools wrote (Spark, pyarrow/Ray, Petastorm, plain Parquet).
//!
//! [`SampleColumns::resolve`] decides, from the schema, the table's configuration and what the
//! user said ([`ColumnHints`]), which columns hold the sample's fields (the one tensor, or the
//! named fields: tensors, scalars, text) and how each is encoded ([`TensorEncoding`]), and
//! which columns hold the label and the id.
//! [`SampleColumns::normalize`] then turns each decoded record batch into voxlake's layout
//! (`id` Utf8, `label` Int64, `tensor` BinaryView of little-endian C-order bytes), pointing into
//! the decoded buffers wherever the layout allows: the rest of the pipeline reads every table the
//! same way.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Arc;
//! use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
//! use arrow_array::cast::AsArray;
//! use arrow_schema::{DataType, Field, Schema};
//! use voxlake_format::{DType, TENSOR_COLUMN};
//! use voxlake_format::sample::{ColumnHints, SampleColumns, TensorEncoding};
//!
//! // A pyarrow-style fixed_size_list<float>[4] column named "volume".
//! let item = Arc::new(Field::new("item", DataType::Float32, true));
//! let values = Float32Array::from(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
//! let volume = FixedSizeListArray::new(item, 4, Arc::new(values), None);
//! let schema = Arc::new(Schema::new(vec![Field::new("volume", volume.data_type().clone(), false)]));
//! let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(volume)])?;
//!
//! let hints = ColumnHints::default().with_tensor_shape(vec![2, 2], DType::F32);
//! let columns = SampleColumns::resolve(&schema, &HashMap::new(), &hints, &HashMap::new())?;
//! assert_eq!(columns.first().encoding, TensorEncoding::FixedSizeList);
//! let out = columns.normalize(&batch, |row| format!("part-0#{row}"))?;
//! let tensors = out.column_by_name(TENSOR_COLUMN).unwrap().as_binary_view();
//! assert_eq!(tensors.value(1), [5.0f32, 6.0, 7.0, 8.0].map(f32::to_le_bytes).concat());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use arrow_schema::{DataType, Field, Schema};

use crate::npy::NpyArray;
use crate::{
    DType, FORMAT_VERSION_KEY, FieldKind, FormatError, ID_COLUMN, LABEL_COLUMN, SampleSpec,
    TENSOR_COLUMN, TensorSpec,
};

/// Field metadata key naming an Arrow extension type.
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// Field metadata key of an extension type's parameters.
pub const EXTENSION_METADATA_KEY: &str = "ARROW:extension:metadata";
/// The canonical Arrow extension type of fixed-shape tensors (pyarrow's
/// `FixedShapeTensorArray`, Ray Data).
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

const NPY_MAGIC: &[u8] = b"\x93NUMPY";
const ZIP_MAGIC: &[u8] = b"PK\x03\x04";

/// How a table stores its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TensorEncoding {
    /// BINARY of the values' little-endian bytes in C order (voxlake's layout;
    /// `ndarray.tobytes()` from Spark or pandas): read as is.
    Raw,
    /// LIST of numbers or booleans (Spark's `array<float>`): the values point into the decoded
    /// list (booleans are unpacked to a byte each).
    List,
    /// FIXED_SIZE_LIST of numbers or booleans, also as the `arrow.fixed_shape_tensor` extension
    /// type.
    FixedSizeList,
    /// BINARY of `np.save` bytes per row (Petastorm's `NdarrayCodec`): the data after each
    /// row's header, converted where it is big-endian or in Fortran order.
    Npy,
    /// BINARY of `np.savez_compressed` bytes per row (Petastorm's `CompressedNdarrayCodec`):
    /// inflated, one copy per row.
    Npz,
    /// One number (or bool) per row: a tensor of shape `[]`, viewed in the decoded values.
    Scalar,
    /// A string per row (a string column, or a partition value): a text field.
    Text,
}

impl TensorEncoding {
    /// A short description for `inspect` and messages.
    pub fn describe(self) -> &'static str {
        match self {
            TensorEncoding::Raw => "raw little-endian bytes (read in place)",
            TensorEncoding::List => {
                "a list of numbers per row (read in place; booleans unpacked to a byte each)"
            }
            TensorEncoding::FixedSizeList => {
                "a fixed-size list of numbers (read in place; booleans unpacked to a byte each)"
            }
            TensorEncoding::Npy => "np.save bytes per row (read in place after each header)",
            TensorEncoding::Npz => "np.savez_compressed bytes per row (inflated, one copy)",
            TensorEncoding::Scalar => "one number per row (read in place)",
            TensorEncoding::Text => "a string per row",
        }
    }
}

/// What the user says about one field of a sample: its column (logical name), which names
/// the field too, and where the bytes carry no type or shape, those.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldHint {
    /// The column holding the field, and the field's name.
    pub column: String,
    /// The shape of one sample's value (needed for LIST and raw BINARY columns; `[]` for a
    /// scalar).
    pub shape: Option<Vec<usize>>,
    /// The element type (needed for raw BINARY columns; checked against the others).
    pub dtype: Option<DType>,
}

impl FieldHint {
    /// The field read from column `column`, shape and type found from the table.
    pub fn new(column: impl Into<String>) -> FieldHint {
        FieldHint {
            column: column.into(),
            shape: None,
            dtype: None,
        }
    }
}

/// What the user says about a table's columns; whatever is left out is found from the table.
///
/// A sample is its `fields` where they are given, else the one tensor of `tensor`, `shape`
/// and `dtype` (the field named `tensor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ColumnHints {
    /// The tensor column (default: `tensor`, else the only column that can hold tensors).
    pub tensor: Option<String>,
    /// The shape of one sample, C order (needed for LIST and raw BINARY columns).
    pub shape: Option<Vec<usize>>,
    /// The element type (needed for raw BINARY columns; checked against the others).
    pub dtype: Option<DType>,
    /// The label column: any integer, bool or integral float column (default: `label` if
    /// there is one).
    pub label: Option<String>,
    /// The id column, string or integer (default: `id` if there is one, else each row is
    /// named by its file and row number).
    pub id: Option<String>,
    /// The sample's fields, in order, the first a tensor (empty: the one tensor above).
    pub fields: Vec<FieldHint>,
}

impl ColumnHints {
    /// The tensor column's name.
    pub fn with_tensor_column(mut self, name: impl Into<String>) -> Self {
        self.tensor = Some(name.into());
        self
    }

    /// The shape of one sample, its element type taken from the column (LIST and
    /// FIXED_SIZE_LIST columns; raw bytes need [`with_tensor_shape`](Self::with_tensor_shape)).
    pub fn with_shape(mut self, shape: Vec<usize>) -> Self {
        self.shape = Some(shape);
        self
    }

    /// The shape and element type of one sample.
    pub fn with_tensor_shape(mut self, shape: Vec<usize>, dtype: DType) -> Self {
        self.shape = Some(shape);
        self.dtype = Some(dtype);
        self
    }

    /// The label column's name.
    pub fn with_label_column(mut self, name: impl Into<String>) -> Self {
        self.label = Some(name.into());
        self
    }

    /// The id column's name.
    pub fn with_id_column(mut self, name: impl Into<String>) -> Self {
        self.id = Some(name.into());
        self
    }

    /// One more field of the sample: column `hint.column`.
    pub fn with_field(mut self, hint: FieldHint) -> Self {
        self.fields.push(hint);
        self
    }

    /// Whether nothing was said (a voxlake table is then read as its configuration says).
    pub fn is_empty(&self) -> bool {
        *self == ColumnHints::default()
    }
}

/// How one field of a sample is read: resolved by [`SampleColumns::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldColumn {
    /// The field's name in voxlake's layout and in batches.
    pub name: String,
    /// The column holding it.
    pub column: String,
    /// How the column holds it.
    pub encoding: TensorEncoding,
    /// What it is: a tensor (its spec) or text.
    pub kind: FieldKind,
}

/// How each sample is read: resolved by [`SampleColumns::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleColumns {
    /// The sample's fields, in order (the first a tensor).
    pub fields: Vec<FieldColumn>,
    /// The fields' names and kinds, as one spec.
    pub sample: SampleSpec,
    /// The label column, if any.
    pub label: Option<String>,
    /// The id column, if any (else ids are made from file and row).
    pub id: Option<String>,
    /// voxlake's own layout: batches are used as decoded, checksums are verified.
    pub native: bool,
}

/// A row that does not decode as the resolved columns say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("row {row}: {reason}")]
pub struct RowError {
    /// The row in the record batch.
    pub row: usize,
    /// Why.
    pub reason: String,
}

fn meta(message: String) -> FormatError {
    FormatError::Metadata(message)
}

/// The field `name` of `schema`, or an error listing the columns there are.
fn field_named<'a>(schema: &'a Schema, name: &str) -> Result<&'a Field, FormatError> {
    schema.field_with_name(name).map_err(|_| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        meta(format!("no column '{name}' (the table has {names:?})"))
    })
}

/// The element type of an Arrow number type.
fn dtype_of(data_type: &DataType) -> Option<DType> {
    Some(match data_type {
        DataType::Int8 => DType::I8,
        DataType::Int16 => DType::I16,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::UInt8 => DType::U8,
        DataType::UInt16 => DType::U16,
        DataType::UInt32 => DType::U32,
        DataType::UInt64 => DType::U64,
        DataType::Float16 => DType::F16,
        DataType::Float32 => DType::F32,
        DataType::Float64 => DType::F64,
        DataType::Boolean => DType::Bool,
        _ => return None,
    })
}

fn is_binary(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

fn can_hold_tensors(data_type: &DataType) -> bool {
    match data_type {
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            dtype_of(item.data_type()).is_some()
        }
        other => is_binary(other),
    }
}

/// The shape recorded by an `arrow.fixed_shape_tensor` field, if it is one.
fn fixed_shape_of(field: &Field) -> Result<Option<Vec<usize>>, FormatError> {
    if field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) != Some(FIXED_SHAPE_TENSOR) {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct Params {
        shape: Vec<usize>,
        permutation: Option<Vec<usize>>,
    }
    let text = field
        .metadata()
        .get(EXTENSION_METADATA_KEY)
        .map_or("", String::as_str);
    let params: Params = serde_json::from_str(text).map_err(|e| {
        meta(format!(
            "column '{}': {FIXED_SHAPE_TENSOR} parameters '{text}' do not parse: {e}",
            field.name()
        ))
    })?;
    if let Some(p) = params.permutation
        && p.iter().enumerate().any(|(i, &d)| i != d)
    {
        return Err(meta(format!(
            "column '{}': {FIXED_SHAPE_TENSOR} with dimension permutation {p:?} is not supported (only the identity)",
            field.name()
        )));
    }
    Ok(Some(params.shape))
}

/// The `.npy` file an `np.savez_compressed` row holds (its only member), inflated.
pub(crate) fn inflate_npz(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut members = crate::npy::read_npz(bytes).map_err(|e| e.to_string())?;
    match members.len() {
        1 => Ok(members.remove(0).1),
        n => Err(format!("an npz archive of {n} arrays (expected one)")),
    }
}

/// The spec of one npy array, checked to be one voxlake can stream.
fn npy_spec(bytes: &[u8]) -> Result<TensorSpec, String> {
    let array = NpyArray::parse(bytes).map_err(|e| e.to_string())?;
    Ok(TensorSpec::new(array.shape().to_vec(), array.dtype()))
}

/// A field's column, as the user named it (or as found), with what the user said of it.
#[derive(Debug)]
pub struct NamedColumn<'a> {
    /// The field's name (`tensor` for the one tensor of a sample without named fields).
    pub name: String,
    /// The column's field in the table's schema.
    pub field: &'a Field,
    /// The shape the user gave.
    pub shape: Option<Vec<usize>>,
    /// The element type the user gave.
    pub dtype: Option<DType>,
}

impl SampleColumns {
    /// The columns that hold the sample's fields: those `hints.fields` names (each field named
    /// as its column), else the one tensor column, named `tensor`: the one `hints.tensor`
    /// names, else `tensor`, else the only column that can hold tensors (a BINARY, or a LIST
    /// or FIXED_SIZE_LIST of numbers or booleans).
    pub fn field_columns<'a>(
        schema: &'a Schema,
        hints: &ColumnHints,
    ) -> Result<Vec<NamedColumn<'a>>, FormatError> {
        let field_named = |name: &str| field_named(schema, name);
        if !hints.fields.is_empty() {
            if hints.tensor.is_some() || hints.shape.is_some() || hints.dtype.is_some() {
                return Err(meta(
                    "name the sample's fields (with_field, --field) or its one tensor column (with_tensor_column, --tensor-column, --shape, --dtype), not both".into(),
                ));
            }
            return hints
                .fields
                .iter()
                .map(|h| {
                    Ok(NamedColumn {
                        name: h.column.clone(),
                        field: field_named(&h.column)?,
                        shape: h.shape.clone(),
                        dtype: h.dtype,
                    })
                })
                .collect();
        }
        let field = match &hints.tensor {
            Some(name) => field_named(name)?,
            None => match schema.field_with_name(TENSOR_COLUMN) {
                Ok(f) => f,
                Err(_) => {
                    let candidates: Vec<&Field> = schema
                        .fields()
                        .iter()
                        .map(|f| f.as_ref())
                        .filter(|f| can_hold_tensors(f.data_type()))
                        .collect();
                    match candidates.as_slice() {
                        [only] => *only,
                        [] => {
                            return Err(meta(format!(
                                "no column can hold tensors (a BINARY, LIST or FIXED_SIZE_LIST of numbers or booleans); the table has {:?}",
                                schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
                            )));
                        }
                        many => {
                            return Err(meta(format!(
                                "several columns can hold tensors ({:?}): name one (with_tensor_column, --tensor-column), or name each as a field (with_field, --field)",
                                many.iter().map(|f| f.name()).collect::<Vec<_>>()
                            )));
                        }
                    }
                }
            },
        };
        Ok(vec![NamedColumn {
            name: TENSOR_COLUMN.to_string(),
            field,
            shape: hints.shape.clone(),
            dtype: hints.dtype,
        }])
    }

    /// Decides how samples are read from a table of `schema` (the Arrow schema of its files)
    /// with Delta configuration `config` (empty without a log), following `hints`. `first`
    /// holds the first value of each BINARY field column of a table that is not voxlake's:
    /// `np.save`/`np.savez_compressed` bytes say their shape and dtype themselves.
    pub fn resolve(
        schema: &Schema,
        config: &HashMap<String, String>,
        hints: &ColumnHints,
        first: &HashMap<String, Vec<u8>>,
    ) -> Result<SampleColumns, FormatError> {
        let field_named = |name: &str| field_named(schema, name);
        let named = !hints.fields.is_empty();
        // A voxlake table's own fields, as its configuration records them.
        let stored = config
            .contains_key(FORMAT_VERSION_KEY)
            .then(|| SampleSpec::from_table_configuration(config))
            .transpose()?;
        let mut fields = Vec::new();
        let mut all_stored = stored.is_some();
        for column in SampleColumns::field_columns(schema, hints)? {
            let stored_spec = stored
                .as_ref()
                .and_then(|s| s.field(column.field.name()))
                .and_then(|f| f.kind.tensor());
            all_stored &= stored_spec.is_some() && column.name == *column.field.name();
            let value = first.get(column.field.name()).map(Vec::as_slice);
            let (encoding, kind) = resolve_field(&column, stored_spec, value, named)?;
            fields.push(FieldColumn {
                name: column.name,
                column: column.field.name().clone(),
                encoding,
                kind,
            });
        }
        let sample = SampleSpec::new(
            fields
                .iter()
                .map(|f| (f.name.clone(), f.kind.clone()))
                .collect(),
        )?;
        // Label and id columns: named, else the usual names where the table has them.
        let pick =
            |named: &Option<String>, default: &str, what: &str, ok: fn(&DataType) -> bool| {
                let field = match named {
                    Some(name) => Some(field_named(name)?),
                    None => schema.field_with_name(default).ok(),
                };
                match field {
                    Some(f) if !ok(f.data_type()) => Err(meta(format!(
                        "{what} column '{}' is {}: {what}s are {}",
                        f.name(),
                        f.data_type(),
                        if what == "label" {
                            "integers, bools or integral floats"
                        } else {
                            "strings or integers"
                        }
                    ))),
                    other => Ok(other),
                }
            };
        let label = pick(&hints.label, LABEL_COLUMN, "label", |t| {
            t.is_integer() || matches!(t, DataType::Boolean | DataType::Float32 | DataType::Float64)
        })?;
        let id = pick(&hints.id, ID_COLUMN, "id", |t| {
            t.is_integer() || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        })?;
        let label = label.map(|f| f.name().clone());
        let id = id.map(|f| f.name().clone());
        let native = all_stored
            && fields.iter().all(|f| f.encoding == TensorEncoding::Raw)
            && label.as_deref().is_none_or(|l| l == LABEL_COLUMN)
            && id.as_deref() == Some(ID_COLUMN);
        Ok(SampleColumns {
            fields,
            sample,
            label,
            id,
            native,
        })
    }

    /// How a voxlake table's own fields are read, as its configuration records them: each
    /// field from its column, as stored (raw bytes), with voxlake's label and id.
    pub fn stored(sample: &SampleSpec) -> SampleColumns {
        SampleColumns {
            fields: sample
                .fields()
                .iter()
                .map(|f| FieldColumn {
                    name: f.name.clone(),
                    column: f.name.clone(),
                    encoding: TensorEncoding::Raw,
                    kind: f.kind.clone(),
                })
                .collect(),
            sample: sample.clone(),
            label: Some(LABEL_COLUMN.into()),
            id: Some(ID_COLUMN.into()),
            native: true,
        }
    }

    /// The first field (a tensor: `Batch::tensors`).
    pub fn first(&self) -> &FieldColumn {
        &self.fields[0]
    }

    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&FieldColumn> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The source column to read for `column` of voxlake's layout (`id`, `label`, a field's
    /// name), or `None` when the table has none (ids are then made). Other names are read as
    /// named.
    pub fn source_of<'a>(&'a self, column: &'a str) -> Option<&'a str> {
        match column {
            LABEL_COLUMN => self.label.as_deref(),
            ID_COLUMN => self.id.as_deref(),
            other => Some(self.field(other).map_or(other, |f| f.column.as_str())),
        }
    }
}

/// How the column of `column` holds its field: the encoding and what the field is. `stored` is
/// its spec where a voxlake table records it; `first` its first value where it is BINARY and
/// not voxlake's; `named`: the sample's fields were named (scalars and strings may be fields).
fn resolve_field(
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
            if shape.iter().product::<usize>() != numel {
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
                    TensorEncoding::Npz => inflate_npz(bytes).and_then(|b| npy_spec(&b)),
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
                "column '{name}' is {other}: fields are read from BINARY, LIST or FIXED_SIZE_LIST columns (tensors), number or bool columns (scalars) and string columns (text)"
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

mod normalize;
#[cfg(test)]
mod tests;
