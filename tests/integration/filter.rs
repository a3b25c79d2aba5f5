//! Filters: files skipped by partition values and Delta statistics, row groups by footer
//! statistics, rows decided one by one; the kept rows exactly those numpy's copy says, value for
//! value, over ranks in equal batch counts, resumable only under the same filter, lineage naming
//! the rows in the files.

use std::collections::{BTreeSet, HashMap};

use voxlake::LoaderBuilder;
use voxlake::format::DType;
use voxlake::loader::{Batch, Loader};

use crate::foreign::{check_cubes, expected, fixture};
use crate::loader::first_error;

const SHAPE: [usize; 4] = [3, 4, 2, 2];

/// The fixtures' columns, as make_pyarrow.py and make_spark.py write them.
fn region(n: usize) -> &'static str {
    ["a", "b", "c"][n % 3]
}
fn depth(n: usize) -> i64 {
    100 + 10 * n as i64
}

fn batches(builder: LoaderBuilder) -> (Vec<Batch>, voxlake::table::FilterStats) {
    std::thread::spawn(move || {
        let loader = builder.build().unwrap();
        let stats = loader.filter_stats().unwrap();
        (loader.map(Result::unwrap).collect(), stats)
    })
    .join()
    .unwrap()
}

/// The cube numbers delivered, each checked value for value against numpy's copy.
fn cubes(batches: &[Batch]) -> Vec<usize> {
    check_cubes("filtered", batches, &expected(DType::F32))
}

fn base(table: &str) -> LoaderBuilder {
    let b = Loader::builder(fixture(table))
        .with_id_column("sample")
        .with_label_column("target")
        .with_batch_size(3);
    if table == "pyarrow_tensor" {
        b
    } else {
        b.with_tensor_shape(SHAPE.to_vec(), DType::F32)
    }
}

#[test]
fn filters_keep_exactly_the_matching_rows_and_skip_what_they_can() {
    let filter = "region IN ('a', 'b') AND depth >= 150 AND target = 1";
    let want: BTreeSet<usize> = (0..24)
        .filter(|&n| region(n) != "c" && depth(n) >= 150 && n % 2 == 1)
        .collect();
    for (table, files_skipped) in [
        ("pyarrow_raw_hive", 1),
        ("spark_delta", 0),
        ("deltalake_list", 0),
    ] {
        let (got, stats) = batches(base(table).with_filter(filter));
        let got = cubes(&got);
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<_>>(),
            want,
            "{table}"
        );
        assert_eq!(got.len(), want.len(), "{table}: a row twice");
        assert_eq!(stats.rows_selected, want.len() as u64, "{table}");
        assert_eq!(stats.files_skipped, files_skipped, "{table}: {stats:?}");
        assert_eq!(stats.rows_before, 24, "{table}");
    }
    // Delta statistics skip a Spark file; footers skip row groups of plain Parquet.
    let (got, stats) = batches(base("spark_delta").with_filter("depth > 300"));
    assert_eq!(
        cubes(&got).into_iter().collect::<BTreeSet<_>>(),
        (21..24).collect()
    );
    assert_eq!(stats.files_skipped, 1, "{stats:?}");
    let (got, stats) = batches(base("pyarrow_tensor").with_filter("depth >= 300"));
    assert_eq!(
        cubes(&got).into_iter().collect::<BTreeSet<_>>(),
        (20..24).collect()
    );
    assert_eq!(
        (
            stats.files_skipped,
            stats.row_groups_skipped,
            stats.rows_decided
        ),
        (0, 4, 7),
        "{stats:?}"
    );
    // Lineage names the rows in the files, not in the filtered row groups.
    for b in &got {
        for origin in b.lineage() {
            let n: usize = origin.id.strip_prefix("cube-").unwrap().parse().unwrap();
            assert_eq!(origin.file.as_ref(), "part-00001.parquet");
            assert_eq!(origin.row, n as u64 - 12, "{origin:?}");
            assert_eq!(origin.row_group, (n - 12) / 5, "{origin:?}");
        }
    }
    // Nothing matches: an empty epoch, not an error.
    let (got, stats) = batches(base("pyarrow_fsl").with_filter("depth < 0 OR sample IS NULL"));
    assert!(got.is_empty());
    assert_eq!(stats.rows_selected, 0);
}

#[test]
fn filtered_epochs_are_dealt_evenly_and_resume_only_under_their_filter() {
    let filter = "NOT region = 'c'";
    let want: BTreeSet<usize> = (0..24).filter(|&n| region(n) != "c").collect();
    let world = 3;
    let mut seen = HashMap::new();
    let mut counts = Vec::new();
    for rank in 0..world {
        let b = base("pyarrow_tensor")
            .with_filter(filter)
            .with_shuffle(4, 6)
            .with_rank(rank, world)
            .with_epochs(2);
        let (got, _) = batches(b);
        counts.push(got.len());
        let numbers = cubes(&got);
        let pads = got.iter().flat_map(|b| b.lineage().iter().map(|o| o.pad));
        for (n, pad) in numbers.into_iter().zip(pads) {
            if !pad {
                *seen.entry(n).or_insert(0) += 1;
            }
        }
    }
    assert!(
        counts.iter().all(|&c| c == counts[0]),
        "equal batch counts: {counts:?}"
    );
    assert_eq!(seen.keys().copied().collect::<BTreeSet<_>>(), want);
    assert!(
        seen.values().all(|&c| c == 2),
        "every kept row once per epoch: {seen:?}"
    );
    // A state resumes under its filter: the rest of the uninterrupted run.
    let b = || {
        base("pyarrow_tensor")
            .with_filter(filter)
            .with_shuffle(4, 6)
            .with_epochs(2)
    };
    let (all, _) = batches(b());
    let (head, state) = std::thread::spawn({
        let b = b();
        move || {
            let mut loader = b.build().unwrap();
            let head: Vec<Batch> = (0..4).map(|_| loader.next().unwrap().unwrap()).collect();
            (head, loader.state())
        }
    })
    .join()
    .unwrap();
    let (rest, _) = batches(b().with_state(state.clone()));
    let ids = |bs: &[Batch]| bs.iter().flat_map(|b| b.ids.clone()).collect::<Vec<_>>();
    assert_eq!([ids(&head), ids(&rest)].concat(), ids(&all));
    // … and is refused under another.
    let e = first_error(
        base("pyarrow_tensor")
            .with_filter("region = 'a'")
            .with_shuffle(4, 6)
            .with_epochs(2)
            .with_state(state),
        "a state under another filter",
    );
    assert!(e.contains("file set"), "{e}");
}

#[test]
fn bad_filters_are_named() {
    for (filter, says) in [
        ("nope = 1", "no column 'nope'"),
        (
            "region = 1",
            "column 'region' holds strings, the filter compares it with a number",
        ),
        ("depth >= 'deep'", "column 'depth' holds numbers"),
        ("depth >=", "does not parse"),
        (
            "volume IS NULL",
            "filters compare numbers, strings and bools",
        ),
    ] {
        let e = first_error(base("spark_delta").with_filter(filter), filter);
        assert!(e.contains(says) && e.contains(filter), "{filter}: {e}");
    }
}

/// The cube numbers of `depths` (any integer column).
fn cubes_of(depths: &arrow::array::ArrayRef) -> Vec<usize> {
    let depths = arrow::compute::cast(depths, &arrow::datatypes::DataType::Int64).unwrap();
    let depths = depths.as_any().downcast_ref::<arrow::array::Int64Array>();
    let depths = depths.unwrap().values().iter();
    depths.map(|d| ((d - 100) / 10) as usize).collect()
}

/// The cube numbers of every row a scan's whole-file reads deliver.
async fn cubes_read(scan: &voxlake::table::Scan) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..scan.files().len() {
        for batch in scan.read_file(i, Some(&["depth"]), 5).await.unwrap() {
            out.extend(cubes_of(batch.column(0)));
        }
    }
    out
}

/// One snapshot, two scans: each reads its own rows under its own file numbers (a filter's
/// scan numbers only the files it reads), whether the filter skips files by the log's
/// statistics or, where the snapshot keeps none, by the footers.
#[tokio::test]
async fn scans_of_one_snapshot_read_their_own_rows() {
    // The second file's depths end at 290: the log's statistics (or its footer) skip it.
    let filter = "region IN ('a', 'c') AND depth > 290 AND target = 1";
    let want: BTreeSet<usize> = (0..24)
        .filter(|&n| region(n) != "b" && depth(n) > 290 && n % 2 == 1)
        .collect();
    for statistics in [true, false] {
        let snapshot = voxlake::table::Snapshot::builder(fixture("spark_delta"))
            .with_id_column("sample")
            .with_label_column("target")
            .with_tensor_shape(SHAPE.to_vec(), DType::F32)
            .with_statistics(statistics)
            .build()
            .await
            .unwrap();
        let snapshot = std::sync::Arc::new(snapshot);
        let all = snapshot.scan_builder().build().await.unwrap();
        let some = snapshot
            .scan_builder()
            .with_filter(filter)
            .build()
            .await
            .unwrap();
        assert_eq!((snapshot.num_rows(), all.num_rows()), (24, 24));
        assert_eq!(some.num_rows(), want.len() as u64, "{statistics}");
        assert_eq!(some.filter(), Some(filter));
        assert!(all.filter().is_none() && all.filter_stats().is_none());
        assert!(
            some.files().len() < snapshot.files().len(),
            "a file without a match leaves"
        );
        assert_ne!(all.file_set_hash(), some.file_set_hash());
        let mut read = cubes_read(&all).await;
        read.sort_unstable();
        assert_eq!(read, (0..24).collect::<Vec<_>>());
        let read = cubes_read(&some).await;
        assert_eq!(read.len(), want.len(), "a row twice");
        assert_eq!(read.into_iter().collect::<BTreeSet<_>>(), want);
        // The sampler's column reads deliver the same rows.
        let values = some.column_values(&["depth"]).await.unwrap();
        let depths: BTreeSet<usize> = values[0].iter().flat_map(cubes_of).collect();
        assert_eq!(depths, want);
        let past = some.files().len();
        let e = some.footer(past).await.unwrap_err().to_string();
        assert!(e.contains(&format!("no file {past}")), "{e}");
    }
}

/// Converts `data`'s cubes of shard `shard` (`(i, n)`) into `table` in row groups of 4.
async fn in_groups_of_4(
    table: &str,
    data: &voxlake::compact::synth::SynthDataset,
    shard: (u32, u32),
) {
    voxlake::compact::Compactor::new(table)
        .with_labels(data.labels.to_string_lossy())
        .with_shard(shard.0, shard.1)
        .with_layout(voxlake::format::Layout {
            row_group_rows: 4,
            ..Default::default()
        })
        .convert(&data.cubes.to_string_lossy())
        .await
        .unwrap();
}

/// Rows by their positions and by their ids: in the order asked (repeats too), the positions
/// numbered over the scan's own rows (a filter's only those it selects) across files and row
/// groups, each row whole (its tensor the cube's); a position past the rows or an id the scan
/// does not read is an error naming it, and no positions read nothing.
#[tokio::test]
async fn a_scan_takes_rows_by_their_positions_and_ids() {
    use arrow::array::{Array, AsArray};
    let dir = tempfile::tempdir().unwrap();
    let data = voxlake::compact::synth::generate(dir.path(), 30, 5).unwrap();
    let table = dir.path().join("table").to_string_lossy().into_owned();
    // Two files (a shard each) of row groups of 4.
    for shard in 0..2 {
        in_groups_of_4(&table, &data, (shard, 2)).await;
    }
    let snapshot = voxlake::table::Snapshot::builder(&table)
        .build()
        .await
        .unwrap();
    let snapshot = std::sync::Arc::new(snapshot);
    assert_eq!(snapshot.files().len(), 2);
    let ids = |column: &arrow::array::ArrayRef| -> Vec<String> {
        let column = arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8).unwrap();
        column
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap().to_string())
            .collect()
    };
    let mut order_all: Vec<String> = Vec::new();
    for filter in [None, Some("label = 1")] {
        let mut scan = snapshot.scan_builder();
        if let Some(filter) = filter {
            scan = scan.with_filter(filter);
        }
        let scan = scan.build().await.unwrap();
        // The positions' order: the whole-file reads', file after file.
        let mut order = Vec::new();
        for i in 0..scan.files().len() {
            for batch in scan.read_file(i, Some(&["id"]), 3).await.unwrap() {
                order.extend(ids(batch.column(0)));
            }
        }
        if filter.is_none() {
            order_all = order.clone();
        }
        let n = order.len() as u64;
        assert_eq!(n, scan.num_rows());
        let asked: Vec<u64> = (0..n).rev().chain([0, n - 1, 0]).collect();
        let rows = scan.take(&asked).await.unwrap();
        assert_eq!(
            rows.num_columns(),
            scan.columns().len(),
            "the scan's columns"
        );
        let got = ids(rows.column_by_name("id").unwrap());
        let want: Vec<String> = asked.iter().map(|&p| order[p as usize].clone()).collect();
        assert_eq!(got, want, "{filter:?}");
        let labels = rows.column_by_name("label").unwrap();
        if filter.is_some() {
            assert_eq!(labels.null_count(), 0);
            let labels = arrow::compute::cast(labels, &arrow::datatypes::DataType::Int64).unwrap();
            assert!(
                labels
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .iter()
                    .all(|&l| l == 1)
            );
        }
        let tensors = arrow::compute::cast(
            rows.column_by_name("tensor").unwrap(),
            &arrow::datatypes::DataType::Binary,
        )
        .unwrap();
        for (id, bytes) in got.iter().zip(tensors.as_binary::<i32>().iter()) {
            let cube = std::fs::read(data.cubes.join(id)).unwrap();
            let npy = voxlake::format::npy::NpyArray::parse(&cube).unwrap();
            assert!(npy.data() == bytes.unwrap(), "{id}");
        }
        let e = scan.take(&[1, n]).await.unwrap_err();
        let past = matches!(e, voxlake::table::TableError::NoRow { position, rows, .. } if position == n && rows == n);
        assert!(past, "{e}");
        assert!(e.to_string().contains(&format!("position {n}")), "{e}");
        assert_eq!(scan.take(&[]).await.unwrap().num_rows(), 0);
        // By id: the index lists the scan's ids in position order, and rows asked by id are
        // those at their positions; an id the scan does not read is an error naming it.
        let index = scan.row_index().await.unwrap();
        assert_eq!(index.ids().collect::<Vec<_>>(), order);
        let by_id: Vec<&str> = asked.iter().map(|&p| order[p as usize].as_str()).collect();
        let again = scan.take_ids(&index, &by_id).await.unwrap();
        assert_eq!(ids(again.column_by_name("id").unwrap()), want);
        let absent = if filter.is_some() {
            "no-such-cube"
        } else {
            "no-such-cube-either"
        };
        let e = scan.take_ids(&index, &[absent]).await.unwrap_err();
        assert!(
            matches!(&e, voxlake::table::TableError::NoId { id, .. } if id == absent),
            "{e}"
        );
        if filter.is_some() {
            // A row the filter leaves out is not the scan's to give by id.
            let left = order_all.iter().find(|id| !order.contains(id)).unwrap();
            let e = scan.take_ids(&index, &[left]).await.unwrap_err();
            assert!(e.to_string().contains(left.as_str()), "{e}");
        }
    }
}

#[tokio::test]
async fn voxlake_tables_filter_on_their_labels() {
    let dir = tempfile::tempdir().unwrap();
    let data = voxlake::compact::synth::generate(dir.path(), 30, 5).unwrap();
    let table = dir.path().join("table").to_string_lossy().into_owned();
    in_groups_of_4(&table, &data, (0, 1)).await;
    let (got, stats) = batches(
        Loader::builder(table)
            .with_batch_size(4)
            .with_filter("label = 1")
            .with_shuffle(1, 8),
    );
    let labels: Vec<Option<i64>> = got.iter().flat_map(|b| b.labels.clone()).collect();
    assert_eq!(labels.len() as u64, data.positives as u64);
    assert!(labels.iter().all(|&l| l == Some(1)));
    assert_eq!(stats.rows_selected, data.positives as u64);
    // Every tensor still matches its row's checksum and the cube it came from.
    for b in &got {
        let bytes = b.tensors.as_bytes().unwrap();
        let per = bytes.len() / b.len();
        for (i, id) in b.ids.iter().enumerate() {
            let cube = std::fs::read(data.cubes.join(id)).unwrap();
            let npy = voxlake::format::npy::NpyArray::parse(&cube).unwrap();
            assert!(npy.data() == &bytes[i * per..(i + 1) * per], "{id}");
        }
    }
}

#[test]
fn voxlake_bench_filters_and_reports_what_it_skipped() {
    let report = voxlake_testkit::json_output(
        std::process::Command::new(voxlake_testkit::voxlake_bin())
            .args([
                "bench",
                &fixture("spark_delta"),
                "--json",
                "--batch-size",
                "2",
            ])
            .args([
                "--shape",
                "3,4,2,2",
                "--dtype",
                "f32",
                "--filter",
                "depth > 300",
            ]),
    );
    assert_eq!(report["samples"], 3);
    assert_eq!(report["filter_rows_selected"], 3);
    assert_eq!(report["filter_files_skipped"], 1);
    assert_eq!(report["filter"], "depth > 300");
}

#[test]
fn dates_and_timestamps_filter_by_their_time() {
    use arrow::array::{BinaryArray, Date32Array, StringArray, TimestampMillisecondArray};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    // 20 rows: day 2024-01-01 + i, at 2024-01-01T00:00:00 + i s, in row groups of 5.
    let jan1 = 19_723; // days from 1970-01-01 to 2024-01-01
    let batch = RecordBatch::try_from_iter([
        (
            "x",
            Arc::new(BinaryArray::from_iter_values(
                (0..20).map(|i| [i as f32, -(i as f32)].map(f32::to_le_bytes).concat()),
            )) as arrow::array::ArrayRef,
        ),
        (
            "sample",
            Arc::new(StringArray::from_iter_values(
                (0..20).map(|i| format!("s{i:02}")),
            )),
        ),
        (
            "day",
            Arc::new(Date32Array::from_iter_values((0..20).map(|i| jan1 + i))),
        ),
        (
            "at",
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..20).map(|i| (jan1 as i64 * 86_400 + i) * 1000),
            )),
        ),
    ])
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let table = crate::foreign::one_file_table(dir.path(), &batch);
    let run = |filter: &str| {
        let (got, stats) = batches(
            Loader::builder(table.clone())
                .with_tensor_shape(vec![2], DType::F32)
                .with_id_column("sample")
                .with_batch_size(4)
                .with_filter(filter),
        );
        let ids: Vec<String> = got.iter().flat_map(|b| b.ids.clone()).collect();
        (ids, stats)
    };
    let (ids, stats) = run("day >= DATE '2024-01-08' AND day < '2024-01-15'");
    assert_eq!(ids, (7..14).map(|i| format!("s{i:02}")).collect::<Vec<_>>());
    assert_eq!(
        stats.row_groups_skipped, 2,
        "date statistics skip: {stats:?}"
    );
    let (ids, _) = run("at >= TIMESTAMP '2024-01-01T00:00:10' AND at <= '2024-01-01T00:00:12'");
    assert_eq!(ids, ["s10", "s11", "s12"]);
    // The same instants spelled with a zone (compared as time, not as text: '…10Z' sorts
    // after '…10' as text) and with a space.
    let (ids, _) = run("at >= '2024-01-01T00:00:10Z' AND at <= '2024-01-01 00:00:12'");
    assert_eq!(ids, ["s10", "s11", "s12"]);
    let (ids, _) = run("at IN ('2024-01-01T00:00:03Z', '2024-01-01T00:00:05.000Z')");
    assert_eq!(ids, ["s03", "s05"]);
    let e = first_error(
        Loader::builder(table.clone())
            .with_tensor_shape(vec![2], DType::F32)
            .with_filter("day = '2024-13-01'"),
        "a date that is none",
    );
    assert!(
        e.contains("column 'day': '2024-13-01' is not a date"),
        "{e}"
    );
    let e = first_error(
        Loader::builder(table.clone())
            .with_tensor_shape(vec![2], DType::F32)
            .with_filter("day > 5"),
        "a date compared with a number",
    );
    assert!(e.contains("column 'day' holds dates or timestamps"), "{e}");
}
