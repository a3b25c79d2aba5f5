//! One version per job: the ranks of a job agree on the version they read through the channel
//! the job has (a job folder, this user's folder on the node, a marker beside the table, the
//! launcher's start time), while a writer commits, and on data they may only read, as another
//! user.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use voxlake::LoaderBuilder;
use voxlake::compact::{Compactor, synth};
use voxlake::delta::agree::Job;
use voxlake::loader::Loader;

/// Eight ranks of one job, each `setup` as the test says where they agree, opening one after
/// another while a writer commits every few tens of milliseconds: all read one version — the
/// one the first rank published — and together deliver every row of it (the default padding
/// repeats at most seven), though later versions were committed while they opened. Returns
/// the folder, the table and the version.
async fn ranks_under_commits(
    setup: impl Fn(LoaderBuilder) -> LoaderBuilder + Clone + Send + 'static,
) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 160, 71).unwrap();
    let table = dir.path().join("table").to_str().unwrap().to_string();
    let (src, labels) = (
        data.cubes.to_str().unwrap().to_string(),
        data.labels.to_str().unwrap().to_string(),
    );
    let convert = move |table: String, shard: (u32, u32)| {
        let (src, labels) = (src.clone(), labels.clone());
        async move {
            let converted = Compactor::new(&table)
                .with_labels(&labels)
                .with_shard(shard.0, shard.1)
                .convert(&src)
                .await;
            // A shard the hash gave no object is empty: nothing to commit.
            if let Err(e) = converted {
                assert!(e.to_string().contains("for shard"), "{e}");
            }
        }
    };
    // Half the cubes first, then a commit per fortieth (the rest of it) one after another.
    convert(table.clone(), (0, 2)).await;
    let writer = tokio::spawn({
        let (convert, table) = (convert.clone(), table.clone());
        async move {
            for shard in 0..40 {
                convert(table.clone(), (shard, 40)).await;
            }
        }
    });
    let ranks: Vec<_> = (0..8usize)
        .map(|rank| {
            let table = table.clone();
            let setup = setup.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(40 * rank as u64));
                let builder = Loader::builder(table).with_batch_size(1).with_rank(rank, 8);
                let loader = setup(builder).build().unwrap();
                let version = loader.version();
                let ids: Vec<String> = loader.flat_map(|b| b.unwrap().ids).collect();
                (version, ids)
            })
        })
        .collect();
    let results: Vec<(u64, Vec<String>)> =
        tokio::task::spawn_blocking(move || ranks.into_iter().map(|r| r.join().unwrap()).collect())
            .await
            .unwrap();
    writer.await.unwrap();
    let versions: HashSet<u64> = results.iter().map(|r| r.0).collect();
    assert_eq!(versions.len(), 1, "ranks read versions {versions:?}");
    let version = results[0].0;
    let (latest, expected) = std::thread::spawn({
        let table = table.clone();
        move || {
            let latest = Loader::builder(table.clone()).build().unwrap().version();
            let expected: HashSet<String> = Loader::builder(table)
                .with_version(version)
                .with_batch_size(1)
                .build()
                .unwrap()
                .flat_map(|b| b.unwrap().ids)
                .collect();
            (latest, expected)
        }
    })
    .join()
    .unwrap();
    assert!(
        latest > version,
        "no commit landed while the ranks opened (agreed {version}, latest {latest})"
    );
    let delivered: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
    let unique: HashSet<String> = delivered.iter().cloned().collect();
    assert_eq!(unique, expected, "every row of version {version}");
    assert_eq!(
        delivered.len(),
        expected.len().div_ceil(8) * 8,
        "padding only"
    );
    (dir, PathBuf::from(table), version)
}

/// The markers under `folder` (any depth), as (path, version).
fn markers(folder: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return found;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(markers(&path));
        } else if path.extension().is_some_and(|e| e == "json") {
            let marker: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            found.push((path, marker["version"].as_u64().unwrap()));
        }
    }
    found
}

/// Beside the table: the marker `_voxlake/jobs/<job>.json` names the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_of_one_job_read_one_version_while_a_writer_commits() {
    let (_dir, table, version) = ranks_under_commits(|b| b.with_job("job-under-commits")).await;
    let found = markers(&table.join("_voxlake/jobs"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.ends_with("job-under-commits.json"));
    assert_eq!(found[0].1, version);
}

/// Through a job folder the user names: the marker there, under the table's name, and
/// nothing written beside the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_of_one_job_agree_in_its_job_folder_while_a_writer_commits() {
    let jobs = tempfile::tempdir().unwrap();
    let folder = jobs.path().join("scratch").to_str().unwrap().to_string();
    let setup = move |b: LoaderBuilder| b.with_job("job-folder").with_job_dir(folder.as_str());
    let (_dir, table, version) = ranks_under_commits(setup).await;
    assert!(!table.join("_voxlake").exists(), "written beside the table");
    let found = markers(jobs.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.ends_with("job-folder.json"), "{found:?}");
    assert_eq!(found[0].1, version);
}

/// Every rank on this node: the marker in this user's folder on the node, nothing beside the
/// table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_on_one_node_agree_in_its_folder_while_a_writer_commits() {
    let id = format!("node-{}-{}", std::process::id(), uuid_like());
    let job = Job::new(id.as_str()).with_one_node(true);
    let (_dir, table, version) = ranks_under_commits(move |b| b.with_job(job.clone())).await;
    assert!(!table.join("_voxlake").exists(), "written beside the table");
    let node = voxlake::io::private::user_folder().unwrap().join("jobs");
    let found: Vec<_> = markers(&node)
        .into_iter()
        .filter(|(path, _)| path.ends_with(format!("{id}.json")))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, version);
    // The table's folder of markers there goes with the test's table.
    std::fs::remove_dir_all(found[0].0.parent().unwrap()).unwrap();
}

/// A name no other run of the test has.
fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A table of `n` cubes in `root`, readable by every user and writable by none but its owner,
/// as a dataset on a shared path.
async fn shared_read_only_table(root: &Path, n: usize, seed: u64) -> PathBuf {
    let table = root.join("table");
    convert(&table, n, seed, None).await;
    open_to_all(root, false);
    table
}

/// Converts `n` cubes (their `shard`, if given) into `table`, the cubes generated beside it.
async fn convert(table: &Path, n: usize, seed: u64, shard: Option<(u32, u32)>) {
    let data = synth::generate(table.parent().unwrap(), n, seed).unwrap();
    let mut compactor =
        Compactor::new(table.to_str().unwrap()).with_labels(data.labels.to_str().unwrap());
    if let Some((i, n)) = shard {
        compactor = compactor.with_shard(i, n);
    }
    compactor
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
}

/// `path` and what it holds readable by every user (folders also `writable` by all, sticky, as
/// /tmp), written only by their owner.
fn open_to_all(path: &Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    let mode = match (path.is_dir(), writable) {
        (true, true) => 0o1777,
        (true, false) => 0o755,
        (false, _) => 0o644,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            open_to_all(&entry.unwrap().path(), writable);
        }
    }
}

/// In `root`: the `voxlake` binary where another user may run it (the build folder is this
/// user's own), and a scratch folder every user may write to, as /tmp.
fn for_nobody(root: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin_dir = root.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let bin = bin_dir.join("voxlake");
    std::fs::copy(voxlake_testkit::voxlake_bin(), &bin).unwrap();
    open_to_all(&bin_dir, false);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let scratch = root.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    open_to_all(&scratch, true);
    (bin, scratch)
}

/// The table's latest version.
fn latest(table: &Path) -> u64 {
    let location = table.to_str().unwrap().to_string();
    std::thread::spawn(move || Loader::builder(location).build().unwrap().version())
        .join()
        .unwrap()
}

/// Every path under `folder`, sorted.
fn listing(folder: &Path) -> Vec<PathBuf> {
    let mut all = vec![folder.to_path_buf()];
    if folder.is_dir() {
        for entry in std::fs::read_dir(folder).unwrap() {
            all.extend(listing(&entry.unwrap().path()));
        }
    }
    all.sort();
    all
}

/// One rank's launcher variables.
type Vars = Vec<(&'static str, String)>;

/// What the ranks of one launch did: each one's JSON summary, the ids they delivered, their
/// stderr.
struct Launched {
    summaries: Vec<serde_json::Value>,
    ids: Vec<String>,
    stderr: String,
}

/// `voxlake bench TABLE --rank-from-env` as user `nobody`, one process per entry of `ranks`
/// (each the launcher's variables for it), all started at once; `None` where this test cannot
/// act as another user.
fn launch_as_nobody(
    bin: &Path,
    table: &Path,
    scratch: &Path,
    name: &str,
    ranks: &[Vars],
) -> Option<Launched> {
    let mut running = Vec::new();
    for (r, vars) in ranks.iter().enumerate() {
        let ids = scratch.join(format!("{name}-ids-{r}"));
        let mut cmd = match voxlake_testkit::as_nobody("env") {
            Ok(cmd) => cmd,
            Err(reason) => {
                eprintln!("skipped: {reason}");
                return None;
            }
        };
        // A clean environment: the launcher's variables only, the scratch folder as TMPDIR.
        cmd.args(["-i", "PATH=/usr/bin:/bin", "HOME=/nonexistent"])
            .arg(format!("TMPDIR={}", scratch.display()))
            .args(vars.iter().map(|(k, v)| format!("{k}={v}")))
            .arg(bin)
            .args([
                "bench",
                table.to_str().unwrap(),
                "--json",
                "--rank-from-env",
            ])
            .args(["--batch-size", "2", "--shuffle", "--ids-out"])
            .arg(&ids)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        running.push((cmd.spawn().unwrap(), ids));
    }
    let mut launched = Launched {
        summaries: Vec::new(),
        ids: Vec::new(),
        stderr: String::new(),
    };
    for (child, ids) in running {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{name}: {stderr}");
        launched
            .summaries
            .push(serde_json::from_slice(&out.stdout).unwrap());
        let delivered = std::fs::read_to_string(&ids).unwrap();
        launched.ids.extend(delivered.lines().map(String::from));
        launched.stderr.push_str(&stderr);
    }
    Some(launched)
}

/// A dataset on a shared path that the training user (`nobody`) may read but not write, run
/// as Slurm and torchrun start ranks: one task, two tasks on one node, two torchrun workers
/// with a random run id, two nodes with Slurm's start time, two torchrun nodes. Each launch
/// exits 0, delivers every id once over its ranks (the last batch's padding aside), reads one
/// version, and writes nothing under the table's folder; the ranks of one node agree in the
/// user's folder on it; ranks on two nodes without a start time say what the job risks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_data_trains_under_slurm_and_torchrun_as_another_user() {
    let root = tempfile::tempdir().unwrap();
    let n = 21;
    let table = shared_read_only_table(root.path(), n, 83).await;
    let (bin, scratch) = for_nobody(root.path());
    let before = listing(&table);

    let slurm = |job: &str, rank: usize, tasks: usize, node: usize, nodes: usize| {
        vec![
            ("SLURM_JOB_ID", job.to_string()),
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
            ("SLURM_NODEID", node.to_string()),
            ("SLURM_STEP_NUM_NODES", nodes.to_string()),
        ]
    };
    let run_id = format!("{:x}", uuid_like());
    let torchrun = |rank: usize, world: usize, per_node: usize| {
        vec![
            ("TORCHELASTIC_RUN_ID", run_id.clone()),
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", world.to_string()),
            ("LOCAL_RANK", (rank % per_node).to_string()),
            ("GROUP_RANK", (rank / per_node).to_string()),
            ("LOCAL_WORLD_SIZE", per_node.to_string()),
        ]
    };
    // Whole seconds: the next one, after the table's commits.
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let started = started.to_string();
    let with_start = |mut vars: Vars| {
        vars.push(("SLURM_JOB_START_TIME", started.clone()));
        vars
    };
    let launches: Vec<(&str, Vec<Vars>)> = vec![
        ("slurm-1-of-1", vec![slurm("4242", 0, 1, 0, 1)]),
        (
            "slurm-2-on-1-node",
            (0..2).map(|r| slurm("4243", r, 2, 0, 1)).collect(),
        ),
        ("torchrun-2", (0..2).map(|r| torchrun(r, 2, 2)).collect()),
        (
            "slurm-2-nodes",
            (0..2)
                .map(|r| with_start(slurm("4244", r, 2, r, 2)))
                .collect(),
        ),
        (
            "torchrun-2-nodes",
            (0..2).map(|r| torchrun(r, 2, 1)).collect(),
        ),
    ];
    let version = latest(&table);
    for (name, ranks) in &launches {
        let Some(launched) = launch_as_nobody(&bin, &table, &scratch, name, ranks) else {
            return;
        };
        let unique: HashSet<&String> = launched.ids.iter().collect();
        assert_eq!(unique.len(), n, "{name}: every id");
        assert!(
            launched.ids.len() - n < ranks.len(),
            "{name}: {} ids",
            launched.ids.len()
        );
        for summary in &launched.summaries {
            assert_eq!(summary["version"].as_u64(), Some(version), "{name}");
        }
        // Only ranks on several nodes with no start time warn, naming the ways out.
        let warned = launched.stderr.contains("WARN");
        let expected = *name == "torchrun-2-nodes";
        assert_eq!(warned, expected, "{name}: {}", launched.stderr);
        if warned {
            let stderr = &launched.stderr;
            assert!(stderr.contains("no place to agree"), "{stderr}");
            assert!(stderr.contains("--job-dir"), "{stderr}");
        }
        assert_eq!(listing(&table), before, "{name}: written under the table");
    }
    // The two launches on one node agreed in nobody's folder on it.
    let node = markers(&scratch.join("voxlake-65534/jobs"));
    let names: HashSet<String> = node
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    let expected: HashSet<String> = ["4243.json".to_string(), format!("{run_id}.json")].into();
    assert_eq!(names, expected, "{node:?}");
}

/// Ranks on two nodes with no place to write agree through Slurm's start time: a commit after
/// the job started is not read (one warning says so), by any rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_without_a_place_read_the_version_before_the_jobs_start() {
    let root = tempfile::tempdir().unwrap();
    let table = root.path().join("table");
    convert(&table, 16, 89, Some((0, 2))).await;
    let version = latest(&table);
    // Commit times are the log files' (milliseconds); the start is in whole seconds.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    convert(&table, 16, 89, Some((1, 2))).await;
    open_to_all(root.path(), false);
    let (bin, scratch) = for_nobody(root.path());
    let ranks: Vec<Vars> = (0..2)
        .map(|r| {
            vec![
                ("SLURM_JOB_ID", "5151".to_string()),
                ("SLURM_PROCID", r.to_string()),
                ("SLURM_STEP_NUM_TASKS", "2".to_string()),
                ("SLURM_NODEID", r.to_string()),
                ("SLURM_STEP_NUM_NODES", "2".to_string()),
                ("SLURM_JOB_START_TIME", started.to_string()),
            ]
        })
        .collect();
    let Some(launched) = launch_as_nobody(&bin, &table, &scratch, "after-start", &ranks) else {
        return;
    };
    let versions: HashSet<u64> = launched
        .summaries
        .iter()
        .map(|s| s["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, HashSet::from([version]), "{}", launched.stderr);
    assert!(latest(&table) > version);
    let location = table.to_str().unwrap().to_string();
    let expected: HashSet<String> = std::thread::spawn(move || {
        let loader = Loader::builder(location).with_version(version).build();
        loader.unwrap().flat_map(|b| b.unwrap().ids).collect()
    })
    .join()
    .unwrap();
    let unique: HashSet<String> = launched.ids.iter().cloned().collect();
    assert_eq!(unique, expected, "the rows of the version before the start");
    assert!(expected.len() < 16);
    assert!(
        launched
            .stderr
            .contains("took commits since the job started"),
        "{}",
        launched.stderr
    );
    assert!(!table.join("_voxlake").exists());
}
