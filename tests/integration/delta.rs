//! Delta tables as Databricks and Delta Spark write them (tests/fixtures/delta, real logs with a
//! tensor column added by make_delta.py): deletion vectors, column mapping in both modes,
//! checkpoints v1 and v2 with sidecars, time travel by version and by time, reader features
//! refused by name, and log errors named. Ground truth is deltalake-python's (expected.json,
//! tests/python/deleted_rows.py), never voxlake's own reader.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use voxlake::compact::Compactor;
use voxlake::format::npy::{EncodeOptions, encode};
use voxlake::format::{DType, Layout};
use voxlake::{Batch, Loader, LoaderBuilder, LoaderState};
use voxlake_testkit::delta::{
    DvStorage, at_ms, delete_rows, set_commit_times, set_in_commit_timestamps, write_commit,
};
use voxlake_testkit::{python_script, voxlake_bin};

use crate::distributed::take;
use crate::loader::{collect, first_error};

/// A fixture's path in this checkout.
pub fn fixture(name: &str) -> PathBuf {
    voxlake_testkit::checkout("tests/fixtures/delta").join(name)
}

/// A fixture copied into a fresh folder (to change its log or its files' times).
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join(name);
    copy_dir(&fixture(name), &table);
    (dir, table)
}

/// One fixture's ground truth from expected.json.
pub struct Expected {
    column: String,
    shape: Vec<usize>,
    list: bool,
    id: String,
    /// Per version, the live rows in table order: id (as the loader names it) and tensor.
    pub versions: BTreeMap<u64, Vec<(String, Vec<f32>)>>,
}

pub fn expected(name: &str) -> Expected {
    let text = std::fs::read_to_string(fixture("expected.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    let e = &all[name];
    let id_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    Expected {
        column: e["tensor"]["column"].as_str().unwrap().to_string(),
        shape: serde_json::from_value(e["tensor"]["shape"].clone()).unwrap(),
        list: e["tensor"]["encoding"] == "list",
        id: e["id"].as_str().unwrap().to_string(),
        versions: e["versions"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(v, rows)| {
                let rows = rows
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        let values = r[1]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_f64().unwrap() as f32)
                            .collect();
                        (id_text(&r[0]), values)
                    })
                    .collect();
                (v.parse().unwrap(), rows)
            })
            .collect(),
    }
}

impl Expected {
    /// A loader over `table` reading this fixture's columns. LIST columns get the shape only:
    /// the element type comes from the schema.
    pub fn builder(&self, table: impl AsRef<std::ffi::OsStr>) -> LoaderBuilder {
        let b = Loader::builder(table.as_ref().to_str().unwrap())
            .with_tensor_column(&self.column)
            .with_id_column(&self.id)
            .with_batch_size(3);
        if self.list {
            b.with_tensor_dims(self.shape.clone())
        } else {
            b.with_tensor_shape(self.shape.clone(), DType::F32)
        }
    }

    pub fn latest(&self) -> u64 {
        *self.versions.keys().max().unwrap()
    }

    pub fn ids(&self, version: u64) -> Vec<String> {
        self.versions[&version]
            .iter()
            .map(|r| r.0.clone())
            .collect()
    }
}

/// Every delivered row: id, tensor values, and whether it is a pad repeat.
pub fn rows(batches: &[Batch]) -> Vec<(String, Vec<f32>, bool)> {
    let mut out = Vec::new();
    for b in batches {
        let bytes = b.tensors.as_bytes().unwrap();
        let per = bytes.len() / b.len();
        for (i, origin) in b.lineage().iter().enumerate() {
            let values = bytes[i * per..(i + 1) * per]
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            out.push((b.ids[i].clone(), values, origin.pad));
        }
    }
    out
}

/// Every fixture: one for each reader feature read.
const FIXTURES: [&str; 8] = [
    "dv_small",
    "deletion_logs",
    "mapping_name",
    "mapping_id",
    "dv_mapping",
    "checkpoint_v2",
    "timestamp_ntz",
    "vacuum_check",
];

#[test]
fn databricks_tables_deliver_exactly_their_live_rows_in_table_order() {
    for name in FIXTURES {
        let e = expected(name);
        for (&version, want) in &e.versions {
            let mut b = e.builder(fixture(name)).with_version(version);
            if name == "mapping_name" && version >= 1 {
                // Renamed by the commit make_delta.py adds: the same physical column.
                b = b.with_id_column("Full Name");
            }
            let got = rows(&collect(b));
            let got: Vec<(String, Vec<f32>)> = got.into_iter().map(|(i, v, _)| (i, v)).collect();
            assert_eq!(&got, want, "{name} at version {version}");
        }
    }
    // Rows are named by their place in the file, deleted rows counted: dv_small's value is
    // its row.
    let e = expected("dv_small");
    let batches = collect(e.builder(fixture("dv_small")));
    for origin in batches.iter().flat_map(|b| b.lineage()) {
        assert_eq!(origin.row.to_string(), origin.id, "row in the file");
    }
}

#[test]
fn deleted_rows_stay_out_over_shuffled_ranks_resumes_and_filters() {
    let e = expected("deletion_logs");
    let table = fixture("deletion_logs");
    let live: HashSet<String> = e.ids(e.latest()).into_iter().collect();
    assert_eq!(live.len(), 98);
    assert!(!live.contains("12") && !live.contains("89"));
    // Three ranks, two epochs: every live row once an epoch, equal batch counts.
    let mut per_epoch: HashMap<u64, Vec<String>> = HashMap::new();
    let mut counts = Vec::new();
    for rank in 0..3 {
        let batches = collect(
            e.builder(&table)
                .with_shuffle(7, 16)
                .with_rank(rank, 3)
                .with_epochs(2),
        );
        counts.push(batches.len());
        for b in &batches {
            for origin in b.lineage().iter().filter(|o| !o.pad) {
                per_epoch
                    .entry(b.epoch)
                    .or_default()
                    .push(origin.id.clone());
            }
        }
        assert!(
            rows(&batches)
                .iter()
                .all(|(id, values, _)| values[0] as i64 == id.parse::<i64>().unwrap()),
            "tensors travel with their rows"
        );
    }
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
    for (epoch, ids) in per_epoch {
        assert_eq!(ids.len(), 98, "epoch {epoch}: each live row once");
        assert_eq!(
            ids.into_iter().collect::<HashSet<_>>(),
            live,
            "epoch {epoch}"
        );
    }
    // A resume from every third batch gives what the uninterrupted run gave.
    let base = || e.builder(&table).with_shuffle(3, 8).with_rank(1, 2);
    let whole = collect(base());
    for cut in (1..whole.len()).step_by(3) {
        let (first, state) = take(base(), cut);
        let rest = collect(base().with_state(LoaderState::from_json(&state.to_json()).unwrap()));
        let ids = |b: &[Batch]| b.iter().flat_map(|b| b.ids.clone()).collect::<Vec<_>>();
        let mut again = ids(&first);
        again.extend(ids(&rest));
        assert_eq!(again, ids(&whole), "resumed after {cut} batches");
    }
    // Three ranks stop after 4 batches; two ranks finish the epoch: each live row once.
    let base = || e.builder(&table).with_shuffle(9, 12);
    let first: Vec<(Vec<Batch>, LoaderState)> =
        (0..3).map(|r| take(base().with_rank(r, 3), 4)).collect();
    let state = first[0].1.clone();
    let rest: Vec<Vec<Batch>> = (0..2)
        .map(|r| collect(base().with_rank(r, 2).with_state(state.clone())))
        .collect();
    let real: Vec<String> = first
        .iter()
        .flat_map(|(b, _)| b)
        .chain(rest.iter().flatten())
        .flat_map(|b| b.lineage().iter().filter(|o| !o.pad).map(|o| o.id.clone()))
        .collect();
    assert_eq!(real.len(), 98, "elastic resume: each live row once");
    assert_eq!(real.into_iter().collect::<HashSet<_>>(), live);
    // Filters see live rows only, whatever the statistics (wide bounds) say.
    let ids = |filter: &str| -> Vec<String> {
        collect(e.builder(&table).with_filter(filter))
            .iter()
            .flat_map(|b| b.ids.clone())
            .collect()
    };
    assert_eq!(ids("id IN (12, 13, 89, 90)"), ["13", "90"]);
    let want: Vec<String> = e
        .ids(e.latest())
        .into_iter()
        .filter(|i| (50..95).contains(&i.parse::<i64>().unwrap()))
        .collect();
    assert_eq!(ids("id >= 50 AND id < 95"), want);
    // A partition filter on a table with deletion vectors and column mapping.
    let e = expected("dv_mapping");
    let got: Vec<String> = collect(e.builder(fixture("dv_mapping")).with_filter("part = 1"))
        .iter()
        .flat_map(|b| b.ids.clone())
        .collect();
    let want: Vec<String> = e
        .ids(e.latest())
        .into_iter()
        .filter(|i| i.parse::<i64>().unwrap() % 10 == 1)
        .collect();
    assert_eq!(got, want, "part is col1 mod 10 in this table");
}

#[tokio::test]
async fn compact_convert_copies_live_rows_only() {
    let e = expected("dv_mapping");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("table");
    let hints = voxlake::format::sample::ColumnHints::default()
        .with_tensor_column("cube")
        .with_shape(vec![2, 2])
        .with_id_column("col1");
    let summary = Compactor::new(out.to_str().unwrap())
        .with_sample_columns(hints)
        .convert(fixture("dv_mapping").to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(summary.rows, 35);
    let got: HashSet<String> = collect(Loader::builder(out.to_str().unwrap()))
        .iter()
        .flat_map(|b| b.ids.clone())
        .collect();
    assert_eq!(got, e.ids(e.latest()).into_iter().collect::<HashSet<_>>());
}

/// A voxlake table of `n` samples `s0000.npy`…, each `[i, i + 0.5, i + 1, i + 1.5]` (f32), in
/// row groups of 16 and files of a few row groups.
async fn small_table(dir: &Path, n: usize) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..n {
        let values: Vec<u8> = (0..4)
            .flat_map(|j| (i as f32 + 0.5 * j as f32).to_le_bytes())
            .collect();
        let opts = EncodeOptions {
            version: 1,
            big_endian: false,
            fortran_order: false,
        };
        std::fs::write(
            src.join(format!("s{i:04}.npy")),
            encode(DType::F32, &[4], &values, opts),
        )
        .unwrap();
    }
    let table = dir.join("table");
    Compactor::new(table.to_str().unwrap())
        .with_layout(Layout {
            row_group_rows: 16,
            target_file_bytes: 12_000,
            ..Layout::default()
        })
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    table
}

/// Sample number of an id `s0042.npy`.
fn sample(id: &str) -> usize {
    id.trim_start_matches('s')
        .trim_end_matches(".npy")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn large_deletion_vectors_spanning_row_groups_in_files_and_inline() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path(), 600).await;
    // Where each sample lives, before any delete.
    let before = collect(Loader::builder(table.to_str().unwrap()).with_batch_size(64));
    let mut place: HashMap<(String, u64), String> = HashMap::new();
    let mut rows_of: BTreeMap<String, u64> = BTreeMap::new();
    for o in before.iter().flat_map(|b| b.lineage()) {
        place.insert((o.file.to_string(), o.row), o.id.clone());
        *rows_of.entry(o.file.to_string()).or_default() += 1;
    }
    let files: Vec<String> = rows_of.keys().cloned().collect();
    assert!(files.len() >= 3, "{rows_of:?}");
    assert!(
        rows_of[&files[0]] > 64,
        "several row groups in a file: {rows_of:?}"
    );
    // File 0: a run over several row groups (two of them whole) and every 7th row after it;
    // file 1: most of it, in the same vector file (its vector at an offset past the first);
    // file 2: a vector inline in the log, in a second commit.
    let n0 = rows_of[&files[0]];
    let mut d0: Vec<u64> = (5..45).collect();
    d0.extend((45..n0).filter(|r| r % 7 == 0));
    let n1 = rows_of[&files[1]];
    let d1: Vec<u64> = (0..n1).filter(|r| r % 5 != 2).collect();
    let d2: Vec<u64> = vec![0, 1, 2, rows_of[&files[2]] - 1];
    // As a table created with deletion vectors on (deltalake commits to those; one upgraded
    // from a legacy protocol lists `invariants`, which it refuses to write).
    let files_at = [
        (files[0].as_str(), d0.clone()),
        (files[1].as_str(), d1.clone()),
    ];
    delete_rows(&table, &files_at, DvStorage::File, false).await;
    let version = delete_rows(&table, &[(&files[2], d2.clone())], DvStorage::Inline, false).await;
    // deltalake-python reads the same vectors.
    let python: BTreeMap<String, Vec<u64>> = serde_json::from_str(&python_script(
        "deleted_rows.py",
        &[table.to_str().unwrap()],
    ))
    .unwrap();
    let ours = BTreeMap::from([
        (files[0].clone(), d0.clone()),
        (files[1].clone(), d1.clone()),
        (files[2].clone(), d2.clone()),
    ]);
    assert_eq!(
        python, ours,
        "the kernel's writer and deltalake-python agree"
    );
    let deleted: HashSet<String> = ours
        .iter()
        .flat_map(|(f, rows)| rows.iter().map(|r| place[&(f.clone(), *r)].clone()))
        .collect();
    let live: HashSet<String> = place
        .values()
        .filter(|id| !deleted.contains(*id))
        .cloned()
        .collect();
    assert_eq!(live.len() + deleted.len(), 600);

    // In table order and shuffled over two ranks: each live sample once, values intact,
    // checksums verified.
    let check = |batches: &[Batch], what: &str| -> Vec<String> {
        let got = rows(batches);
        for (id, values, _) in &got {
            let i = sample(id) as f32;
            assert_eq!(values, &[i, i + 0.5, i + 1.0, i + 1.5], "{what}: {id}");
        }
        got.into_iter().filter(|r| !r.2).map(|r| r.0).collect()
    };
    let ordered = check(
        &collect(Loader::builder(table.to_str().unwrap())),
        "in order",
    );
    let set: HashSet<String> = ordered.iter().cloned().collect();
    assert_eq!((ordered.len(), &set), (live.len(), &live));
    let mut shuffled = Vec::new();
    for rank in 0..2 {
        let b = Loader::builder(table.to_str().unwrap())
            .with_shuffle(5, 40)
            .with_rank(rank, 2)
            .with_batch_size(7);
        shuffled.extend(check(&collect(b), "shuffled"));
    }
    shuffled.sort();
    let mut want: Vec<String> = live.iter().cloned().collect();
    want.sort();
    assert_eq!(shuffled, want, "every live sample once over the ranks");
    // The version before the deletes still has every row.
    let old = collect(Loader::builder(table.to_str().unwrap()).with_version(version - 2));
    assert_eq!(old.iter().map(Batch::len).sum::<usize>(), 600);

    // OPTIMIZE rewrites the files without their deleted rows; the removes name the vectors.
    let summary = Compactor::new(table.to_str().unwrap())
        .with_layout(Layout {
            row_group_rows: 16,
            target_file_bytes: 64_000_000,
            ..Layout::default()
        })
        .optimize()
        .await
        .unwrap();
    assert!(summary.files_removed >= 3, "{summary:?}");
    let after: HashSet<String> = collect(Loader::builder(table.to_str().unwrap()))
        .iter()
        .flat_map(|b| b.ids.clone())
        .collect();
    assert_eq!(after, live, "optimize keeps deleted rows deleted");
    let python = python_script("deleted_rows.py", &[table.to_str().unwrap()]);
    assert_eq!(python, "{}", "no vectors left on the rewritten files");
    let last = std::fs::read_to_string(
        table
            .join("_delta_log")
            .join(format!("{:020}.json", summary.version)),
    )
    .unwrap();
    let removes_with_vectors = last
        .lines()
        .filter(|l| l.contains("\"remove\"") && l.contains("deletionVector"))
        .count();
    assert_eq!(removes_with_vectors, 3, "{last}");
}

#[test]
fn column_mapping_reads_logical_names_in_both_modes() {
    let e = expected("mapping_name");
    let table = fixture("mapping_name");
    // After the rename the old name is gone, and the error names logical columns only.
    let err = first_error(e.builder(&table), "the old name after the rename");
    assert!(
        err.contains("no column 'Super Name'")
            && err.contains("Full Name")
            && !err.contains("col-"),
        "{err}"
    );
    // A filter on a mapped partition column with spaces in its name.
    let got: Vec<String> = collect(
        e.builder(&table)
            .with_id_column("Full Name")
            .with_filter("`Company Very Short` = 'BMS'"),
    )
    .iter()
    .flat_map(|b| b.ids.clone())
    .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        !got.contains(&"Timothy Lamb".to_string()),
        "his row is in BME"
    );
    // `id` mode: columns found by field id; a filter on a mapped column.
    let e = expected("mapping_id");
    let got: Vec<String> = collect(
        e.builder(fixture("mapping_id"))
            .with_filter("IntegerType >= 2"),
    )
    .iter()
    .flat_map(|b| b.ids.clone())
    .collect();
    assert_eq!(got, ["3", "2", "4"]);
    // timestampNtz, `id` mode: a timestamp column compared as its ISO text, a partition column
    // of timestamps (escaped folder names) with a null partition.
    let e = expected("timestamp_ntz");
    let ids = |filter: &str| -> Vec<String> {
        collect(e.builder(fixture("timestamp_ntz")).with_filter(filter))
            .iter()
            .flat_map(|b| b.ids.clone())
            .collect()
    };
    assert_eq!(ids("tsNtz >= '2020-01-01'"), ["3", "6", "0"]);
    assert_eq!(ids("tsNtzPartition IS NULL"), ["6", "7", "8"]);
    // Partition 2013-07-05 holds ids 3 (whose own tsNtz is 2021), 5 and 4.
    assert_eq!(ids("tsNtzPartition < '2020'"), ["3", "5", "4"]);
}

#[test]
fn time_travel_by_timestamp_follows_commit_times_or_in_commit_timestamps() {
    let e = expected("deletion_logs");
    let (_dir, table) = copy_of("deletion_logs");
    // Commit v at 2026-11-01T00:00:00Z plus v minutes.
    let base = 1_793_491_200_000i64;
    let times: Vec<SystemTime> = (0..=20).map(|v| at_ms(base + v * 60_000)).collect();
    set_commit_times(&table, &times);
    let version_at = |at: SystemTime| {
        let b = e.builder(&table).with_timestamp(at);
        std::thread::spawn(move || b.build().map(|l| l.version()).map_err(|e| e.to_string()))
            .join()
            .unwrap()
    };
    assert_eq!(version_at(times[3]), Ok(3), "at a commit: that commit");
    assert_eq!(
        version_at(times[3] + Duration::from_secs(30)),
        Ok(3),
        "between: the earlier"
    );
    assert_eq!(
        version_at(times[20] + Duration::from_secs(3600)),
        Ok(20),
        "after: the latest"
    );
    let err = version_at(times[0] - Duration::from_secs(1)).unwrap_err();
    assert!(
        err.contains("2026-10-31T23:59:59.000Z is before the table's earliest readable commit"),
        "{err}"
    );
    // The version a time names is the one read, with its deletions.
    let got: Vec<String> = collect(e.builder(&table).with_timestamp(times[3]))
        .iter()
        .flat_map(|b| b.ids.clone())
        .collect();
    assert_eq!(got, e.ids(3));

    // In-commit timestamps win over the files' times where the table has them.
    let e = expected("dv_small");
    let (_dir, table) = copy_of("dv_small");
    set_in_commit_timestamps(&table, &[base, base + 3_600_000]);
    set_commit_times(&table, &[at_ms(base + 7_200_000), at_ms(base + 7_200_000)]);
    let at = |ms: i64| {
        let b = e.builder(&table).with_timestamp(at_ms(ms));
        std::thread::spawn(move || b.build().map(|l| l.version()).map_err(|e| e.to_string()))
            .join()
            .unwrap()
    };
    assert_eq!(at(base + 60_000), Ok(0));
    assert_eq!(at(base + 3_600_000), Ok(1));
    assert!(
        at(base - 1)
            .unwrap_err()
            .contains("earliest readable commit")
    );
}

#[test]
fn unsupported_reader_features_are_refused_by_name() {
    let e = expected("dv_small");
    let (_dir, table) = copy_of("dv_small");
    // Commit `version`: a protocol that needs `feature` besides deletion vectors.
    let require = |version: u64, feature: &str| {
        let features = serde_json::json!(["deletionVectors", feature]);
        let protocol = serde_json::json!({"protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": features,
            "writerFeatures": features,
        }});
        write_commit(&table, version, &[protocol]);
    };
    require(2, "variantType");
    let err = first_error(e.builder(&table), "a table needing variantType");
    assert!(
        err.contains("variantType") && err.contains("reader feature"),
        "{err}"
    );
    // A feature no reader knows yet: the kernel refuses it at load, by name too.
    require(3, "featureOf2030");
    let err = first_error(e.builder(&table), "a table needing an unknown feature");
    assert!(err.contains("featureOf2030"), "{err}");
    // Version 1 did not need it.
    assert_eq!(
        collect(e.builder(&table).with_version(1))
            .iter()
            .map(Batch::len)
            .sum::<usize>(),
        8
    );
}

/// `voxlake bench TABLE ARGS…`, which must fail: its stderr, in one line.
fn bench_error(table: &Path, args: &[&str]) -> String {
    let out = Command::new(voxlake_bin())
        .args(["bench", table.to_str().unwrap()])
        .args(args)
        // Backtraces on, as in this sandbox and many CI set-ups: none may reach stderr.
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn log_errors_name_the_file_and_the_cause_in_one_line() {
    let (_dir, table) = copy_of("dv_small");
    let cube = [
        "--tensor-column",
        "cube",
        "--shape",
        "2,2,2",
        "--dtype",
        "f32",
    ];
    let bench = |table: &Path, extra: &[&str]| {
        let args: Vec<&str> = cube.iter().chain(extra).copied().collect();
        bench_error(table, &args)
    };
    let stderr = bench(&table, &["--version", "99"]);
    assert!(
        stderr.contains("version 99 does not exist: the latest is 1"),
        "{stderr}"
    );
    let log = table.join("_delta_log/00000000000000000001.json");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("{\"add\":{\"path\":\"x.parquet\",\"size\":\n");
    std::fs::write(&log, text).unwrap();
    let stderr = bench(&table, &[]);
    assert!(
        stderr.contains("commit 00000000000000000001.json, line 4: EOF while parsing"),
        "{stderr}"
    );
    // A checkpoint cut short (a partial upload) is named too.
    let (_dir, table) = copy_of("deletion_logs");
    let checkpoint = table.join("_delta_log/00000000000000000020.checkpoint.parquet");
    let bytes = std::fs::read(&checkpoint).unwrap();
    std::fs::write(&checkpoint, &bytes[..bytes.len() / 2]).unwrap();
    let stderr = bench_error(&table, &["--tensor-column", "volume", "--shape", "2,3"]);
    assert!(
        stderr.contains("checkpoint 00000000000000000020.checkpoint.parquet: Parquet error"),
        "{stderr}"
    );
}

#[test]
fn the_cli_reads_list_shapes_alone_and_inspect_shows_the_protocol() {
    let table = fixture("deletion_logs");
    let bench = |extra: &[&str]| {
        Command::new(voxlake_bin())
            .args([
                "bench",
                table.to_str().unwrap(),
                "--tensor-column",
                "volume",
            ])
            .args(["--id-column", "id", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&["--shape", "2,3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["samples"], 98);
    assert_eq!(report["version"], 20);
    let out = bench(&["--shape", "2,3", "--dtype", "f64"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("elements of type f32"),
        "{stderr}"
    );
    let out = bench(&["--shape", "2,3", "--timestamp", "yesterday"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("RFC 3339"),
        "{stderr}"
    );

    let info = voxlake_testkit::json_output(
        Command::new(voxlake_testkit::compact_bin())
            .args(["inspect", fixture("dv_mapping").to_str().unwrap()])
            .args(["--tensor-column", "cube", "--shape", "2,2", "--json"]),
    );
    assert_eq!(info["rows"], 35);
    assert_eq!(info["rows_deleted"], 2);
    assert_eq!(info["deletion_vectors"], 2);
    assert_eq!(info["column_mapping"], "name");
    assert_eq!(
        info["protocol"]["readerFeatures"],
        serde_json::json!(["deletionVectors", "columnMapping"])
    );
    let info = voxlake_testkit::json_output(
        Command::new(voxlake_testkit::compact_bin())
            .args(["inspect", fixture("deletion_logs").to_str().unwrap()])
            .args([
                "--tensor-column",
                "volume",
                "--shape",
                "2,3",
                "--version",
                "3",
                "--json",
            ]),
    );
    assert_eq!(
        (info["version"].clone(), info["rows"].clone()),
        (3.into(), 99.into())
    );
}

/// Rewrites the deletion vector of the add action in commit `version` of `table`.
fn craft_vector(table: &Path, version: u64, edit: impl Fn(&mut Value)) {
    let path = table.join("_delta_log").join(format!("{version:020}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut action: Value = serde_json::from_str(line).unwrap();
            if let Some(dv) = action
                .get_mut("add")
                .and_then(|a| a.get_mut("deletionVector"))
            {
                edit(dv);
            }
            action.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

#[tokio::test]
async fn crafted_deletion_vectors_are_refused_before_they_are_expanded() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path(), 40).await;
    let first = collect(Loader::builder(table.to_str().unwrap()));
    let file = first[0].lineage()[0].file.to_string();
    let rows = first
        .iter()
        .flat_map(|b| b.lineage())
        .filter(|o| *o.file == *file)
        .count() as u64;
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: [(&str, Edit, &str); 4] = [
        // More deleted rows than the file has: refused from the log alone.
        (
            "a cardinality past the file's rows",
            Box::new(|dv| dv["cardinality"] = serde_json::json!(1u64 << 40)),
            "deleting 1099511627776 rows, for a file of",
        ),
        (
            "a size no vector of the file's rows takes",
            Box::new(|dv| dv["sizeInBytes"] = serde_json::json!(1u64 << 30)),
            "a vector of 1073741824 bytes",
        ),
        // The vector's own rows disagree with its descriptor.
        (
            "a cardinality the bitmap does not hold",
            Box::new(|dv| dv["cardinality"] = serde_json::json!(1)),
            "its descriptor says 1",
        ),
        // An empty inline vector: the kernel would panic on it; refused by name first.
        (
            "an empty inline vector",
            Box::new(|dv| {
                dv["pathOrInlineDv"] = serde_json::json!("");
                dv["sizeInBytes"] = serde_json::json!(0);
                dv["cardinality"] = serde_json::json!(0);
            }),
            "an inline vector of 0 characters holds no bitmap",
        ),
    ];
    for (what, edit, says) in cases {
        let copy = tempfile::tempdir().unwrap();
        let t = copy.path().join("t");
        copy_dir(&table, &t);
        let version =
            delete_rows(&t, &[(file.as_str(), vec![0, 1])], DvStorage::Inline, false).await;
        craft_vector(&t, version, edit);
        let e = first_error(Loader::builder(t.to_str().unwrap()), what);
        assert!(e.contains(says) && e.contains(&file), "{what}: {e}");
        assert!(!e.contains("panicked"), "{what}: {e}");
    }
    // A vector deleting a row past the file's end.
    let copy = tempfile::tempdir().unwrap();
    let t = copy.path().join("t");
    copy_dir(&table, &t);
    delete_rows(
        &t,
        &[(file.as_str(), vec![0, rows + 100])],
        DvStorage::Inline,
        false,
    )
    .await;
    let e = first_error(Loader::builder(t.to_str().unwrap()), "a row past the end");
    assert!(
        e.contains(&format!(
            "deletes row {}, the file has {rows} rows",
            rows + 100
        )),
        "{e}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A snapshot of 10⁵ files holds ~80 bytes a file (issue 30: a struct of strings per file took
/// ~450, and every footer read stayed): its file list and footers, as `Snapshot::memory_size`
/// counts them, stay far under the 40 MB.
#[tokio::test]
async fn a_snapshot_of_a_hundred_thousand_files_holds_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let table = small_table(dir.path(), 16).await;
    let log = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".json")
        })
        .count() as u64;
    // 10⁵ more files in one commit, written after the table's own (read only if planned).
    let n = 100_000;
    let adds: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({"add": {
                "path": format!("added/part-{i:07}.parquet"),
                "partitionValues": {},
                "size": 4_000,
                "modificationTime": 4_000_000_000_000i64 + i,
                "dataChange": true,
                "stats": format!("{{\"numRecords\":1,\"minValues\":{{\"id\":\"s{i:07}\"}},\"maxValues\":{{\"id\":\"s{i:07}\"}},\"nullCount\":{{\"id\":0}}}}"),
            }})
        })
        .collect();
    write_commit(&table, log, &adds);
    // As the loader opens it: no filter, so the files' statistics are not kept.
    let snapshot = voxlake::table::Snapshot::builder(table.to_str().unwrap())
        .with_statistics(false)
        .build()
        .await
        .unwrap();
    assert_eq!(snapshot.files().len(), n as usize + 1);
    assert_eq!(snapshot.num_rows(), 16 + n as u64);
    let bytes = snapshot.memory_size();
    let per_file = bytes / snapshot.files().len();
    eprintln!(
        "a snapshot of {} files: {bytes} bytes",
        snapshot.files().len()
    );
    assert!(
        bytes < 40_000_000 && per_file <= 100,
        "{bytes} bytes, {per_file} a file"
    );
}
