//! Distributed training: equal batch counts on every rank, lineage, exact resume from any batch,
//! fixed versions, refused states, elastic world sizes (in process and as OS processes),
//! and faults in every stage reported as errors.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::Array;

use voxlake::LoaderBuilder;
use voxlake::compact::{Compactor, synth};
use voxlake::format::Layout;
use voxlake::loader::{Batch, Loader, LoaderError, LoaderState};
use voxlake::plan::order::Uneven;
use voxlake::table::hooks::Stage;

use crate::loader::{collect, first_error};
use voxlake_testkit::{cube_bytes, data_files, json_output, voxlake_bin};

/// `count` cubes in files of uneven sizes and row groups of 2 and 3 rows: a third converted
/// first (row groups of 3, files of ~4 rows), the rest after (row groups of 2, ~3 rows).
async fn uneven_table(dir: &Path, count: usize, seed: u64) -> PathBuf {
    let data = synth::generate(dir, count, seed).unwrap();
    let table = dir.join("table");
    for (rows, file_bytes, shard) in [(3, 1_500_000, Some((0, 3))), (2, 1_100_000, None)] {
        let mut c = Compactor::new(table.to_str().unwrap())
            .with_labels(data.labels.to_str().unwrap())
            .with_layout(Layout {
                row_group_rows: rows,
                target_file_bytes: file_bytes,
                ..Layout::default()
            });
        if let Some((i, n)) = shard {
            c = c.with_shard(i, n);
        }
        c.convert(data.cubes.to_str().unwrap()).await.unwrap();
    }
    table
}

/// The first `k` batches and the state after them.
pub fn take(builder: LoaderBuilder, k: usize) -> (Vec<Batch>, LoaderState) {
    std::thread::spawn(move || {
        let mut loader = builder.build().unwrap();
        let batches: Vec<Batch> = loader.by_ref().take(k).map(Result::unwrap).collect();
        (batches, loader.state())
    })
    .join()
    .unwrap()
}

fn index_of(id: &str) -> usize {
    id.trim_start_matches("cube_")
        .trim_end_matches(".npy")
        .parse()
        .unwrap()
}

/// The real (not pad) rows of batches, as ids.
fn real_ids<'a>(batches: impl IntoIterator<Item = &'a Batch>) -> Vec<String> {
    batches
        .into_iter()
        .flat_map(|b| b.lineage().iter().filter(|o| !o.pad).map(|o| o.id.clone()))
        .collect()
}

/// Asserts that `ids` holds no id twice and returns them as a set.
fn once(ids: Vec<String>) -> HashSet<String> {
    let n = ids.len();
    let set: HashSet<String> = ids.into_iter().collect();
    assert_eq!(set.len(), n, "a row was delivered twice");
    set
}

#[tokio::test]
async fn every_rank_yields_the_same_number_of_batches() {
    let dir = tempfile::tempdir().unwrap();
    let n = 37;
    let table = uneven_table(dir.path(), n, 1).await;
    let path = table.to_str().unwrap();
    let policies = [
        (Uneven::Pad, false),
        (Uneven::Pad, true),
        (Uneven::Drop, false),
        (Uneven::Drop, true),
    ];
    // 16 ranks: more ranks than files; 40: more ranks than rows.
    for world in [1, 2, 3, 5, 16, 40] {
        for (uneven, drop_last) in policies {
            let mut counts = Vec::new();
            let mut rows: Vec<Vec<Batch>> = vec![Vec::new(); 2];
            let mut expected = 0;
            for rank in 0..world {
                let batches = collect(
                    Loader::builder(path)
                        .with_batch_size(4)
                        .with_epochs(2)
                        .with_shuffle(world as u64, 8)
                        .with_uneven(uneven)
                        .with_drop_last(drop_last)
                        .with_rank(rank, world),
                );
                for epoch in 0..2u64 {
                    let mine: Vec<Batch> = batches
                        .iter()
                        .filter(|b| b.epoch == epoch)
                        .cloned()
                        .collect();
                    counts.push(mine.len());
                    rows[epoch as usize].extend(mine);
                }
                let b = Loader::builder(path)
                    .with_batch_size(4)
                    .with_uneven(uneven)
                    .with_drop_last(drop_last)
                    .with_rank(rank, world);
                expected = std::thread::spawn(move || b.build().unwrap().iterations_per_epoch())
                    .join()
                    .unwrap();
            }
            let case = format!("{world} ranks, {uneven:?}, drop_last {drop_last}");
            assert!(
                counts.iter().all(|&c| c as u64 == expected),
                "{case}: batch counts {counts:?}, expected {expected} each"
            );
            for epoch_batches in &rows {
                for b in epoch_batches {
                    for (o, id) in b.lineage().iter().zip(&b.ids) {
                        assert_eq!(&o.id, id, "{case}: lineage and ids agree");
                    }
                }
                let real = once(real_ids(epoch_batches));
                let pads: usize = epoch_batches
                    .iter()
                    .map(|b| b.lineage().iter().filter(|o| o.pad).count())
                    .sum();
                assert!(pads < world, "{case}: {pads} pad rows");
                if !drop_last {
                    match uneven {
                        Uneven::Pad => assert_eq!(real.len(), n, "{case}: rows lost"),
                        _ => assert!(
                            n - real.len() < world,
                            "{case}: {} left out",
                            n - real.len()
                        ),
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn lineage_names_file_row_group_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let table = uneven_table(dir.path(), 12, 2).await;
    let batches = collect(Loader::builder(table.to_str().unwrap()).with_batch_size(5));
    // Read each file's ids directly: lineage's (file, row) must hold the batch's id.
    let mut file_ids: HashMap<String, Vec<String>> = HashMap::new();
    for path in data_files(&table) {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&path).unwrap(),
        )
        .unwrap();
        let groups: Vec<i64> = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        let mut ids = Vec::new();
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap();
            ids.extend((0..col.len()).map(|i| col.value(i).to_string()));
        }
        assert_eq!(groups.iter().sum::<i64>() as usize, ids.len());
        file_ids.insert(path.file_name().unwrap().to_str().unwrap().to_string(), ids);
    }
    let mut seen = 0;
    for b in &batches {
        for o in b.lineage() {
            assert_eq!(file_ids[&*o.file][o.row as usize], o.id, "{o:?}");
            seen += 1;
        }
    }
    assert_eq!(seen, 12);
}

/// Batches equal in ids, values, epoch and index.
fn assert_same(a: &[Batch], b: &[Batch], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: batch count");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.epoch, x.index, &x.ids),
            (y.epoch, y.index, &y.ids),
            "{what}"
        );
        assert!(
            x.tensors == y.tensors,
            "{what}: values of batch {} differ",
            x.index
        );
        assert_eq!(x.labels, y.labels, "{what}");
    }
}

#[tokio::test]
async fn resuming_from_any_batch_gives_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let table = uneven_table(dir.path(), 23, 3).await;
    for shuffle in [true, false] {
        let mut builder = Loader::builder(table.to_str().unwrap())
            .with_batch_size(3)
            .with_epochs(2)
            .with_rank(1, 2);
        if shuffle {
            builder = builder.with_shuffle(5, 7);
        }
        let full = collect(builder.clone());
        assert_eq!(full.len(), 8, "two epochs of ⌈12/3⌉ batches");
        for k in 0..=full.len() {
            let (head, state) = take(builder.clone(), k);
            let json = state.to_json();
            assert!(json.len() < 1024, "{} bytes: {json}", json.len());
            let state = LoaderState::from_json(&json).unwrap();
            let rest = collect(builder.clone().with_state(state));
            let mut resumed = head;
            resumed.extend(rest);
            assert_same(
                &full,
                &resumed,
                &format!("shuffle {shuffle}, cut after {k}"),
            );
        }
    }
}

#[tokio::test]
async fn a_state_pins_its_version_and_refuses_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth::generate(dir.path(), 24, 4).unwrap();
    let table = dir.path().join("table");
    let small = Layout {
        row_group_rows: 2,
        target_file_bytes: 1_500_000,
        ..Layout::default()
    };
    Compactor::new(table.to_str().unwrap())
        .with_layout(small.clone())
        .with_shard(0, 2)
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
    let builder = Loader::builder(table.to_str().unwrap())
        .with_batch_size(2)
        .with_shuffle(1, 6);
    let full = collect(builder.clone());
    let (head, state) = take(builder.clone(), 2);
    let fixed = state.clone();
    // The table moves on: an append, then optimize rewrites the files.
    Compactor::new(table.to_str().unwrap())
        .with_layout(small)
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
    Compactor::new(table.to_str().unwrap())
        .optimize()
        .await
        .unwrap();
    let rest = collect(builder.clone().with_state(state.clone()));
    let mut resumed = head;
    resumed.extend(rest);
    assert_same(&full, &resumed, "resumed after appends and optimize");

    // Another table at the same version: the file set differs.
    let other_data = synth::generate(&dir.path().join("other-data"), 24, 5).unwrap();
    let other = dir.path().join("other");
    Compactor::new(other.to_str().unwrap())
        .with_layout(Layout {
            row_group_rows: 2,
            target_file_bytes: 1_500_000,
            ..Layout::default()
        })
        .with_shard(0, 2)
        .convert(other_data.cubes.to_str().unwrap())
        .await
        .unwrap();
    let e = std::thread::spawn(move || {
        Loader::builder(other.to_str().unwrap())
            .with_batch_size(2)
            .with_shuffle(1, 6)
            .with_state(state)
            .build()
            .map(|_| ())
            .unwrap_err()
    })
    .join()
    .unwrap();
    assert!(
        matches!(&e, LoaderError::State(m) if m.contains("file set")),
        "{e}"
    );

    // Other order settings are refused, naming the setting.
    let (_, state) = take(builder.clone(), 1);
    let b = builder.clone().with_batch_size(3).with_state(state.clone());
    let e = std::thread::spawn(move || b.build().map(|_| ()).unwrap_err())
        .join()
        .unwrap();
    assert!(e.to_string().contains("batch size"), "{e}");

    // A file of the fixed version vacuumed: the error names it and the version.
    let state = fixed;
    let version = state.version;
    let victim = data_files(&table)
        .into_iter()
        .find(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            full.iter()
                .any(|b| b.lineage().iter().any(|o| *o.file == *name))
        })
        .unwrap();
    std::fs::remove_file(&victim).unwrap();
    let err = first_error(builder.with_state(state), "a vacuumed file");
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        err.contains(name)
            && err.contains("missing")
            && err.contains(&format!("version {version}")),
        "{err}"
    );
}

/// Each rank of `world` from `state` (or from the start) for `k` batches (all if `None`);
/// returns each rank's batches and states.
fn ranks(
    builder: &LoaderBuilder,
    world: usize,
    state: Option<&LoaderState>,
    k: Option<usize>,
) -> Vec<(Vec<Batch>, LoaderState)> {
    (0..world)
        .map(|rank| {
            let mut b = builder.clone().with_rank(rank, world);
            if let Some(s) = state {
                b = b.with_state(s.clone());
            }
            take(b, k.unwrap_or(usize::MAX))
        })
        .collect()
}

/// A shuffled loader of batches of 3 over a table of `n` rows in uneven files under `dir`.
async fn shuffled_by_threes(dir: &Path, n: usize) -> LoaderBuilder {
    let table = uneven_table(dir, n, 6).await;
    Loader::builder(table.to_str().unwrap())
        .with_batch_size(3)
        .with_shuffle(8, 9)
}

#[tokio::test]
async fn another_world_size_continues_the_epoch_with_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let n = 41;
    let builder = shuffled_by_threes(dir.path(), n).await;
    // 3 ranks for 2 batches, then 2 ranks for 1, then 4 ranks to the end of the epoch.
    let first = ranks(&builder, 3, None, Some(2));
    let state = &first[0].1;
    for (_, s) in &first {
        assert_eq!(
            (s.epoch, s.batches, &s.closed),
            (0, 2, &state.closed),
            "lockstep"
        );
    }
    let second = ranks(&builder, 2, Some(state), Some(1));
    let third = ranks(&builder, 4, Some(&second[1].1), None);
    let counts: Vec<usize> = third.iter().map(|(b, _)| b.len()).collect();
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
    let all: Vec<&Batch> = [&first, &second, &third]
        .iter()
        .flat_map(|seg| seg.iter().flat_map(|(b, _)| b))
        .collect();
    let real = once(real_ids(all.iter().copied()));
    assert_eq!(real.len(), n, "every row of the epoch once");
    for b in &all {
        for (i, id) in b.ids.iter().enumerate() {
            let (label, _) = cube_bytes(6, index_of(id));
            assert_eq!(b.labels[i], Some(label));
        }
    }
    // Deterministic: the same new world size gives the same batches again.
    let again = ranks(&builder, 4, Some(&second[1].1), None);
    for ((a, _), (b, _)) in third.iter().zip(&again) {
        assert_same(a, b, "elastic resume repeated");
    }
    // The epoch is over: every state says the next one.
    assert!(third.iter().all(|(_, s)| s.epoch == 1 && s.batches == 0));
}

/// Ranks asked in turn and stopped between two turns (as a DataLoader's workers are): the
/// first of them one batch ahead. A state saying so resumes each rank exactly where it stood
/// with the same world size, and every row once with another.
#[tokio::test]
async fn ranks_stopped_between_turns_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let n = 41;
    let builder = shuffled_by_threes(dir.path(), n).await;
    let whole = ranks(&builder, 3, None, None);
    // Ranks 0 and 1 gave 3 batches, rank 2 gave 2.
    let head: Vec<(Vec<Batch>, LoaderState)> = (0..3)
        .map(|rank| {
            take(
                builder.clone().with_rank(rank, 3),
                if rank < 2 { 3 } else { 2 },
            )
        })
        .collect();
    let state = LoaderState {
        ahead: 2,
        ..head[2].1.clone()
    };
    assert_eq!((state.epoch, state.batches), (0, 2));
    let rest = ranks(&builder, 3, Some(&state), None);
    for rank in 0..3 {
        let resumed: Vec<Batch> = head[rank].0.iter().chain(&rest[rank].0).cloned().collect();
        assert_same(&whole[rank].0, &resumed, &format!("rank {rank} resumed"));
        // A state taken after the resume keeps the segment's count and who is ahead.
        let (_, after_one) = take(
            builder.clone().with_rank(rank, 3).with_state(state.clone()),
            1,
        );
        assert_eq!((after_one.batches, after_one.ahead), (3, 2), "rank {rank}");
    }
    // Two ranks take the rest of the epoch: every row once.
    let two = ranks(&builder, 2, Some(&state), None);
    let all: Vec<&Batch> = head
        .iter()
        .flat_map(|(b, _)| b)
        .chain(two.iter().flat_map(|(b, _)| b))
        .collect();
    assert_eq!(once(real_ids(all.iter().copied())).len(), n);
    // A state no run could write: as many ranks ahead as there are ranks.
    let bad = LoaderState::from_json(&LoaderState { ahead: 3, ..state }.to_json());
    assert!(bad.unwrap_err().to_string().contains("3 ranks ahead"));
}

/// A crafted state whose segments claim more ranks than any run has (10¹⁵, or a million more
/// than the table's rows) is refused at build, naming the field, instead of replaying them
/// (it spun for minutes).
#[tokio::test]
async fn a_state_claiming_absurd_world_sizes_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let table = uneven_table(dir.path(), 20, 11).await;
    let builder = Loader::builder(table.to_str().unwrap())
        .with_batch_size(2)
        .with_shuffle(3, 4);
    let (_, state) = take(builder.clone().with_rank(0, 2), 2);
    use voxlake::loader::state::SegmentState;
    let crafted = [
        SegmentState {
            world_size: 1_000_000_000_000_000,
            batches: 0,
            ahead: 0,
        },
        SegmentState {
            world_size: 1 << 21,
            batches: 0,
            ahead: 0,
        },
    ];
    for segment in crafted {
        let world = segment.world_size;
        let bad = LoaderState {
            closed: vec![segment],
            ..state.clone()
        };
        let b = builder.clone().with_rank(0, 2).with_state(bad);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(b.build().map(|_| ())));
        // A guard against a hang, not a timing: a refusal takes milliseconds.
        let got = rx.recv_timeout(std::time::Duration::from_secs(60));
        let e = got
            .expect("the build did not return")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("closed segment") && e.contains(&world.to_string()),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_fault_in_any_stage_reaches_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let table = uneven_table(dir.path(), 20, 7).await;
    for stage in [Stage::Footer, Stage::Fetch, Stage::Decode, Stage::Assemble] {
        for panic in [false, true] {
            let calls = Arc::new(AtomicUsize::new(0));
            let hook_calls = calls.clone();
            let hook: voxlake::table::hooks::FaultHook = Arc::new(move |s, _object| {
                // The third call of the stage fails: some batches come first.
                if s == stage && hook_calls.fetch_add(1, Ordering::SeqCst) == 2 {
                    if panic {
                        panic!("injected panic");
                    }
                    return Err("injected error".into());
                }
                Ok(())
            });
            let builder = Loader::builder(table.to_str().unwrap())
                .with_batch_size(2)
                .with_shuffle(3, 4)
                .with_fault_hook(hook);
            let results: Vec<Result<Batch, LoaderError>> =
                std::thread::spawn(move || builder.build().unwrap().collect())
                    .join()
                    .unwrap();
            let case = format!("{stage} {}", if panic { "panic" } else { "error" });
            let last = results
                .last()
                .unwrap_or_else(|| panic!("{case}: nothing delivered"));
            let e = last
                .as_ref()
                .err()
                .unwrap_or_else(|| panic!("{case}: ended without an error"));
            assert!(
                results[..results.len() - 1].iter().all(Result::is_ok),
                "{case}: one error, at the end"
            );
            let msg = e.to_string();
            assert!(msg.contains(stage.as_str()), "{case}: {msg}");
            assert!(
                msg.contains(if panic {
                    "injected panic"
                } else {
                    "injected error"
                }),
                "{case}: {msg}"
            );
            assert!(msg.contains(".parquet"), "{case}: names the file: {msg}");
        }
    }
}

/// `voxlake bench` ranks as OS processes: 3 stopped mid-epoch with their states, resumed as 2,
/// then the epoch finished; every row once, equal batch counts.
#[tokio::test]
async fn ranks_as_processes_stop_and_resume_with_another_world_size() {
    let dir = tempfile::tempdir().unwrap();
    let n = 29;
    let table = uneven_table(dir.path(), n, 8).await;
    let run = |rank: usize, world: usize, extra: &[String], tag: &str| {
        let ids = dir.path().join(format!("ids-{tag}-{rank}"));
        let state = dir.path().join(format!("state-{tag}-{rank}"));
        let mut cmd = Command::new(voxlake_bin());
        cmd.args([
            "bench",
            table.to_str().unwrap(),
            "--json",
            "--shuffle",
            "--seed",
            "4",
        ])
        .args(["--batch-size", "2", "--shuffle-buffer", "6"])
        .args([
            "--rank",
            &rank.to_string(),
            "--world-size",
            &world.to_string(),
        ])
        .arg("--ids-out")
        .arg(&ids)
        .arg("--state-out")
        .arg(&state)
        .args(extra);
        (cmd, ids, state)
    };
    // Three processes at once, each stopped after 3 batches.
    let procs: Vec<_> = (0..3)
        .map(|r| {
            let (mut cmd, _, _) = run(r, 3, &["--stop-after".into(), "3".into()], "a");
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for p in procs {
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["batches"], 3);
    }
    let mut delivered = Vec::new();
    for r in 0..3 {
        delivered.extend(lines(&dir.path().join(format!("ids-a-{r}"))));
    }
    let state = dir.path().join("state-a-0");
    // Two processes resume from rank 0's state (any rank's would do) and finish the epoch.
    let mut counts = Vec::new();
    for r in 0..2 {
        let (mut cmd, ids, _) = run(
            r,
            2,
            &["--resume".into(), state.to_str().unwrap().into()],
            "b",
        );
        let v = json_output(&mut cmd);
        counts.push(v["batches"].as_u64().unwrap());
        delivered.extend(lines(&ids));
    }
    assert_eq!(counts[0], counts[1], "equal batch counts after the change");
    // Pad repeats: at most W - 1 per segment, (3 - 1) + (2 - 1) here.
    let unique: HashSet<&String> = delivered.iter().collect();
    assert_eq!(unique.len(), n, "every row of the epoch delivered");
    assert!(delivered.len() - n <= 3, "{} repeats", delivered.len() - n);
}

/// Ranks started the way torchrun starts them (`RANK`, `WORLD_SIZE` in the environment) with
/// `--rank-from-env`: each finds its rank, together they deliver every row; a launcher's
/// variable without its pair ends the run with an error naming both.
#[tokio::test]
async fn ranks_from_the_launchers_environment() {
    let dir = tempfile::tempdir().unwrap();
    let n = 23;
    let table = uneven_table(dir.path(), n, 9).await;
    let bench = |vars: &[(&str, &str)], ids: &Path| {
        let mut cmd = Command::new(voxlake_bin());
        for l in voxlake::plan::launch::LAUNCHERS {
            cmd.env_remove(l.rank)
                .env_remove(l.world_size)
                .env_remove(l.local_rank);
        }
        cmd.args(["bench", table.to_str().unwrap(), "--json", "--shuffle"])
            .args(["--batch-size", "2", "--rank-from-env", "--ids-out"])
            .arg(ids)
            .envs(vars.iter().copied());
        cmd
    };
    let mut delivered = Vec::new();
    let mut counts = HashSet::new();
    for rank in 0..3 {
        let ids = dir.path().join(format!("ids-{rank}"));
        let r = rank.to_string();
        let v = json_output(&mut bench(&[("RANK", &r), ("WORLD_SIZE", "3")], &ids));
        assert_eq!(
            (v["rank"].as_u64(), v["world_size"].as_u64()),
            (Some(rank), Some(3))
        );
        counts.insert(v["batches"].as_u64().unwrap());
        delivered.extend(lines(&ids));
    }
    assert_eq!(counts.len(), 1, "equal batch counts: {counts:?}");
    let unique: HashSet<&String> = delivered.iter().collect();
    assert_eq!(unique.len(), n, "every row");
    assert!(delivered.len() - n < 3, "{} repeats", delivered.len() - n);
    // No launcher: one process reads it all.
    let ids = dir.path().join("ids-alone");
    let v = json_output(&mut bench(&[], &ids));
    assert_eq!(
        (v["rank"].as_u64(), v["world_size"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(lines(&ids).len(), n);
    // Half a pair is refused, naming both variables.
    let out = bench(&[("RANK", "1")], &ids).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("RANK=1") && err.contains("WORLD_SIZE"),
        "{err}"
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Node affinity over 2 nodes × 2 ranks: every row once an epoch and the same batches on every
/// rank; a node's ranks read (nearly) the same files in both epochs; a state taken mid-epoch
/// resumes to the same batches; a loader without the state's affinity, a rank outside its
/// node's block and nodes that do not divide the world are refused by name.
#[tokio::test]
async fn node_affine_ranks_keep_their_files_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let table = uneven_table(dir.path(), 60, 29).await;
    let builder = Loader::builder(table.to_str().unwrap())
        .with_batch_size(3)
        .with_epochs(2)
        .with_shuffle(13, 6);
    let affine = |rank: usize| {
        builder
            .clone()
            .with_rank(rank, 4)
            .with_node_affinity(rank / 2, 2)
    };
    let runs: Vec<Vec<Batch>> = (0..4).map(|rank| collect(affine(rank))).collect();
    assert!(runs.iter().all(|r| r.len() == runs[0].len()), "equal steps");
    for epoch in 0..2 {
        let ids = real_ids(runs.iter().flatten().filter(|b| b.epoch == epoch));
        assert_eq!(once(ids).len(), 60, "every row once in epoch {epoch}");
    }
    // The files each node read, per epoch (lineage names the file).
    let files = |node: usize, epoch: u64| -> HashSet<String> {
        runs[node * 2..node * 2 + 2]
            .iter()
            .flatten()
            .filter(|b| b.epoch == epoch)
            .flat_map(|b| b.lineage().iter().map(|o| o.file.to_string()))
            .collect()
    };
    for node in 0..2 {
        let (first, second) = (files(node, 0), files(node, 1));
        let new = second.difference(&first).count();
        assert!(
            new <= 2,
            "node {node} met {new} new files of {} in epoch 2",
            second.len()
        );
    }

    let (head, state) = take(affine(3), 7);
    let state = LoaderState::from_json(&state.to_json()).unwrap();
    assert_eq!(state.nodes, 2);
    let mut resumed = head;
    resumed.extend(collect(affine(3).with_state(state.clone())));
    assert_same(&runs[3], &resumed, "resumed with affinity");

    let refused = |b: LoaderBuilder| {
        std::thread::spawn(move || b.build().err().map(|e| e.to_string()))
            .join()
            .unwrap()
            .expect("refused")
    };
    let e = refused(builder.clone().with_rank(3, 4).with_state(state));
    assert!(e.contains("node affinity"), "{e}");
    let e = refused(builder.clone().with_rank(3, 4).with_node_affinity(0, 2));
    assert!(e.contains("blocks"), "{e}");
    let e = refused(builder.clone().with_rank(2, 3).with_node_affinity(1, 2));
    assert!(e.contains("divide"), "{e}");
}
