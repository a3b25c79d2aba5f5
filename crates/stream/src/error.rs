//! The one error type of `voxlake-stream`.

use voxlake_io::IoError;
use voxlake_table::TableError;

/// Everything that can go wrong while opening or streaming a table.
///
/// Every message names the table location (without its query string, so SAS tokens never
/// reach a log) and, where there is one, the data file: the table's errors (its log, its
/// files, a stage that panicked on one) and the stores' are passed on as they are.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The table at its version, one of its files, or the store or cache it is read through.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A fault: a worker task was cancelled, the budget closed, or a test's fault hook failed
    /// a stage.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<IoError> for StreamError {
    fn from(e: IoError) -> Self {
        StreamError::Table(e.into())
    }
}

impl StreamError {
    /// Whether retrying later may succeed: a store or network fault, as opposed to a definite
    /// answer (not found, forbidden, bad input).
    pub fn is_transient(&self) -> bool {
        match self {
            StreamError::Table(e) => e.is_transient(),
            StreamError::Internal(_) => false,
        }
    }
}
