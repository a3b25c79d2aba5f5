//! The exceptions. Their classes are Python's (`python/voxlake/_errors.py`, public as
//! `voxlake.VoxlakeError` and the rest): declared under the module users import, they pickle
//! and unpickle to the same class, so an error raised in a `DataLoader` worker is raised again
//! in the main process; and each also subclasses the builtin a Python user catches
//! (`ConfigError` a `ValueError`, `StoreError` an `OSError`, …). Each carries the Rust error's
//! message as it is, and `transient` where the Rust error knows a retry may succeed.

use pyo3::prelude::*;
use pyo3::types::PyType;
use voxlake_loader::LoaderError;
use voxlake_stream::StreamError;

/// Which exception class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `VoxlakeError`: a bug or a fault of no other kind.
    Voxlake,
    /// `TableError`: the table or its log (corrupt, incompatible).
    Table,
    /// `NotFoundError` (a `TableError` and a `FileNotFoundError`): no table, a data file gone.
    NotFound,
    /// `StoreError` (an `OSError`): the store's answers.
    Store,
    /// `ConfigError` (a `ValueError`): settings, states.
    Config,
    /// `OptionError` (a `ConfigError` and a `TypeError`): an unknown or ill-typed option.
    Option,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Voxlake => "VoxlakeError",
            Kind::Table => "TableError",
            Kind::NotFound => "NotFoundError",
            Kind::Store => "StoreError",
            Kind::Config => "ConfigError",
            Kind::Option => "OptionError",
        }
    }
}

/// The class of `kind`, from the package's Python side.
fn class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    Ok(py
        .import("voxlake._errors")?
        .getattr(kind.class_name())?
        .cast_into::<PyType>()?)
}

/// An exception of `kind` with `message`; `transient` set on it.
pub(crate) fn raise(kind: Kind, message: impl Into<String>, transient: bool) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let class = match class(py, kind) {
            Ok(class) => class,
            Err(e) => return e,
        };
        let err = PyErr::from_type(class, (message,));
        if let Err(e) = err.value(py).setattr("transient", transient) {
            return e;
        }
        err
    })
}

/// A loader's error as the exception of its kind.
pub(crate) fn loader_error(e: LoaderError) -> PyErr {
    let transient = e.is_transient();
    let kind = match &e {
        LoaderError::Config(_) | LoaderError::State(_) | LoaderError::Forked { .. } => Kind::Config,
        LoaderError::Stream(StreamError::Table(t)) => table_kind(t),
        LoaderError::BadRow { .. } => Kind::Table,
        _ => Kind::Voxlake,
    };
    raise(kind, e.to_string(), transient)
}

/// The exception kind of a table's error.
pub(crate) fn table_kind(e: &voxlake::table::TableError) -> Kind {
    match e {
        t if t.is_not_found() => Kind::NotFound,
        // A row asked by an id the version lacks: named, with the version.
        voxlake::table::TableError::NoId { .. } => Kind::NotFound,
        voxlake::table::TableError::Io(_) => Kind::Store,
        t if t.is_transient() => Kind::Store,
        _ => Kind::Table,
    }
}

/// A settings error.
pub(crate) fn config(message: impl Into<String>) -> PyErr {
    raise(Kind::Config, message, false)
}

/// An unknown or ill-typed option.
pub(crate) fn option(message: impl Into<String>) -> PyErr {
    raise(Kind::Option, message, false)
}

/// A fault of voxlake's own.
pub(crate) fn internal(message: impl Into<String>) -> PyErr {
    raise(Kind::Voxlake, message, false)
}

/// `work` run with a panic caught: a bug of voxlake's reaches Python as a `VoxlakeError`
/// naming what panicked and why, not as pyo3's `PanicException` (a `BaseException` that
/// `except Exception` lets through, and that does not pickle across a worker boundary).
pub(crate) fn no_panic<T>(what: &str, work: impl FnOnce() -> T) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|payload| {
        let cause = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        internal(format!("{what} panicked (a bug of voxlake's): {cause}"))
    })
}
