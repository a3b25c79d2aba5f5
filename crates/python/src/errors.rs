//! The exceptions: `VoxlakeError` and under it `TableError` (the table or its log: missing,
//! corrupt, incompatible), `StoreError` (the store's answers) and `ConfigError` (settings,
//! states, options). Each carries the Rust error's message as it is.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use voxlake_loader::{LoaderError, StreamError};

create_exception!(
    _voxlake,
    VoxlakeError,
    PyException,
    "Any error of voxlake; its message is the Rust error's, naming the object and the cause."
);
create_exception!(
    _voxlake,
    TableError,
    VoxlakeError,
    "The table: missing, not readable as a sample table, its log or a data file corrupt."
);
create_exception!(
    _voxlake,
    StoreError,
    VoxlakeError,
    "The store: a request that failed after its retries, credentials refused, a store away."
);
create_exception!(
    _voxlake,
    ConfigError,
    VoxlakeError,
    "Settings that cannot work: an unknown or ill-typed option, a bad state or filter."
);

/// Adds the exceptions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VoxlakeError", py.get_type::<VoxlakeError>())?;
    m.add("TableError", py.get_type::<TableError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    Ok(())
}

/// A loader's error as the exception of its kind.
pub(crate) fn loader_error(e: LoaderError) -> PyErr {
    let message = e.to_string();
    match &e {
        LoaderError::Config(_) | LoaderError::State(_) => ConfigError::new_err(message),
        LoaderError::Stream(StreamError::Table(t)) => match t {
            voxlake_stream::TableError::Io(_) => StoreError::new_err(message),
            _ => TableError::new_err(message),
        },
        LoaderError::BadRow { .. } => TableError::new_err(message),
        _ => VoxlakeError::new_err(message),
    }
}

/// A settings error named by the option it came from.
pub(crate) fn config(message: impl Into<String>) -> PyErr {
    ConfigError::new_err(message.into())
}

/// `work` run with a panic caught: a bug of voxlake's reaches Python as a `VoxlakeError`
/// naming what panicked and why, not as pyo3's `PanicException` (a `BaseException` that
/// `except Exception` lets through).
pub(crate) fn no_panic<T>(what: &str, work: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|payload| {
        let cause = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        VoxlakeError::new_err(format!("{what} panicked (a bug of voxlake's): {cause}"))
    })
}
