//! An epoch of patches in order: each volume's draws `(volume, k)` (as many as its count: the
//! patches drawn of it, or its grid's), the volumes shuffled and dealt to ranks (a volume's
//! patches all on one rank), each rank's draws mixed a window of volumes at a time, every rank
//! the same batches; and where an epoch stands after segments on other world sizes (the
//! draws no rank delivered, dealt again).
//!
//! ```
//! use voxlake_plan::order::Uneven;
//! use voxlake_plan::patch::PatchOrder;
//! use voxlake_plan::resume::Segment;
//!
//! let order = PatchOrder { batch_size: 2, ..PatchOrder::new(7) };
//! let counts = [4; 5]; // 4 patches of each of 5 volumes
//! // 5 volumes over 2 ranks: 3 and 2 volumes, padded to 6 batches each.
//! let rank0 = order.draws(&counts, 0, &[], 2, 0);
//! let rank1 = order.draws(&counts, 0, &[], 2, 1);
//! assert_eq!((rank0.len(), rank1.len()), (12, 12));
//! assert_eq!(rank1.iter().filter(|d| d.pad).count(), 4);
//! // After 3 batches each on 2 ranks, 3 ranks share what is left: 20 − 12 draws.
//! let closed = [Segment { world_size: 2, batches: 3, ahead: 0 }];
//! let left: usize = (0..3).map(|r| order.draws(&counts, 0, &closed, 3, r).iter().filter(|d| !d.pad).count()).sum();
//! assert_eq!(left, 8);
//! ```

use std::collections::HashSet;

use crate::order::Uneven;
use crate::plan::SeededRng;
use crate::resume::Segment;

/// A stream name for the patch order (apart from the patches' own draws).
const ORDER: u64 = 0x0070_6f72_6465_7273;

/// What an epoch of patches is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PatchOrder {
    /// Shuffle seed.
    pub seed: u64,
    /// Shuffle the volumes and mix each window's patches (else volumes in order, each
    /// volume's patches in order).
    pub shuffle: bool,
    /// Volumes whose patches are mixed together (the shuffle buffer's reach, in volumes).
    pub window: usize,
    /// Patches a batch.
    pub batch_size: usize,
    /// Ranks short of draws repeat some of theirs, or every rank stops at the shortest.
    pub uneven: Uneven,
}

/// One draw of an epoch: patch `k` of volume `volume` (`pad`: a repeat, so every rank has
/// the same batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Draw {
    /// The volume's number.
    pub volume: u64,
    /// The patch's number among the volume's draws of the epoch.
    pub k: u64,
    /// Whether it repeats a draw of the epoch.
    pub pad: bool,
}

/// Draws not delivered yet: per volume, in the epoch's volume order, its patch numbers left.
type Left = Vec<(u64, Vec<u64>)>;

impl PatchOrder {
    /// Shuffled, windows of 8 volumes, batches of 1, padded.
    pub fn new(seed: u64) -> PatchOrder {
        PatchOrder {
            seed,
            shuffle: true,
            window: 8,
            batch_size: 1,
            uneven: Uneven::Pad,
        }
    }

    /// Rank `rank`'s draws (of `world_size`) of epoch `epoch` of volumes of `counts` draws
    /// each, after `closed` segments: a multiple of the batch size, the same number on every
    /// rank.
    pub fn draws(
        &self,
        counts: &[u64],
        epoch: u64,
        closed: &[Segment],
        world_size: usize,
        rank: usize,
    ) -> Vec<Draw> {
        let left = self.left(counts, epoch, closed);
        let mut ranks = self.deal(&left, epoch, world_size.max(1));
        match rank < ranks.len() {
            true => ranks.swap_remove(rank),
            false => Vec::new(),
        }
    }

    /// Batches each rank delivers in a segment of `world_size` ranks after `closed`.
    pub fn batches(
        &self,
        counts: &[u64],
        epoch: u64,
        closed: &[Segment],
        world_size: usize,
    ) -> u64 {
        let left = self.left(counts, epoch, closed);
        let ranks = self.deal(&left, epoch, world_size.max(1));
        ranks
            .first()
            .map_or(0, |r| (r.len() / self.batch_size.max(1)) as u64)
    }

    /// The draws no rank delivered in `closed`.
    fn left(&self, counts: &[u64], epoch: u64, closed: &[Segment]) -> Left {
        let mut order: Vec<u64> = (0..counts.len() as u64).collect();
        if self.shuffle {
            shuffle(
                &mut order,
                &mut SeededRng::for_stream(&[self.seed, epoch, ORDER]),
            );
        }
        let mut left: Left = order
            .into_iter()
            .map(|v| (v, (0..counts[v as usize]).collect()))
            .filter(|(_, ks): &(u64, Vec<u64>)| !ks.is_empty())
            .collect();
        for segment in closed {
            let ranks = self.deal(&left, epoch, segment.world_size.max(1));
            let batch = self.batch_size.max(1) as u64;
            let delivered: HashSet<(u64, u64)> = ranks
                .iter()
                .enumerate()
                .flat_map(|(r, draws)| {
                    let n = (segment.batches_of(r) * batch).min(draws.len() as u64) as usize;
                    draws[..n]
                        .iter()
                        .filter(|d| !d.pad)
                        .map(|d| (d.volume, d.k))
                })
                .collect();
            for (volume, ks) in &mut left {
                ks.retain(|k| !delivered.contains(&(*volume, *k)));
            }
            left.retain(|(_, ks)| !ks.is_empty());
        }
        left
    }

    /// Each rank's draws of `left`: volume `i` to rank `i mod world`, a rank's volumes mixed
    /// `window` at a time, then evened out to the same whole batches on every rank.
    fn deal(&self, left: &Left, epoch: u64, world: usize) -> Vec<Vec<Draw>> {
        let mut ranks: Vec<Vec<Draw>> = vec![Vec::new(); world];
        for (rank, draws) in ranks.iter_mut().enumerate() {
            let mine: Vec<&(u64, Vec<u64>)> = left.iter().skip(rank).step_by(world).collect();
            for window in mine.chunks(self.window.max(1)) {
                let start = draws.len();
                for (volume, ks) in window {
                    draws.extend(ks.iter().map(|&k| Draw {
                        volume: *volume,
                        k,
                        pad: false,
                    }));
                }
                if self.shuffle {
                    let first = window.first().map_or(0, |w| w.0);
                    let mut rng = SeededRng::for_stream(&[self.seed, epoch, ORDER, first]);
                    shuffle(&mut draws[start..], &mut rng);
                }
            }
        }
        self.even_out(ranks)
    }

    /// Every rank to the same whole batches: the shortest's (drop), or the longest's, short
    /// ranks repeating their own draws (those of all ranks, for a rank without any) (pad).
    fn even_out(&self, mut ranks: Vec<Vec<Draw>>) -> Vec<Vec<Draw>> {
        let batch = self.batch_size.max(1);
        let lens = ranks.iter().map(Vec::len);
        let target = match self.uneven {
            Uneven::Drop => lens.min().unwrap_or(0) / batch * batch,
            Uneven::Pad => lens.max().unwrap_or(0).div_ceil(batch) * batch,
        };
        let all: Vec<Draw> = ranks.iter().flatten().copied().collect();
        for (rank, draws) in ranks.iter_mut().enumerate() {
            draws.truncate(target);
            let source: Vec<Draw> = match draws.is_empty() {
                true => all
                    .iter()
                    .cycle()
                    .skip(rank)
                    .take(all.len())
                    .copied()
                    .collect(),
                false => draws.clone(),
            };
            let mut i = 0;
            while draws.len() < target && !source.is_empty() {
                draws.push(Draw {
                    pad: true,
                    ..source[i % source.len()]
                });
                i += 1;
            }
        }
        ranks
    }
}

/// Fisher–Yates with the plan's generator.
fn shuffle<T>(items: &mut [T], rng: &mut SeededRng) {
    for i in (1..items.len()).rev() {
        let j = ((u128::from(rng.next_u64()) * (i as u128 + 1)) >> 64) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn order(batch: usize, window: usize, drop: bool, shuffle: bool) -> PatchOrder {
        PatchOrder {
            seed: 11,
            shuffle,
            window,
            batch_size: batch,
            uneven: if drop { Uneven::Drop } else { Uneven::Pad },
        }
    }

    proptest! {
        /// Over any run of world sizes (each segment some batches in, the last to the end),
        /// every rank of a segment has the same whole batches, no draw is delivered twice, a
        /// rank's volumes are its own, and a padded epoch delivers every draw.
        #[test]
        fn every_draw_once_over_any_world_sizes(
            counts in prop::collection::vec(0u64..5, 0..30),
            batch in 1usize..6,
            window in 1usize..5,
            drop in any::<bool>(),
            shuffle in any::<bool>(),
            worlds in prop::collection::vec((1usize..6, 0u64..6, 0usize..6), 0..4),
            last in 1usize..6,
        ) {
            let o = order(batch, window, drop, shuffle);
            let volumes = counts.len() as u64;
            let mut closed: Vec<Segment> = Vec::new();
            let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
            let segments = worlds.iter().map(|&(w, b, a)| (w, Some((b, a)))).chain([(last, None)]);
            for (world, stop) in segments {
                let ranks: Vec<Vec<Draw>> = (0..world).map(|r| o.draws(&counts, 3, &closed, world, r)).collect();
                let batches = o.batches(&counts, 3, &closed, world);
                prop_assert!(ranks.iter().all(|r| r.len() as u64 == batches * batch as u64));
                let (b, ahead) = match stop {
                    Some((b, a)) => (b.min(batches), a.min(world - 1)),
                    None => (batches, 0),
                };
                let ahead = if b < batches { ahead } else { 0 };
                let segment = Segment { world_size: world, batches: b, ahead };
                // A volume's draws of a segment are on one rank.
                let mut owner: HashMap<u64, usize> = HashMap::new();
                for (r, draws) in ranks.iter().enumerate() {
                    for d in draws.iter().filter(|d| !d.pad) {
                        prop_assert_eq!(*owner.entry(d.volume).or_insert(r), r);
                    }
                    let upto = (segment.batches_of(r) * batch as u64) as usize;
                    for d in draws[..upto].iter().filter(|d| !d.pad) {
                        *seen.entry((d.volume, d.k)).or_default() += 1;
                    }
                }
                closed.push(segment);
            }
            prop_assert!(seen.values().all(|&c| c == 1), "a draw delivered twice");
            prop_assert!(seen.keys().all(|&(v, k)| v < volumes && k < counts[v as usize]));
            if !drop {
                prop_assert_eq!(seen.len() as u64, counts.iter().sum::<u64>(), "a padded epoch delivers every draw");
            }
        }
    }

    #[test]
    fn windows_mix_their_volumes_and_epochs_differ() {
        let o = order(4, 2, false, true);
        let draws = o.draws(&[4; 10], 0, &[], 1, 0);
        assert_eq!(draws.len(), 40);
        // The first 8 draws are the first window's 2 volumes, mixed.
        let first: HashSet<u64> = draws[..8].iter().map(|d| d.volume).collect();
        assert_eq!(first.len(), 2);
        assert!(draws[..8].windows(2).any(|w| w[0].volume != w[1].volume));
        assert_ne!(o.draws(&[4; 10], 1, &[], 1, 0), draws);
        assert_eq!(o.draws(&[4; 10], 0, &[], 1, 0), draws);
        // In order without shuffle (a grid's order), volumes of their own counts.
        let plain = order(1, 3, false, false).draws(&[2, 0, 3], 0, &[], 1, 0);
        let pairs: Vec<(u64, u64)> = plain.iter().map(|d| (d.volume, d.k)).collect();
        assert_eq!(pairs, [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn more_ranks_than_volumes_pad_from_every_rank() {
        let o = order(2, 1, false, true);
        let ranks: Vec<Vec<Draw>> = (0..4).map(|r| o.draws(&[2], 0, &[], 4, r)).collect();
        assert!(ranks.iter().all(|r| r.len() == 2));
        assert_eq!(ranks.iter().flatten().filter(|d| !d.pad).count(), 2);
        assert_eq!(order(2, 1, true, true).batches(&[2], 0, &[], 4), 0);
    }
}
