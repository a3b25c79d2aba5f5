//! Mixtures of tables through the loader: each source's share on every rank, a source per
//! sample, repeat and choose, a filter of a source's own, sources of other fields refused by
//! name before any read, and exact resume of a mixture on the same and another world.

use std::collections::BTreeSet;
use std::path::Path;

use voxlake::compact::{Compactor, synth};
use voxlake::format::npy::{EncodeOptions, encode};
use voxlake::format::{DType, Layout};
use voxlake::loader::{Batch, Loader, Source};
use voxlake::plan::sample::Sampling;

use crate::loader::{assert_same_draws, collect, first_error};

/// `count` synthetic cubes in row groups of 4 rows, files of about 12 rows, under `dir/name`.
async fn table(dir: &Path, name: &str, count: usize) -> String {
    let data = synth::generate(&dir.join(name), count, 5).unwrap();
    let table = dir.join(name).join("table");
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

/// Each sample as (source, id), in delivery order.
fn drawn(batches: &[Batch]) -> Vec<(u32, String)> {
    batches
        .iter()
        .flat_map(|b| {
            assert_eq!(b.sources.len(), b.len(), "a source per sample");
            b.sources.iter().copied().zip(b.ids.iter().cloned())
        })
        .collect()
}

fn per_source(draws: &[(u32, String)], sources: usize) -> Vec<usize> {
    (0..sources as u32)
        .map(|s| draws.iter().filter(|d| d.0 == s).count())
        .collect()
}

#[tokio::test]
async fn every_rank_draws_each_sources_share() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 40).await;
    let b = table(dir.path(), "b", 100).await;
    let c = table(dir.path(), "c", 12).await;
    let sources = || {
        vec![
            Source::new(&a).with_proportion(0.6),
            Source::new(&b).with_proportion(0.3),
            Source::new(&c).with_proportion(0.1),
        ]
    };
    for world in [1, 2] {
        for rank in 0..world {
            let builder = Loader::mixture(sources())
                .with_sampling(Sampling::default().with_epoch_size(200))
                .with_batch_size(5)
                .with_shuffle(7, 20)
                .with_rank(rank, world);
            let got = drawn(&collect(builder));
            let n = 200 / world;
            assert_eq!(got.len(), n);
            let counts = per_source(&got, 3);
            for (s, share) in [0.6, 0.3, 0.1].into_iter().enumerate() {
                let want = share * n as f64;
                assert!(
                    (counts[s] as f64 - want).abs() <= 1.0,
                    "rank {rank} of {world}: source {s} drew {}, its share is {want}",
                    counts[s]
                );
            }
        }
    }
    // Repeat and choose: half of a's rows (distinct, another half next epoch), 7 of b's,
    // every row of c twice; the loader counts each source's samples.
    let builder = Loader::mixture(vec![
        Source::new(&a).with_repeat(0.5),
        Source::new(&b).with_choose(7),
        Source::new(&c).with_repeat(2.0),
    ])
    .with_batch_size(6)
    .with_shuffle(3, 12)
    .with_epochs(2);
    let mut loader = std::thread::spawn(move || builder.build().unwrap())
        .join()
        .unwrap();
    assert_eq!(loader.draws_per_epoch(), 20 + 7 + 24);
    let batches: Vec<Batch> = (&mut loader).map(Result::unwrap).collect();
    assert_eq!(loader.sources_delivered(), vec![40, 14, 48]);
    let epoch = |e: u64| {
        let batches: Vec<Batch> = batches.iter().filter(|b| b.epoch == e).cloned().collect();
        drawn(&batches)
    };
    let halves: Vec<BTreeSet<String>> = (0..2)
        .map(|e| {
            let ids: Vec<String> = epoch(e)
                .into_iter()
                .filter(|d| d.0 == 0)
                .map(|d| d.1)
                .collect();
            let set: BTreeSet<String> = ids.iter().cloned().collect();
            assert_eq!(
                (ids.len(), set.len()),
                (20, 20),
                "epoch {e}: distinct rows of a"
            );
            set
        })
        .collect();
    assert_ne!(halves[0], halves[1], "a new half of a each epoch");
    let c_ids: Vec<String> = epoch(0)
        .into_iter()
        .filter(|d| d.0 == 2)
        .map(|d| d.1)
        .collect();
    let unique: BTreeSet<&String> = c_ids.iter().collect();
    assert_eq!(
        (c_ids.len(), unique.len()),
        (24, 12),
        "every row of c twice"
    );
}

#[tokio::test]
async fn a_source_keeps_its_own_filter_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 24).await;
    let b = table(dir.path(), "b", 24).await;
    let version = |t: &str| {
        let builder = Loader::builder(t);
        std::thread::spawn(move || builder.build().unwrap().version())
            .join()
            .unwrap()
    };
    let first = version(&b);
    // b at the version before rows were added to it.
    let more = synth::generate(&dir.path().join("more"), 30, 9).unwrap();
    let renamed = dir.path().join("more/renamed");
    std::fs::create_dir_all(&renamed).unwrap();
    for i in 24..30 {
        std::fs::rename(
            more.cubes.join(synth::cube_name(i)),
            renamed.join(synth::cube_name(i)),
        )
        .unwrap();
    }
    Compactor::new(&b)
        .convert(renamed.to_str().unwrap())
        .await
        .unwrap();
    let builder = Loader::mixture(vec![
        Source::new(&a).with_filter("label = 1"),
        Source::new(&b).with_as_of(voxlake::AsOf::Version(first)),
    ])
    .with_batch_size(4);
    let loader = std::thread::spawn(move || builder.build().unwrap())
        .join()
        .unwrap();
    assert_eq!(loader.versions(), vec![version(&a), first]);
    let batches: Vec<Batch> = loader.map(Result::unwrap).collect();
    let got = drawn(&batches);
    let labels: Vec<Option<i64>> = batches.iter().flat_map(|b| b.labels.clone()).collect();
    for ((source, id), label) in got.iter().zip(&labels) {
        if *source == 0 {
            assert_eq!(*label, Some(1), "a's filter keeps label 1 only: {id}");
        }
    }
    assert_eq!(
        per_source(&got, 2)[1],
        24,
        "b at its first version has 24 rows"
    );
    assert!(per_source(&got, 2)[0] > 0 && per_source(&got, 2)[0] < 24);
}

/// A mixture's filter counts are its sources' summed (they were the first source's alone).
#[tokio::test]
async fn a_mixtures_filter_stats_sum_its_sources() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 24).await;
    let b = table(dir.path(), "b", 20).await;
    let stats = |builder: voxlake::LoaderBuilder| {
        std::thread::spawn(move || builder.build().unwrap().filter_stats().unwrap())
            .join()
            .unwrap()
    };
    let alone_a = stats(Loader::builder(&a).with_filter("label = 1"));
    let alone_b = stats(Loader::builder(&b).with_filter("label = 0"));
    let mixed = stats(Loader::mixture(vec![
        Source::new(&a).with_filter("label = 1"),
        Source::new(&b).with_filter("label = 0"),
    ]));
    assert_eq!(mixed.rows_before, 44);
    assert_eq!(mixed.rows_before, alone_a.rows_before + alone_b.rows_before);
    assert_eq!(
        mixed.rows_selected,
        alone_a.rows_selected + alone_b.rows_selected
    );
    assert_eq!(
        mixed.rows_decided,
        alone_a.rows_decided + alone_b.rows_decided
    );
    assert!(alone_a.rows_selected > 0 && alone_b.rows_selected > 0);
}

#[tokio::test]
async fn sources_of_other_fields_and_bad_shares_are_named_before_any_read() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 8).await;
    // A table of 4-float vectors.
    let other = npy_table(dir.path(), "other", &[4], 6).await;
    let e = first_error(
        Loader::mixture(vec![Source::new(&a), Source::new(&other)]),
        "other fields",
    );
    assert!(e.contains("source 1 of the mixture"), "{e}");
    assert!(e.contains("field 'tensor'") && e.contains("[4]"), "{e}");
    let e = first_error(
        Loader::mixture(vec![
            Source::new(&a).with_proportion(0.5),
            Source::new(&a).with_repeat(1.0),
        ]),
        "proportion with repeat",
    );
    assert!(
        e.contains("sources") && e.contains("proportion or none"),
        "{e}"
    );
    let e = first_error(
        Loader::mixture(vec![Source::new(&a).with_proportion(-1.0)]),
        "a negative proportion",
    );
    assert!(e.contains("proportion") && e.contains("-1"), "{e}");
    // A voxlake table of pyarrow_tensor's shape (with a label column) and that table (none):
    // the labels of one source would be lost, so the mixture is refused.
    let labelled = npy_table(dir.path(), "labelled", &[3, 4, 2, 2], 4).await;
    let e = first_error(
        Loader::mixture(vec![
            Source::new(&labelled),
            Source::new(crate::foreign::fixture("pyarrow_tensor")),
        ]),
        "a source without a label column",
    );
    assert!(
        e.contains("source 1 of the mixture: it has no label column"),
        "{e}"
    );
    let e = first_error(Loader::mixture(Vec::new()), "no source");
    assert!(e.contains("no source"), "{e}");
}

#[tokio::test]
async fn a_mixture_resumes_exactly_on_the_same_and_another_world() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 30).await;
    let b = table(dir.path(), "b", 50).await;
    let builder = |rank: usize, world: usize| {
        Loader::mixture(vec![
            Source::new(&a).with_proportion(0.7),
            Source::new(&b).with_proportion(0.3),
        ])
        .with_sampling(Sampling::default().with_epoch_size(64))
        .with_batch_size(4)
        .with_shuffle(11, 12)
        .with_rank(rank, world)
    };
    let full: Vec<Vec<(u32, String)>> = (0..2).map(|r| drawn(&collect(builder(r, 2)))).collect();
    let cut = 3;
    let b0 = builder(0, 2);
    let state = std::thread::spawn(move || {
        let mut loader = b0.build().unwrap();
        for _ in 0..cut {
            loader.next().unwrap().unwrap();
        }
        loader.state()
    })
    .join()
    .unwrap();
    assert_eq!(state.sources.len(), 2, "the state names both sources");
    for (rank, whole) in full.iter().enumerate() {
        let rest = drawn(&collect(builder(rank, 2).with_state(state.clone())));
        assert_eq!(rest, whole[cut * 4..].to_vec(), "rank {rank}");
    }
    let want: Vec<(u32, String)> = full.iter().flat_map(|w| w[cut * 4..].to_vec()).collect();
    let got: Vec<(u32, String)> = (0..3)
        .flat_map(|r| drawn(&collect(builder(r, 3).with_state(state.clone()))))
        .collect();
    assert_same_draws(&want, &got, 3);
    // Another mixture (the sources swapped) is refused, naming the source that differs.
    let swapped = Loader::mixture(vec![
        Source::new(&b).with_proportion(0.7),
        Source::new(&a).with_proportion(0.3),
    ])
    .with_sampling(Sampling::default().with_epoch_size(64))
    .with_batch_size(4)
    .with_shuffle(11, 12)
    .with_rank(0, 2)
    .with_state(state.clone());
    let e = first_error(swapped, "swapped sources");
    assert!(e.contains("source 0 of the state"), "{e}");
    let one = Loader::builder(&a)
        .with_batch_size(4)
        .with_shuffle(11, 12)
        .with_rank(0, 2)
        .with_state(state);
    let e = first_error(one, "one table");
    assert!(e.contains("2 table(s)") || e.contains("source"), "{e}");
}

#[tokio::test]
async fn voxlake_bench_mixes_the_tables_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let a = table(dir.path(), "a", 20).await;
    let b = table(dir.path(), "b", 30).await;
    let bench = |flags: &[&str]| {
        std::process::Command::new(voxlake_testkit::voxlake_bin())
            .args(["bench", &a, &b, "--shuffle", "--json", "--batch-size", "8"])
            .args(flags)
            .output()
            .unwrap()
    };
    let out = bench(&["--proportion", "0.75,0.25", "--epoch-size", "40"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["draws_per_epoch"], 40);
    assert_eq!(report["sources_delivered"], serde_json::json!([30, 10]));
    assert_eq!(report["versions"].as_array().unwrap().len(), 2);
    let out = bench(&["--repeat", "2,", "--choose", ",3"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sources_delivered"], serde_json::json!([40, 3]));
    // Two tables without a share flag: every row of each once.
    let out = bench(&[]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sources_delivered"], serde_json::json!([20, 30]));
    for (flags, says) in [
        (
            &["--proportion", "0.5"][..],
            "--proportion \"0.5\": 1 values for 2 tables",
        ),
        (
            &["--repeat", "1,1", "--choose", "2,"][..],
            "--choose and --repeat both give table",
        ),
        (
            &["--proportion", "0.5,-1"][..],
            "proportion: source 1 has weight -1",
        ),
    ] {
        let out = bench(flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{flags:?}: {stderr}"
        );
    }
}

/// A table `name` under `dir` converted from `count` `.npy` arrays of `shape` (f32, array `i`
/// holding `i + k` at its `k`-th value).
async fn npy_table(dir: &Path, name: &str, shape: &[usize], count: usize) -> String {
    let src = dir.join(format!("{name}-npy"));
    std::fs::create_dir_all(&src).unwrap();
    let numel: usize = shape.iter().product();
    for i in 0..count {
        let bytes: Vec<u8> = (0..numel)
            .flat_map(|v| (v as f32 + i as f32).to_le_bytes())
            .collect();
        let file = encode(DType::F32, shape, &bytes, EncodeOptions::default());
        std::fs::write(src.join(format!("v{i}.npy")), file).unwrap();
    }
    let table = dir.join(name).to_string_lossy().into_owned();
    Compactor::new(&table)
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    table
}
