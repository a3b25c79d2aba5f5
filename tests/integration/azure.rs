//! Azure Blob for real: Azurite on 127.0.0.1, started by scripts/test.sh (never a mock).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload};
use voxlake::Loader;
use voxlake::compact::{Compactor, synth};
use voxlake::fault::{FaultPlan, FaultProxy};
use voxlake::format::Layout;

use crate::common::{compact_bin, cube_bytes};

/// The container scripts/test.sh created in the Azurite it started.
fn container() -> String {
    assert!(
        std::env::var("AZURITE_BLOB_STORAGE_URL").is_ok(),
        "no Azurite: run scripts/test.sh (it starts Azurite on 127.0.0.1 and sets AZURITE_BLOB_STORAGE_URL)"
    );
    std::env::var("VOXLAKE_AZURITE_CONTAINER").unwrap_or_else(|_| "voxlake-test".into())
}

/// The emulator's storage options (its well-known account; endpoint from the environment).
fn options() -> HashMap<String, String> {
    HashMap::from([("azure_storage_use_emulator".to_string(), "true".to_string())])
}

/// A prefix of its own for each test, so tests share the container without clashing.
fn unique_prefix(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

async fn upload_dir(dir: &Path, container: &str, prefix: &str) {
    let store = MicrosoftAzureBuilder::new()
        .with_container_name(container)
        .with_use_emulator(true)
        .build()
        .unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let key = StorePath::from(format!(
            "{prefix}/{}",
            path.file_name().unwrap().to_str().unwrap()
        ));
        store
            .put(&key, PutPayload::from(std::fs::read(&path).unwrap()))
            .await
            .unwrap();
    }
}

async fn upload_file(file: &Path, container: &str, key: &str) {
    let store = MicrosoftAzureBuilder::new()
        .with_container_name(container)
        .with_use_emulator(true)
        .build()
        .unwrap();
    store
        .put(
            &StorePath::from(key),
            PutPayload::from(std::fs::read(file).unwrap()),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn convert_and_stream_through_azurite() {
    let container = container();
    let prefix = unique_prefix("roundtrip");
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 30, 17).unwrap();
    upload_dir(&data.cubes, &container, &format!("{prefix}/src")).await;
    upload_file(&data.labels, &container, &format!("{prefix}/labels.csv")).await;

    let table = format!("az://{container}/{prefix}/table");
    let c = Compactor::new(&table)
        .with_storage_options(options())
        .with_labels(format!("az://{container}/{prefix}/labels.csv"))
        .with_layout(Layout {
            row_group_rows: 4,
            target_file_bytes: 3_000_000,
            ..Layout::default()
        });
    let src = format!("az://{container}/{prefix}/src");
    let s = c.convert(&src).await.unwrap();
    assert_eq!((s.rows, s.skipped.len()), (30, 0));
    assert!(s.parquet_files >= 3, "{s:?}");
    // Re-running is a no-op: the ids are read back from the blobs.
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
            .with_storage_options(options())
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

    // The standard object_store variables work unchanged through the CLI.
    let out = Command::new(compact_bin())
        .args(["inspect", &table, "--json"])
        .env("AZURE_STORAGE_USE_EMULATOR", "true")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"], 30);
}

#[tokio::test]
async fn permanent_azure_errors_are_named_and_fast() {
    let container = container();
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 2, 1).unwrap();
    let prefix = unique_prefix("errors");
    upload_dir(&data.cubes, &container, &format!("{prefix}/src")).await;

    // A container that does not exist.
    // Through the proxy, to count the requests: a permanent answer is not retried.
    let proxy = FaultProxy::start(azurite_addr(), FaultPlan::default())
        .await
        .unwrap();
    let e = Compactor::new(format!("az://no-such-container/{prefix}/table"))
        .with_storage_options(through(&proxy))
        .convert(&format!("az://no-such-container/{prefix}/src"))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("az://no-such-container"), "{msg}");
    assert!(!e.is_transient(), "a missing container is permanent: {msg}");
    let requests = proxy.requests();
    assert_eq!(
        requests.len(),
        1,
        "no retry storm on a permanent error: {requests:?}"
    );

    // Bad credentials: the account key is wrong; the error names the location, not the key.
    let mut bad = options();
    let wrong_key = "d3Jvbmcga2V5IGZvciB0aGUgdGVzdA==";
    bad.insert("azure_storage_account_key".into(), wrong_key.into());
    let e = Compactor::new(format!("az://{container}/{prefix}/table"))
        .with_storage_options(bad.clone())
        .convert(&format!("az://{container}/{prefix}/src"))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("az://{container}/{prefix}/src")),
        "{msg}"
    );
    assert!(
        !msg.contains(wrong_key),
        "the key leaked into the error: {msg}"
    );
    assert!(!e.is_transient(), "{msg}");

    // A table that is not there, for the loader.
    let missing = format!("az://{container}/{prefix}/nothing");
    let e = std::thread::spawn(move || {
        Loader::builder(missing)
            .with_storage_options(options())
            .build()
            .unwrap_err()
    })
    .join()
    .unwrap()
    .to_string();
    assert!(
        e.contains("nothing") && e.contains("Not a Delta table"),
        "{e}"
    );
}

/// The documented Azurite development key (public, emulator only).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Storage options that reach Azurite through `proxy` (an explicit endpoint, not the emulator
/// switch, so each test can have its own).
fn through(proxy: &FaultProxy) -> HashMap<String, String> {
    HashMap::from([
        (
            "azure_storage_account_name".to_string(),
            "devstoreaccount1".to_string(),
        ),
        (
            "azure_storage_account_key".to_string(),
            EMULATOR_KEY.to_string(),
        ),
        (
            "azure_storage_endpoint".to_string(),
            format!("http://{}/devstoreaccount1", proxy.addr()),
        ),
        ("allow_http".to_string(), "true".to_string()),
    ])
}

fn azurite_addr() -> std::net::SocketAddr {
    let url = std::env::var("AZURITE_BLOB_STORAGE_URL").expect("run scripts/test.sh");
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// A table of `count` cubes in Azurite: 4-row row groups, ~3 MB files.
async fn azure_table(prefix: &str, count: usize, seed: u64) -> String {
    let container = container();
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), count, seed).unwrap();
    upload_dir(&data.cubes, &container, &format!("{prefix}/src")).await;
    let table = format!("az://{container}/{prefix}/table");
    Compactor::new(&table)
        .with_storage_options(options())
        .with_layout(Layout {
            row_group_rows: 4,
            target_file_bytes: 3_000_000,
            ..Layout::default()
        })
        .convert(&format!("az://{container}/{prefix}/src"))
        .await
        .unwrap();
    table
}

fn epoch_ids(table: &str, options: HashMap<String, String>, epochs: u64) -> Vec<String> {
    let builder = Loader::builder(table.to_string())
        .with_storage_options(options)
        .with_batch_size(4)
        .with_epochs(epochs)
        .with_shuffle(11, 8);
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

// Multi-threaded: the proxy's tasks must run while this thread waits for the loader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_survives_resets_503s_and_truncated_bodies() {
    let table = azure_table(&unique_prefix("faults"), 40, 23).await;
    let proxy = FaultProxy::start(
        azurite_addr(),
        FaultPlan {
            error_503_every: Some(3),
            reset_every: Some(5),
            truncate_every: Some(7),
            stall_every: Some((11, Duration::from_millis(300))),
            ..FaultPlan::default()
        },
    )
    .await
    .unwrap();
    let ids = epoch_ids(&table, through(&proxy), 1);
    assert!(
        proxy.faults() >= 5,
        "only {} faults injected",
        proxy.faults()
    );
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (40, 40),
        "every id exactly once despite the faults"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_ranged_coalesced_and_footers_read_once() {
    let table = azure_table(&unique_prefix("accounting"), 32, 29).await;
    let proxy = FaultProxy::start(azurite_addr(), FaultPlan::default())
        .await
        .unwrap();
    let opts = through(&proxy);
    let snapshot = voxlake::stream::Snapshot::open(&table, &opts, None)
        .await
        .unwrap();
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
    // One footer read per file for both epochs, one coalesced read per row group per epoch.
    assert_eq!(data.len() as u64, files + 2 * row_groups, "{data:#?}");
}
