//! Loaders in a front end's worker processes (PyTorch `DataLoader` workers): each worker is a
//! rank of its own to the loader, and the front end hands out the workers' batches in turns.
//! Where a worker reads, and the state of the whole pass after a batch, are worked out here,
//! once, for every front end (the Python package asks the extension for them).
//!
//! Worker slot `s` of `n` on rank `r` of `w` reads as rank `s·w + r` of `w·n`
//! ([`worker_rank`]). The slots are asked in turn, so when the front end stops, the first slots
//! have handed out one batch more than the others: the state says so with `ahead` (those first
//! ranks, `(s + 1)·w` of them, [`compose`]), and a resumed front end with as many workers starts
//! its turns at the first slot not ahead ([`fit`]), so the batches come in the order they would
//! have come.
//!
//! ```
//! use voxlake_loader::workers::worker_rank;
//!
//! // Worker 1 of 2 on rank 3 of 4 reads as rank 7 of 8.
//! assert_eq!(worker_rank(3, 4, 1, 2), (7, 8));
//! ```

use crate::state::{LoaderState, SegmentState};

/// The loader's rank and world size of worker slot `slot` of `workers` on rank `rank` of
/// `world_size`.
pub fn worker_rank(rank: usize, world_size: usize, slot: usize, workers: usize) -> (usize, usize) {
    (slot * world_size + rank, world_size * workers)
}

impl LoaderState {
    /// Batches the rank that took the state delivered in its segment.
    pub fn own_batches(&self) -> u64 {
        self.batches + u64::from(self.rank < self.ahead)
    }

    /// Whether the state stands between two epochs (nothing of its epoch delivered).
    pub fn at_boundary(&self) -> bool {
        self.batches == 0 && self.ahead == 0 && self.closed.is_empty()
    }
}

/// `state` fitted to a run of `workers` workers on each of `world_size` ranks, and the slot
/// worker 0 plays: where the state's ranks ahead are whole slots of this run, its turns go on
/// from there; else its segment is closed, and the draws left are dealt anew over this run's
/// ranks.
pub fn fit(state: LoaderState, world_size: usize, workers: usize) -> (LoaderState, usize) {
    let world = world_size * workers;
    if state.ahead == 0 {
        return (state, 0);
    }
    if state.world_size == world && state.ahead.is_multiple_of(world_size) {
        let shift = state.ahead / world_size;
        return (state, shift);
    }
    let mut closed = state.closed.clone();
    closed.push(SegmentState {
        world_size: state.world_size,
        batches: state.batches,
        ahead: state.ahead,
    });
    (
        LoaderState {
            closed,
            batches: 0,
            ahead: 0,
            ..state
        },
        0,
    )
}

/// The state of the pass on rank `rank` of `world_size` (each with `workers` workers) after a
/// batch: `before` and `after` are the states of the worker that handed it out, taken before
/// and after it. Slots are asked in turn, so the slots up to this one have handed out one batch
/// more than the slots after it.
pub fn compose(
    before: &LoaderState,
    after: &LoaderState,
    rank: usize,
    world_size: usize,
    workers: usize,
) -> LoaderState {
    let slot = before.rank / world_size.max(1);
    let own = before.own_batches();
    let mut state = if slot + 1 == workers {
        if after.at_boundary() {
            after.clone()
        } else {
            LoaderState {
                batches: own + 1,
                ahead: 0,
                ..before.clone()
            }
        }
    } else {
        LoaderState {
            batches: own,
            ahead: (slot + 1) * world_size,
            ..before.clone()
        }
    };
    state.rank = rank;
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rank: usize, world_size: usize, batches: u64, ahead: usize) -> LoaderState {
        let mut s = LoaderState::from_json(
            r#"{"format":1,"table":"/t","version":0,"files":"fnv1a64:0000000000000000",
            "file_count":1,"seed":0,"shuffle":true,"shuffle_buffer":8,"buffer_rows":8,
            "batch_size":4,"drop_last":false,"uneven":"pad","interleave":4,"world_size":1,
            "rank":0,"epoch":2,"closed":[],"batches":0,"samples_in_epoch":0}"#,
        )
        .unwrap();
        (s.rank, s.world_size, s.batches, s.ahead) = (rank, world_size, batches, ahead);
        s
    }

    #[test]
    fn a_pass_of_workers_composes_and_fits_back() {
        // Rank 1 of 2, 3 workers each: worker slot 1 reads as rank 3 of 6.
        assert_eq!(worker_rank(1, 2, 1, 3), (3, 6));
        // Slot 1 handed out its 5th batch: slots 0 and 1 are one ahead of slot 2.
        let before = state(3, 6, 4, 0);
        let after = state(3, 6, 5, 0);
        let pass = compose(&before, &after, 1, 2, 3);
        assert_eq!((pass.rank, pass.batches, pass.ahead), (1, 4, 4));
        // The same run again: its turns go on at slot 2.
        let (fitted, shift) = fit(pass.clone(), 2, 3);
        assert_eq!((shift, fitted.closed.len()), (2, 0));
        // Another number of workers: the segment is closed, the rest dealt anew.
        let (fitted, shift) = fit(pass, 2, 2);
        assert_eq!((shift, fitted.batches, fitted.ahead), (0, 0, 0));
        assert_eq!(
            (
                fitted.closed[0].world_size,
                fitted.closed[0].batches,
                fitted.closed[0].ahead
            ),
            (6, 4, 4)
        );
        // The last slot's batch: every slot even.
        let last = compose(&state(5, 6, 4, 0), &state(5, 6, 5, 0), 1, 2, 3);
        assert_eq!((last.batches, last.ahead), (5, 0));
        // The last slot's last batch of the epoch: the state is the next epoch's start.
        let mut end = state(5, 6, 0, 0);
        end.epoch = 3;
        let next = compose(&state(5, 6, 9, 0), &end, 1, 2, 3);
        assert!(next.at_boundary() && next.epoch == 3 && next.rank == 1);
    }
}
