//! The shuffle buffer as a pure state machine: which rows make each batch. No I/O, no data.
//!
//! The buffer holds whole row groups (the loader keeps them zero-copy), and a row group's
//! memory is freed only when its last row leaves, so it is bounded in row groups: a new group
//! comes in when one is used up, and each row of a batch is drawn uniformly from all the rows
//! left. Shuffling starts from a few groups and grows by one per batch up to the full buffer,
//! so the first batch does not wait for the whole buffer. Unshuffled, rows leave in the order
//! they came.
//!
//! The mixer is generic over what a group is: the loader pushes decoded row groups, a replay
//! pushes unit numbers. Given the same pushes, both draw the same rows: this is what lets a
//! resumed loader rebuild its buffer without reading the epoch again.
//!
//! ```
//! use voxlake_stream::mixer::Mixer;
//!
//! let mut mixer = Mixer::new(Some((7, 0)), 4, 8, false);
//! let mut next_group = 0;
//! let mut rows = Vec::new();
//! loop {
//!     while mixer.wants() {
//!         if next_group < 5 {
//!             mixer.push(next_group, 3, 3); // five groups of three rows
//!             next_group += 1;
//!         } else {
//!             mixer.finish();
//!         }
//!     }
//!     match mixer.next_batch() {
//!         Some(batch) => rows.extend(batch),
//!         None => break,
//!     }
//! }
//! rows.sort();
//! assert_eq!(rows.len(), 15); // every row once
//! assert_eq!(rows[0], (0, 0));
//! ```

use std::collections::{HashMap, VecDeque};

use crate::plan::SeededRng;

/// Row groups in the shuffle buffer before the first batch; one more per batch after it.
pub const WARM_UP_GROUPS: usize = 4;

/// A salt keeping the row shuffle apart from the planner's streams.
const ROWS: u64 = 3;

/// The shuffle buffer's state: the rows buffered (as `(group, row)`), the rows each group has
/// left, the generator.
#[derive(Debug, Clone)]
pub struct Mixer<T> {
    rng: Option<SeededRng>,
    batch_size: usize,
    buffer_rows: usize,
    drop_last: bool,
    /// Groups that may be buffered at once (`None` until the first group sets it).
    max_groups: Option<usize>,
    full_groups: usize,
    buffer: VecDeque<(u64, u64)>,
    /// Rows left per buffered group, by arrival number.
    left: HashMap<u64, (T, u64)>,
    arrived: u64,
    finished: bool,
}

impl<T: Clone> Mixer<T> {
    /// A mixer for batches of `batch_size` rows. `shuffle`: `Some((seed, stream))` draws rows
    /// at random from a buffer of about `buffer_rows` rows (`stream` keeps ranks and
    /// epochs apart: the caller derives it from them); `None` keeps arrival order.
    /// `drop_last` leaves out a short last batch.
    pub fn new(
        shuffle: Option<(u64, u64)>,
        batch_size: usize,
        buffer_rows: usize,
        drop_last: bool,
    ) -> Self {
        let batch_size = batch_size.max(1);
        Mixer {
            rng: shuffle.map(|(seed, stream)| SeededRng::for_stream(&[seed, stream, ROWS])),
            batch_size,
            buffer_rows: buffer_rows.max(batch_size),
            drop_last,
            max_groups: if shuffle.is_some() { None } else { Some(1) },
            full_groups: 1,
            buffer: VecDeque::new(),
            left: HashMap::new(),
            arrived: 0,
            finished: false,
        }
    }

    /// Whether the next batch needs another group first ([`push`](Self::push) one, or
    /// [`finish`](Self::finish) when there are none left).
    pub fn wants(&self) -> bool {
        !self.finished
            && (self.max_groups.is_none_or(|m| self.left.len() < m)
                || self.buffer.len() < self.batch_size)
    }

    /// Adds a group with `kept` rows to draw (indices `0..kept`) that holds `physical` rows in
    /// memory. Groups with no rows to draw are ignored.
    pub fn push(&mut self, group: T, kept: u64, physical: u64) {
        if kept == 0 {
            return;
        }
        if self.max_groups.is_none() {
            // The buffer's size in groups, from the first group's size in memory.
            self.full_groups = self.buffer_rows.div_ceil(physical.max(1) as usize).max(1);
            self.max_groups = Some(self.full_groups.min(WARM_UP_GROUPS));
        }
        let id = self.arrived;
        self.arrived += 1;
        self.left.insert(id, (group, kept));
        self.buffer.extend((0..kept).map(|row| (id, row)));
    }

    /// There are no more groups in this epoch.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Whether the epoch is over: no batch is left to draw.
    pub fn is_done(&self) -> bool {
        self.finished
            && (self.buffer.is_empty() || (self.drop_last && self.buffer.len() < self.batch_size))
    }

    /// The next batch as `(group, row)` pairs, or `None` when the epoch is over. Call it when
    /// [`wants`](Self::wants) is false: before that, the batch would not be the one a run
    /// with the same pushes draws.
    pub fn next_batch(&mut self) -> Option<Vec<(T, u64)>> {
        if self.is_done() {
            return None;
        }
        let take = self.batch_size.min(self.buffer.len());
        let mut rows = Vec::with_capacity(take);
        for _ in 0..take {
            let drawn = match &mut self.rng {
                Some(rng) => {
                    let i = rng.below(self.buffer.len());
                    self.buffer.swap_remove_back(i)
                }
                None => self.buffer.pop_front(),
            };
            let Some((id, row)) = drawn else { break };
            let group = match self.left.get_mut(&id) {
                Some((group, left)) => {
                    *left -= 1;
                    let group = group.clone();
                    if *left == 0 {
                        self.left.remove(&id);
                    }
                    group
                }
                None => continue,
            };
            rows.push((group, row));
        }
        if self.rng.is_some() {
            self.max_groups = self.max_groups.map(|m| (m + 1).min(self.full_groups));
        }
        Some(rows)
    }

    /// The groups still buffered, in arrival order.
    pub fn live_groups(&self) -> Vec<&T> {
        let mut ids: Vec<&u64> = self.left.keys().collect();
        ids.sort();
        ids.into_iter().map(|id| &self.left[id].0).collect()
    }

    /// The same state over other group values (a replay's unit numbers → decoded row groups).
    pub fn try_map<U, E>(self, mut f: impl FnMut(T) -> Result<U, E>) -> Result<Mixer<U>, E> {
        let mut left = HashMap::with_capacity(self.left.len());
        for (id, (group, n)) in self.left {
            left.insert(id, (f(group)?, n));
        }
        Ok(Mixer {
            rng: self.rng,
            batch_size: self.batch_size,
            buffer_rows: self.buffer_rows,
            drop_last: self.drop_last,
            max_groups: self.max_groups,
            full_groups: self.full_groups,
            buffer: self.buffer,
            left,
            arrived: self.arrived,
            finished: self.finished,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a mixer over groups of the given sizes; returns the batches.
    fn run(shuffle: bool, sizes: &[u64], batch: usize, drop_last: bool) -> Vec<Vec<(usize, u64)>> {
        let mut m = Mixer::new(shuffle.then_some((1, 2)), batch, 16, drop_last);
        let mut next = 0;
        let mut out = Vec::new();
        loop {
            while m.wants() {
                match sizes.get(next) {
                    Some(&n) => m.push(next, n, n),
                    None => m.finish(),
                }
                next += 1;
            }
            match m.next_batch() {
                Some(b) => out.push(b),
                None => return out,
            }
        }
    }

    #[test]
    fn unshuffled_keeps_arrival_order() {
        let b = run(false, &[2, 0, 3], 2, false);
        assert_eq!(
            b,
            vec![vec![(0, 0), (0, 1)], vec![(2, 0), (2, 1)], vec![(2, 2)]]
        );
        assert_eq!(run(false, &[2, 3], 2, true).len(), 2);
    }

    #[test]
    fn shuffled_draws_every_row_once_in_another_order() {
        let sizes = [4u64; 30];
        let batches = run(true, &sizes, 5, false);
        let mut all: Vec<_> = batches.concat();
        assert_ne!(
            all[..8],
            (0..8).map(|i| (i / 4, (i % 4) as u64)).collect::<Vec<_>>()
        );
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 120);
        assert_eq!(batches.len(), 24);
    }

    #[test]
    fn a_mapped_mixer_draws_the_same_rows() {
        let mut a = Mixer::new(Some((3, 4)), 3, 9, false);
        for g in 0..4u64 {
            a.push(g, 3, 3);
        }
        a.finish();
        let first = a.next_batch().unwrap();
        let mut b = a.clone().try_map(|g| Ok::<_, ()>(g * 10)).unwrap();
        let rest_a: Vec<_> = std::iter::from_fn(|| a.next_batch()).flatten().collect();
        let rest_b: Vec<_> = std::iter::from_fn(|| b.next_batch()).flatten().collect();
        assert_eq!(
            rest_a.iter().map(|(g, r)| (g * 10, *r)).collect::<Vec<_>>(),
            rest_b
        );
        assert_eq!(first.len() + rest_a.len(), 12);
    }
}
