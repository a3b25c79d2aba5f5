//! The `compact` binary: JSON summary, error lines and exit codes, kill and re-run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use voxlake::compact::synth;

use voxlake_testkit::{assert_table_holds_cubes, commits, compact_bin, json_output, python_script};

/// `compact convert CUBES TABLE --labels LABELS` for a generated dataset.
fn convert_command(data: &synth::SynthDataset, table: &Path) -> Command {
    let mut cmd = Command::new(compact_bin());
    cmd.args([
        "convert",
        data.cubes.to_str().unwrap(),
        table.to_str().unwrap(),
    ])
    .args(["--labels", data.labels.to_str().unwrap()]);
    cmd
}

#[tokio::test]
async fn json_summary_has_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 10, 1).unwrap();
    let table = dir.path().join("table");
    let v = json_output(convert_command(&data, &table).args(["--json", "--row-group-rows", "4"]));
    for key in [
        "files",
        "rows",
        "bytes_read",
        "bytes_written",
        "seconds",
        "version",
        "skipped",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["files"], 10);
    assert_eq!(v["version"], 1);
    // A shape given on the command line (clap once panicked on `--shape`).
    let other = dir.path().join("shaped");
    let v = json_output(convert_command(&data, &other).args([
        "--json",
        "--shape",
        "30,30,10,10",
        "--dtype",
        "f16",
    ]));
    assert_eq!(v["rows"], 10);
    // bfloat16, which numpy has no type for: the table holds it, the loader hands it out.
    let bf16 = dir.path().join("bf16");
    let v = json_output(convert_command(&data, &bf16).args(["--json", "--dtype", "bf16"]));
    assert_eq!(v["tensor"], "[30, 30, 10, 10] bf16");
    let batch = first_batch(&bf16, 10);
    assert_eq!(batch.tensors.dtype(), voxlake::format::DType::BF16);
    assert_eq!(v["skipped"], serde_json::json!([]));

    let v = json_output(Command::new(compact_bin()).args([
        "inspect",
        table.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["rows"], 10);
    assert_eq!(v["row_groups"], 3);
    assert_eq!(v["shape"], serde_json::json!([30, 30, 10, 10]));
    inspect_row_finds_a_row_by_its_id(&table);
    inspect_row_draws_a_picture(&table);
}

/// `compact inspect TABLE --row ID --png FILE`: a PNG of the row (its slices in many colours,
/// a title in the font's ink); `--png` without `--row` is refused.
fn inspect_row_draws_a_picture(table: &Path) {
    let batch = first_batch(table, 10);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("row.png");
    let v = json_output(Command::new(compact_bin()).args([
        "inspect",
        table.to_str().unwrap(),
        "--row",
        &batch.ids[3],
        "--png",
        file.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["id"], batch.ids[3].as_str());
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&file).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    // 10 channels of three 30×30×10 slices: taller than wide.
    assert!(info.height > info.width && info.width > 300, "{info:?}");
    let colours: std::collections::HashSet<&[u8]> = rgb.chunks(3).collect();
    assert!(colours.len() > 100, "{} colours", colours.len());
    assert!(colours.contains(&[235u8, 235, 235][..]), "the title's ink");
    let out = Command::new(compact_bin())
        .args(["inspect", table.to_str().unwrap(), "--png", "x.png"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--row"));
}

/// The first batch of `size` rows a loader reads from `table` (on a thread of its own: the
/// loader builds its runtime, which a test's runtime may not hold).
fn first_batch(table: &Path, size: usize) -> voxlake::Batch {
    let location = table.to_str().unwrap().to_string();
    std::thread::spawn(move || {
        voxlake::Loader::builder(&location)
            .with_batch_size(size)
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
    })
    .join()
    .unwrap()
}

/// `compact inspect TABLE --row ID`: the row the loader reads for that id, summed up; an id
/// the version lacks fails naming it and the version.
fn inspect_row_finds_a_row_by_its_id(table: &Path) {
    let batch = first_batch(table, 10);
    let voxlake::Tensors::F32(cubes) = &batch.tensors else {
        panic!("f32 cubes: {:?}", batch.tensors.dtype());
    };
    let mut positions = Vec::new();
    for k in [0, 7] {
        let id = &batch.ids[k];
        let v = json_output(Command::new(compact_bin()).args([
            "inspect",
            table.to_str().unwrap(),
            "--row",
            id,
            "--json",
        ]));
        let cube = cubes.index_axis(ndarray::Axis(0), k);
        let values: Vec<f64> = cube.iter().map(|&x| f64::from(x)).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert_eq!(v["id"], id.as_str(), "{v}");
        assert_eq!(v["version"], 1);
        assert_eq!(v["rows"], 10);
        assert_eq!(v["label"], serde_json::json!(batch.labels[k]));
        let field = &v["fields"][0];
        assert_eq!(field["shape"], serde_json::json!([30, 30, 10, 10]));
        assert_eq!(field["dtype"], "f32");
        assert_eq!(field["min"].as_f64(), Some(min));
        assert_eq!(field["max"].as_f64(), Some(max));
        assert!(
            (field["mean"].as_f64().unwrap() - mean).abs() < 1e-9,
            "{field} vs {mean}"
        );
        positions.push(v["position"].as_u64().unwrap());
    }
    assert!(
        positions[0] != positions[1] && positions.iter().all(|&p| p < 10),
        "{positions:?}"
    );
    let out = Command::new(compact_bin())
        .args(["inspect", table.to_str().unwrap(), "--row", "no-such-cube"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-cube") && stderr.contains("version 1"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bad_input_is_one_error_line_and_a_failure_code() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("broken.npy"), b"\x93NUMPY\x01\x00\xff").unwrap();
    let table = dir.path().join("table");
    let out = Command::new(compact_bin())
        .args(["convert", src.to_str().unwrap(), table.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: broken.npy: truncated"),
        "{stderr}"
    );
    assert_eq!(commits(&table), 0, "nothing may be committed");

    let out = Command::new(compact_bin())
        .args(["convert", "az://x/y", "/dev/null/table", "--shard", "3/2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the index must be below the count"));
}

#[tokio::test]
async fn killed_runs_resume_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let count = 120;
    let data = synth::generate(dir.path(), count, 21).unwrap();
    let table = dir.path().join("table");
    let convert = || {
        let mut cmd = convert_command(&data, &table);
        // One ~2 MB file per commit and a slow pace: many commits to land between.
        cmd.args([
            "--row-group-rows",
            "2",
            "--target-file-mb",
            "1.5",
            "--files-per-commit",
            "1",
        ])
        .args(["--concurrency", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        cmd
    };
    // Kill three times at growing depths: before the table exists, after a few commits, later.
    for target_commits in [0, 3, 8] {
        let mut child = convert().spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while commits(&table) < target_commits && Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().ok();
        child.wait().unwrap();
    }
    let partial = voxlake_testkit::read_table(&table).await.len();
    assert!(
        partial > 0 && partial < count,
        "the runs were meant to be cut short: {partial} rows"
    );
    let status = convert().status().unwrap();
    assert!(status.success());
    assert_table_holds_cubes(&table, 21, count).await;
}

#[tokio::test]
async fn python_deltalake_and_pyarrow_read_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 50, 13).unwrap();
    let table = dir.path().join("table");
    let out = convert_command(&data, &table)
        .args(["--target-file-mb", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked = python_script("check_table.py", &[&table, &data.cubes, &data.labels]);
    assert_eq!(checked, "ok 50");
}

#[test]
fn secrets_stay_out_of_urls_and_process_lists() {
    // A SAS pasted into the table URL: refused before anything reads it, and never printed.
    let out = Command::new(voxlake_testkit::voxlake_bin())
        .args(["bench", "az://cubes/train?sv=2024-01-01&sig=SECRETSIG"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("query string") && stderr.contains("azure_storage_sas_key"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRETSIG"), "{stderr}");
    // Options from a file (secrets out of `ps`); a bad line is named.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("options");
    std::fs::write(&file, "# for the loader\nallow_http=true\nnot an option\n").unwrap();
    let out = Command::new(voxlake_testkit::voxlake_bin())
        .args(["bench", "/nonexistent/table", "--storage-option-file"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3: expected KEY=VALUE"), "{stderr}");
    // A secret on the command line is used, with a warning naming its key only.
    let out = Command::new(voxlake_testkit::voxlake_bin())
        .args([
            "bench",
            "/nonexistent/table",
            "--storage-option",
            "azure_storage_account_key=TOPSECRET",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("shows in process lists"), "{stderr}");
    assert!(!stderr.contains("TOPSECRET"), "{stderr}");
}

/// The report for a person: its three lines of figures, and, from a debug build (the demo's),
/// that its pace is not the release's; `--json` says the same in `optimized`; `--trace`
/// writes the trace of the first batches.
#[test]
fn the_bench_report_says_when_its_build_is_unoptimized() {
    let dir = tempfile::tempdir().unwrap();
    let demo = voxlake_testkit::compact_demo(&dir.path().join("demo"), 64);
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(voxlake_testkit::voxlake_bin())
            .arg("bench")
            .arg(demo.join("table"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[]);
    assert!(text.starts_with("64 samples in "), "{text}");
    assert!(
        text.contains("\nstages (summed over threads): fetch "),
        "{text}"
    );
    assert!(
        text.contains("\nthe loop's wait inside next(), a step: p50 "),
        "{text}"
    );
    // The test and the binary are built in one profile.
    let unoptimized = cfg!(debug_assertions);
    assert_eq!(
        text.contains("an unoptimized build (debug assertions on)"),
        unoptimized,
        "{text}"
    );
    let report: serde_json::Value = serde_json::from_str(run(&["--json".as_ref()]).trim()).unwrap();
    assert_eq!(report["optimized"], !unoptimized);
    assert_eq!(report["samples"], 64);
    // Every row checked at its copy, timed; the batches that waited, within the prefetch bound.
    assert!(report["check_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["check_s"].as_f64() < report["assemble_s"].as_f64());
    assert_eq!(report["device_copy_s"], 0.0, "no device");
    let peak = report["batches_ready_peak"].as_u64().unwrap();
    assert!((1..=2).contains(&peak), "prefetch 2: {report}");
    // `--trace`: the loader's trace of the first batches.
    let trace = dir.path().join("trace.json");
    run(&[
        "--trace".as_ref(),
        trace.as_os_str(),
        "--trace-batches".as_ref(),
        "1".as_ref(),
    ]);
    let events: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    // The bench polls `next()` (it watches for signals): a span per poll, all for batch 0.
    let next: std::collections::HashSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "B" && e["name"] == "next")
        .map(|e| e["args"]["batch"].as_str().unwrap())
        .collect();
    assert_eq!(next, std::collections::HashSet::from(["0"]));
}

/// A report page that cannot be written fails the run before its first batch, naming it.
#[test]
fn an_unwritable_report_fails_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let demo = voxlake_testkit::compact_demo(&dir.path().join("demo"), 16);
    let page = dir.path().join("no-such-folder").join("run.html");
    let out = Command::new(voxlake_testkit::voxlake_bin())
        .arg("bench")
        .arg(demo.join("table"))
        .arg("--json")
        .arg("--report")
        .arg(&page)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("the report {}", page.display())),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no run, no figures");
}

#[test]
fn a_stopped_bench_writes_its_state_and_ids() {
    let dir = tempfile::tempdir().unwrap();
    let demo = voxlake_testkit::compact_demo(&dir.path().join("demo"), 200);
    let (state, ids) = (dir.path().join("state.json"), dir.path().join("ids.txt"));
    let child = Command::new(voxlake_testkit::voxlake_bin())
        .arg("bench")
        .arg(demo.join("table"))
        .args(["--epochs", "100000", "--shuffle", "--json", "--state-out"])
        .arg(&state)
        .arg("--ids-out")
        .arg(&ids)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, _) = terminated_after(child, Duration::from_secs(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(report["stopped_by_signal"], 15);
    let written = std::fs::read_to_string(&ids).unwrap();
    assert_eq!(
        written.lines().count() as u64,
        report["samples"].as_u64().unwrap()
    );
    assert!(written.lines().count() > 0);
    let state = voxlake::LoaderState::from_json(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert!(state.epoch > 0 || state.batches > 0, "{state:?}");
}

/// A store that accepts connections and never answers: `voxlake bench` on a table there, sent
/// SIGTERM while the table opens, ends at once (it waited out the store's timeouts) with the
/// shell's 143 and a message saying where it stopped.
#[test]
fn a_bench_stopped_while_the_table_opens_ends_at_once() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accepts and holds every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming() {
            held.push(conn);
        }
    });
    let endpoint = format!("aws_endpoint=http://127.0.0.1:{port}");
    let child = Command::new(voxlake_testkit::voxlake_bin())
        .args(["bench", "s3://silent/table", "--json"])
        .args(["--storage-option", &endpoint])
        .args(["--storage-option", "allow_http=true"])
        .args(["--storage-option", "aws_region=us-east-1"])
        .env("AWS_ACCESS_KEY_ID", "voxlake")
        .env("AWS_SECRET_ACCESS_KEY", "voxlake-secret")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, waited) = terminated_after(child, Duration::from_secs(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("while the table opened"), "{stderr}");
    // A guard, not a timing: without the fix the open waited for the store's timeouts (minutes).
    assert!(waited < Duration::from_secs(10), "{waited:?}: {stderr}");
}

/// `child` sent SIGTERM after `running`: its output, and how long it took to end after the
/// signal.
fn terminated_after(
    child: std::process::Child,
    running: Duration,
) -> (std::process::Output, Duration) {
    std::thread::sleep(running);
    let sent = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    (out, sent.elapsed())
}
