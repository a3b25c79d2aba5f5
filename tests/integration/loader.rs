//! The stream and the loader: exactly-once epochs over ranks, determinism, mixing, batch
//! shapes and values, fixed versions, early drop, missing files.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use voxlake::compact::{Compactor, synth};
use voxlake::format::Layout;
use voxlake::loader::{Batch, Loader, LoaderError};

use voxlake_testkit::{cube_bytes, data_files};

/// `count` synthetic cubes in a table of small files (≈4 rows each) and row groups of 2 rows.
async fn table(dir: &Path, count: usize, seed: u64) -> PathBuf {
    table_of(dir, count, seed, 2, 1_200_000).await
}

/// `count` synthetic cubes (labelled) in row groups of `rows` rows and files of about
/// `file_bytes`.
pub(crate) async fn table_of(
    dir: &Path,
    count: usize,
    seed: u64,
    rows: usize,
    file_bytes: u64,
) -> PathBuf {
    let data = synth::generate(dir, count, seed).unwrap();
    let table = dir.join("table");
    Compactor::new(table.to_str().unwrap())
        .with_labels(data.labels.to_str().unwrap())
        .with_layout(Layout {
            row_group_rows: rows,
            target_file_bytes: file_bytes,
            ..Layout::default()
        })
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
    table
}

/// The smallest budget a refusal at build names.
pub fn smallest_budget(refusal: &str) -> u64 {
    refusal
        .split("smallest budget that works is ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{refusal}"))
}

/// Runs a loader to the end on a plain thread (it owns its runtime) and returns its batches.
pub fn collect(builder: voxlake::LoaderBuilder) -> Vec<Batch> {
    std::thread::spawn(move || builder.build().unwrap().map(Result::unwrap).collect())
        .join()
        .unwrap()
}

/// `got` (what the ranks of a resumed run delivered) holds every draw of `want` (what the
/// uninterrupted run had left) as often as drawn, and fewer than `ranks` more: the pad draws,
/// at most one a rank.
pub fn assert_same_draws<T: Ord + Clone + std::fmt::Debug>(want: &[T], got: &[T], ranks: usize) {
    let mut want = want.to_vec();
    let mut extra = got.to_vec();
    want.sort();
    extra.sort();
    for d in &want {
        let at = extra
            .iter()
            .position(|x| x == d)
            .unwrap_or_else(|| panic!("{d:?} lost"));
        extra.remove(at);
    }
    assert!(extra.len() < ranks, "{extra:?} delivered twice");
}

/// Runs a loader to the end on a plain thread and returns its first error (from `build()` or
/// from the batches), as text. Panics when the run succeeds.
pub fn first_error(builder: voxlake::LoaderBuilder, what: &str) -> String {
    let results: Vec<Result<voxlake::Batch, voxlake::loader::LoaderError>> =
        std::thread::spawn(move || match builder.build() {
            Ok(loader) => loader.collect(),
            Err(e) => vec![Err(e)],
        })
        .join()
        .unwrap();
    results
        .into_iter()
        .find_map(Result::err)
        .unwrap_or_else(|| panic!("{what} must fail"))
        .to_string()
}

fn ids(batches: &[Batch]) -> Vec<String> {
    batches.iter().flat_map(|b| b.ids.clone()).collect()
}

pub(crate) fn index_of(id: &str) -> usize {
    id.trim_start_matches("cube_")
        .trim_end_matches(".npy")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn every_row_once_per_epoch_across_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 60, 1).await;
    let world = 3;
    for shuffle in [false, true] {
        let mut union = HashSet::new();
        let mut per_rank = Vec::new();
        for rank in 0..world {
            let mut b = Loader::builder(table.to_str().unwrap())
                .with_batch_size(5)
                .with_epochs(2)
                .with_rank(rank, world);
            if shuffle {
                b = b.with_shuffle(9, 16);
            }
            let batches = collect(b);
            for epoch in 0..2 {
                let epoch_ids: Vec<String> = batches
                    .iter()
                    .filter(|b| b.epoch == epoch)
                    .flat_map(|b| b.ids.clone())
                    .collect();
                let unique: HashSet<_> = epoch_ids.iter().cloned().collect();
                assert_eq!(
                    unique.len(),
                    epoch_ids.len(),
                    "rank {rank} epoch {epoch} repeats a row"
                );
                if epoch == 0 {
                    per_rank.push(unique.len());
                    for id in unique {
                        assert!(union.insert(id), "two ranks got the same row");
                    }
                }
            }
        }
        assert_eq!(union.len(), 60, "the ranks together cover the table");
        let (min, max) = (
            per_rank.iter().min().unwrap(),
            per_rank.iter().max().unwrap(),
        );
        assert!(max - min <= 8, "ranks unbalanced: {per_rank:?}");
    }
}

/// Spearman correlation between delivery order and table order.
fn rank_correlation(order: &[usize]) -> f64 {
    let n = order.len() as f64;
    let mut sorted: Vec<usize> = order.to_vec();
    sorted.sort();
    let rank: HashMap<usize, usize> = sorted.iter().enumerate().map(|(r, &v)| (v, r)).collect();
    let mean = (n - 1.0) / 2.0;
    let (mut cov, mut var) = (0.0, 0.0);
    for (pos, v) in order.iter().enumerate() {
        cov += (pos as f64 - mean) * (rank[v] as f64 - mean);
        var += (pos as f64 - mean).powi(2);
    }
    cov / var
}

#[tokio::test]
async fn shuffle_is_deterministic_per_epoch_and_well_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 120, 2).await;
    let run = |seed: u64| {
        let b = Loader::builder(table.to_str().unwrap())
            .with_batch_size(8)
            .with_epochs(2)
            .with_shuffle(seed, 24);
        let batches = collect(b);
        let epoch = |e: u64| {
            ids(&batches
                .iter()
                .filter(|b| b.epoch == e)
                .cloned()
                .collect::<Vec<_>>())
        };
        (epoch(0), epoch(1))
    };
    let (a0, a1) = run(5);
    let (b0, b1) = run(5);
    assert_eq!((&a0, &a1), (&b0, &b1), "same seed, same order");
    assert_ne!(a0, a1, "another epoch, another order");
    assert_ne!(a0, run(6).0, "another seed, another order");

    // Mixing, measured two ways: the delivery order barely correlates with the table order,
    // and consecutive samples rarely come from the same row group (2 rows each here).
    let order: Vec<usize> = a0.iter().map(|id| index_of(id)).collect();
    let rho = rank_correlation(&order);
    assert!(rho.abs() < 0.35, "rank correlation with table order {rho}");
    let same_group = order.windows(2).filter(|w| w[0] / 2 == w[1] / 2).count();
    assert!(
        same_group < 12,
        "{same_group} of 119 neighbours share a row group"
    );
    // Unshuffled, the order is the table order: the cubes in the order they were written.
    let plain = ids(&collect(
        Loader::builder(table.to_str().unwrap()).with_batch_size(8),
    ));
    let plain: Vec<usize> = plain.iter().map(|id| index_of(id)).collect();
    assert_eq!(plain, (0..120).collect::<Vec<_>>());
    assert!(rank_correlation(&plain) > 0.999);
}

#[tokio::test]
async fn batches_hold_the_right_values_shapes_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 21, 3).await;
    let batches = collect(
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(8)
            .with_shuffle(1, 8),
    );
    assert_eq!(
        batches.iter().map(|b| b.len()).collect::<Vec<_>>(),
        vec![8, 8, 5]
    );
    for batch in &batches {
        let t = batch.tensors.as_f32().expect("f32 table");
        assert_eq!(t.shape(), &[batch.len(), 30, 30, 10, 10]);
        for (i, id) in batch.ids.iter().enumerate() {
            let (label, bytes) = cube_bytes(3, index_of(id));
            assert_eq!(batch.labels[i], Some(label));
            let row = t.index_axis(ndarray::Axis(0), i);
            let got: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert!(got == bytes, "{id}: values differ");
        }
    }
    // Channels first: [B, C, X, Y, Z], element (c, x, y, z) = stored (x, y, z, c).
    let cf = collect(
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(4)
            .with_channels_first(true),
    );
    let first = &cf[0];
    let t = first.tensors.as_f32().unwrap();
    assert_eq!(t.shape(), &[4, 10, 30, 30, 10]);
    let (_, bytes) = cube_bytes(3, index_of(&first.ids[1]));
    let stored = |x: usize, y: usize, z: usize, c: usize| {
        let i = ((x * 30 + y) * 10 + z) * 10 + c;
        f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap())
    };
    for (x, y, z, c) in [(0, 0, 0, 0), (29, 1, 7, 9), (3, 29, 9, 4)] {
        assert_eq!(t[[1, c, x, y, z]], stored(x, y, z, c));
    }
}

/// Batches given back with `recycle` are filled again in place, with the right values; the
/// short last batch (another shape) gets fresh memory.
#[tokio::test]
async fn recycled_batches_are_refilled_with_the_right_values() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 30, 5).await;
    let builder = Loader::builder(table.to_str().unwrap())
        .with_batch_size(4)
        .with_epochs(2)
        .with_shuffle(2, 8);
    let run = |recycle: bool| {
        let builder = builder.clone();
        std::thread::spawn(move || {
            let mut loader = builder.build().unwrap();
            let mut checked = 0;
            while let Some(batch) = loader.next() {
                let batch = batch.unwrap();
                let t = batch.tensors.as_f32().unwrap();
                assert_eq!(t.shape(), &[batch.len(), 30, 30, 10, 10]);
                for (i, id) in batch.ids.iter().enumerate() {
                    let (_, bytes) = cube_bytes(5, index_of(id));
                    let row = t.index_axis(ndarray::Axis(0), i);
                    let got: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                    assert!(got == bytes, "{id}: values differ");
                    checked += 1;
                }
                if recycle {
                    loader.recycle(batch);
                }
            }
            (checked, loader.stats().recycled)
        })
        .join()
        .unwrap()
    };
    let (checked, recycled) = run(true);
    assert_eq!(checked, 60);
    // 16 batches in all: two epochs of seven full ones and a short one (not reusable).
    assert!(
        recycled >= 8,
        "only {recycled} batches assembled into recycled memory"
    );
    assert_eq!(run(false), (60, 0));
}

#[tokio::test]
async fn partial_last_batch_and_drop_last() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 19, 4).await;
    let keep = collect(
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(6)
            .with_epochs(2),
    );
    let sizes: Vec<(u64, usize)> = keep.iter().map(|b| (b.epoch, b.len())).collect();
    assert_eq!(
        sizes,
        vec![
            (0, 6),
            (0, 6),
            (0, 6),
            (0, 1),
            (1, 6),
            (1, 6),
            (1, 6),
            (1, 1)
        ]
    );
    let dropped = collect(
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(6)
            .with_shuffle(2, 12)
            .with_drop_last(true),
    );
    assert_eq!(
        dropped.iter().map(|b| b.len()).collect::<Vec<_>>(),
        vec![6, 6, 6]
    );
    assert_eq!(
        dropped.iter().map(|b| b.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[tokio::test]
async fn a_pinned_version_reads_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 12, 5).unwrap();
    let table = dir.path().join("table");
    let c = Compactor::new(table.to_str().unwrap()).with_shard(0, 2);
    let first = c.convert(data.cubes.to_str().unwrap()).await.unwrap();
    let c = Compactor::new(table.to_str().unwrap());
    let second = c.convert(data.cubes.to_str().unwrap()).await.unwrap();
    assert!(second.version > first.version);
    let old = ids(&collect(
        Loader::builder(table.to_str().unwrap()).with_version(first.version),
    ));
    assert_eq!(old.len(), first.rows);
    let new = ids(&collect(Loader::builder(table.to_str().unwrap())));
    assert_eq!(new.len(), 12);
    assert!(old.iter().all(|id| new.contains(id)));
}

#[tokio::test]
async fn dropping_early_stops_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 40, 6).await;
    let path = table.to_str().unwrap().to_string();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut loader = Loader::builder(path)
            .with_batch_size(2)
            .with_infinite_epochs()
            .with_shuffle(0, 8)
            .build()
            .unwrap();
        let first = loader.next().unwrap().unwrap();
        assert_eq!(first.len(), 2);
        drop(loader); // must stop the producer, the runtime and the prefetch tasks
        done_tx.send(()).unwrap();
    });
    // A liveness check, not a performance one: a hang would never send.
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("dropping the loader hung");
}

#[tokio::test]
async fn a_process_forked_while_a_loader_runs_refuses_to_load_and_close_waits() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 16, 8).await;
    let path = table.to_str().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let mut loader = Loader::builder(path.as_str())
            .with_batch_size(2)
            .with_infinite_epochs()
            .build()
            .unwrap();
        loader.next().unwrap().unwrap();
        // Safety: the child only builds a loader, which must refuse before it starts a
        // thread, and leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let code = match Loader::builder(path.as_str()).build() {
                Err(LoaderError::Forked { threads }) if threads > 0 => 0,
                _ => 1,
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child built a loader: {status}"
        );
        // The parent's loader is unharmed, and closing it waits for its threads.
        assert_eq!(loader.next().unwrap().unwrap().len(), 2);
        loader.close().unwrap();
    });
    handle.join().unwrap();
}

#[tokio::test]
async fn a_file_deleted_under_a_pinned_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 16, 7).await;
    let victim = data_files(&table).remove(0);
    std::fs::remove_file(&victim).unwrap();
    let err = first_error(
        Loader::builder(table.to_str().unwrap()).with_batch_size(4),
        "reading a deleted file",
    );
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(err.contains("missing") && err.contains(name), "{err}");
}

#[tokio::test]
async fn bad_settings_and_locations_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 4, 8).await;
    let path = table.to_str().unwrap().to_string();
    let e = std::thread::spawn(move || {
        Loader::builder(path)
            .with_batch_size(8)
            .with_memory_budget(1 << 20)
            .build()
            .unwrap_err()
    })
    .join()
    .unwrap();
    assert!(matches!(e, LoaderError::Config(_)), "{e}");
    let missing = dir.path().join("nope").to_str().unwrap().to_string();
    let e = std::thread::spawn(move || Loader::builder(missing).build().unwrap_err())
        .join()
        .unwrap()
        .to_string();
    assert!(
        e.contains("nope") && e.contains("nothing at this location"),
        "{e}"
    );
}

/// The table copied into an in-memory store at its absolute path (ThrottledStore cannot wrap
/// the local store: object_store leaves its file payloads unimplemented there).
pub async fn in_memory_copy(table: &Path) -> object_store::memory::InMemory {
    use object_store::ObjectStoreExt;
    let store = object_store::memory::InMemory::new();
    let mut dirs = vec![table.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let key =
                    object_store::path::Path::from(path.to_str().unwrap().trim_start_matches('/'));
                store
                    .put(&key, std::fs::read(&path).unwrap().into())
                    .await
                    .unwrap();
            }
        }
    }
    store
}

#[tokio::test]
async fn reads_through_a_callers_store_with_latency() {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 12, 10).await;
    let slow = ThrottledStore::new(
        in_memory_copy(&table).await,
        ThrottleConfig {
            wait_get_per_call: Duration::from_millis(5),
            ..ThrottleConfig::default()
        },
    );
    // Every read must go to the caller's store: the local files are gone (the kernel only
    // checks that a file:// table's folder exists).
    std::fs::remove_dir_all(&table).unwrap();
    std::fs::create_dir(&table).unwrap();
    let builder = Loader::builder(table.to_str().unwrap())
        .with_object_store(std::sync::Arc::new(slow))
        .with_batch_size(5);
    let got = ids(&collect(builder));
    let mut sorted: Vec<usize> = got.iter().map(|id| index_of(id)).collect();
    sorted.sort();
    assert_eq!(sorted, (0..12).collect::<Vec<_>>());
}

#[tokio::test]
async fn local_files_read_instead_of_mapped_give_the_same_batches() {
    // As on a FUSE or NFS mount: every range read, the tensor chunks (row groups of 4 cubes,
    // 1.4 MB) into recycled buffers. The same batches as through the page-cache mappings.
    use voxlake::io::local::MappedLocalStore;
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 20, 12, 4, 3_000_000).await;
    let builder = Loader::builder(table.to_str().unwrap())
        .with_batch_size(3)
        .with_shuffle(5, 8)
        .with_epochs(4);
    let store = std::sync::Arc::new(MappedLocalStore::new().with_mapping(false));
    let read = collect(builder.clone().with_object_store(store.clone()));
    let mapped = collect(builder);
    assert_eq!(ids(&read), ids(&mapped));
    for (a, b) in read.iter().zip(&mapped) {
        assert!(
            a.tensors.as_bytes() == b.tensors.as_bytes(),
            "batch {}",
            a.index
        );
    }
    // 20 chunks were read (5 row groups, 4 epochs): fewer buffers made, each given back.
    let (buffers, bytes) = store.idle_buffers();
    assert!((1..20).contains(&buffers), "{buffers} buffers");
    assert!(
        bytes <= buffers * 4 * 360_200,
        "{bytes} bytes in {buffers} buffers"
    );
}

#[tokio::test]
async fn the_stall_meter_times_waits_and_compute_and_forecasts() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 24, 11).await;
    let path = table.to_str().unwrap().to_string();
    let (meter, per_epoch, forecast) = std::thread::spawn(move || {
        let mut loader = Loader::builder(path)
            .with_batch_size(4)
            .with_epochs(2)
            .build()
            .unwrap();
        let per_epoch = loader.iterations_per_epoch();
        assert!(
            loader
                .forecast(per_epoch, 2, Duration::ZERO, None)
                .is_none(),
            "no forecast before 3 steps"
        );
        let mut steps = 0;
        for batch in loader.by_ref() {
            batch.unwrap();
            steps += 1;
            // The "training step": the meter must see this as compute, not as waiting.
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(steps, 12);
        let forecast = loader
            .forecast(per_epoch, 2, Duration::ZERO, Some(3.6))
            .unwrap();
        (loader.stall_meter(), per_epoch, forecast)
    })
    .join()
    .unwrap();
    assert_eq!(per_epoch, 6);
    assert_eq!((meter.steps, meter.samples), (12, 48));
    // 11 pauses of 20 ms between the 12 calls.
    assert!(meter.computed >= Duration::from_millis(220), "{meter:?}");
    assert!(meter.input_bound_fraction() < 1.0);
    let steady = meter.steady_iteration().unwrap();
    assert!(steady >= Duration::from_millis(20));
    assert!(
        steady <= meter.steady_total,
        "the median is one of the iterations"
    );
    let expected = meter.init + meter.first_iteration + steady * 5 + steady * 6;
    assert!((forecast.total.as_secs_f64() - expected.as_secs_f64()).abs() < 1e-6);
    assert!((forecast.cost.unwrap() - forecast.total.as_secs_f64() / 1000.0).abs() < 1e-9);
}

/// The exposed wait a step (`LoaderStats::step_waits`, `consumer_wait`, the metrics) is the
/// loop's own wall clock around `next()`: a batch transform that takes 15 ms makes every step
/// wait, and the loop times each call.
#[tokio::test]
async fn the_exposed_wait_per_step_is_the_loops_wall_clock() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 24, 11).await;
    let path = table.to_str().unwrap().to_string();
    let (stats, metrics, mut timed) = std::thread::spawn(move || {
        let mut loader = Loader::builder(path)
            .with_batch_size(4)
            .with_epochs(2)
            .with_batch_transform(|_, _| {
                std::thread::sleep(Duration::from_millis(15));
                Ok(())
            })
            .build()
            .unwrap();
        let mut timed = Vec::new();
        loop {
            let start = std::time::Instant::now();
            let next = loader.next();
            timed.push(start.elapsed());
            match next {
                Some(batch) => drop(batch.unwrap()),
                None => break,
            }
        }
        (loader.stats(), loader.metrics(), timed)
    })
    .join()
    .unwrap();
    let close = |exposed: Duration, clock: Duration| {
        let (e, c) = (exposed.as_secs_f64(), clock.as_secs_f64());
        assert!(
            (e - c).abs() <= 0.05 * c,
            "exposed {e} s, the loop's clock {c} s"
        );
    };
    // Every call's wait is summed, the last (the end) too; the steps are the batches.
    close(stats.consumer_wait, timed.iter().sum());
    timed.pop();
    let waits = stats.step_waits;
    assert_eq!((waits.steps, stats.batches), (12, 12));
    timed.sort();
    close(waits.p50, timed[5]);
    close(waits.p90, timed[10]);
    close(waits.max, timed[11]);
    assert!(waits.p50 >= Duration::from_millis(10), "{waits:?}");
    assert!(stats.input_bound_fraction > 0.5, "{stats:?}");
    let named = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap()
            .value
            .as_f64()
    };
    assert_eq!(named("step_wait_p50_s"), waits.p50.as_secs_f64());
    assert_eq!(named("consumer_wait_s"), stats.consumer_wait.as_secs_f64());
    assert_eq!(named("batches"), 12.0);
    assert!(named("epoch_forecast_s") > 0.0 && named("steady_iteration_s") > 0.0);
}

/// `with_metrics_port`: the metrics on 127.0.0.1 in Prometheus' text, as the loop left them
/// at the run's end, every metric by its name; the port free again once the loader is gone.
#[tokio::test]
async fn the_metrics_endpoint_serves_the_loaders_metrics() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 24, 11).await;
    let path = table.to_str().unwrap().to_string();
    let (served, metrics, address) = std::thread::spawn(move || {
        let mut loader = Loader::builder(path)
            .with_batch_size(4)
            .with_epochs(2)
            .with_metrics_port(0)
            .build()
            .unwrap();
        let address = loader.metrics_address().unwrap();
        assert!(address.ip().is_loopback(), "{address}");
        for batch in loader.by_ref() {
            batch.unwrap();
        }
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut served = String::new();
        stream.read_to_string(&mut served).unwrap();
        (served, loader.metrics(), address)
    })
    .join()
    .unwrap();
    assert!(served.starts_with("HTTP/1.1 200 OK"), "{served}");
    let value = |name: &str| {
        served
            .lines()
            .find_map(|l| l.strip_prefix(&format!("voxlake_{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {served}"))
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(
        (value("samples"), value("batches"), value("step_waits")),
        (48.0, 12.0, 12.0)
    );
    for m in &metrics {
        value(m.name);
    }
    assert_eq!(
        value("bytes_read"),
        metrics
            .iter()
            .find(|m| m.name == "bytes_read")
            .unwrap()
            .value
            .as_f64()
    );
    assert!(
        served.contains("# TYPE voxlake_samples counter\n"),
        "{served}"
    );
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "the endpoint ends with its loader"
    );
}

/// The events of a Chrome trace file that begin a span named `name` (`ph` "B").
fn trace_spans(events: &[serde_json::Value], name: &str) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| e["ph"] == "B" && e["name"] == name)
        .cloned()
        .collect()
}

/// A trace that cannot be written (a disk that filled: `/dev/full`) is an error from the
/// `next()` after the batch that ended it, naming the file; the run goes on, no batch lost.
#[tokio::test]
async fn a_trace_that_cannot_be_written_is_an_error_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 16, 14).await;
    let path = table.to_str().unwrap().to_string();
    let items = std::thread::spawn(move || {
        let loader = Loader::builder(path)
            .with_batch_size(4)
            .with_trace("/dev/full")
            .with_trace_batches(2)
            .build()
            .unwrap();
        loader
            .map(|b| b.map(|b| b.len()).map_err(|e| e.to_string()))
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    assert_eq!(items.len(), 5, "{items:?}");
    assert_eq!(items[..2], [Ok(4), Ok(4)]);
    let err = items[2].as_ref().unwrap_err();
    assert!(
        err.starts_with("the trace /dev/full could not be written: "),
        "{err}"
    );
    assert_eq!(items[3..], [Ok(4), Ok(4)]);
}

/// `with_trace`: a Chrome trace-event file (one JSON array) of the first batches, complete
/// once the loop received them: a `next` span for each wait, an `assemble` span per batch
/// naming the row groups it drew from, which `row_group`, `fetch`, `decode` and `read` spans
/// (local files) cover; one track per thread, named. The run goes on past the trace.
#[tokio::test]
async fn a_trace_records_the_first_batches_stage_by_stage() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 48, 12).await;
    let path = table.to_str().unwrap().to_string();
    let trace = dir.path().join("trace.json");
    let file = trace.clone();
    let (batches, complete) = std::thread::spawn(move || {
        let mut loader = Loader::builder(path)
            .with_batch_size(4)
            .with_shuffle(1, 8)
            .with_trace(&file)
            .with_trace_batches(5)
            .build()
            .unwrap();
        let mut batches = 0;
        let mut complete = None;
        for batch in loader.by_ref() {
            batch.unwrap();
            batches += 1;
            if batches == 5 {
                // Written whole as the fifth batch is handed out.
                complete = Some(std::fs::read(&file).unwrap());
            }
        }
        (batches, complete.unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(batches, 12);
    let events: Vec<serde_json::Value> = serde_json::from_slice(&complete).unwrap();
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        complete,
        "nothing after the trace ended"
    );
    let next = trace_spans(&events, "next");
    assert_eq!(next.len(), 5, "{events:?}");
    // tracing-chrome writes each argument as text.
    assert_eq!(
        next.iter()
            .map(|e| e["args"]["batch"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["0", "1", "2", "3", "4"]
    );
    let assembled = trace_spans(&events, "assemble");
    assert!((5..=5 + 8).contains(&assembled.len()), "{events:?}");
    let read = trace_spans(&events, "row_group");
    let named: HashSet<String> = read
        .iter()
        .map(|e| {
            format!(
                "{}#{}",
                e["args"]["file"].as_str().unwrap(),
                e["args"]["row_group"].as_str().unwrap()
            )
        })
        .collect();
    for batch in &assembled[..5] {
        let groups = batch["args"]["row_groups"].as_str().unwrap();
        for group in groups.split(' ') {
            assert!(
                named.contains(group),
                "{group} of {batch} not read in the trace"
            );
        }
    }
    for stage in ["fetch", "decode", "read"] {
        assert!(
            !trace_spans(&events, stage).is_empty(),
            "no {stage} span: {events:?}"
        );
    }
    let threads: HashSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(threads.contains("voxlake-loader"), "{threads:?}");
    assert!(
        threads.iter().any(|t| t.starts_with("voxlake-io")),
        "{threads:?}"
    );
}

/// A trace path that cannot be written fails `build()` naming it; with several ranks each
/// writes its own file.
#[tokio::test]
async fn a_trace_is_one_file_a_rank_and_its_path_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 8, 13).await;
    let path = table.to_str().unwrap().to_string();
    let bad = dir.path().join("no-such-dir").join("trace.json");
    let trace = dir.path().join("trace.json");
    let builder = Loader::builder(path).with_batch_size(2);
    let refused = builder.clone().with_trace(&bad);
    let err = std::thread::spawn(move || refused.build().unwrap_err())
        .join()
        .unwrap();
    assert!(err.to_string().contains("no-such-dir/trace.json"), "{err}");
    // Each rank on a thread of its own (a thread that waited in one traced loader writes no
    // `next` spans into another's trace: tracing-chrome binds it to the first).
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let builder = builder.clone().with_rank(rank, 2).with_trace(&trace);
            std::thread::spawn(move || {
                let loader = builder.build().unwrap();
                loader.map(|b| b.unwrap().len()).sum::<usize>()
            })
        })
        .collect();
    let read: Vec<usize> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(read, [4, 4]);
    for rank in 0..2 {
        let file = dir.path().join(format!("trace.rank{rank}.json"));
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        // Two batches, and the wait that heard the run's end.
        assert_eq!(trace_spans(&events, "next").len(), 3, "{}", file.display());
    }
}

/// `count` cubes: the first half in row groups of 2 rows, the rest in row groups of 6.
async fn growing_groups_table(dir: &Path, count: usize) -> PathBuf {
    let data = synth::generate(dir, count, 12).unwrap();
    let table = dir.join("table");
    for (rows, shard) in [(2, Some((0, 2))), (6, None)] {
        let mut c = Compactor::new(table.to_str().unwrap()).with_layout(Layout {
            row_group_rows: rows,
            target_file_bytes: 4_000_000,
            ..Layout::default()
        });
        if let Some((i, n)) = shard {
            c = c.with_shard(i, n);
        }
        c.convert(data.cubes.to_str().unwrap()).await.unwrap();
    }
    table
}

fn build_err(builder: voxlake::LoaderBuilder) -> LoaderError {
    std::thread::spawn(move || builder.build().map(|_| ()).unwrap_err())
        .join()
        .unwrap()
}

/// Samples of 16 bytes, a shuffle buffer of 1500 rows asked for and a budget of 1 MiB: the
/// buffer is cut to what the budget streams, with a warning, and every row comes once (the
/// buffer was sized by the samples alone, and the build refused its own choice).
#[tokio::test]
async fn small_samples_get_a_shuffle_buffer_their_budget_streams() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..2000 {
        let name = format!("s{i:05}.npy");
        let opts = voxlake::format::npy::EncodeOptions::default();
        crate::compact::write_npy(&src, &name, voxlake::format::DType::F32, &[4], opts);
    }
    let table = dir.path().join("table");
    Compactor::new(table.to_str().unwrap())
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    let all = collect(
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(32)
            .with_shuffle(3, 1500)
            .with_memory_budget(1 << 20),
    );
    let unique: HashSet<String> = ids(&all).into_iter().collect();
    assert_eq!(unique.len(), 2000);
}

/// A budget too small to stream is refused at build with the smallest one that works, and that
/// one streams; a later file whose row groups outgrow it ends in an error, never a hang.
#[tokio::test]
async fn budgets_either_stream_or_fail_never_hang() {
    let dir = tempfile::tempdir().unwrap();
    let table = growing_groups_table(dir.path(), 24).await;
    let path = table.to_str().unwrap();
    // Batches of 4 from row groups of 2 (720 kB each decoded): 2 held + 1 being read.
    let e = build_err(
        Loader::builder(path)
            .with_batch_size(4)
            .with_memory_budget(2_000_000),
    )
    .to_string();
    let smallest = smallest_budget(&e);
    // The stream's share (2 held + 1 being read: 2.88 MB) and the 8 batches of 1.44 MB the
    // loader keeps outside it.
    // (Column chunks are a little larger than their tensors: ids, labels, page headers.)
    let expected: u64 = 2 * 720_000 + 2 * 720_000 + 8 * 4 * 360_000;
    assert!(
        smallest >= expected && smallest < expected + expected / 20,
        "{e}"
    );
    // That budget streams the files of small row groups; a large one, more than the whole
    // stream budget, is refused by name (never read over the budget), after the batches that
    // could be made.
    let results: Vec<Result<Batch, LoaderError>> = {
        let b = Loader::builder(path)
            .with_batch_size(4)
            .with_memory_budget(smallest);
        std::thread::spawn(move || b.build().unwrap().collect())
            .join()
            .unwrap()
    };
    let last = results.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        last.contains("more than the stream's memory budget")
            && last.contains("raise the memory budget"),
        "{last}"
    );
    assert!(results.len() > 1, "the first file's batches came first");
    // Enough for the large row groups: the whole table.
    let all = collect(
        Loader::builder(path)
            .with_batch_size(4)
            .with_shuffle(1, 8)
            .with_memory_budget(24_000_000),
    );
    assert_eq!(ids(&all).len(), 24);
}

/// A shuffle buffer of one batch: uniform draws leave the last rows of many row groups behind.
/// Their rows are copied out (counted in the stats) so the row groups are freed; the smallest
/// budget `build()` accepts streams every row once, in the order a large budget gives.
#[tokio::test]
async fn straggling_rows_are_copied_out_and_the_smallest_budget_streams() {
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 60, 21, 6, 4_000_000).await;
    let path = table.to_str().unwrap().to_string();
    let builder = |budget: u64| {
        Loader::builder(&path)
            .with_batch_size(7)
            .with_shuffle(5, 7)
            .with_memory_budget(budget)
    };
    let smallest = smallest_budget(&build_err(builder(4_000_000)).to_string());
    let run = move |b: voxlake::LoaderBuilder| {
        std::thread::spawn(move || {
            let mut loader = b.build().unwrap();
            let batches: Vec<Batch> = loader.by_ref().map(Result::unwrap).collect();
            (ids(&batches), loader.stats().loosened_rows)
        })
        .join()
        .unwrap()
    };
    let (tight, loosened) = run(builder(smallest));
    let (roomy, _) = run(builder(1 << 30));
    assert!(loosened > 0, "no row was copied out");
    assert_eq!(tight, roomy, "copying rows out changes no draw");
    let unique: HashSet<&String> = tight.iter().collect();
    assert_eq!((tight.len(), unique.len()), (60, 60));
}

/// Resuming where the buffer holds loosened row groups, at the smallest budget `build()`
/// accepts: the groups are read again one by one and trimmed as they arrive (read whole all at
/// once they outgrew the budget and the resume waited forever), and the rest of the epoch is
/// the uninterrupted run's.
#[tokio::test]
async fn resuming_with_loosened_groups_at_the_smallest_budget() {
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 120, 22, 6, 4_000_000).await;
    let path = table.to_str().unwrap().to_string();
    let builder = move |budget: u64| {
        Loader::builder(&path)
            .with_batch_size(7)
            .with_shuffle(6, 7)
            .with_memory_budget(budget)
    };
    let smallest = smallest_budget(&build_err(builder(4_000_000)).to_string());
    let full = ids(&collect(builder(smallest)));
    assert_eq!(full.len(), 120);
    let mut loosened_before_a_cut = 0;
    for cut in 1usize..17 {
        let b = builder(smallest);
        let (state, loosened) = std::thread::spawn(move || {
            let mut loader = b.build().unwrap();
            for _ in 0..cut {
                loader.next().unwrap().unwrap();
            }
            (loader.state(), loader.stats().loosened_rows)
        })
        .join()
        .unwrap();
        loosened_before_a_cut += loosened;
        let resumed = builder(smallest).with_state(state);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                resumed
                    .build()
                    .map(|l| l.map(|b| b.map(|b| b.ids)).collect::<Vec<_>>()),
            );
        });
        // A liveness bound, not a timing assertion: a hang never answers.
        let rest: Vec<String> = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the resume hung")
            .unwrap()
            .into_iter()
            .flat_map(Result::unwrap)
            .collect();
        assert_eq!(rest, full[cut * 7..], "cut {cut}");
    }
    assert!(loosened_before_a_cut > 0, "no cut had loose groups");
}

/// Batches assembled on a pool of threads are the batches of one thread, bit for bit.
#[tokio::test]
async fn parallel_assembly_gives_the_same_batches_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 30, 14).await;
    let path = table.to_str().unwrap();
    for channels_first in [false, true] {
        let run = |threads| {
            collect(
                Loader::builder(path)
                    .with_batch_size(4)
                    .with_shuffle(9, 12)
                    .with_epochs(2)
                    .with_channels_first(channels_first)
                    .with_assembly_threads(threads),
            )
        };
        let (one, four) = (run(1), run(4));
        assert_eq!(one.len(), 16);
        assert_eq!(one.len(), four.len());
        for (a, b) in one.iter().zip(&four) {
            assert_eq!((&a.ids, &a.labels), (&b.ids, &b.labels));
            assert!(a.tensors.as_bytes().is_some());
            assert_eq!(a.tensors.as_bytes(), b.tensors.as_bytes());
        }
    }
    let e = build_err(Loader::builder(path).with_assembly_threads(0)).to_string();
    assert!(e.contains("assembly threads"), "{e}");
}

/// Bad calls are errors, not panics: a file index past the end, a rank past the world.
#[tokio::test]
async fn bad_calls_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 4, 13).await;
    let snapshot = voxlake::table::Snapshot::builder(table.to_str().unwrap())
        .build()
        .await
        .unwrap();
    let scan = std::sync::Arc::new(snapshot)
        .scan_builder()
        .build()
        .await
        .unwrap();
    let e = scan.footer(99).await.unwrap_err().to_string();
    assert!(e.contains("no file 99"), "{e}");
    let e = build_err(Loader::builder(table.to_str().unwrap()).with_rank(3, 3)).to_string();
    assert!(e.contains("rank 3 must be below the world size 3"), "{e}");
    let e = build_err(Loader::builder(table.to_str().unwrap()).with_rank(0, 0)).to_string();
    assert!(e.contains("world size 0"), "{e}");
    let batches = collect(Loader::builder(table.to_str().unwrap()).with_batch_size(4));
    assert_eq!(
        batches[0].tensors.as_bytes().map(<[u8]>::len),
        Some(4 * 360_000)
    );
}

/// `build()` on a thread that drives async tasks (an async test, a service) opens the table on
/// a thread of its own: tokio refuses to block such a thread on another runtime (it panicked,
/// "Cannot start a runtime from within a runtime", before).
#[tokio::test]
async fn a_loader_builds_inside_an_async_task() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 6, 5).await;
    let loader = Loader::builder(table.to_str().unwrap())
        .with_batch_size(4)
        .build()
        .unwrap();
    let rows: usize = loader.map(|b| b.unwrap().len()).sum();
    assert_eq!(rows, 6);
    // An error of the build is the caller's, as on any thread.
    let built = Loader::builder(table.to_str().unwrap().to_owned() + "-nope").build();
    let e = built.map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("-nope"), "{e}");
}

/// A scan reads the columns it is given (id, label and the fields by default), and only those:
/// a loader without `label` hands out no labels, one without `id` empty ids, and the bytes
/// fetched shrink with the columns left out.
#[tokio::test]
async fn a_scan_reads_only_its_columns() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 6, 5).await;
    let at = table.to_str().unwrap();
    let snapshot = voxlake::table::Snapshot::builder(at).build().await.unwrap();
    let snapshot = std::sync::Arc::new(snapshot);
    let all = snapshot.scan_builder().build().await.unwrap();
    assert_eq!(all.columns(), ["id", "label", "tensor"]);
    let given = snapshot.scan_builder().with_columns(vec!["id".into()]);
    assert_eq!(given.build().await.unwrap().columns(), ["id"]);
    let read = |columns: Option<Vec<&str>>| {
        let mut builder = Loader::builder(at).with_batch_size(3);
        if let Some(columns) = columns {
            builder = builder.with_columns(columns.into_iter().map(String::from).collect());
        }
        let mut loader = builder.build().unwrap();
        let batches: Vec<Batch> = loader.by_ref().map(Result::unwrap).collect();
        (batches, loader.stats().stream.bytes)
    };
    let (every, bytes_all) = read(None);
    assert!(every.iter().all(|b| b.labels.iter().all(Option::is_some)));
    let (no_label, bytes_no_label) = read(Some(vec!["id", "tensor"]));
    assert!(
        no_label
            .iter()
            .all(|b| b.labels.iter().all(Option::is_none))
    );
    assert_eq!(
        no_label.iter().map(|b| b.ids.clone()).collect::<Vec<_>>(),
        every.iter().map(|b| b.ids.clone()).collect::<Vec<_>>()
    );
    let (no_id, bytes_tensor) = read(Some(vec!["tensor"]));
    assert!(no_id.iter().all(|b| b.ids.iter().all(String::is_empty)));
    assert_eq!(
        no_id
            .iter()
            .map(|b| b.tensors.as_bytes().unwrap().to_vec())
            .collect::<Vec<_>>(),
        every
            .iter()
            .map(|b| b.tensors.as_bytes().unwrap().to_vec())
            .collect::<Vec<_>>()
    );
    assert!(
        bytes_tensor < bytes_no_label && bytes_no_label < bytes_all,
        "{bytes_tensor} {bytes_no_label} {bytes_all}"
    );
}

/// Bits flipped at random offsets of a data file (40 seeded flips, one at a time): each is
/// caught (an error naming the file) or harmless (every id, label and value as written), none
/// delivered silently. Truncated files are errors.
#[tokio::test]
async fn flipped_bits_are_caught_or_harmless_and_truncation_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path(), 8, 15).await;
    let victim = data_files(&table).remove(0);
    let name = victim.file_name().unwrap().to_str().unwrap().to_string();
    let original = std::fs::read(&victim).unwrap();
    let run = || -> Result<Vec<Batch>, LoaderError> {
        let b = Loader::builder(table.to_str().unwrap()).with_batch_size(4);
        std::thread::spawn(move || b.build()?.collect())
            .join()
            .unwrap()
    };
    let mut rng = voxlake::plan::plan::SeededRng::new(15);
    let (mut caught, mut harmless) = (0, 0);
    for _ in 0..40 {
        let mut bytes = original.clone();
        let at = rng.below(bytes.len());
        bytes[at] ^= 1 << rng.below(8);
        std::fs::write(&victim, &bytes).unwrap();
        match run() {
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains(&name), "flip at {at}: {e}");
                caught += 1;
            }
            Ok(batches) => {
                let mut seen = 0;
                for b in &batches {
                    let t = b.tensors.as_f32().unwrap();
                    for (i, id) in b.ids.iter().enumerate() {
                        let (label, bytes) = cube_bytes(15, index_of(id));
                        let row = t.index_axis(ndarray::Axis(0), i);
                        let got: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                        assert!(
                            got == bytes && b.labels[i] == Some(label),
                            "flip at {at}: {id} delivered changed"
                        );
                        seen += 1;
                    }
                }
                assert_eq!(seen, 8, "flip at {at}: rows lost");
                harmless += 1;
            }
        }
    }
    assert!(caught > 30, "{caught} caught, {harmless} harmless");
    for cut in [original.len() / 2, original.len() - 1, 100] {
        std::fs::write(&victim, &original[..cut]).unwrap();
        let e = run().expect_err("a truncated file must fail").to_string();
        assert!(e.contains(&name), "cut at {cut}: {e}");
    }
}

/// One corrupt row (a byte flipped in the middle of a tensor chunk): a stream checking on read
/// refuses its row group; one leaving the checks to its consumer hands it out and
/// `check_row` names that row alone, each time it is asked; the loader, which checks each row
/// as it copies it, ends with the error, having delivered only whole rows.
#[tokio::test]
async fn a_corrupt_row_is_caught_on_read_on_use_and_by_the_loader() {
    use futures::StreamExt;
    use voxlake::stream::{ReadOptions, TableStream, Verify};
    let dir = tempfile::tempdir().unwrap();
    let table = table_of(dir.path(), 8, 21, 4, 1 << 30).await;
    let victim = data_files(&table).remove(0);
    voxlake_testkit::flip_in_chunk(&victim, "tensor", |start, len| start + len / 2, 0x10);
    let path = table.to_str().unwrap();
    let stream = |verify| async move {
        let read = ReadOptions {
            verify,
            ..ReadOptions::default()
        };
        let stream = TableStream::builder(path)
            .with_read_options(read)
            .build()
            .await
            .unwrap();
        stream.epoch(0).collect::<Vec<_>>().await
    };
    let on_read = stream(Verify::OnRead).await;
    let e = on_read
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("refused on read");
    assert!(e.to_string().contains("CRC-32"), "{e}");
    let on_use = stream(Verify::OnUse).await;
    let groups: Vec<_> = on_use.into_iter().map(Result::unwrap).collect();
    let mut bad = Vec::new();
    for g in &groups {
        for i in 0..g.batch.num_rows() {
            if let Err(e) = g.check_row(i) {
                let again = g.check_row(i).unwrap_err().to_string();
                assert_eq!(e.to_string(), again, "a corrupt row fails every time");
                bad.push((g.row_group(), i, again));
            }
        }
    }
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].2.contains("CRC-32") && bad[0].2.contains("row group 0"),
        "{bad:?}"
    );
    // The loader: an error naming the row, and every row it delivered before it whole.
    let builder = Loader::builder(path).with_batch_size(1);
    let (delivered, error) = std::thread::spawn(move || {
        let mut loader = builder.build().unwrap();
        let mut delivered = Vec::new();
        loop {
            match loader.next() {
                Some(Ok(b)) => delivered.push(b),
                Some(Err(e)) => return (delivered, Some(e.to_string())),
                None => return (delivered, None),
            }
        }
    })
    .join()
    .unwrap();
    let error = error.expect("the loader ends with the error");
    assert!(
        error.contains("CRC-32") && error.contains("corrupt"),
        "{error}"
    );
    assert!(delivered.len() < 8);
    for b in &delivered {
        let (label, bytes) = cube_bytes(21, index_of(&b.ids[0]));
        let got: Vec<u8> = b
            .tensors
            .as_f32()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert!(
            got == bytes && b.labels[0] == Some(label),
            "{} delivered changed",
            b.ids[0]
        );
    }
}

/// Tables of 12 cubes in row groups of `rows` rows (uniform), made once per size.
fn uniform_table(rows: usize) -> PathBuf {
    use std::sync::{Mutex, OnceLock};
    static TABLES: OnceLock<Mutex<HashMap<usize, (tempfile::TempDir, PathBuf)>>> = OnceLock::new();
    let mut tables = TABLES.get_or_init(Default::default).lock().unwrap();
    tables
        .entry(rows)
        .or_insert_with(|| {
            let dir = tempfile::tempdir().unwrap();
            let data = synth::generate(dir.path(), 12, 16).unwrap();
            let table = dir.path().join("table");
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(
                    Compactor::new(table.to_str().unwrap())
                        .with_labels(data.labels.to_str().unwrap())
                        .with_layout(Layout {
                            row_group_rows: rows,
                            // Whole row groups per file: every row group has `rows` rows.
                            target_file_bytes: 1,
                            ..Layout::default()
                        })
                        .convert(data.cubes.to_str().unwrap()),
                )
                .unwrap();
            (dir, table)
        })
        .1
        .clone()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Over batch size, rows per row group, budget, shuffle buffer, prefetch and world size: a
    /// loader streams every batch of the epoch, or is refused at build naming the smallest budget
    /// that works; never a hang, never an error at run time (shuffle buffers close to a batch
    /// included, where uniform draws leave rows of many groups behind).
    #[test]
    fn a_budget_either_streams_or_is_refused(
        rows in proptest::sample::select(vec![1usize, 2, 3, 5]),
        batch in 1usize..9,
        budget_kib in 1_000u64..32_000,
        // Often close to a batch: where uniform draws leave rows of many groups behind.
        buffer in proptest::option::of(1usize..12),
        prefetch in 1usize..4,
        world in 1usize..4,
    ) {
        let table = uniform_table(rows);
        let mut b = Loader::builder(table.to_str().unwrap())
            .with_batch_size(batch)
            .with_memory_budget(budget_kib * 1024)
            .with_prefetch(prefetch)
            .with_rank(world - 1, world);
        if let Some(buffer) = buffer {
            b = b.with_shuffle(3, buffer);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let outcome = match b.build() {
                Err(e) => Err(e.to_string()),
                Ok(loader) => {
                    let expected = loader.iterations_per_epoch();
                    let got: Result<Vec<Batch>, LoaderError> = loader.collect();
                    got.map(|v| (v.len() as u64, expected)).map_err(|e| format!("at run time: {e}"))
                }
            };
            let _ = tx.send(outcome);
        });
        // A liveness bound, not a timing assertion: a hang never answers.
        let outcome = rx.recv_timeout(Duration::from_secs(120)).expect("the loader hung");
        match outcome {
            Ok((got, expected)) => proptest::prop_assert_eq!(got, expected),
            Err(e) => proptest::prop_assert!(
                e.contains("smallest budget that works") && !e.starts_with("at run time"),
                "{}", e
            ),
        }
    }
}

/// Row groups kept in the memory budget between epochs: with a budget that holds the table,
/// every later epoch takes its row groups back without reading them; with the smallest budget
/// `build()` accepts, fewer; either way the same batches, bit for bit, as a run that keeps
/// none.
#[tokio::test]
async fn row_groups_kept_in_the_budget_are_not_read_again() {
    let dir = tempfile::tempdir().unwrap();
    // 10 row groups of 4 cubes (1.44 MB each) in files of about 3 MB.
    let table = table_of(dir.path(), 40, 31, 4, 3_000_000).await;
    let builder = |budget: u64| {
        Loader::builder(table.to_str().unwrap())
            .with_batch_size(5)
            .with_shuffle(9, 40)
            .with_epochs(3)
            .with_memory_budget(budget)
    };
    // Batches and (row groups delivered, of them not read) of a whole run.
    let run = |builder: voxlake::LoaderBuilder| {
        std::thread::spawn(move || {
            let mut loader = builder.build().unwrap();
            let batches: Vec<Batch> = loader.by_ref().map(Result::unwrap).collect();
            let stream = loader.stats().stream;
            (batches, stream.row_groups, stream.kept_hits)
        })
        .join()
        .unwrap()
    };
    let smallest = smallest_budget(&build_err(builder(1 << 20)).to_string());
    for budget in [256 << 20, smallest] {
        let (kept, groups, reused) = run(builder(budget));
        assert_eq!(groups, 30);
        match budget == smallest {
            false => assert_eq!(reused, 20, "epochs 1 and 2 read nothing"),
            true => assert!(reused < 20, "{reused} of 20 kept in the smallest budget"),
        }
        let (none, groups, reused) = run(builder(budget).with_keep_row_groups(false));
        assert_eq!((groups, reused), (30, 0));
        assert_eq!(ids(&kept), ids(&none));
        for (a, b) in kept.iter().zip(&none) {
            assert!(
                a.tensors.as_bytes() == b.tensors.as_bytes() && a.labels == b.labels,
                "batch {} of epoch {}",
                a.index,
                a.epoch
            );
        }
        // Every row once an epoch.
        for epoch in 0..3 {
            let mut rows: Vec<&String> = kept
                .iter()
                .filter(|b| b.epoch == epoch)
                .flat_map(|b| &b.ids)
                .collect();
            rows.sort();
            rows.dedup();
            assert_eq!(rows.len(), 40, "epoch {epoch}");
        }
    }
}
