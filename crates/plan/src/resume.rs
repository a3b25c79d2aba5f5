//! Where an epoch stands after some batches, computed without reading data: for exact resume
//! and for changing the world size mid-epoch. Pure, given the footers' row-group row counts.
//!
//! An epoch is a run of segments. A segment is dealt over one world size; ranks step in
//! lockstep (as in DDP), so two numbers say where every rank is: the batches each has
//! delivered, and how many ranks, the first ones, delivered one more (as a DataLoader's
//! workers, asked round-robin, stand when it is stopped). When the world size changes, the current segment is closed, and the rows no rank
//! has delivered yet are dealt over the new ranks ([`remaining`]). To resume inside a segment,
//! the rank's mixer is rewound over unit numbers ([`rewind`]): the rows still buffered and
//! the next unit to read come out, so only the row groups still in the buffer are read again.
//!
//! ```
//! use voxlake_plan::draws::Draws;
//! use voxlake_plan::order::Uneven;
//! use voxlake_plan::resume::{OrderSettings, Segment, remaining, rewind};
//!
//! let settings = OrderSettings { batch_size: 4, uneven: Uneven::Pad, ..OrderSettings::shuffled(7, 8) };
//! let rows_per_file = [12, 12, 12];
//! let footer = |_file: usize| Ok::<_, ()>(vec![4, 4, 4]); // three row groups of 4 rows
//! let order = settings.order(&rows_per_file, 0);
//! // Two ranks delivered 2 batches each (16 rows): 20 rows are left for the new world.
//! let closed = [Segment { world_size: 2, batches: 2, ahead: 0 }];
//! let left = remaining(&settings, &order, 0, &Draws::full(36), &closed, footer).unwrap();
//! assert_eq!(left.len(), 36 - 16);
//! // Rank 1 of 3 resumed after one batch of the new segment.
//! let at = rewind(&settings, &order, 0, &closed, &left, 3, 1, 1, footer).unwrap();
//! assert_eq!(at.rows.len(), 4);
//! ```

use crate::affinity::Affinity;
use crate::draws::Draws;
use crate::mixer::{Loosen, Mixer};
use crate::order::{EpochOrder, Piece, Uneven, Unit, batches_of, deal, rows_per_rank, units};
use crate::plan::{Planner, SeededRng};

/// A closed segment of an epoch: `batches` delivered by each of `world_size` ranks, and one
/// more by each of the first `ahead` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Ranks in the segment.
    pub world_size: usize,
    /// Batches each rank delivered in it.
    pub batches: u64,
    /// Ranks (the first ones, fewer than `world_size`) that delivered one batch more.
    pub ahead: usize,
}

impl Segment {
    /// The batches `rank` delivered in the segment.
    pub fn batches_of(&self, rank: usize) -> u64 {
        self.batches + u64::from(rank < self.ahead)
    }
}

/// Every setting the order depends on (besides the file set, the epoch and the world size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OrderSettings {
    /// Shuffle seed.
    pub seed: u64,
    /// Shuffle files, row groups and rows.
    pub shuffle: bool,
    /// Rows in the shuffle buffer (as the loader uses it, after fitting the memory budget).
    pub buffer_rows: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Leave out a short last batch.
    pub drop_last: bool,
    /// Pad or drop the rows that do not divide evenly over the ranks.
    pub uneven: Uneven,
    /// Files whose row groups are read round-robin.
    pub interleave: usize,
    /// The ranks' nodes, where each node's ranks keep to the same files every epoch
    /// ([`crate::affinity`]); `None`: the files shuffled over all ranks.
    pub affinity: Option<Affinity>,
    /// Which groups the shuffle buffer copies out as they arrive ([`Loosen::Half`] for sampled
    /// epochs).
    pub loosen: Loosen,
}

impl OrderSettings {
    /// Table order, batches of 32, padded, no shuffling.
    pub fn plain() -> Self {
        OrderSettings {
            seed: 0,
            shuffle: false,
            buffer_rows: 32,
            batch_size: 32,
            drop_last: false,
            uneven: Uneven::Pad,
            interleave: 1,
            affinity: None,
            loosen: Loosen::Short,
        }
    }

    /// Shuffled from `seed` through a buffer of `buffer_rows` rows; files read 4 at a time.
    pub fn shuffled(seed: u64, buffer_rows: usize) -> Self {
        OrderSettings {
            seed,
            shuffle: true,
            buffer_rows,
            interleave: 4,
            ..OrderSettings::plain()
        }
    }

    /// The planner these settings make.
    pub fn planner(&self) -> Planner {
        Planner::new(self.seed, self.shuffle).with_interleave(if self.shuffle {
            self.interleave
        } else {
            1
        })
    }

    /// The epoch's global order over files of `rows_per_file` rows.
    pub fn order(&self, rows_per_file: &[u64], epoch: u64) -> EpochOrder {
        match self.affinity {
            Some(affinity) => EpochOrder::with_affinity(
                &self.planner(),
                rows_per_file,
                epoch,
                affinity,
                self.uneven,
            ),
            None => EpochOrder::new(&self.planner(), rows_per_file, epoch),
        }
    }

    /// A fresh mixer for `rank` in segment `segment` of `epoch`.
    pub fn mixer<T: Clone>(&self, epoch: u64, segment: usize, rank: usize) -> Mixer<T> {
        let stream = SeededRng::for_stream(&[epoch, segment as u64, rank as u64]).next_u64();
        Mixer::new(
            self.shuffle.then_some((self.seed, stream)),
            self.batch_size,
            if self.shuffle {
                self.buffer_rows
            } else {
                self.batch_size
            },
            self.drop_last,
        )
        .with_loosen(self.loosen)
    }

    /// Batches per rank when `rows` are dealt over `world` ranks.
    pub fn batches(&self, rows: u64, world: usize) -> u64 {
        batches_of(
            rows_per_rank(rows, world, self.uneven),
            self.batch_size,
            self.drop_last,
        )
    }
}

/// A rank's place in a segment after some batches.
#[derive(Debug, Clone)]
pub struct Rewound {
    /// The rank's span.
    pub pieces: Vec<Piece>,
    /// The rank's units, in reading order.
    pub units: Vec<Unit>,
    /// The rows delivered, as `(unit index, kept-row index)`, batch after batch.
    pub rows: Vec<(usize, u64)>,
    /// Batches drawn (fewer than asked for when the segment ended first).
    pub batches: u64,
    /// The mixer after those batches, over unit indices.
    pub mixer: Mixer<usize>,
    /// Units pushed into the mixer: the next unit to read.
    pub next_unit: usize,
}

/// Rewinds rank `rank` of `world` over the rows `left` (what the closed segments left) for
/// `batches` batches. `closed` gives the segment's number (it seeds the mixer).
#[allow(clippy::too_many_arguments)]
pub fn rewind<E>(
    settings: &OrderSettings,
    order: &EpochOrder,
    epoch: u64,
    closed: &[Segment],
    left: &Draws,
    world: usize,
    rank: usize,
    batches: u64,
    footer: impl FnMut(usize) -> Result<Vec<u64>, E>,
) -> Result<Rewound, E> {
    let planner = settings.planner();
    let pieces = deal(order, left, world, rank, settings.uneven);
    let units = units(&planner, &pieces, epoch, footer)?;
    let mut mixer = settings.mixer::<usize>(epoch, closed.len(), rank);
    let mut rows = Vec::new();
    let mut next_unit = 0;
    let mut drawn = 0;
    while drawn < batches {
        while mixer.wants() {
            match units.get(next_unit) {
                Some(u) => mixer.push(next_unit, u.drawn(), u.rows),
                None => mixer.finish(),
            }
            next_unit = (next_unit + 1).min(units.len());
        }
        match mixer.next_batch() {
            Some(batch) => rows.extend(batch),
            None => break,
        }
        drawn += 1;
    }
    Ok(Rewound {
        pieces,
        units,
        rows,
        batches: drawn,
        mixer,
        next_unit,
    })
}

/// The epoch's draws `drawn` less those delivered in the `closed` segments (pad repeats do
/// not count as delivering a row; a row drawn twice and delivered once is left once).
pub fn remaining<E>(
    settings: &OrderSettings,
    order: &EpochOrder,
    epoch: u64,
    drawn: &Draws,
    closed: &[Segment],
    mut footer: impl FnMut(usize) -> Result<Vec<u64>, E>,
) -> Result<Draws, E> {
    let mut left = drawn.clone();
    for (s, segment) in closed.iter().enumerate() {
        let mut delivered = Vec::new();
        for rank in 0..segment.world_size {
            let r = rewind(
                settings,
                order,
                epoch,
                &closed[..s],
                &left,
                segment.world_size,
                rank,
                segment.batches_of(rank),
                &mut footer,
            )?;
            for &(unit, row) in &r.rows {
                let u = &r.units[unit];
                if let (false, Some(row)) = (u.pad, u.drawn_row(row)) {
                    delivered.push(order.position(u.file, u.first_row + row));
                }
            }
        }
        left = left.without(&delivered);
    }
    Ok(left)
}

#[cfg(test)]
// A one-range Vec is what the tests mean: a piece or unit with one row range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// A table: files of row groups (some empty).
    fn table() -> impl Strategy<Value = Vec<Vec<u64>>> {
        prop::collection::vec(prop::collection::vec(0u64..7, 1..4), 1..7)
    }

    struct Case {
        groups: Vec<Vec<u64>>,
        settings: OrderSettings,
    }

    impl Case {
        fn rows_per_file(&self) -> Vec<u64> {
            self.groups.iter().map(|g| g.iter().sum()).collect()
        }
        fn footer(&self) -> impl FnMut(usize) -> Result<Vec<u64>, ()> + '_ {
            |f| Ok(self.groups[f].clone())
        }
        /// Every rank's whole segment over `left`: the global positions of its batches' rows,
        /// with whether each is a pad row.
        fn run_segment(
            &self,
            epoch: u64,
            closed: &[Segment],
            left: &Draws,
            world: usize,
        ) -> Vec<Vec<Vec<(u64, bool)>>> {
            let order = self.settings.order(&self.rows_per_file(), epoch);
            (0..world)
                .map(|rank| {
                    let r = rewind(
                        &self.settings,
                        &order,
                        epoch,
                        closed,
                        left,
                        world,
                        rank,
                        u64::MAX,
                        self.footer(),
                    )
                    .unwrap();
                    let sizes = batch_sizes(&r, &self.settings);
                    let mut rows = r.rows.iter().map(|&(u, row)| {
                        let unit = &r.units[u];
                        let p = order
                            .position(unit.file, unit.first_row + unit.drawn_row(row).unwrap());
                        (p, unit.pad)
                    });
                    sizes
                        .iter()
                        .map(|&n| rows.by_ref().take(n).collect())
                        .collect()
                })
                .collect()
        }
    }

    /// The batch sizes of a rewound segment: full batches, then the short last one.
    fn batch_sizes(r: &Rewound, s: &OrderSettings) -> Vec<usize> {
        let total = r.rows.len();
        (0..r.batches as usize)
            .map(|i| (total - i * s.batch_size).min(s.batch_size))
            .collect()
    }

    fn settings() -> impl Strategy<Value = OrderSettings> {
        (
            any::<u64>(),
            any::<bool>(),
            1usize..6,
            1usize..20,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(seed, shuffle, batch_size, buffer_rows, drop_last, pad, half)| OrderSettings {
                    seed,
                    shuffle,
                    buffer_rows,
                    batch_size,
                    drop_last,
                    uneven: if pad { Uneven::Pad } else { Uneven::Drop },
                    interleave: 2,
                    affinity: None,
                    loosen: Loosen::for_epochs(half),
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Equal batch counts on every rank; every row once (pad rows aside, at most W − 1 of
        /// them; at most W − 1 rows left out with drop, plus what `drop_last` leaves).
        #[test]
        fn equal_counts_and_every_row_once(groups in table(), settings in settings(), world in 1usize..10) {
            let case = Case { groups, settings };
            let n: u64 = case.rows_per_file().iter().sum();
            let ranks = case.run_segment(0, &[], &Draws::full(n), world);
            let counts: Vec<usize> = ranks.iter().map(Vec::len).collect();
            prop_assert!(counts.iter().all(|&c| c as u64 == settings.batches(n, world)), "{counts:?}");
            let rows: Vec<(u64, bool)> = ranks.iter().flatten().flatten().copied().collect();
            let mut real: Vec<u64> = rows.iter().filter(|r| !r.1).map(|r| r.0).collect();
            let pads = rows.len() - real.len();
            real.sort_unstable();
            let before = real.len();
            real.dedup();
            prop_assert_eq!(before, real.len(), "a row delivered twice");
            prop_assert!(pads < world, "{} pad rows", pads);
            if !settings.drop_last {
                let missing = n - real.len() as u64;
                match settings.uneven {
                    Uneven::Pad => prop_assert_eq!(missing, 0),
                    Uneven::Drop => prop_assert!(missing < world as u64),
                }
            }
        }

        /// Node affinity: every row once an epoch over all ranks, the same batches on each, and
        /// a node's rows in the next epoch come from files it read in this one but for those
        /// at the cuts (less than a file's rows at each end of its span) and the pad rows.
        #[test]
        fn node_affine_rows_stay_on_their_node(
            groups in prop::collection::vec(prop::collection::vec(0u64..7, 1..4), 8..60),
            settings in settings(),
            nodes in 1usize..5,
            ranks_per_node in 1usize..4,
            epoch in 0u64..3,
        ) {
            let world = nodes * ranks_per_node;
            let affinity = Affinity::new(nodes, world);
            let settings = OrderSettings { shuffle: true, affinity, ..settings };
            let case = Case { groups, settings };
            let rows_per_file = case.rows_per_file();
            let n: u64 = rows_per_file.iter().sum();
            let max_file = rows_per_file.iter().copied().max().unwrap_or(0);
            // Per epoch, per node: the files it read and the rows (file, count).
            let mut read: Vec<Vec<std::collections::HashMap<usize, u64>>> = Vec::new();
            for e in [epoch, epoch + 1] {
                let order = settings.order(&rows_per_file, e);
                let ranks = case.run_segment(e, &[], &Draws::full(n), world);
                let counts: Vec<usize> = ranks.iter().map(Vec::len).collect();
                prop_assert!(counts.iter().all(|&c| c as u64 == settings.batches(n, world)), "{counts:?}");
                let mut real: Vec<u64> = ranks.iter().flatten().flatten().filter(|r| !r.1).map(|r| r.0).collect();
                real.sort_unstable();
                let before = real.len();
                real.dedup();
                prop_assert_eq!(before, real.len(), "a row delivered twice");
                if !settings.drop_last && settings.uneven == Uneven::Pad {
                    prop_assert_eq!(real.len() as u64, n, "a row left out");
                }
                let mut per_node = vec![std::collections::HashMap::new(); nodes];
                for (rank, batches) in ranks.iter().enumerate() {
                    for &(p, _) in batches.iter().flatten() {
                        let file = order.pieces(&[p..p + 1], false)[0].file;
                        *per_node[rank / ranks_per_node].entry(file).or_insert(0u64) += 1;
                    }
                }
                read.push(per_node);
            }
            for (node, (before, after)) in read[0].iter().zip(&read[1]).enumerate() {
                let away: u64 = after
                    .iter()
                    .filter(|(f, _)| !before.contains_key(f))
                    .map(|(_, rows)| rows)
                    .sum();
                prop_assert!(away <= 2 * max_file + world as u64, "node {node}: {away} rows from files it did not read the epoch before (files of up to {max_file} rows)");
            }
        }

        /// Rewinding to k batches and going on from the rewound mixer gives exactly the rows of
        /// the uninterrupted run; the buffer to re-read is at most the mixer's window.
        #[test]
        fn resume_continues_exactly(groups in table(), settings in settings(), world in 1usize..6, cut in 0u64..12, epoch in 0u64..3) {
            let case = Case { groups, settings };
            let order = settings.order(&case.rows_per_file(), epoch);
            let left = Draws::full(order.total());
            let rank = world - 1;
            let full = rewind(&settings, &order, epoch, &[], &left, world, rank, u64::MAX, case.footer()).unwrap();
            let cut_at = rewind(&settings, &order, epoch, &[], &left, world, rank, cut, case.footer()).unwrap();
            let mut mixer = cut_at.mixer.clone();
            prop_assert!(mixer.live_rows().len() <= settings.buffer_rows.max(settings.batch_size).max(4) + 1);
            let mut next = cut_at.next_unit;
            let mut rest = Vec::new();
            loop {
                while mixer.wants() {
                    match cut_at.units.get(next) {
                        Some(u) => mixer.push(next, u.drawn(), u.rows),
                        None => mixer.finish(),
                    }
                    next = (next + 1).min(cut_at.units.len());
                }
                match mixer.next_batch() {
                    Some(b) => rest.extend(b),
                    None => break,
                }
            }
            let mut resumed = cut_at.rows.clone();
            resumed.extend(rest);
            prop_assert_eq!(full.rows, resumed);
        }

        /// W1 ranks for k batches (the first `ahead` of them one more), then W2 ranks for the
        /// rest of the epoch: every row once over both segments (pad and drop aside), equal
        /// counts in each.
        #[test]
        fn elastic_every_row_once(groups in table(), settings in settings(), w1 in 1usize..10, w2 in 1usize..10, cut in 0u64..6, ahead in 0usize..10) {
            let case = Case { groups, settings };
            let n: u64 = case.rows_per_file().iter().sum();
            let first = case.run_segment(1, &[], &Draws::full(n), w1);
            let k = cut.min(first[0].len() as u64);
            let ahead = if k < first[0].len() as u64 { ahead % w1 } else { 0 };
            let closed = [Segment { world_size: w1, batches: k, ahead }];
            let order = settings.order(&case.rows_per_file(), 1);
            let left = remaining(&settings, &order, 1, &Draws::full(n), &closed, case.footer()).unwrap();
            let second = case.run_segment(1, &closed, &left, w2);
            let counts: Vec<usize> = second.iter().map(Vec::len).collect();
            prop_assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
            let mut real: Vec<u64> = first
                .iter()
                .enumerate()
                .flat_map(|(rank, r)| r.iter().take(closed[0].batches_of(rank) as usize).flatten())
                .chain(second.iter().flatten().flatten())
                .filter(|r| !r.1)
                .map(|r| r.0)
                .collect();
            real.sort_unstable();
            let before = real.len();
            real.dedup();
            prop_assert_eq!(before, real.len(), "a row delivered twice");
            // Determinism: the same remaining set again.
            let again = remaining(&settings, &order, 1, &Draws::full(n), &closed, case.footer()).unwrap();
            prop_assert_eq!(&left, &again);
            if !settings.drop_last && settings.uneven == Uneven::Pad {
                prop_assert_eq!(real.len() as u64, n, "rows lost");
            }
        }
    }

    #[test]
    fn known_spans_over_three_ranks() {
        let settings = OrderSettings {
            batch_size: 2,
            ..OrderSettings::plain()
        };
        let order = settings.order(&[4, 3], 0);
        let left = Draws::full(7);
        let spans: Vec<Vec<Piece>> = (0..3)
            .map(|r| deal(&order, &left, 3, r, Uneven::Pad))
            .collect();
        assert_eq!(spans[0][0].rows, vec![0..3]);
        assert_eq!(
            (spans[1][0].file, spans[1][0].rows.clone()),
            (0, vec![3..4])
        );
        assert_eq!(
            (spans[1][1].file, spans[1][1].rows.clone()),
            (1, vec![0..2])
        );
        // Rank 2: the last row, then two pad rows from the start of the order.
        assert_eq!(spans[2].len(), 2);
        assert_eq!(
            (spans[2][1].rows.clone(), spans[2][1].pad),
            (vec![0..2], true)
        );
        let footers: HashMap<usize, Vec<u64>> = [(0, vec![2, 2]), (1, vec![3])].into();
        let r = rewind(&settings, &order, 0, &[], &left, 3, 1, 1, |f| {
            Ok::<_, ()>(footers[&f].clone())
        })
        .unwrap();
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.units.len(), 2);
    }
}
