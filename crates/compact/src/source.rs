//! The samples of a source prefix, and each decoded into a table row: `.npy` objects (one field,
//! `tensor`), a folder per field (`SRC/x/<name>.npy` and `SRC/mask/<name>.npy`: one sample per
//! `<name>`), or `.npz` archives (one field per named array). Every array is validated against
//! its field's spec before it is copied (or, already in the table's layout, sliced).

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use object_store::path::Path;
use voxlake_format::npy::{NpyArray, read_npz_capped};
use voxlake_format::{Casting, FieldKind, SampleSpec, TensorSpec};

use crate::error::CompactError;
use crate::labels::Labels;

/// How a source holds its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceLayout {
    /// One `.npy` object per sample: its one field, `tensor`.
    Npy,
    /// A folder per field, one `.npy` per sample in each: `<field>/<name>.npy`.
    Folders(Vec<String>),
    /// One `.npz` archive per sample, a named array per field (the first archive's arrays,
    /// in order, where none are named).
    Npz(Vec<String>),
}

impl SourceLayout {
    /// The fields' names, where the layout has them.
    pub(crate) fn fields(&self) -> Option<&[String]> {
        match self {
            SourceLayout::Npy => None,
            SourceLayout::Folders(f) | SourceLayout::Npz(f) => Some(f),
        }
    }
}

/// One object of the source.
#[derive(Debug, Clone)]
pub(crate) struct SourceObject {
    /// Key relative to the source prefix.
    pub key: String,
    pub location: Path,
    pub size: u64,
    /// The object's bytes when they were already read (to settle a new table's spec).
    pub fetched: Option<Bytes>,
}

/// One sample of the source: its key (its id in the table) and its objects (one per field in
/// a folder layout, else one).
#[derive(Debug, Clone)]
pub(crate) struct SourceSample {
    pub key: String,
    pub parts: Vec<SourceObject>,
}

impl SourceSample {
    /// Bytes of its objects.
    pub(crate) fn size(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }
}

/// The samples of a listing, sorted by key, and the names some field's folder lacks: `(key,
/// field, the object looked for)`.
pub(crate) fn group(
    objects: Vec<SourceObject>,
    layout: &SourceLayout,
) -> (Vec<SourceSample>, Vec<(String, String, String)>) {
    let single = |suffix: &str, objects: Vec<SourceObject>| {
        let mut samples: Vec<SourceSample> = objects
            .into_iter()
            .filter(|o| o.key.ends_with(suffix))
            .map(|o| SourceSample {
                key: o.key.clone(),
                parts: vec![o],
            })
            .collect();
        samples.sort_by(|a, b| a.key.cmp(&b.key));
        samples
    };
    match layout {
        SourceLayout::Npy => (single(".npy", objects), Vec::new()),
        SourceLayout::Npz(_) => (single(".npz", objects), Vec::new()),
        SourceLayout::Folders(fields) => {
            // name → the object of each field
            let mut by_name: BTreeMap<String, Vec<Option<SourceObject>>> = BTreeMap::new();
            for object in objects {
                let Some((field, name)) = object.key.split_once('/') else {
                    continue;
                };
                let Some(at) = fields.iter().position(|f| f == field) else {
                    continue;
                };
                if !name.ends_with(".npy") {
                    continue;
                }
                let name = name.to_string();
                by_name
                    .entry(name)
                    .or_insert_with(|| vec![None; fields.len()])[at] = Some(object);
            }
            let mut samples = Vec::with_capacity(by_name.len());
            let mut incomplete = Vec::new();
            for (name, parts) in by_name {
                match parts.iter().position(Option::is_none) {
                    Some(missing) => incomplete.push((
                        name.clone(),
                        fields[missing].clone(),
                        format!("{}/{name}", fields[missing]),
                    )),
                    None => samples.push(SourceSample {
                        key: name,
                        parts: parts.into_iter().flatten().collect(),
                    }),
                }
            }
            (samples, incomplete)
        }
    }
}

/// Each field's array of a sample, parsed from its objects' bytes (`(key, npy bytes)` per
/// field, in the layout's order); an archive's members inflate to at most `cap` bytes.
pub(crate) fn arrays(
    sample_key: &str,
    parts: &[(String, Bytes)],
    layout: &SourceLayout,
    cap: u64,
) -> Result<Vec<(String, Bytes)>, CompactError> {
    match layout {
        SourceLayout::Npy | SourceLayout::Folders(_) => Ok(parts.to_vec()),
        SourceLayout::Npz(fields) => {
            let (key, bytes) = parts.first().ok_or_else(|| {
                CompactError::Internal(format!("{sample_key}: a sample without its archive"))
            })?;
            let members = read_npz_capped(bytes, cap).map_err(|source| CompactError::Npy {
                key: key.clone(),
                source,
            })?;
            fields
                .iter()
                .map(|field| {
                    members
                        .iter()
                        .find(|(name, _)| name == field)
                        .map(|(name, data)| (format!("{key}:{name}"), Bytes::from(data.clone())))
                        .ok_or_else(|| CompactError::MissingField {
                            key: key.clone(),
                            field: field.clone(),
                            expected: format!("array '{field}' of {key}"),
                        })
                })
                .collect()
        }
    }
}

/// The array names of the first archive that opens, for an `.npz` source without `--fields`.
pub(crate) fn npz_names(bytes: &[u8], key: &str) -> Result<Vec<String>, CompactError> {
    let members =
        read_npz_capped(bytes, voxlake_format::npy::NPZ_DEFAULT_CAP).map_err(|source| {
            CompactError::Npy {
                key: key.to_string(),
                source,
            }
        })?;
    Ok(members.into_iter().map(|(name, _)| name).collect())
}

/// A decoded sample ready for the table.
pub(crate) struct Row {
    pub key: String,
    pub label: Option<i64>,
    /// Each field's little-endian C-order bytes, in the sample's order.
    pub fields: Vec<Bytes>,
    /// CRC-32 of the row, computed where the fields were made (on the blocking pool when
    /// converted).
    pub checksum: i64,
    pub bytes_read: u64,
}

impl Row {
    /// Row `key` of `label` and `fields` (each field's bytes), its checksum computed here.
    pub(crate) fn new(key: String, label: Option<i64>, fields: Vec<Bytes>) -> Row {
        let parts: Vec<&[u8]> = fields.iter().map(|b| b.as_ref()).collect();
        Row {
            checksum: voxlake_format::row_checksum_of(&key, label, &parts),
            bytes_read: fields.iter().map(|b| b.len() as u64).sum(),
            key,
            label,
            fields,
        }
    }
}

/// Whether a field's array is already in the table's layout (a slice of the download).
pub(crate) fn ready(bytes: &[u8], spec: &TensorSpec) -> bool {
    NpyArray::parse(bytes).is_ok_and(|a| a.is_le_c(spec.dtype()))
}

/// A sample's row: each of its `arrays` (`(key, npy bytes)`, one per field of `sample`)
/// validated against its field's spec, converted where it is not in the table's layout, and
/// its label.
pub(crate) fn decode(
    key: String,
    arrays: Vec<(String, Bytes)>,
    bytes_read: u64,
    sample: &SampleSpec,
    casting: Casting,
    labels: Option<&Labels>,
) -> Result<Row, CompactError> {
    let mut fields = Vec::with_capacity(arrays.len());
    for ((part, bytes), field) in arrays.into_iter().zip(sample.fields()) {
        let FieldKind::Tensor(spec) = &field.kind else {
            return Err(CompactError::Internal(format!(
                "field '{}' of the table is not a tensor",
                field.name
            )));
        };
        fields.push(field_bytes(part, bytes, spec, casting)?);
    }
    let label = match labels {
        Some(labels) => Some(labels.get(&key).ok_or_else(|| CompactError::MissingLabel {
            key: key.clone(),
            labels: labels.location().to_string(),
        })?),
        None => None,
    };
    let parts: Vec<&[u8]> = fields.iter().map(|b| b.as_ref()).collect();
    let checksum = voxlake_format::row_checksum_of(&key, label, &parts);
    Ok(Row {
        key,
        label,
        checksum,
        fields,
        bytes_read,
    })
}

/// One `.npy` array (object `key`) as the table stores field `spec`.
fn field_bytes(
    key: String,
    bytes: Bytes,
    spec: &TensorSpec,
    casting: Casting,
) -> Result<Bytes, CompactError> {
    let npy_err = |source| CompactError::Npy {
        key: key.clone(),
        source,
    };
    let array = NpyArray::parse(&bytes).map_err(npy_err)?;
    if array.shape() != spec.shape() {
        return Err(CompactError::ShapeMismatch {
            key,
            expected: spec.shape().to_vec(),
            found: array.shape().to_vec(),
        });
    }
    if !array.dtype().can_cast(spec.dtype(), casting) {
        return Err(CompactError::DTypeMismatch {
            key,
            expected: spec.dtype(),
            found: array.dtype(),
            hint: if casting == Casting::Safe {
                " without loss (pass --dtype to allow narrowing)"
            } else {
                ""
            },
        });
    }
    if array.is_le_c(spec.dtype()) {
        // Already in table layout: share the downloaded buffer.
        let offset = bytes.len() - array.data().len();
        return Ok(bytes.slice(offset..));
    }
    let mut out = Vec::with_capacity(spec.nbytes());
    array
        .write_le_c(spec.dtype(), casting, &mut out)
        .map_err(npy_err)?;
    Ok(Bytes::from(out))
}

/// The keys of `samples` as a set (labels matched against them).
pub(crate) fn keys(samples: &[SourceSample]) -> HashSet<&str> {
    samples.iter().map(|s| s.key.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str) -> SourceObject {
        SourceObject {
            key: key.into(),
            location: Path::from(key),
            size: 1,
            fetched: None,
        }
    }

    #[test]
    fn a_folder_per_field_makes_one_sample_per_name() {
        let fields = SourceLayout::Folders(vec!["x".into(), "mask".into()]);
        let listing = [
            "x/b.npy",
            "mask/a.npy",
            "x/a.npy",
            "x/c.npy",
            "mask/c.npy",
            "other/a.npy",
            "x/notes.txt",
        ]
        .map(object)
        .to_vec();
        let (samples, incomplete) = group(listing, &fields);
        let keys: Vec<&str> = samples.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["a.npy", "c.npy"]);
        let parts: Vec<&str> = samples[0].parts.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(parts, ["x/a.npy", "mask/a.npy"], "in the fields' order");
        assert_eq!(
            incomplete,
            [(
                "b.npy".to_string(),
                "mask".to_string(),
                "mask/b.npy".to_string()
            )]
        );
        let (npy, none) = group(
            ["b.npy", "a.npy", "a.npz"].map(object).to_vec(),
            &SourceLayout::Npy,
        );
        assert_eq!(
            npy.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
            ["a.npy", "b.npy"]
        );
        assert!(none.is_empty());
    }
}
