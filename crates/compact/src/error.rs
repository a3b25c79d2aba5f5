//! The one error type of `voxlake-compact`.

use deltalake::DeltaTableError;
use voxlake_format::{DType, FormatError};

/// Everything that can go wrong while converting, optimizing or inspecting a table.
///
/// Every message names the object (source key, table URL, file) and the problem. URLs are
/// shown without their query string, so SAS tokens never reach a log or a terminal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// A source, table or labels location that cannot be used.
    #[error("invalid location '{location}': {reason}")]
    InvalidLocation {
        /// The location as given (query string removed).
        location: String,
        /// What is wrong with it.
        reason: String,
    },
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
    /// The source holds no `.npy` objects (for this shard).
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
        source: DeltaTableError,
    },
    /// A data file of the table could not be read.
    #[error("table {location}, file {file}: {source}")]
    Parquet {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// parquet's error.
        source: parquet::errors::ParquetError,
    },
    /// The table exists but does not fit the request (not a voxlake table, other dtype).
    #[error("table {location}: {reason}")]
    Incompatible {
        /// The table location.
        location: String,
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
            CompactError::Table { source, .. } => match source {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                DeltaTableError::Transaction { .. } | DeltaTableError::VersionAlreadyExists(_) => {
                    true
                }
                _ => false,
            },
            CompactError::Parquet { source, .. } => match source {
                parquet::errors::ParquetError::External(e) => e
                    .downcast_ref::<object_store::Error>()
                    .is_some_and(store_error_is_transient),
                _ => false,
            },
            _ => false,
        }
    }
}

/// object_store already retried the request; what is left is transient only if it is not a
/// definite answer from the service.
fn store_error_is_transient(e: &object_store::Error) -> bool {
    !matches!(
        e,
        object_store::Error::NotFound { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
    )
}

/// A location for messages: the query string (which may hold a SAS token) removed.
pub(crate) fn redact(location: &str) -> String {
    match location.split_once('?') {
        Some((head, _)) => format!("{head}?<redacted>"),
        None => location.to_string(),
    }
}
