//! The voxlake table contract.
//!
//! A voxlake table is a standard Delta table with three columns:
//!
//! | column   | Arrow type | Parquet                         | meaning                                    |
//! |----------|------------|---------------------------------|--------------------------------------------|
//! | `id`     | Utf8       | BYTE_ARRAY, statistics          | source object key relative to the prefix   |
//! | `label`  | Int64 null | INT64, statistics               | the sample's label                         |
//! | `tensor` | Binary     | BYTE_ARRAY, PLAIN, no stats     | the values, little-endian, C order         |
//!
//! The tensor's shape and element type are recorded in the Delta table configuration
//! ([`TensorSpec::table_configuration`]) and in the `tensor` field's metadata, so a reader
//! knows them from the log alone. See `docs/format.md` for the measurements behind the layout.
//!
//! ```
//! use voxlake_format::{DType, TensorSpec};
//!
//! let spec = TensorSpec::new(vec![30, 30, 10, 10], DType::F32);
//! assert_eq!(spec.nbytes(), 360_000);
//! let config = spec.table_configuration();
//! assert_eq!(TensorSpec::from_table_configuration(&config)?, spec);
//! # Ok::<(), voxlake_format::FormatError>(())
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::collections::HashMap;

use arrow_schema::SchemaRef;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

mod dtype;
mod fields;
pub mod npy;
pub mod sample;
pub mod volume;

pub use dtype::{Casting, DType};
pub use fields::{FIELDS_KEY, FieldKind, SampleField, SampleSpec, TEXT_FORMAT_VERSION};

/// Name of the column holding the source object's key.
pub const ID_COLUMN: &str = "id";
/// Name of the column holding the label.
pub const LABEL_COLUMN: &str = "label";
/// Name of the column holding the tensor bytes.
pub const TENSOR_COLUMN: &str = "tensor";
/// Name of the column holding each row's CRC-32 ([`row_checksum`]), as an Int64. Tables
/// written before it have no such column; readers verify it where it is.
pub const CHECKSUM_COLUMN: &str = "row_crc32";

/// The CRC-32 (IEEE, as zlib's `crc32`) of a row, as the checksum column holds it: over the id's
/// UTF-8 bytes and a 0 byte, the label as a tag byte (0 none, 1 some) and 8 little-endian bytes
/// (zeros when none), then the tensor's bytes. A flipped bit in any of the three is caught.
pub fn row_checksum(id: &str, label: Option<i64>, tensor: &[u8]) -> i64 {
    row_checksum_of(id, label, &[tensor])
}

/// [`row_checksum`] of a row of several tensor fields: their bytes one after another, in the
/// sample's field order (one field: the same sum as [`row_checksum`]).
pub fn row_checksum_of(id: &str, label: Option<i64>, fields: &[&[u8]]) -> i64 {
    let mut h = crc32fast::Hasher::new();
    h.update(id.as_bytes());
    h.update(&[0]);
    match label {
        Some(l) => {
            h.update(&[1]);
            h.update(&l.to_le_bytes());
        }
        None => h.update(&[0; 9]),
    }
    for field in fields {
        h.update(field);
    }
    i64::from(h.finalize())
}

/// Version of this table contract, stored under [`FORMAT_VERSION_KEY`].
pub const FORMAT_VERSION: u32 = 1;
/// Table configuration / field metadata key: the contract version.
pub const FORMAT_VERSION_KEY: &str = "voxlake.format.version";
/// Key: the tensor shape as a JSON array, e.g. `[30,30,10,10]`.
pub const SHAPE_KEY: &str = "voxlake.tensor.shape";
/// Key: the element type's short name, e.g. `f32`.
pub const DTYPE_KEY: &str = "voxlake.tensor.dtype";
/// Key: the byte order of the stored values; always `little`.
pub const BYTE_ORDER_KEY: &str = "voxlake.tensor.byteOrder";
/// Key: the element order of the stored values; always `C`.
pub const ORDER_KEY: &str = "voxlake.tensor.order";

/// Errors of the table contract and the npy codec.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The bytes are not a valid `.npy` file; the message says why.
    #[error("{0}")]
    Npy(String),
    /// A dtype name that voxlake does not know.
    #[error("unknown dtype '{0}' (expected one of bool, i8..i64, u8..u64, f16, bf16, f32, f64)")]
    UnknownDType(String),
    /// Values of one type cannot be converted to another under the casting rule.
    #[error("dtype {from} cannot be converted to {to} under {casting:?} casting")]
    CannotCast {
        /// Source type.
        from: DType,
        /// Target type.
        to: DType,
        /// The rule in force.
        casting: Casting,
    },
    /// The table metadata lacks a key or holds a bad value.
    #[error("table metadata: {0}")]
    Metadata(String),
}

/// The shape and element type every tensor of a table has.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    shape: Vec<usize>,
    dtype: DType,
}

impl TensorSpec {
    /// A spec for tensors of `shape` (C order) and `dtype`.
    pub fn new(shape: Vec<usize>, dtype: DType) -> Self {
        TensorSpec { shape, dtype }
    }

    /// The shape of one sample.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Elements per sample.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes per sample.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// Bytes per sample, `None` where the shape's product overflows (or passes `isize::MAX`,
    /// which no allocation can hold). Every spec read from a table or a user is checked with it
    /// ([`TensorSpec::checked`]) before [`numel`](Self::numel) and [`nbytes`](Self::nbytes)
    /// multiply it out.
    pub fn checked_nbytes(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(self.dtype.size(), |n, &d| n.checked_mul(d))
            .filter(|&n| n <= isize::MAX as usize)
    }

    /// The spec, or an error naming a shape whose size overflows.
    pub fn checked(self) -> Result<Self, FormatError> {
        match self.checked_nbytes() {
            Some(_) => Ok(self),
            None => Err(FormatError::Metadata(format!(
                "shape {:?} of {} is more bytes than a sample can hold (its product overflows)",
                self.shape, self.dtype
            ))),
        }
    }

    /// The key/value pairs recorded in the Delta table configuration and field metadata.
    pub fn table_configuration(&self) -> HashMap<String, String> {
        // A JSON list of integers, as serde_json writes it.
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        let shape = format!("[{}]", dims.join(","));
        HashMap::from([
            (FORMAT_VERSION_KEY.to_string(), FORMAT_VERSION.to_string()),
            (SHAPE_KEY.to_string(), shape),
            (DTYPE_KEY.to_string(), self.dtype.name().to_string()),
            (BYTE_ORDER_KEY.to_string(), "little".to_string()),
            (ORDER_KEY.to_string(), "C".to_string()),
        ])
    }

    /// Reads a spec back from a table configuration (or the `tensor` field's metadata).
    pub fn from_table_configuration(config: &HashMap<String, String>) -> Result<Self, FormatError> {
        let get = |key: &str| {
            config.get(key).ok_or_else(|| {
                FormatError::Metadata(format!(
                    "missing key '{key}': not a voxlake table (or written by an older tool)"
                ))
            })
        };
        let version = get(FORMAT_VERSION_KEY)?;
        if version.parse::<u32>().ok() != Some(FORMAT_VERSION) {
            return Err(FormatError::Metadata(format!(
                "format version {version} is not supported (this build reads {FORMAT_VERSION})"
            )));
        }
        let shape: Vec<usize> = serde_json::from_str(get(SHAPE_KEY)?).map_err(|e| {
            FormatError::Metadata(format!("'{SHAPE_KEY}' is not a list of integers: {e}"))
        })?;
        let dtype = get(DTYPE_KEY)?.parse()?;
        for (key, expected) in [(BYTE_ORDER_KEY, "little"), (ORDER_KEY, "C")] {
            if get(key)? != expected {
                return Err(FormatError::Metadata(format!(
                    "'{key}' is '{}', only '{expected}' is supported",
                    config[key]
                )));
            }
        }
        TensorSpec { shape, dtype }.checked()
    }

    /// The Arrow schema of a new table of this spec, with the spec in the `tensor` field
    /// metadata and the checksum column.
    pub fn arrow_schema(&self) -> SchemaRef {
        self.arrow_schema_with(true)
    }

    /// The Arrow schema of a table of this spec, with or without the checksum column (tables
    /// written before it have none, and appends keep their schema).
    pub fn arrow_schema_with(&self, checksums: bool) -> SchemaRef {
        SampleSpec::from(self.clone()).arrow_schema_with(checksums)
    }
}

impl std::fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}", self.shape, self.dtype)
    }
}

/// Compression of the Parquet data pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Codec {
    /// None: fastest to decode; the default for fast networks and local disks.
    #[default]
    None,
    /// Snappy.
    Snappy,
    /// LZ4 (raw).
    Lz4,
    /// Zstandard at level 3: for slow networks.
    Zstd,
}

impl std::str::FromStr for Codec {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" | "uncompressed" => Ok(Codec::None),
            "snappy" => Ok(Codec::Snappy),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd),
            _ => Err(FormatError::Metadata(format!(
                "unknown compression '{s}' (none, snappy, lz4, zstd)"
            ))),
        }
    }
}

/// Upper bound of a tensor data page; a row group's tensor chunk is one page below it.
const TENSOR_PAGE_LIMIT: usize = 512 << 20;

/// How the Parquet files of a table are laid out for streaming.
///
/// The defaults follow the measurements in `docs/format.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Rows per row group: the unit of shuffling and of one streaming read. Default 32.
    pub row_group_rows: usize,
    /// A file is closed once it reaches this many bytes. Default 78 MB (~217 reference cubes).
    pub target_file_bytes: u64,
    /// Page compression. Default none.
    pub compression: Codec,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            row_group_rows: 32,
            target_file_bytes: 78_000_000,
            compression: Codec::None,
        }
    }
}

impl Layout {
    /// Parquet writer properties for this layout.
    ///
    /// The tensor column is PLAIN, without dictionary or statistics (min/max of opaque bytes
    /// helps nobody and costs a pass over them); `id` and `label` keep chunk statistics so Delta
    /// can skip files.
    pub fn writer_properties(&self) -> WriterProperties {
        self.writer_properties_for(&[TENSOR_COLUMN])
    }

    /// [`writer_properties`](Self::writer_properties) for a table whose tensor fields are the
    /// columns `tensors`: each one laid out as the `tensor` column is.
    pub fn writer_properties_for(&self, tensors: &[&str]) -> WriterProperties {
        let compression = match self.compression {
            Codec::None => Compression::UNCOMPRESSED,
            Codec::Snappy => Compression::SNAPPY,
            Codec::Lz4 => Compression::LZ4_RAW,
            Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()),
        };
        let id = ColumnPath::from(ID_COLUMN);
        let mut builder = WriterProperties::builder()
            .set_max_row_group_row_count(Some(self.row_group_rows.max(1)))
            .set_compression(compression)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            // Ids are unique: a dictionary would only grow the file.
            .set_column_dictionary_enabled(id, false)
            .set_created_by(format!("voxlake {}", env!("CARGO_PKG_VERSION")));
        for name in tensors {
            let tensor = ColumnPath::from(*name);
            builder = builder
                .set_column_statistics_enabled(tensor.clone(), EnabledStatistics::None)
                .set_column_dictionary_enabled(tensor.clone(), false)
                .set_column_encoding(tensor.clone(), parquet::basic::Encoding::PLAIN)
                // One data page per tensor chunk: the reader then sizes its buffer once
                // instead of growing (and copying) it page by page (see docs/format.md).
                .set_column_data_page_size_limit(tensor, TENSOR_PAGE_LIMIT);
        }
        builder.build()
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_configuration() {
        let spec = TensorSpec::new(vec![30, 30, 10, 10], DType::F32);
        let config = spec.table_configuration();
        assert_eq!(config[SHAPE_KEY], "[30,30,10,10]");
        assert_eq!(config[DTYPE_KEY], "f32");
        assert_eq!(TensorSpec::from_table_configuration(&config).unwrap(), spec);
        let schema = spec.arrow_schema();
        let field = schema.field_with_name(TENSOR_COLUMN).unwrap();
        assert_eq!(
            TensorSpec::from_table_configuration(field.metadata()).unwrap(),
            spec
        );
    }

    #[test]
    fn bad_configuration_is_reported() {
        let spec = TensorSpec::new(vec![2], DType::U8);
        let mut config = spec.table_configuration();
        config.insert(SHAPE_KEY.into(), "[2,".into());
        let e = TensorSpec::from_table_configuration(&config).unwrap_err();
        assert!(e.to_string().contains("not a list of integers"), "{e}");
        config.remove(SHAPE_KEY);
        let e = TensorSpec::from_table_configuration(&config).unwrap_err();
        assert!(e.to_string().contains("missing key"), "{e}");
        let mut config = spec.table_configuration();
        config.insert(FORMAT_VERSION_KEY.into(), "99".into());
        assert!(TensorSpec::from_table_configuration(&config).is_err());
    }

    #[test]
    fn layout_properties_match_the_contract() {
        let props = Layout::default().writer_properties();
        let tensor = ColumnPath::from(TENSOR_COLUMN);
        assert_eq!(props.max_row_group_row_count(), Some(32));
        assert!(!props.dictionary_enabled(&tensor));
        assert_eq!(props.statistics_enabled(&tensor), EnabledStatistics::None);
        assert_eq!(
            props.statistics_enabled(&ColumnPath::from(LABEL_COLUMN)),
            EnabledStatistics::Chunk
        );
        assert_eq!(props.compression(&tensor), Compression::UNCOMPRESSED);
    }
}
