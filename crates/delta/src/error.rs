//! The one error type of `voxlake-delta`.

use deltalake::DeltaTableError;
use voxlake_io::{IoError, store_error_is_transient};

/// Everything that can go wrong while reading a table's log at a version.
///
/// Every message names the table location (without its query string, so SAS tokens never
/// reach a log) and, where there is one, the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// A location or a store's endpoint that cannot be used.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The log could not be read (no table, an unreachable store, bad credentials, a log the
    /// Delta reader refuses, …): deltalake's or its kernel's message, classified.
    #[error("table {location}: {reason}")]
    Read {
        /// The table location.
        location: String,
        /// What the reader said.
        reason: String,
        /// Whether the store's answer was a fault that may pass.
        transient: bool,
        /// Whether the answer was that there is no table.
        not_found: bool,
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
    /// The log describes a table this reader does not read (a reader feature it does not
    /// handle, a column mapping or schema that does not parse), or the location holds no
    /// table (objects, but neither a log nor Parquet files).
    #[error("table {location}: {reason}")]
    Incompatible {
        /// The table location.
        location: String,
        /// Why.
        reason: String,
    },
    /// The log contradicts itself (a deletion vector that deletes more rows than its file has).
    #[error("table {location}, file {file}: {reason}")]
    Corrupt {
        /// The table location.
        location: String,
        /// The data file's path relative to the table.
        file: String,
        /// What disagrees.
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
}

impl DeltaError {
    /// Whether retrying later may succeed: a store or network fault, as opposed to a definite
    /// answer (not found, forbidden, bad input).
    pub fn is_transient(&self) -> bool {
        match self {
            DeltaError::Read { transient, .. } | DeltaError::DeletionVector { transient, .. } => {
                *transient
            }
            _ => false,
        }
    }

    /// Whether the table is not in the store.
    pub fn is_not_found(&self) -> bool {
        match self {
            DeltaError::NotFound { .. } => true,
            DeltaError::Read { not_found, .. } => *not_found,
            _ => false,
        }
    }

    /// deltalake's error as voxlake-delta's own (its type stays out of the API).
    pub(crate) fn deltalake(location: &str, source: DeltaTableError) -> DeltaError {
        DeltaError::Read {
            location: location.to_string(),
            reason: delta_message(&source),
            transient: match &source {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                _ => false,
            },
            not_found: matches!(
                source,
                DeltaTableError::NotATable(_)
                    | DeltaTableError::ObjectStore {
                        source: object_store::Error::NotFound { .. }
                    }
            ),
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
