//! The one error type of `voxlake-table`.

use deltalake::DeltaTableError;
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
    /// The Delta log could not be read (no table, unreachable store, bad credentials, …).
    #[error("table {location}: {}", delta_message(source))]
    Delta {
        /// The table location.
        location: String,
        /// deltalake's error (boxed: it is large, and every `Result` would carry its size).
        source: Box<DeltaTableError>,
    },
    /// A log file that does not parse (a commit with a broken line, a checkpoint cut short),
    /// named with the cause.
    #[error("table {location}: the Delta log cannot be read: {reason}")]
    Log {
        /// The table location.
        location: String,
        /// The file, the line and what is wrong with it.
        reason: String,
    },
    /// A version or time the table's log does not have (past the latest version, before the
    /// first commit).
    #[error("table {location}: {reason}")]
    Version {
        /// The table location.
        location: String,
        /// Which version was asked for and what the log has.
        reason: String,
    },
    /// Nothing at the location: no Delta log and no Parquet files.
    #[error("table {location}: {reason}")]
    NotFound {
        /// The table location.
        location: String,
        /// What the listing found.
        reason: String,
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
    /// A data file's deletion vector could not be read: missing from the store, unreachable,
    /// or not what its descriptor says (size, checksum, row count).
    #[error("table {location}, file {file}: its deletion vector {vector}: {reason}")]
    DeletionVector {
        /// The table location.
        location: String,
        /// The data file's path relative to the table.
        file: String,
        /// The vector (its file under the table, or `(inline)`).
        vector: String,
        /// What went wrong.
        reason: String,
        /// Whether the store's answer was a fault that may pass.
        transient: bool,
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
            TableError::Delta { source, .. } => match source.as_ref() {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                _ => false,
            },
            TableError::Parquet {
                source: parquet::errors::ParquetError::External(e),
                ..
            } => e
                .downcast_ref::<object_store::Error>()
                .is_some_and(store_error_is_transient),
            TableError::DeletionVector { transient, .. } => *transient,
            _ => false,
        }
    }

    /// Whether the table, or a data file its log lists, is not in the store.
    pub fn is_not_found(&self) -> bool {
        match self {
            TableError::NotFound { .. } | TableError::MissingFile { .. } => true,
            TableError::Delta { source, .. } => matches!(
                source.as_ref(),
                DeltaTableError::NotATable(_)
                    | DeltaTableError::ObjectStore {
                        source: object_store::Error::NotFound { .. }
                    }
            ),
            _ => false,
        }
    }
}

/// A Delta kernel error's message without the backtraces it carries when `RUST_BACKTRACE` is
/// set (the kernel's `Backtraced` wrapper prints one after its message).
pub(crate) fn kernel_message(e: &delta_kernel::Error) -> String {
    match e {
        delta_kernel::Error::Backtraced { source, .. } => kernel_message(source),
        other => without_backtrace(&other.to_string()),
    }
}

/// A deltalake error's message, the kernel's backtraces left out.
pub(crate) fn delta_message(e: &DeltaTableError) -> String {
    match e {
        DeltaTableError::KernelError(k) => kernel_message(k),
        other => without_backtrace(&other.to_string()),
    }
}

/// `text` without the lines of a printed backtrace (`  12: frame` and `at file:line`), which a
/// nested kernel error may still hold.
fn without_backtrace(text: &str) -> String {
    let frame = |line: &str| {
        let t = line.trim_start();
        let indented = line.len() > t.len();
        indented
            && (t.starts_with("at ")
                || t.split_once(": ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
    };
    let kept: Vec<&str> = text.lines().filter(|l| !frame(l)).collect();
    kept.join("\n").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backtraces_are_left_out_of_messages() {
        let printed = "Generic delta kernel error: no such version\n   0: buoyant_kernel::error::Error::with_backtrace\n             at /src/error.rs:482:25\n   1: main\n";
        assert_eq!(
            without_backtrace(printed),
            "Generic delta kernel error: no such version"
        );
        let plain = "file 00000000000000000003.json: line 2: expected value: 1";
        assert_eq!(without_backtrace(plain), plain);
        let e = delta_kernel::Error::generic("bad commit").with_backtrace();
        assert_eq!(kernel_message(&e), "Generic delta kernel error: bad commit");
    }
}
