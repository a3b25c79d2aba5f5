//! Volumes larger than a sample, stored as bricks: a table of one row per brick
//! ([`BrickSpec`]: the brick's shape and the volume's fields), each volume's shape and class
//! voxels in the row of its last brick ([`VolumeInfo`]), the bricks' ids ([`brick_id`]).
//! The layout is docs/format.md's "Bricked volumes".
//!
//! ```
//! use voxlake_format::volume::{BrickSpec, VolumeField};
//! use voxlake_format::DType;
//!
//! let spec = BrickSpec::new(
//!     [32, 32, 32],
//!     vec![VolumeField::new("image", DType::F32), VolumeField::new("mask", DType::U8)],
//! )?;
//! // A label map of one byte after the first field has its classes counted.
//! assert_eq!(spec.class_fields(), ["mask"]);
//! let config = spec.table_configuration()?;
//! assert_eq!(BrickSpec::from_table_configuration(&config)?, Some(spec));
//! # Ok::<(), voxlake_format::FormatError>(())
//! ```

use std::collections::{BTreeMap, HashMap};

use crate::{DType, FieldKind, FormatError, SampleSpec, TensorSpec};

/// Table configuration key of a bricked table: `{"brick": [z, y, x], "classFields": [...]}`.
pub const BRICKS_KEY: &str = "voxlake.bricks";

/// The text field of a bricked table holding each brick's volume id.
pub const VOLUME_FIELD: &str = "volume";

/// The text field of a bricked table holding a volume's [`VolumeInfo`] (JSON) in the row of
/// its last brick, and nothing (empty text) in its other rows.
pub const VOLUME_INFO_FIELD: &str = "volume_info";

/// The field of a batch of patches holding each patch's origin in its volume (z, y, x; int64),
/// so no field of a volume may have this name.
pub const ORIGIN_FIELD: &str = "origin";

/// Voxels a side of a brick unless told otherwise.
pub const DEFAULT_BRICK: [u64; 3] = [32, 32, 32];

/// Voxel coordinates kept a class and volume unless told otherwise.
pub const DEFAULT_CLASS_COORDS: usize = 1024;

/// Classes a label field of one volume may hold: more is not a label map.
pub const MAX_CLASSES: usize = 256;

/// Voxel coordinates a class of one volume may keep.
pub const MAX_CLASS_COORDS: usize = 1 << 16;

/// Bytes a volume's info may take (checked before it is parsed).
pub const MAX_INFO_BYTES: usize = 64 << 20;

/// Voxels a side of a brick at most.
const MAX_BRICK_SIDE: u64 = 1024;

/// The id of brick `brick` (C order in the volume's grid) of volume `volume`: `volume#brick`.
/// The brick number after the last `#` makes the ids of different volumes differ.
pub fn brick_id(volume: &str, brick: u64) -> String {
    format!("{volume}#{brick}")
}

/// One field of a volume: its name, element type, and channels (`None`: a 3-D volume; `Some(c)`:
/// a 4-D volume of `c` channels first).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VolumeField {
    /// The field's name (its column, its key in a batch).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Channels before the three spatial axes, if any.
    pub channels: Option<u64>,
}

impl VolumeField {
    /// A 3-D field.
    pub fn new(name: impl Into<String>, dtype: DType) -> VolumeField {
        VolumeField {
            name: name.into(),
            dtype,
            channels: None,
        }
    }

    /// The field with `channels` channels first.
    pub fn with_channels(self, channels: u64) -> VolumeField {
        VolumeField {
            channels: Some(channels),
            ..self
        }
    }

    /// The shape of this field over `spatial` voxels: the channels first where it has them.
    pub fn shape(&self, spatial: [u64; 3]) -> Vec<u64> {
        self.channels.into_iter().chain(spatial).collect()
    }

    /// Whether its values can be classes (integers or booleans, no channels).
    fn can_hold_classes(&self) -> bool {
        self.channels.is_none()
            && !matches!(
                self.dtype,
                DType::F16 | DType::BF16 | DType::F32 | DType::F64
            )
    }
}

/// A bricked table's layout: the brick's voxels, the volume's fields (each stored as a column
/// of bricks, every field on the same grid), and the fields whose classes each volume's info
/// counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrickSpec {
    brick: [u64; 3],
    fields: Vec<VolumeField>,
    class_fields: Vec<String>,
}

/// [`BRICKS_KEY`]'s value.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredBricks {
    brick: [u64; 3],
    class_fields: Vec<String>,
}

impl BrickSpec {
    /// Volumes of `fields` in bricks of `brick` voxels; the classes are counted of each field
    /// after the first whose values are one byte (`u8`, `i8`, `bool`: a label map), unless
    /// [`with_class_fields`](Self::with_class_fields) says which.
    pub fn new(brick: [u64; 3], fields: Vec<VolumeField>) -> Result<BrickSpec, FormatError> {
        let class_fields = fields
            .iter()
            .skip(1)
            .filter(|f| f.can_hold_classes() && f.dtype.size() == 1)
            .map(|f| f.name.clone())
            .collect();
        let spec = BrickSpec {
            brick,
            fields,
            class_fields,
        };
        spec.check()?;
        Ok(spec)
    }

    /// The fields whose classes each volume's info counts (integer fields without channels).
    pub fn with_class_fields(self, names: Vec<String>) -> Result<BrickSpec, FormatError> {
        let spec = BrickSpec {
            class_fields: names,
            ..self
        };
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> Result<(), FormatError> {
        let bad = |m: String| Err(FormatError::Metadata(m));
        if self.brick.iter().any(|&b| b == 0 || b > MAX_BRICK_SIDE) {
            return bad(format!(
                "brick {:?}: every side takes 1 to {MAX_BRICK_SIDE} voxels",
                self.brick
            ));
        }
        for field in &self.fields {
            if [VOLUME_FIELD, VOLUME_INFO_FIELD, ORIGIN_FIELD].contains(&field.name.as_str()) {
                return bad(format!(
                    "'{}' cannot name a volume's field (volume, volume_info and origin are voxlake's)",
                    field.name
                ));
            }
            if field.channels == Some(0) {
                return bad(format!("field '{}' has 0 channels", field.name));
            }
        }
        for (i, name) in self.class_fields.iter().enumerate() {
            match self.fields.iter().find(|f| &f.name == name) {
                None => return bad(format!("class field '{name}' is not a field")),
                Some(f) if !f.can_hold_classes() => {
                    return bad(format!(
                        "class field '{name}' holds {}{}: classes are integers of a volume without channels",
                        f.dtype,
                        f.channels
                            .map(|c| format!(" in {c} channels"))
                            .unwrap_or_default()
                    ));
                }
                Some(_) if self.class_fields[..i].contains(name) => {
                    return bad(format!("class field '{name}' is named twice"));
                }
                Some(_) => {}
            }
        }
        // The sample's own checks: names, sizes.
        self.sample().map(drop)
    }

    /// Voxels of a brick along each axis.
    pub fn brick(&self) -> [u64; 3] {
        self.brick
    }

    /// The volume's fields, in order.
    pub fn fields(&self) -> &[VolumeField] {
        &self.fields
    }

    /// The fields whose classes each volume's info counts.
    pub fn class_fields(&self) -> &[String] {
        &self.class_fields
    }

    /// The sample a row holds: each field's brick (channels first, padded with zeros past the
    /// volume's edge), then the volume's id ([`VOLUME_FIELD`]) and its info
    /// ([`VOLUME_INFO_FIELD`]).
    pub fn sample(&self) -> Result<SampleSpec, FormatError> {
        let mut fields = Vec::with_capacity(self.fields.len() + 2);
        for field in &self.fields {
            let shape = field
                .shape(self.brick)
                .into_iter()
                .map(usize::try_from)
                .collect::<Result<Vec<usize>, _>>()
                .map_err(|_| FormatError::Metadata(format!("field '{}': too large", field.name)))?;
            fields.push((
                field.name.clone(),
                FieldKind::Tensor(TensorSpec::new(shape, field.dtype)),
            ));
        }
        fields.push((VOLUME_FIELD.to_string(), FieldKind::Text));
        fields.push((VOLUME_INFO_FIELD.to_string(), FieldKind::Text));
        SampleSpec::new(fields)
    }

    /// The keys recorded in the Delta table configuration: the sample's, and [`BRICKS_KEY`].
    pub fn table_configuration(&self) -> Result<HashMap<String, String>, FormatError> {
        let mut config = self.sample()?.table_configuration()?;
        let stored = StoredBricks {
            brick: self.brick,
            class_fields: self.class_fields.clone(),
        };
        let text = serde_json::to_string(&stored)
            .map_err(|e| FormatError::Metadata(format!("the bricks do not serialize: {e}")))?;
        config.insert(BRICKS_KEY.to_string(), text);
        Ok(config)
    }

    /// The layout a table configuration records; `None` for a table that is not bricked.
    pub fn from_table_configuration(
        config: &HashMap<String, String>,
    ) -> Result<Option<BrickSpec>, FormatError> {
        let Some(text) = config.get(BRICKS_KEY) else {
            return Ok(None);
        };
        let stored: StoredBricks = serde_json::from_str(text).map_err(|e| {
            FormatError::Metadata(format!("'{BRICKS_KEY}' is not {{brick, classFields}}: {e}"))
        })?;
        let sample = SampleSpec::from_table_configuration(config)?;
        let bad = |m: String| FormatError::Metadata(format!("'{BRICKS_KEY}': {m}"));
        let [tensors @ .., volume, info] = sample.fields() else {
            return Err(bad("the table has no volume fields".into()));
        };
        if (volume.name.as_str(), info.name.as_str()) != (VOLUME_FIELD, VOLUME_INFO_FIELD)
            || volume.kind != FieldKind::Text
            || info.kind != FieldKind::Text
        {
            return Err(bad(format!(
                "the last fields are '{}' and '{}', not the text fields '{VOLUME_FIELD}' and '{VOLUME_INFO_FIELD}'",
                volume.name, info.name
            )));
        }
        let mut fields = Vec::with_capacity(tensors.len());
        for field in tensors {
            let Some(spec) = field.kind.tensor() else {
                return Err(bad(format!("field '{}' is not a tensor", field.name)));
            };
            let shape: Vec<u64> = spec.shape().iter().map(|&d| d as u64).collect();
            let channels = match shape.as_slice() {
                [z, y, x] if [*z, *y, *x] == stored.brick => None,
                [c, z, y, x] if [*z, *y, *x] == stored.brick => Some(*c),
                _ => {
                    return Err(bad(format!(
                        "field '{}' has bricks of {shape:?}, the table's brick is {:?}",
                        field.name, stored.brick
                    )));
                }
            };
            fields.push(VolumeField {
                name: field.name.clone(),
                dtype: spec.dtype(),
                channels,
            });
        }
        let spec = BrickSpec {
            brick: stored.brick,
            fields,
            class_fields: stored.class_fields,
        };
        spec.check().map_err(|e| bad(e.to_string()))?;
        Ok(Some(spec))
    }
}

/// One class of a label field in one volume: its voxels, and a uniform sample of their
/// coordinates (z, y, x), at most the writer's bound.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassVoxels {
    /// The class (the voxel's value).
    pub class: i64,
    /// Voxels of the class in the volume.
    pub count: u64,
    /// Some of them (all where they are few), in C order.
    pub coords: Vec<[u64; 3]>,
}

/// What a volume's rows say of it as a whole (its last brick's [`VOLUME_INFO_FIELD`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct VolumeInfo {
    /// Voxels along z, y, x.
    pub shape: [u64; 3],
    /// The voxels' spacing along z, y, x (e.g. millimetres), where the writer was told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spacing: Option<[f64; 3]>,
    /// Of each class field, its classes in ascending order.
    pub classes: BTreeMap<String, Vec<ClassVoxels>>,
}

impl VolumeInfo {
    /// A volume of `shape` with no classes counted yet.
    pub fn new(shape: [u64; 3]) -> VolumeInfo {
        VolumeInfo {
            shape,
            spacing: None,
            classes: BTreeMap::new(),
        }
    }

    /// Bricks of `spec` the volume takes.
    pub fn bricks(&self, spec: &BrickSpec) -> u64 {
        (0..3)
            .map(|a| self.shape[a].div_ceil(spec.brick[a]))
            .product()
    }

    /// As stored.
    pub fn to_json(&self) -> Result<String, FormatError> {
        serde_json::to_string(self)
            .map_err(|e| FormatError::Metadata(format!("a volume's info does not serialize: {e}")))
    }

    /// The info `text` holds, checked against `spec`: a shape of at most 2³² bricks, a
    /// positive finite spacing, the class fields' classes (each at most [`MAX_CLASSES`],
    /// ascending, their counts adding up to the volume's voxels, their coordinates inside
    /// it, at most [`MAX_CLASS_COORDS`] and at most the count).
    pub fn from_json(text: &str, spec: &BrickSpec) -> Result<VolumeInfo, FormatError> {
        let bad = |m: String| Err(FormatError::Metadata(format!("a volume's info: {m}")));
        if text.len() > MAX_INFO_BYTES {
            return bad(format!("{} bytes, more than {MAX_INFO_BYTES}", text.len()));
        }
        let info: VolumeInfo = match serde_json::from_str(text) {
            Ok(info) => info,
            Err(e) => return bad(e.to_string()),
        };
        let voxels = info
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .filter(|&n| n > 0);
        let Some(voxels) = voxels else {
            return bad(format!("shape {:?} has no voxel or too many", info.shape));
        };
        if info.bricks(spec) > u64::from(u32::MAX) {
            return bad(format!(
                "shape {:?} takes more than 2^32 bricks of {:?}",
                info.shape, spec.brick
            ));
        }
        if let Some(s) = info.spacing
            && s.iter().any(|v| !v.is_finite() || *v <= 0.0)
        {
            return bad(format!("spacing {s:?} is not positive"));
        }
        for (field, classes) in &info.classes {
            if !spec.class_fields.contains(field) {
                return bad(format!("classes of '{field}', which is not a class field"));
            }
            if let Err(m) = info.check_classes(field, classes, voxels) {
                return bad(m);
            }
        }
        if let Some(missing) = spec
            .class_fields
            .iter()
            .find(|f| !info.classes.contains_key(*f))
        {
            return bad(format!("no classes of class field '{missing}'"));
        }
        Ok(info)
    }

    fn check_classes(
        &self,
        field: &str,
        classes: &[ClassVoxels],
        voxels: u64,
    ) -> Result<(), String> {
        if classes.len() > MAX_CLASSES {
            return Err(format!("'{field}' has more than {MAX_CLASSES} classes"));
        }
        if classes.windows(2).any(|w| w[0].class >= w[1].class) {
            return Err(format!("'{field}''s classes are not ascending"));
        }
        let mut total = 0u64;
        for c in classes {
            if c.coords.len() > MAX_CLASS_COORDS || c.coords.len() as u64 > c.count {
                return Err(format!(
                    "'{field}' class {}: {} coordinates of {} voxels",
                    c.class,
                    c.coords.len(),
                    c.count
                ));
            }
            if let Some(p) = c
                .coords
                .iter()
                .find(|p| (0..3).any(|a| p[a] >= self.shape[a]))
            {
                return Err(format!(
                    "'{field}' class {}: voxel {p:?} is outside {:?}",
                    c.class, self.shape
                ));
            }
            total = total.saturating_add(c.count);
        }
        if total != voxels {
            return Err(format!(
                "'{field}''s classes count {total} voxels of {voxels}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BrickSpec {
        BrickSpec::new(
            [4, 4, 4],
            vec![
                VolumeField::new("image", DType::F32).with_channels(2),
                VolumeField::new("mask", DType::U8),
            ],
        )
        .unwrap()
    }

    fn info() -> VolumeInfo {
        let mut info = VolumeInfo::new([5, 4, 3]);
        info.spacing = Some([1.0, 0.5, 0.5]);
        info.classes.insert(
            "mask".into(),
            vec![
                ClassVoxels {
                    class: 0,
                    count: 50,
                    coords: vec![[0, 0, 0], [4, 3, 2]],
                },
                ClassVoxels {
                    class: 3,
                    count: 10,
                    coords: vec![[1, 1, 1]],
                },
            ],
        );
        info
    }

    #[test]
    fn the_layout_round_trips_through_the_table_configuration() {
        let spec = spec();
        assert_eq!(spec.class_fields(), ["mask"]);
        let config = spec.table_configuration().unwrap();
        assert!(config.contains_key(crate::FIELDS_KEY));
        let back = BrickSpec::from_table_configuration(&config)
            .unwrap()
            .unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.fields()[0].channels, Some(2));
        let sample = back.sample().unwrap();
        assert_eq!(sample.first().shape(), [2, 4, 4, 4]);
        // Not bricked: none.
        let plain = SampleSpec::from(TensorSpec::new(vec![4], DType::F32));
        let config = plain.table_configuration().unwrap();
        assert_eq!(BrickSpec::from_table_configuration(&config).unwrap(), None);
    }

    #[test]
    fn a_configuration_that_disagrees_is_refused() {
        let mut config = spec().table_configuration().unwrap();
        config.insert(
            BRICKS_KEY.into(),
            r#"{"brick":[8,4,4],"classFields":["mask"]}"#.into(),
        );
        let e = BrickSpec::from_table_configuration(&config).unwrap_err();
        assert!(
            e.to_string()
                .contains("field 'image' has bricks of [2, 4, 4, 4]"),
            "{e}"
        );
        config.insert(
            BRICKS_KEY.into(),
            r#"{"brick":[4,4,4],"classFields":["image"]}"#.into(),
        );
        let e = BrickSpec::from_table_configuration(&config).unwrap_err();
        assert!(
            e.to_string()
                .contains("class field 'image' holds f32 in 2 channels"),
            "{e}"
        );
        config.insert(BRICKS_KEY.into(), r#"{"brick":[4,4,4]}"#.into());
        assert!(BrickSpec::from_table_configuration(&config).is_err());
    }

    #[test]
    fn bad_layouts_are_refused_by_name() {
        let fields = || vec![VolumeField::new("image", DType::F32)];
        let e = BrickSpec::new([0, 4, 4], fields()).unwrap_err();
        assert!(e.to_string().contains("1 to 1024"), "{e}");
        let e =
            BrickSpec::new([4, 4, 4], vec![VolumeField::new("volume", DType::F32)]).unwrap_err();
        assert!(e.to_string().contains("'volume' cannot name"), "{e}");
        let e = BrickSpec::new([4, 4, 4], fields())
            .unwrap()
            .with_class_fields(vec!["mask".into()])
            .unwrap_err();
        assert!(
            e.to_string().contains("class field 'mask' is not a field"),
            "{e}"
        );
        // An i16 label map is a class field when named.
        let spec = BrickSpec::new(
            [4, 4, 4],
            vec![
                VolumeField::new("ct", DType::I16),
                VolumeField::new("seg", DType::I16),
            ],
        )
        .unwrap();
        assert!(spec.class_fields().is_empty());
        let spec = spec.with_class_fields(vec!["seg".into()]).unwrap();
        assert_eq!(spec.class_fields(), ["seg"]);
    }

    #[test]
    fn a_volume_info_round_trips_and_is_checked() {
        let spec = spec();
        let info = info();
        assert_eq!(info.bricks(&spec), 2);
        let text = info.to_json().unwrap();
        assert_eq!(VolumeInfo::from_json(&text, &spec).unwrap(), info);
        type Change = Box<dyn Fn(&mut VolumeInfo)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|i| i.shape = [0, 4, 3]), "no voxel"),
            (
                Box::new(|i| i.spacing = Some([1.0, -1.0, 1.0])),
                "not positive",
            ),
            (
                Box::new(|i| i.classes.get_mut("mask").unwrap()[1].count = 9),
                "count 59 voxels of 60",
            ),
            (
                Box::new(|i| i.classes.get_mut("mask").unwrap()[1].class = 0),
                "not ascending",
            ),
            (
                Box::new(|i| i.classes.get_mut("mask").unwrap()[0].coords[1] = [5, 0, 0]),
                "outside",
            ),
            (
                Box::new(|i| i.classes.get_mut("mask").unwrap()[1].count = 0),
                "1 coordinates of 0",
            ),
            (
                Box::new(|i| {
                    i.classes.remove("mask");
                }),
                "no classes of class field 'mask'",
            ),
            (
                Box::new(|i| {
                    i.classes.insert("image".into(), vec![]);
                }),
                "'image', which is not",
            ),
        ];
        for (change, expect) in cases {
            let mut bad = info.clone();
            change(&mut bad);
            let e = VolumeInfo::from_json(&bad.to_json().unwrap(), &spec).unwrap_err();
            assert!(e.to_string().contains(expect), "{expect}: {e}");
        }
        let e = VolumeInfo::from_json("{\"shape\":[1,1]}", &spec).unwrap_err();
        assert!(
            e.to_string().starts_with("table metadata: a volume's info"),
            "{e}"
        );
        let huge = " ".repeat(MAX_INFO_BYTES + 1);
        assert!(
            VolumeInfo::from_json(&huge, &spec)
                .unwrap_err()
                .to_string()
                .contains("more than")
        );
    }

    #[test]
    fn brick_ids_of_different_volumes_differ() {
        assert_eq!(brick_id("ct_001.npy", 17), "ct_001.npy#17");
        assert_ne!(brick_id("a#1", 2), brick_id("a", 12));
    }
}
