//! The Delta conformance tables (tests/fixtures/conformance: the delta-kernel-rs golden tables,
//! committed as the kernel ships them) read through `Loader`. Ground truth is each table's
//! `expected/` content, written by Spark, read here with the parquet crate: never voxlake's
//! own reader. Every case is listed in `CASES` with what must happen (docs/format.md has the
//! same table): its rows read exactly, refused by name, or no sample to form.

use std::path::Path;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use voxlake::format::DType;
use voxlake::format::sample::NullPolicy;
use voxlake::{Batch, Loader};
use voxlake_testkit::conformance::{golden_names, unpack_golden};

/// What a golden table must do.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Its expected rows, every column a field can hold, exactly (ids where it has `id`).
    Rows,
    /// [`Rows`], but for the partition column `as_timestamp`, whose expected values Spark
    /// wrote in its session's zone: the Delta protocol reads a partition timestamp without a
    /// zone as UTC (as the kernel does: its golden test skips this table for that reason), so
    /// `2021-09-08 11:11:11` is 1,631,099,471 s.
    UtcPartitionTimestamps,
    /// Refused with an error containing this text.
    Refused(&'static str),
    /// No column a sample can start with (a number, bool, date, time or decimal column, or a
    /// tensor): refused with this text.
    NoSample(&'static str),
}

use Want::*;

/// Every committed golden table and what it must do.
const CASES: &[(&str, Want)] = &[
    ("124-decimal-decode-bug", Rows),
    ("125-iterator-bug", Rows),
    ("basic-decimal-table", Rows),
    ("basic-decimal-table-legacy", Rows),
    (
        "basic-with-inserts-deletes-checkpoint",
        NoSample("no column can hold tensors"),
    ),
    (
        "basic-with-inserts-merge",
        NoSample("a sample's first field is a tensor"),
    ),
    (
        "basic-with-inserts-overwrite-restore",
        NoSample("no column can hold tensors"),
    ),
    (
        "basic-with-inserts-updates",
        NoSample("a sample's first field is a tensor"),
    ),
    (
        "basic-with-vacuum-protocol-check-feature",
        NoSample("a sample's first field is a tensor"),
    ),
    (
        "canonicalized-paths-normal-a",
        Refused("/some/unqualified/absolute/path of version 1 is missing from the store"),
    ),
    (
        "canonicalized-paths-normal-b",
        Refused("/some/unqualified/absolute/path of version 1 is missing from the store"),
    ),
    (
        "canonicalized-paths-special-a",
        Refused("/some/unqualified/with space/p@#h of version 1 is missing from the store"),
    ),
    (
        "canonicalized-paths-special-b",
        Refused("/some/unqualified/with space/p@#h of version 1 is missing from the store"),
    ),
    ("checkpoint", Refused("file size of 1 is less than footer")),
    (
        "corrupted-last-checkpoint-kernel",
        NoSample("no column can hold tensors"),
    ),
    (
        "data-reader-absolute-paths-escaped-chars",
        Refused("No table metadata found in delta log"),
    ),
    ("data-reader-array-complex-objects", Rows),
    (
        "data-reader-array-primitives",
        NoSample("several columns can hold tensors"),
    ),
    ("data-reader-date-types-America", Rows),
    ("data-reader-date-types-Asia", Rows),
    ("data-reader-date-types-Etc", Rows),
    ("data-reader-date-types-Iceland", Rows),
    ("data-reader-date-types-Jst", Rows),
    ("data-reader-date-types-Pst", Rows),
    ("data-reader-date-types-utc", Rows),
    (
        "data-reader-escaped-chars",
        NoSample("a sample's first field is a tensor"),
    ),
    ("data-reader-map", Rows),
    ("data-reader-nested-struct", Rows),
    (
        "data-reader-nullable-field-invalid-schema-key",
        NoSample("no column can hold tensors"),
    ),
    ("data-reader-partition-values", UtcPartitionTimestamps),
    ("data-reader-primitives", Rows),
    ("data-reader-timestamp_ntz", Rows),
    ("data-reader-timestamp_ntz-id-mode", Rows),
    ("data-reader-timestamp_ntz-name-mode", Rows),
    ("data-skipping-basic-stats-all-types", Rows),
    ("data-skipping-basic-stats-all-types-checkpoint", Rows),
    ("data-skipping-basic-stats-all-types-columnmapping-id", Rows),
    (
        "data-skipping-basic-stats-all-types-columnmapping-name",
        Rows,
    ),
    ("data-skipping-change-stats-collected-across-versions", Rows),
    ("data-skipping-partition-and-data-column", Rows),
    ("decimal-various-scale-precision", Rows),
    (
        "delete-re-add-same-file-different-transactions",
        Refused("file size of 1 is less than footer"),
    ),
    ("deltalog-commit-info", Refused("schemaString")),
    (
        "deltalog-getChanges",
        NoSample("no column can hold tensors"),
    ),
    (
        "deltalog-invalid-protocol-version",
        Refused("Reader features must not be present when minimum reader version != 3"),
    ),
    (
        "deltalog-state-reconstruction-from-checkpoint-missing-metadata",
        Refused("No table metadata found in delta log"),
    ),
    (
        "deltalog-state-reconstruction-from-checkpoint-missing-protocol",
        Refused("schemaString"),
    ),
    (
        "deltalog-state-reconstruction-without-metadata",
        Refused("No table metadata found in delta log"),
    ),
    (
        "deltalog-state-reconstruction-without-protocol",
        Refused("No protocol found in delta log"),
    ),
    ("dv-partitioned-with-checkpoint", Rows),
    ("dv-with-columnmapping", Rows),
    ("hive", NoSample("no column can hold tensors")),
    ("kernel-timestamp-int96", Rows),
    ("kernel-timestamp-pst", Rows),
    ("kernel-timestamp-timestamp_micros", Rows),
    ("kernel-timestamp-timestamp_millis", Rows),
    (
        "log-replay-dv-key-cases",
        NoSample("no column can hold tensors"),
    ),
    ("log-replay-latest-metadata-protocol", Rows),
    (
        "log-replay-special-characters",
        NoSample("no column can hold tensors"),
    ),
    (
        "log-replay-special-characters-a",
        NoSample("no column can hold tensors"),
    ),
    (
        "log-replay-special-characters-b",
        Refused("data file special p@#h of version 0 is missing from the store"),
    ),
    (
        "multi-part-checkpoint",
        NoSample("no column can hold tensors"),
    ),
    (
        "no-delta-log-folder",
        NoSample("no column can hold tensors"),
    ),
    (
        "only-checkpoint-files",
        NoSample("no column can hold tensors"),
    ),
    ("parquet-all-types", Rows),
    ("parquet-all-types-legacy-format", Rows),
    ("snapshot-data0", Rows),
    ("snapshot-data1", Rows),
    ("snapshot-data2", Rows),
    ("snapshot-data2-deleted", Rows),
    ("snapshot-data3", Rows),
    ("snapshot-repartitioned", Rows),
    ("snapshot-vacuumed", Rows),
    ("table-with-columnmapping-mode-id", Rows),
    ("table-with-columnmapping-mode-name", Rows),
    ("time-travel-partition-changes-a", Rows),
    ("time-travel-partition-changes-b", Rows),
    (
        "time-travel-schema-changes-a",
        NoSample("no column can hold tensors"),
    ),
    ("time-travel-schema-changes-b", Rows),
    ("time-travel-start", NoSample("no column can hold tensors")),
    (
        "time-travel-start-start20",
        NoSample("no column can hold tensors"),
    ),
    (
        "time-travel-start-start20-start40",
        NoSample("no column can hold tensors"),
    ),
    ("update-deleted-directory", Refused("schemaString")),
    ("v2-checkpoint-json", NoSample("no column can hold tensors")),
    (
        "v2-checkpoint-parquet",
        NoSample("no column can hold tensors"),
    ),
    (
        "versions-not-contiguous",
        Refused("commit 1 (00000000000000000001.json) is missing between commit 0 and commit 2"),
    ),
];

/// A cell as voxlake hands it out: numbers by their dtype's value, bools 0/1, dates as days,
/// timestamps as microseconds, decimals as f64, text as is; a null as `null`.
type Row = Vec<String>;

/// Whether a column of `data_type` can be a field, and if so whether it is text.
fn readable(data_type: &DataType) -> Option<bool> {
    match data_type {
        t if t.is_integer() || t.is_floating() => Some(false),
        DataType::Boolean | DataType::Date32 | DataType::Timestamp(_, _) => Some(false),
        DataType::Decimal128(p, _) if *p <= 15 => Some(false),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(true),
        _ => None,
    }
}

/// The expected content: every `expected/**/*.parquet`, read with the parquet crate.
fn expected_batches(dir: &Path) -> Option<Vec<RecordBatch>> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                out.push(path);
            }
        }
    }
    let root = dir.join("expected");
    if !root.is_dir() {
        return None;
    }
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut batches = Vec::new();
    for file in files {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&file).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        batches.extend(reader.map(Result::unwrap));
    }
    Some(batches)
}

/// Column `array`'s values as voxlake delivers them (see [`Row`]).
fn expected_cells(array: &ArrayRef) -> Vec<String> {
    let cast = |to: &DataType| arrow::compute::cast(array, to).unwrap();
    let (array, kind): (ArrayRef, &str) = match array.data_type() {
        DataType::Timestamp(_, _) => (
            cast(&DataType::Timestamp(TimeUnit::Microsecond, None)),
            "ts",
        ),
        DataType::Decimal128(_, _) => (cast(&DataType::Float64), "f64"),
        DataType::Float32 => (array.clone(), "f32"),
        DataType::Float64 => (array.clone(), "f64"),
        DataType::Boolean => (array.clone(), "bool"),
        DataType::Date32 => (cast(&DataType::Int32), "int"),
        t if t.is_integer() => (cast(&DataType::Int64), "int"),
        _ => (cast(&DataType::Utf8), "text"),
    };
    (0..array.len())
        .map(|i| {
            if array.is_null(i) {
                return "null".to_string();
            }
            match kind {
                "ts" => array
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .value(i)
                    .to_string(),
                "f32" => format!(
                    "{:?}",
                    array
                        .as_primitive::<arrow::datatypes::Float32Type>()
                        .value(i)
                ),
                "f64" => format!(
                    "{:?}",
                    array
                        .as_primitive::<arrow::datatypes::Float64Type>()
                        .value(i)
                ),
                "bool" => u8::from(array.as_boolean().value(i)).to_string(),
                "int" => match array.data_type() {
                    DataType::Int32 => array
                        .as_primitive::<arrow::datatypes::Int32Type>()
                        .value(i)
                        .to_string(),
                    _ => array
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .value(i)
                        .to_string(),
                },
                _ => array.as_string::<i32>().value(i).to_string(),
            }
        })
        .collect()
}

/// Value `i` of a scalar field of a batch, as text (see [`Row`]).
fn delivered_cell(batch: &Batch, field: &str, i: usize) -> String {
    if let Some(valid) = batch.field(&NullPolicy::mask_name(field))
        && valid.as_bytes().unwrap()[i] == 0
    {
        return "null".to_string();
    }
    if let Some(text) = batch.text(field) {
        return text[i].clone();
    }
    let tensor = batch.field(field).unwrap();
    let size = tensor.dtype().size();
    let b = &tensor.as_bytes().unwrap()[i * size..(i + 1) * size];
    match tensor.dtype() {
        DType::Bool | DType::U8 => b[0].to_string(),
        DType::I8 => (b[0] as i8).to_string(),
        DType::I16 => i16::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::I32 => i32::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::U16 => u16::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::U32 => u32::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::U64 => u64::from_le_bytes(b.try_into().unwrap()).to_string(),
        DType::F32 => format!("{:?}", f32::from_le_bytes(b.try_into().unwrap())),
        DType::F64 => format!("{:?}", f64::from_le_bytes(b.try_into().unwrap())),
        other => panic!("{field}: {other} is not a scalar of the conformance tables"),
    }
}

/// The columns read as fields (a non-text one first) and whether a column `id` is the id.
fn plan_fields(schema: &arrow::datatypes::Schema) -> (Vec<String>, bool) {
    let mut numbers = Vec::new();
    let mut texts = Vec::new();
    let mut has_id = false;
    for field in schema.fields() {
        let name = field.name().as_str();
        if name == "id" && readable(field.data_type()).is_some() {
            has_id = true;
            continue;
        }
        if name == "label" || name == "row_crc32" {
            continue;
        }
        match readable(field.data_type()) {
            Some(false) => numbers.push(name.to_string()),
            Some(true) => texts.push(name.to_string()),
            None => {}
        }
    }
    numbers.extend(texts);
    (numbers, has_id)
}

/// The loader over `table` reading `fields`, every null masked.
fn loader(table: &Path, fields: &[String]) -> voxlake::LoaderBuilder {
    let mut builder = Loader::builder(table.to_str().unwrap()).with_batch_size(7);
    for field in fields {
        builder = builder
            .with_field(field.clone())
            .with_null(field.clone(), NullPolicy::Mask);
    }
    builder
}

/// Runs one case; `Err` says how it failed its `want`.
fn check_case(name: &str, want: Want, into: &Path) -> Result<(), String> {
    let dir = unpack_golden(name, into).map_err(|e| format!("unpack: {e}"))?;
    let table = dir.join("delta");
    match want {
        Refused(text) | NoSample(text) => {
            let fields = expected_batches(&dir)
                .and_then(|b| b.first().map(|b| plan_fields(&b.schema()).0))
                .unwrap_or_default();
            let builder = match fields.is_empty() {
                true => Loader::builder(table.to_str().unwrap()),
                false => loader(&table, &fields),
            };
            let e = std::thread::spawn(move || match builder.build() {
                Ok(loader) => loader
                    .into_iter()
                    .find_map(Result::err)
                    .map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            })
            .join()
            .unwrap()
            .ok_or("read, but must be refused")?;
            match e.contains(text) && e.lines().count() <= 3 {
                true => Ok(()),
                false => Err(format!("refused with {e:?}, want {text:?} in a few lines")),
            }
        }
        Rows | UtcPartitionTimestamps => {
            let batches = expected_batches(&dir).ok_or("no expected/ content")?;
            let schema = batches.first().ok_or("expected/ is empty")?.schema();
            let (fields, has_id) = plan_fields(&schema);
            if fields.is_empty() {
                return Err("no readable column".into());
            }
            let mut want_rows: Vec<Row> = Vec::new();
            for batch in &batches {
                let mut columns: Vec<Vec<String>> = fields
                    .iter()
                    .map(|f| expected_cells(batch.column_by_name(f).unwrap()))
                    .collect();
                if has_id {
                    columns.push(expected_cells(batch.column_by_name("id").unwrap()));
                }
                if matches!(want, UtcPartitionTimestamps) {
                    let at = fields.iter().position(|f| f == "as_timestamp").unwrap();
                    for cell in columns[at].iter_mut().filter(|c| *c != "null") {
                        *cell = "1631099471000000".into();
                    }
                }
                for i in 0..batch.num_rows() {
                    want_rows.push(columns.iter().map(|c| c[i].clone()).collect());
                }
            }
            let builder = loader(&table, &fields);
            let read: Result<Vec<Batch>, String> = std::thread::spawn(move || {
                builder
                    .build()
                    .map_err(|e| e.to_string())?
                    .map(|b| b.map_err(|e| e.to_string()))
                    .collect()
            })
            .join()
            .unwrap();
            let mut got_rows: Vec<Row> = Vec::new();
            for batch in read? {
                for i in 0..batch.len() {
                    let mut row: Row = fields
                        .iter()
                        .map(|f| delivered_cell(&batch, f, i))
                        .collect();
                    if has_id {
                        row.push(batch.ids[i].clone());
                    }
                    got_rows.push(row);
                }
            }
            want_rows.sort();
            got_rows.sort();
            if want_rows == got_rows {
                return Ok(());
            }
            let first = want_rows
                .iter()
                .zip(&got_rows)
                .find(|(w, g)| w != g)
                .map(|(w, g)| format!("first difference: want {w:?}, got {g:?}"))
                .unwrap_or_default();
            Err(format!(
                "fields {fields:?}: {} rows expected, {} read; {first}",
                want_rows.len(),
                got_rows.len()
            ))
        }
    }
}

#[test]
fn every_golden_table_reads_as_its_expected_content_or_is_refused_by_name() {
    let listed: Vec<&str> = CASES.iter().map(|(n, _)| *n).collect();
    let names = golden_names();
    let unlisted: Vec<&String> = names
        .iter()
        .filter(|n| !listed.contains(&n.as_str()))
        .collect();
    let mut failures = Vec::new();
    let tmp = tempfile::tempdir().unwrap();
    for (name, want) in CASES {
        if let Err(e) = check_case(name, *want, tmp.path()) {
            failures.push(format!("{name} ({want:?}): {e}"));
        }
    }
    for name in &unlisted {
        let outcome = check_case(name, Rows, tmp.path());
        failures.push(format!("{name}: not in CASES (as Rows: {outcome:?})"));
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// tests/python/evolved_table.py's table (`evolved` or `empty`) in a fresh folder.
fn written(kind: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join(kind);
    voxlake_testkit::python_script("evolved_table.py", &[kind, table.to_str().unwrap()]);
    (dir, table.to_str().unwrap().to_string())
}

/// Every row of a run: its cells of `fields` (see [`Row`]), sorted.
fn rows_of(builder: voxlake::LoaderBuilder, fields: &[&str]) -> Vec<Row> {
    let mut rows: Vec<Row> = crate::loader::collect(builder)
        .iter()
        .flat_map(|b| {
            (0..b.len())
                .map(|i| fields.iter().map(|f| delivered_cell(b, f, i)).collect())
                .collect::<Vec<Row>>()
        })
        .collect();
    rows.sort();
    rows
}

fn row(cells: &[&str]) -> Row {
    cells.iter().map(|c| c.to_string()).collect()
}

#[test]
fn a_string_partition_keeps_its_text_and_a_filter_selects_it() {
    let (_dir, table) = written("evolved");
    // '007' is text in the Delta schema: delivered as 007, never as the number 7.
    let builder = Loader::builder(&table)
        .with_version(0)
        .with_field("x")
        .with_field("code")
        .with_null("code", NullPolicy::Mask);
    assert_eq!(
        rows_of(builder, &["x", "code"]),
        [
            row(&["1.0", "007"]),
            row(&["2.0", "10"]),
            row(&["3.0", "null"])
        ]
    );
    let builder = Loader::builder(&table)
        .with_field("x")
        .with_field("code")
        .with_filter("code = '007'");
    // Version 1 adds two rows under '007', one of them with x null: masked here.
    let builder = builder.with_null("x", NullPolicy::Mask);
    assert_eq!(
        rows_of(builder, &["x", "code"]),
        [
            row(&["1.0", "007"]),
            row(&["4.0", "007"]),
            row(&["null", "007"])
        ]
    );
    // A fill instead of a mask: the value given, and no validity field.
    let builder = Loader::builder(&table)
        .with_version(0)
        .with_field("x")
        .with_field("code")
        .with_null("code", "fill:none".parse().unwrap());
    let batches = crate::loader::collect(builder);
    assert!(batches[0].field("code_valid").is_none());
    let mut codes: Vec<String> = batches
        .iter()
        .flat_map(|b| b.text("code").unwrap().to_vec())
        .collect();
    codes.sort();
    assert_eq!(codes, ["007", "10", "none"]);
}

#[test]
fn a_null_is_an_error_naming_column_file_and_row_unless_a_policy_reads_it() {
    let (_dir, table) = written("evolved");
    let e = crate::loader::first_error(
        Loader::builder(&table)
            .with_version(0)
            .with_field("x")
            .with_field("code"),
        "a null partition value without a policy",
    );
    assert!(e.contains("column 'code'") && e.contains("is null"), "{e}");
    assert!(
        e.contains("code=__HIVE_DEFAULT_PARTITION__/part-") && e.contains("row 0"),
        "{e}"
    );
    // A policy that names no field is refused before anything is read.
    let e = crate::loader::first_error(
        Loader::builder(&table)
            .with_field("x")
            .with_null("depht", NullPolicy::Mask),
        "a policy for no field",
    );
    assert!(e.contains("'depht', which is not a field"), "{e}");
}

#[test]
fn a_column_added_later_reads_as_null_in_the_files_written_before_it() {
    let (_dir, table) = written("evolved");
    let builder = Loader::builder(&table)
        .with_field("x")
        .with_null("x", NullPolicy::Mask)
        .with_field("depth")
        .with_null("depth", NullPolicy::Mask);
    assert_eq!(
        rows_of(builder, &["x", "depth"]),
        [
            row(&["1.0", "null"]),
            row(&["2.0", "null"]),
            row(&["3.0", "null"]),
            row(&["4.0", "0.5"]),
            row(&["null", "1.5"]),
        ]
    );
    // Without a policy the first version-0 row is the error, by name.
    let e = crate::loader::first_error(
        Loader::builder(&table)
            .with_field("x")
            .with_null("x", NullPolicy::Mask)
            .with_field("depth"),
        "depth null in version 0's files",
    );
    assert!(e.contains("column 'depth'") && e.contains("is null"), "{e}");
}

#[test]
fn rows_a_filter_leaves_out_are_never_judged() {
    let (_dir, table) = written("evolved");
    // x is null in one row of version 1: the filter leaves it out, so no null is checked.
    let builder = Loader::builder(&table)
        .with_field("x")
        .with_filter("x IS NOT NULL");
    assert_eq!(
        rows_of(builder, &["x"]),
        [row(&["1.0"]), row(&["2.0"]), row(&["3.0"]), row(&["4.0"])]
    );
}

#[test]
fn an_empty_version_opens_and_reads_nothing() {
    let (_dir, table) = written("empty");
    let batches = crate::loader::collect(Loader::builder(&table).with_field("x"));
    assert!(batches.is_empty());
    let out = std::process::Command::new(voxlake_testkit::voxlake_bin())
        .args(["bench", &table, "--field", "x", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("has no data files"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        (report["samples"].as_u64(), report["batches"].as_u64()),
        (Some(0), Some(0))
    );
}

#[test]
fn a_widened_column_reads_widened_in_the_files_written_before() {
    // Version 0's file holds x int32 and y float32, version 2's x int64 and y float64: every row
    // reads as the Delta schema says (long, double), the older values cast exactly.
    let (_dir, table) = written("widened");
    let builder = Loader::builder(&table).with_field("x").with_field("y");
    assert_eq!(
        rows_of(builder, &["x", "y"]),
        [
            row(&["1", "0.5"]),
            row(&["1099511627776", "0.1"]),
            row(&["2", "1.5"]),
            row(&["3", "2.5"]),
        ]
    );
    let filtered = Loader::builder(&table)
        .with_field("x")
        .with_filter("x >= 3");
    assert_eq!(
        rows_of(filtered, &["x"]),
        [row(&["1099511627776"]), row(&["3"])]
    );
}

#[test]
fn a_struct_leaf_is_a_field_and_a_filter_column_by_its_dotted_path() {
    let (_dir, table) = written("nested");
    let builder = Loader::builder(&table)
        .with_field("x")
        .with_field("meta.depth")
        .with_null("meta.depth", NullPolicy::Mask)
        .with_field("meta.well")
        .with_null("meta.well", NullPolicy::Mask);
    // Row 3's struct is null: so are its leaves.
    assert_eq!(
        rows_of(builder, &["x", "meta.depth", "meta.well"]),
        [
            row(&["1.0", "1.5", "A"]),
            row(&["2.0", "null", "B"]),
            row(&["3.0", "null", "null"]),
        ]
    );
    let filtered = Loader::builder(&table)
        .with_field("x")
        .with_filter("meta.well = 'B' OR meta.depth > 1");
    assert_eq!(rows_of(filtered, &["x"]), [row(&["1.0"]), row(&["2.0"])]);
}

#[test]
fn a_partition_value_that_is_not_its_type_is_refused_never_read_as_null() {
    // The golden table with one add action's `as_date` rewritten to text no date parses as:
    // the Delta kernel refuses the log as the files are replayed (so no read or filter ever
    // sees it), named with the value and the version read (the latest, 0).
    let tmp = tempfile::tempdir().unwrap();
    let dir = unpack_golden("data-reader-partition-values", tmp.path()).unwrap();
    let table = dir.join("delta");
    let log = table.join("_delta_log").join("00000000000000000000.json");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(
        &log,
        text.replacen("\"as_date\":\"2021-09-08\"", "\"as_date\":\"someday\"", 1),
    )
    .unwrap();
    for builder in [
        Loader::builder(table.to_str().unwrap())
            .with_field("as_int")
            .with_field("as_date"),
        Loader::builder(table.to_str().unwrap())
            .with_field("as_int")
            .with_filter("as_date >= '2021-01-01'"),
    ] {
        let e = crate::loader::first_error(builder, "a date partition that is no date");
        assert!(
            e.contains("'someday' as 'date'") && e.contains("reading version 0"),
            "{e}"
        );
    }
}

#[test]
fn inspect_says_what_a_dates_and_a_timestamps_numbers_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = unpack_golden("data-reader-date-types-utc", tmp.path()).unwrap();
    let info = voxlake_testkit::json_output(
        std::process::Command::new(voxlake_testkit::compact_bin())
            .arg("inspect")
            .arg(dir.join("delta"))
            .args(["--field", "timestamp", "--field", "date", "--json"]),
    );
    let units: Vec<&str> = info["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["unit"].as_str().unwrap())
        .collect();
    assert_eq!(
        units,
        [
            "microseconds since 1970-01-01T00:00:00 UTC",
            "days since 1970-01-01"
        ]
    );
}
