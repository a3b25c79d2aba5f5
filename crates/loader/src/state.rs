//! The loader's resumable state: where the last batch handed to the caller sits in the run.
//!
//! A state names the table version and a hash of the file set read (paths and sizes in plan
//! order), every setting the order depends on, and the position: the epoch, the segments of
//! it closed by a change of world size, and the batches each rank delivered since (`batches`,
//! and one more for each of the first `ahead` ranks: a DataLoader's workers, asked in turn,
//! stand so). Ranks step in lockstep, so any rank's state describes the global position.
//! JSON, well under 1 KiB.
//!
//! ```
//! use voxlake_loader::LoaderState;
//!
//! let json = r#"{"format":1,"table":"/data/t","version":3,"files":"fnv1a64:00000000000000ff",
//!   "file_count":2,"seed":7,"shuffle":true,"shuffle_buffer":64,"buffer_rows":64,
//!   "batch_size":4,"drop_last":false,"uneven":"pad","interleave":4,"world_size":2,"rank":0,
//!   "epoch":1,"closed":[],"batches":5,"samples_in_epoch":40}"#;
//! let state = LoaderState::from_json(json)?;
//! assert_eq!((state.epoch, state.batches), (1, 5));
//! assert_eq!(LoaderState::from_json(&state.to_json())?, state);
//! # Ok::<(), voxlake_loader::LoaderError>(())
//! ```

use serde::{Deserialize, Serialize};
use voxlake_plan::affinity::Affinity;
use voxlake_plan::order::Uneven;
use voxlake_plan::resume::{OrderSettings, Segment};

use crate::LoaderError;

/// The state format this version writes and reads.
pub(crate) const STATE_FORMAT: u32 = 1;

/// Where a loader is: see the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderState {
    /// The state format (`STATE_FORMAT`).
    pub format: u32,
    /// The table location (without query string: no secrets).
    pub table: String,
    /// The Delta version read.
    pub version: u64,
    /// Hash of the file set read: `fnv1a64:` and 16 hex digits.
    pub files: String,
    /// Number of data files in the version read.
    pub file_count: usize,
    /// Shuffle seed.
    pub seed: u64,
    /// Whether files, row groups and rows are shuffled.
    pub shuffle: bool,
    /// The shuffle buffer asked for, in rows.
    pub shuffle_buffer: usize,
    /// The shuffle buffer used (fitted to the memory budget), in rows.
    pub buffer_rows: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Whether a short last batch is left out.
    pub drop_last: bool,
    /// `pad` or `drop`.
    pub uneven: String,
    /// Files read round-robin.
    pub interleave: usize,
    /// Nodes the ranks' files were kept on (1: no node affinity; states of earlier versions
    /// have none).
    #[serde(default = "one_node")]
    pub nodes: usize,
    /// Ranks when the state was taken.
    pub world_size: usize,
    /// The rank that took it.
    pub rank: usize,
    /// The epoch of the next batch.
    pub epoch: u64,
    /// Segments of this epoch closed by a change of world size.
    pub closed: Vec<SegmentState>,
    /// Batches each rank delivered in the current segment.
    pub batches: u64,
    /// Ranks (the first ones) that delivered one batch more in the current segment (states
    /// of earlier versions have none).
    #[serde(default)]
    pub ahead: usize,
    /// Samples delivered in this epoch over all ranks (informative).
    pub samples_in_epoch: u64,
    /// The sampling spec as `(option, value)` pairs
    /// ([`Sampling::options`](voxlake_plan::sample::Sampling::options)); empty: every row once
    /// an epoch (states of earlier versions have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sampling: Vec<(String, String)>,
    /// Of a mixture, every source in order (the first is also `table`, `version`, `files`);
    /// empty for one table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceState>,
}

/// A mixture's source as a state records it: the table and the file set read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceState {
    /// The table location (without query string).
    pub table: String,
    /// The Delta version read.
    pub version: u64,
    /// Hash of the file set read (as [`LoaderState::files`]).
    pub files: String,
    /// Number of data files in the version read.
    pub file_count: usize,
}

/// What a state records of a mixture's `sources` as `stream` read them (none for one table).
pub(crate) fn sources_of(
    sources: &[crate::Source],
    stream: &voxlake_stream::TableStream,
) -> Vec<SourceState> {
    if sources.is_empty() {
        return Vec::new();
    }
    stream
        .sources()
        .scans()
        .iter()
        .zip(sources)
        .map(|(scan, source)| SourceState {
            table: voxlake_io::redact(source.location()),
            version: scan.snapshot().version(),
            files: scan.file_set_hash(),
            file_count: scan.files().len(),
        })
        .collect()
}

fn one_node() -> usize {
    1
}

/// The most ranks a state's segment may have where the table has fewer rows: more than any
/// job runs (a resume replays each segment rank by rank).
pub(crate) const MAX_RANKS: usize = 1 << 20;

/// A closed segment: `batches` per rank over `world_size` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentState {
    /// Ranks in the segment.
    pub world_size: usize,
    /// Batches each rank delivered in it.
    pub batches: u64,
    /// Ranks (the first ones) that delivered one batch more in it.
    #[serde(default)]
    pub ahead: usize,
}

impl LoaderState {
    /// The state as one line of JSON.
    pub fn to_json(&self) -> String {
        // A struct of plain fields always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A state from JSON; an unknown format is an error.
    pub fn from_json(json: &str) -> Result<LoaderState, LoaderError> {
        let state: LoaderState = serde_json::from_str(json)
            .map_err(|e| LoaderError::State(format!("not a loader state: {e}")))?;
        if state.format != STATE_FORMAT {
            return Err(LoaderError::State(format!(
                "state format {} (this version reads {STATE_FORMAT})",
                state.format
            )));
        }
        state.uneven()?;
        state.check()?;
        Ok(state)
    }

    /// Refuses a state no run could have written: no ranks, a rank outside them, no rows a
    /// batch, or counts whose samples overflow (they are multiplied out when resuming).
    fn check(&self) -> Result<(), LoaderError> {
        let bad = |m: String| Err(LoaderError::State(format!("not a state a run wrote: {m}")));
        if self.world_size == 0 || self.rank >= self.world_size {
            return bad(format!(
                "rank {} of world size {}",
                self.rank, self.world_size
            ));
        }
        if self.batch_size == 0 {
            return bad("a batch size of 0".into());
        }
        if self.nodes == 0 || (self.nodes > 1 && self.affinity().is_none()) {
            return bad(format!(
                "{} nodes for a world size of {}",
                self.nodes, self.world_size
            ));
        }
        if let Some(s) = self.closed.iter().find(|s| s.world_size == 0) {
            return bad(format!("a closed segment of {} ranks", s.world_size));
        }
        let segments = self.closed.iter().map(|s| (s.world_size, s.ahead));
        if let Some((world, ahead)) = segments
            .chain([(self.world_size, self.ahead)])
            .find(|&(world, ahead)| ahead >= world)
        {
            return bad(format!(
                "{ahead} ranks ahead of the others in a segment of {world} ranks"
            ));
        }
        if self.delivered().is_none() {
            return bad("its counts of batches overflow".into());
        }
        Ok(())
    }

    /// Samples the epoch's segments delivered over all ranks, pad rows included (`None` if
    /// the counts overflow).
    pub(crate) fn delivered(&self) -> Option<u64> {
        let b = self.batch_size as u64;
        let segment = |world: usize, batches: u64, ahead: usize| {
            (world as u64)
                .checked_mul(batches)?
                .checked_add(ahead as u64)?
                .checked_mul(b)
        };
        self.closed
            .iter()
            .try_fold(0u64, |sum, s| {
                sum.checked_add(segment(s.world_size, s.batches, s.ahead)?)
            })?
            .checked_add(segment(self.world_size, self.batches, self.ahead)?)
    }

    /// The policy for uneven ranks.
    pub fn uneven(&self) -> Result<Uneven, LoaderError> {
        self.uneven.parse().map_err(LoaderError::State)
    }

    /// The closed segments.
    pub(crate) fn segments(&self) -> Vec<Segment> {
        self.closed
            .iter()
            .map(|s| Segment {
                world_size: s.world_size,
                batches: s.batches,
                ahead: s.ahead,
            })
            .collect()
    }

    /// The order settings the state was made with.
    pub(crate) fn order_settings(&self) -> Result<OrderSettings, LoaderError> {
        Ok(OrderSettings {
            seed: self.seed,
            shuffle: self.shuffle,
            buffer_rows: self.buffer_rows,
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            uneven: self.uneven()?,
            interleave: self.interleave,
            affinity: self.affinity(),
            loosen: voxlake_plan::mixer::Loosen::for_epochs(!self.sampling.is_empty()),
        })
    }

    /// The node affinity the state was taken with.
    fn affinity(&self) -> Option<Affinity> {
        (self.nodes > 1)
            .then(|| Affinity::new(self.nodes, self.world_size))
            .flatten()
    }
}

/// Where a run starts or stands: the epoch, its closed segments, batches in the current one
/// (one more for each of the first `ahead` ranks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Position {
    pub epoch: u64,
    pub closed: Vec<Segment>,
    pub world_size: usize,
    pub batches: u64,
    pub ahead: usize,
}

impl Position {
    /// The start of `epoch` over `world_size` ranks.
    pub(crate) fn start(epoch: u64, world_size: usize) -> Position {
        Position {
            epoch,
            closed: Vec::new(),
            world_size,
            batches: 0,
            ahead: 0,
        }
    }

    /// Batches `rank` delivered in the current segment.
    pub(crate) fn batches_of(&self, rank: usize) -> u64 {
        self.batches + u64::from(rank < self.ahead)
    }

    /// Batches of the epoch `rank` delivered before this segment.
    pub(crate) fn batches_before(&self, rank: usize) -> u64 {
        self.closed.iter().map(|s| s.batches_of(rank)).sum()
    }

    /// Samples of the epoch delivered over all ranks (every batch before the end is full).
    pub(crate) fn samples(&self, batch_size: usize) -> u64 {
        let b = batch_size as u64;
        let segment =
            |world: usize, batches: u64, ahead: usize| (world as u64 * batches + ahead as u64) * b;
        self.closed
            .iter()
            .map(|s| segment(s.world_size, s.batches, s.ahead))
            .sum::<u64>()
            + segment(self.world_size, self.batches, self.ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"format":1,"table":"/data/t","version":3,"files":"fnv1a64:00000000000000ff",
      "file_count":2,"seed":7,"shuffle":true,"shuffle_buffer":64,"buffer_rows":64,
      "batch_size":4,"drop_last":false,"uneven":"pad","interleave":4,"world_size":2,"rank":0,
      "epoch":1,"closed":[{"world_size":4,"batches":3}],"batches":5,"samples_in_epoch":88}"#;

    fn with(key: &str, value: serde_json::Value) -> String {
        let mut state: serde_json::Value = serde_json::from_str(GOOD).unwrap();
        state[key] = value;
        state.to_string()
    }

    #[test]
    fn states_no_run_could_write_are_refused() {
        let state = LoaderState::from_json(GOOD).unwrap();
        assert_eq!(state.delivered(), Some(4 * 3 * 4 + 2 * 5 * 4));
        for (key, value, says) in [
            ("world_size", serde_json::json!(0), "world size 0"),
            ("rank", serde_json::json!(2), "rank 2 of world size 2"),
            ("batch_size", serde_json::json!(0), "batch size of 0"),
            (
                "closed",
                serde_json::json!([{"world_size": 0, "batches": 1}]),
                "closed segment of 0 ranks",
            ),
            ("ahead", serde_json::json!(2), "2 ranks ahead"),
            (
                "closed",
                serde_json::json!([{"world_size": 3, "batches": 1, "ahead": 3}]),
                "3 ranks ahead of the others in a segment of 3 ranks",
            ),
            (
                "closed",
                serde_json::json!([{"world_size": 1_000_000_000_000_000u64, "batches": 1_000_000_000_000u64}]),
                "overflow",
            ),
        ] {
            let e = LoaderState::from_json(&with(key, value))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{key}: {e}");
        }
    }

    proptest::proptest! {
        /// Any numbers in a state's position: refused by name or accepted with ranks in range
        /// and counts whose samples multiply out — never a panic, never an overflow later.
        #[test]
        fn any_position_is_refused_or_sound(
            world in 0usize..=usize::MAX,
            rank in 0usize..=usize::MAX,
            batch in 0usize..=usize::MAX,
            batches in 0u64..=u64::MAX,
            closed in proptest::collection::vec((0usize..=usize::MAX, 0u64..=u64::MAX), 0..4),
            small in proptest::bool::ANY,
        ) {
            // Half the cases small numbers, which a run writes; half anything.
            let fit = |v: u64| if small { v % 9 } else { v };
            let mut state: serde_json::Value = serde_json::from_str(GOOD).unwrap();
            state["world_size"] = serde_json::json!(fit(world as u64));
            state["rank"] = serde_json::json!(fit(rank as u64));
            state["batch_size"] = serde_json::json!(fit(batch as u64));
            state["batches"] = serde_json::json!(fit(batches));
            state["closed"] = serde_json::json!(closed
                .iter()
                .map(|&(w, b)| serde_json::json!({"world_size": fit(w as u64), "batches": fit(b)}))
                .collect::<Vec<_>>());
            if let Ok(state) = LoaderState::from_json(&state.to_string()) {
                proptest::prop_assert!(state.rank < state.world_size);
                proptest::prop_assert!(state.batch_size > 0);
                proptest::prop_assert!(state.delivered().is_some());
                proptest::prop_assert!(state.closed.iter().all(|s| s.world_size > 0));
            }
        }
    }
}
