//! `voxlake bench`'s report: what the run delivered, how fast, and where its time went; as
//! lines, one JSON object, or a page with plots (`--report`, one a rank; `voxlake report
//! merge` lines the ranks' pages up).

mod html;
mod merge;
mod plots;
mod rank;

use std::io::Write;
use std::time::Instant;

use voxlake_loader::Loader;
use voxlake_loader::stall::StepWaits;

use super::args::BenchArgs;
use super::series::Series;

pub(super) use merge::merge;

/// Whether this binary was built optimized: a debug build's pace is not the release's (the
/// report says so; scripts/demo.sh runs the test suite's debug build).
const OPTIMIZED: bool = !cfg!(debug_assertions);

/// What the run measured besides the loader's own counters.
pub(super) struct Run {
    /// When the run began (before the table was opened).
    pub(super) start: Instant,
    /// The sum of the first field's values over every batch.
    pub(super) checksum: f64,
    /// Per field: the sum of its values (text: the count of non-empty strings).
    pub(super) field_sums: Vec<(String, f64)>,
    /// Seconds from the start to the first batch.
    pub(super) first_batch_s: Option<f64>,
    /// The signal that stopped the run, if one did.
    pub(super) stopped_by: Option<i32>,
    /// Where the loader stood after the last batch delivered (as `--state-out` wrote it).
    pub(super) state: voxlake_loader::LoaderState,
    /// The loader's counters over the run.
    pub(super) series: Series,
}

/// Writes the report: one JSON object with `--json`, else lines for a person; and the page
/// `--report` asks for.
pub(super) fn write(
    out: &mut impl Write,
    args: &BenchArgs,
    loader: &Loader,
    run: &Run,
) -> Result<(), Box<dyn std::error::Error>> {
    let report = json(args, loader, run);
    if args.json {
        writeln!(out, "{report}")?;
    } else {
        lines(out, args, loader, run, &report)?;
    }
    if let Some(path) = page_path(args, loader) {
        let mut data = report;
        data["report"] = "bench".into();
        data["series"] = run.series.to_json();
        let page = rank::page(&data)?;
        std::fs::write(&path, page)
            .map_err(|e| format!("writing the report {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Where this rank's page goes (`--report`, the rank put in where there are several).
pub(super) fn page_path(args: &BenchArgs, loader: &Loader) -> Option<std::path::PathBuf> {
    let (rank, world_size) = loader.rank();
    let path = args.report.as_ref()?;
    Some(voxlake_loader::rank_path(path, rank, world_size))
}

/// The steps by their wait's power of two, from the first octave that holds one to the last.
fn wait_histogram(waits: &StepWaits) -> serde_json::Value {
    let held = |k: &usize| waits.octaves[*k] > 0;
    let first = (0..StepWaits::OCTAVES).find(held);
    let last = (0..StepWaits::OCTAVES).rev().find(held);
    let (Some(first), Some(last)) = (first, last) else {
        return serde_json::json!([]);
    };
    (first..=last)
        .map(|k| {
            serde_json::json!({
                "from_s": if k == 0 { 0.0 } else { StepWaits::octave_floor(k).as_secs_f64() },
                "steps": waits.octaves[k],
            })
        })
        .collect()
}

/// The run's figures as one JSON object: what `--json` prints.
fn json(args: &BenchArgs, loader: &Loader, run: &Run) -> serde_json::Value {
    let seconds = run.start.elapsed().as_secs_f64();
    let state = &run.state;
    let (cpu_user_s, cpu_system_s) = cpu_seconds().unwrap_or((0.0, 0.0));
    let stats = loader.stats();
    let samples = stats.samples;
    let mb = stats.tensor_bytes as f64 / 1e6;
    let filtered = loader.filter_stats().unwrap_or_default();
    let fields: serde_json::Map<String, serde_json::Value> = loader
        .sample()
        .fields()
        .iter()
        .map(|f| {
            let sum = run
                .field_sums
                .iter()
                .find(|(n, _)| *n == f.name)
                .map_or(0.0, |(_, s)| *s);
            let kind = match &f.kind {
                voxlake_format::FieldKind::Tensor(spec) => serde_json::json!({
                    "checksum": sum,
                    "shape": spec.shape(),
                    "dtype": spec.dtype().name(),
                }),
                _ => serde_json::json!({"checksum": sum, "dtype": "text"}),
            };
            (f.name.clone(), kind)
        })
        .collect();
    let mut report = serde_json::json!({
        "stopped_by_signal": run.stopped_by,
        "optimized": OPTIMIZED,
        "table": voxlake_io::redact(&args.tables[0]),
        "tables": args.tables.iter().map(|t| voxlake_io::redact(t)).collect::<Vec<_>>(),
        "version": loader.version(),
        "versions": loader.versions(),
        "epochs": args.epochs,
        "seconds": seconds,
        "cpu_user_s": cpu_user_s,
        "cpu_system_s": cpu_system_s,
        "cpu_cores": (cpu_user_s + cpu_system_s) / seconds,
        "samples_per_s": samples as f64 / seconds,
        "mb_per_s": mb / seconds,
        "peak_rss_bytes": peak_rss_bytes(),
        "memory_budget_bytes": args.memory_budget_mb << 20,
        "shuffle": args.shuffle,
        "iterations_per_epoch": loader.iterations_per_epoch(),
        "draws_per_epoch": loader.draws_per_epoch(),
        "labels_delivered": loader
            .labels_delivered()
            .iter()
            .map(|(l, n)| (l.map_or("null".to_string(), |l| l.to_string()), serde_json::json!(n)))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "sources_delivered": loader.sources_delivered(),
        "rank": loader.rank().0,
        "world_size": loader.rank().1,
        "next_epoch": state.epoch,
        "next_batch_in_segment": state.batches,
        "checksum": run.checksum,
        "fields": fields,
        "filter": args.filter,
        "filter_files_skipped": filtered.files_skipped,
        "filter_row_groups_skipped": filtered.row_groups_skipped,
        "filter_rows_decided": filtered.rows_decided,
        "filter_rows_selected": filtered.rows_selected,
        "step_wait_histogram": wait_histogram(&stats.step_waits),
    });
    // The loader's counters under the names Python's stats() gives them (docs/usage.md).
    if let Some(map) = report.as_object_mut() {
        for m in loader.metrics() {
            let value = match m.value {
                voxlake_loader::MetricValue::Count(n) => serde_json::json!(n),
                other => serde_json::json!(other.as_f64()),
            };
            map.insert(m.name.to_string(), value);
        }
    }
    report
}

/// The report as lines for a person.
fn lines(
    out: &mut impl Write,
    args: &BenchArgs,
    loader: &Loader,
    run: &Run,
    report: &serde_json::Value,
) -> Result<(), Box<dyn std::error::Error>> {
    let stats = loader.stats();
    let num = |key: &str| report[key].as_f64().unwrap_or(0.0);
    let (seconds, cpu_user_s, cpu_system_s) =
        (num("seconds"), num("cpu_user_s"), num("cpu_system_s"));
    let samples = stats.samples;
    let mb = stats.tensor_bytes as f64 / 1e6;
    writeln!(
        out,
        "{samples} samples in {seconds:.2} s: {:.0} samples/s, {:.0} MB/s of tensors; CPU {cpu_user_s:.2} s user + {cpu_system_s:.2} s system ({:.1} cores); first batch after {:.3} s; peak RSS {:.0} MB (budget {} MiB)",
        samples as f64 / seconds,
        mb / seconds,
        (cpu_user_s + cpu_system_s) / seconds,
        run.first_batch_s.unwrap_or(0.0),
        peak_rss_bytes().unwrap_or(0) as f64 / 1e6,
        args.memory_budget_mb,
    )?;
    writeln!(
        out,
        "stages (summed over threads): fetch {:.2} s, decode {:.2} s, assemble {:.2} s (of which the row checks {:.2} s); waits: assembler on stream {:.2} s, consumer on loader {:.2} s, budget {:.2} s",
        stats.stream.fetch.as_secs_f64(),
        stats.stream.decode.as_secs_f64(),
        stats.assemble.as_secs_f64(),
        stats.check.as_secs_f64(),
        stats.producer_wait.as_secs_f64(),
        stats.consumer_wait.as_secs_f64(),
        stats.stream.budget_wait.as_secs_f64(),
    )?;
    let w = &stats.step_waits;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    writeln!(
        out,
        "the loop's wait inside next(), a step: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; input-bound {:.0} % of its time",
        ms(w.p50),
        ms(w.p90),
        ms(w.p99),
        ms(w.max),
        100.0 * stats.input_bound_fraction,
    )?;
    if !OPTIMIZED {
        writeln!(
            out,
            "an unoptimized build (debug assertions on): its pace is not the release's (`cargo build --release -p voxlake-cli`, or `scripts/demo.sh --release`)"
        )?;
    }
    if let Some(f) = loader.filter_stats() {
        writeln!(
            out,
            "filter: {} of {} rows kept; {} files and {} row groups skipped unread, {} rows decided one by one",
            f.rows_selected, f.rows_before, f.files_skipped, f.row_groups_skipped, f.rows_decided
        )?;
    }
    Ok(())
}

/// User and system CPU time of this process so far, in seconds (all its threads).
fn cpu_seconds() -> Option<(f64, f64)> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which is valid and
    // large enough; it is read only when the call succeeded.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((secs(usage.ru_utime), secs(usage.ru_stime)))
}

/// Peak resident set size of this process (Linux: VmHWM), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
