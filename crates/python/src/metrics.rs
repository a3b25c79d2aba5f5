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

/// The training loop's wait inside a `DataLoader`'s `next()`, measured in the process that
/// waits (its workers' loaders see only their own): the loader's histogram, its figures under
/// the loader's names.
#[pyclass(module = "voxlake._voxlake", name = "WaitMeter")]
#[derive(Default)]
pub(crate) struct WaitMeter {
    histogram: voxlake_loader::stall::WaitHistogram,
    waited: std::time::Duration,
}

#[pymethods]
impl WaitMeter {
    #[new]
    fn new() -> Self {
        WaitMeter::default()
    }

    /// Counts one step that waited `seconds`.
    fn record(&mut self, seconds: f64) -> PyResult<()> {
        let wait = std::time::Duration::try_from_secs_f64(seconds).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("a wait of {seconds} s: {e}"))
        })?;
        self.histogram.record(wait);
        self.waited += wait;
        Ok(())
    }

    /// `consumer_wait_s`, `step_waits` and `step_wait_p50_s` … `step_wait_max_s`, as the
    /// loader's `stats()` names them.
    fn waits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut stats = voxlake_loader::LoaderStats::default();
        stats.step_waits = self.histogram.waits();
        stats.consumer_wait = self.waited;
        let metrics: Vec<_> = stats
            .metrics()
            .into_iter()
            .filter(|m| m.name == "consumer_wait_s" || m.name.starts_with("step_wait"))
            .collect();
        let out = PyDict::new(py);
        put(&out, &metrics)?;
        Ok(out)
    }
}

/// The names of the metrics that are totals since the start (`Metric::grows`): what several
/// loaders' `stats()` add up to.
pub(crate) fn counters() -> Vec<&'static str> {
    voxlake_loader::LoaderStats::default()
        .metrics()
        .into_iter()
        .filter(|m| m.grows)
        .map(|m| m.name)
        .collect()
}
