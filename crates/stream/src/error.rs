//! The one error type of `voxlake-stream`.

use deltalake::DeltaTableError;
pub use voxlake_format::reader::store_error_is_transient;

/// Everything that can go wrong while opening or streaming a table.
///
/// Every message names the table location (without its query string, so SAS tokens never
/// reach a log) and, where there is one, the data file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A location that cannot be used (bad URL, unsupported scheme, missing local folder).
    #[error("invalid location '{location}': {reason}")]
    InvalidLocation {
        /// The location as given (query string removed).
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The Delta log could not be read (no table, unreachable store, bad credentials, …).
    #[error("table {location}: {source}")]
    Table {
        /// The table location.
        location: String,
        /// deltalake's error (boxed: it is large, and every `Result` would carry its size).
        source: Box<DeltaTableError>,
    },
    /// The table is not a voxlake table, or lacks a requested column.
    #[error("table {location}: {reason}")]
    Incompatible {
        /// The table location.
        location: String,
        /// Why.
        reason: String,
    },
    /// A data file the snapshot lists is gone (deleted or vacuumed under a pinned version).
    #[error(
        "table {location}: data file {file} of version {version} is missing from the store (deleted or vacuumed under the pinned version?)"
    )]
    MissingFile {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// The pinned version that lists it.
        version: u64,
    },
    /// A data file could not be fetched or decoded.
    #[error("table {location}, file {file}: {source}")]
    Parquet {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// parquet's error (store errors arrive wrapped as `External`).
        source: parquet::errors::ParquetError,
    },
    /// The store's endpoint did not answer at all (refused, reset, timed out, no such host)
    /// when the location was first used: a configuration error, reported after a few quick
    /// attempts instead of object_store's full retry budget (minutes).
    #[error("cannot reach the store of {location}: {reason}")]
    Unreachable {
        /// The location.
        location: String,
        /// The last connection error.
        reason: String,
    },
    /// A stage of the pipeline panicked: the panic is caught and reported here, never taken
    /// for the end of the stream.
    #[error("table {location}: the {stage} stage panicked on {object}: {message}")]
    Panicked {
        /// The table location.
        location: String,
        /// The stage (`footer`, `fetch`, `decode`, …).
        stage: String,
        /// The object it was working on (a data file).
        object: String,
        /// The panic's message.
        message: String,
    },
    /// Data that contradicts itself: a row count that disagrees between the log and a file's
    /// footer, a tensor whose checksum does not match (a corrupt or foreign file).
    #[error("table {location}, file {file}: {reason}")]
    Corrupt {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// What disagrees.
        reason: String,
    },
    /// A row that does not decode as the table's tensor column says: a list of the wrong
    /// length, raw bytes of the wrong size, an npy header of another shape, a codec that does
    /// not decode, a label that is not an integer.
    #[error("table {location}, file {file}, row group {row_group}, row {row}: {reason}")]
    BadRow {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// The row group in the file.
        row_group: usize,
        /// The row in the file.
        row: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A fault: a worker task was cancelled, or a test's fault hook failed a stage.
    #[error("internal error: {0}")]
    Internal(String),
}

impl StreamError {
    /// Whether retrying later may succeed: a store or network fault, as opposed to a definite
    /// answer (not found, forbidden, bad input).
    pub fn is_transient(&self) -> bool {
        match self {
            StreamError::Table { source, .. } => match source.as_ref() {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                _ => false,
            },
            StreamError::Parquet {
                source: parquet::errors::ParquetError::External(e),
                ..
            } => e
                .downcast_ref::<object_store::Error>()
                .is_some_and(store_error_is_transient),
            _ => false,
        }
    }
}

/// A location for messages: the query string (which may hold a SAS token) removed.
pub fn redact(location: &str) -> String {
    match location.split_once('?') {
        Some((head, _)) => format!("{head}?<redacted>"),
        None => location.to_string(),
    }
}

/// The message of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
