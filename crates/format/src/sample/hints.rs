//! What the user says about a table's columns ([`ColumnHints`], a [`FieldHint`] per field):
//! whatever is left out is found from the table by `SampleColumns::resolve`.

use crate::DType;

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
    /// What a null value of the column becomes (default: an error naming it).
    pub null: NullPolicy,
}

impl FieldHint {
    /// The field read from column `column`, shape and type found from the table.
    pub fn new(column: impl Into<String>) -> FieldHint {
        FieldHint {
            column: column.into(),
            shape: None,
            dtype: None,
            null: NullPolicy::Error,
        }
    }
}

/// What a field's null value becomes. Nothing is silently zero: the default is an error that
/// names the column, the file and the row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NullPolicy {
    /// A null is an error naming the column, file and row.
    #[default]
    Error,
    /// A null becomes this value: every element of a tensor (a number, `true`/`false`), or
    /// the text of a text field.
    Fill(String),
    /// A null becomes zeros (empty text), and the sample gets a field `<name>_valid`
    /// (a bool scalar: 1 where the value was there, 0 where it was null).
    Mask,
}

impl NullPolicy {
    /// The name of the validity field a [`NullPolicy::Mask`] adds to field `field`.
    pub fn mask_name(field: &str) -> String {
        format!("{field}_valid")
    }
}

impl std::str::FromStr for NullPolicy {
    type Err = String;

    /// `error`, `mask` or `fill:VALUE` (as `--null FIELD=…` takes it).
    fn from_str(s: &str) -> Result<NullPolicy, String> {
        match s {
            "error" => Ok(NullPolicy::Error),
            "mask" => Ok(NullPolicy::Mask),
            _ => match s.strip_prefix("fill:") {
                Some(value) => Ok(NullPolicy::Fill(value.to_string())),
                None => Err(format!(
                    "'{s}' is not a null policy: error, mask or fill:VALUE"
                )),
            },
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
    /// What nulls of a field become, by field name (each must name a field of `fields`;
    /// applied over the field's own [`FieldHint::null`]).
    pub nulls: Vec<(String, NullPolicy)>,
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

    /// What nulls of field `name` become (see [`NullPolicy`]; default an error).
    pub fn with_null(mut self, name: impl Into<String>, policy: NullPolicy) -> Self {
        self.nulls.push((name.into(), policy));
        self
    }

    /// Whether nothing was said (a voxlake table is then read as its configuration says).
    pub fn is_empty(&self) -> bool {
        *self == ColumnHints::default()
    }
}
