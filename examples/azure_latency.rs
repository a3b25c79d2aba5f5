//! Azure benchmark against Azurite (run by `benches/compare/azure.sh`, which starts it):
//! `compact convert` from Azurite to Azurite; the loader on that table straight to Azurite,
//! through a TCP proxy adding latency to every request (20 ms unless told), and through
//! object_store's `ThrottledStore` adding the same latency in process, alternating; the time to
//! first batch on a table of 3,000 files through the proxy.
//!
//! usage: cargo run --release --example azure_latency -- [COUNT=4000] [RUNS=3] [LATENCY_MS=20]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use voxlake::Loader;
use voxlake::compact::{Compactor, synth};
use voxlake::format::npy::{EncodeOptions, encode};
use voxlake::format::{DType, Layout};
use voxlake_testkit::{FaultPlan, FaultProxy};

const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn emulator() -> HashMap<String, String> {
    HashMap::from([("azure_storage_use_emulator".into(), "true".into())])
}

fn through(proxy: &FaultProxy) -> HashMap<String, String> {
    HashMap::from([
        (
            "azure_storage_account_name".into(),
            "devstoreaccount1".into(),
        ),
        ("azure_storage_account_key".into(), KEY.into()),
        (
            "azure_storage_endpoint".into(),
            format!("http://{}/devstoreaccount1", proxy.addr()),
        ),
        ("allow_http".into(), "true".into()),
    ])
}

async fn upload(store: &dyn ObjectStore, files: Vec<(String, Vec<u8>)>) {
    futures::stream::iter(files)
        .map(|(key, bytes)| async move {
            store
                .put(&Path::from(key), PutPayload::from(bytes))
                .await
                .expect("upload");
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// One epoch, shuffled, batches of 32, every value read: (samples/s, first batch s).
fn epoch(
    table: &str,
    options: HashMap<String, String>,
    store: Option<Arc<dyn ObjectStore>>,
) -> (f64, f64, u64) {
    let start = Instant::now();
    let mut builder = Loader::builder(table.to_string()).with_storage_options(options);
    if let Some(store) = store {
        builder = builder.with_object_store(store);
    }
    let loader = builder
        .with_batch_size(32)
        .with_shuffle(1, 1024)
        .build()
        .expect("loader");
    let mut first = None;
    let mut samples = 0u64;
    let mut checksum = 0f64;
    for batch in loader {
        let batch = batch.expect("batch");
        first.get_or_insert(start.elapsed().as_secs_f64());
        checksum += batch
            .tensors
            .as_bytes()
            .unwrap_or_default()
            .iter()
            .step_by(64)
            .map(|&b| f64::from(b))
            .sum::<f64>();
        samples += batch.len() as u64;
    }
    assert!(checksum >= 0.0);
    (
        samples as f64 / start.elapsed().as_secs_f64(),
        first.unwrap_or(0.0),
        samples,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args.get(1).map_or(4000, |a| a.parse().expect("COUNT"));
    let runs: usize = args.get(2).map_or(3, |a| a.parse().expect("RUNS"));
    let latency_ms: u64 = args.get(3).map_or(20, |a| a.parse().expect("LATENCY_MS"));
    let container = std::env::var("VOXLAKE_AZURITE_CONTAINER").unwrap_or("voxlake-test".into());
    let azurite: std::net::SocketAddr = std::env::var("AZURITE_BLOB_STORAGE_URL")
        .expect("AZURITE_BLOB_STORAGE_URL (benches/compare/azure.sh sets it)")
        .trim_start_matches("http://")
        .parse()
        .expect("host:port");
    let store = MicrosoftAzureBuilder::new()
        .with_container_name(&container)
        .with_use_emulator(true)
        .build()
        .expect("store");

    // 1. The reference cubes into Azurite, then compact convert Azurite → Azurite.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = synth::generate(dir.path(), count, 42).expect("generate");
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&data.cubes)
        .expect("cubes")
        .map(|e| {
            let p = e.expect("entry").path();
            (
                format!("bench/src/{}", p.file_name().unwrap().to_string_lossy()),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    upload(&store, files).await;
    upload(
        &store,
        vec![(
            "bench/labels.csv".into(),
            std::fs::read(&data.labels).unwrap(),
        )],
    )
    .await;
    let table = format!("az://{container}/bench/table");
    let start = Instant::now();
    let summary = Compactor::new(&table)
        .with_storage_options(emulator())
        .with_labels(format!("az://{container}/bench/labels.csv"))
        .convert(&format!("az://{container}/bench/src"))
        .await
        .expect("convert");
    let convert_s = start.elapsed().as_secs_f64();
    println!(
        "compact convert Azurite → Azurite: {} files, {:.1} s, {:.0} files/s, {:.0} MB/s",
        summary.files,
        convert_s,
        summary.files as f64 / convert_s,
        summary.bytes_read as f64 / 1e6 / convert_s
    );

    // 2. The loader, direct and through the added latency per request, alternating.
    let proxy = FaultProxy::start(
        azurite,
        FaultPlan {
            latency: Duration::from_millis(latency_ms),
            ..FaultPlan::default()
        },
    )
    .await
    .expect("proxy");
    // The same latency in process, without a network hop: object_store's ThrottledStore in
    // front of the Azurite container (no proxy copying every byte on the shared cores).
    let throttled: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(
        MicrosoftAzureBuilder::new()
            .with_container_name(&container)
            .with_use_emulator(true)
            .build()
            .expect("store"),
        ThrottleConfig {
            wait_get_per_call: Duration::from_millis(latency_ms),
            wait_list_per_call: Duration::from_millis(latency_ms),
            ..ThrottleConfig::default()
        },
    ));
    let (mut direct, mut slow, mut slow_first, mut inproc) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let run = |options: HashMap<String, String>, store: Option<Arc<dyn ObjectStore>>| {
            let t = table.clone();
            tokio::task::spawn_blocking(move || {
                let (sps, first, n) = epoch(&t, options, store);
                assert_eq!(n as usize, count);
                (sps, first)
            })
        };
        direct.push(run(emulator(), None).await.unwrap().0);
        let (sps, first) = run(through(&proxy), None).await.unwrap();
        slow.push(sps);
        slow_first.push(first);
        inproc.push(run(emulator(), Some(throttled.clone())).await.unwrap().0);
    }
    let (d, s, t) = (
        median(direct.clone()),
        median(slow.clone()),
        median(inproc.clone()),
    );
    println!(
        "loader, {count} cubes, shuffled, median of {runs}: direct {d:.0} samples/s; through a proxy adding {latency_ms} ms/request {s:.0} samples/s ({:.0} %), first batch {:.2} s; ThrottledStore +{latency_ms} ms/request {t:.0} samples/s ({:.0} %)  (runs: {direct:.0?} / {slow:.0?} / {inproc:.0?})",
        100.0 * s / d,
        median(slow_first.clone()),
        100.0 * t / d,
    );

    // 3. Time to first batch on a table of 3,000 files, through the same latency.
    let tiny: Vec<u8> = (0..16u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let npy = encode(DType::F32, &[16], &tiny, EncodeOptions::default());
    let files = (0..3000)
        .map(|i| (format!("many/src/s{i:05}.npy"), npy.clone()))
        .collect();
    upload(&store, files).await;
    let many = format!("az://{container}/many/table");
    Compactor::new(&many)
        .with_storage_options(emulator())
        // One row per file, one commit: 3,000 files.
        .with_layout(Layout {
            row_group_rows: 1,
            target_file_bytes: 1,
            ..Layout::default()
        })
        .with_files_per_commit(usize::MAX)
        .convert(&format!("az://{container}/many/src"))
        .await
        .expect("convert 3000");
    let mut firsts = Vec::new();
    for _ in 0..runs {
        let (m, opts) = (many.clone(), through(&proxy));
        let first = tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            let mut loader = Loader::builder(m)
                .with_storage_options(opts)
                .with_batch_size(32)
                .with_shuffle(1, 1024)
                .build()
                .expect("loader");
            loader.next().expect("a batch").expect("batch ok");
            start.elapsed().as_secs_f64()
        })
        .await
        .unwrap();
        firsts.push(first);
    }
    println!(
        "first batch, 3,000-file table, +{latency_ms} ms/request: {:.2} s (median of {runs}: {firsts:.2?})",
        median(firsts.clone())
    );
    println!(
        "{}",
        serde_json::json!({
            "count": count, "convert_s": convert_s, "convert_files_per_s": summary.files as f64 / convert_s,
            "direct_samples_per_s": d, "latency_ms": latency_ms, "latency_samples_per_s": s, "ratio": s / d,
            "throttled_samples_per_s": t, "throttled_ratio": t / d,
            "latency_first_batch_s": median(slow_first), "first_batch_3000_files_s": median(firsts),
        })
    );
}
