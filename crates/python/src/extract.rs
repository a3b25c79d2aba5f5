//! Python values taken as the Rust types the options want: an ill-typed one is a
//! `ConfigError` naming the option, what it expects and what it got.

use pyo3::prelude::*;

use crate::errors::option;

/// `v` as a `T`, or an error naming option `name` and the `kind` it expects.
pub(crate) fn value<'py, T: FromPyObjectOwned<'py>>(
    name: &str,
    v: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<T> {
    v.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        option(format!(
            "option {name}: expected {kind}, got {}: {e}",
            type_name(v)
        ))
    })
}

/// The element type `name` says, or an error naming option `option`.
pub(crate) fn dtype(option_name: &str, name: &str) -> PyResult<voxlake_format::DType> {
    name.parse()
        .map_err(|e| option(format!("option {option_name}: {e}")))
}

/// The Python type's name of `v`, for messages.
pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}
