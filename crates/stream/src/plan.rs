//! The pure planner: which files and row groups a shard reads in an epoch, and in which order.
//!
//! No I/O here: the inputs are the row counts the Delta log records per file (and, once a
//! footer is read, per row group); the outputs are indices. The same inputs, seed and epoch
//! give the same plan on every run and every machine.
//!
//! ```
//! use voxlake_stream::plan::{Planner, Shard};
//!
//! let rows = [217, 217, 217, 100, 217];
//! let planner = Planner::new(7, true);
//! let rank0 = planner.files(&rows, Shard::new(0, 2), 0);
//! let rank1 = planner.files(&rows, Shard::new(1, 2), 0);
//! let mut all: Vec<usize> = rank0.iter().chain(&rank1).copied().collect();
//! all.sort();
//! assert_eq!(all, vec![0, 1, 2, 3, 4]); // disjoint and covering
//! ```

/// Which share of the table one consumer reads: rank `rank` of `world_size` processes, and
/// inside that process worker `worker` of `num_workers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This process's rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// This worker inside the process.
    pub worker: usize,
    /// Number of workers per process.
    pub num_workers: usize,
}

impl Shard {
    /// Rank `rank` of `world_size`, one worker.
    ///
    /// # Panics
    /// If `rank >= world_size`.
    pub fn new(rank: usize, world_size: usize) -> Self {
        assert!(
            rank < world_size,
            "rank {rank} must be below the world size {world_size}"
        );
        Shard {
            rank,
            world_size,
            worker: 0,
            num_workers: 1,
        }
    }

    /// The same rank, worker `worker` of `num_workers`.
    ///
    /// # Panics
    /// If `worker >= num_workers`.
    pub fn with_worker(mut self, worker: usize, num_workers: usize) -> Self {
        assert!(
            worker < num_workers,
            "worker {worker} must be below {num_workers}"
        );
        self.worker = worker;
        self.num_workers = num_workers;
        self
    }
}

impl Default for Shard {
    fn default() -> Self {
        Shard::new(0, 1)
    }
}

/// Where a shard is in its stream: `position` units (row groups) of `epoch` delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cursor {
    /// The epoch.
    pub epoch: u64,
    /// Row groups of this shard's epoch plan already delivered.
    pub position: u64,
}

/// One unit of reading: row group `row_group` of file `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unit {
    /// Index into the snapshot's files.
    pub file: usize,
    /// Row group inside the file.
    pub row_group: usize,
    /// Rows in the row group.
    pub rows: u64,
}

/// A small, fast, portable generator (SplitMix64): the same numbers on every platform.
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    /// A generator for a stream identified by several numbers (seed, epoch, file, …).
    pub fn for_stream(parts: &[u64]) -> Self {
        let mut rng = SeededRng(0x5eed_5eed_5eed_5eed);
        for &p in parts {
            rng.0 ^= p;
            rng.0 = rng.next_u64();
        }
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias worth caring about for n < 2^32.
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// Salts that keep the planner's random streams apart.
const FILES: u64 = 1;
const ROW_GROUPS: u64 = 2;

/// Plans epochs: file order and sharding, row-group order, interleaving.
#[derive(Debug, Clone)]
pub struct Planner {
    seed: u64,
    shuffle: bool,
    interleave: usize,
}

impl Planner {
    /// A planner; without `shuffle` every epoch reads files and row groups in table order.
    pub fn new(seed: u64, shuffle: bool) -> Self {
        Planner {
            seed,
            shuffle,
            interleave: 4,
        }
    }

    /// Read the row groups of this many consecutive files of the plan round-robin (default 4),
    /// so that neighbouring row groups come from different files.
    pub fn with_interleave(mut self, files: usize) -> Self {
        self.interleave = files.max(1);
        self
    }

    /// Files read together by [`interleave`](Self::interleave).
    pub fn interleave_width(&self) -> usize {
        self.interleave
    }

    /// The files `shard` reads in `epoch`, in reading order. `weights[i]` is file `i`'s row
    /// count. Every file goes to exactly one (rank, worker); shares differ by at most one
    /// file's weight.
    pub fn files(&self, weights: &[u64], shard: Shard, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..weights.len()).collect();
        if self.shuffle {
            SeededRng::for_stream(&[self.seed, epoch, FILES]).shuffle(&mut order);
        }
        let ranks = assign(&order, weights, shard.world_size);
        let mine = &ranks[shard.rank];
        let workers = assign(mine, weights, shard.num_workers);
        workers[shard.worker].clone()
    }

    /// The order in which file `file`'s row groups are read in `epoch`; `rows[g]` is the row
    /// count of row group `g`. Empty row groups are left out.
    pub fn row_groups(&self, file: usize, rows: &[u64], epoch: u64) -> Vec<Unit> {
        let mut units: Vec<Unit> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| **r > 0)
            .map(|(row_group, &rows)| Unit {
                file,
                row_group,
                rows,
            })
            .collect();
        if self.shuffle {
            SeededRng::for_stream(&[self.seed, epoch, ROW_GROUPS, file as u64]).shuffle(&mut units);
        }
        units
    }

    /// Merges the row groups of consecutive files round-robin: the first of each file, then
    /// the second of each, and so on.
    pub fn interleave(&self, files: Vec<Vec<Unit>>) -> Vec<Unit> {
        let total = files.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(total);
        let mut iters: Vec<_> = files.into_iter().map(Vec::into_iter).collect();
        while out.len() < total {
            for it in &mut iters {
                if let Some(unit) = it.next() {
                    out.push(unit);
                }
            }
        }
        out
    }
}

/// Deals `order` to `parts` greedily: each item goes to the part with the least weight so far
/// (the lowest index on ties). Deterministic, and the shares differ by at most one item.
fn assign(order: &[usize], weights: &[u64], parts: usize) -> Vec<Vec<usize>> {
    let mut shares = vec![Vec::new(); parts];
    let mut load = vec![0u64; parts];
    for &item in order {
        let part = (0..parts)
            .min_by_key(|&p| (load[p], p))
            .expect("at least one part");
        // A zero weight still counts as one, so empty files spread out too.
        load[part] += weights[item].max(1);
        shares[part].push(item);
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_files(
        planner: &Planner,
        weights: &[u64],
        world: usize,
        workers: usize,
        epoch: u64,
    ) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for rank in 0..world {
            for worker in 0..workers {
                out.push(planner.files(
                    weights,
                    Shard::new(rank, world).with_worker(worker, workers),
                    epoch,
                ));
            }
        }
        out
    }

    #[test]
    fn shards_are_disjoint_covering_and_balanced() {
        let weights: Vec<u64> = (0..103).map(|i| 200 + (i * 7 % 30)).collect();
        for shuffle in [false, true] {
            let planner = Planner::new(42, shuffle);
            for (world, workers) in [(1, 1), (3, 1), (4, 2), (8, 3)] {
                let shares = all_files(&planner, &weights, world, workers, 5);
                let mut seen: Vec<usize> = shares.iter().flatten().copied().collect();
                seen.sort();
                assert_eq!(seen, (0..103).collect::<Vec<_>>(), "{world}x{workers}");
                let rank_rows: Vec<u64> = shares
                    .chunks(workers)
                    .map(|r| r.iter().flatten().map(|&f| weights[f]).sum())
                    .collect();
                let (min, max) = (
                    rank_rows.iter().min().unwrap(),
                    rank_rows.iter().max().unwrap(),
                );
                assert!(max - min <= 229, "ranks unbalanced: {rank_rows:?}");
            }
        }
    }

    #[test]
    fn same_seed_same_plan_other_epoch_other_plan() {
        let weights = vec![217u64; 50];
        let a = Planner::new(1, true);
        let shard = Shard::new(1, 3);
        assert_eq!(
            a.files(&weights, shard, 0),
            Planner::new(1, true).files(&weights, shard, 0)
        );
        assert_ne!(a.files(&weights, shard, 0), a.files(&weights, shard, 1));
        assert_ne!(
            a.files(&weights, shard, 0),
            Planner::new(2, true).files(&weights, shard, 0)
        );
        let rg = [32u64, 32, 32, 32, 32, 32, 25];
        assert_eq!(a.row_groups(3, &rg, 0), a.row_groups(3, &rg, 0));
        assert_ne!(a.row_groups(3, &rg, 0), a.row_groups(3, &rg, 1));
        // Without shuffle, table order every epoch.
        let plain = Planner::new(1, false);
        assert_eq!(
            plain.files(&weights, Shard::new(0, 1), 7),
            (0..50).collect::<Vec<_>>()
        );
        let groups: Vec<usize> = plain
            .row_groups(0, &rg, 9)
            .iter()
            .map(|u| u.row_group)
            .collect();
        assert_eq!(groups, (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn known_values_pin_the_generator() {
        // The plan must not change across platforms or releases: pin a few outputs.
        let mut rng = SeededRng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        let planner = Planner::new(42, true);
        assert_eq!(
            planner.files(&[1; 8], Shard::new(0, 1), 0),
            vec![4, 3, 2, 7, 1, 5, 6, 0]
        );
        let rows = [217, 217, 217, 100, 217];
        assert_eq!(planner.files(&rows, Shard::new(1, 2), 3), vec![2, 4]);
    }

    #[test]
    fn row_groups_skip_empty_and_interleave_round_robin() {
        let planner = Planner::new(0, false);
        let a = planner.row_groups(0, &[2, 0, 2], 0);
        assert_eq!(
            a.iter().map(|u| u.row_group).collect::<Vec<_>>(),
            vec![0, 2]
        );
        let b = planner.row_groups(1, &[2], 0);
        let c = planner.row_groups(2, &[2, 2, 2], 0);
        let merged = planner.interleave(vec![a, b, c]);
        let order: Vec<(usize, usize)> = merged.iter().map(|u| (u.file, u.row_group)).collect();
        assert_eq!(order, vec![(0, 0), (1, 0), (2, 0), (0, 2), (2, 1), (2, 2)]);
    }

    #[test]
    fn shuffled_order_is_well_mixed() {
        // Spearman correlation between plan position and file index stays near 0.
        let n = 1000;
        let planner = Planner::new(3, true);
        let order = planner.files(&vec![1; n], Shard::new(0, 1), 0);
        let mean = (n as f64 - 1.0) / 2.0;
        let (mut cov, mut var) = (0.0, 0.0);
        for (pos, &file) in order.iter().enumerate() {
            cov += (pos as f64 - mean) * (file as f64 - mean);
            var += (pos as f64 - mean).powi(2);
        }
        let rho = cov / var;
        assert!(rho.abs() < 0.1, "rank correlation {rho}");
        let fixed = order.iter().enumerate().filter(|(p, f)| p == *f).count();
        assert!(fixed < 10, "{fixed} files kept their place");
    }
}
