//! The shuffle buffer as a pure state machine: which rows make each batch. No I/O, no data.
//!
//! The buffer holds row groups, and its memory is counted in *row-equivalents*: a whole group
//! (kept zero-copy by the loader) counts its physical rows until its last row leaves; a
//! *loose* group, whose rows still to draw the caller copied out of their row group, counts
//! the rows it was given until it is loosened again or its last row leaves. The buffer asks
//! for another group while it holds fewer row-equivalents than its window, or fewer rows than
//! a batch. Each row of a batch is drawn uniformly from all the rows left. Shuffling starts
//! from a window of a few groups that grows by one group per batch up to the full buffer, so
//! the first batch does not wait for the whole buffer. Unshuffled, rows leave in the order
//! they came.
//!
//! Two kinds of groups become loose (the mixer lists them; [`Mixer::loosen`] hands them to
//! the caller to copy): a group pushed with fewer rows to draw than it holds (a piece at the
//! edge of a rank's span; in sampled epochs, one with at most half its rows to draw:
//! [`Loosen`]), and, when shuffling, every group that holds more than its rows
//! still to draw once the buffer holds its window but less than a batch. Uniform draws leave
//! the last rows of many groups behind when the buffer is close to a batch; loosening them is
//! what bounds the memory: whenever the mixer asks for a group it holds fewer than
//! `max(buffer, batch)` row-equivalents shuffled, and fewer than `batch + rows − 1` unshuffled
//! ([`Mixer::held_rows`]). Loosening does not change which rows are drawn.
//!
//! The mixer is generic over what a group is: the loader pushes decoded row groups, a rewind
//! pushes unit numbers. Given the same pushes, both draw the same rows: this is what lets a
//! resumed loader rebuild its buffer without reading the epoch again.
//!
//! ```
//! use voxlake_plan::mixer::Mixer;
//!
//! let mut mixer = Mixer::new(Some((7, 0)), 4, 8, false);
//! let mut next_group = 0;
//! let mut rows = Vec::new();
//! loop {
//!     while mixer.wants() {
//!         assert!(mixer.held_rows() < 8);
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
//!     // Straggling groups: keep only their rows still to draw (here, the group number).
//!     mixer.loosen(|group, _rows_left| Ok::<_, ()>(group)).unwrap();
//! }
//! rows.sort();
//! assert_eq!(rows.len(), 15); // every row once
//! assert_eq!(rows[0], (0, 0));
//! ```

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::plan::SeededRng;

/// Row groups in the shuffle buffer before the first batch; one more per batch after it.
pub const WARM_UP_GROUPS: u64 = 4;

/// A salt keeping the row shuffle apart from the planner's streams.
const ROWS: u64 = 3;

/// Which groups pushed with fewer rows to draw than they hold are loose from the start (their
/// rows copied out by the caller, the rest of the group freed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Loosen {
    /// Any such group: the pieces at the edges of a rank's span, a few an epoch.
    #[default]
    Short,
    /// Those with at most half their rows to draw: in sampled epochs most row groups lack a
    /// few of their rows, and copying out nearly all of a group saves little memory for a copy
    /// of all of it (measured: docs/benchmarks.md).
    Half,
}

impl Loosen {
    /// The rule for epochs that draw by a sampling spec (`sampled`), or every row once.
    pub fn for_epochs(sampled: bool) -> Loosen {
        match sampled {
            true => Loosen::Half,
            false => Loosen::Short,
        }
    }

    /// Whether a group with `kept` rows to draw of `physical` is loose from the start.
    fn at_push(self, kept: u64, physical: u64) -> bool {
        match self {
            Loosen::Short => kept < physical,
            Loosen::Half => kept.saturating_mul(2) <= physical,
        }
    }
}

/// A buffered group: its value, rows still to draw, and the rows it holds in memory (its
/// physical rows while whole, the rows it was given once loose).
#[derive(Debug, Clone)]
struct Slot<T> {
    group: T,
    left: u64,
    charge: u64,
    loose: bool,
}

/// The shuffle buffer's state: the rows buffered (as `(group, row)`), the groups, the
/// generator.
#[derive(Debug, Clone)]
pub struct Mixer<T> {
    rng: Option<SeededRng>,
    batch_size: usize,
    buffer_rows: u64,
    drop_last: bool,
    loosen: Loosen,
    /// Row-equivalents the buffer asks for (`None` until the first group sets it).
    window: Option<u64>,
    /// The window's growth per batch: the first group's physical rows.
    step: u64,
    buffer: VecDeque<(u64, u64)>,
    /// Buffered groups by arrival number.
    slots: HashMap<u64, Slot<T>>,
    /// Rows held in memory: the sum of the slots' charges.
    held: u64,
    /// Groups that became loose and were not yet handed to [`loosen`](Self::loosen).
    pending: BTreeSet<u64>,
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
            buffer_rows: buffer_rows.max(batch_size) as u64,
            drop_last,
            loosen: Loosen::Short,
            // Unshuffled, a new group only when the buffer is empty or short of a batch.
            window: if shuffle.is_some() { None } else { Some(1) },
            step: 1,
            buffer: VecDeque::new(),
            slots: HashMap::new(),
            held: 0,
            pending: BTreeSet::new(),
            arrived: 0,
            finished: false,
        }
    }

    /// Which groups pushed short of their rows are loose from the start (default
    /// [`Loosen::Short`]).
    pub fn with_loosen(mut self, loosen: Loosen) -> Self {
        self.loosen = loosen;
        self
    }

    /// Whether the next batch needs another group first ([`push`](Self::push) one, or
    /// [`finish`](Self::finish) when there are none left).
    pub fn wants(&self) -> bool {
        !self.finished
            && (self.window.is_none_or(|w| self.held_rows() < w)
                || self.buffer.len() < self.batch_size)
    }

    /// Row-equivalents held: the physical rows of the whole groups and the rows the loose
    /// ones were given.
    pub fn held_rows(&self) -> u64 {
        self.held
    }

    /// Adds a group with `kept` rows to draw (indices `0..kept`) that holds `physical` rows in
    /// memory. Groups with no rows to draw are ignored. A group with fewer rows to draw than it
    /// holds is loose from the start.
    pub fn push(&mut self, group: T, kept: u64, physical: u64) {
        if kept == 0 {
            return;
        }
        let physical = physical.max(kept);
        if self.window.is_none() {
            // The window in rows, from the first group's size in memory.
            self.step = physical;
            self.window = Some(self.buffer_rows.min(WARM_UP_GROUPS * physical));
        }
        let id = self.arrived;
        self.arrived += 1;
        let loose = self.loosen.at_push(kept, physical);
        if loose {
            self.pending.insert(id);
        }
        let charge = if loose { kept } else { physical };
        self.held += charge;
        self.slots.insert(
            id,
            Slot {
                group,
                left: kept,
                charge,
                loose,
            },
        );
        self.buffer.extend((0..kept).map(|row| (id, row)));
        self.settle();
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
            let Some(slot) = self.slots.get_mut(&id) else {
                continue;
            };
            slot.left -= 1;
            let group = slot.group.clone();
            if slot.left == 0 {
                self.held -= slot.charge;
                self.slots.remove(&id);
                self.pending.remove(&id);
            }
            rows.push((group, row));
        }
        if self.rng.is_some() {
            self.window = self.window.map(|w| (w + self.step).min(self.buffer_rows));
        }
        self.settle();
        Some(rows)
    }

    /// Shuffling, a buffer that holds its window but less than a batch would ask for groups
    /// beyond its window while stragglers keep their memory: every group holding more than its
    /// rows still to draw is loosened (again), so the buffer then holds just those rows.
    fn settle(&mut self) {
        let full = self.window.is_some_and(|w| self.held >= w);
        if self.rng.is_none() || self.finished || !full || self.buffer.len() >= self.batch_size {
            return;
        }
        for (id, slot) in &mut self.slots {
            if slot.charge > slot.left {
                self.held -= slot.charge - slot.left;
                slot.charge = slot.left;
                slot.loose = true;
                self.pending.insert(*id);
            }
        }
    }

    /// Hands each group that became loose since the last call to `f` with its rows still to
    /// draw (ascending), and buffers what `f` returns in its place: the caller keeps only those
    /// rows in memory. Call it after each [`push`](Self::push) and
    /// [`next_batch`](Self::next_batch) (once the rows drawn are released); the rows drawn do
    /// not depend on it.
    pub fn loosen<E>(&mut self, mut f: impl FnMut(T, &[u64]) -> Result<T, E>) -> Result<(), E> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let mut rows: HashMap<u64, Vec<u64>> = pending.iter().map(|&id| (id, Vec::new())).collect();
        for (id, row) in &self.buffer {
            if let Some(rows) = rows.get_mut(id) {
                rows.push(*row);
            }
        }
        for id in pending {
            let (Some(mut slot), Some(mut left)) = (self.slots.remove(&id), rows.remove(&id))
            else {
                continue;
            };
            left.sort_unstable();
            slot.group = f(slot.group, &left)?;
            self.slots.insert(id, slot);
        }
        Ok(())
    }

    /// The groups still buffered, in arrival order, each with its rows still to draw
    /// (ascending) when it is loose: what a resumed caller keeps of each group it reads again.
    pub fn live_rows(&self) -> Vec<(&T, Option<Vec<u64>>)> {
        let mut rows: HashMap<u64, Vec<u64>> = HashMap::new();
        for (id, row) in &self.buffer {
            if self.slots.get(id).is_some_and(|slot| slot.loose) {
                rows.entry(*id).or_default().push(*row);
            }
        }
        let mut ids: Vec<&u64> = self.slots.keys().collect();
        ids.sort();
        ids.into_iter()
            .map(|id| {
                let left = rows.remove(id).map(|mut r| {
                    r.sort_unstable();
                    r
                });
                (&self.slots[id].group, left)
            })
            .collect()
    }

    /// The same state over other group values (a rewind's unit numbers → decoded row groups),
    /// which must hold what the old ones did: a loose group only its rows still to draw (see
    /// [`live_rows`](Self::live_rows)). Nothing is left for [`loosen`](Self::loosen).
    pub fn try_map<U, E>(self, mut f: impl FnMut(T) -> Result<U, E>) -> Result<Mixer<U>, E> {
        let mut slots = HashMap::with_capacity(self.slots.len());
        for (id, slot) in self.slots {
            slots.insert(
                id,
                Slot {
                    group: f(slot.group)?,
                    left: slot.left,
                    charge: slot.charge,
                    loose: slot.loose,
                },
            );
        }
        Ok(Mixer {
            rng: self.rng,
            batch_size: self.batch_size,
            buffer_rows: self.buffer_rows,
            drop_last: self.drop_last,
            loosen: self.loosen,
            window: self.window,
            step: self.step,
            buffer: self.buffer,
            slots,
            held: self.held,
            pending: BTreeSet::new(),
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

    /// A batch of `((group, generation), row)`.
    type Batch = Vec<((usize, u32), u64)>;

    /// One run over groups of `(physical, kept)` rows; `loosen`: whether the loose groups'
    /// values are replaced (by `(group, generation + 1)`). Returns the batches and the most
    /// rows held in memory when asking for a group, counted here as the caller would (a group's
    /// physical rows, then the rows it was last handed to `loosen` with, until it is drawn
    /// out); checks the rows handed to `loosen`.
    fn run_loosening(
        shuffle: bool,
        groups: &[(u64, u64)],
        batch: usize,
        buffer: usize,
        loosen: bool,
    ) -> (Vec<Batch>, u64) {
        let mut m = Mixer::new(shuffle.then_some((5, 6)), batch, buffer, false);
        let mut undrawn: HashMap<usize, BTreeSet<u64>> = HashMap::new();
        let mut memory: HashMap<usize, u64> = HashMap::new();
        let (mut next, mut worst, mut out) = (0, 0, Vec::new());
        let check = |m: &mut Mixer<(usize, u32)>,
                     undrawn: &HashMap<usize, BTreeSet<u64>>,
                     memory: &mut HashMap<usize, u64>| {
            if loosen {
                m.loosen(|(g, generation), rows| {
                    let expected: Vec<u64> = undrawn[&g].iter().copied().collect();
                    assert_eq!(rows, &expected[..], "rows left of group {g}");
                    memory.insert(g, rows.len() as u64);
                    Ok::<_, ()>((g, generation + 1))
                })
                .unwrap();
                assert_eq!(m.held_rows(), memory.values().sum::<u64>());
                // What a resumed caller keeps of each loose group: its rows still to draw.
                for ((g, generation), rows) in m.live_rows() {
                    if let Some(rows) = rows {
                        assert!(*generation > 0, "group {g} is loose but was never loosened");
                        let expected: Vec<u64> = undrawn[g].iter().copied().collect();
                        assert_eq!(rows, expected, "rows left of loose group {g}");
                    }
                }
            }
        };
        loop {
            while m.wants() {
                worst = worst.max(memory.values().sum::<u64>());
                match groups.get(next) {
                    Some(&(physical, kept)) => {
                        undrawn.insert(next, (0..kept).collect());
                        memory.insert(next, physical);
                        m.push((next, 0), kept, physical);
                        check(&mut m, &undrawn, &mut memory);
                    }
                    None => m.finish(),
                }
                next += 1;
            }
            let Some(b) = m.next_batch() else {
                return (out, worst);
            };
            for ((g, _), row) in &b {
                let left = undrawn.get_mut(g).unwrap();
                assert!(left.remove(row), "row drawn twice");
                if left.is_empty() {
                    memory.remove(g);
                }
            }
            out.push(b);
            check(&mut m, &undrawn, &mut memory);
        }
    }

    proptest::proptest! {
        /// Whenever it asks for a group, the mixer holds less than the bound the budget
        /// counts on; loosening hands over exactly the rows left and changes no draw; every
        /// row is drawn once.
        #[test]
        fn loosening_bounds_the_memory_and_changes_no_draw(
            shuffle in proptest::bool::ANY,
            groups in proptest::collection::vec((1u64..40, 0.0f64..1.0, 0u8..4), 0..60),
            batch in 1usize..40,
            buffer in 1usize..200,
        ) {
            // A quarter of the groups are pieces (fewer rows kept than held).
            let groups: Vec<(u64, u64)> = groups
                .iter()
                .map(|&(n, f, piece)| (n, if piece == 0 { 1 + (f * (n - 1) as f64) as u64 } else { n }))
                .collect();
            let (loosened, worst) = run_loosening(shuffle, &groups, batch, buffer, true);
            let (plain, _) = run_loosening(shuffle, &groups, batch, buffer, false);
            let strip = |b: &Vec<Batch>| -> Vec<Vec<(usize, u64)>> {
                b.iter().map(|b| b.iter().map(|((g, _), r)| (*g, *r)).collect()).collect()
            };
            proptest::prop_assert_eq!(strip(&loosened), strip(&plain));
            let rows = groups.iter().map(|g| g.0).max().unwrap_or(1);
            let bound = if shuffle {
                buffer.max(batch) as u64 - 1
            } else {
                batch as u64 - 1 + rows - 1
            };
            proptest::prop_assert!(worst <= bound, "held {} > bound {}", worst, bound);
            let drawn: usize = loosened.iter().map(Vec::len).sum();
            proptest::prop_assert_eq!(drawn as u64, groups.iter().map(|g| g.1).sum::<u64>());
        }
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
