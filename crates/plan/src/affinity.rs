//! Node affinity: each node's ranks read the same files every epoch, so a node's cache holds
//! what its next epoch reads. Pure.
//!
//! Ranks sit on nodes in blocks: ranks `k·L … (k+1)·L − 1` on node `k` (`L = world / nodes`, as
//! torchrun and `srun --distribution=block` number them), and an epoch's rows are dealt to ranks
//! in contiguous spans of its order ([`crate::order`]), so node `k` reads the positions
//! `k·L·m … (k+1)·L·m` (`m` rows a rank). With the files shuffled over the whole order every
//! epoch, a node of `n` meets a new `(1 − 1/n)` of its rows each epoch, and its cache holds the
//! wrong files. With affinity the files are split once, from the seed alone, into one *home*
//! per node: a shuffled order of all files cut where the nodes' spans begin (a file goes to the
//! node that holds its middle row). Each epoch lists home 0's files, then home 1's, and so on,
//! each home shuffled anew from `(seed, epoch, node)`: every row is still read once an epoch,
//! every rank reads as many rows as without affinity, and a node reads its home's rows every
//! epoch but for those at the cuts (less than a file at each end of its span).
//!
//! What it costs: a node's ranks see only its home's rows (a fixed `1/n` of the table) in a
//! new order each epoch, as Mosaic Streaming's node-level shuffles do; the rows of a global
//! batch still come from every node (`docs/scale-out.md` measures the difference).
//!
//! ```
//! use voxlake_plan::affinity::{Affinity, file_order};
//! use voxlake_plan::plan::Planner;
//!
//! let planner = Planner::new(5, true);
//! let rows = [10u64; 8]; // 8 files of 10 rows
//! let two_nodes = Affinity::new(2, 4).unwrap(); // 4 ranks, 2 a node
//! assert_eq!(two_nodes.node_of(3), 1);
//! // 40 rows a node: the first 4 files of each epoch's order are node 0's, every epoch.
//! let first: Vec<usize> = file_order(&planner, &rows, 2, 40, 0)[..4].to_vec();
//! let mut next: Vec<usize> = file_order(&planner, &rows, 2, 40, 1)[..4].to_vec();
//! next.sort();
//! let mut sorted = first.clone();
//! sorted.sort();
//! assert_eq!(sorted, next);
//! ```

use crate::plan::{Planner, SeededRng};

/// Salts of the affinity's random streams (the planner's own use 1 and 2).
const HOMES: u64 = 3;
const HOME_ORDER: u64 = 4;

/// Ranks grouped on nodes in blocks of `world / nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Affinity {
    nodes: usize,
    world: usize,
}

impl Affinity {
    /// `world` ranks on `nodes` nodes; `None` unless `nodes` is at least 1 and divides `world`.
    pub fn new(nodes: usize, world: usize) -> Option<Affinity> {
        (nodes >= 1 && world >= nodes && world.is_multiple_of(nodes))
            .then_some(Affinity { nodes, world })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.world
    }

    /// Ranks on each node.
    pub fn ranks_per_node(&self) -> usize {
        self.world / self.nodes
    }

    /// The node rank `rank` sits on.
    pub fn node_of(&self, rank: usize) -> usize {
        rank / self.ranks_per_node()
    }
}

/// Each node's files (file indices), split from the seed alone: a shuffled order of the files
/// cut every `per_node` rows, a file going to the node that holds its middle row (the last
/// node takes what is past the last cut).
pub fn homes(
    planner: &Planner,
    rows_per_file: &[u64],
    nodes: usize,
    per_node: u64,
) -> Vec<Vec<usize>> {
    let nodes = nodes.max(1);
    let mut base: Vec<usize> = (0..rows_per_file.len()).collect();
    SeededRng::for_stream(&[planner.seed(), HOMES]).shuffle(&mut base);
    let mut homes = vec![Vec::new(); nodes];
    let mut at = 0u64;
    for f in base {
        let middle = at + rows_per_file[f] / 2;
        let node = (middle / per_node.max(1)).min(nodes as u64 - 1) as usize;
        homes[node].push(f);
        at += rows_per_file[f];
    }
    homes
}

/// The files' order in `epoch`: the [`homes`], node 0's first, each shuffled from
/// `(seed, epoch, node)`.
pub fn file_order(
    planner: &Planner,
    rows_per_file: &[u64],
    nodes: usize,
    per_node: u64,
    epoch: u64,
) -> Vec<usize> {
    let mut order = Vec::with_capacity(rows_per_file.len());
    for (node, mut files) in homes(planner, rows_per_file, nodes, per_node)
        .into_iter()
        .enumerate()
    {
        SeededRng::for_stream(&[planner.seed(), epoch, HOME_ORDER, node as u64])
            .shuffle(&mut files);
        order.extend(files);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_needs_nodes_that_divide_the_world() {
        assert!(Affinity::new(0, 4).is_none());
        assert!(Affinity::new(3, 4).is_none());
        assert!(Affinity::new(8, 4).is_none());
        let a = Affinity::new(4, 32).unwrap();
        assert_eq!((a.ranks_per_node(), a.node_of(7), a.node_of(8)), (8, 0, 1));
    }

    #[test]
    fn homes_split_every_file_once_at_the_cuts() {
        let planner = Planner::new(9, true);
        let rows: Vec<u64> = (0..50).map(|i| 1 + i % 7).collect();
        let total: u64 = rows.iter().sum();
        let homes = homes(&planner, &rows, 3, total.div_ceil(3));
        let mut all: Vec<usize> = homes.concat();
        all.sort();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        for home in &homes {
            let held: u64 = home.iter().map(|&f| rows[f]).sum();
            // About a third each: within a file of the cut at both ends.
            assert!(held.abs_diff(total / 3) <= 2 * 7, "{held} of {total}");
        }
    }
}
