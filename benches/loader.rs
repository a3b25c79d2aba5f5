//! criterion benches with throughput set: npy decode/convert, one row group → Arrow batch (the
//! voxlake layout from a local table and through a warm node cache, and the same rows as a LIST
//! of f32 and a `fixed_shape_tensor` of u8), the
//! loader end to end on a local table, the open of a log of 10⁴ one-file commits through
//! `ThrottledStore` (+20 ms a request), and `compact convert`.
//!
//! `cargo bench --bench loader` (release). Data is generated in a temporary folder first.

use std::path::PathBuf;

use arrow::record_batch::RecordBatch;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use voxlake::Loader;
use voxlake::compact::{Compactor, synth};
use voxlake::format::npy::{EncodeOptions, NpyArray, encode};
use voxlake::format::sample::ColumnHints;
use voxlake::format::{Casting, DType};
use voxlake::io::cache::CacheChoice;
use voxlake::table::{Scan, Snapshot, TableError, TableOptions};

struct Fixture {
    _dir: tempfile::TempDir,
    cubes: PathBuf,
    labels: PathBuf,
    table: String,
    count: usize,
}

fn fixture(runtime: &tokio::runtime::Runtime) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let count = 256;
    let data = synth::generate(dir.path(), count, 7).unwrap();
    let table = dir.path().join("table").to_string_lossy().into_owned();
    runtime
        .block_on(
            Compactor::new(&table)
                .with_labels(data.labels.to_string_lossy())
                .convert(&data.cubes.to_string_lossy()),
        )
        .unwrap();
    Fixture {
        cubes: data.cubes,
        labels: data.labels,
        table,
        count,
        _dir: dir,
    }
}

fn npy(c: &mut Criterion) {
    let (_, values) = synth::cube(1, 0);
    let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f64s: Vec<u8> = values
        .iter()
        .flat_map(|v| f64::from(*v).to_le_bytes())
        .collect();
    let shape = synth::REFERENCE_SHAPE;
    let cases = [
        (
            "f32 le C (copy)",
            encode(DType::F32, &shape, &le, EncodeOptions::default()),
            Casting::Safe,
        ),
        (
            "f32 be Fortran",
            encode(
                DType::F32,
                &shape,
                &le,
                EncodeOptions {
                    big_endian: true,
                    fortran_order: true,
                    version: 1,
                },
            ),
            Casting::Safe,
        ),
        (
            "f64 → f32",
            encode(DType::F64, &shape, &f64s, EncodeOptions::default()),
            Casting::SameKind,
        ),
    ];
    let mut group = c.benchmark_group("npy decode to f32");
    group.throughput(Throughput::Bytes(le.len() as u64));
    for (name, file, casting) in cases {
        let mut out = Vec::with_capacity(le.len());
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                NpyArray::parse(&file)
                    .unwrap()
                    .write_le_c(DType::F32, casting, &mut out)
                    .unwrap();
                std::hint::black_box(&out);
            })
        });
    }
    group.finish();
}

/// A scan of every row of the table at `location`, opened as `options` say.
async fn scan_of(location: &str, options: TableOptions) -> Result<Scan, TableError> {
    let snapshot = Snapshot::builder(location)
        .with_options(options)
        .build()
        .await?;
    std::sync::Arc::new(snapshot).scan_builder().build().await
}

fn row_group(c: &mut Criterion, runtime: &tokio::runtime::Runtime, f: &Fixture) {
    let snapshot = runtime
        .block_on(scan_of(&f.table, TableOptions::default()))
        .unwrap();
    let meta = runtime.block_on(snapshot.view_metadata(0)).unwrap();
    let rows = meta.metadata().row_group(0).num_rows() as u64;
    let columns = ["id", "label", "tensor"].map(String::from).to_vec();
    let projection = snapshot.snapshot().projection(&meta, &columns).unwrap();
    let mut group = c.benchmark_group("row group → Arrow (fetch + decode)");
    group.throughput(Throughput::Bytes(rows * 360_000));
    group.bench_function(BenchmarkId::new("local", format!("{rows} rows")), |b| {
        b.iter(|| {
            runtime
                .block_on(snapshot.read_row_group(0, 0, projection.clone()))
                .unwrap()
        })
    });
    // The same row group from a table in a store of its own (memory, named as an S3 bucket: a
    // remote table) through a warm node cache on local disk: a hit should cost a local read.
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = voxlake::io::cache::DiskCache::open(cache_dir.path(), 1 << 30).unwrap();
    let remote = runtime
        .block_on(scan_of(
            "s3://bench/table",
            TableOptions {
                root_store: Some(in_memory(runtime, &f.table, Some("table"))),
                cache: CacheChoice::Shared(cache.clone()),
                ..TableOptions::default()
            },
        ))
        .unwrap();
    let projection = remote
        .snapshot()
        .projection(
            &runtime.block_on(remote.view_metadata(0)).unwrap(),
            &columns,
        )
        .unwrap();
    runtime
        .block_on(remote.read_row_group(0, 0, projection.clone()))
        .unwrap();
    runtime.block_on(cache.flush());
    let hits = cache.stats().hits;
    group.bench_function(
        BenchmarkId::new("warm node cache", format!("{rows} rows")),
        |b| {
            b.iter(|| {
                runtime
                    .block_on(remote.read_row_group(0, 0, projection.clone()))
                    .unwrap()
            })
        },
    );
    assert!(cache.stats().hits > hits, "read from the cache");
    // The same rows in other tools' LIST encodings (decoded from their pages, then normalized).
    let projection = snapshot.snapshot().projection(&meta, &columns).unwrap();
    let native = runtime
        .block_on(snapshot.read_row_group(0, 0, projection.clone()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, shape, dtype) in [
        ("LIST<f32>", vec![30, 30, 10, 10], DType::F32),
        ("fixed_shape_tensor<u8>", vec![30, 30, 10, 40], DType::U8),
    ] {
        let table = list_table(&dir.path().join(dtype.name()), &native, dtype);
        let hints = ColumnHints::default().with_tensor_shape(shape, dtype);
        let snapshot = runtime
            .block_on(scan_of(
                &table,
                TableOptions {
                    hints,
                    ..TableOptions::default()
                },
            ))
            .unwrap();
        let meta = runtime.block_on(snapshot.view_metadata(0)).unwrap();
        let projection = snapshot.snapshot().projection(&meta, &columns).unwrap();
        group.bench_function(BenchmarkId::new(name, format!("{rows} rows")), |b| {
            b.iter(|| {
                runtime
                    .block_on(snapshot.read_row_group(0, 0, projection.clone()))
                    .unwrap()
            })
        });
    }
    group.finish();
}

/// `batch`'s rows (voxlake's layout) as one Parquet file in `dir` with the tensors as a LIST of
/// f32 (Spark's `array<float>`) or, for u8, a fixed-size list of the tensors' bytes (pyarrow's
/// `fixed_shape_tensor` of images); the folder's path.
fn list_table(dir: &std::path::Path, batch: &RecordBatch, dtype: DType) -> String {
    use arrow::array::{
        Array, ArrayRef, BinaryViewArray, FixedSizeListArray, Float32Array, ListArray, UInt8Array,
    };
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field};
    use std::sync::Arc;
    let tensors = batch
        .column_by_name("tensor")
        .unwrap()
        .as_any()
        .downcast_ref::<BinaryViewArray>()
        .unwrap();
    let bytes: Vec<u8> = tensors.iter().flat_map(|t| t.unwrap().to_vec()).collect();
    let rows = tensors.len();
    let list: ArrayRef = match dtype {
        DType::U8 => Arc::new(FixedSizeListArray::new(
            Arc::new(Field::new("element", DataType::UInt8, false)),
            (bytes.len() / rows) as i32,
            Arc::new(UInt8Array::from(bytes)),
            None,
        )),
        _ => {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Arc::new(ListArray::new(
                Arc::new(Field::new("element", DataType::Float32, false)),
                OffsetBuffer::from_lengths(vec![values.len() / rows; rows]),
                Arc::new(Float32Array::from(values)),
                None,
            ))
        }
    };
    let out = RecordBatch::try_from_iter([
        ("id", batch.column_by_name("id").unwrap().clone()),
        ("label", batch.column_by_name("label").unwrap().clone()),
        ("volume", list),
    ])
    .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let file = std::fs::File::create(dir.join("part-0.parquet")).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, out.schema(), None).unwrap();
    writer.write(&out).unwrap();
    writer.close().unwrap();
    dir.to_string_lossy().into_owned()
}

fn loader(c: &mut Criterion, f: &Fixture) {
    let mut group = c.benchmark_group("loader epoch, local, batches of 32");
    group.sample_size(10);
    group.throughput(Throughput::Elements(f.count as u64));
    for shuffle in [false, true] {
        group.bench_function(if shuffle { "shuffled" } else { "table order" }, |b| {
            b.iter(|| {
                let mut builder = Loader::builder(f.table.clone()).with_batch_size(32);
                if shuffle {
                    builder = builder.with_shuffle(1, 256);
                }
                let n: usize = builder.build().unwrap().map(|b| b.unwrap().len()).sum();
                assert_eq!(n, f.count);
            })
        });
    }
    group.finish();
}

/// A copy of the local table `table` in memory, under `under` (its absolute path where `None`):
/// a store that is not the local filesystem (ThrottledStore cannot wrap the local store: its
/// file payloads are unimplemented there).
fn in_memory(
    runtime: &tokio::runtime::Runtime,
    table: &str,
    under: Option<&str>,
) -> std::sync::Arc<object_store::memory::InMemory> {
    use object_store::ObjectStoreExt;
    let memory = object_store::memory::InMemory::new();
    for entry in walk(std::path::Path::new(table)) {
        let key = match under {
            Some(prefix) => {
                let relative = entry.strip_prefix(table).unwrap().to_str().unwrap();
                format!("{prefix}/{relative}")
            }
            None => entry.to_str().unwrap().trim_start_matches('/').to_string(),
        };
        let key = object_store::path::Path::from(key);
        runtime
            .block_on(memory.put(&key, std::fs::read(&entry).unwrap().into()))
            .unwrap();
    }
    std::sync::Arc::new(memory)
}

fn loader_latency(c: &mut Criterion, f: &Fixture) {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let memory = in_memory(&runtime, &f.table, None);
    let mut group =
        c.benchmark_group("loader epoch, in-memory store through ThrottledStore +20 ms per GET");
    group.sample_size(10);
    group.throughput(Throughput::Elements(f.count as u64));
    group.bench_function("shuffled", |b| {
        b.iter(|| {
            let slow = ThrottledStore::new(
                memory.clone(),
                ThrottleConfig {
                    wait_get_per_call: std::time::Duration::from_millis(20),
                    ..ThrottleConfig::default()
                },
            );
            let n: usize = Loader::builder(f.table.clone())
                .with_object_store(std::sync::Arc::new(slow))
                .with_batch_size(32)
                .with_shuffle(1, 256)
                .build()
                .unwrap()
                .map(|b| b.unwrap().len())
                .sum();
            assert_eq!(n, f.count);
        })
    });
    group.finish();
}

/// Opening a log of `COMMITS` one-file commits without a checkpoint (issue 30: ≤ 3 s at 20 ms)
/// through object_store's `ThrottledStore` over memory: +20 ms for every get and every listing
/// page of 1,000 (their 11 pages one after another), without the request-rate limit
/// of a local S3 server (benches/scale measures that one). The commits are the 1-cube table's
/// add action under 10⁴ names, each file a copy of its one data file.
fn log_open_latency(c: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    use object_store::{ObjectStoreExt, memory::InMemory, path::Path};
    const COMMITS: usize = 10_000;
    const LIST_PAGES: u64 = COMMITS as u64 / 1000 + 1;
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 1, 7).unwrap();
    let one = dir.path().join("one");
    runtime
        .block_on(Compactor::new(one.to_str().unwrap()).convert(&data.cubes.to_string_lossy()))
        .unwrap();
    // Its commits' actions (the table is created, then its file added).
    let mut commits: Vec<PathBuf> = walk(&one.join("_delta_log"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    let lines: Vec<serde_json::Value> = commits
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let add = lines.iter().find_map(|l| l.get("add")).unwrap().clone();
    let file = std::fs::read(one.join(add["path"].as_str().unwrap())).unwrap();
    // The table's folder exists (a local location); its objects are served from memory.
    let table = dir.path().join("commits");
    std::fs::create_dir(&table).unwrap();
    let root = Path::from(table.to_str().unwrap().trim_start_matches('/'));
    let memory = InMemory::new();
    let put = |key: Path, bytes: Vec<u8>| runtime.block_on(memory.put(&key, bytes.into())).unwrap();
    // The table's last protocol and metadata (a commit holds one of each).
    let last = |key: &str| lines.iter().rev().find(|l| l.get(key).is_some()).unwrap();
    let head = [last("protocol").to_string(), last("metaData").to_string()];
    put(
        Path::from(format!("{root}/_delta_log/{:020}.json", 0)),
        head.join("\n").into_bytes(),
    );
    for v in 1..=COMMITS {
        let name = format!("part-{v:06}.parquet");
        let mut action = add.clone();
        action["path"] = name.clone().into();
        let commit = serde_json::json!({ "add": action }).to_string();
        put(
            Path::from(format!("{root}/_delta_log/{v:020}.json")),
            commit.into_bytes(),
        );
        put(root.clone().join(name), file.clone());
    }
    let mut group = c.benchmark_group(format!(
        "open a log of {COMMITS} one-file commits, in-memory store through ThrottledStore +20 ms a request"
    ));
    group.sample_size(10);
    group.bench_function("Snapshot::builder(…).build()", |b| {
        b.iter(|| {
            let slow = ThrottledStore::new(
                memory.clone(),
                ThrottleConfig {
                    wait_get_per_call: std::time::Duration::from_millis(20),
                    // A listing's pages of 1,000 one after another (a wait per entry would
                    // sleep ~1 ms each: tokio's timer).
                    wait_list_per_call: std::time::Duration::from_millis(20 * LIST_PAGES),
                    ..ThrottleConfig::default()
                },
            );
            let snapshot = runtime
                .block_on(
                    Snapshot::builder(table.to_str().unwrap())
                        .with_object_store(std::sync::Arc::new(slow))
                        .build(),
                )
                .unwrap();
            assert_eq!(snapshot.files().len(), COMMITS);
        })
    });
    group.finish();
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn convert(c: &mut Criterion, runtime: &tokio::runtime::Runtime, f: &Fixture) {
    let mut group = c.benchmark_group("compact convert, local");
    group.sample_size(10);
    group.throughput(Throughput::Elements(f.count as u64));
    group.bench_function(format!("{} cubes", f.count), |b| {
        b.iter(|| {
            let out = tempfile::tempdir().unwrap();
            let table = out.path().join("t").to_string_lossy().into_owned();
            let s = runtime
                .block_on(
                    Compactor::new(&table)
                        .with_labels(f.labels.to_string_lossy())
                        .convert(&f.cubes.to_string_lossy()),
                )
                .unwrap();
            assert_eq!(s.rows, f.count);
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let f = fixture(&runtime);
    npy(c);
    row_group(c, &runtime, &f);
    loader(c, &f);
    loader_latency(c, &f);
    log_open_latency(c, &runtime);
    convert(c, &runtime, &f);
}

criterion_group!(loader_benches, benches);
criterion_main!(loader_benches);
