//! The epoch's order: which rows each rank reads, and in which row groups. Pure: no I/O.
//!
//! An epoch's rows have one global order: the files in the planner's order for the epoch
//! (shuffled from `(seed, epoch)`, or table order), each file's rows in file order. The rows
//! still to deliver (all of them when an epoch starts) are dealt to ranks in contiguous spans of
//! that order, the same number of rows to every rank:
//!
//! - [`Uneven::Pad`]: `⌈R/W⌉` rows each; the spans past the last row wrap onto the epoch's first
//!   rows (at most `W − 1` repeats);
//! - [`Uneven::Drop`]: `⌊R/W⌋` rows each; the last `R mod W` rows of the order are left out
//!   (other rows every epoch when shuffling).
//!
//! A span is a list of [`Piece`]s (a file and row ranges in it). Once a file's footer is known,
//! a piece becomes [`Unit`]s: the row groups it touches, in the planner's shuffled order, each
//! with the rows this rank keeps. A row group at a span's edge is read by both ranks, each
//! keeping its own rows; the row group stays the unit of I/O.
//!
//! ```
//! use voxlake_plan::draws::Draws;
//! use voxlake_plan::order::{deal, EpochOrder, Uneven};
//! use voxlake_plan::plan::Planner;
//!
//! let rows_per_file = [10, 3, 7]; // 20 rows
//! let order = EpochOrder::new(&Planner::new(1, true), &rows_per_file, 0);
//! let all = Draws::full(order.total());
//! let spans: Vec<_> = (0..3).map(|r| deal(&order, &all, 3, r, Uneven::Pad)).collect();
//! // Every rank gets ⌈20/3⌉ = 7 rows; one row is repeated.
//! assert!(spans.iter().all(|s| s.iter().map(|p| p.len()).sum::<u64>() == 7));
//! let spans: Vec<_> = (0..3).map(|r| deal(&order, &all, 3, r, Uneven::Drop)).collect();
//! assert!(spans.iter().all(|s| s.iter().map(|p| p.len()).sum::<u64>() == 6));
//! ```

use std::ops::Range;

use crate::affinity::{self, Affinity};
use crate::draws::{Draws, Runs};
use crate::plan::Planner;

/// What to do with the rows that do not divide evenly over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Uneven {
    /// Every rank gets `⌈R/W⌉` rows; the shortfall repeats rows of the same epoch.
    #[default]
    Pad,
    /// Every rank gets `⌊R/W⌋` rows; at most `W − 1` rows are left out of the epoch.
    Drop,
}

impl Uneven {
    /// The policy's name: `pad` or `drop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Uneven::Pad => "pad",
            Uneven::Drop => "drop",
        }
    }
}

impl std::str::FromStr for Uneven {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pad" => Ok(Uneven::Pad),
            "drop" => Ok(Uneven::Drop),
            other => Err(format!("unknown policy '{other}' (pad or drop)")),
        }
    }
}

/// Rows each rank gets when `rows` are dealt over `world` ranks.
pub fn rows_per_rank(rows: u64, world: usize, uneven: Uneven) -> u64 {
    let world = world.max(1) as u64;
    match uneven {
        Uneven::Pad => rows.div_ceil(world),
        Uneven::Drop => rows / world,
    }
}

/// Batches of `batch_size` that `rows` make (the short last one kept unless `drop_last`).
pub fn batches_of(rows: u64, batch_size: usize, drop_last: bool) -> u64 {
    let b = batch_size.max(1) as u64;
    if drop_last {
        rows / b
    } else {
        rows.div_ceil(b)
    }
}

/// The epoch's global row order: the files in plan order, each file's rows in file order.
/// Position `p` in `0..total()` names one row.
#[derive(Debug, Clone)]
pub struct EpochOrder {
    /// Files in plan order.
    files: Vec<usize>,
    /// `starts[i]`: global position of the first row of `files[i]`; one more entry at the end.
    starts: Vec<u64>,
    /// `slot[file]`: the file's index in `files`.
    slot: Vec<usize>,
}

impl EpochOrder {
    /// The order of `epoch`: `rows_per_file[f]` is file `f`'s row count (from the log).
    pub fn new(planner: &Planner, rows_per_file: &[u64], epoch: u64) -> Self {
        Self::of_files(
            planner.file_order(rows_per_file.len(), epoch),
            rows_per_file,
        )
    }

    /// The order of `epoch` with each node's ranks kept on the same files every epoch
    /// ([`affinity`]): the nodes' homes cut where [`deal`] starts each node's span of a whole
    /// epoch under `uneven`. [`new`](Self::new)'s order when not shuffling or on one node.
    pub fn with_affinity(
        planner: &Planner,
        rows_per_file: &[u64],
        epoch: u64,
        affinity: Affinity,
        uneven: Uneven,
    ) -> Self {
        if !planner.shuffles() || affinity.nodes() <= 1 {
            return Self::new(planner, rows_per_file, epoch);
        }
        let total = rows_per_file.iter().sum();
        let per_node = rows_per_rank(total, affinity.world(), uneven)
            .saturating_mul(affinity.ranks_per_node() as u64);
        let files = affinity::file_order(planner, rows_per_file, affinity.nodes(), per_node, epoch);
        Self::of_files(files, rows_per_file)
    }

    /// The order of `files` (a permutation of the file indices).
    fn of_files(files: Vec<usize>, rows_per_file: &[u64]) -> Self {
        let mut starts = Vec::with_capacity(files.len() + 1);
        let mut at = 0u64;
        let mut slot = vec![0; files.len()];
        for (i, &f) in files.iter().enumerate() {
            starts.push(at);
            at += rows_per_file[f];
            slot[f] = i;
        }
        starts.push(at);
        EpochOrder {
            files,
            starts,
            slot,
        }
    }

    /// Rows in the epoch.
    pub fn total(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    /// The global position of row `row` of file `file`.
    pub fn position(&self, file: usize, row: u64) -> u64 {
        self.starts[self.slot[file]] + row
    }

    /// The pieces that hold the global positions `ranges` (in order; a position drawn twice
    /// comes in two ranges): split at file edges, ranges of one file next to each other merged
    /// into one piece.
    pub fn pieces(&self, ranges: &[Range<u64>], pad: bool) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for r in ranges {
            let mut at = r.start;
            while at < r.end {
                // The file holding `at`: the last start <= at (empty files are skipped).
                let i = self.starts.partition_point(|&s| s <= at) - 1;
                let file_end = self.starts[i + 1];
                let end = r.end.min(file_end);
                let file = self.files[i];
                let rows = (at - self.starts[i])..(end - self.starts[i]);
                match out.last_mut() {
                    Some(last) if last.file == file && last.pad == pad => {
                        match last.rows.last_mut() {
                            Some(prev) if prev.end == rows.start => prev.end = rows.end,
                            _ => last.rows.push(rows),
                        }
                    }
                    _ => out.push(Piece {
                        file,
                        rows: vec![rows],
                        pad,
                    }),
                }
                at = end;
            }
        }
        out
    }
}

/// Rows of one file that a rank reads, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Index of the file in the snapshot.
    pub file: usize,
    /// Row ranges in the file, sorted by start; a row drawn `k` times is in `k` of them.
    pub rows: Vec<Range<u64>>,
    /// Whether these rows repeat rows of the epoch to even out the ranks ([`Uneven::Pad`]).
    pub pad: bool,
}

impl Piece {
    /// Rows in the piece.
    pub fn len(&self) -> u64 {
        self.rows.iter().map(|r| r.end - r.start).sum()
    }

    /// Whether the piece has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Deals `remaining` (draws of `order`'s positions) over `world` ranks and returns rank
/// `rank`'s span as pieces: its real rows first, then its pad rows. Every rank gets
/// [`rows_per_rank`]`(remaining.len(), world, uneven)` rows: see [`share`].
pub fn deal(
    order: &EpochOrder,
    remaining: &Draws,
    world: usize,
    rank: usize,
    uneven: Uneven,
) -> Vec<Piece> {
    let (real, pad) = share(remaining, world, rank, uneven);
    let mut pieces = order.pieces(&real, false);
    pieces.extend(order.pieces(&pad, true));
    pieces
}

/// Rank `rank`'s share when `draws` are dealt over `world` ranks: its real draws (ranges
/// of positions, ascending, a position drawn `k` times in `k` ranges) and its pad draws
/// (repeats of draws of others, [`Uneven::Pad`]). Every rank gets
/// [`rows_per_rank`]`(len, world, uneven)` draws.
///
/// One stratum is dealt in contiguous spans of its sequence (`⌈N/W⌉` each; the last
/// spans' shortfall padded from the start). Several strata are each cut into contiguous
/// spans so that every rank gets every stratum's share within one draw, and `⌊N/W⌋` or
/// `⌈N/W⌉` draws in all; then a rank short of `⌈N/W⌉` pads one draw (`Pad`) or a rank over
/// `⌊N/W⌋` leaves out its last (`Drop`).
pub fn share(
    draws: &Draws,
    world: usize,
    rank: usize,
    uneven: Uneven,
) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    match draws.strata() {
        [] => (Vec::new(), Vec::new()),
        [one] => contiguous(one, world, rank, uneven),
        _ => stratified(draws, world, rank, uneven),
    }
}

fn stratified(
    draws: &Draws,
    world: usize,
    rank: usize,
    uneven: Uneven,
) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    let w = world.max(1) as u64;
    let r = rank as u64;
    let n = draws.len();
    let extra = n % w;
    // Stratum s covers global draw indices [o, o + len): its index i goes to rank
    // (o + i) mod W, then each rank's indices are made one contiguous span.
    let mut spans: Vec<(usize, u64, u64)> = Vec::new();
    let mut offset = 0u64;
    for (s, stratum) in draws.strata().iter().enumerate() {
        let len = stratum.len;
        let count = |q: u64| len / w + u64::from((q + w - offset % w) % w < len % w);
        let start: u64 = (0..r).map(count).sum();
        spans.push((s, start, start + count(r)));
        offset += len;
    }
    if uneven == Uneven::Drop && extra > 0 && r < extra {
        // One over ⌊N/W⌋: the last stratum with a draw here gives its last back.
        if let Some(span) = spans.iter_mut().rev().find(|(_, a, b)| b > a) {
            span.2 -= 1;
        }
    }
    let mut real: Vec<Range<u64>> = spans
        .iter()
        .flat_map(|&(s, a, b)| draws.strata()[s].slice(a, b))
        .collect();
    real.sort_by_key(|r| r.start);
    let mut pad = Vec::new();
    if uneven == Uneven::Pad && extra > 0 && r >= extra {
        // The (r − extra)-th draw of the strata in turn repeats (n < W: round again).
        let mut k = (r - extra) % n;
        for stratum in draws.strata() {
            if k < stratum.len {
                pad = stratum.slice(k, k + 1);
                break;
            }
            k -= stratum.len;
        }
    }
    debug_assert_eq!(
        real.iter()
            .chain(&pad)
            .map(|r| r.end - r.start)
            .sum::<u64>(),
        rows_per_rank(n, world, uneven)
    );
    (real, pad)
}

/// One stratum's deal: contiguous spans of `⌈N/W⌉` (`Pad`: past the end wrapping onto the
/// start) or `⌊N/W⌋` (`Drop`).
fn contiguous(
    runs: &Runs,
    world: usize,
    rank: usize,
    uneven: Uneven,
) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    let n = runs.len;
    let m = rows_per_rank(n, world, uneven);
    let (lo, hi) = (rank as u64 * m, (rank as u64 + 1) * m);
    let real = runs.slice(lo.min(n), hi.min(n));
    let mut pad = Vec::new();
    if hi > n && n > 0 {
        // Pad: indices past the end wrap onto the start of the order.
        let mut at = (lo.max(n) - n) % n;
        let mut left = hi - lo.max(n);
        while left > 0 {
            let take = left.min(n - at);
            pad.extend(runs.slice(at, at + take));
            left -= take;
            at = 0;
        }
    }
    (real, pad)
}

/// One unit of reading: a row group of a file and the rows of it that the rank draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Index of the file in the snapshot.
    pub file: usize,
    /// The row group in the file.
    pub row_group: usize,
    /// Rows in the row group.
    pub rows: u64,
    /// The row group's first row in the file.
    pub first_row: u64,
    /// The rows drawn, as ranges of row indices inside the row group, sorted by start; a row
    /// drawn `k` times is in `k` of them.
    pub draws: Vec<Range<u64>>,
    /// Whether the rows drawn are pad rows (repeats).
    pub pad: bool,
}

impl Unit {
    /// Rows drawn (a row drawn `k` times counted `k` times).
    pub fn drawn(&self) -> u64 {
        self.draws.iter().map(|r| r.end - r.start).sum()
    }

    /// The row index inside the row group of the `i`-th row drawn (`None` past the last).
    pub fn drawn_row(&self, mut i: u64) -> Option<u64> {
        for r in &self.draws {
            let n = r.end - r.start;
            if i < n {
                return Some(r.start + i);
            }
            i -= n;
        }
        None
    }
}

/// The units of `piece` given its file's row counts per row group (from the footer), in the
/// planner's row-group order for `epoch`. Row groups the piece does not touch are left out.
pub fn units_of(planner: &Planner, piece: &Piece, row_group_rows: &[u64], epoch: u64) -> Vec<Unit> {
    let mut first = Vec::with_capacity(row_group_rows.len());
    let mut at = 0;
    for &r in row_group_rows {
        first.push(at);
        at += r;
    }
    planner
        .row_groups(piece.file, row_group_rows, epoch)
        .into_iter()
        .filter_map(|g| {
            let start = first[g];
            let end = start + row_group_rows[g];
            let draws: Vec<Range<u64>> = piece
                .rows
                .iter()
                .filter(|r| r.start < end && r.end > start)
                .map(|r| r.start.max(start) - start..r.end.min(end) - start)
                .collect();
            (!draws.is_empty()).then(|| Unit {
                file: piece.file,
                row_group: g,
                rows: row_group_rows[g],
                first_row: start,
                draws,
                pad: piece.pad,
            })
        })
        .collect()
}

/// All units of a span, in reading order: windows of the planner's interleave width, each
/// window's units interleaved. `footer(file)` gives a file's row-group row counts.
pub fn units<E>(
    planner: &Planner,
    pieces: &[Piece],
    epoch: u64,
    mut footer: impl FnMut(usize) -> Result<Vec<u64>, E>,
) -> Result<Vec<Unit>, E> {
    let mut out = Vec::new();
    for window in pieces.chunks(planner.interleave_width()) {
        let lists = window
            .iter()
            .map(|p| Ok(units_of(planner, p, &footer(p.file)?, epoch)))
            .collect::<Result<Vec<_>, E>>()?;
        out.extend(planner.interleave(lists));
    }
    Ok(out)
}

#[cfg(test)]
// A one-range Vec is what the tests mean: a piece or unit with one row range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn total(pieces: &[Piece]) -> u64 {
        pieces.iter().map(Piece::len).sum()
    }

    #[test]
    fn pieces_split_at_files_and_merge_within_them() {
        let order = EpochOrder::new(&Planner::new(0, false), &[3, 0, 4], 0);
        assert_eq!(order.total(), 7);
        let p = order.pieces(&[0..2, 2..5], false);
        assert_eq!(
            p,
            vec![
                Piece {
                    file: 0,
                    rows: vec![0..3],
                    pad: false
                },
                Piece {
                    file: 2,
                    rows: vec![0..2],
                    pad: false
                }
            ]
        );
        assert_eq!(order.position(2, 1), 4);
        let gaps = order.pieces(&[0..1, 2..3], false);
        assert_eq!(gaps[0].rows, vec![0..1, 2..3]);
    }

    #[test]
    fn fewer_rows_than_ranks_pad_and_drop() {
        let order = EpochOrder::new(&Planner::new(0, false), &[1], 0);
        let all = Draws::full(1);
        for rank in 0..4 {
            let pad = deal(&order, &all, 4, rank, Uneven::Pad);
            assert_eq!(total(&pad), 1);
            assert_eq!(pad[0].pad, rank > 0);
            assert!(deal(&order, &all, 4, rank, Uneven::Drop).is_empty());
        }
    }

    #[test]
    fn units_draw_only_the_piece_rows() {
        let planner = Planner::new(0, false);
        let piece = Piece {
            file: 0,
            rows: vec![3..9],
            pad: false,
        };
        let u = units_of(&planner, &piece, &[4, 4, 4], 0);
        assert_eq!(u.len(), 3);
        assert_eq!((u[0].row_group, u[0].draws.clone()), (0, vec![3..4]));
        assert_eq!((u[1].row_group, u[1].draws.clone()), (1, vec![0..4]));
        assert_eq!((u[2].row_group, u[2].draws.clone()), (2, vec![0..1]));
        assert_eq!(u[1].first_row, 4);
        assert_eq!(u[1].drawn_row(2), Some(2));
        assert_eq!(u[1].drawn_row(4), None);
        assert_eq!(u.iter().map(Unit::drawn).sum::<u64>(), 6);
    }

    use proptest::prelude::*;

    proptest! {
        /// Over any strata and world: every rank the same count, every draw dealt once (pad
        /// aside), each stratum's share within one draw of N_s/W on every rank.
        #[test]
        fn strata_are_shared_evenly(
            strata in prop::collection::vec(prop::collection::vec(0u64..40, 0..30), 1..5),
            world in 1usize..9,
            pad in any::<bool>(),
        ) {
            // Keep strata disjoint: stratum s holds positions ≡ s (mod 5).
            let strata: Vec<Vec<u64>> = strata.iter().enumerate()
                .map(|(s, ps)| ps.iter().map(|p| p * 5 + s as u64).collect()).collect();
            let draws = Draws::from_strata(strata.clone());
            let n = draws.len();
            let uneven = if pad { Uneven::Pad } else { Uneven::Drop };
            let mut all = Vec::new();
            for rank in 0..world {
                let (real, padded) = share(&draws, world, rank, uneven);
                let real: Vec<u64> = real.iter().flat_map(|r| r.clone()).collect();
                prop_assert_eq!(real.len() as u64 + padded.iter().map(|r| r.end - r.start).sum::<u64>(), rows_per_rank(n, world, uneven));
                prop_assert!(real.windows(2).all(|w| w[0] <= w[1]));
                if strata.len() > 1 {
                    for (s, stratum) in strata.iter().enumerate() {
                        let here = real.iter().filter(|p| **p % 5 == s as u64).count() as f64;
                        let fair = stratum.len() as f64 / world as f64;
                        prop_assert!((here - fair).abs() <= 2.0, "stratum {s}: {here} against {fair}");
                    }
                }
                all.extend(real);
            }
            all.sort_unstable();
            let mut want: Vec<u64> = strata.concat();
            want.sort_unstable();
            if pad {
                prop_assert_eq!(all, want);
            } else {
                prop_assert!(want.len() - all.len() < world);
            }
        }
    }
}
