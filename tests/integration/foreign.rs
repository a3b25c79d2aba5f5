//! Tables other tools wrote (tests/fixtures/foreign, made by the real pyarrow, deltalake,
//! Spark and Petastorm with the scripts beside them): every row read back value for value
//! against numpy's copy, in order and shuffled over ranks; mismatches named by file, row group
//! and row.

use std::collections::HashMap;

use voxlake::format::DType;
use voxlake::format::npy::NpyArray;
use voxlake::loader::Loader;

use crate::loader::first_error;

const SHAPE: [usize; 4] = [3, 4, 2, 2];

/// A fixture's path in this checkout (not the one compiled in: test binaries may be shared
/// between checkouts through the target directory).
pub fn fixture(name: &str) -> String {
    voxlake_testkit::checkout("tests/fixtures/foreign")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The cube numbers of `batches`, each row's values checked against numpy's `expected` and
/// its label against the fixtures' (cube number mod 2).
pub fn check_cubes(what: &str, batches: &[voxlake::Batch], expected: &[Vec<u8>]) -> Vec<usize> {
    let mut out = Vec::new();
    for b in batches {
        let bytes = b.tensors.as_bytes().unwrap();
        let per = bytes.len() / b.len();
        for (i, id) in b.ids.iter().enumerate() {
            let n: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
            assert!(
                bytes[i * per..(i + 1) * per] == expected[n][..],
                "{what}: values of {id}"
            );
            assert_eq!(b.labels[i], Some(n as i64 % 2), "{what}: label of {id}");
            out.push(n);
        }
    }
    out
}

/// numpy's values of each cube, as `dtype` little-endian bytes.
pub fn expected(dtype: DType) -> Vec<Vec<u8>> {
    let file = std::fs::read(fixture("expected.npy")).unwrap();
    let npy = NpyArray::parse(&file).unwrap();
    assert_eq!(npy.shape()[1..], SHAPE);
    let mut out = Vec::new();
    npy.write_le_c(dtype, voxlake::format::Casting::Safe, &mut out)
        .unwrap();
    let per = out.len() / npy.shape()[0];
    out.chunks(per).map(<[u8]>::to_vec).collect()
}

/// Settings a table needs on top of the common ones.
type Settings = fn(voxlake::LoaderBuilder) -> voxlake::LoaderBuilder;

/// (table, builder settings, element type of its tensors)
fn cases() -> Vec<(&'static str, Settings, DType)> {
    let f32_shape = |b: voxlake::LoaderBuilder| b.with_tensor_shape(SHAPE.to_vec(), DType::F32);
    vec![
        ("pyarrow_tensor", |b| b, DType::F32),
        ("pyarrow_fsl", f32_shape, DType::F32),
        (
            "pyarrow_list",
            |b| b.with_tensor_shape(SHAPE.to_vec(), DType::F64),
            DType::F64,
        ),
        ("pyarrow_raw_hive", f32_shape, DType::F32),
        ("deltalake_list", f32_shape, DType::F32),
        ("spark_delta", f32_shape, DType::F32),
        ("petastorm_ndarray", |b| b, DType::F32),
        ("petastorm_compressed", |b| b, DType::F32),
    ]
}

/// Runs `builder` to the end; every (id, label, tensor) it delivered.
fn rows(builder: voxlake::LoaderBuilder) -> Vec<(String, Option<i64>, Vec<u8>)> {
    std::thread::spawn(move || {
        let loader = builder.build().unwrap();
        assert_eq!(loader.spec().shape(), SHAPE, "the shape of one sample");
        let mut out = Vec::new();
        for batch in loader {
            let batch = batch.unwrap();
            let bytes = batch.tensors.as_bytes().unwrap().to_vec();
            let per = bytes.len() / batch.ids.len();
            for (i, id) in batch.ids.iter().enumerate() {
                out.push((
                    id.clone(),
                    batch.labels[i],
                    bytes[i * per..(i + 1) * per].to_vec(),
                ));
            }
        }
        out
    })
    .join()
    .unwrap()
}

fn check(name: &str, rows: &[(String, Option<i64>, Vec<u8>)], expected: &[Vec<u8>]) {
    for (id, label, tensor) in rows {
        let n: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
        assert_eq!(*label, Some(n as i64 % 2), "{name}: label of {id}");
        assert!(
            *tensor == expected[n],
            "{name}: values of {id} differ from numpy's"
        );
    }
}

#[test]
fn foreign_tables_read_value_for_value() {
    for (name, settings, dtype) in cases() {
        let expected = expected(dtype);
        let base = || {
            Loader::builder(fixture(name))
                .with_id_column("sample")
                .with_label_column("target")
                .with_batch_size(5)
        };
        // In table order, every row once.
        let all = rows(settings(base()));
        assert_eq!(all.len(), 24, "{name}");
        check(name, &all, &expected);
        let mut ids: Vec<&String> = all.iter().map(|r| &r.0).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 24, "{name}: a row twice");
        // Shuffled over two ranks, two epochs: each epoch covers the table once.
        let mut seen = HashMap::new();
        for rank in 0..2 {
            let b = settings(base())
                .with_shuffle(3, 8)
                .with_rank(rank, 2)
                .with_epochs(2);
            let got = rows(b);
            check(name, &got, &expected);
            for (id, ..) in got {
                *seen.entry(id).or_insert(0) += 1;
            }
        }
        assert_eq!(seen.len(), 24, "{name}: shuffled ranks cover the table");
        assert!(seen.values().all(|&n| n == 2), "{name}: {seen:?}");
    }
}

/// A table without an id column is asked by the ids its reads make (`{file}#{row}`): the index
/// lists them in position order, and a row asked by one is that row.
#[tokio::test]
async fn rows_without_an_id_column_are_asked_by_file_and_row() {
    use arrow::array::AsArray;
    let scan = voxlake::table::Snapshot::builder(fixture("pyarrow_fsl"))
        .with_tensor_shape(SHAPE.to_vec(), DType::F32)
        .build_scan(voxlake::table::ScanOptions::default())
        .await
        .unwrap();
    let index = scan.row_index().await.unwrap();
    assert_eq!(index.len(), 24);
    assert_eq!(index.id(0), Some("part-00000.parquet#0"));
    assert_eq!(index.id(23), Some("part-00001.parquet#11"));
    // The ids the reads give are the index's, position by position.
    let all: Vec<u64> = (0..24).collect();
    let rows = scan.take(&all).await.unwrap();
    let ids = arrow::compute::cast(
        rows.column_by_name("id").unwrap(),
        &arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    let read: Vec<&str> = ids.as_string::<i32>().iter().map(Option::unwrap).collect();
    assert_eq!(read, index.ids().collect::<Vec<_>>());
    let one = scan
        .take_ids(&index, &["part-00001.parquet#1"])
        .await
        .unwrap();
    let tensor = arrow::compute::cast(
        one.column_by_name("tensor").unwrap(),
        &arrow::datatypes::DataType::Binary,
    )
    .unwrap();
    assert!(
        tensor.as_binary::<i32>().value(0) == expected(DType::F32)[13].as_slice(),
        "row 1 of the second file is cube 13"
    );
}

#[test]
fn rows_without_an_id_column_are_named_by_file_and_row() {
    let got = rows(
        Loader::builder(fixture("pyarrow_fsl"))
            .with_tensor_shape(SHAPE.to_vec(), DType::F32)
            .with_batch_size(24),
    );
    let ids: Vec<&str> = got.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids[0], "part-00000.parquet#0");
    assert_eq!(ids[23], "part-00001.parquet#11");
    // No label column named and none called `label`: no labels.
    assert!(got.iter().all(|r| r.1.is_none()));
    let expected = expected(DType::F32);
    assert!(
        got[13].2 == expected[13],
        "row 1 of the second file is cube 13"
    );
}

#[test]
fn foreign_mismatches_are_named() {
    // A list of 48 values read as 24: the first row names file, row group and row.
    let e = first_error(
        Loader::builder(fixture("pyarrow_list"))
            .with_tensor_shape(vec![3, 4, 2], DType::F64)
            .with_batch_size(4),
        "lists of the wrong length",
    );
    assert!(
        e.contains("part-00000.parquet, row group 0, row 0") && e.contains("a list of 48 values"),
        "{e}"
    );
    // A recorded shape the settings contradict is refused at build.
    let e = first_error(
        Loader::builder(fixture("pyarrow_tensor")).with_tensor_shape(vec![48], DType::F32),
        "a contradicted shape",
    );
    assert!(e.contains("shape [3, 4, 2, 2]"), "{e}");
    // Element types are not converted silently.
    let e = first_error(
        Loader::builder(fixture("spark_delta")).with_tensor_shape(SHAPE.to_vec(), DType::F64),
        "another dtype",
    );
    assert!(
        e.contains("elements of type f32") && e.contains("say f64"),
        "{e}"
    );
    // Raw bytes without a shape cannot be read.
    let e = first_error(Loader::builder(fixture("pyarrow_raw_hive")), "raw bytes");
    assert!(e.contains("give the shape and dtype"), "{e}");
    // A label column of strings is refused.
    let e = first_error(
        Loader::builder(fixture("petastorm_ndarray")).with_label_column("sample"),
        "string labels",
    );
    assert!(e.contains("label column 'sample' is Utf8"), "{e}");
}

#[test]
fn voxlake_bench_reads_a_spark_table_by_its_columns() {
    let bench = |extra: &[&str]| {
        std::process::Command::new(voxlake_testkit::voxlake_bin())
            .args([
                "bench",
                &fixture("spark_delta"),
                "--batch-size",
                "4",
                "--json",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&[
        "--shape",
        "3,4,2,2",
        "--dtype",
        "f32",
        "--label-column",
        "target",
        "--id-column",
        "sample",
        "--shuffle",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["samples"].as_u64(), report["batches"].as_u64()),
        (Some(24), Some(6))
    );
    // Without its shape, a LIST column is refused with a message that says what to give.
    let out = bench(&[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("column 'volume'") && stderr.contains("--shape"),
        "{stderr}"
    );
}

#[tokio::test]
async fn inspect_says_how_a_foreign_table_is_read() {
    let hints = voxlake::format::sample::ColumnHints::default().with_label_column("target");
    let info = voxlake::compact::Compactor::new(fixture("petastorm_compressed"))
        .with_sample_columns(hints)
        .inspect()
        .await
        .unwrap();
    assert_eq!(info.shape, SHAPE);
    assert_eq!((info.rows, info.files, info.row_groups), (24, 1, 4));
    assert!(
        info.encoding.contains("np.savez_compressed"),
        "{}",
        info.encoding
    );
    assert!(!info.native);
    assert_eq!(info.label_column.as_deref(), Some("target"));
    // Bool labels counted as the loader hands them out.
    assert_eq!(info.labels.get("0"), Some(&12));
    assert_eq!(info.labels.get("1"), Some(&12));
}

#[tokio::test]
async fn convert_moves_foreign_tables_onto_voxlakes_layout_exactly_once() {
    use voxlake::compact::Compactor;
    use voxlake::format::sample::ColumnHints;
    let dir = tempfile::tempdir().unwrap();
    let expected = expected(DType::F32);
    for (name, shape) in [
        ("spark_delta", Some(SHAPE.to_vec())),
        ("petastorm_compressed", None),
        ("pyarrow_tensor", None),
    ] {
        let table = dir.path().join(name).to_string_lossy().into_owned();
        let convert = || {
            let mut c = Compactor::new(&table).with_sample_columns(
                ColumnHints::default()
                    .with_id_column("sample")
                    .with_label_column("target"),
            );
            if let Some(shape) = &shape {
                c = c.with_shape(shape.clone()).with_dtype(DType::F32);
            }
            c
        };
        let summary = convert().convert(&fixture(name)).await.unwrap();
        assert_eq!((summary.rows, summary.already_present), (24, 0), "{name}");
        // A re-run converts nothing.
        let again = convert().convert(&fixture(name)).await.unwrap();
        assert_eq!(
            (again.rows, again.already_present, again.commits),
            (0, 24, 0),
            "{name}"
        );
        // Read back as a voxlake table: native layout, checksums, every value.
        let got = std::thread::spawn({
            let table = table.clone();
            move || {
                let loader = Loader::builder(table).with_batch_size(7).build().unwrap();
                assert_eq!(loader.spec().shape(), SHAPE);
                loader.map(Result::unwrap).collect::<Vec<_>>()
            }
        })
        .join()
        .unwrap();
        let n = check_cubes(name, &got, &expected).len();
        assert_eq!(n, 24, "{name}");
        let info = Compactor::new(&table).inspect().await.unwrap();
        assert!(info.native, "{name}: {info:?}");
    }
    // Ids must be unique: a label column as the id repeats.
    let table = dir.path().join("dups").to_string_lossy().into_owned();
    let e = Compactor::new(&table)
        .with_sample_columns(ColumnHints::default().with_id_column("target"))
        .convert(&fixture("pyarrow_tensor"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("id '0' appears twice") && e.contains("--id-column"),
        "{e}"
    );
}

#[test]
fn compact_convert_reads_a_petastorm_folder_by_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let summary = voxlake_testkit::json_output(
        std::process::Command::new(voxlake_testkit::compact_bin())
            .args(["convert", &fixture("petastorm_ndarray"), &table, "--json"])
            .args(["--id-column", "sample", "--label-column", "target"]),
    );
    assert_eq!(summary["rows"], 24);
    assert_eq!(summary["tensor"], "[3, 4, 2, 2] f32");
}

#[test]
fn every_fixture_reads_through_a_filter_and_a_transform() {
    use voxlake::loader::Tensors;
    use voxlake::loader::transform::Sample;
    for (name, settings, dtype) in cases() {
        let expected = expected(dtype);
        let mut seen = HashMap::new();
        for rank in 0..2 {
            let b = settings(
                Loader::builder(fixture(name))
                    .with_id_column("sample")
                    .with_label_column("target")
                    .with_batch_size(4)
                    .with_shuffle(2, 8)
                    .with_rank(rank, 2)
                    // Petastorm's labels are bools.
                    .with_filter(if name.starts_with("petastorm") {
                        "target = true"
                    } else {
                        "target = 1"
                    })
                    // Negate every value, label 1 → 7.
                    .with_transform(|s: &mut Sample<'_>, _| {
                        s.tensor = match &s.tensor {
                            Tensors::F32(a) => Tensors::F32(a.mapv(|v| -v)),
                            Tensors::F64(a) => Tensors::F64(a.mapv(|v| -v)),
                            _ => return Err("float tensors expected".into()),
                        };
                        s.label = s.label.map(|l| l * 7);
                        Ok(())
                    }),
            );
            for (id, label, tensor) in rows(b) {
                let n: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
                assert_eq!((n % 2, label), (1, Some(7)), "{name}: {id}");
                let size = dtype.size();
                let negated: Vec<u8> = expected[n]
                    .chunks(size)
                    .flat_map(|b| {
                        let mut b = b.to_vec();
                        b[size - 1] ^= 0x80; // the sign bit of a little-endian float
                        b
                    })
                    .collect();
                assert!(tensor == negated, "{name}: values of {id}");
                *seen.entry(id).or_insert(0) += 1;
            }
        }
        assert_eq!(seen.len(), 12, "{name}: the odd cubes");
        assert!(seen.values().all(|&c| c == 1), "{name}: {seen:?}");
    }
}

#[test]
fn labels_and_ids_may_come_from_partition_folders() {
    // Folder-per-class: region a's file under cls=3, region b's under cls=4 (and a null class).
    let dir = tempfile::tempdir().unwrap();
    for (region, class) in [("a", "3"), ("b", "4"), ("c", "__HIVE_DEFAULT_PARTITION__")] {
        let to = dir.path().join(format!("cls={class}"));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(
            std::path::Path::new(&fixture("pyarrow_raw_hive"))
                .join(format!("region={region}/part-0.parquet")),
            to.join("part-0.parquet"),
        )
        .unwrap();
    }
    let table = dir.path().to_string_lossy().into_owned();
    // inspect counts the folders' labels by their files' rows.
    let info = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(
            voxlake::compact::Compactor::new(&table)
                .with_sample_columns(
                    voxlake::format::sample::ColumnHints::default()
                        .with_tensor_shape(SHAPE.to_vec(), DType::F32)
                        .with_label_column("cls"),
                )
                .inspect(),
        )
        .unwrap();
    let labels: Vec<(&str, u64)> = info.labels.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(labels, [("3", 8), ("4", 8), ("null", 8)]);
    let got = crate::loader::collect(
        Loader::builder(table)
            .with_tensor_shape(SHAPE.to_vec(), DType::F32)
            .with_label_column("cls")
            .with_id_column("sample")
            .with_filter("cls IS NOT NULL")
            .with_batch_size(5)
            .with_shuffle(1, 8),
    );
    let expected = expected(DType::F32);
    let mut n = 0;
    for b in &got {
        for (i, id) in b.ids.iter().enumerate() {
            let k: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
            let class = match k % 3 {
                0 => 3,
                1 => 4,
                _ => panic!("{id}: the null class is filtered out"),
            };
            assert_eq!(b.labels[i], Some(class), "{id}");
            let bytes = b.tensors.as_bytes().unwrap();
            let per = bytes.len() / b.len();
            assert!(bytes[i * per..(i + 1) * per] == expected[k][..], "{id}");
            n += 1;
        }
    }
    assert_eq!(n, 16);
}

/// A Parquet folder of one file: rows `r` of `lens[r]` floats (`r * 1000 + i % 997`) in a LIST
/// column `volume`, ids `r<r>` in `sample`, row groups of 5.
fn list_table(dir: &std::path::Path, lens: &[usize]) -> String {
    use arrow::array::{Float32Array, ListArray, StringArray};
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let values: Vec<f32> = lens
        .iter()
        .enumerate()
        .flat_map(|(r, &n)| (0..n).map(move |i| (r * 1000) as f32 + (i % 997) as f32))
        .collect();
    let item = Arc::new(Field::new("element", DataType::Float32, false));
    let list = ListArray::new(
        item,
        OffsetBuffer::from_lengths(lens.iter().copied()),
        Arc::new(Float32Array::from(values)),
        None,
    );
    let batch = RecordBatch::try_from_iter([
        ("volume", Arc::new(list) as arrow::array::ArrayRef),
        (
            "sample",
            Arc::new(StringArray::from_iter_values(
                (0..lens.len()).map(|r| format!("r{r}")),
            )),
        ),
    ])
    .unwrap();
    one_file_table(dir, &batch)
}

/// `batch` written as a Parquet folder of one file, row groups of 5 rows; the folder's path.
pub fn one_file_table(dir: &std::path::Path, batch: &arrow::record_batch::RecordBatch) -> String {
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(5))
        .build();
    let file = std::fs::File::create(dir.join("part-0.parquet")).unwrap();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    dir.to_string_lossy().into_owned()
}

#[test]
fn large_list_rows_decode_in_pieces_and_name_their_rows() {
    // 12 rows of 200,000 floats (800 KB: one row per decode batch) in row groups of 5; row 8
    // one value short.
    let numel = 200_000usize;
    let lens: Vec<usize> = (0..12)
        .map(|r| if r == 8 { numel - 1 } else { numel })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let table = list_table(dir.path(), &lens);
    let builder = |t: String| {
        Loader::builder(t)
            .with_tensor_shape(vec![numel], DType::F32)
            .with_id_column("sample")
            .with_batch_size(4)
    };
    // The first row group (rows 0–4) is whole: 5 decode batches joined, values in place.
    let first = std::thread::spawn({
        let b = builder(table.clone());
        move || {
            let mut loader = b.build().unwrap();
            loader.next().unwrap().unwrap()
        }
    })
    .join()
    .unwrap();
    let t = first.tensors.as_f32().unwrap();
    for (i, id) in first.ids.iter().enumerate() {
        let r: usize = id[1..].parse().unwrap();
        assert_eq!(r, i);
        assert_eq!(t[[i, 0]], (r * 1000) as f32);
        assert_eq!(t[[i, 998]], (r * 1000 + 1) as f32);
    }
    // Row 8 (the fourth row of the second row group, a later decode batch) is named.
    let e = first_error(builder(table), "a short list in a later decode batch");
    assert!(
        e.contains("row group 1, row 8") && e.contains("a list of 199999 values"),
        "{e}"
    );
}

#[test]
fn foreign_tables_stream_at_the_smallest_budget_build_accepts() {
    // A LIST table (levels decoded beside the values) and np.savez_compressed rows (inflated to
    // more than they store): refused below the smallest budget, every row once at it.
    let numel = 200_000usize;
    let dir = tempfile::tempdir().unwrap();
    let list = list_table(dir.path(), &[numel; 23]);
    for (table, shape, rows) in [
        (list, Some(vec![numel]), 23),
        (fixture("petastorm_compressed"), None, 24),
    ] {
        let builder = |budget: u64| {
            let b = Loader::builder(table.clone())
                .with_id_column("sample")
                .with_batch_size(3)
                .with_shuffle(5, 6)
                .with_memory_budget(budget);
            match &shape {
                Some(s) => b.with_tensor_shape(s.clone(), DType::F32),
                None => b,
            }
        };
        let refusal = first_error(builder(1024), "a budget below the smallest");
        let smallest = crate::loader::smallest_budget(&refusal);
        let got = std::thread::spawn({
            let b = builder(smallest);
            move || b.build().unwrap().map(Result::unwrap).collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        let mut ids: Vec<String> = got.iter().flat_map(|b| b.ids.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), rows, "{table} at {smallest} bytes");
    }
}

#[test]
fn integer_and_boolean_lists_read_value_for_value() {
    // uint8 as pyarrow's fixed_shape_tensor stores it (Ray Data's images), int16 and uint32 as
    // lists: INT32 in the file, narrowed or reinterpreted on the way back, all values of each
    // type's range included; masks as fixed-size lists of booleans (a byte each in the
    // tensor); 13 rows in row groups of 5, shuffled.
    use arrow::array::{
        ArrayRef, BooleanArray, FixedSizeListArray, Int16Array, ListArray, StringArray, UInt8Array,
        UInt32Array,
    };
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let (rows, numel) = (13usize, 300usize);
    let value =
        |r: usize, i: usize| ((r * 7919 + i * 104_729) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let u8s: Vec<u8> = (0..rows * numel)
        .map(|k| value(k / numel, k % numel) as u8)
        .collect();
    let i16s: Vec<i16> = (0..rows * numel)
        .map(|k| value(k / numel, k % numel) as i16)
        .collect();
    let u32s: Vec<u32> = (0..rows * numel)
        .map(|k| value(k / numel, k % numel) as u32)
        .collect();
    assert!(u8s.contains(&255) && i16s.iter().any(|&v| v < 0) && u32s.iter().any(|&v| v > 1 << 31));
    let item = |t: DataType| Arc::new(Field::new("element", t, false));
    let bools: Vec<bool> = u8s.iter().map(|&v| v % 3 == 0).collect();
    let lists: [(ArrayRef, DType, Vec<u8>); 4] = [
        (
            Arc::new(FixedSizeListArray::new(
                item(DataType::Boolean),
                numel as i32,
                Arc::new(BooleanArray::from(bools.clone())),
                None,
            )),
            DType::Bool,
            bools.iter().map(|&b| u8::from(b)).collect(),
        ),
        (
            Arc::new(FixedSizeListArray::new(
                item(DataType::UInt8),
                numel as i32,
                Arc::new(UInt8Array::from(u8s.clone())),
                None,
            )),
            DType::U8,
            u8s.clone(),
        ),
        (
            Arc::new(ListArray::new(
                item(DataType::Int16),
                OffsetBuffer::from_lengths(vec![numel; rows]),
                Arc::new(Int16Array::from(i16s.clone())),
                None,
            )),
            DType::I16,
            i16s.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            Arc::new(ListArray::new(
                item(DataType::UInt32),
                OffsetBuffer::from_lengths(vec![numel; rows]),
                Arc::new(UInt32Array::from(u32s.clone())),
                None,
            )),
            DType::U32,
            u32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
    ];
    for (list, dtype, expected) in lists {
        let dir = tempfile::tempdir().unwrap();
        let ids = StringArray::from_iter_values((0..rows).map(|r| format!("r{r}")));
        let batch =
            RecordBatch::try_from_iter([("volume", list), ("sample", Arc::new(ids) as ArrayRef)])
                .unwrap();
        let builder = Loader::builder(one_file_table(dir.path(), &batch))
            .with_tensor_shape(vec![numel], dtype)
            .with_id_column("sample")
            .with_shuffle(3, 8)
            .with_batch_size(4);
        let per = numel * dtype.size();
        let mut seen = 0;
        for batch in crate::loader::collect(builder) {
            let bytes = batch.tensors.as_bytes().unwrap();
            for (i, id) in batch.ids.iter().enumerate() {
                let r: usize = id[1..].parse().unwrap();
                let got = &bytes[i * per..(i + 1) * per];
                assert!(
                    got == &expected[r * per..(r + 1) * per],
                    "{dtype}: row {id}"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, rows, "{dtype}");
    }
}

#[test]
fn a_later_files_row_group_past_the_budget_is_refused_not_read_over_it() {
    use arrow::array::{BinaryArray, StringArray};
    // File 0: row groups of 2 rows of 64 KiB; file 1 (crafted or just written otherwise): one
    // row group of 64 rows, 4 MiB, which the budget that streams file 0 cannot hold.
    let write = |dir: &std::path::Path, name: &str, rows: usize, group: usize| {
        let batch = arrow::record_batch::RecordBatch::try_from_iter([
            (
                "x",
                std::sync::Arc::new(BinaryArray::from_iter_values(
                    (0..rows).map(|_| vec![1u8; 64 << 10]),
                )) as arrow::array::ArrayRef,
            ),
            (
                "sample",
                std::sync::Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("{name}-{i}")),
                )),
            ),
        ])
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .build();
        let file = std::fs::File::create(dir.join(name)).unwrap();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "part-0.parquet", 8, 2);
    write(dir.path(), "part-1.parquet", 64, 64);
    let e = crate::loader::first_error(
        Loader::builder(dir.path().to_str().unwrap())
            .with_tensor_shape(vec![64 << 10], DType::U8)
            .with_id_column("sample")
            .with_batch_size(2)
            .with_memory_budget(2 << 20),
        "a row group past the budget",
    );
    assert!(
        e.contains("part-1.parquet, row group 0")
            && e.contains("more than the stream's memory budget"),
        "{e}"
    );
}
