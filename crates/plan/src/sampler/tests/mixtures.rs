//! The sampler over a mixture's sources: each source's share on every rank, repeat and choose,
//! labels balanced within each source, and a mixture resumed on another world.

use super::*;

/// The source of each position of `order`, for sources of `files` files each.
fn sources_at(order: &EpochOrder, rows_per_file: &[u64], files: &[usize]) -> Vec<usize> {
    let mut at = vec![0; order.total() as usize];
    let mut f = 0;
    for (s, &n) in files.iter().enumerate() {
        for file in f..f + n {
            for r in 0..rows_per_file[file] {
                at[order.position(file, r) as usize] = s;
            }
        }
        f += n;
    }
    at
}

#[test]
fn a_mixture_gives_every_rank_each_sources_proportion() {
    // Sources of 3,000, 50,000 and 400 rows at 0.6 / 0.3 / 0.1 of 10^5 draws.
    let files = [3usize, 50, 4];
    let rows_per_file: Vec<u64> = [vec![1000; 3], vec![1000; 50], vec![100; 4]].concat();
    let spec = Sampling::default()
        .with_epoch_size(100_000)
        .with_shares(vec![
            Share::Proportion(0.6),
            Share::Proportion(0.3),
            Share::Proportion(0.1),
        ]);
    let rows = RowsOf {
        sources: Some(&files),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 11, &rows_per_file, rows).unwrap();
    assert_eq!(sampler.draws_per_epoch(), 100_000);
    let order = EpochOrder::new(&Planner::new(11, true), &rows_per_file, 0);
    let source = sources_at(&order, &rows_per_file, &files);
    let draws = sampler.draws(&order, 0);
    assert_eq!(draws.strata_len(), vec![60_000, 30_000, 10_000]);
    for world in [1, 2, 8] {
        for rank in 0..world {
            let (real, _) = share(&draws, world, rank, Uneven::Pad);
            let real = expand(&real);
            for (s, want) in [0.6, 0.3, 0.1].into_iter().enumerate() {
                let got = real.iter().filter(|&&p| source[p as usize] == s).count() as f64
                    / real.len() as f64;
                assert!(
                    (got - want).abs() < 0.005,
                    "source {s}, rank {rank} of {world}: {got}"
                );
            }
        }
    }
    // The largest source draws fewer rows than it has: distinct rows, another set next epoch.
    let of = |d: &Draws| {
        let (all, _) = share(d, 1, 0, Uneven::Pad);
        let mut rows: Vec<u64> = expand(&all)
            .into_iter()
            .filter(|&p| source[p as usize] == 1)
            .collect();
        rows.sort_unstable();
        rows
    };
    let first = of(&draws);
    assert!(first.windows(2).all(|w| w[0] < w[1]));
    let order1 = EpochOrder::new(&Planner::new(11, true), &rows_per_file, 1);
    assert_ne!(of(&sampler.draws(&order1, 1)), first);
}

#[test]
fn repeat_and_choose_count_draws_and_labels_balance_within_each_source() {
    let files = [2usize, 1];
    let rows_per_file = vec![10, 10, 7];
    let labels: Vec<Option<i64>> = (0..27).map(|r| Some(i64::from(r % 5 == 0))).collect();
    let spec = Sampling::default()
        .with_balance_labels()
        .with_shares(vec![Share::Repeat(1.5), Share::Choose(4)]);
    let rows = RowsOf {
        labels: Some(&labels),
        sources: Some(&files),
        ..RowsOf::default()
    };
    let sampler = Sampler::new(&spec, 5, &rows_per_file, rows).unwrap();
    assert_eq!(sampler.draws_per_epoch(), 30 + 4);
    let order = EpochOrder::new(&Planner::new(5, true), &rows_per_file, 0);
    // Each source's labels a stratum each: 15/15, then 2/2.
    assert_eq!(sampler.draws(&order, 0).strata_len(), vec![15, 15, 2, 2]);
    // Too few or too many shares for the sources, and shares without sources, are named.
    for (shares, sources) in [
        (vec![Share::Choose(1)], Some(&files[..])),
        (vec![Share::Choose(1), Share::Choose(1)], None),
    ] {
        let spec = Sampling::default().with_shares(shares);
        let rows = RowsOf {
            sources,
            ..RowsOf::default()
        };
        let e = Sampler::new(&spec, 5, &rows_per_file, rows).unwrap_err();
        assert_eq!(e.option(), "sources", "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A mixture's draws, resumed on another world size: exactly the epoch's draws, and each
    /// source's quota as its share says.
    #[test]
    fn a_mixture_resumes_elastically(
        groups in table(),
        seed in any::<u64>(),
        size in 1u64..60,
        batch_size in 1usize..5,
        w1 in 1usize..6,
        w2 in 1usize..6,
        cut in 0u64..5,
        kind in 0usize..3,
    ) {
        let rows_per_file: Vec<u64> = groups.iter().map(|g| g.iter().sum()).collect();
        prop_assume!(rows_per_file.len() >= 2);
        let split = rows_per_file.len() / 2;
        let files = [split, rows_per_file.len() - split];
        let n0: u64 = rows_per_file[..split].iter().sum();
        let n1: u64 = rows_per_file[split..].iter().sum();
        prop_assume!(n0 > 0 && n1 > 0);
        let spec = match kind {
            0 => Sampling::default()
                .with_epoch_size(size)
                .with_shares(vec![Share::Proportion(0.7), Share::Proportion(0.3)]),
            1 => Sampling::default().with_shares(vec![Share::Repeat(2.5), Share::Choose(size)]),
            _ => Sampling::default()
                .with_weight_column("w")
                .with_shares(vec![Share::Choose(size), Share::Repeat(0.5)]),
        };
        let weights: Vec<f64> = (0..n0 + n1).map(|r| (r % 4) as f64 + 0.5).collect();
        let rows = RowsOf { weights: Some(&weights), sources: Some(&files), ..RowsOf::default() };
        let sampler = Sampler::new(&spec, seed, &rows_per_file, rows).unwrap();
        let want_sizes = match kind {
            0 => None,
            1 => Some(vec![(2.5 * n0 as f64).round() as u64, size]),
            _ => Some(vec![size, (0.5 * n1 as f64).round() as u64]),
        };
        let (drawn, got, want) = elastic(&sampler, seed, batch_size, &groups, (w1, w2), cut);
        let lens = drawn.strata_len();
        match want_sizes {
            Some(w) => prop_assert_eq!(lens, w),
            None => {
                prop_assert_eq!(lens.iter().sum::<u64>(), size);
                prop_assert!((lens[0] as f64 - 0.7 * size as f64).abs() < 1.0);
            }
        }
        prop_assert_eq!(got, want);
    }
}
