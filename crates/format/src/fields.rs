//! A sample as a set of named fields: a volume and its voxel mask, several attribute volumes,
//! scalars (tensors of shape `[]`) and text. The single tensor of a reference-case table is the
//! one-field case, its field named `tensor`.
//!
//! ```
//! use voxlake_format::{DType, FieldKind, SampleSpec, TensorSpec};
//!
//! let sample = SampleSpec::new(vec![
//!     ("x".into(), FieldKind::Tensor(TensorSpec::new(vec![30, 30, 10, 10], DType::F32))),
//!     ("mask".into(), FieldKind::Tensor(TensorSpec::new(vec![30, 30, 10], DType::U8))),
//! ])?;
//! assert_eq!(sample.tensor_bytes(), 360_000 + 9_000);
//! let config = sample.table_configuration()?;
//! assert_eq!(SampleSpec::from_table_configuration(&config)?, sample);
//! // Today's one-field tables keep their keys.
//! let one = SampleSpec::from(TensorSpec::new(vec![4], DType::F32));
//! assert!(one.table_configuration()?.contains_key(voxlake_format::SHAPE_KEY));
//! # Ok::<(), voxlake_format::FormatError>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::{
    CHECKSUM_COLUMN, DType, FORMAT_VERSION, FORMAT_VERSION_KEY, FormatError, ID_COLUMN,
    LABEL_COLUMN, TENSOR_COLUMN, TensorSpec,
};

/// Table configuration key of a table whose sample is not the one `tensor` field: its fields
/// as a JSON list of `{"name", "shape", "dtype"}` (a text field: `{"name", "dtype": "text"}`),
/// in order.
pub const FIELDS_KEY: &str = "voxlake.fields";

/// The format version of a table whose fields include text (a UTF-8 column per text field):
/// builds that read version 1 refuse it by its version instead of misreading it. Tables of
/// tensors only keep [`FORMAT_VERSION`].
pub const TEXT_FORMAT_VERSION: u32 = 2;

/// The `dtype` a stored text field has.
const TEXT: &str = "text";

/// What one field of a sample holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldKind {
    /// A tensor of this spec (a scalar is a tensor of shape `[]`).
    Tensor(TensorSpec),
    /// A string per sample (a string column or a partition value).
    Text,
}

impl FieldKind {
    /// The tensor spec, for a tensor field.
    pub fn tensor(&self) -> Option<&TensorSpec> {
        match self {
            FieldKind::Tensor(spec) => Some(spec),
            FieldKind::Text => None,
        }
    }
}

impl std::fmt::Display for FieldKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldKind::Tensor(spec) => spec.fmt(f),
            FieldKind::Text => f.write_str("text"),
        }
    }
}

/// One named field of a sample.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SampleField {
    /// The field's name: its column in voxlake's layout, its key in a batch.
    pub name: String,
    /// What it holds.
    pub kind: FieldKind,
}

/// The fields of every sample of a table, in order. The first is a tensor (what
/// `Batch::tensors` holds).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SampleSpec {
    fields: Vec<SampleField>,
    /// The first field's spec (it is a tensor).
    first: TensorSpec,
}

/// A field as the table configuration stores it (a text field has no shape).
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shape: Option<Vec<usize>>,
    dtype: String,
}

/// Names a field may not have: voxlake's own columns.
const RESERVED: [&str; 3] = [ID_COLUMN, LABEL_COLUMN, CHECKSUM_COLUMN];

impl SampleSpec {
    /// A sample of these fields, checked: at least one, the first a tensor, names unique and
    /// none of voxlake's own columns (`id`, `label`, `row_crc32`).
    pub fn new(fields: Vec<(String, FieldKind)>) -> Result<SampleSpec, FormatError> {
        let meta = |m: String| FormatError::Metadata(m);
        let first = match fields.first() {
            None => return Err(meta("a sample needs at least one field".into())),
            Some((name, FieldKind::Text)) => {
                return Err(meta(format!(
                    "field '{name}' holds text: a sample's first field is a tensor"
                )));
            }
            Some((_, FieldKind::Tensor(spec))) => spec.clone(),
        };
        for (name, kind) in &fields {
            if let FieldKind::Tensor(spec) = kind {
                spec.clone()
                    .checked()
                    .map_err(|e| meta(format!("field '{name}': {e}")))?;
            }
        }
        let total = fields
            .iter()
            .filter_map(|(_, k)| k.tensor().and_then(TensorSpec::checked_nbytes))
            .try_fold(0usize, usize::checked_add);
        if total.is_none_or(|t| t > isize::MAX as usize) {
            return Err(meta(
                "the fields together are more bytes than a sample can hold".into(),
            ));
        }
        for (i, (name, _)) in fields.iter().enumerate() {
            if name.is_empty() || RESERVED.contains(&name.as_str()) {
                return Err(meta(format!(
                    "'{name}' cannot name a field (id, label and row_crc32 are voxlake's columns)"
                )));
            }
            if fields[..i].iter().any(|(other, _)| other == name) {
                return Err(meta(format!("field '{name}' is named twice")));
            }
        }
        Ok(SampleSpec {
            fields: fields
                .into_iter()
                .map(|(name, kind)| SampleField { name, kind })
                .collect(),
            first,
        })
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[SampleField] {
        &self.fields
    }

    /// The field `name`.
    pub fn field(&self, name: &str) -> Option<&SampleField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The first field's spec (a tensor: `Batch::tensors`).
    pub fn first(&self) -> &TensorSpec {
        &self.first
    }

    /// The tensor fields and their specs, in order.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, &TensorSpec)> {
        self.fields
            .iter()
            .filter_map(|f| f.kind.tensor().map(|s| (f.name.as_str(), s)))
    }

    /// Bytes of one sample's tensors, all fields together.
    pub fn tensor_bytes(&self) -> usize {
        self.tensors().map(|(_, s)| s.nbytes()).sum()
    }

    /// Whether the sample is today's one tensor, named `tensor`.
    pub fn is_single(&self) -> bool {
        self.fields.len() == 1 && self.fields[0].name == TENSOR_COLUMN
    }

    /// The keys recorded in the Delta table configuration: a one-field sample named `tensor`
    /// keeps the `voxlake.tensor.*` keys (tables and readers of before read it as before);
    /// others list their fields under [`FIELDS_KEY`], at [`TEXT_FORMAT_VERSION`] where one
    /// holds text.
    pub fn table_configuration(&self) -> Result<HashMap<String, String>, FormatError> {
        if self.is_single() {
            return Ok(self.first().table_configuration());
        }
        let list: Vec<Stored> = self
            .fields
            .iter()
            .map(|field| match &field.kind {
                FieldKind::Tensor(spec) => Stored {
                    name: field.name.clone(),
                    shape: Some(spec.shape().to_vec()),
                    dtype: spec.dtype().name().to_string(),
                },
                FieldKind::Text => Stored {
                    name: field.name.clone(),
                    shape: None,
                    dtype: TEXT.to_string(),
                },
            })
            .collect();
        let version = match self.tensors().count() == self.fields.len() {
            true => FORMAT_VERSION,
            false => TEXT_FORMAT_VERSION,
        };
        let list = serde_json::to_string(&list)
            .map_err(|e| FormatError::Metadata(format!("the fields do not serialize: {e}")))?;
        Ok(HashMap::from([
            (FORMAT_VERSION_KEY.to_string(), version.to_string()),
            (FIELDS_KEY.to_string(), list),
        ]))
    }

    /// The sample a table configuration records: its [`FIELDS_KEY`], else the one `tensor`
    /// field of the `voxlake.tensor.*` keys.
    pub fn from_table_configuration(
        config: &HashMap<String, String>,
    ) -> Result<SampleSpec, FormatError> {
        let Some(text) = config.get(FIELDS_KEY) else {
            return Ok(TensorSpec::from_table_configuration(config)?.into());
        };
        let version = config.get(FORMAT_VERSION_KEY).map(String::as_str);
        if !version
            .and_then(|v| v.parse::<u32>().ok())
            .is_some_and(|v| (FORMAT_VERSION..=TEXT_FORMAT_VERSION).contains(&v))
        {
            return Err(FormatError::Metadata(format!(
                "format version {version:?} is not supported (this build reads {FORMAT_VERSION} to {TEXT_FORMAT_VERSION})"
            )));
        }
        let stored: Vec<Stored> = serde_json::from_str(text).map_err(|e| {
            FormatError::Metadata(format!(
                "'{FIELDS_KEY}' is not a list of {{name, shape, dtype}}: {e}"
            ))
        })?;
        let fields = stored
            .into_iter()
            .map(|f| match (f.shape, f.dtype.as_str()) {
                (None, TEXT) => Ok((f.name, FieldKind::Text)),
                (Some(shape), dtype) => {
                    let dtype: DType = dtype.parse()?;
                    Ok((f.name, FieldKind::Tensor(TensorSpec::new(shape, dtype))))
                }
                (None, _) => Err(FormatError::Metadata(format!(
                    "'{FIELDS_KEY}': field '{}' has no shape",
                    f.name
                ))),
            })
            .collect::<Result<Vec<_>, FormatError>>()?;
        SampleSpec::new(fields)
    }

    /// The Arrow schema of a table of this sample: `id`, `label`, each tensor field as BINARY
    /// (its spec in the field's metadata), each text field as UTF-8, and the checksum column
    /// where `checksums`.
    pub fn arrow_schema_with(&self, checksums: bool) -> SchemaRef {
        let mut fields = vec![
            Field::new(ID_COLUMN, DataType::Utf8, false),
            Field::new(LABEL_COLUMN, DataType::Int64, true),
        ];
        for field in &self.fields {
            fields.push(match &field.kind {
                FieldKind::Tensor(spec) => Field::new(&field.name, DataType::Binary, false)
                    .with_metadata(spec.table_configuration()),
                FieldKind::Text => Field::new(&field.name, DataType::Utf8, false),
            });
        }
        if checksums {
            fields.push(Field::new(CHECKSUM_COLUMN, DataType::Int64, true));
        }
        Arc::new(Schema::new(fields))
    }
}

impl From<TensorSpec> for SampleSpec {
    fn from(spec: TensorSpec) -> SampleSpec {
        SampleSpec {
            fields: vec![SampleField {
                name: TENSOR_COLUMN.to_string(),
                kind: FieldKind::Tensor(spec.clone()),
            }],
            first: spec,
        }
    }
}

impl std::fmt::Display for SampleSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_single() {
            return self.first().fmt(f);
        }
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", field.name, field.kind)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(shape: &[usize], dtype: DType) -> FieldKind {
        FieldKind::Tensor(TensorSpec::new(shape.to_vec(), dtype))
    }

    #[test]
    fn shapes_whose_size_overflows_are_refused_by_name() {
        // 6148914691236517206 × 3 wraps to 2 in 64 bits: it must never pass as 2 elements.
        let e = SampleSpec::new(vec![(
            "x".into(),
            tensor(&[6148914691236517206, 3], DType::U8),
        )])
        .unwrap_err()
        .to_string();
        assert!(e.contains("field 'x'") && e.contains("overflows"), "{e}");
        let config = TensorSpec::new(vec![1], DType::F32)
            .table_configuration()
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                crate::SHAPE_KEY => (k, "[4611686018427387904,4]".to_string()),
                _ => (k, v),
            })
            .collect();
        let e = TensorSpec::from_table_configuration(&config)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflows"), "{e}");
        // Two fields each fine, together past what a sample can hold.
        let half = tensor(&[1 << 62], DType::U8);
        assert!(SampleSpec::new(vec![("a".into(), half.clone()), ("b".into(), half)]).is_err());
        assert_eq!(
            TensorSpec::new(vec![2, 3], DType::F64).checked_nbytes(),
            Some(48)
        );
    }

    #[test]
    fn fields_round_trip_and_one_field_tables_keep_their_keys() {
        let two = SampleSpec::new(vec![
            ("x".into(), tensor(&[3, 2], DType::F32)),
            ("porosity".into(), tensor(&[], DType::F64)),
        ])
        .unwrap();
        let config = two.table_configuration().unwrap();
        assert_eq!(
            config[FIELDS_KEY],
            r#"[{"name":"x","shape":[3,2],"dtype":"f32"},{"name":"porosity","shape":[],"dtype":"f64"}]"#
        );
        assert_eq!(SampleSpec::from_table_configuration(&config).unwrap(), two);
        assert_eq!(two.tensor_bytes(), 24 + 8);
        assert_eq!(two.to_string(), "x [3, 2] f32, porosity [] f64");
        let schema = two.arrow_schema_with(true);
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["id", "label", "x", "porosity", "row_crc32"]);
        // A one-field sample named `tensor` is today's table, keys and schema alike.
        let spec = TensorSpec::new(vec![30, 30, 10, 10], DType::F32);
        let one = SampleSpec::from(spec.clone());
        assert_eq!(
            one.table_configuration().unwrap(),
            spec.table_configuration()
        );
        assert_eq!(one.arrow_schema_with(true), spec.arrow_schema());
        assert_eq!(
            SampleSpec::from_table_configuration(&spec.table_configuration()).unwrap(),
            one
        );
    }

    #[test]
    fn bad_samples_are_refused_by_name() {
        let err =
            |fields: Vec<(String, FieldKind)>| SampleSpec::new(fields).unwrap_err().to_string();
        assert!(err(vec![]).contains("at least one field"));
        assert!(err(vec![("well".into(), FieldKind::Text)]).contains("first field is a tensor"));
        let x = || ("x".to_string(), tensor(&[2], DType::U8));
        assert!(err(vec![x(), x()]).contains("'x' is named twice"));
        assert!(err(vec![("label".into(), tensor(&[2], DType::U8))]).contains("'label' cannot"));
        let bad = HashMap::from([
            (FORMAT_VERSION_KEY.to_string(), "3".to_string()),
            (FIELDS_KEY.to_string(), "[]".to_string()),
        ]);
        let e = SampleSpec::from_table_configuration(&bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("format version Some(\"3\") is not supported"),
            "{e}"
        );
        let bad = HashMap::from([
            (FORMAT_VERSION_KEY.to_string(), "1".to_string()),
            (FIELDS_KEY.to_string(), "[{\"name\":\"x\"}]".to_string()),
        ]);
        let e = SampleSpec::from_table_configuration(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a list of {name, shape, dtype}"), "{e}");
        let bad = HashMap::from([
            (FORMAT_VERSION_KEY.to_string(), "2".to_string()),
            (
                FIELDS_KEY.to_string(),
                r#"[{"name":"x","dtype":"f32"}]"#.to_string(),
            ),
        ]);
        let e = SampleSpec::from_table_configuration(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("field 'x' has no shape"), "{e}");
    }

    #[test]
    fn text_fields_are_stored_as_utf8_at_the_text_version() {
        let with_text = SampleSpec::new(vec![
            ("x".into(), tensor(&[2], DType::U8)),
            ("well".into(), FieldKind::Text),
        ])
        .unwrap();
        let config = with_text.table_configuration().unwrap();
        assert_eq!(config[FORMAT_VERSION_KEY], TEXT_FORMAT_VERSION.to_string());
        assert_eq!(
            config[FIELDS_KEY],
            r#"[{"name":"x","shape":[2],"dtype":"u8"},{"name":"well","dtype":"text"}]"#
        );
        assert_eq!(
            SampleSpec::from_table_configuration(&config).unwrap(),
            with_text
        );
        let schema = with_text.arrow_schema_with(false);
        assert_eq!(schema.field(3).data_type(), &DataType::Utf8);
        assert_eq!(with_text.tensor_bytes(), 2);
    }
}
