//! What `build()` checks before it starts any work: that the budget can stream the table, and
//! that a state to resume from fits the table and the settings.

use voxlake_plan::resume::{OrderSettings, Segment};
use voxlake_stream::{GroupBudget, TableStream};

use crate::builder::LoaderBuilder;
use crate::state::{LoaderState, MAX_RANKS, Position};
use crate::{LoaderError, budget};

impl LoaderBuilder {
    /// Refuses a budget that cannot stream row groups like the first file's (one footer read,
    /// which the stream caches), naming the smallest budget that can.
    pub(crate) fn check_budget(
        &self,
        runtime: &tokio::runtime::Runtime,
        stream: &TableStream,
        settings: &OrderSettings,
        sample_bytes: u64,
    ) -> Result<(), LoaderError> {
        let groups = runtime.block_on(stream.group_budgets(0))?;
        // The largest of each: rows, bytes per row held, peak.
        let Some(rows) = groups.iter().map(|g| g.rows.max(1)).max() else {
            return Ok(());
        };
        let per_row = groups
            .iter()
            .map(|g| g.held.div_ceil(g.rows.max(1)))
            .max()
            .unwrap_or(0);
        let group = GroupBudget {
            rows,
            held: per_row * rows,
            peak: groups.iter().map(|g| g.peak).max().unwrap_or(0),
        };
        let buffer = settings.shuffle.then_some(settings.buffer_rows);
        let batch_bytes = settings.batch_size as u64 * sample_bytes;
        let outside = self.outside_bytes(settings.batch_size, sample_bytes)
            + crate::start::files_bytes(stream.sources());
        let need = budget::needed(group, settings.batch_size, buffer).max(batch_bytes);
        if outside + need > self.memory_budget {
            let smallest = outside
                + budget::smallest(
                    group,
                    settings.batch_size,
                    sample_bytes,
                    self.shuffle.map(|s| s.1),
                );
            return Err(LoaderError::Config(format!(
                "a memory budget of {} bytes cannot stream this table: a row group of {} rows takes {} bytes while read and {} while buffered, the shuffle buffer may hold {} rows of them when it reads another, and {outside} bytes go to the batches the loader keeps and the table's file list; the smallest budget that works is {smallest} bytes ({} MiB)",
                self.memory_budget,
                group.rows,
                group.peak,
                group.held,
                budget::held_rows_when_asking(group.rows, settings.batch_size, buffer),
                smallest.div_ceil(1 << 20)
            )));
        }
        Ok(())
    }

    /// Checks a state against this builder and the table; returns where to start.
    pub(crate) fn check_state(
        &self,
        state: &LoaderState,
        settings: &mut OrderSettings,
        files: &str,
        sample_bytes: u64,
        rows: u64,
    ) -> Result<Position, LoaderError> {
        if state.files != files {
            return Err(LoaderError::State(format!(
                "the state's file set ({}, {} files, version {}) is not this table's at that version ({files}): another table or another file set",
                state.files, state.file_count, state.version
            )));
        }
        self.check_sampling(state)?;
        check_counts(state, rows)?;
        let theirs = state.order_settings()?;
        self.check_order(state, &theirs, settings, sample_bytes)?;
        *settings = theirs;
        let mut closed = state.segments();
        let (mut batches, mut ahead) = (state.batches, state.ahead);
        if state.world_size != self.world_size && (batches > 0 || ahead > 0) {
            // Another world: the current segment ends here; the rest is dealt anew.
            closed.push(Segment {
                world_size: state.world_size,
                batches,
                ahead,
            });
            (batches, ahead) = (0, 0);
        }
        Ok(Position {
            epoch: state.epoch,
            closed,
            world_size: self.world_size,
            batches,
            ahead,
        })
    }

    /// The state was taken with this loader's sampling spec: else an error naming the options
    /// that differ.
    fn check_sampling(&self, state: &LoaderState) -> Result<(), LoaderError> {
        let ours: Vec<(String, String)> = self.sampling.options();
        if state.sampling == ours {
            return Ok(());
        }
        let text = |pairs: &[(String, String)]| match pairs.is_empty() {
            true => "none (every row once an epoch)".to_string(),
            false => pairs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let value = |pairs: &[(String, String)], key: &str| {
            pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let mut differ: Vec<&str> = Vec::new();
        for (key, _) in state.sampling.iter().chain(&ours) {
            if value(&state.sampling, key) != value(&ours, key) && !differ.contains(&key.as_str()) {
                differ.push(key);
            }
        }
        Err(LoaderError::State(format!(
            "the state was taken with sampling {}, this loader has {} (they differ in {})",
            text(&state.sampling),
            text(&ours),
            differ.join(", ")
        )))
    }

    /// The order settings the state was taken with (`theirs`) are this loader's (`settings`),
    /// its shuffle buffer within this budget (`sample_bytes` a sample).
    fn check_order(
        &self,
        state: &LoaderState,
        theirs: &OrderSettings,
        settings: &OrderSettings,
        sample_bytes: u64,
    ) -> Result<(), LoaderError> {
        let mismatch = |what: &str, a: String, b: String| {
            Err(LoaderError::State(format!(
                "the state was taken with {what} {a}, this loader has {b}"
            )))
        };
        if theirs.batch_size != settings.batch_size {
            return mismatch(
                "batch size",
                theirs.batch_size.to_string(),
                settings.batch_size.to_string(),
            );
        }
        if theirs.drop_last != settings.drop_last {
            return mismatch(
                "drop_last",
                theirs.drop_last.to_string(),
                settings.drop_last.to_string(),
            );
        }
        if theirs.uneven != settings.uneven {
            return mismatch(
                "uneven",
                theirs.uneven.as_str().into(),
                settings.uneven.as_str().into(),
            );
        }
        let ours = self.shuffle;
        let stated = state.shuffle.then_some((state.seed, state.shuffle_buffer));
        if ours != stated {
            return mismatch("shuffle", format!("{stated:?}"), format!("{ours:?}"));
        }
        // The buffer it used must fit this budget (the buffer this budget allows is settled).
        if theirs.shuffle && theirs.buffer_rows > settings.buffer_rows {
            let outside = self.outside_bytes(settings.batch_size, sample_bytes);
            return Err(LoaderError::Config(format!(
                "the state's shuffle buffer of {} rows is larger than this budget allows ({} rows): give at least {} bytes, the budget it was taken with or more",
                theirs.buffer_rows,
                settings.buffer_rows,
                outside + budget::budget_for_buffer(theirs.buffer_rows, sample_bytes)
            )));
        }
        if theirs.interleave != settings.interleave {
            return mismatch(
                "interleave",
                theirs.interleave.to_string(),
                settings.interleave.to_string(),
            );
        }
        if theirs.affinity != settings.affinity {
            let nodes = |a: Option<voxlake_plan::affinity::Affinity>| {
                a.map_or("none".to_string(), |a| {
                    format!("{} nodes of {} ranks", a.nodes(), a.ranks_per_node())
                })
            };
            return mismatch(
                "node affinity",
                nodes(theirs.affinity),
                nodes(settings.affinity),
            );
        }
        Ok(())
    }
}

/// The state's counts bounded by the table (`rows` an epoch): the samples it says were
/// delivered, and every world size it names.
fn check_counts(state: &LoaderState, rows: u64) -> Result<(), LoaderError> {
    // Each segment's ranks deliver at most one batch of pad rows each beyond the rows.
    let slack = state
        .closed
        .iter()
        .map(|s| s.world_size as u64)
        .chain([state.world_size as u64])
        .try_fold(0u64, |sum, w| {
            sum.checked_add(w.checked_mul(state.batch_size as u64)?)
        });
    match (state.delivered(), slack) {
        (Some(delivered), Some(slack)) if delivered <= rows.saturating_add(slack) => {}
        (delivered, _) => {
            return Err(LoaderError::State(format!(
                "the state counts {} samples delivered in epoch {}, more than the {rows} rows an epoch of this table draws: not a state of this table's run",
                delivered.map_or("more than 2^64".into(), |d| d.to_string()),
                state.epoch
            )));
        }
    }
    // Resuming replays each segment rank by rank: a count of ranks no run of this table
    // could have had is refused before it is used.
    let most = rows.max(MAX_RANKS as u64);
    let absurd = |world: usize| world as u64 > most;
    let refuse = |what: String| {
        Err(LoaderError::State(format!(
            "the state has {what}, more than the table's {rows} rows and than {MAX_RANKS} ranks: not a state of this table's run"
        )))
    };
    if let Some(s) = state.closed.iter().find(|s| absurd(s.world_size)) {
        return refuse(format!("a closed segment of {} ranks", s.world_size));
    }
    if absurd(state.world_size) {
        return refuse(format!("a world size of {}", state.world_size));
    }
    Ok(())
}
