//! The one error type of `voxlake-io`, and how a store's own errors are classified.

/// What can go wrong finding a store or using the disk cache. Reads themselves fail with the
/// store's own `object_store::Error`, which the layers above name with their table and file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// A location that cannot be used (bad URL, unsupported scheme, missing local folder).
    #[error("invalid location '{location}': {reason}")]
    InvalidLocation {
        /// The location as given (query string removed).
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A disk cache that cannot be used (a folder that cannot be created or written, a bad
    /// cap).
    #[error("cache {dir}: {reason}")]
    Cache {
        /// The cache's folder.
        dir: String,
        /// What is wrong.
        reason: String,
    },
    /// A folder of this user's on the node that cannot be used (see [`crate::private`]).
    #[error("folder {dir}: {reason}")]
    Folder {
        /// The folder.
        dir: String,
        /// What is wrong.
        reason: String,
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
    /// A fault: a worker task was cancelled or a semaphore closed.
    #[error("internal error: {0}")]
    Internal(String),
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
