use super::*;
use crate::mixture::Share;
use crate::order::{Uneven, share};
use crate::plan::Planner;
use crate::resume::{OrderSettings, Segment, remaining, rewind};
use crate::split::Split;
use proptest::prelude::*;

/// Table row of each position of `order` (files of `rows_per_file` rows).
fn rows_at(order: &EpochOrder, rows_per_file: &[u64]) -> Vec<u64> {
    let mut at = vec![0; order.total() as usize];
    let mut start = 0;
    for (f, &n) in rows_per_file.iter().enumerate() {
        for r in 0..n {
            at[order.position(f, r) as usize] = start + r;
        }
        start += n;
    }
    at
}

fn expand(ranges: &[std::ops::Range<u64>]) -> Vec<u64> {
    ranges.iter().flat_map(|r| r.clone()).collect()
}

/// Labels 1:99, clustered by file as a table written class by class: label 1 in the last file.
fn rare_labels(files: usize, per_file: u64) -> (Vec<u64>, Vec<Option<i64>>) {
    let rows_per_file = vec![per_file; files];
    let n = files as u64 * per_file;
    let labels = (0..n).map(|r| Some(i64::from(r >= n - n / 100))).collect();
    (rows_per_file, labels)
}

#[test]
fn balanced_labels_are_half_the_draws_on_every_rank() {
    let (rows_per_file, labels) = rare_labels(100, 1000);
    let spec = Sampling::default().with_balance_labels();
    let rows = RowsOf {
        labels: Some(&labels),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 3, &rows_per_file, rows).unwrap();
    assert_eq!(sampler.draws_per_epoch(), 100_000);
    let order = EpochOrder::new(&Planner::new(3, true), &rows_per_file, 0);
    let at = rows_at(&order, &rows_per_file);
    let draws = sampler.draws(&order, 0);
    assert_eq!(draws.strata_len(), vec![50_000, 50_000]);
    for world in [1, 2, 8] {
        for rank in 0..world {
            let (real, _) = share(&draws, world, rank, Uneven::Pad);
            let real = expand(&real);
            let ones = real
                .iter()
                .filter(|&&p| labels[at[p as usize] as usize] == Some(1))
                .count();
            let share = ones as f64 / real.len() as f64;
            assert!(
                (share - 0.5).abs() < 0.01,
                "rank {rank} of {world}: {share}"
            );
        }
    }
    // Another epoch, other draws; the same epoch, the same.
    assert_eq!(sampler.draws(&order, 0), draws);
    let next = EpochOrder::new(&Planner::new(3, true), &rows_per_file, 1);
    assert_ne!(sampler.draws(&next, 1), sampler.draws(&next, 0));
}

#[test]
fn class_weights_and_a_weight_column_set_the_shares() {
    let rows_per_file = [500u64, 500];
    let labels: Vec<Option<i64>> = (0..1000).map(|r| Some(r % 4)).collect();
    // Label 2 weighs 0: no stratum, never drawn; per row, label 1 three times label 0.
    let spec = Sampling::default()
        .with_class_weights(vec![(0, 1.0), (1, 3.0), (2, 0.0), (3, 4.0)])
        .with_epoch_size(8000);
    let rows = RowsOf {
        labels: Some(&labels),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 1, &rows_per_file, rows).unwrap();
    let order = EpochOrder::new(&Planner::new(1, false), &rows_per_file, 0);
    let drawn = sampler.draws(&order, 0);
    assert_eq!(drawn.strata_len(), vec![1000, 3000, 4000]);
    // Table order: a position is its row.
    let (all, _) = share(&drawn, 1, 0, Uneven::Pad);
    assert!(expand(&all).iter().all(|&r| labels[r as usize] != Some(2)));

    // A column: row r weighs r mod 3; rows of weight 0 never come, weight 2 twice weight 1.
    let weights: Vec<f64> = (0..1000).map(|r| (r % 3) as f64).collect();
    let spec = Sampling::default()
        .with_weight_column("w")
        .with_epoch_size(30_000);
    let rows = RowsOf {
        weights: Some(&weights),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 1, &rows_per_file, rows).unwrap();
    let (all, _) = share(&sampler.draws(&order, 0), 1, 0, Uneven::Pad);
    let mut by_weight = [0u64; 3];
    for p in expand(&all) {
        by_weight[p as usize % 3] += 1;
    }
    assert_eq!(by_weight[0], 0);
    let ratio = by_weight[2] as f64 / by_weight[1] as f64;
    assert!((ratio - 2.0).abs() < 0.1, "{by_weight:?}");
}

#[test]
fn subsets_are_distinct_rows_and_change_each_epoch() {
    let rows_per_file = [300u64, 700];
    let spec = Sampling::default().with_subsample(0.1);
    let sampler = Sampler::new(&spec, 9, &rows_per_file, RowsOf::default()).unwrap();
    assert_eq!(sampler.draws_per_epoch(), 100);
    let planner = Planner::new(9, true);
    let mut epochs = Vec::new();
    for epoch in 0..2 {
        let order = EpochOrder::new(&planner, &rows_per_file, epoch);
        let at = rows_at(&order, &rows_per_file);
        let (all, _) = share(&sampler.draws(&order, epoch), 1, 0, Uneven::Pad);
        let mut rows: Vec<u64> = expand(&all).iter().map(|&p| at[p as usize]).collect();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), 100);
        epochs.push(rows);
    }
    assert_ne!(epochs[0], epochs[1]);
    // More draws than rows: each row twice, and a subset once more.
    let spec = Sampling::default().with_epoch_size(2500);
    let sampler = Sampler::new(&spec, 9, &rows_per_file, RowsOf::default()).unwrap();
    let order = EpochOrder::new(&planner, &rows_per_file, 0);
    let (all, _) = share(&sampler.draws(&order, 0), 1, 0, Uneven::Pad);
    let mut times = vec![0u32; 1000];
    for p in expand(&all) {
        times[p as usize] += 1;
    }
    assert_eq!(times.iter().filter(|&&t| t == 3).count(), 500);
    assert!(times.iter().all(|&t| t == 2 || t == 3));
}

#[test]
fn a_split_draws_only_its_rows() {
    let rows_per_file = [400u64, 600];
    let ids: Vec<String> = (0..1000).map(|i| format!("cube_{i:05}.npy")).collect();
    let split = Split::new("val", vec![("train".into(), 0.9), ("val".into(), 0.1)]);
    let mask: Vec<bool> = ids.iter().map(|id| split.contains(id)).collect();
    let spec = Sampling::default().with_split(split);
    let rows = RowsOf {
        in_split: Some(&mask),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 0, &rows_per_file, rows).unwrap();
    let chosen = mask.iter().filter(|&&m| m).count() as u64;
    assert_eq!(sampler.draws_per_epoch(), chosen);
    assert!((70..130).contains(&chosen), "{chosen}");
    let order = EpochOrder::new(&Planner::new(0, true), &rows_per_file, 0);
    let at = rows_at(&order, &rows_per_file);
    let (all, _) = share(&sampler.draws(&order, 0), 1, 0, Uneven::Pad);
    let rows: Vec<u64> = expand(&all).iter().map(|&p| at[p as usize]).collect();
    assert_eq!(rows.len() as u64, chosen);
    assert!(rows.iter().all(|&r| mask[r as usize]));
}

#[test]
fn rows_that_cannot_be_weighted_are_named() {
    let labels = [Some(0), None, Some(1)];
    let with = |spec: Sampling, labels: &[Option<i64>], weights: &[f64]| {
        let rows = RowsOf {
            labels: Some(labels),
            weights: Some(weights),
            ..RowsOf::default()
        };
        Sampler::new(&spec, 0, &[3], rows).unwrap_err().to_string()
    };
    let e = with(
        Sampling::default().with_balance_labels(),
        &labels,
        &[1.0; 3],
    );
    assert!(e.contains("balance: row 1 has no label"), "{e}");
    let e = with(
        Sampling::default().with_class_weights(vec![(0, 1.0)]),
        &[Some(0), Some(2), Some(0)],
        &[1.0; 3],
    );
    assert!(e.contains("class_weights: label 2 has no weight"), "{e}");
    let w = Sampling::default().with_weight_column("w");
    let e = with(w.clone(), &labels, &[1.0, f64::NAN, 1.0]);
    assert!(e.contains("row 1 of column 'w' has weight NaN"), "{e}");
    let e = with(w.clone(), &labels, &[1.0, -2.0, 1.0]);
    assert!(e.contains("weight -2"), "{e}");
    let e = with(w.clone(), &labels, &[0.0; 3]);
    assert!(e.contains("every row's weight in column 'w' is 0"), "{e}");
    let e = with(w, &labels, &[1.0; 2]);
    assert!(e.contains("2 values for a table of 3 rows"), "{e}");
}

/// A table of files of row groups for the resume properties.
fn table() -> impl Strategy<Value = Vec<Vec<u64>>> {
    prop::collection::vec(prop::collection::vec(0u64..7, 1..4), 1..7)
}

/// The table rows `rank` delivers in its first `batches` batches of a segment over `left`,
/// pad rows left out.
#[allow(clippy::too_many_arguments)]
fn delivered(
    settings: &OrderSettings,
    order: &EpochOrder,
    at: &[u64],
    groups: &[Vec<u64>],
    closed: &[Segment],
    left: &Draws,
    world: usize,
    rank: usize,
    batches: u64,
) -> Vec<u64> {
    let r = rewind(
        settings,
        order,
        0,
        closed,
        left,
        world,
        rank,
        batches,
        |f| Ok::<_, ()>(groups[f].clone()),
    )
    .unwrap();
    r.rows
        .iter()
        .filter(|(u, _)| !r.units[*u].pad)
        .map(|&(u, row)| {
            let unit = &r.units[u];
            at[order.position(unit.file, unit.first_row + unit.drawn_row(row).unwrap()) as usize]
        })
        .collect()
}

/// An epoch of `sampler` over files of row groups `groups`, dealt to `worlds.0` ranks that stop
/// after `cut` batches and resumed on `worlds.1`: the epoch's draws, the table rows delivered
/// over both segments (pad aside) and the rows drawn, each sorted.
fn elastic(
    sampler: &Sampler,
    seed: u64,
    batch_size: usize,
    groups: &[Vec<u64>],
    (w1, w2): (usize, usize),
    cut: u64,
) -> (Draws, Vec<u64>, Vec<u64>) {
    let rows_per_file: Vec<u64> = groups.iter().map(|g| g.iter().sum()).collect();
    let settings = OrderSettings {
        batch_size,
        uneven: Uneven::Pad,
        interleave: 2,
        loosen: crate::mixer::Loosen::Half,
        ..OrderSettings::shuffled(seed, 6)
    };
    let order = settings.order(&rows_per_file, 0);
    let at = rows_at(&order, &rows_per_file);
    let drawn = sampler.draws(&order, 0);
    let k = cut.min(settings.batches(drawn.len(), w1));
    let closed = [Segment {
        world_size: w1,
        batches: k,
        ahead: 0,
    }];
    let mut got: Vec<u64> = (0..w1)
        .flat_map(|rank| delivered(&settings, &order, &at, groups, &[], &drawn, w1, rank, k))
        .collect();
    let left = remaining(&settings, &order, 0, &drawn, &closed, |f| {
        Ok::<_, ()>(groups[f].clone())
    })
    .unwrap();
    got.extend((0..w2).flat_map(|rank| {
        delivered(
            &settings,
            &order,
            &at,
            groups,
            &closed,
            &left,
            w2,
            rank,
            u64::MAX,
        )
    }));
    got.sort_unstable();
    let (all, _) = share(&drawn, 1, 0, Uneven::Pad);
    let mut want: Vec<u64> = expand(&all).iter().map(|&p| at[p as usize]).collect();
    want.sort_unstable();
    (drawn, got, want)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Weighted draws, resumed on another world size after some batches: the rows delivered
    /// over both segments are exactly the epoch's draws (pad aside), each as often as drawn.
    #[test]
    fn weighted_draws_resume_elastically(
        groups in table(),
        seed in any::<u64>(),
        size in 1u64..60,
        batch_size in 1usize..5,
        w1 in 1usize..6,
        w2 in 1usize..6,
        cut in 0u64..5,
        balance in any::<bool>(),
    ) {
        let rows_per_file: Vec<u64> = groups.iter().map(|g| g.iter().sum()).collect();
        let n: u64 = rows_per_file.iter().sum();
        prop_assume!(n > 0);
        let labels: Vec<Option<i64>> = (0..n).map(|r| Some((r % 3 == 0) as i64)).collect();
        let weights: Vec<f64> = (0..n).map(|r| (r % 4) as f64 + 0.5).collect();
        let spec = if balance {
            Sampling::default().with_balance_labels().with_epoch_size(size)
        } else {
            Sampling::default().with_weight_column("w").with_epoch_size(size)
        };
        let rows = RowsOf { labels: Some(&labels), weights: Some(&weights), ..RowsOf::default() };
        let sampler = Sampler::new(&spec, seed, &rows_per_file, rows).unwrap();
        let (drawn, got, want) = elastic(&sampler, seed, batch_size, &groups, (w1, w2), cut);
        prop_assert_eq!(drawn.len(), size);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn subsets_by_row_group_take_whole_groups_and_read_only_those() {
    // Two files of row groups of 32 rows (the last ones shorter).
    let groups = vec![vec![32u64; 10], vec![32, 32, 32, 7]];
    let rows_per_file: Vec<u64> = groups.iter().map(|g| g.iter().sum()).collect();
    let n: u64 = rows_per_file.iter().sum();
    let spec = Sampling::default()
        .with_subsample(0.1)
        .with_subset_by(crate::sample::SubsetBy::RowGroup);
    let rows = RowsOf {
        row_groups: Some(&groups),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 4, &rows_per_file, rows).unwrap();
    let want = (n as f64 * 0.1).round() as u64;
    assert_eq!(sampler.draws_per_epoch(), want);
    let planner = Planner::new(4, true);
    let group_of = |row: u64| {
        let mut at = 0;
        for (g, &len) in groups.concat().iter().enumerate() {
            if row < at + len {
                return g;
            }
            at += len;
        }
        unreachable!()
    };
    let mut touched_each = Vec::new();
    for epoch in 0..3 {
        let order = EpochOrder::new(&planner, &rows_per_file, epoch);
        let at = rows_at(&order, &rows_per_file);
        let (all, _) = share(&sampler.draws(&order, epoch), 1, 0, Uneven::Pad);
        let rows: Vec<u64> = expand(&all).iter().map(|&p| at[p as usize]).collect();
        let distinct: std::collections::BTreeSet<u64> = rows.iter().copied().collect();
        assert_eq!((rows.len() as u64, distinct.len() as u64), (want, want));
        let touched: std::collections::BTreeSet<usize> =
            rows.iter().map(|&r| group_of(r)).collect();
        // ⌈want / 32⌉ groups, one more where a short group came first.
        assert!(touched.len() as u64 <= want.div_ceil(32) + 1, "{touched:?}");
        touched_each.push(touched);
    }
    assert_ne!(touched_each[0], touched_each[1]);
    // Without the files' row groups, or with counts that do not add up: named errors.
    let e = Sampler::new(&spec, 4, &rows_per_file, RowsOf::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("subset_by: the files' row groups were not read"),
        "{e}"
    );
    let bad = vec![vec![32u64; 10], vec![32]];
    let rows = RowsOf {
        row_groups: Some(&bad),
        ..RowsOf::default()
    };
    let e = Sampler::new(&spec, 4, &rows_per_file, rows).unwrap_err();
    assert!(
        e.to_string()
            .contains("file 1's row groups hold 32 rows, the file 103"),
        "{e}"
    );
}

#[test]
fn a_split_balances_its_own_rows() {
    // Labels 1 in 1 of 10 rows; the val split's rows balanced, nothing outside it drawn.
    let rows_per_file = [600u64, 400];
    let labels: Vec<Option<i64>> = (0..1000).map(|r| Some(i64::from(r % 10 == 0))).collect();
    let ids: Vec<String> = (0..1000).map(|i| format!("cube_{i:05}.npy")).collect();
    let split = Split::new("val", vec![("train".into(), 0.7), ("val".into(), 0.3)]);
    let mask: Vec<bool> = ids.iter().map(|id| split.contains(id)).collect();
    let spec = Sampling::default()
        .with_split(split)
        .with_balance_labels()
        .with_epoch_size(2000);
    let rows = RowsOf {
        labels: Some(&labels),
        in_split: Some(&mask),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 5, &rows_per_file, rows).unwrap();
    let order = EpochOrder::new(&Planner::new(5, true), &rows_per_file, 0);
    let at = rows_at(&order, &rows_per_file);
    let (all, _) = share(&sampler.draws(&order, 0), 1, 0, Uneven::Pad);
    let rows: Vec<u64> = expand(&all).iter().map(|&p| at[p as usize]).collect();
    assert_eq!(rows.len(), 2000);
    assert!(
        rows.iter().all(|&r| mask[r as usize]),
        "a row outside the split"
    );
    let ones = rows
        .iter()
        .filter(|&&r| labels[r as usize] == Some(1))
        .count();
    assert_eq!(ones, 1000);
}

mod mixtures;
