//! The one error type of `voxlake-table`.

use voxlake_delta::DeltaError;
use voxlake_io::{IoError, store_error_is_transient};

/// Everything that can go wrong while opening a table at a version or reading its files.
///
/// Every message names the table location (without its query string, so SAS tokens never
/// reach a log) and, where there is one, the data file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// A location, a store's endpoint or the disk cache that cannot be used.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The Delta log at the version could not be read (see [`DeltaError`]).
    #[error(transparent)]
    Delta(DeltaError),
    /// The table is not a voxlake table, or lacks a requested column.
    #[error("table {location}: {reason}")]
    Incompatible {
        /// The table location.
        location: String,
        /// Why.
        reason: String,
    },
    /// A data file the snapshot lists is gone (deleted or vacuumed under the version read).
    #[error(
        "table {location}: data file {file} of version {version} is missing from the store (deleted or vacuumed under the version read?)"
    )]
    MissingFile {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
        /// The version read, which lists it.
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
    /// A row asked by its position ([`Scan::take`](crate::Scan::take)) that the scan does not
    /// read.
    #[error(
        "table {location}: no row at position {position}: the scan of version {version} reads {rows} rows (positions from 0)"
    )]
    NoRow {
        /// The table location.
        location: String,
        /// The position asked.
        position: u64,
        /// The rows the scan reads.
        rows: u64,
        /// The version scanned.
        version: u64,
    },
    /// A row asked by its id ([`Scan::take_ids`](crate::Scan::take_ids)) that the scan does
    /// not read: no row of the version has it, or the scan's filter leaves it out.
    #[error("table {location}: no row of id '{id}' in the scan of version {version}")]
    NoId {
        /// The table location.
        location: String,
        /// The id asked.
        id: String,
        /// The version scanned.
        version: u64,
    },
    /// A fault: a worker task was cancelled, or a test's fault hook failed a stage.
    #[error("internal error: {0}")]
    Internal(String),
}

impl TableError {
    /// Whether retrying later may succeed: a store or network fault, as opposed to a definite
    /// answer (not found, forbidden, bad input).
    pub fn is_transient(&self) -> bool {
        match self {
            TableError::Delta(e) => e.is_transient(),
            TableError::Parquet {
                source: parquet::errors::ParquetError::External(e),
                ..
            } => e
                .downcast_ref::<object_store::Error>()
                .is_some_and(store_error_is_transient),
            _ => false,
        }
    }

    /// Whether the table, or a data file its log lists, is not in the store.
    pub fn is_not_found(&self) -> bool {
        match self {
            TableError::MissingFile { .. } => true,
            TableError::Delta(e) => e.is_not_found(),
            _ => false,
        }
    }
}

impl From<DeltaError> for TableError {
    /// A location or endpoint that cannot be used stays an [`IoError`], whichever layer met it.
    fn from(e: DeltaError) -> Self {
        match e {
            DeltaError::Io(e) => TableError::Io(e),
            e => TableError::Delta(e),
        }
    }
}
