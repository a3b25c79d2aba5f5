//! The loader's metrics (`voxlake_loader::Metric`) into a `stats()` dict, by name.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Each metric into `out` under its name: a count as an int, a time or share as a float.
pub(crate) fn put(out: &Bound<'_, PyDict>, metrics: &[voxlake_loader::Metric]) -> PyResult<()> {
    for m in metrics {
        match m.value {
            voxlake_loader::MetricValue::Count(n) => out.set_item(m.name, n)?,
            other => out.set_item(m.name, other.as_f64())?,
        }
    }
    Ok(())
}
