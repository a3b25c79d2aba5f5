//! The object store suite: the same conversion, streaming, fault and request-accounting tests
//! on every remote backend, each a real server on 127.0.0.1 started by scripts/test.sh (never
//! a mock): Azurite for Azure Blob, moto's S3 server for S3.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use voxlake::Loader;
use voxlake::compact::{Compactor, synth};
use voxlake::format::Layout;
use voxlake_testkit::{FaultPlan, FaultProxy, RandomFaults};

use voxlake_testkit::{compact_bin, cube_bytes, json_output};

/// The suite function `$suite` as one test per backend: `stores::$suite::azurite` and
/// `stores::$suite::s3` (multi-threaded: the proxy's tasks run while a test waits on a loader).
macro_rules! on_every_backend {
    ($suite:ident) => {
        mod $suite {
            use super::Backend;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn azurite() {
                super::$suite(Backend::Azurite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn s3() {
                super::$suite(Backend::S3).await;
            }
        }
    };
}

mod cache;
mod identity;
mod patches;
mod report;

/// The documented Azurite development key (public, emulator only).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The keys scripts/s3.sh created the bucket with (moto accepts any).
const S3_KEY_ID: &str = "voxlake";
const S3_SECRET: &str = "voxlake-secret";

/// A remote backend the suite runs on.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Azurite,
    S3,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test.sh (it starts Azurite and moto on 127.0.0.1)")
    })
}

impl Backend {
    /// The container or bucket scripts/test.sh created.
    fn bucket(self) -> String {
        match self {
            Backend::Azurite => env("VOXLAKE_AZURITE_CONTAINER"),
            Backend::S3 => env("VOXLAKE_S3_BUCKET"),
        }
    }

    fn scheme(self) -> &'static str {
        match self {
            Backend::Azurite => "az",
            Backend::S3 => "s3",
        }
    }

    /// The URL of `key` in the test bucket.
    fn url(self, key: &str) -> String {
        format!("{}://{}/{key}", self.scheme(), self.bucket())
    }

    /// The server's address.
    fn addr(self) -> SocketAddr {
        let url = match self {
            Backend::Azurite => env("AZURITE_BLOB_STORAGE_URL"),
            Backend::S3 => env("VOXLAKE_S3_ENDPOINT"),
        };
        url.trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap()
    }

    /// Storage options that reach the server at `addr` (the server itself or a proxy).
    fn options_at(self, addr: SocketAddr) -> HashMap<String, String> {
        let pairs: Vec<(&str, String)> = match self {
            Backend::Azurite => vec![
                ("azure_storage_account_name", "devstoreaccount1".into()),
                ("azure_storage_account_key", EMULATOR_KEY.into()),
                (
                    "azure_storage_endpoint",
                    format!("http://{addr}/devstoreaccount1"),
                ),
                ("allow_http", "true".into()),
            ],
            Backend::S3 => vec![
                ("aws_endpoint", format!("http://{addr}")),
                ("aws_allow_http", "true".into()),
                ("aws_access_key_id", S3_KEY_ID.into()),
                ("aws_secret_access_key", S3_SECRET.into()),
                ("aws_region", "us-east-1".into()),
            ],
        };
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// Storage options that reach the server directly.
    fn options(self) -> HashMap<String, String> {
        match self {
            // The emulator switch, as users of Azurite set it.
            Backend::Azurite => {
                HashMap::from([("azure_storage_use_emulator".to_string(), "true".to_string())])
            }
            Backend::S3 => self.options_at(self.addr()),
        }
    }

    /// Storage options that reach the server through `proxy`.
    fn through(self, proxy: &FaultProxy) -> HashMap<String, String> {
        self.options_at(proxy.addr())
    }

    /// The standard object_store environment variables that reach the server, for the CLI.
    fn standard_env(self) -> Vec<(&'static str, String)> {
        match self {
            Backend::Azurite => vec![("AZURE_STORAGE_USE_EMULATOR", "true".into())],
            Backend::S3 => vec![
                ("AWS_ENDPOINT_URL", format!("http://{}", self.addr())),
                ("AWS_ALLOW_HTTP", "true".into()),
                ("AWS_ACCESS_KEY_ID", S3_KEY_ID.into()),
                ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
                ("AWS_REGION", "us-east-1".into()),
            ],
        }
    }

    /// The raw bucket, for uploads.
    fn store(self) -> Arc<dyn ObjectStore> {
        let url = url::Url::parse(&self.url("")).unwrap();
        let (store, _) = object_store::parse_url_opts(&url, self.options()).unwrap();
        Arc::from(store)
    }
}

/// A `--storage-option-file` at `path` whose options reach the server through `proxy`.
fn options_file(backend: Backend, proxy: &FaultProxy, path: &Path) -> std::path::PathBuf {
    let lines: Vec<String> = backend
        .through(proxy)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    std::fs::write(path, lines.join("\n")).unwrap();
    path.to_path_buf()
}

/// Asserts that `ids` holds `count` ids, none twice.
fn assert_each_once(ids: &[String], count: usize, what: &str) {
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (count, count), "{what}");
}

/// A prefix of its own for each test, so tests share the bucket without clashing.
fn unique_prefix(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Uploads every file of `dir` under `prefix`.
async fn upload_dir(backend: Backend, dir: &Path, prefix: &str) {
    let store = backend.store();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let key = format!("{prefix}/{}", path.file_name().unwrap().to_str().unwrap());
        upload(store.as_ref(), &path, &key).await;
    }
}

async fn upload(store: &dyn ObjectStore, file: &Path, key: &str) {
    store
        .put(
            &StorePath::from(key),
            PutPayload::from(std::fs::read(file).unwrap()),
        )
        .await
        .unwrap();
}

/// `count` synthetic cubes of `seed` uploaded under a fresh prefix.
struct Uploaded {
    /// The prefix of this test in the bucket.
    prefix: String,
    /// The URL of the uploaded cubes.
    src: String,
    /// The URL where this test's table goes.
    table: String,
}

async fn uploaded(backend: Backend, name: &str, count: usize, seed: u64) -> Uploaded {
    let prefix = unique_prefix(name);
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), count, seed).unwrap();
    upload_dir(backend, &data.cubes, &format!("{prefix}/src")).await;
    Uploaded {
        src: backend.url(&format!("{prefix}/src")),
        table: backend.url(&format!("{prefix}/table")),
        prefix,
    }
}

/// A compactor writing each cube to a file of its own, in a commit of its own.
fn one_file_commits(table: &str, options: HashMap<String, String>) -> Compactor {
    Compactor::new(table)
        .with_storage_options(options)
        .with_layout(Layout {
            row_group_rows: 1,
            target_file_bytes: 30_000,
            ..Layout::default()
        })
        .with_files_per_commit(1)
}

/// A checkpoint of `table`'s latest version, written by deltalake.
async fn write_checkpoint(backend: Backend, table: &str) {
    let table = deltalake::DeltaTableBuilder::from_url(url::Url::parse(table).unwrap())
        .unwrap()
        .with_storage_options(backend.options())
        .load()
        .await
        .unwrap();
    deltalake::checkpoints::create_checkpoint(&table, None)
        .await
        .unwrap();
}

/// Small row groups and files, so a few dozen cubes make several of each.
fn small_layout() -> Layout {
    Layout {
        row_group_rows: 4,
        target_file_bytes: 3_000_000,
        ..Layout::default()
    }
}

/// Convert from the store into a table in the store, re-run (a no-op), inspect, stream it back
/// over two ranks, and inspect through the CLI with the standard environment variables.
async fn convert_and_stream(backend: Backend) {
    let prefix = unique_prefix("roundtrip");
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 30, 17).unwrap();
    upload_dir(backend, &data.cubes, &format!("{prefix}/src")).await;
    upload(
        backend.store().as_ref(),
        &data.labels,
        &format!("{prefix}/labels.csv"),
    )
    .await;

    let table = backend.url(&format!("{prefix}/table"));
    let c = Compactor::new(&table)
        .with_storage_options(backend.options())
        .with_labels(backend.url(&format!("{prefix}/labels.csv")))
        .with_layout(small_layout());
    let src = backend.url(&format!("{prefix}/src"));
    let s = c.convert(&src).await.unwrap();
    assert_eq!((s.rows, s.skipped.len()), (30, 0));
    assert!(s.parquet_files >= 3, "{s:?}");
    // Re-running is a no-op: the ids are read back from the table.
    let again = c.convert(&src).await.unwrap();
    assert_eq!(
        (again.rows, again.already_present, again.version),
        (0, 30, s.version)
    );
    let info = c.inspect().await.unwrap();
    assert_eq!((info.rows, info.files), (30, s.parquet_files));

    // Stream it back, shuffled, over two ranks: every row once, values exact.
    let mut seen = HashSet::new();
    for rank in 0..2 {
        let builder = Loader::builder(table.clone())
            .with_storage_options(backend.options())
            .with_batch_size(4)
            .with_shuffle(3, 8)
            .with_rank(rank, 2);
        let batches: Vec<_> = std::thread::spawn(move || {
            builder
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        for batch in batches {
            let t = batch.tensors.as_f32().unwrap();
            for (i, id) in batch.ids.iter().enumerate() {
                assert!(seen.insert(id.clone()), "{id} twice");
                let index: usize = id
                    .trim_start_matches("cube_")
                    .trim_end_matches(".npy")
                    .parse()
                    .unwrap();
                let (label, bytes) = cube_bytes(17, index);
                assert_eq!(batch.labels[i], Some(label));
                let got: Vec<u8> = t
                    .index_axis(ndarray::Axis(0), i)
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                assert!(got == bytes, "{id}: values differ");
            }
        }
    }
    assert_eq!(seen.len(), 30);

    // A trace of the first batches (`with_trace`): a span for each ranged request.
    let trace = dir.path().join("trace.json");
    let builder = Loader::builder(table.clone())
        .with_storage_options(backend.options())
        .with_batch_size(4)
        .with_trace(&trace)
        .with_trace_batches(3);
    std::thread::spawn(move || builder.build().unwrap().map(Result::unwrap).count())
        .join()
        .unwrap();
    let events: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let gets: Vec<_> = events
        .iter()
        .filter(|e| e["ph"] == "B" && e["name"] == "get")
        .collect();
    assert!(!gets.is_empty(), "{events:?}");
    for get in gets {
        // The object as the table names its files (relative to the table).
        let object = get["args"]["object"].as_str().unwrap();
        assert!(object.ends_with(".parquet"), "{get}");
        // tracing-chrome writes each argument as text.
        let bytes: u64 = get["args"]["bytes"].as_str().unwrap().parse().unwrap();
        assert!(bytes > 0, "{get}");
    }

    // The standard object_store variables work unchanged through the CLI.
    let v = json_output(
        Command::new(compact_bin())
            .args(["inspect", &table, "--json"])
            .envs(backend.standard_env()),
    );
    assert_eq!(v["rows"], 30);
}

on_every_backend!(convert_and_stream);

/// A bucket that does not exist: one clear, permanent error naming the URL, after exactly one
/// request (no retry storm); a table that is not there: named as such.
async fn permanent_errors(backend: Backend) {
    let Uploaded { prefix, .. } = uploaded(backend, "errors", 2, 1).await;

    // Through the proxy, to count the requests.
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let missing_bucket = format!("{}://no-such-bucket", backend.scheme());
    let e = Compactor::new(format!("{missing_bucket}/{prefix}/table"))
        .with_storage_options(backend.through(&proxy))
        .convert(&format!("{missing_bucket}/{prefix}/src"))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&missing_bucket), "{msg}");
    assert!(!e.is_transient(), "a missing bucket is permanent: {msg}");
    // The reachability probe's HEAD, then the source listing: each once, no retry.
    let requests: Vec<(String, String)> = proxy
        .requests()
        .into_iter()
        .map(|r| (r.method, r.target))
        .collect();
    let distinct: HashSet<&(String, String)> = requests.iter().collect();
    assert!(
        requests.len() <= 2 && distinct.len() == requests.len(),
        "no retry storm on a permanent error: {requests:?}"
    );

    // A table that is not there, for the loader.
    let missing = backend.url(&format!("{prefix}/nothing"));
    let options = backend.options();
    let e = std::thread::spawn(move || {
        Loader::builder(missing)
            .with_storage_options(options)
            .build()
            .unwrap_err()
    })
    .join()
    .unwrap()
    .to_string();
    assert!(
        e.contains("/nothing") && e.contains("nothing at this location"),
        "{e}"
    );
}

on_every_backend!(permanent_errors);

/// Bad credentials (Azurite checks the account key; moto accepts any key, so this one is
/// Azure only): the error names the location, never the key, and is permanent.
#[tokio::test]
async fn azurite_bad_credentials_are_named_without_the_secret() {
    let backend = Backend::Azurite;
    let Uploaded { src, table, .. } = uploaded(backend, "credentials", 2, 1).await;
    let mut bad = backend.options();
    let wrong_key = "d3Jvbmcga2V5IGZvciB0aGUgdGVzdA==";
    bad.insert("azure_storage_account_key".into(), wrong_key.into());
    let e = Compactor::new(&table)
        .with_storage_options(bad)
        .convert(&src)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&src), "{msg}");
    assert!(
        !msg.contains(wrong_key),
        "the key leaked into the error: {msg}"
    );
    assert!(!e.is_transient(), "{msg}");
}

/// A table of `count` cubes in the store, converted from them: 4-row row groups, ~3 MB files.
async fn remote_table(backend: Backend, name: &str, count: usize, seed: u64) -> Uploaded {
    let uploaded = uploaded(backend, name, count, seed).await;
    Compactor::new(&uploaded.table)
        .with_storage_options(backend.options())
        .with_layout(small_layout())
        .convert(&uploaded.src)
        .await
        .unwrap();
    uploaded
}

fn epoch_ids(table: &str, options: HashMap<String, String>, epochs: u64) -> Vec<String> {
    let builder = Loader::builder(table.to_string())
        .with_storage_options(options)
        .with_batch_size(4)
        .with_epochs(epochs)
        .with_shuffle(11, 8)
        // Every epoch reads the store (what these tests count), none kept in memory.
        .with_keep_row_groups(false);
    std::thread::spawn(move || {
        builder
            .build()
            .unwrap()
            .map(|b| b.unwrap().ids)
            .collect::<Vec<_>>()
            .concat()
    })
    .join()
    .unwrap()
}

/// Under resets mid-body, 503 and 500 bursts, truncated bodies and stalls, an epoch still delivers
/// every id exactly once.
async fn faults_are_survived(backend: Backend) {
    let table = remote_table(backend, "faults", 40, 23).await.table;
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            // Bursts of two: 503s from every 6th data read, 500s from every 11th.
            error_503_every: Some(6),
            error_500_every: Some(11),
            error_burst: 2,
            reset_every: Some(5),
            truncate_every: Some(7),
            stall_every: Some((9, Duration::from_millis(300))),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let ids = epoch_ids(&table, backend.through(&proxy), 1);
    assert!(
        proxy.faults() >= 5,
        "only {} faults injected",
        proxy.faults()
    );
    assert_each_once(&ids, 40, "every id exactly once despite the faults");
}

// Multi-threaded: the proxy's tasks must run while this thread waits for the loader.
on_every_backend!(faults_are_survived);

/// A data read that stalls (no answer for a minute) is dropped and asked again after about
/// twice the store's 99th-percentile answer time ([`voxlake::io::reask`]; 2 s before it is
/// measured): an epoch with every 10th data read stalled delivers every id once in a fraction of
/// one stall, and says how many reads it asked again.
async fn stalled_reads_are_asked_again(backend: Backend) {
    let table = remote_table(backend, "stalls", 40, 23).await.table;
    let stall = Duration::from_secs(60);
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            stall_every: Some((10, stall)),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let options = backend.through(&proxy);
    let (ids, reasked) = std::thread::spawn(move || {
        let mut loader = voxlake::Loader::builder(&table)
            .with_storage_options(options)
            .with_batch_size(1)
            .with_epochs(1)
            .build()
            .unwrap();
        let ids: Vec<String> = loader.by_ref().flat_map(|b| b.unwrap().ids).collect();
        (ids, loader.stats().stream.reasked)
    })
    .join()
    .unwrap();
    let took = started.elapsed();
    assert!(proxy.faults() >= 1, "no read stalled");
    assert_eq!(
        reasked,
        proxy.faults(),
        "each stalled read asked again once"
    );
    assert!(took < stall / 2, "{took:?}: a stall was waited out");
    assert_each_once(&ids, 40, "every id exactly once");
}

on_every_backend!(stalled_reads_are_asked_again);

/// A commit whose reply is lost (the store wrote `_delta_log/…1.json`, the connection was
/// reset before its answer): `convert` finds its own transaction in the log and reports that
/// version — no failure, no second commit of the same files, every id once.
async fn a_lost_commit_reply_is_found_in_the_log(backend: Backend) {
    let uploaded = uploaded(backend, "lost-reply", 12, 31).await;
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            lose_reply: Some("_delta_log/00000000000000000001.json".into()),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let summary = Compactor::new(&uploaded.table)
        .with_storage_options(backend.through(&proxy))
        .with_layout(small_layout())
        .convert(&uploaded.src)
        .await
        .unwrap();
    assert_eq!(proxy.faults(), 1, "the reply was lost");
    assert_eq!((summary.rows, summary.version), (12, 1), "{summary:?}");
    let log: Vec<String> = backend
        .store()
        .list(Some(&object_store::path::Path::from(format!(
            "{}/table/_delta_log",
            uploaded.prefix
        ))))
        .map_ok(|m| m.location.filename().unwrap().to_string())
        .try_collect()
        .await
        .unwrap();
    assert!(
        !log.iter().any(|f| f.starts_with("00000000000000000002")),
        "committed twice: {log:?}"
    );
    let ids = epoch_ids(&uploaded.table, backend.options(), 1);
    assert_each_once(&ids, 12, "every id exactly once");
}

on_every_backend!(a_lost_commit_reply_is_found_in_the_log);

/// compact's appends write the log and read nothing back (compact's `commit.rs`): 24 one-file
/// commits through the proxy read `_delta_log` (listings, commits, `_last_checkpoint`) as often
/// as opening and creating the table takes, where deltalake's own path listed the log and read
/// each new commit back after every commit (about 4 requests a commit, growing listings).
async fn appends_do_not_read_the_log_back(backend: Backend) {
    let commits = 24;
    let uploaded = uploaded(backend, "append-cost", commits, 37).await;
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let summary = one_file_commits(&uploaded.table, backend.through(&proxy))
        .convert(&uploaded.src)
        .await
        .unwrap();
    assert_eq!(
        (summary.commits, summary.version),
        (commits, commits as u64)
    );
    let log_reads: Vec<String> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("_delta_log") && matches!(r.method.as_str(), "GET" | "HEAD"))
        .map(|r| format!("{} {}", r.method, r.target))
        .collect();
    assert!(
        log_reads.len() <= 12,
        "{} log reads for {commits} commits: {log_reads:#?}",
        log_reads.len()
    );
    let ids = epoch_ids(&uploaded.table, backend.options(), 1);
    assert_each_once(&ids, commits, "every id exactly once");
}

on_every_backend!(appends_do_not_read_the_log_back);

/// A small data file (at most 256 KiB) is read whole in one request: its footer is parsed from
/// it and its row group cut from the same bytes (`table/snapshot/small.rs`). 24 one-row files
/// of 8 f32: an epoch asks the proxy for each data file once, where it asked twice (footer,
/// then row group); every row is delivered once with its values.
async fn a_small_file_is_read_in_one_request(backend: Backend) {
    use voxlake::format::DType;
    use voxlake::format::npy::{EncodeOptions, encode};
    let count = 24;
    let prefix = unique_prefix("small-files");
    let store = backend.store();
    for i in 0..count {
        let values: Vec<u8> = (0..8)
            .flat_map(|k| ((i * 8 + k) as f32).to_le_bytes())
            .collect();
        let npy = encode(DType::F32, &[8], &values, EncodeOptions::default());
        store
            .put(
                &StorePath::from(format!("{prefix}/src/v{i:03}.npy")),
                PutPayload::from(npy),
            )
            .await
            .unwrap();
    }
    let (src, table) = (
        backend.url(&format!("{prefix}/src")),
        backend.url(&format!("{prefix}/table")),
    );
    Compactor::new(&table)
        .with_storage_options(backend.options())
        .with_layout(Layout {
            row_group_rows: 1,
            target_file_bytes: 1,
            ..Layout::default()
        })
        .convert(&src)
        .await
        .unwrap();
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let options = backend.through(&proxy);
    let (ids, sums) = std::thread::spawn(move || {
        let loader = Loader::builder(table)
            .with_storage_options(options)
            .with_cache_choice(voxlake::io::cache::CacheChoice::Off)
            .with_batch_size(5)
            .build()
            .unwrap();
        let (mut ids, mut sums) = (Vec::new(), Vec::new());
        for batch in loader {
            let batch = batch.unwrap();
            let values = batch.tensors.as_bytes().unwrap().to_vec();
            for (j, id) in batch.ids.iter().enumerate() {
                let row = &values[j * 32..(j + 1) * 32];
                sums.push((id.clone(), row.to_vec()));
            }
            ids.extend(batch.ids);
        }
        (ids, sums)
    })
    .join()
    .unwrap();
    assert_each_once(&ids, count, "every row once");
    for (id, row) in sums {
        let i: usize = id
            .trim_start_matches('v')
            .trim_end_matches(".npy")
            .parse()
            .unwrap();
        let want: Vec<u8> = (0..8)
            .flat_map(|k| ((i * 8 + k) as f32).to_le_bytes())
            .collect();
        assert_eq!(row, want, "{id}");
    }
    let mut reads: HashMap<String, usize> = HashMap::new();
    for r in proxy.requests() {
        if r.method == "GET" && r.target.split('?').next().unwrap().ends_with(".parquet") {
            *reads.entry(r.target.clone()).or_default() += 1;
        }
    }
    assert_eq!(reads.len(), count, "one file a row: {reads:#?}");
    assert!(
        reads.values().all(|&n| n == 1),
        "each small file read in one request: {reads:#?}"
    );
}

on_every_backend!(a_small_file_is_read_in_one_request);

/// `compact convert` with a fifth of *every* request faulted (listings, source and data
/// uploads, log reads, commits; seeded): it commits in windows, so a run that fails keeps what it
/// committed and the next run converts only the rest. Run until one succeeds (at most five
/// runs): every id lands exactly once, every failure is one named error, and nothing panics.
async fn convert_under_faults_on_every_request_finishes(backend: Backend) {
    let count = 24;
    let Uploaded { src, table, .. } = uploaded(backend, "convert-faults", count, 53).await;
    let dir = tempfile::tempdir().unwrap();
    let mut outcomes = Vec::new();
    for seed in 0..5u64 {
        let proxy = FaultProxy::start(
            backend.addr(),
            FaultPlan {
                every_request: true,
                random: Some(RandomFaults {
                    seed: 100 + seed,
                    rate: 0.2,
                    burst: 1,
                    stall: Duration::from_millis(100),
                }),
                ..FaultPlan::default()
            },
        )
        .await
        .unwrap();
        let options = options_file(backend, &proxy, &dir.path().join(format!("options-{seed}")));
        let out = tokio::task::spawn_blocking({
            let (src, table) = (src.clone(), table.clone());
            move || {
                Command::new(compact_bin())
                    .args(["convert", &src, &table])
                    .args(["--row-group-rows", "2", "--target-file-mb", "1.5"])
                    .args(["--files-per-commit", "1"])
                    .arg("--storage-option-file")
                    .arg(&options)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !stderr.contains("panicked"),
            "seed {seed}: panic text on stderr:\n{stderr}"
        );
        assert!(proxy.faults() > 0, "seed {seed}: no fault injected");
        let ok = out.status.success();
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        outcomes.push((seed, ok, proxy.faults(), last.to_string()));
        if ok {
            break;
        }
        assert!(last.contains("error"), "seed {seed}: {stderr}");
    }
    eprintln!("{backend:?}: runs (seed, finished, faults, last line): {outcomes:?}");
    assert!(
        outcomes.last().is_some_and(|o| o.1),
        "no run finished: {outcomes:?}"
    );
    let ids = epoch_ids(&table, backend.options(), 1);
    assert_each_once(
        &ids,
        count,
        &format!("every id exactly once after {outcomes:?}"),
    );
}

on_every_backend!(convert_under_faults_on_every_request_finishes);

/// A job's version agreed beside a table in the store: the first rank publishes it in
/// `_voxlake/jobs/<job>.json`, and a rank of the same job opening after another commit landed
/// reads the job's version (found before it opens anything), while a rank of no job reads the
/// latest.
async fn a_jobs_version_is_pinned_in_the_store(backend: Backend) {
    let Uploaded { src, table, prefix } = uploaded(backend, "job-pin", 12, 67).await;
    let convert = |shard| {
        let (src, table) = (src.clone(), table.clone());
        async move {
            Compactor::new(&table)
                .with_storage_options(backend.options())
                .with_layout(small_layout())
                .with_shard(shard, 2)
                .convert(&src)
                .await
        }
    };
    convert(0).await.unwrap();
    let version = |job: Option<&str>| {
        let mut builder = Loader::builder(table.clone()).with_storage_options(backend.options());
        if let Some(job) = job {
            // A rank of two: a job of one rank has nothing to agree on and writes nothing.
            builder = builder.with_job(job).with_rank(0, 2);
        }
        std::thread::spawn(move || builder.build().unwrap().version())
            .join()
            .unwrap()
    };
    let first = version(Some("job-remote"));
    convert(1).await.unwrap();
    assert_eq!(version(Some("job-remote")), first, "the job's version");
    assert!(
        version(None) > first,
        "no commit landed after the agreement"
    );
    let marker = backend
        .store()
        .get(&StorePath::from(format!(
            "{prefix}/table/_voxlake/jobs/job-remote.json"
        )))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let marker: serde_json::Value = serde_json::from_slice(&marker).unwrap();
    assert_eq!(marker["version"].as_u64(), Some(first));
    // Through a node's cache the job's version is kept for the node's ranks, and still checked
    // against the marker: a marker removed since (the job restarted under its id) is not
    // overruled by what the node kept.
    let cache = tempfile::tempdir().unwrap();
    let cached = |job: &str| {
        let builder = Loader::builder(table.clone())
            .with_storage_options(backend.options())
            .with_cache(cache.path(), 1 << 30)
            .with_job(job)
            .with_rank(1, 2);
        std::thread::spawn(move || builder.build().unwrap().version())
            .join()
            .unwrap()
    };
    assert_eq!(cached("job-remote"), first, "the marker's version");
    assert_eq!(
        cached("job-remote"),
        first,
        "kept by the node, as the marker says"
    );
    backend
        .store()
        .delete(&StorePath::from(format!(
            "{prefix}/table/_voxlake/jobs/job-remote.json"
        )))
        .await
        .unwrap();
    let latest = version(None);
    assert!(latest > first);
    assert_eq!(
        cached("job-remote"),
        latest,
        "the marker gone: resolved again, not the node's kept version"
    );
}

on_every_backend!(a_jobs_version_is_pinned_in_the_store);

/// The store away for 8 s mid-epoch (every request answered 503, of any kind): with the default
/// settings the epoch rides it out — retries are measured in time, not in tries — and delivers
/// every id exactly once.
async fn a_store_away_for_seconds_is_ridden_out(backend: Backend) {
    let table = remote_table(backend, "outage", 40, 23).await.table;
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            outage: Some((4, Duration::from_secs(8))),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let ids = epoch_ids(&table, backend.through(&proxy), 1);
    assert!(
        proxy.faults() >= 10,
        "only {} faults injected",
        proxy.faults()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(7),
        "{:?}",
        started.elapsed()
    );
    assert_each_once(&ids, 40, "every id exactly once");
}

on_every_backend!(a_store_away_for_seconds_is_ridden_out);

/// Resets mid-body, truncated bodies, 5xx and stalls on a fifth of *every* request — the
/// reachability probe, the log's listing, `_last_checkpoint`, commits, footers and data —
/// seeded: the open and the epoch succeed and deliver every id once. object_store re-reads a
/// `get` body that breaks and retries failed requests, for as long as `with_retry_defaults`
/// says; a listing whose body breaks is started over by `voxlake_io::RetryListings`.
async fn faults_on_every_request_kind_are_survived(backend: Backend) {
    let table = remote_table(backend, "every-request", 40, 23).await.table;
    for seed in [11, 12, 13] {
        let proxy = FaultProxy::start(
            backend.addr(),
            FaultPlan {
                every_request: true,
                random: Some(RandomFaults {
                    seed,
                    rate: 0.2,
                    burst: 1,
                    stall: Duration::from_millis(200),
                }),
                ..FaultPlan::default()
            },
        )
        .await
        .unwrap();
        let ids = epoch_ids(&table, backend.through(&proxy), 1);
        let logged = proxy.requests();
        let log_reads = logged
            .iter()
            .filter(|r| r.target.contains("_delta_log"))
            .count();
        assert!(
            log_reads > 0 && proxy.faults() > 0,
            "seed {seed}: {} faults",
            proxy.faults()
        );
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(
            (ids.len(), unique.len()),
            (40, 40),
            "seed {seed}: every id exactly once"
        );
    }
}

on_every_backend!(faults_on_every_request_kind_are_survived);

/// Faults drawn at random (seeded: 503/500 bursts, resets, truncated bodies, stalls) over three
/// epochs: every id once per epoch. With one retry and a high rate, the run ends in one error,
/// the last item, naming the table, and no id came twice before it.
async fn random_faults_over_epochs(backend: Backend) {
    let uploaded = remote_table(backend, "random-faults", 24, 29).await;
    let table = uploaded.table;
    let run = |options: HashMap<String, String>| {
        let builder = Loader::builder(table.clone())
            .with_storage_options(options)
            .with_batch_size(4)
            .with_epochs(3)
            .with_shuffle(5, 8)
            // Every epoch reads through the faults, none kept in memory.
            .with_keep_row_groups(false);
        std::thread::spawn(move || builder.build().unwrap().collect::<Vec<_>>())
            .join()
            .unwrap()
    };
    let plan = |seed, rate| FaultPlan {
        random: Some(RandomFaults {
            seed,
            rate,
            burst: 2,
            stall: Duration::from_millis(200),
        }),
        ..FaultPlan::default()
    };
    for seed in [1, 2] {
        let proxy = FaultProxy::start(backend.addr(), plan(seed, 0.3))
            .await
            .unwrap();
        let results = run(backend.through(&proxy));
        let mut per_epoch: HashMap<u64, Vec<String>> = HashMap::new();
        for batch in results {
            let batch = batch.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            per_epoch.entry(batch.epoch).or_default().extend(batch.ids);
        }
        assert!(
            proxy.faults() >= 3,
            "seed {seed}: {} faults",
            proxy.faults()
        );
        for epoch in 0..3 {
            let ids = &per_epoch[&epoch];
            let unique: HashSet<&String> = ids.iter().collect();
            assert_eq!(
                (ids.len(), unique.len()),
                (24, 24),
                "seed {seed} epoch {epoch}"
            );
        }
    }
    // Retries that run out: a clear error, never a short epoch that looks complete.
    let proxy = FaultProxy::start(backend.addr(), plan(3, 0.9))
        .await
        .unwrap();
    let mut options = backend.through(&proxy);
    options.insert("max_retries".into(), "1".into());
    options.insert("retry_timeout".into(), "2s".into());
    let results = run(options);
    let (last, before) = results.split_last().expect("at least an error");
    let e = last
        .as_ref()
        .expect_err("the run ends in an error")
        .to_string();
    assert!(e.contains("random-faults"), "names the table: {e}");
    let mut seen = HashSet::new();
    for batch in before {
        let batch = batch.as_ref().expect("one error, at the end");
        for id in &batch.ids {
            assert!(seen.insert((batch.epoch, id.clone())), "{id} twice");
        }
    }
}

on_every_backend!(random_faults_over_epochs);

/// A proxy that counts the requests to `backend`, options that go through it, and a scan of
/// `table` opened through it.
async fn counted(
    backend: Backend,
    table: &str,
) -> (FaultProxy, HashMap<String, String>, voxlake::table::Scan) {
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let opts = backend.through(&proxy);
    let snapshot = voxlake::table::Snapshot::builder(table)
        .with_storage_options(opts.clone())
        .build()
        .await
        .unwrap();
    let scan = Arc::new(snapshot).scan_builder().build().await.unwrap();
    (proxy, opts, scan)
}

/// Over two epochs: only bounded range GETs on data files (no HEAD, no whole-object GET, no
/// suffix range), one footer read per file, one coalesced read per row group per epoch.
async fn reads_are_accounted(backend: Backend) {
    let table = remote_table(backend, "accounting", 32, 29).await.table;
    let (proxy, opts, snapshot) = counted(backend, &table).await;
    let files = snapshot.files().len() as u64;
    let row_groups: u64 = 32 / 4;
    drop(snapshot);
    let before = proxy.requests().len();
    let ids = epoch_ids(&table, opts, 2);
    assert_eq!(ids.len(), 64);
    let data: Vec<_> = proxy.requests()[before..]
        .iter()
        .filter(|r| r.target.contains(".parquet"))
        .cloned()
        .collect();
    assert!(
        data.iter().all(|r| r.method == "GET"),
        "only GETs on data files: {data:?}"
    );
    assert!(
        data.iter()
            .all(|r| r.range.as_deref().is_some_and(|g| !g.contains("=-"))),
        "every data read is a bounded range (no whole-object GET, no suffix range): {data:?}"
    );
    assert_eq!(data.len() as u64, files + 2 * row_groups, "{data:#?}");
}

on_every_backend!(reads_are_accounted);

/// One open asks `_last_checkpoint` once, lists `_delta_log` once (both at once) and fetches
/// each commit at most once, whether voxlake reads the log (commits only:
/// `delta/read/commits.rs`) or leaves it to the kernel (a checkpoint): what the commit reader saw
/// is handed on, not asked again.
async fn an_open_asks_each_log_question_once(backend: Backend) {
    let count = 6;
    let uploaded = uploaded(backend, "log-questions", count, 43).await;
    one_file_commits(&uploaded.table, backend.options())
        .convert(&uploaded.src)
        .await
        .unwrap();
    for checkpoint in [false, true] {
        if checkpoint {
            write_checkpoint(backend, &uploaded.table).await;
        }
        // Each request held 50 ms: "asked at once" is each asked before the other was
        // answered, whatever a connection's set-up costs.
        let held = FaultPlan {
            latency: std::time::Duration::from_millis(50),
            ..FaultPlan::default()
        };
        let proxy = FaultProxy::start(backend.addr(), held.clone())
            .await
            .unwrap();
        let options = voxlake::table::TableOptions {
            storage_options: backend.through(&proxy),
            ..Default::default()
        };
        let snapshot = voxlake::table::Snapshot::builder(&uploaded.table)
            .with_options(options)
            .build()
            .await
            .unwrap();
        assert_eq!(snapshot.files().len(), count, "checkpoint {checkpoint}");
        let mut asked: HashMap<String, usize> = HashMap::new();
        for r in proxy.requests() {
            let listing = r.target.contains("prefix=");
            let question = if r.target.contains("_last_checkpoint") {
                "_last_checkpoint".to_string()
            } else if listing && r.target.contains("_delta_log") {
                "listing".to_string()
            } else if !listing && r.target.contains("_delta_log") {
                format!("{} {} {:?}", r.method, r.target, r.range)
            } else {
                continue;
            };
            *asked.entry(question).or_default() += 1;
        }
        // Asked at once: the listing before `_last_checkpoint` was answered (one round trip).
        let requests = proxy.requests();
        let hint = requests
            .iter()
            .find(|r| r.target.contains("_last_checkpoint"))
            .expect("_last_checkpoint asked");
        let listing = requests
            .iter()
            .find(|r| r.target.contains("prefix=") && r.target.contains("_delta_log"))
            .expect("_delta_log listed");
        assert!(
            listing.at < hint.answered.unwrap(),
            "the listing waited for _last_checkpoint: {listing:?} {hint:?}"
        );
        assert_eq!(asked.get("_last_checkpoint"), Some(&1), "{asked:#?}");
        assert_eq!(asked.get("listing"), Some(&1), "{asked:#?}");
        assert!(asked.values().all(|&n| n == 1), "{asked:#?}");
        // Without a checkpoint every commit is read (by voxlake); with one, the checkpoint.
        let commits = asked.keys().filter(|k| k.contains(".json")).count();
        match checkpoint {
            false => assert_eq!(commits, count + 1, "{asked:#?}"),
            // Its reads in one request: listed first, its size known, so the memo's window
            // (this small checkpoint falls within the last MiB) answers them all.
            true => assert_eq!(
                asked
                    .keys()
                    .filter(|k| k.contains(".checkpoint.parquet"))
                    .count(),
                1,
                "{asked:#?}"
            ),
        }
        // A rank of a job asks for the job's marker and the log's two questions at once (one
        // round trip, `agree::open_for_job`), and the open asks neither again.
        let proxy = FaultProxy::start(backend.addr(), held).await.unwrap();
        let options = voxlake::table::TableOptions {
            storage_options: backend.through(&proxy),
            job: Some(format!("log-questions-{checkpoint}").into()),
            ..Default::default()
        };
        let snapshot = voxlake::table::Snapshot::builder(&uploaded.table)
            .with_options(options)
            .build()
            .await
            .unwrap();
        assert_eq!(snapshot.files().len(), count);
        let requests = proxy.requests();
        let find = |what: &dyn Fn(&str) -> bool| {
            let found: Vec<_> = requests
                .iter()
                .filter(|r| r.method != "PUT" && what(&r.target))
                .collect();
            assert_eq!(found.len(), 1, "{found:#?}");
            found[0].clone()
        };
        let marker = find(&|t| t.contains("_voxlake/jobs/"));
        let hint = find(&|t| t.contains("_last_checkpoint"));
        let listing = find(&|t| t.contains("prefix=") && t.contains("_delta_log"));
        for (one, other) in [(&marker, &hint), (&marker, &listing), (&hint, &listing)] {
            assert!(
                one.at < other.answered.unwrap() && other.at < one.answered.unwrap(),
                "not asked at once: {one:?} {other:?}"
            );
        }
    }
}

on_every_backend!(an_open_asks_each_log_question_once);

/// A LIST tensor column on a remote store (pyarrow's `fixed_shape_tensor`, decoded from its
/// pages): every value arrives, one footer read per file and one ranged GET per row group (the
/// tensor chunk and the other columns read together, not two requests).
async fn list_tables_read_each_row_group_once(backend: Backend) {
    let prefix = unique_prefix("list");
    let fixture = crate::foreign::fixture("pyarrow_tensor");
    upload_dir(backend, Path::new(&fixture), &prefix).await;
    let table = backend.url(&prefix);
    let (proxy, opts, snapshot) = counted(backend, &table).await;
    let files = snapshot.files().len() as u64;
    let mut row_groups = 0;
    for i in 0..snapshot.files().len() {
        row_groups += snapshot.footer(i).await.unwrap().num_row_groups() as u64;
    }
    drop(snapshot);
    assert!(
        row_groups > files,
        "the fixture has files of several row groups"
    );
    let before = proxy.requests().len();
    let builder = Loader::builder(table)
        .with_storage_options(opts)
        .with_id_column("sample")
        .with_label_column("target")
        .with_batch_size(4)
        .with_shuffle(5, 8);
    let batches = crate::loader::collect(builder);
    let expected = crate::foreign::expected(voxlake::format::DType::F32);
    let mut cubes = crate::foreign::check_cubes("pyarrow_tensor", &batches, &expected);
    cubes.sort_unstable();
    assert_eq!(cubes, (0..expected.len()).collect::<Vec<_>>());
    let data = proxy.requests()[before..]
        .iter()
        .filter(|r| r.target.contains(".parquet"))
        .count() as u64;
    assert_eq!(
        data,
        files + row_groups,
        "{:#?}",
        &proxy.requests()[before..]
    );
}

on_every_backend!(list_tables_read_each_row_group_once);

/// A table of `np.save` rows (Petastorm's codec) with one 14 MB row group on a remote store:
/// the open learns the shape from the first value's pages (at most a few MiB read, not the
/// whole tensor chunk); every cube then reads back value for value.
async fn npy_tables_open_without_reading_a_row_group(backend: Backend) {
    use arrow::array::{BinaryArray, RecordBatch, StringArray};
    let (count, seed) = (40, 17);
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), count, seed).unwrap();
    let names: Vec<String> = (0..count).map(synth::cube_name).collect();
    let blobs: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(data.cubes.join(n)).unwrap())
        .collect();
    let batch = RecordBatch::try_from_iter([
        ("sample", Arc::new(StringArray::from(names.clone())) as _),
        (
            "cube",
            Arc::new(BinaryArray::from_iter_values(blobs.iter())) as _,
        ),
    ])
    .unwrap();
    let mut file = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let prefix = unique_prefix("npy-open");
    backend
        .store()
        .put(
            &StorePath::from(format!("{prefix}/part-00000.parquet")),
            PutPayload::from(file.clone()),
        )
        .await
        .unwrap();
    let table = backend.url(&prefix);
    let (proxy, opts, snapshot) = counted(backend, &table).await;
    assert_eq!(snapshot.snapshot().spec().shape(), [30, 30, 10, 10]);
    let footer = snapshot.footer(0).await.unwrap();
    assert_eq!(footer.num_row_groups(), 1);
    let chunk = footer.row_group(0).column(1).byte_range().1;
    assert!(chunk > 14_000_000, "one large tensor chunk: {chunk}");
    drop(snapshot);
    let read: u64 = proxy
        .requests()
        .iter()
        .filter(|r| r.target.contains(".parquet"))
        .filter_map(|r| {
            let range = r.range.as_deref()?.strip_prefix("bytes=")?;
            let (a, b) = range.split_once('-')?;
            Some(b.parse::<u64>().ok()? + 1 - a.parse::<u64>().ok()?)
        })
        .sum();
    assert!(
        read < 4 << 20,
        "the open read {read} bytes of a {chunk}-byte chunk"
    );
    let builder = Loader::builder(table)
        .with_storage_options(opts)
        .with_id_column("sample")
        .with_batch_size(8);
    let batches = crate::loader::collect(builder);
    let mut seen = 0;
    for b in &batches {
        let bytes = b.tensors.as_bytes().unwrap();
        let per = bytes.len() / b.len();
        for (i, id) in b.ids.iter().enumerate() {
            let n = names.iter().position(|x| x == id).unwrap();
            assert!(
                bytes[i * per..(i + 1) * per] == cube_bytes(seed, n).1[..],
                "{id}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, count);
}

on_every_backend!(npy_tables_open_without_reading_a_row_group);

/// The proxy's bandwidth limit paces bodies: 2 MB at 8 MB/s cannot arrive in under 0.25 s (a
/// lower bound the pacing guarantees, not a speed target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_bandwidth_limit_paces_bodies() {
    let backend = Backend::Azurite;
    let key = format!("{}/blob", unique_prefix("bandwidth"));
    let body: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    backend
        .store()
        .put(
            &StorePath::from(key.as_str()),
            PutPayload::from(body.clone()),
        )
        .await
        .unwrap();
    let proxy = FaultProxy::start(
        backend.addr(),
        FaultPlan {
            bytes_per_second: Some(8_000_000),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let url = url::Url::parse(&backend.url("")).unwrap();
    let (store, _) = object_store::parse_url_opts(&url, backend.through(&proxy)).unwrap();
    let start = std::time::Instant::now();
    let got = store
        .get_range(&StorePath::from(key.as_str()), 0..2_000_000)
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert!(got.as_ref() == body.as_slice(), "the body arrives intact");
    assert!(
        elapsed >= Duration::from_millis(250),
        "2 MB at 8 MB/s took {elapsed:?}"
    );
}

/// Streams `table` through a proxy injecting `plan`, with `settings` added to the storage
/// options; returns the first error (no read may succeed) and the proxy, for its counts.
async fn first_error_through(
    backend: Backend,
    table: &str,
    plan: FaultPlan,
    settings: &[(&str, &str)],
) -> (voxlake::loader::LoaderError, FaultProxy) {
    let proxy = FaultProxy::start(backend.addr(), plan).await.unwrap();
    let mut options = backend.through(&proxy);
    for (k, v) in settings {
        options.insert(k.to_string(), v.to_string());
    }
    let table = table.to_string();
    let error = std::thread::spawn(move || {
        match Loader::builder(table).with_storage_options(options).build() {
            Err(e) => e,
            Ok(mut loader) => loader.find_map(Result::err).expect("no read can succeed"),
        }
    })
    .join()
    .unwrap();
    (error, proxy)
}

/// The retry settings (deltalake's `max_retries`, `retry_timeout`, `backoff_config.*`) reach the
/// reads: with every data read answered 503 and two retries allowed, the loader gives up after
/// exactly three attempts, with a transient error naming the table.
async fn retry_settings_apply(backend: Backend) {
    let table = remote_table(backend, "retries", 8, 31).await.table;
    let plan = FaultPlan {
        error_503_every: Some(1),
        ..FaultPlan::default()
    };
    let settings = [
        ("max_retries", "2"),
        ("retry_timeout", "30s"),
        ("backoff_config.init_backoff", "10ms"),
        ("backoff_config.max_backoff", "20ms"),
    ];
    let (error, proxy) = first_error_through(backend, &table, plan, &settings).await;
    let msg = error.to_string();
    assert!(error.is_transient(), "{msg}");
    assert!(msg.contains(&table) && msg.contains("503"), "{msg}");
    assert_eq!(proxy.data_reads(), 3, "one read and two retries: {msg}");

    // A setting that does not parse is named.
    let mut bad = backend.options();
    bad.insert("max_retries".into(), "lots".into());
    let e = Compactor::new(&table)
        .with_storage_options(bad)
        .convert(&backend.url("nowhere"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_retries") && e.contains("lots"), "{e}");
}

on_every_backend!(retry_settings_apply);

/// An endpoint that does not answer ends in one clear error naming the location, after a few
/// quick attempts (not object_store's full retry budget): a closed port, and a server that
/// accepts connections and closes them without a word (its connections are counted).
async fn unreachable_endpoints_fail_fast(backend: Backend) {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let table = backend.url(&format!("{}/table", unique_prefix("unreachable")));
    let (t, options) = (table.clone(), backend.options_at(closed));
    let e = std::thread::spawn(move || {
        Loader::builder(t)
            .with_storage_options(options)
            .build()
            .unwrap_err()
            .to_string()
    })
    .join()
    .unwrap();
    assert!(e.contains("cannot reach") && e.contains(&table), "{e}");

    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let server = tokio::spawn(async move {
        while let Ok((socket, _)) = silent.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
            drop(socket);
        }
    });
    let src = backend.url("src");
    let e = Compactor::new(&table)
        .with_storage_options(backend.options_at(silent_addr))
        .convert(&src)
        .await
        .unwrap_err();
    server.abort();
    let msg = e.to_string();
    assert!(msg.contains("cannot reach") && msg.contains(&src), "{msg}");
    assert!(!e.is_transient(), "{msg}");
    let n = accepted.load(Ordering::Relaxed);
    assert!(
        (1..=5).contains(&n),
        "{n} connections: one try and four retries at most"
    );
}

on_every_backend!(unreachable_endpoints_fail_fast);

/// Another URL form of the same table reads the same rows in the same order:
/// `abfss://container@account.dfs.core.windows.net/path` for `az://container/path` (object_store
/// talks to the Blob endpoint for both), `s3a://` for `s3://`.
async fn url_aliases_reach_the_same_table(backend: Backend) {
    let Uploaded { prefix, table, .. } = remote_table(backend, "alias", 8, 37).await;
    let alias = match backend {
        Backend::Azurite => format!(
            "abfss://{}@devstoreaccount1.dfs.core.windows.net/{prefix}/table",
            backend.bucket()
        ),
        Backend::S3 => format!("s3a://{}/{prefix}/table", backend.bucket()),
    };
    let ids = epoch_ids(&alias, backend.options(), 1);
    assert_eq!(ids.len(), 8);
    assert_eq!(
        ids,
        epoch_ids(&table, backend.options(), 1),
        "same table, same plan"
    );
}

on_every_backend!(url_aliases_reach_the_same_table);

/// `optimize` in the store: six shard commits make six small files; bin-packing rewrites them,
/// every row streams once from the new version, and the old version still streams.
async fn optimize_in_the_store(backend: Backend) {
    let Uploaded { src, table, .. } = uploaded(backend, "optimize", 24, 41).await;
    let compactor = || {
        Compactor::new(&table)
            .with_storage_options(backend.options())
            .with_layout(small_layout())
    };
    for i in 0..6 {
        compactor().with_shard(i, 6).convert(&src).await.unwrap();
    }
    let before = compactor().inspect().await.unwrap();
    assert!(before.files >= 6, "{before:?}");
    let s = compactor().optimize().await.unwrap();
    assert!(s.files_added < s.files_removed, "{s:?}");
    let after = compactor().inspect().await.unwrap();
    assert_eq!(
        (after.rows, after.version),
        (24, before.version + s.commits as u64)
    );
    assert!(after.files < before.files);

    let ids = epoch_ids(&table, backend.options(), 1);
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (24, 24));
    let (t, options) = (table.clone(), backend.options());
    let old_ids: Vec<String> = std::thread::spawn(move || {
        Loader::builder(t)
            .with_storage_options(options)
            .with_version(before.version)
            .with_batch_size(4)
            .build()
            .unwrap()
            .flat_map(|b| b.unwrap().ids)
            .collect()
    })
    .join()
    .unwrap();
    let old_unique: HashSet<&String> = old_ids.iter().collect();
    assert_eq!(old_unique, unique, "the old version holds the same rows");
}

on_every_backend!(optimize_in_the_store);

/// Three shards converting into one new table at once: they race to create it and to commit
/// (conditional writes: `If-None-Match` on S3, its equivalent on Azure); every row lands once.
async fn concurrent_shards_in_the_store(backend: Backend) {
    let Uploaded { src, table, .. } = uploaded(backend, "shards", 36, 43).await;
    let shard = |i| {
        let (table, src) = (table.clone(), src.clone());
        tokio::spawn(async move {
            Compactor::new(&table)
                .with_storage_options(backend.options())
                // ~4 cubes a file, a commit per file: three commits per shard.
                .with_layout(Layout {
                    target_file_bytes: 1_500_000,
                    ..small_layout()
                })
                .with_files_per_commit(1)
                .with_shard(i, 3)
                .convert(&src)
                .await
        })
    };
    let runs = [shard(0), shard(1), shard(2)];
    let (mut rows, mut commits) = (0, 0);
    for run in runs {
        let s = run.await.unwrap().unwrap();
        rows += s.rows;
        commits += s.commits;
    }
    assert_eq!(rows, 36);
    // Version 0 is the create; every append landed as exactly one later version.
    let info = Compactor::new(&table)
        .with_storage_options(backend.options())
        .inspect()
        .await
        .unwrap();
    assert!(commits >= 6, "{commits} commits: too few to race");
    assert_eq!(info.version, commits as u64);
    let ids = epoch_ids(&table, backend.options(), 1);
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (36, 36));
}

on_every_backend!(concurrent_shards_in_the_store);

/// The `compact` binary killed at 10 random points (seeded commit counts, some at once) while
/// converting from the store into the store, then run to the end: every row lands exactly once.
async fn killed_runs_resume_exactly_once(backend: Backend) {
    let count = 60;
    let Uploaded { prefix, src, table } = uploaded(backend, "killed", count, 47).await;
    let convert = || {
        let mut cmd = Command::new(compact_bin());
        cmd.args(["convert", &src, &table])
            // One ~1.5 MB file per commit, one source at a time: many commits to land between.
            .args(["--row-group-rows", "2", "--target-file-mb", "1.5"])
            .args(["--files-per-commit", "1", "--concurrency", "1"])
            .envs(backend.standard_env())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    };
    let store = backend.store();
    let log = StorePath::from(format!("{prefix}/table/_delta_log"));
    // Ten kill points: commit counts drawn from 0..8 (a seeded generator), in order.
    let mut rng = voxlake::plan::plan::SeededRng::new(47);
    let mut targets: Vec<usize> = (0..10).map(|_| rng.below(8)).collect();
    targets.sort_unstable();
    for target_commits in targets {
        let mut child = convert().spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let listed = store.list_with_delimiter(Some(&log)).await.unwrap();
            let commits = listed
                .objects
                .iter()
                .filter(|o| o.location.as_ref().ends_with(".json"))
                .count();
            let done = child.try_wait().unwrap().is_some();
            if commits >= target_commits || done || std::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().ok();
        child.wait().unwrap();
    }
    let partial = epoch_ids(&table, backend.options(), 1).len();
    assert!(
        partial > 0 && partial < count,
        "the runs were meant to be cut short: {partial} rows"
    );
    assert!(convert().status().unwrap().success());
    let ids = epoch_ids(&table, backend.options(), 1);
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (count, count));
}

on_every_backend!(killed_runs_resume_exactly_once);

/// A SAS token from tests/python/azurite_sas.py (account SAS, signed with the emulator's key).
fn azurite_sas() -> String {
    voxlake_testkit::python_script::<&str>("azurite_sas.py", &[])
}

/// Azurite's storage options with `token` as the credential.
fn sas_options(token: &str) -> HashMap<String, String> {
    HashMap::from([
        (
            "azure_storage_account_name".to_string(),
            "devstoreaccount1".to_string(),
        ),
        ("azure_storage_sas_key".to_string(), token.to_string()),
        (
            "azure_storage_endpoint".to_string(),
            format!("http://{}/devstoreaccount1", Backend::Azurite.addr()),
        ),
        ("allow_http".to_string(), "true".to_string()),
    ])
}

/// Ranks of a job reading with read-only credentials (a SAS of read and list rights, as a
/// cluster user's for a shared dataset): the job's version cannot be written beside the table,
/// so each rank reads the version it opened, with a warning, and the job trains; a job of one
/// rank writes nothing at all. Every row once over the ranks, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_read_only_credentials_trains() {
    let Uploaded { prefix, src, table } = uploaded(Backend::Azurite, "read-only", 12, 59).await;
    Compactor::new(&table)
        .with_storage_options(sas_options(&azurite_sas()))
        .with_layout(small_layout())
        .convert(&src)
        .await
        .unwrap();
    let read_only = sas_options(&voxlake_testkit::python_script("azurite_sas.py", &["rl"]));
    let rank = |rank: usize, world: usize| {
        let builder = Loader::builder(table.clone())
            .with_storage_options(read_only.clone())
            .with_batch_size(4)
            .with_shuffle(3, 8)
            .with_rank(rank, world)
            .with_job("read-only-job");
        std::thread::spawn(move || {
            let loader = builder.build().expect("a read-only job opens");
            loader.map(|b| b.unwrap().ids).collect::<Vec<_>>().concat()
        })
    };
    for world in [1, 2] {
        let ranks: Vec<_> = (0..world).map(|r| rank(r, world)).collect();
        let ids: Vec<String> = ranks.into_iter().flat_map(|r| r.join().unwrap()).collect();
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), 12, "world {world}: every row");
        assert!(ids.len() - 12 < world, "world {world}: {} ids", ids.len());
    }
    let written = Backend::Azurite
        .store()
        .list(Some(&StorePath::from(format!("{prefix}/table/_voxlake"))))
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert!(written.is_empty(), "{written:?}");
}

/// A SAS token as the credential: conversion and streaming work with it; a tampered one ends
/// in one permanent error that names the location and never shows the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azurite_sas_tokens_read_and_write_and_never_leak() {
    let backend = Backend::Azurite;
    let sas = azurite_sas();
    let with_sas = sas_options;
    let Uploaded { prefix, src, table } = uploaded(backend, "sas", 8, 53).await;
    let s = Compactor::new(&table)
        .with_storage_options(with_sas(&sas))
        .with_layout(small_layout())
        .convert(&src)
        .await
        .unwrap();
    assert_eq!(s.rows, 8);
    assert_eq!(epoch_ids(&table, with_sas(&sas), 1).len(), 8);

    let signature = sas
        .split('&')
        .find_map(|kv| kv.strip_prefix("sig="))
        .expect("a signature")
        .to_string();
    // Debug output of everything that holds the store prints no credential (object_store's
    // own Debug of its Azure client would print the SAS).
    let (t, options) = (table.clone(), with_sas(&sas));
    let shown = std::thread::spawn(move || {
        let loader = Loader::builder(t)
            .with_storage_options(options)
            .build()
            .unwrap();
        format!("{loader:?}")
    })
    .join()
    .unwrap();
    assert!(shown.contains("Snapshot"), "{shown}");
    assert!(
        !shown.contains(&signature) && !shown.contains("sig="),
        "the SAS leaked into Debug: {shown}"
    );
    let tampered = sas.replace(&signature, "AAAA");
    let e = Compactor::new(backend.url(&format!("{prefix}/other")))
        .with_storage_options(with_sas(&tampered))
        .convert(&src)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&src), "{msg}");
    assert!(!e.is_transient(), "{msg}");
    for secret in [signature.as_str(), "sig=AAAA", "sig%3DAAAA"] {
        assert!(
            !msg.contains(secret),
            "the SAS leaked into the error: {msg}"
        );
    }
    let t = table.clone();
    let e = std::thread::spawn(move || {
        Loader::builder(t)
            .with_storage_options(with_sas(&tampered))
            .build()
            .unwrap_err()
            .to_string()
    })
    .join()
    .unwrap();
    assert!(e.contains(&table), "{e}");
    assert!(
        !e.contains("sig=AAAA") && !e.contains("sig%3DAAAA"),
        "the SAS leaked: {e}"
    );
}

/// The client's `timeout` reaches the reads: every data read stalls 5 s, the timeout is 300 ms
/// and one retry is allowed, so the loader gives up after two attempts with a transient error.
async fn timeouts_apply(backend: Backend) {
    let table = remote_table(backend, "timeouts", 8, 59).await.table;
    let plan = FaultPlan {
        stall_every: Some((1, Duration::from_secs(5))),
        ..FaultPlan::default()
    };
    let settings = [
        ("timeout", "300ms"),
        ("max_retries", "1"),
        ("backoff_config.init_backoff", "10ms"),
    ];
    let (error, proxy) = first_error_through(backend, &table, plan, &settings).await;
    let msg = error.to_string();
    assert!(error.is_transient(), "{msg}");
    assert_eq!(proxy.data_reads(), 2, "one read and one retry: {msg}");
}

on_every_backend!(timeouts_apply);

/// Uploads the folder `dir` and everything under it to `prefix`.
async fn upload_tree(backend: Backend, dir: &Path, prefix: &str) {
    let store = backend.store();
    let mut pending = vec![(dir.to_path_buf(), prefix.to_string())];
    while let Some((dir, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let key = format!("{prefix}/{}", entry.file_name().to_str().unwrap());
            if entry.file_type().unwrap().is_dir() {
                pending.push((entry.path(), key));
            } else {
                upload(store.as_ref(), &entry.path(), &key).await;
            }
        }
    }
}

/// A Delta Spark table with deletion vectors (and column mapping, partitions, a checkpoint)
/// read from the store: the vectors come through the table's store, so the live rows are
/// deltalake-python's at every version. A truncated vector and a missing one are errors naming
/// the data file and the vector.
async fn deletion_vectors_in_the_store(backend: Backend) {
    let e = crate::delta::expected("dv_mapping");
    let prefix = unique_prefix("dv");
    upload_tree(backend, &crate::delta::fixture("dv_mapping"), &prefix).await;
    let table = backend.url(&prefix);
    let run = |builder: voxlake::LoaderBuilder| {
        std::thread::spawn(move || -> Result<Vec<voxlake::Batch>, String> {
            let loader = builder.build().map_err(|e| e.to_string())?;
            loader.map(|b| b.map_err(|e| e.to_string())).collect()
        })
        .join()
        .unwrap()
    };
    for (&version, want) in &e.versions {
        let got = run(e
            .builder(&table)
            .with_storage_options(backend.options())
            .with_version(version))
        .unwrap();
        let got: Vec<(String, Vec<f32>)> = crate::delta::rows(&got)
            .into_iter()
            .map(|(id, values, _)| (id, values))
            .collect();
        assert_eq!(&got, want, "version {version}");
    }
    // Which vector the latest version reads first, from the log.
    let store = backend.store();
    let vectors: Vec<StorePath> = store
        .list(Some(&StorePath::from(prefix.as_str())))
        .map_ok(|m| m.location)
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.as_ref().ends_with(".bin"))
        .collect();
    assert!(!vectors.is_empty());
    // Truncated: the kernel's size or checksum check names it.
    for path in &vectors {
        let bytes = store.get(path).await.unwrap().bytes().await.unwrap();
        store
            .put(path, PutPayload::from(bytes.slice(..bytes.len() - 3)))
            .await
            .unwrap();
    }
    let err = run(e.builder(&table).with_storage_options(backend.options())).unwrap_err();
    assert!(
        err.contains("its deletion vector deletion_vector_") && err.contains("shorter"),
        "{err}"
    );
    for path in &vectors {
        store.delete(path).await.unwrap();
    }
    let err = run(e.builder(&table).with_storage_options(backend.options())).unwrap_err();
    assert!(err.contains("missing from the store"), "{err}");
    assert!(err.contains("part-"), "the data file is named: {err}");
}

on_every_backend!(deletion_vectors_in_the_store);

/// GCS through object_store's client, against the emulator scripts/test.sh starts
/// (fake-gcs-server on 127.0.0.1, a service-account file with its base URL and no OAuth, as a
/// team points voxlake at an emulator): a Databricks-style table with deletion vectors, uploaded
/// with the emulator's own API, reads row for row as it reads from the local folder, at its
/// latest version and at version 1.
#[test]
fn gcs_tables_read_as_they_read_locally() {
    let (endpoint, bucket) = (env("VOXLAKE_GCS_ENDPOINT"), env("VOXLAKE_GCS_BUCKET"));
    let dir = tempfile::tempdir().unwrap();
    let account = dir.path().join("service-account.json");
    let key = serde_json::json!({
        "disable_oauth": true,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
        "gcs_base_url": endpoint,
    });
    std::fs::write(&account, key.to_string()).unwrap();
    let fixture = crate::delta::fixture("dv_small");
    let prefix = unique_prefix("gcs");
    voxlake_testkit::python_script(
        "gcs_upload.py",
        &[&endpoint, &bucket, &prefix, fixture.to_str().unwrap()],
    );
    let e = crate::delta::expected("dv_small");
    let options = HashMap::from([(
        "google_service_account".to_string(),
        account.to_str().unwrap().to_string(),
    )]);
    let read = |builder: voxlake::LoaderBuilder| -> Vec<(String, Vec<u8>)> {
        let mut rows: Vec<(String, Vec<u8>)> = crate::loader::collect(builder)
            .iter()
            .flat_map(|b| {
                let bytes = b.tensors.as_bytes().unwrap();
                let per = bytes.len() / b.len();
                b.ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (id.clone(), bytes[i * per..(i + 1) * per].to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        rows.sort();
        rows
    };
    let remote = format!("gs://{bucket}/{prefix}");
    for version in [None, Some(1)] {
        let at = |b: voxlake::LoaderBuilder| match version {
            Some(v) => b.with_version(v),
            None => b,
        };
        let local = read(at(e.builder(&fixture)));
        let gcs = read(at(e.builder(&remote).with_storage_options(options.clone())));
        assert!(!local.is_empty());
        assert_eq!(gcs, local, "version {version:?}");
    }
}
