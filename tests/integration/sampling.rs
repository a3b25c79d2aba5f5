//! Sampling through the loader on real tables: label-balanced draws on every rank, a split that
//! stays put when rows are appended, a new subset each epoch, exact resume of weighted epochs
//! on the same and another world size, and options refused by name before any read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use voxlake::LoaderBuilder;
use voxlake::compact::{Compactor, synth};
use voxlake::format::Layout;
use voxlake::loader::{Batch, Loader};
use voxlake::plan::sample::{Sampling, SubsetBy};
use voxlake::plan::split::Split;

use crate::loader::{assert_same_draws, collect, first_error};

/// Ids of rare positives: the last `ones` cubes of `count` (a table written class by class
/// keeps them together in its last file).
fn is_one(id: &str, count: usize, ones: usize) -> bool {
    let n: usize = id
        .trim_start_matches("cube_")
        .trim_end_matches(".npy")
        .parse()
        .unwrap();
    n >= count - ones
}

/// `count` synthetic cubes whose label is 1 for the last `ones`, in row groups of 4 rows and
/// files of about 12 rows.
async fn rare_table(dir: &Path, count: usize, ones: usize) -> String {
    let data = synth::generate(dir, count, 5).unwrap();
    let mut csv = String::from("file,label\n");
    for i in 0..count {
        csv += &format!("cube_{i:06}.npy,{}\n", u8::from(i >= count - ones));
    }
    std::fs::write(&data.labels, csv).unwrap();
    let table = dir.join("table");
    Compactor::new(table.to_str().unwrap())
        .with_labels(data.labels.to_str().unwrap())
        .with_layout(Layout {
            row_group_rows: 4,
            target_file_bytes: 12 * 360_000,
            ..Layout::default()
        })
        .convert(data.cubes.to_str().unwrap())
        .await
        .unwrap();
    table.to_string_lossy().into_owned()
}

fn ids(batches: &[Batch]) -> Vec<String> {
    batches.iter().flat_map(|b| b.ids.clone()).collect()
}

fn three_splits() -> Vec<(String, f64)> {
    vec![
        ("train".into(), 0.6),
        ("val".into(), 0.2),
        ("test".into(), 0.2),
    ]
}

#[tokio::test]
async fn balanced_draws_give_every_rank_half_of_each_label() {
    let dir = tempfile::tempdir().unwrap();
    let (count, ones) = (120, 3);
    let table = rare_table(dir.path(), count, ones).await;
    let spec = Sampling::default()
        .with_balance_labels()
        .with_epoch_size(400);
    let builder = |rank: usize, world: usize| {
        Loader::builder(&table)
            .with_batch_size(8)
            .with_shuffle(3, 32)
            .with_rank(rank, world)
            .with_sampling(spec.clone())
    };
    for world in [1, 2, 4] {
        let mut all = Vec::new();
        for rank in 0..world {
            let batches = collect(builder(rank, world));
            let labels: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.labels.iter().map(|l| l.unwrap()))
                .collect();
            // Labels come with their rows: each is the table's label of that id.
            for (id, label) in ids(&batches).iter().zip(&labels) {
                assert_eq!(*label == 1, is_one(id, count, ones), "{id}");
            }
            let per_rank = 400 / world;
            assert_eq!(labels.len(), per_rank);
            let got = labels.iter().filter(|&&l| l == 1).count();
            // Each label's draws are dealt evenly: half of every rank's, within one draw.
            assert!(
                got.abs_diff(per_rank / 2) <= 1,
                "rank {rank} of {world}: {got} of {per_rank}"
            );
            all.extend(ids(&batches));
        }
        let distinct: BTreeSet<&String> = all.iter().filter(|id| is_one(id, count, ones)).collect();
        assert_eq!(distinct.len(), ones, "every rare row drawn");
    }
    let b = builder(0, 2);
    let loader = std::thread::spawn(move || b.build().unwrap())
        .join()
        .unwrap();
    assert_eq!(
        (loader.draws_per_epoch(), loader.iterations_per_epoch()),
        (400, 25)
    );
}

#[tokio::test]
async fn a_split_reads_its_rows_only_and_appended_rows_move_none() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 60, 6).await;
    let split_of = |name: &str| {
        Sampling::default().with_split(Split::new(name, three_splits()).with_salt("v1"))
    };
    let read = |name: &str| -> BTreeSet<String> {
        let batches = collect(
            Loader::builder(&table)
                .with_batch_size(5)
                .with_sampling(split_of(name)),
        );
        let got = ids(&batches);
        let set: BTreeSet<String> = got.iter().cloned().collect();
        assert_eq!(set.len(), got.len(), "{name}: a row twice");
        set
    };
    let before: BTreeMap<&str, BTreeSet<String>> = ["train", "val", "test"]
        .into_iter()
        .map(|s| (s, read(s)))
        .collect();
    let all: BTreeSet<String> = before.values().flatten().cloned().collect();
    assert_eq!(all.len(), 60, "the splits cover the table");
    assert_eq!(
        before.values().map(BTreeSet::len).sum::<usize>(),
        60,
        "disjoint"
    );
    let split = Split::new("val", three_splits()).with_salt("v1");
    assert!(before["val"].iter().all(|id| split.contains(id)));
    // 30 more rows appended (a new version): no row of the first 60 changes split.
    let more = synth::generate(dir.path(), 90, 5).unwrap();
    Compactor::new(&table)
        .convert(more.cubes.to_str().unwrap())
        .await
        .unwrap();
    for (name, rows) in &before {
        let after = read(name);
        let kept: BTreeSet<&String> = after.iter().filter(|id| all.contains(*id)).collect();
        assert_eq!(kept, rows.iter().collect(), "{name}");
        assert!(
            after.len() > rows.len() || *name != "train",
            "{name}: appended rows join"
        );
    }
}

#[tokio::test]
async fn a_subsample_is_a_new_subset_of_distinct_rows_each_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 100, 10).await;
    let batches = collect(
        Loader::builder(&table)
            .with_batch_size(10)
            .with_shuffle(1, 20)
            .with_epochs(2)
            .with_sampling(Sampling::default().with_subsample(0.2)),
    );
    let epochs: Vec<BTreeSet<String>> = (0..2)
        .map(|e| {
            let rows: Vec<String> = batches
                .iter()
                .filter(|b| b.epoch == e)
                .flat_map(|b| b.ids.clone())
                .collect();
            let set: BTreeSet<String> = rows.iter().cloned().collect();
            assert_eq!((rows.len(), set.len()), (20, 20), "epoch {e}");
            set
        })
        .collect();
    assert_ne!(epochs[0], epochs[1]);
}

#[tokio::test]
async fn weighted_epochs_resume_exactly_on_the_same_and_another_world() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 80, 4).await;
    let spec = Sampling::default()
        .with_class_weights(vec![(0, 1.0), (1, 5.0)])
        .with_epoch_size(150);
    let builder = |rank: usize, world: usize| {
        Loader::builder(&table)
            .with_batch_size(4)
            .with_shuffle(11, 12)
            .with_rank(rank, world)
            .with_sampling(spec.clone())
    };
    // The uninterrupted epoch over 2 ranks.
    let full: Vec<Vec<String>> = (0..2).map(|r| ids(&collect(builder(r, 2)))).collect();
    for cut in [1usize, 6, 13] {
        // Both ranks stop after `cut` batches; rank 0's state is the job's.
        let b = builder(0, 2);
        let state = std::thread::spawn(move || {
            let mut loader = b.build().unwrap();
            for _ in 0..cut {
                loader.next().unwrap().unwrap();
            }
            loader.state()
        })
        .join()
        .unwrap();
        // The same world: each rank goes on with exactly its uninterrupted sequence.
        for (rank, whole) in full.iter().enumerate() {
            let rest = ids(&collect(builder(rank, 2).with_state(state.clone())));
            assert_eq!(rest, whole[cut * 4..].to_vec(), "cut {cut}, rank {rank}");
        }
        // Three ranks: together the same multiset of remaining draws (pad draws aside).
        let want: Vec<String> = full.iter().flat_map(|w| w[cut * 4..].to_vec()).collect();
        let got: Vec<String> = (0..3)
            .flat_map(|r| ids(&collect(builder(r, 3).with_state(state.clone()))))
            .collect();
        assert_same_draws(&want, &got, 3);
    }
    // A state of this spec is refused by a loader of another, naming what differs.
    let state = std::thread::spawn({
        let b = builder(0, 2);
        move || {
            let mut loader = b.build().unwrap();
            loader.next().unwrap().unwrap();
            loader.state()
        }
    })
    .join()
    .unwrap();
    let other = Loader::builder(&table)
        .with_batch_size(4)
        .with_shuffle(11, 12)
        .with_rank(0, 2)
        .with_sampling(
            Sampling::default()
                .with_balance_labels()
                .with_epoch_size(150),
        )
        .with_state(state.clone());
    let e = first_error(other, "another spec");
    assert!(e.contains("they differ in class_weights, balance"), "{e}");
    let plain = Loader::builder(&table)
        .with_batch_size(4)
        .with_shuffle(11, 12)
        .with_rank(0, 2)
        .with_state(state);
    let e = first_error(plain, "no spec");
    assert!(e.contains("this loader has none"), "{e}");
}

#[tokio::test]
async fn bad_sampling_options_are_named_by_the_builder() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 12, 2).await;
    let at = |spec: Sampling| Loader::builder(&table).with_sampling(spec);
    let cases: Vec<(LoaderBuilder, &str)> = vec![
        // Refused before the table opens: a table that does not exist says nothing.
        (
            Loader::builder(dir.path().join("nothing here").to_str().unwrap())
                .with_sampling(Sampling::default().with_split(Split::new("dev", three_splits()))),
            "split: 'dev' is not one of the splits",
        ),
        (
            Loader::builder("/nowhere").with_sampling(Sampling::default().with_subsample(2.0)),
            "subsample: 2 is not a share in (0, 1]",
        ),
        (
            at(Sampling::default().with_class_weights(vec![(0, -1.0), (1, 1.0)])),
            "class_weights: label 0 has weight -1",
        ),
        (
            at(Sampling::default().with_weight_column("w")),
            "weight_column: no column 'w'",
        ),
        (
            at(Sampling::default().with_weight_column("id")),
            "weight_column: column 'id' holds Utf8, not numbers",
        ),
        (
            at(Sampling::default().with_class_weights(vec![(0, 1.0)])),
            "class_weights: label 1 has no weight",
        ),
    ];
    for (builder, says) in cases {
        let e = first_error(builder, says);
        assert!(e.contains(says), "{says}: {e}");
        assert!(e.contains("sampling option"), "{e}");
    }
}

#[tokio::test]
async fn voxlake_bench_takes_the_same_sampling_flags() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 40, 4).await;
    let bench = |flags: &[&str]| {
        std::process::Command::new(voxlake_testkit::voxlake_bin())
            .args(["bench", &table, "--shuffle", "--json", "--batch-size", "8"])
            .args(flags)
            .output()
            .unwrap()
    };
    let out = bench(&["--balance", "label", "--epoch-size", "64"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["draws_per_epoch"], 64);
    assert_eq!(
        report["labels_delivered"],
        serde_json::json!({"0": 32, "1": 32})
    );
    let out = bench(&[
        "--split",
        "val",
        "--splits",
        "train:0.5,val:0.5",
        "--split-salt",
        "x",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = report["samples"].as_u64().unwrap();
    assert!(n > 5 && n < 35, "{report}");
    // A bad flag is refused by name, before the table is read.
    let out = bench(&["--subsample", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--subsample: 2 is not a share in (0, 1]"),
        "{stderr}"
    );
    let out = bench(&["--class-weights", "0:1,one:2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--class-weights: '0:1,one:2' does not parse"),
        "{stderr}"
    );
}

#[tokio::test]
async fn sampling_reads_the_rows_a_filter_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let (count, ones) = (48, 12);
    let table = rare_table(dir.path(), count, ones).await;
    // The filter keeps some rows of most row groups (every third cube, and the positives).
    let every_third: Vec<String> = (0..count)
        .step_by(3)
        .map(|i| format!("'cube_{i:06}.npy'"))
        .collect();
    let filter = format!("label = 1 OR id IN ({})", every_third.join(", "));
    let filter = filter.as_str();
    let kept: BTreeSet<String> = ids(&collect(Loader::builder(&table).with_filter(filter)))
        .into_iter()
        .collect();
    let split = Split::new("a", vec![("a".into(), 0.5), ("b".into(), 0.5)]);
    let got = ids(&collect(
        Loader::builder(&table)
            .with_filter(filter)
            .with_sampling(Sampling::default().with_split(split.clone())),
    ));
    let want: BTreeSet<String> = kept
        .iter()
        .filter(|id| split.contains(id))
        .cloned()
        .collect();
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(got.len(), want.len());
    // Balanced over the kept rows: the positives are half the draws.
    let batches = collect(
        Loader::builder(&table)
            .with_filter(filter)
            .with_batch_size(10)
            .with_sampling(
                Sampling::default()
                    .with_balance_labels()
                    .with_epoch_size(100),
            ),
    );
    for id in ids(&batches) {
        assert!(kept.contains(&id), "{id} is not a row the filter keeps");
    }
    let positives = batches
        .iter()
        .flat_map(|b| &b.labels)
        .filter(|l| **l == Some(1))
        .count();
    assert_eq!(positives, 50);
}

#[tokio::test]
async fn subsets_by_row_group_read_only_the_row_groups_they_deliver() {
    let dir = tempfile::tempdir().unwrap();
    let table = rare_table(dir.path(), 120, 10).await; // 30 row groups of 4 rows
    let run = |by: SubsetBy, epoch: u64| {
        let b = Loader::builder(&table)
            .with_batch_size(4)
            .with_shuffle(2, 8)
            .with_start_epoch(epoch)
            .with_sampling(Sampling::default().with_subsample(0.1).with_subset_by(by));
        std::thread::spawn(move || {
            let mut loader = b.build().unwrap();
            let mut got = Vec::new();
            for batch in loader.by_ref() {
                got.extend(batch.unwrap().ids);
            }
            (got, loader.stats().stream.row_groups)
        })
        .join()
        .unwrap()
    };
    let (rows, read_by_row) = run(SubsetBy::Row, 0);
    assert_eq!(rows.len(), 12);
    let (first, read) = run(SubsetBy::RowGroup, 0);
    let (second, _) = run(SubsetBy::RowGroup, 1);
    assert_eq!((first.len(), second.len()), (12, 12));
    assert_eq!(read, 3, "12 rows are 3 row groups of 4");
    assert!(
        read_by_row > 6,
        "rows alike touch most groups: {read_by_row}"
    );
    // Whole row groups: each group's 4 consecutive cubes; another epoch, other groups.
    let groups = |ids: &[String]| -> BTreeSet<usize> {
        ids.iter()
            .map(|id| {
                id.trim_start_matches("cube_")
                    .trim_end_matches(".npy")
                    .parse::<usize>()
                    .unwrap()
                    / 4
            })
            .collect()
    };
    assert_eq!(groups(&first).len(), 3);
    assert_ne!(groups(&first), groups(&second));
    let e = first_error(
        Loader::builder(&table)
            .with_sampling(Sampling::default().with_subset_by(SubsetBy::RowGroup)),
        "a row-group subset without a size",
    );
    assert!(e.contains("subset_by: row_group needs a subset"), "{e}");
}
