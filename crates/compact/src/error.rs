//! The one error type of `voxlake-compact`.

use deltalake::DeltaTableError;
use voxlake_format::{DType, FormatError};
use voxlake_io::{IoError, store_error_is_transient};
use voxlake_stream::StreamError;
use voxlake_table::TableError;

/// Everything that can go wrong while converting, optimizing or inspecting a table.
///
/// Every message names the object (source key, table URL, file) and the problem. URLs are
/// shown without their query string, so SAS tokens never reach a log or a terminal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// A source object that is not a valid `.npy` file.
    #[error("{key}: {source}")]
    Npy {
        /// Key relative to the source prefix.
        key: String,
        /// The codec's description of the problem.
        source: FormatError,
    },
    /// A source array whose shape differs from the table's.
    #[error("{key}: shape {found:?} differs from the table's shape {expected:?}")]
    ShapeMismatch {
        /// Key relative to the source prefix.
        key: String,
        /// The table's shape.
        expected: Vec<usize>,
        /// The array's shape.
        found: Vec<usize>,
    },
    /// A source array whose dtype cannot be stored in the table's dtype.
    #[error("{key}: dtype {found} cannot be converted to the table's {expected}{hint}")]
    DTypeMismatch {
        /// Key relative to the source prefix.
        key: String,
        /// The table's element type.
        expected: DType,
        /// The array's element type.
        found: DType,
        /// Advice, e.g. to pass `--dtype`.
        hint: &'static str,
    },
    /// A sample without one of its fields (a name in one field's folder and not in
    /// another's, an `.npz` archive without the array).
    #[error("{key}: no '{field}' field ({expected} is not in the source)")]
    MissingField {
        /// The sample's key (its name, or the archive's key).
        key: String,
        /// The field it lacks.
        field: String,
        /// What was looked for.
        expected: String,
    },
    /// A source object with no entry in the labels file.
    #[error("{key}: no label in {labels}")]
    MissingLabel {
        /// Key relative to the source prefix.
        key: String,
        /// The labels file.
        labels: String,
    },
    /// A labels file that cannot be read or parsed.
    #[error("labels file {location}: {reason}")]
    Labels {
        /// The labels file.
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The source store failed (listing or reading).
    #[error("source {location}: {source}")]
    Source {
        /// The object or prefix.
        location: String,
        /// The store's error.
        source: object_store::Error,
    },
    /// The source holds no `.npy` or `.npz` objects (for this shard).
    #[error("no .npy objects under {location}{detail}")]
    EmptySource {
        /// The source prefix.
        location: String,
        /// Extra context, e.g. the shard.
        detail: String,
    },
    /// The Delta table could not be opened, created or committed to.
    #[error("table {location}: {source}")]
    Table {
        /// The table location.
        location: String,
        /// deltalake's error.
        source: Box<DeltaTableError>,
    },
    /// Opening a location or reading the table failed (see [`StreamError`]).
    #[error(transparent)]
    Read(#[from] StreamError),
    /// The table exists but does not fit the request (not a voxlake table, other dtype).
    #[error("table {location}: {reason}")]
    Incompatible {
        /// The table location.
        location: String,
        /// Why.
        reason: String,
    },
    /// Arrow data that does not make samples (see [`ArrowSamples`](crate::ArrowSamples)): a
    /// missing or mistyped column, a null, a row of another length.
    #[error("arrow column '{column}': {reason}")]
    Arrow {
        /// The column.
        column: String,
        /// Why.
        reason: String,
    },
    /// A worker task panicked or was cancelled.
    #[error("internal error: {0}")]
    Internal(String),
}

impl CompactError {
    /// Whether retrying the same operation later may succeed (a network or service fault,
    /// a commit conflict), as opposed to bad input or a permanent store error.
    pub fn is_transient(&self) -> bool {
        match self {
            CompactError::Source { source, .. } => store_error_is_transient(source),
            CompactError::Table { source, .. } => match source.as_ref() {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                DeltaTableError::Transaction { .. } | DeltaTableError::VersionAlreadyExists(_) => {
                    true
                }
                _ => false,
            },
            CompactError::Read(e) => e.is_transient(),
            _ => false,
        }
    }
}

impl From<TableError> for CompactError {
    fn from(e: TableError) -> Self {
        CompactError::Read(e.into())
    }
}

impl From<IoError> for CompactError {
    fn from(e: IoError) -> Self {
        CompactError::Read(e.into())
    }
}
