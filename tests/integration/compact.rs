//! Conversion, resume, shards, bad input, optimize and inspect through the library.

use std::path::Path;

use voxlake::compact::{CompactError, Compactor, OnError, synth};
use voxlake::format::npy::{EncodeOptions, encode};
use voxlake::format::{DType, Layout};

use voxlake_testkit::{assert_table_holds_cubes, commits, read_table};

/// Small row groups and files so a few dozen cubes make several of each.
fn small_layout() -> Layout {
    Layout {
        row_group_rows: 8,
        target_file_bytes: 4_000_000,
        ..Layout::default()
    }
}

fn compactor(table: &Path, labels: &Path) -> Compactor {
    Compactor::new(table.to_str().unwrap())
        .with_labels(labels.to_str().unwrap())
        .with_layout(small_layout())
}

#[tokio::test]
async fn converts_and_reads_back_value_for_value() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 40, 7).unwrap();
    let table = dir.path().join("table");
    let c = compactor(&table, &data.labels);
    let summary = c.convert(data.cubes.to_str().unwrap()).await.unwrap();
    assert_eq!((summary.files, summary.rows), (40, 40));
    assert_eq!(summary.bytes_read, 40 * (360_000 + 128));
    assert!(summary.parquet_files >= 3, "{summary:?}");
    assert!(summary.skipped.is_empty());
    assert_table_holds_cubes(&table, 7, 40).await;

    let info = c.inspect().await.unwrap();
    assert_eq!(info.rows, 40);
    assert_eq!(info.shape, vec![30, 30, 10, 10]);
    assert_eq!(info.dtype, "f32");
    assert_eq!(info.files, summary.parquet_files);
    assert_eq!(info.bytes, summary.bytes_written);
    assert!(info.row_group_rows.1 <= 8 && info.row_group_rows.0 >= 1);
    assert_eq!(info.labels.values().sum::<u64>(), 40);
    assert_eq!(
        info.labels.get("1").copied().unwrap_or(0) as usize,
        data.positives
    );
}

#[tokio::test]
async fn rerun_converts_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 30, 3).unwrap();
    let table = dir.path().join("table");
    let c = compactor(&table, &data.labels);
    let src = data.cubes.to_str().unwrap();
    // Convert 20 of the 30 first: move 10 away.
    let parked = dir.path().join("parked");
    std::fs::create_dir(&parked).unwrap();
    for i in 20..30 {
        let name = synth::cube_name(i);
        std::fs::rename(data.cubes.join(&name), parked.join(&name)).unwrap();
    }
    assert_eq!(c.convert(src).await.unwrap().rows, 20);
    let version = commits(&table);

    let again = c.convert(src).await.unwrap();
    assert_eq!((again.rows, again.already_present), (0, 20));
    assert_eq!(commits(&table), version, "a no-op re-run must not commit");

    for i in 20..30 {
        let name = synth::cube_name(i);
        std::fs::rename(parked.join(&name), data.cubes.join(&name)).unwrap();
    }
    let grown = c.convert(src).await.unwrap();
    assert_eq!((grown.rows, grown.already_present), (10, 20));
    assert_table_holds_cubes(&table, 3, 30).await;
}

#[tokio::test]
async fn shards_fill_one_table_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 36, 11).unwrap();
    let table = dir.path().join("table");
    let src = data.cubes.to_str().unwrap();
    let runs = (0..3).map(|i| {
        let c = compactor(&table, &data.labels).with_shard(i, 3);
        async move { c.convert(src).await }
    });
    let results = futures::future::join_all(runs).await;
    let mut total = 0;
    for r in results {
        let s = r.unwrap();
        assert!(s.rows > 0, "every shard gets some keys: {s:?}");
        total += s.rows;
    }
    assert_eq!(total, 36);
    assert_table_holds_cubes(&table, 11, 36).await;
}

/// Writes `name` with the given dtype and options, values `0..n` (C order), reference-free.
pub(crate) fn write_npy(
    dir: &Path,
    name: &str,
    dtype: DType,
    shape: &[usize],
    opts: EncodeOptions,
) {
    let n: usize = shape.iter().product();
    let mut values = Vec::new();
    for i in 0..n {
        let v = i as f64 * 0.5;
        match dtype {
            DType::F64 => values.extend_from_slice(&v.to_le_bytes()),
            DType::F32 => values.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F16 => values.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
            DType::I16 => values.extend_from_slice(&(i as i16).to_le_bytes()),
            DType::U8 => values.push(i as u8),
            _ => unreachable!(),
        }
    }
    std::fs::write(dir.join(name), encode(dtype, shape, &values, opts)).unwrap();
}

#[tokio::test]
async fn converts_dtypes_byte_orders_and_fortran_order() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let shape = [3, 4, 2];
    let be_f = EncodeOptions {
        version: 2,
        big_endian: true,
        fortran_order: true,
    };
    write_npy(&src, "a.npy", DType::F32, &shape, EncodeOptions::default());
    write_npy(&src, "b.npy", DType::F64, &shape, be_f);
    write_npy(
        &src,
        "sub/c.npy",
        DType::F16,
        &shape,
        EncodeOptions {
            version: 3,
            ..Default::default()
        },
    );
    write_npy(&src, "d.npy", DType::I16, &shape, be_f);
    std::fs::write(src.join("notes.txt"), "not an array").unwrap();

    // Without --dtype the objects settle on f32 (f16 and i16 convert to it without loss) and
    // the lossy f64 file is named before anything is written.
    let table = dir.path().join("strict");
    let strict = Compactor::new(table.to_str().unwrap()).with_layout(small_layout());
    let e = strict.convert(src.to_str().unwrap()).await.unwrap_err();
    assert!(matches!(e, CompactError::Incompatible { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("3 hold [3, 4, 2] f32, the odd ones are b.npy ([3, 4, 2] f64)"),
        "{e}"
    );
    assert!(!table.join("_delta_log").exists());
    // With skip, the lossy file is skipped by name and the rest converts.
    let s = strict
        .clone()
        .with_on_error(OnError::Skip)
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped.len()), (3, 1));
    assert!(
        s.skipped[0]
            .reason
            .contains("f64 cannot be converted to the table's f32"),
        "{:?}",
        s.skipped
    );

    // With --dtype f32 every file converts, to C order and little-endian.
    let table = dir.path().join("table");
    let c = Compactor::new(table.to_str().unwrap())
        .with_layout(small_layout())
        .with_dtype(DType::F32);
    let s = c.convert(src.to_str().unwrap()).await.unwrap();
    assert_eq!(s.rows, 4);
    let rows = read_table(&table).await;
    let expected: Vec<u8> = (0..24)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    for key in ["a.npy", "b.npy", "sub/c.npy"] {
        assert!(rows[key].tensor == expected, "{key}");
        assert_eq!(rows[key].label, None);
    }
    let ints: Vec<u8> = (0..24).flat_map(|i| (i as f32).to_le_bytes()).collect();
    assert!(rows["d.npy"].tensor == ints);
}

#[tokio::test]
async fn bad_input_fails_cleanly_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 20, 5).unwrap();
    let table = dir.path().join("table");
    let src = data.cubes.to_str().unwrap();
    let c = compactor(&table, &data.labels);
    c.convert(src).await.unwrap();
    let version = commits(&table);

    // Add broken objects.
    let good = std::fs::read(data.cubes.join(synth::cube_name(0))).unwrap();
    std::fs::write(data.cubes.join("x_truncated.npy"), &good[..good.len() / 2]).unwrap();
    let mut magic = good.clone();
    magic[0] = b'P';
    std::fs::write(data.cubes.join("x_magic.npy"), magic).unwrap();
    write_npy(
        &data.cubes,
        "x_shape.npy",
        DType::F32,
        &[30, 30, 10, 9],
        EncodeOptions::default(),
    );
    write_npy(
        &data.cubes,
        "x_dtype.npy",
        DType::F64,
        &[30, 30, 10, 10],
        EncodeOptions::default(),
    );
    let mut lying = good.clone();
    lying[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    std::fs::write(data.cubes.join("x_header.npy"), lying).unwrap();

    let e = c.convert(src).await.unwrap_err().to_string();
    assert!(e.starts_with("x_dtype.npy: dtype f64"), "{e}");
    assert_eq!(commits(&table), version, "a failed run must not commit");

    let labels_missing = Compactor::new(table.to_str().unwrap())
        .with_labels(data.labels.to_str().unwrap())
        .with_on_error(OnError::Skip);
    // The broken files are also unlabelled: fix the labels so each fails for its own reason.
    let mut csv = std::fs::read_to_string(&data.labels).unwrap();
    for name in [
        "x_truncated.npy",
        "x_magic.npy",
        "x_shape.npy",
        "x_dtype.npy",
        "x_header.npy",
    ] {
        csv.push_str(&format!("{name},1\n"));
    }
    write_npy(
        &data.cubes,
        "y_unlabelled.npy",
        DType::F32,
        &[30, 30, 10, 10],
        EncodeOptions::default(),
    );
    std::fs::write(&data.labels, csv).unwrap();
    let s = labels_missing.convert(src).await.unwrap();
    assert_eq!(s.rows, 0);
    let reasons: std::collections::BTreeMap<_, _> = s
        .skipped
        .iter()
        .map(|s| (s.key.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    assert!(reasons["x_truncated.npy"].contains("data size mismatch"));
    assert!(reasons["x_magic.npy"].contains("wrong magic"));
    assert!(reasons["x_shape.npy"].contains("shape [30, 30, 10, 9] differs"));
    assert!(reasons["x_dtype.npy"].contains("cannot be converted"));
    assert!(
        reasons["x_header.npy"].contains("after the header dict"),
        "{reasons:?}"
    );
    assert!(reasons["y_unlabelled.npy"].contains("no label in"));
    assert_eq!(commits(&table), version);
    assert_table_holds_cubes(&table, 5, 20).await;
}

#[tokio::test]
async fn unusable_locations_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let table = dir.path().join("table");
    let c = Compactor::new(table.to_str().unwrap());
    let e = c
        .convert(missing.to_str().unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope") && e.contains("No such file"), "{e}");

    let e = Compactor::new("ftp://host/table")
        .convert(dir.path().to_str().unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unsupported scheme 'ftp'"), "{e}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = c
        .convert(empty.to_str().unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("no .npy objects under"), "{e}");

    let e = Compactor::new(table.to_str().unwrap())
        .with_labels(dir.path().join("labels.csv").to_str().unwrap())
        .convert(dir.path().to_str().unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("labels file") && e.contains("labels.csv"),
        "{e}"
    );

    let e = Compactor::new(missing.to_str().unwrap())
        .inspect()
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("nothing at this location: no Delta table"),
        "{e}"
    );
    assert!(!e.is_transient());
}

#[tokio::test]
async fn optimize_bin_packs_small_files_and_keeps_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 24, 9).unwrap();
    let table = dir.path().join("table");
    let src = data.cubes.to_str().unwrap();
    // Six shards, one commit each: six small files.
    for i in 0..6 {
        compactor(&table, &data.labels)
            .with_shard(i, 6)
            .convert(src)
            .await
            .unwrap();
    }
    let c = compactor(&table, &data.labels);
    let before = c.inspect().await.unwrap();
    assert!(before.files >= 6, "{}", before.files);
    let s = c.optimize().await.unwrap();
    assert!(
        s.files_removed >= 2 && s.files_added < s.files_removed,
        "{s:?}"
    );
    let after = c.inspect().await.unwrap();
    let kept: std::collections::HashSet<_> = after.file_list.iter().map(|f| &f.path).collect();
    let removed_rows: u64 = before
        .file_list
        .iter()
        .filter(|f| !kept.contains(&f.path))
        .map(|f| f.rows)
        .sum();
    assert_eq!(s.rows as u64, removed_rows);
    assert!(after.files < before.files);
    assert_eq!(after.rows, 24);
    assert!(after.row_group_rows.1 <= 8);
    assert_eq!(after.version, before.version + s.commits as u64);
    assert_table_holds_cubes(&table, 9, 24).await;
    // Nothing left to pack: a second run does nothing.
    let again = c.optimize().await.unwrap();
    assert_eq!((again.files_removed, again.commits), (0, 0));
    // The old version still reads as before (time travel).
    let mut old = deltalake::open_table(voxlake_testkit::url_of(&table))
        .await
        .unwrap();
    old.load_version(before.version).await.unwrap();
    assert_eq!(old.get_file_uris().unwrap().count(), before.files);
}

/// An odd object that sorts first does not become the table's shape: with `fail` the
/// disagreement is an error naming it and no table is made; with `skip` the table takes the
/// majority's spec and the odd object is skipped; `with_shape` and `with_dtype` decide alone.
#[tokio::test]
async fn an_odd_object_that_sorts_first_does_not_set_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 10, 6).unwrap();
    write_npy(
        &data.cubes,
        "a_odd.npy",
        DType::F32,
        &[2, 2],
        EncodeOptions::default(),
    );
    let src = data.cubes.to_str().unwrap();
    let table = dir.path().join("table");
    let e = Compactor::new(table.to_str().unwrap())
        .convert(src)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a_odd.npy ([2, 2] f32)") && e.contains("disagree"),
        "{e}"
    );
    assert!(!table.join("_delta_log").exists(), "nothing committed");
    let s = Compactor::new(table.to_str().unwrap())
        .with_on_error(OnError::Skip)
        .convert(src)
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped.len()), (10, 1));
    assert_eq!(s.skipped[0].key, "a_odd.npy");
    assert_eq!(s.tensor, "[30, 30, 10, 10] f32");
    assert_eq!(s.labels_unmatched, 0);
    // Shape and dtype given: the table takes them whatever the objects hold.
    let other = dir.path().join("other");
    let s = Compactor::new(other.to_str().unwrap())
        .with_shape(vec![2, 2])
        .with_dtype(DType::F32)
        .with_on_error(OnError::Skip)
        .convert(src)
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped.len()), (1, 10));
}

/// Labels for keys the source does not hold are counted, not silently ignored.
#[tokio::test]
async fn labels_for_missing_objects_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 6, 7).unwrap();
    let mut csv = std::fs::read_to_string(&data.labels).unwrap();
    csv.push_str("gone_1.npy,1\n\"gone, 2.npy\",0\n");
    std::fs::write(&data.labels, csv).unwrap();
    let table = dir.path().join("table");
    let s = compactor(&table, &data.labels)
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!((s.rows, s.labels_unmatched), (6, 2));
}

/// Appends go to the log without reloading the table (see compact's `commit.rs`): 4 shards
/// racing with one file a commit take versions from each other, a change of the table's
/// properties by another writer in the middle of them (`delta.checkpointInterval` set to 5 with
/// Python's deltalake) is seen by every shard, and each then writes the checkpoints the new
/// interval asks for. Every cube lands once, the log has no gap, and Python's deltalake reads
/// the table from its newest checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_appends_commit_one_by_one_and_follow_a_changed_table() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let count = 48;
    let data = synth::generate(dir.path(), count, 19).unwrap();
    let table = dir.path().join("table");
    let src = data.cubes.to_str().unwrap();
    let one_cube_files = Layout {
        row_group_rows: 1,
        target_file_bytes: 30_000,
        ..Layout::default()
    };
    // Shard 0 alone first: it creates the table.
    let first = compactor(&table, &data.labels)
        .with_layout(one_cube_files.clone())
        .with_files_per_commit(1)
        .with_shard(0, 4)
        .convert(src)
        .await
        .unwrap();
    assert_eq!(first.commits, first.rows, "one cube a commit: {first:?}");
    // The others race; once one of them has committed twice, another writer changes the
    // table's properties (a metaData commit between their appends).
    let altered = std::sync::Arc::new(AtomicBool::new(false));
    let runs = (1..4).map(|i| {
        let altered = altered.clone();
        let table_path = table.clone();
        let c = compactor(&table, &data.labels)
            .with_layout(one_cube_files.clone())
            .with_files_per_commit(1)
            .with_shard(i, 4)
            .with_progress(std::sync::Arc::new(
                move |p: &voxlake::compact::Progress| {
                    if p.version >= first.version + 2 && !altered.swap(true, Ordering::SeqCst) {
                        voxlake_testkit::succeeded(
                            std::process::Command::new(voxlake_testkit::python())
                                .arg("-c")
                                .arg(
                                    "import sys, deltalake; deltalake.DeltaTable(sys.argv[1]).alter\
                                 .set_table_properties({'delta.checkpointInterval': '5'})",
                                )
                                .arg(&table_path),
                        );
                    }
                },
            ));
        async move { c.convert(src).await }
    });
    let mut rows = first.rows;
    for summary in futures::future::join_all(runs).await {
        let summary = summary.unwrap();
        assert_eq!(summary.commits, summary.rows, "{summary:?}");
        rows += summary.rows;
    }
    assert!(
        altered.load(Ordering::SeqCst),
        "the table was changed mid-run"
    );
    assert_eq!(rows, count);
    assert_table_holds_cubes(&table, 19, count).await;

    // Versions 0..=latest, no gap: cubes, the creation and the property change.
    let latest = count + 1;
    assert_eq!(commits(&table), latest + 1);
    let log = table.join("_delta_log");
    let altered_at = (0..=latest)
        .find(|v| {
            std::fs::read_to_string(log.join(format!("{v:020}.json")))
                .unwrap()
                .contains("delta.checkpointInterval")
        })
        .expect("the property change is in the log");
    for v in altered_at + 1..=latest {
        let checkpoint = log.join(format!("{v:020}.checkpoint.parquet"));
        assert_eq!(
            checkpoint.exists(),
            (v + 1) % 5 == 0,
            "checkpoint of version {v} (interval 5 from version {altered_at})"
        );
    }
    let checked = voxlake_testkit::python_script(
        "check_table.py",
        &[
            table.as_os_str(),
            data.cubes.as_os_str(),
            data.labels.as_os_str(),
        ],
    );
    assert_eq!(checked, format!("ok {count}"));
}

/// `Compactor::writer`: rows pushed one at a time read back value for value (checksums
/// verified by the loader), ids already in the table skipped on a re-run, a field of the
/// wrong size or an id pushed twice refused naming the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_writer_writes_what_the_loader_reads_and_resumes_by_id() {
    use voxlake::format::{DType, FieldKind, SampleSpec, TensorSpec};
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let sample = SampleSpec::new(vec![
        (
            "volume".into(),
            FieldKind::Tensor(TensorSpec::new(vec![2, 3], DType::F32)),
        ),
        (
            "mask".into(),
            FieldKind::Tensor(TensorSpec::new(vec![2, 3], DType::U8)),
        ),
    ])
    .unwrap();
    let row = |i: u32| -> Vec<Vec<u8>> {
        let volume = (0..6).flat_map(|v| (i as f32 * 10.0 + v as f32).to_le_bytes());
        vec![volume.collect(), vec![i as u8; 6]]
    };
    let compactor = voxlake::compact::Compactor::new(&table);
    let mut writer = compactor.writer(sample.clone()).await.unwrap();
    for i in 0..30 {
        assert!(
            writer
                .push(&format!("r{i}"), Some(i64::from(i % 2)), row(i))
                .await
                .unwrap()
        );
    }
    assert_eq!(writer.finish().await.unwrap().rows, 30);
    let mut again = compactor.writer(sample.clone()).await.unwrap();
    let mut added = 0;
    for i in 20..40 {
        added += usize::from(again.push(&format!("r{i}"), None, row(i)).await.unwrap());
    }
    let summary = again.finish().await.unwrap();
    assert_eq!((added, summary.rows, summary.already_present), (10, 10, 10));
    let read = tokio::task::spawn_blocking(move || {
        let mut seen = std::collections::HashMap::new();
        for batch in voxlake::Loader::builder(table)
            .with_batch_size(7)
            .build()
            .unwrap()
        {
            let batch = batch.unwrap();
            let volume = batch.tensors.as_f32().unwrap().clone();
            for (n, id) in batch.ids.iter().enumerate() {
                seen.insert(
                    id.clone(),
                    volume
                        .index_axis(ndarray::Axis(0), n)
                        .iter()
                        .copied()
                        .collect::<Vec<f32>>(),
                );
            }
        }
        seen
    })
    .await
    .unwrap();
    assert_eq!(read.len(), 40);
    assert_eq!(
        read["r37"],
        (0..6).map(|v| 370.0 + v as f32).collect::<Vec<_>>()
    );
    let mut bad = compactor.writer(sample.clone()).await.unwrap();
    let e = bad
        .push("short", None, [vec![0u8; 4], vec![0u8; 6]])
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("row 'short': field 'volume' has 4 bytes"),
        "{e}"
    );
    bad.push("x1", None, row(1)).await.unwrap();
    let e = bad.push("x1", None, row(1)).await.unwrap_err();
    assert!(e.to_string().contains("id 'x1' pushed twice"), "{e}");
    // A labels file is convert's: refused, not ignored.
    let labelled = Compactor::new(dir.path().join("l").to_string_lossy()).with_labels("labels.csv");
    let e = labelled.writer(sample.clone()).await.unwrap_err();
    assert!(
        e.to_string().contains("a labels file is for convert"),
        "{e}"
    );
    // Two shards of one stream of rows write each row once between them.
    let sharded = dir.path().join("s").to_string_lossy().into_owned();
    let mut rows = 0;
    for index in 0..2 {
        let shard = Compactor::new(&sharded).with_shard(index, 2);
        let mut writer = shard.writer(sample.clone()).await.unwrap();
        let mut kept = 0;
        for i in 0..30 {
            kept += usize::from(writer.push(&format!("r{i}"), None, row(i)).await.unwrap());
        }
        let written = writer.finish().await.unwrap().rows;
        assert_eq!(written, kept);
        assert!(
            written > 5 && written < 25,
            "shard {index} wrote {written} of 30"
        );
        rows += written;
    }
    assert_eq!(rows, 30);
}
