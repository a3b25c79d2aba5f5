//! The loader's counters by name ([`LoaderStats::metrics`], [`Loader::metrics`]): one list,
//! read by Python's `stats()` and `voxlake bench --json` under the same names, each name
//! documented once in docs/usage.md ("What `stats()` holds").

use std::time::Duration;

use crate::{Loader, LoaderStats};

/// One named number of a run; see [`LoaderStats::metrics`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Metric {
    /// Its name, `snake_case`, seconds ending in `_s`.
    pub name: &'static str,
    /// What it counts, in a line.
    pub help: &'static str,
    /// Its value now.
    pub value: MetricValue,
    /// A total since the start, which only grows (a Prometheus counter), rather than a value
    /// now (a gauge).
    pub grows: bool,
}

/// A metric's value.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum MetricValue {
    /// A count (of samples, bytes, reads…) since the start.
    Count(u64),
    /// A time in seconds (summed over threads where a stage runs on several).
    Seconds(f64),
    /// A share between 0 and 1.
    Fraction(f64),
}

impl MetricValue {
    /// The value as a float (a count converted).
    pub fn as_f64(&self) -> f64 {
        match *self {
            MetricValue::Count(n) => n as f64,
            MetricValue::Seconds(s) | MetricValue::Fraction(s) => s,
        }
    }
}

/// A count since the start.
fn count(name: &'static str, help: &'static str, n: u64) -> Metric {
    Metric {
        name,
        help,
        value: MetricValue::Count(n),
        grows: true,
    }
}

/// A count as it stands now (a gauge).
fn level(name: &'static str, help: &'static str, n: u64) -> Metric {
    Metric {
        grows: false,
        ..count(name, help, n)
    }
}

/// Seconds summed since the start.
fn total(name: &'static str, help: &'static str, d: Duration) -> Metric {
    Metric {
        name,
        help,
        value: MetricValue::Seconds(d.as_secs_f64()),
        grows: true,
    }
}

/// A time as it stands now.
fn seconds(name: &'static str, help: &'static str, d: Duration) -> Metric {
    Metric {
        name,
        help,
        value: MetricValue::Seconds(d.as_secs_f64()),
        grows: false,
    }
}

impl LoaderStats {
    /// These counters by name, in a fixed order: what Python's `stats()` and `voxlake bench
    /// --json` report.
    ///
    /// ```
    /// use voxlake_loader::{LoaderStats, MetricValue};
    ///
    /// let metrics = LoaderStats::default().metrics();
    /// let samples = metrics.iter().find(|m| m.name == "samples").unwrap();
    /// assert_eq!(samples.value, MetricValue::Count(0));
    /// ```
    pub fn metrics(&self) -> Vec<Metric> {
        let s = &self.stream;
        let w = &self.step_waits;
        let mut metrics = vec![
            count("samples", "samples handed out", self.samples),
            count("batches", "batches handed out", self.batches),
            count("tensor_bytes", "tensor bytes handed out", self.tensor_bytes),
            total("elapsed_s", "since build()", self.elapsed),
            seconds(
                "first_batch_s",
                "from build() to the first batch",
                self.first_batch,
            ),
            total(
                "fetch_s",
                "fetching row groups (summed over concurrent fetches)",
                s.fetch,
            ),
            total(
                "decode_s",
                "decoding row groups (summed over threads)",
                s.decode,
            ),
            total(
                "assemble_s",
                "assembling batches, the transforms included",
                self.assemble,
            ),
            total(
                "batch_transform_s",
                "of assemble_s, in the batch transform",
                self.batch_transform,
            ),
            total(
                "check_s",
                "of assemble_s, checking rows against their checksums (one row in 8 timed)",
                self.check,
            ),
            total(
                "device_copy_s",
                "of assemble_s, staging batches for a CUDA device and queueing their copies",
                self.device_copy,
            ),
            total(
                "consumer_wait_s",
                "the training loop waiting inside next(): the exposed wait",
                self.consumer_wait,
            ),
            total(
                "producer_wait_s",
                "the assembler waiting for row groups from the stream",
                self.producer_wait,
            ),
            total(
                "budget_wait_s",
                "the stream waiting for room in its row-group budget",
                s.budget_wait,
            ),
            Metric {
                name: "input_bound_fraction",
                help: "of the training loop's time, the share spent waiting inside next()",
                value: MetricValue::Fraction(self.input_bound_fraction),
                grows: false,
            },
            count(
                "step_waits",
                "steps the exposed-wait quantiles count",
                w.steps,
            ),
            seconds(
                "step_wait_p50_s",
                "the median step's wait inside next()",
                w.p50,
            ),
            seconds(
                "step_wait_p90_s",
                "90 % of the steps waited no longer",
                w.p90,
            ),
            seconds(
                "step_wait_p99_s",
                "99 % of the steps waited no longer",
                w.p99,
            ),
            seconds("step_wait_max_s", "the longest wait inside next()", w.max),
        ];
        metrics.extend(self.read_metrics());
        metrics
    }

    /// Of [`metrics`](Self::metrics), the reads' and the batches' memory: in flight, bytes,
    /// the cache, row groups, recycled batches.
    fn read_metrics(&self) -> Vec<Metric> {
        let s = &self.stream;
        vec![
            level(
                "reads_in_flight",
                "row-group reads kept in flight now",
                s.in_flight as u64,
            ),
            seconds(
                "read_latency_s",
                "a row-group read, request to decoded (lower quartile of the last 32)",
                s.read_latency,
            ),
            count(
                "bytes_read",
                "bytes of column chunks read (store, cache or local file)",
                s.bytes,
            ),
            count(
                "store_bytes_read",
                "bytes of data files read from a remote store (cache hits not counted)",
                s.store_bytes,
            ),
            count(
                "store_requests",
                "ranged requests made of a remote store for data files (parts and re-asks each one)",
                s.store_requests,
            ),
            count(
                "store_reads_reasked",
                "store reads asked again because they stalled",
                s.reasked,
            ),
            count(
                "cache_hits",
                "row-group reads the node disk cache answered",
                s.cache.hits,
            ),
            count(
                "cache_misses",
                "row-group reads the node disk cache passed to the store",
                s.cache.misses,
            ),
            count(
                "cache_log_hits",
                "Delta log reads and entries made of the table (a version's file list, a row index) the node cache answered",
                s.cache.log_hits,
            ),
            count(
                "cache_log_misses",
                "Delta log reads and made entries the node cache did not hold",
                s.cache.log_misses,
            ),
            count(
                "cache_bytes_read",
                "bytes read from the node disk cache",
                s.cache.bytes_read,
            ),
            count(
                "cache_corrupt",
                "cache entries found corrupt (read again from the store)",
                s.cache.corrupt,
            ),
            count("row_groups", "row groups delivered", s.row_groups),
            count(
                "row_groups_reused",
                "of row_groups, kept in the memory budget since an earlier epoch (not read again)",
                s.kept_hits,
            ),
            level(
                "batches_ready",
                "batches assembled and waiting for the training loop now",
                self.batches_ready,
            ),
            level(
                "batches_ready_peak",
                "the most batches in the queue ahead of the training loop at once",
                self.batches_ready_peak,
            ),
            count(
                "recycled_batches",
                "batches assembled into memory given back (recycle)",
                self.recycled,
            ),
            count(
                "staging_waits",
                "batches that waited for their CUDA staging buffer",
                self.staging_waits,
            ),
            count(
                "loosened_rows",
                "rows copied out of row groups to free the rest",
                self.loosened_rows,
            ),
        ]
    }
}

impl Loader {
    /// [`LoaderStats::metrics`] of [`stats`](Self::stats), then, once three batches have come,
    /// the forecast: `steady_iteration_s` (the median of the last 32 steps, batch to batch)
    /// and `epoch_forecast_s` (an epoch of this rank at that pace; see
    /// [`forecast`](Self::forecast)).
    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = self.stats().metrics();
        if let (Some(step), Some(f)) = (
            self.meter.steady_iteration(),
            self.forecast(self.iterations_per_epoch(), 1, Duration::ZERO, None),
        ) {
            metrics.push(seconds(
                "steady_iteration_s",
                "a step, batch to batch, in the steady state (median of the last 32)",
                step,
            ));
            metrics.push(seconds(
                "epoch_forecast_s",
                "an epoch of this rank at the steady pace",
                f.epoch,
            ));
        }
        metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric's name is in docs/usage.md's table, once: the names are documented there.
    #[test]
    fn every_metric_is_documented() {
        let docs = include_str!("../../../docs/usage.md");
        let table: Vec<&str> = docs
            .lines()
            .skip_while(|l| !l.starts_with("## Is my GPU waiting on data?"))
            .skip(1)
            .take_while(|l| !l.starts_with("## "))
            .filter(|l| l.starts_with("| `"))
            .collect();
        let mut names: Vec<&str> = LoaderStats::default()
            .metrics()
            .iter()
            .map(|m| m.name)
            .collect();
        names.extend(["steady_iteration_s", "epoch_forecast_s"]);
        for name in &names {
            let rows = table
                .iter()
                .filter(|l| {
                    l.split(" | ")
                        .next()
                        .is_some_and(|cell| cell.contains(&format!("`{name}`")))
                })
                .count();
            assert_eq!(
                rows, 1,
                "metric {name}: {rows} rows of docs/usage.md's table name it"
            );
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a name given twice");
    }
}
