//! One rank's page (`voxlake bench --report`), drawn from the figures `--json` prints plus the
//! counters over time.

use serde_json::Value;

use super::html;
use super::plots::{self, Line, Stack};
use crate::voxlake::series::{self, Point};

/// A page that could not be drawn.
pub(super) type Error = Box<dyn std::error::Error>;

/// `report[key]` as a number, 0 where it is missing or not one.
pub(super) fn num(report: &Value, key: &str) -> f64 {
    report.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// The stage parts [`stage_stacks`] draws, busy then waiting.
pub(super) const STAGES: [&str; 9] = [
    "fetch",
    "decode",
    "check",
    "device copy",
    "assemble (the rest)",
    "batch transform",
    "loop in next()",
    "assembler on stream",
    "stream on budget",
];

/// A rank's time by stage: a bar of busy time (summed over threads) and one of waits.
pub(super) fn stage_stacks(label: &str, report: &Value) -> [Stack; 2] {
    // Of assemble_s: the row checks, the device copies, the batch transform.
    let (check, copy) = (num(report, "check_s"), num(report, "device_copy_s"));
    let transform = num(report, "batch_transform_s");
    let busy = vec![
        num(report, "fetch_s"),
        num(report, "decode_s"),
        check,
        copy,
        (num(report, "assemble_s") - check - copy - transform).max(0.0),
        transform,
        0.0,
        0.0,
        0.0,
    ];
    let waits = vec![
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        num(report, "consumer_wait_s"),
        num(report, "producer_wait_s"),
        num(report, "budget_wait_s"),
    ];
    [
        Stack {
            label: format!("{label} busy"),
            parts: busy,
        },
        Stack {
            label: format!("{label} waits"),
            parts: waits,
        },
    ]
}

/// The counters over time a report keeps (none where it has no series).
pub(super) fn points(report: &Value) -> Vec<Point> {
    report
        .get("series")
        .and_then(series::Series::points_from_json)
        .unwrap_or_default()
}

/// The title of a rank's page.
pub(super) fn title(report: &Value) -> String {
    let table = report.get("table").and_then(Value::as_str).unwrap_or("?");
    format!(
        "voxlake bench: {table}, rank {} of {}",
        num(report, "rank"),
        num(report, "world_size")
    )
}

/// The page of one rank's run.
pub(super) fn page(report: &Value) -> Result<String, Error> {
    let points = points(report);
    let mut body = String::new();
    if report.get("optimized") == Some(&Value::Bool(false)) {
        body.push_str(
            "<p class=\"warn\">An unoptimized build (debug assertions on): its pace is not the release's.</p>\n",
        );
    }
    body.push_str(&summary(report));
    let per_s = |counter: fn(&Point) -> f64, name: &str| Line {
        name: name.to_string(),
        points: series::rates(&points, counter),
    };
    body.push_str(&html::section(
        "throughput",
        "Samples per second",
        &plots::lines(
            "seconds",
            "samples/s",
            &[per_s(|p| p.samples as f64, "samples/s")],
        )?,
    ));
    body.push_str(&html::section(
        "stages",
        "Where the time went (seconds, busy summed over threads)",
        &plots::stacked_bars(&STAGES, &stage_stacks("this rank", report), "seconds")?,
    ));
    body.push_str(&html::section(
        "waits",
        "The loop's wait inside next(), a step",
        &wait_histogram(report)?,
    ));
    let reads = plots::lines(
        "seconds",
        "MB/s",
        &[per_s(|p| p.bytes_read as f64 / 1e6, "MB/s read")],
    )? + &plots::lines(
        "seconds",
        "per second",
        &[
            per_s(|p| p.store_requests as f64, "store requests/s"),
            per_s(|p| p.row_groups as f64, "row groups/s"),
        ],
    )?;
    body.push_str(&html::section("reads", "Bytes and requests", &reads));
    body.push_str(&html::section("forecast", "Forecast", &forecast(report)));
    Ok(html::page(&title(report), &body, report))
}

/// The run's headline figures.
fn summary(report: &Value) -> String {
    let n = |key: &str| plots::short(num(report, key));
    let s = |key: &str| plots::duration(num(report, key));
    let version = report
        .get("version")
        .map_or_else(String::new, Value::to_string);
    let rows = [
        ("version", version),
        ("samples", n("samples")),
        ("seconds", s("seconds")),
        ("samples/s", n("samples_per_s")),
        ("MB/s of tensors", n("mb_per_s")),
        ("CPU cores busy", n("cpu_cores")),
        ("first batch after", s("first_batch_s")),
        (
            "peak RSS (MB)",
            plots::short(num(report, "peak_rss_bytes") / 1e6),
        ),
        ("the loop's wait inside next()", s("consumer_wait_s")),
        (
            "input-bound share",
            format!("{:.1} %", 100.0 * num(report, "input_bound_fraction")),
        ),
        (
            "batches ready for the loop, at most",
            n("batches_ready_peak"),
        ),
        ("bytes read", n("bytes_read")),
        ("store requests", n("store_requests")),
        (
            "cache hits / misses",
            format!("{} / {}", n("cache_hits"), n("cache_misses")),
        ),
    ];
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(k, v)| vec![k.into(), v]).collect();
    html::table(&["", ""], &rows, &[])
}

/// The histogram of the steps' waits by power of two.
fn wait_histogram(report: &Value) -> Result<String, Error> {
    let buckets: Vec<(f64, f64)> = report
        .get("step_wait_histogram")
        .and_then(Value::as_array)
        .map(|b| {
            b.iter()
                .map(|o| (num(o, "from_s"), num(o, "steps")))
                .collect()
        })
        .unwrap_or_default();
    let quantiles = format!(
        "<p>p50 {}, p90 {}, p99 {}, max {} over {} steps.</p>",
        plots::duration(num(report, "step_wait_p50_s")),
        plots::duration(num(report, "step_wait_p90_s")),
        plots::duration(num(report, "step_wait_p99_s")),
        plots::duration(num(report, "step_wait_max_s")),
        num(report, "step_waits"),
    );
    let labels: Vec<String> = buckets
        .iter()
        .map(|(from, _)| plots::duration(*from))
        .collect();
    let steps: Vec<f64> = buckets.iter().map(|(_, n)| *n).collect();
    let chart = plots::bars(&labels, &steps, &[], &[], ("wait from", "steps"))?;
    Ok(quantiles + &chart)
}

/// What the steady pace forecasts.
fn forecast(report: &Value) -> String {
    if report.get("epoch_forecast_s").is_none() {
        return "<p>No forecast: fewer than three batches came.</p>".into();
    }
    let rows = vec![
        vec![
            "a step in the steady state".into(),
            plots::duration(num(report, "steady_iteration_s")),
        ],
        vec![
            "steps an epoch (this rank)".into(),
            plots::short(num(report, "iterations_per_epoch")),
        ],
        vec![
            "an epoch of this rank at that pace".into(),
            plots::duration(num(report, "epoch_forecast_s")),
        ],
    ];
    html::table(&["", ""], &rows, &[])
}
