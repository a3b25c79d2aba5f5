//! Python values taken as the Rust types the options want: an ill-typed one is a
//! `ConfigError` naming the option, what it expects and what it got.

use pyo3::prelude::*;

use voxlake::AsOf;

use crate::errors::{config, option};

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

/// The version current at `v`: a timezone-aware `datetime` or RFC 3339 text.
pub(crate) fn timestamp(v: &Bound<'_, PyAny>) -> PyResult<AsOf> {
    let text: String = match v.extract::<String>() {
        Ok(text) => text,
        Err(_) => datetime_text(v)?,
    };
    AsOf::parse_timestamp(&text).map_err(|e| config(format!("option timestamp: {e}")))
}

/// A timezone-aware `datetime` as RFC 3339 text; a naive one is refused (whose time zone?).
fn datetime_text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    let datetime = v.py().import("datetime")?.getattr("datetime")?;
    if !v.is_instance(&datetime)? {
        return Err(option(format!(
            "option timestamp: expected a datetime or RFC 3339 text, got {}",
            type_name(v)
        )));
    }
    if v.call_method0("utcoffset")?.is_none() {
        return Err(config(
            "option timestamp: a naive datetime has no time zone: give an aware one (datetime.now(timezone.utc))",
        ));
    }
    v.call_method0("isoformat")?.extract()
}
