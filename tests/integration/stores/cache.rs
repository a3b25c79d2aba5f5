//! The disk cache on the real stores: later epochs and other processes read from it (counted
//! at the proxy), the same rows and bytes as without it, eviction under the cap, a corrupted
//! entry fetched again, a writer killed mid-epoch, a file rewritten under the same path.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use voxlake::Loader;
use voxlake::stream::StreamStats;
use voxlake_testkit::{FaultPlan, FaultProxy, json_output, voxlake_bin};

use super::{Backend, remote_table, unique_prefix, upload};

/// One run's ids in delivery order, the sum of every tensor byte, and the stream's counters.
fn run(
    table: &str,
    options: HashMap<String, String>,
    cache: Option<(&Path, u64)>,
    epochs: u64,
) -> (Vec<String>, u64, StreamStats) {
    run_with(Loader::builder(table.to_string()), options, cache, epochs)
}

/// [`run`] of `builder`.
fn run_with(
    builder: voxlake::LoaderBuilder,
    options: HashMap<String, String>,
    cache: Option<(&Path, u64)>,
    epochs: u64,
) -> (Vec<String>, u64, StreamStats) {
    let mut builder = builder
        .with_storage_options(options)
        .with_batch_size(4)
        .with_epochs(epochs)
        .with_shuffle(11, 8)
        // Every epoch reads its row groups (through the cache), none kept in memory.
        .with_keep_row_groups(false);
    builder = match cache {
        Some((dir, max)) => builder.with_cache(dir, max),
        None => builder.with_cache_choice(voxlake::io::cache::CacheChoice::Off),
    };
    std::thread::spawn(move || {
        let mut loader = builder.build().unwrap();
        let (mut ids, mut sum) = (Vec::new(), 0u64);
        for batch in loader.by_ref() {
            let batch = batch.unwrap();
            sum += batch
                .tensors
                .as_bytes()
                .unwrap()
                .iter()
                .map(|&b| u64::from(b))
                .sum::<u64>();
            ids.extend(batch.ids);
        }
        (ids, sum, loader.stats().stream)
    })
    .join()
    .unwrap()
}

/// Data-file reads the proxy saw since `before`.
fn data_reads(proxy: &FaultProxy, before: usize) -> usize {
    proxy.requests()[before..]
        .iter()
        .filter(|r| r.target.contains(".parquet"))
        .count()
}

/// Two epochs through a cache: the first fetches every footer and row group once, the second
/// reads them all from disk (not one request), with the same rows and bytes as a run without
/// the cache; a second process finds the entries too.
async fn later_epochs_and_processes_read_from_the_cache(backend: Backend) {
    let table = remote_table(backend, "cache", 32, 31).await.table;
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let opts = backend.through(&proxy);
    let (plain_ids, plain_sum, _) = run(&table, opts.clone(), None, 2);
    // Footers and row groups, each once.
    let table_bytes = run(&table, opts.clone(), None, 1).2.store_bytes;
    let dir = tempfile::tempdir().unwrap();
    let before = proxy.requests().len();
    let (ids, sum, stats) = run(&table, opts.clone(), Some((dir.path(), 1 << 30)), 2);
    assert_eq!(
        (ids, sum),
        (plain_ids.clone(), plain_sum),
        "the same rows and bytes"
    );
    let files = data_reads(&proxy, before) - 8;
    // Eight row groups of four cubes; each footer and row group fetched once, in epoch one.
    assert_eq!(data_reads(&proxy, before), files + 8);
    assert_eq!(
        stats.store_requests as usize,
        files + 8,
        "each data request the store answered, counted once"
    );
    let cache = stats.cache;
    assert_eq!(cache.misses as usize, files + 8, "{cache:?}");
    assert_eq!(cache.hits, 8, "epoch two from the cache: {cache:?}");
    assert_eq!(cache.corrupt, 0);
    assert_eq!(
        stats.store_bytes, table_bytes,
        "the table fetched once in two epochs"
    );
    // Another process of the node: every read a hit, nothing fetched.
    let before = proxy.requests().len();
    let (ids, _, stats) = run(&table, opts, Some((dir.path(), 1 << 30)), 1);
    assert_eq!(ids, plain_ids[..32]);
    assert_eq!(data_reads(&proxy, before), 0);
    assert_eq!(
        (stats.cache.misses, stats.store_bytes, stats.store_requests),
        (0, 0, 0)
    );
}

on_every_backend!(later_epochs_and_processes_read_from_the_cache);

/// Two `voxlake bench` processes reading the table at once through one cache fetch it about
/// once between them.
async fn processes_at_once_fetch_the_table_once(backend: Backend) {
    let table = remote_table(backend, "cache-two", 48, 37).await.table;
    let dir = tempfile::tempdir().unwrap();
    let bench = |seed: &str| {
        let mut cmd = Command::new(voxlake_bin());
        cmd.args(["bench", &table, "--json", "--shuffle", "--seed", seed])
            .args(["--batch-size", "4", "--cache-max-mb", "1024", "--cache-dir"])
            .arg(dir.path())
            .envs(backend.standard_env());
        cmd
    };
    let (mut a, mut b) = (bench("1"), bench("2"));
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| json_output(&mut a));
        let b = s.spawn(|| json_output(&mut b));
        (a.join().unwrap(), b.join().unwrap())
    });
    let fetched = a["store_bytes_read"].as_u64().unwrap() + b["store_bytes_read"].as_u64().unwrap();
    let plain = run(&table, backend.options(), None, 1).2.store_bytes;
    assert_eq!(
        (a["samples"].as_u64(), b["samples"].as_u64()),
        (Some(48), Some(48))
    );
    let (sa, sb) = (
        a["checksum"].as_f64().unwrap(),
        b["checksum"].as_f64().unwrap(),
    );
    assert!(
        (sa - sb).abs() < 1e-6 * sa.abs(),
        "{sa} vs {sb}: sums in other orders"
    );
    assert!(
        fetched as f64 <= 1.2 * plain as f64,
        "{fetched} bytes fetched by both, the table is {plain}"
    );
    let hits = a["cache_hits"].as_u64().unwrap() + b["cache_hits"].as_u64().unwrap();
    assert!(hits > 0, "{a} {b}");
}

on_every_backend!(processes_at_once_fetch_the_table_once);

/// Under a cap of about a third of the table the cache evicts and stays under it, every row
/// still delivered once an epoch; a corrupted entry is fetched again, never delivered; a
/// process killed while filling the cache leaves nothing a later run reads.
async fn eviction_corruption_and_a_killed_writer(backend: Backend) {
    let table = remote_table(backend, "cache-evict", 32, 41).await.table;
    let opts = backend.options();
    let (plain_ids, plain_sum, plain) = run(&table, opts.clone(), None, 1);
    let dir = tempfile::tempdir().unwrap();
    let cap = plain.store_bytes / 3;
    let (ids, sum, stats) = run(&table, opts.clone(), Some((dir.path(), cap)), 3);
    assert_eq!(ids.len(), 96);
    assert_eq!(sum, 3 * plain_sum);
    let cache = voxlake::io::cache::DiskCache::open(dir.path(), cap).unwrap();
    assert!(cache.used_bytes() <= cap, "{} > {cap}", cache.used_bytes());
    assert!(stats.cache.evicted > 0, "{:?}", stats.cache);
    // Every entry's bytes flipped: each is found corrupt, fetched again; the rows are right.
    let dir = tempfile::tempdir().unwrap();
    run(&table, opts.clone(), Some((dir.path(), 1 << 30)), 1);
    let entries: Vec<_> = std::fs::read_dir(
        dir.path()
            .join(voxlake::io::cache::CACHE_SUBDIR)
            .join("entries"),
    )
    .unwrap()
    .map(|e| e.unwrap().path())
    .collect();
    for entry in &entries {
        let mut bytes = std::fs::read(entry).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(entry, bytes).unwrap();
    }
    let (ids, sum, stats) = run(&table, opts.clone(), Some((dir.path(), 1 << 30)), 1);
    assert_eq!((ids, sum), (plain_ids.clone(), plain_sum));
    // The version's kept file list is not read by a rank that replays "latest" itself (it only
    // sees that one is kept); a rank asking that version reads it, finds it corrupt, makes it
    // again (`a_version_is_replayed_once_a_node_and_a_corrupt_list_made_again`).
    let lists = entries
        .iter()
        .filter(|e| {
            let bytes = std::fs::read(e).unwrap();
            bytes.windows(19).any(|w| w == b"voxlake-file-list-1")
        })
        .count();
    assert_eq!(lists, 1, "the first run kept its version's list");
    assert_eq!(
        stats.cache.corrupt as usize,
        entries.len() - lists,
        "{:?}",
        stats.cache
    );
    assert_eq!(stats.cache.hits, 0);
    // A bench process killed while it fills a fresh cache; the next run reads what it left.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(voxlake_bin())
        .args([
            "bench",
            &table,
            "--epochs",
            "50",
            "--cache-max-mb",
            "1024",
            "--cache-dir",
        ])
        .arg(dir.path())
        .envs(backend.standard_env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let entries = dir
        .path()
        .join(voxlake::io::cache::CACHE_SUBDIR)
        .join("entries");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Entries of data (not of the log, nor the version's file list kept with it).
    let data_entries = || {
        std::fs::read_dir(&entries).map_or(0, |d| {
            d.filter(|e| {
                // The header holds the key: its first 512 bytes are enough.
                let head = e.as_ref().ok().and_then(|e| {
                    let mut head = Vec::new();
                    let file = std::fs::File::open(e.path()).ok()?;
                    std::io::Read::read_to_end(&mut std::io::Read::take(file, 512), &mut head)
                        .ok()?;
                    Some(head)
                });
                head.is_some_and(|key| {
                    !key.windows(10).any(|w| w == b"_delta_log")
                        && !key.windows(14).any(|w| w == b"voxlake-file-l")
                })
            })
            .count()
        })
    };
    while data_entries() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (ids, sum, stats) = run(&table, opts, Some((dir.path(), 1 << 30)), 1);
    assert_eq!((ids, sum), (plain_ids, plain_sum));
    assert_eq!(stats.cache.corrupt, 0, "nothing half-written is read");
    assert!(stats.cache.hits > 0, "{:?}", stats.cache);
}

on_every_backend!(eviction_corruption_and_a_killed_writer);

/// A folder of Parquet files (no log: the listing gives each file's e-tag) whose file is
/// rewritten under the same path: the new bytes are read, never the old entry's.
async fn a_rewritten_file_is_never_read_from_the_cache(backend: Backend) {
    let a = remote_table(backend, "cache-a", 8, 43).await.table;
    let b = remote_table(backend, "cache-b", 8, 44).await.table;
    let local = tempfile::tempdir().unwrap();
    let copy = |url: &str, to: &str| {
        let store = backend.store();
        let prefix = url
            .split_once(&format!("{}/", backend.bucket()))
            .unwrap()
            .1
            .to_string();
        let file = local.path().join(to);
        async move {
            let listed: Vec<_> = futures::TryStreamExt::try_collect(
                store.list(Some(&object_store::path::Path::from(prefix))),
            )
            .await
            .unwrap();
            let part = listed
                .iter()
                .find(|o| o.location.as_ref().ends_with(".parquet"))
                .unwrap();
            let bytes = object_store::ObjectStoreExt::get(store.as_ref(), &part.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            std::fs::write(&file, &bytes).unwrap();
            file
        }
    };
    let (file_a, file_b) = (copy(&a, "a.parquet").await, copy(&b, "b.parquet").await);
    let folder = unique_prefix("cache-folder");
    let key = format!("{folder}/part-0.parquet");
    let store = backend.store();
    upload(store.as_ref(), &file_a, &key).await;
    let url = backend.url(&folder);
    let dir = tempfile::tempdir().unwrap();
    let cache = Some((dir.path(), 1 << 30));
    // Without a log, the raw tensor bytes need their shape.
    let read = |cache| {
        let builder = Loader::builder(url.clone())
            .with_tensor_shape(vec![30, 30, 10, 10], voxlake::format::DType::F32);
        run_with(builder, backend.options(), cache, 1)
    };
    let (_, first, _) = read(cache);
    upload(store.as_ref(), &file_b, &key).await;
    let (ids, second, stats) = read(cache);
    let (expected_ids, expected, _) = read(None);
    assert_eq!(
        (ids, second),
        (expected_ids, expected),
        "the rewritten file's rows"
    );
    assert_ne!(first, second, "two tables of other cubes");
    assert_eq!(stats.cache.hits, 0, "no entry of the old file is used");
}

on_every_backend!(a_rewritten_file_is_never_read_from_the_cache);

/// `command` as user `nobody` (`setpriv`), or the reason to skip given by
/// `voxlake_testkit::as_nobody` (not root, with VOXLAKE_SKIP_ROOT_TESTS set).
fn as_nobody(args: &[&str]) -> Result<std::process::Output, String> {
    let mut command = voxlake_testkit::as_nobody(args[0])?;
    Ok(command
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("setpriv {args:?}: {e}")))
}

/// Another local user (`nobody`, a real process through `setpriv`) gets to a shared scratch
/// folder first: a link named like the cache's own folder pointing at a folder of the
/// victim's, or a cache folder of their own. The victim's `voxlake bench --cache-dir` refuses
/// both with one error naming the folder, touches nothing behind the link, and trains once the
/// folder is its own.
async fn another_users_planted_cache_is_refused(backend: Backend) {
    let table = remote_table(backend, "cache-planted", 8, 61).await.table;
    let shared = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    std::fs::write(victim.path().join("precious"), b"keep").unwrap();
    use std::os::unix::fs::PermissionsExt;
    // A scratch folder every user may write to, as /tmp (sticky).
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = shared.path().join("voxlake-cache-v1");
    let link = as_nobody(&[
        "ln",
        "-s",
        victim.path().to_str().unwrap(),
        planted.to_str().unwrap(),
    ]);
    let link = match link {
        Ok(out) => out,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    assert!(link.status.success(), "{link:?}");
    let bench = || {
        Command::new(voxlake_bin())
            .args([
                "bench",
                &table,
                "--json",
                "--cache-max-mb",
                "64",
                "--cache-dir",
            ])
            .arg(shared.path())
            .envs(backend.standard_env())
            .output()
            .unwrap()
    };
    let refused = |out: &std::process::Output, why: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "used: {stderr}");
        assert!(
            stderr.contains("voxlake-cache-v1") && stderr.contains(why),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    refused(&bench(), "symbolic link");
    let left: Vec<_> = std::fs::read_dir(victim.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "the victim's folder was written to");
    assert_eq!(
        std::fs::read(victim.path().join("precious")).unwrap(),
        b"keep"
    );

    // Their own cache folder, made first: refused too.
    std::fs::remove_file(&planted).unwrap();
    let made = as_nobody(&["mkdir", "-m", "0777", planted.to_str().unwrap()]).unwrap();
    assert!(made.status.success(), "{made:?}");
    refused(&bench(), "owned by user 65534");

    // The folder this user's own: the run trains through it.
    std::fs::remove_dir(&planted).unwrap();
    let out = bench();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["samples"].as_u64(), Some(8));
}

on_every_backend!(another_users_planted_cache_is_refused);

/// Node affinity, 2 nodes × 2 ranks, a cache per node: every row once an epoch over the four
/// ranks, and the second epoch reads at least 90 % of each node's row groups from its own cache
/// (each file is one row group; the node's span ends half a file off its home). Without
/// affinity the same run finds about half of them there.
async fn node_affinity_keeps_a_nodes_rows_in_its_cache(backend: Backend) {
    let count = 100;
    let uploaded = super::uploaded(backend, "affinity", count, 43).await;
    voxlake::compact::Compactor::new(&uploaded.table)
        .with_storage_options(backend.options())
        .with_layout(voxlake::format::Layout {
            row_group_rows: 4,
            target_file_bytes: 1_000_000,
            ..voxlake::format::Layout::default()
        })
        .convert(&uploaded.src)
        .await
        .unwrap();
    let mut second_epoch_hit_rates = Vec::new();
    for affinity in [true, false] {
        let caches = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut rates = Vec::new();
        for epoch in 0..2 {
            let mut ids = Vec::new();
            let mut node_reads = [(0u64, 0u64); 2];
            for rank in 0..4 {
                let node = rank / 2;
                let mut builder = Loader::builder(uploaded.table.clone())
                    .with_rank(rank, 4)
                    .with_job(format!("{}-affinity-{affinity}", uploaded.prefix))
                    .with_start_epoch(epoch);
                if affinity {
                    builder = builder.with_node_affinity(node, 2);
                }
                let (rank_ids, _, stats) = run_with(
                    builder,
                    backend.options(),
                    Some((caches[node].path(), 1 << 30)),
                    1,
                );
                assert_eq!(rank_ids.len(), count / 4, "rank {rank}: equal steps");
                ids.extend(rank_ids);
                node_reads[node].0 += stats.cache.hits;
                node_reads[node].1 += stats.cache.hits + stats.cache.misses;
            }
            ids.sort();
            let before = ids.len();
            ids.dedup();
            assert_eq!(
                (before, ids.len()),
                (count, count),
                "every row once in epoch {epoch}"
            );
            if epoch == 1 {
                rates = node_reads
                    .iter()
                    .map(|&(hits, reads)| hits as f64 / reads as f64)
                    .collect();
            }
        }
        second_epoch_hit_rates.push(rates);
    }
    let (with, without) = (&second_epoch_hit_rates[0], &second_epoch_hit_rates[1]);
    assert!(
        with.iter().all(|&r| r >= 0.9),
        "with affinity, each node's cache hits in epoch 2: {with:?}"
    );
    assert!(
        without.iter().all(|&r| r < 0.75),
        "without affinity (the contrast): {without:?}"
    );
}

on_every_backend!(node_affinity_keeps_a_nodes_rows_in_its_cache);

/// 8 processes of a node opening the table at once through one cache fetch each immutable log
/// object (the commits, the checkpoint's ranges) from the store once between them, counted at
/// the proxy (voxlake-delta's `log_cache`); without the cache every process fetches every commit.
async fn ranks_of_a_node_fetch_each_log_object_once(backend: Backend) {
    let count = 12;
    let uploaded = super::uploaded(backend, "log-once", count, 41).await;
    // Half the cubes, a checkpoint, then the rest: commits on both sides of it.
    for shard in [Some((0, 2)), None] {
        let mut c = super::one_file_commits(&uploaded.table, backend.options());
        if let Some((i, n)) = shard {
            c = c.with_shard(i, n);
            c.convert(&uploaded.src).await.unwrap();
            super::write_checkpoint(backend, &uploaded.table).await;
        } else {
            c.convert(&uploaded.src).await.unwrap();
        }
    }
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = super::options_file(backend, &proxy, &dir.path().join("options"));
    let log_gets = |from: usize| -> HashMap<String, usize> {
        let mut gets = HashMap::new();
        for r in &proxy.requests()[from..] {
            let immutable = r.target.contains("_delta_log")
                && !r.target.contains("_last_checkpoint")
                && r.method == "GET"
                && !r.target.contains("list");
            if immutable {
                *gets
                    .entry(format!("{} {:?}", r.target, r.range))
                    .or_insert(0) += 1;
            }
        }
        gets
    };
    for cached in [true, false] {
        let before = proxy.requests().len();
        let cache = dir.path().join(format!("cache-{cached}"));
        let outs: Vec<serde_json::Value> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..8)
                .map(|rank| {
                    let mut cmd = Command::new(voxlake_bin());
                    cmd.args(["bench", &uploaded.table, "--json", "--batch-size", "4"])
                        .args(["--rank", &rank.to_string(), "--world-size", "8"])
                        .args(["--version", &count.to_string()])
                        .arg("--storage-option-file")
                        .arg(&options);
                    if cached {
                        cmd.args(["--cache-max-mb", "1024", "--cache-dir"])
                            .arg(&cache);
                    } else {
                        cmd.arg("--no-cache");
                    }
                    s.spawn(move || json_output(&mut cmd))
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let samples: u64 = outs.iter().map(|o| o["samples"].as_u64().unwrap()).sum();
        assert!(samples >= count as u64, "every row read: {samples}");
        let gets = log_gets(before);
        let commits = gets.keys().filter(|k| k.contains(".json")).count();
        assert!(
            commits >= 6,
            "the commits after the checkpoint were read: {gets:#?}"
        );
        assert!(
            gets.keys().any(|k| k.contains("checkpoint.parquet")),
            "the checkpoint was read: {gets:#?}"
        );
        let most = gets.values().copied().max().unwrap_or(0);
        if cached {
            assert_eq!(most, 1, "one fetch of each log object a node: {gets:#?}");
        } else {
            assert!(
                most >= 8,
                "without the cache each process fetches them: {gets:#?}"
            );
        }
    }
}

on_every_backend!(ranks_of_a_node_fetch_each_log_object_once);

/// A version's replayed file list is kept in the node's cache: a rank after the first (or a
/// resume) reads it and makes no request of the log at all; a corrupt list is made again from
/// the log, never used.
async fn a_version_is_replayed_once_a_node_and_a_corrupt_list_made_again(backend: Backend) {
    let count = 10;
    let uploaded = super::uploaded(backend, "list-once", count, 43).await;
    voxlake::compact::Compactor::new(&uploaded.table)
        .with_storage_options(backend.options())
        .with_layout(voxlake::format::Layout {
            row_group_rows: 1,
            target_file_bytes: 30_000,
            ..voxlake::format::Layout::default()
        })
        .with_files_per_commit(1)
        .convert(&uploaded.src)
        .await
        .unwrap();
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = super::options_file(backend, &proxy, &dir.path().join("options"));
    let cache = dir.path().join("cache");
    let bench = |cache: &Path, version: Option<usize>| {
        let before = proxy.requests().len();
        let mut cmd = Command::new(voxlake_bin());
        cmd.args(["bench", &uploaded.table, "--json", "--batch-size", "1"]);
        if let Some(version) = version {
            cmd.args(["--version", &version.to_string()]);
        }
        cmd.args(["--cache-max-mb", "1024", "--cache-dir"])
            .arg(cache)
            .arg("--storage-option-file")
            .arg(&options);
        let out = json_output(&mut cmd);
        let log = proxy.requests()[before..]
            .iter()
            .filter(|r| r.target.contains("_delta_log"))
            .count();
        (out, log)
    };
    // "Latest" resolved by each process: the first keeps its replay, a second that replays the
    // same version finds it kept and neither encodes nor reads it (its log hits are the log's
    // objects only, one fewer than the first's misses, which include the list it made).
    let other = dir.path().join("latest");
    let (latest, _) = bench(&other, None);
    let (again, _) = bench(&other, None);
    assert_eq!(again["version"], latest["version"]);
    let made = latest["cache_log_misses"].as_u64().unwrap();
    assert_eq!(
        again["cache_log_hits"].as_u64(),
        Some(made - 1),
        "{latest} {again}"
    );
    let run = || bench(&cache, Some(count));
    let (first, first_log) = run();
    assert_eq!(first["samples"].as_u64(), Some(count as u64));
    assert!(
        first_log > count,
        "the first rank replays the log: {first_log}"
    );
    let (second, second_log) = run();
    assert_eq!(second["samples"].as_u64(), Some(count as u64));
    assert_eq!(second["version"], first["version"]);
    assert_eq!(
        second_log, 0,
        "the list read from the node's cache: no log request"
    );
    assert!(second["cache_log_hits"].as_u64() >= Some(1), "{second}");
    // A bit flipped in the list: not used, made again from the log.
    let mut lists = 0;
    for entry in
        std::fs::read_dir(cache.join(voxlake::io::cache::CACHE_SUBDIR).join("entries")).unwrap()
    {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        if bytes.windows(19).any(|w| w == b"voxlake-file-list-1") {
            let last = bytes.len() - 1;
            bytes[last] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            lists += 1;
        }
    }
    assert_eq!(lists, 1, "one list for the one version");
    let (third, third_log) = run();
    assert_eq!(third["samples"].as_u64(), Some(count as u64));
    assert_eq!(third["cache_corrupt"].as_u64(), Some(1), "{third}");
    assert!(third_log > 0, "replayed again from the log");
    let (_, fourth_log) = run();
    assert_eq!(fourth_log, 0, "the list made again is used");
}

on_every_backend!(a_version_is_replayed_once_a_node_and_a_corrupt_list_made_again);

/// A version's row index kept in the node's cache: the first lookup by id reads the id
/// column (through the cache, as every read of a data file) and writes the index; a second
/// lookup of the node (another process, a DataLoader worker) reads the index's one entry and
/// no id column at all, not even from the cache, and finds the same ids at the same
/// positions.
async fn the_row_index_is_kept_in_the_nodes_cache(backend: Backend) {
    let table = remote_table(backend, "cache-index", 24, 47).await.table;
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A lookup of the node: its ids, and the data reads (from the cache or the store) and
    // the made entries read (`log_hits`) of its `ids()`.
    let lookup_ids = || {
        let builder = Loader::builder(table.clone())
            .with_storage_options(backend.through(&proxy))
            .with_cache(dir.path(), 1 << 30);
        std::thread::scope(|s| {
            s.spawn(|| {
                let lookup = builder.build_lookup().unwrap();
                let before = lookup.stats().stream.cache;
                let index = lookup.ids().unwrap();
                let after = lookup.stats().stream.cache;
                let ids: Vec<String> = index.ids().map(str::to_string).collect();
                assert_eq!(lookup.positions(&[ids[5].as_str()]).unwrap(), vec![5]);
                let data = (after.hits + after.misses) - (before.hits + before.misses);
                (ids, data, after.log_hits - before.log_hits)
            })
            .join()
            .unwrap()
        })
    };
    let (first, first_data, _) = lookup_ids();
    assert_eq!(first.len(), 24);
    assert!(first_data > 0, "the id column read");
    let (again, again_data, made_read) = lookup_ids();
    assert_eq!(again, first);
    assert_eq!(
        (again_data, made_read),
        (0, 1),
        "the row index from the node's cache"
    );
}

on_every_backend!(the_row_index_is_kept_in_the_nodes_cache);
