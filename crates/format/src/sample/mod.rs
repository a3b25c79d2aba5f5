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
    /// Whether another field's column holds a value in each row (1) or a null (0): the bool
    /// scalar a [`NullPolicy::Mask`] adds.
    Validity,
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
            TensorEncoding::Validity => "1 where the column holds a value, 0 where it is null",
        }
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
    /// What its numbers mean where the column's type says more than its dtype: a date's or
    /// timestamp's unit and zone, a decimal's precision and scale.
    pub unit: Option<String>,
    /// What a null of the column becomes.
    pub null: NullPolicy,
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
    DType::of_arrow(data_type)
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

/// The shape recorded by an `arrow.fixed_shape_tensor` field, if it is one; a permuted
/// layout (not C order) or parameters that do not parse are an error naming the column.
/// arrow-schema's `FixedShapeTensor` is not used: it refuses pyarrow's tensors (their items
/// are nullable) and panics on a shape whose product passes `i32`.
pub fn fixed_shape_of(field: &Field) -> Result<Option<Vec<usize>>, FormatError> {
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
/// The one array of an `np.savez_compressed` row, inflating to at most `cap` bytes.
pub(crate) fn inflate_npz(bytes: &[u8], cap: u64) -> Result<Vec<u8>, String> {
    let mut members = crate::npy::read_npz_capped(bytes, cap).map_err(|e| e.to_string())?;
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
    /// What a null becomes, as the user said.
    pub null: NullPolicy,
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
        if let Some((name, _)) = hints
            .nulls
            .iter()
            .find(|(name, _)| hints.fields.iter().all(|f| f.column != *name))
        {
            return Err(meta(format!(
                "a null policy is given for '{name}', which is not a field of the sample (name it with with_field, --field)"
            )));
        }
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
                        null: hints
                            .nulls
                            .iter()
                            .rev()
                            .find(|(name, _)| *name == h.column)
                            .map_or_else(|| h.null.clone(), |(_, p)| p.clone()),
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
            null: NullPolicy::Error,
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
            let stored_field = stored.as_ref().and_then(|s| s.field(column.field.name()));
            let stored_spec = stored_field.and_then(|f| f.kind.tensor());
            all_stored &= stored_field.is_some() && column.name == *column.field.name();
            let value = first.get(column.field.name()).map(Vec::as_slice);
            let (encoding, kind) = resolve_field(&column, stored_spec, value, named)?;
            let mask = (column.null == NullPolicy::Mask).then(|| FieldColumn {
                name: NullPolicy::mask_name(&column.name),
                column: column.field.name().clone(),
                encoding: TensorEncoding::Validity,
                kind: FieldKind::Tensor(TensorSpec::new(Vec::new(), DType::Bool)),
                unit: None,
                null: NullPolicy::Error,
            });
            fields.push(FieldColumn {
                unit: unit_of(column.field.data_type()),
                name: column.name,
                column: column.field.name().clone(),
                encoding,
                kind,
                null: column.null,
            });
            fields.extend(mask);
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
            && fields
                .iter()
                .all(|f| matches!(f.encoding, TensorEncoding::Raw | TensorEncoding::Text))
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
                    encoding: match f.kind {
                        FieldKind::Text => TensorEncoding::Text,
                        _ => TensorEncoding::Raw,
                    },
                    kind: f.kind.clone(),
                    unit: None,
                    null: NullPolicy::Error,
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

mod convert;
mod hints;
mod normalize;
mod nulls;
mod resolve;
mod temporal;

pub use temporal::MAX_EXACT_DECIMAL_PRECISION;
use temporal::{temporal_dtype_of, unit_of};

pub use hints::{ColumnHints, FieldHint, NullPolicy};
use resolve::resolve_field;
#[cfg(test)]
mod tests;
