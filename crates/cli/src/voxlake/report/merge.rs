//! `voxlake report merge DIR`: the ranks' pages of one run lined up in one page, a straggler
//! (a rank whose exposed wait is more than twice the median) flagged.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::html;
use super::plots::{self, Line, Rule};
use super::rank::{self, num};
use crate::voxlake::series;

/// A merge that could not be made: a folder, a page or the output.
pub(crate) type Error = Box<dyn std::error::Error>;

/// A rank is a straggler where its exposed wait exceeds this many times the median...
const STRAGGLER_RATIO: f64 = 2.0;

/// ...and this share of its own run (ranks that barely wait are no one's bottleneck).
const STRAGGLER_FLOOR: f64 = 0.01;

/// One rank's page, read back.
struct RankPage {
    file: PathBuf,
    report: Value,
}

/// The ranks whose exposed wait (`(wait, run)` seconds, one pair a rank) is more than twice
/// the median's and more than 1 % of their run; and the median.
pub(crate) fn stragglers(waits: &[(f64, f64)]) -> (Vec<usize>, f64) {
    let mut sorted: Vec<f64> = waits.iter().map(|w| w.0).collect();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => return (Vec::new(), 0.0),
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    let slow = waits
        .iter()
        .enumerate()
        .filter(|(_, (wait, run))| {
            *wait > STRAGGLER_RATIO * median && *wait > STRAGGLER_FLOOR * run
        })
        .map(|(i, _)| i)
        .collect();
    (slow, median)
}

/// The ranks' pages in `dir` (every `.html` file with a rank's figures but `out`), by rank;
/// the names of the `.html` files that hold none.
fn read_pages(dir: &Path, out: &Path) -> Result<(Vec<RankPage>, Vec<PathBuf>), Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading the folder {}: {e}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading the folder {}: {e}", dir.display()))?;
    files.retain(|f| f.extension().is_some_and(|e| e == "html") && f != out);
    files.sort();
    let (mut pages, mut others) = (Vec::new(), Vec::new());
    for file in files {
        let len = std::fs::metadata(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?
            .len();
        if len > html::MAX_PAGE_BYTES {
            return Err(format!(
                "{}: {len} bytes, more than a report holds ({} at most)",
                file.display(),
                html::MAX_PAGE_BYTES
            )
            .into());
        }
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        match html::data_of(&text) {
            Some(Ok(report)) if report.get("report") == Some(&Value::from("bench")) => {
                pages.push(RankPage { file, report });
            }
            Some(Ok(_)) | None => others.push(file),
            Some(Err(e)) => {
                return Err(format!("{}: its figures do not parse: {e}", file.display()).into());
            }
        }
    }
    pages.sort_by_key(|p| num(&p.report, "rank") as u64);
    Ok((pages, others))
}

/// Every page is of one run: the same table, version and world size, each rank once.
fn check_one_run(pages: &[RankPage]) -> Result<(), Error> {
    let Some(first) = pages.first() else {
        return Ok(());
    };
    for key in ["tables", "versions", "world_size"] {
        if let Some(other) = pages
            .iter()
            .find(|p| p.report.get(key) != first.report.get(key))
        {
            return Err(format!(
                "{} and {} are not of one run: their {key} differ ({} and {})",
                first.file.display(),
                other.file.display(),
                first.report.get(key).unwrap_or(&Value::Null),
                other.report.get(key).unwrap_or(&Value::Null),
            )
            .into());
        }
    }
    for pair in pages.windows(2) {
        if num(&pair[0].report, "rank") == num(&pair[1].report, "rank") {
            return Err(format!(
                "{} and {} are both rank {}",
                pair[0].file.display(),
                pair[1].file.display(),
                num(&pair[0].report, "rank")
            )
            .into());
        }
    }
    Ok(())
}

/// Merges the ranks' pages in `dir` into `out` (default `DIR/merged.html`); returns what it
/// found, as JSON: each rank's figures, the median exposed wait, the stragglers, the ranks
/// missing and the files that were no rank's page.
pub(crate) fn merge(dir: &Path, out: Option<&Path>) -> Result<Value, Error> {
    let out = out.map_or_else(|| dir.join("merged.html"), Path::to_path_buf);
    let (pages, others) = read_pages(dir, &out)?;
    if pages.is_empty() {
        return Err(format!("no report of `voxlake bench --report` in {}", dir.display()).into());
    }
    check_one_run(&pages)?;
    let waits: Vec<(f64, f64)> = pages
        .iter()
        .map(|p| (num(&p.report, "consumer_wait_s"), num(&p.report, "seconds")))
        .collect();
    let (slow, median) = stragglers(&waits);
    let world_size = num(&pages[0].report, "world_size") as u64;
    let missing: Vec<u64> = (0..world_size)
        .filter(|r| !pages.iter().any(|p| num(&p.report, "rank") as u64 == *r))
        .collect();
    let ranks: Vec<Value> = pages
        .iter()
        .enumerate()
        .map(|(i, p)| {
            serde_json::json!({
                "rank": p.report.get("rank"),
                "file": p.file.display().to_string(),
                "samples": p.report.get("samples"),
                "samples_per_s": p.report.get("samples_per_s"),
                "seconds": p.report.get("seconds"),
                "consumer_wait_s": p.report.get("consumer_wait_s"),
                "input_bound_fraction": p.report.get("input_bound_fraction"),
                "step_wait_p99_s": p.report.get("step_wait_p99_s"),
                "straggler": slow.contains(&i),
            })
        })
        .collect();
    let summary = serde_json::json!({
        "report": "merge",
        "tables": pages[0].report.get("tables"),
        "versions": pages[0].report.get("versions"),
        "world_size": world_size,
        "ranks": ranks,
        "median_consumer_wait_s": median,
        "stragglers": slow.iter().map(|&i| pages[i].report.get("rank")).collect::<Vec<_>>(),
        "missing_ranks": missing,
        "not_reports": others.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "out": out.display().to_string(),
    });
    let page = merged_page(&pages, &slow, median, &summary)?;
    std::fs::write(&out, page).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(summary)
}

/// The merged page: the ranks side by side, stragglers in red.
fn merged_page(
    pages: &[RankPage],
    slow: &[usize],
    median: f64,
    summary: &Value,
) -> Result<String, Error> {
    let flagged: Vec<bool> = (0..pages.len()).map(|i| slow.contains(&i)).collect();
    let label = |p: &RankPage| format!("rank {}", num(&p.report, "rank"));
    let mut body = verdict(pages, slow, median, summary);
    let rows: Vec<Vec<String>> = pages
        .iter()
        .map(|p| {
            let r = &p.report;
            vec![
                label(p),
                plots::short(num(r, "samples")),
                plots::short(num(r, "samples_per_s")),
                plots::duration(num(r, "consumer_wait_s")),
                format!("{:.1} %", 100.0 * num(r, "input_bound_fraction")),
                plots::duration(num(r, "step_wait_p99_s")),
                plots::duration(num(r, "epoch_forecast_s")),
            ]
        })
        .collect();
    let header = [
        "",
        "samples",
        "samples/s",
        "exposed wait",
        "input-bound",
        "step wait p99",
        "epoch forecast",
    ];
    body.push_str(&html::table(&header, &rows, &flagged));
    let labels: Vec<String> = pages.iter().map(label).collect();
    let waits: Vec<f64> = pages
        .iter()
        .map(|p| num(&p.report, "consumer_wait_s"))
        .collect();
    let rules = [
        Rule {
            name: "median".into(),
            value: median,
        },
        Rule {
            name: "twice the median".into(),
            value: STRAGGLER_RATIO * median,
        },
    ];
    let chart = plots::bars(&labels, &waits, &flagged, &rules, ("", "seconds"))?;
    body.push_str(&html::section(
        "exposed",
        "The loop's wait inside next(), by rank",
        &chart,
    ));
    let lines: Vec<Line> = pages
        .iter()
        .map(|p| Line {
            name: label(p),
            points: series::rates(&rank::points(&p.report), |pt| pt.samples as f64),
        })
        .collect();
    body.push_str(&html::section(
        "throughput",
        "Samples per second, by rank",
        &plots::lines("seconds", "samples/s", &lines)?,
    ));
    let stacks: Vec<_> = pages
        .iter()
        .flat_map(|p| rank::stage_stacks(&label(p), &p.report))
        .collect();
    body.push_str(&html::section(
        "stages",
        "Where the time went (seconds, busy summed over threads)",
        &plots::stacked_bars(&rank::STAGES, &stacks, "seconds")?,
    ));
    let table = pages[0].report.get("table").and_then(Value::as_str);
    let title = format!(
        "voxlake bench: {}, {} ranks",
        table.unwrap_or("?"),
        pages.len()
    );
    Ok(html::page(&title, &body, summary))
}

/// The merge's finding in a paragraph: the stragglers or none, the ranks missing.
fn verdict(pages: &[RankPage], slow: &[usize], median: f64, summary: &Value) -> String {
    let mut text = if slow.is_empty() {
        format!(
            "No straggler: no rank waited more than twice the median ({}).",
            plots::duration(median)
        )
    } else {
        let names: Vec<String> = slow
            .iter()
            .map(|&i| {
                let r = &pages[i].report;
                format!(
                    "rank {} ({}, {:.1}× the median)",
                    num(r, "rank"),
                    plots::duration(num(r, "consumer_wait_s")),
                    num(r, "consumer_wait_s") / median.max(f64::MIN_POSITIVE)
                )
            })
            .collect();
        format!(
            "Straggler: {} waited more than twice the median exposed wait ({}).",
            names.join(", "),
            plots::duration(median)
        )
    };
    if let Some(missing) = summary["missing_ranks"]
        .as_array()
        .filter(|m| !m.is_empty())
    {
        let missing: Vec<String> = missing.iter().map(Value::to_string).collect();
        text.push_str(&format!(
            " Ranks with no page here: {}.",
            missing.join(", ")
        ));
    }
    let class = if slow.is_empty() {
        ""
    } else {
        " class=\"flag\""
    };
    format!("<p{class}>{}</p>\n", html::escape(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_straggler_waits_over_twice_the_median_and_a_share_of_its_run() {
        // Median 1.0: rank 3 waits 2.5 (flagged), rank 2 waits exactly twice (not).
        let waits = [
            (1.0, 100.0),
            (0.9, 100.0),
            (2.0, 100.0),
            (2.5, 100.0),
            (1.0, 100.0),
        ];
        assert_eq!(stragglers(&waits), (vec![3], 1.0));
        // A rank that barely waits: fifty times the median, but under 1 % of its run.
        let barely = [(0.001, 10.0), (0.001, 10.0), (0.05, 10.0)];
        assert_eq!(stragglers(&barely), (vec![], 0.001));
        // An even count: the median between the middle two.
        assert_eq!(stragglers(&[(1.0, 1.0), (3.0, 1.0)]).1, 2.0);
        assert_eq!(stragglers(&[]), (vec![], 0.0));
    }
}
