//! The one error type of `voxlake-stream`.

use deltalake::DeltaTableError;

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
        /// deltalake's error.
        source: DeltaTableError,
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
        "table {location}: data file {file} is missing from the store (deleted or vacuumed under the pinned version?)"
    )]
    MissingFile {
        /// The table location.
        location: String,
        /// The file's path relative to the table.
        file: String,
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
    /// A worker task panicked or was cancelled.
    #[error("internal error: {0}")]
    Internal(String),
}

impl StreamError {
    /// Whether retrying later may succeed: a store or network fault, as opposed to a definite
    /// answer (not found, forbidden, bad input).
    pub fn is_transient(&self) -> bool {
        match self {
            StreamError::Table { source, .. } => match source {
                DeltaTableError::ObjectStore { source } => store_error_is_transient(source),
                _ => false,
            },
            StreamError::Parquet { source, .. } => match source {
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
pub fn store_error_is_transient(e: &object_store::Error) -> bool {
    if let object_store::Error::Generic { source, .. } = e {
        // object_store keeps the HTTP status private (its RetryError is not exported) and
        // reports e.g. Azure's ContainerNotFound as Generic; its message carries the status.
        if let Some(status) = http_status(source.as_ref()) {
            return !(400..500).contains(&status) || status == 408 || status == 429;
        }
    }
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

/// The HTTP status named in an error chain's messages ("…status code: 404 Not Found…").
fn http_status(error: &(dyn std::error::Error + 'static)) -> Option<u16> {
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if let Some(at) = text.find("status code: ") {
            let digits: String = text[at + 13..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(status) = digits.parse() {
                return Some(status);
            }
        }
        next = e.source();
    }
    None
}

/// A location for messages: the query string (which may hold a SAS token) removed.
pub fn redact(location: &str) -> String {
    match location.split_once('?') {
        Some((head, _)) => format!("{head}?<redacted>"),
        None => location.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Http(&'static str);
    impl std::fmt::Display for Http {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Http {}

    fn generic(message: &'static str) -> object_store::Error {
        object_store::Error::Generic {
            store: "MicrosoftAzure",
            source: Box::new(Http(message)),
        }
    }

    #[test]
    fn http_status_decides_transience() {
        let not_found = generic("Server returned non-2xx status code: 404 Not Found: <Error>");
        assert!(!store_error_is_transient(&not_found));
        assert!(!store_error_is_transient(&generic(
            "status code: 403 Forbidden"
        )));
        assert!(store_error_is_transient(&generic(
            "status code: 503 Service Unavailable"
        )));
        assert!(store_error_is_transient(&generic(
            "status code: 429 Too Many Requests"
        )));
        assert!(store_error_is_transient(&generic(
            "connection reset by peer"
        )));
        assert!(!store_error_is_transient(&object_store::Error::NotFound {
            path: "x".into(),
            source: Box::new(Http("gone")),
        }));
    }
}
