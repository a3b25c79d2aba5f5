//! The producer: runs epochs on the loader's thread. Row groups from the stream go into the
//! [`Mixer`]; each batch it draws is assembled and sent to the caller with its position.
//! Every error and every panic ends the run with a message to the caller; a finished run
//! ends with [`Msg::Done`], so a closed channel is never taken for the end of the data.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;
use futures::{FutureExt, StreamExt, TryStreamExt};
use voxlake_io::panic_message;
use voxlake_plan::draws::Draws;
use voxlake_plan::mixer::Mixer;
use voxlake_plan::order::deal;
use voxlake_plan::resume::{OrderSettings, remaining, rewind};
use voxlake_plan::sampler::Sampler;
use voxlake_stream::TableStream;

use crate::LoaderError;
use crate::assemble::{Assembler, Group, Row};
use crate::batch::Batch;
use crate::counters::Counters;
use crate::state::Position;

/// What the producer sends.
pub(crate) enum Msg {
    /// A batch and where the run stands after it.
    Batch(Box<Batch>, Position),
    /// The run failed: the last message.
    Failed(LoaderError),
    /// Every epoch was delivered: the last message.
    Done,
}

pub(crate) struct Producer {
    pub stream: TableStream,
    /// Turns the rows the mixer draws into batches.
    pub assembler: Assembler,
    pub settings: OrderSettings,
    /// Each epoch's draws.
    pub sampler: Arc<Sampler>,
    pub rank: usize,
    pub world_size: usize,
    /// The first epoch not to run (`None`: endless).
    pub end_epoch: Option<u64>,
    pub start: Position,
    pub counters: Arc<Counters>,
    pub stop: Arc<AtomicBool>,
    pub shutdown: Arc<tokio::sync::Notify>,
    pub tx: Sender<Msg>,
    /// Units received from the stream (and read again on resume), to compare with the
    /// stream's reserved units.
    pub received: AtomicU64,
}

/// How often a producer waiting for a row group checks that the pipeline is not deadlocked
/// (the budget the next row group needs held by row groups waiting for it).
const DEADLOCK_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Checks in a row that must find the pipeline deadlocked, its budget unchanged, before the run
/// fails: a reservation whose budget was just granted looks deadlocked until its task runs again,
/// which on a loaded machine can take a while (seen once in CI with two checks). A real deadlock
/// never changes, so waiting 2 s only delays its error.
const DEADLOCK_CONFIRM: u32 = 20;

impl Producer {
    pub(crate) async fn run(self) {
        let msg = match AssertUnwindSafe(self.run_epochs()).catch_unwind().await {
            Ok(Ok(true)) => {
                // The cache's last entries in place before the caller hears the run is over (a
                // process that exits then would leave them unwritten).
                for scan in self.stream.sources().scans() {
                    if let Some(cache) = scan.snapshot().cache() {
                        cache.flush().await;
                    }
                }
                Msg::Done
            }
            Ok(Ok(false)) => return, // the caller is gone
            Ok(Err(e)) => Msg::Failed(e),
            Err(panic) => Msg::Failed(LoaderError::Panicked {
                stage: "loader".into(),
                object: self.stream.scan().snapshot().location().to_string(),
                message: panic_message(panic.as_ref()),
            }),
        };
        let _ = self.tx.send(msg);
    }

    /// Every epoch; `Ok(false)` when the caller is gone.
    async fn run_epochs(&self) -> Result<bool, LoaderError> {
        let mut at = self.start.clone();
        loop {
            if self.end_epoch.is_some_and(|end| at.epoch >= end) {
                return Ok(true);
            }
            if !self.run_epoch(&at).await? {
                return Ok(false);
            }
            at = Position::start(at.epoch + 1, self.world_size);
        }
    }

    /// The rest of an epoch from `at`; `Ok(false)` when the caller is gone.
    async fn run_epoch(&self, at: &Position) -> Result<bool, LoaderError> {
        let epoch = at.epoch;
        let order = self.stream.order(epoch);
        let drawn = self.sampler.draws(&order, epoch);
        let fresh = at.closed.is_empty() && at.batches_of(self.rank) == 0;
        let (left, pieces, mut mixer, from) = if fresh {
            let pieces = deal(
                &order,
                &drawn,
                self.world_size,
                self.rank,
                self.settings.uneven,
            );
            (drawn, pieces, self.settings.mixer(epoch, 0, self.rank), 0)
        } else {
            self.resume(at, &order, &drawn).await?
        };
        let total = self.settings.batches(left.len(), self.world_size);
        let before = at.batches_before(self.rank);
        // This rank's batches in the segment; the position keeps the segment's count.
        let ahead = u64::from(self.rank < at.ahead);
        let mut delivered = at.batches_of(self.rank);
        let mut stream = self.stream.pieces(epoch, pieces, from);
        if epoch == self.start.epoch {
            // The stream reads in its own task meanwhile: the first batch's memory is ready
            // when its row groups are.
            self.assembler.prefault_spare(self.settings.batch_size)?;
        }
        let mut deadlock_check = tokio::time::interval(DEADLOCK_CHECK);
        deadlock_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut deadlocked: Option<(voxlake_stream::BudgetProgress, u32)> = None;
        loop {
            while mixer.wants() {
                if self.stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
                let start = Instant::now();
                let next = loop {
                    tokio::select! {
                        next = stream.next() => break next,
                        _ = self.shutdown.notified() => return Ok(false),
                        _ = deadlock_check.tick() => {
                            deadlocked = match (self.deadlocked(), deadlocked) {
                                (Some(now), Some((then, ticks))) if now == then => Some((now, ticks + 1)),
                                (Some(now), _) => Some((now, 1)),
                                (None, _) => None,
                            };
                            if deadlocked.is_some_and(|(_, ticks)| ticks >= DEADLOCK_CONFIRM) {
                                return Err(self.deadlock_error());
                            }
                        }
                    }
                };
                self.counters
                    .producer_wait_ns
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match next {
                    Some(group) => {
                        self.received.fetch_add(1, Ordering::SeqCst);
                        let group = self.assembler.group(group?)?;
                        let (drawn, rows) = (group.data.unit.drawn(), group.data.unit.rows);
                        mixer.push(Arc::new(group), drawn, rows);
                        mixer.loosen(|group, kept| self.assembler.loosen(group, kept))?;
                    }
                    None => mixer.finish(),
                }
            }
            let Some(drawn) = mixer.next_batch() else {
                break;
            };
            let start = Instant::now();
            let rows = drawn
                .into_iter()
                .map(|(group, kept)| {
                    let index = group.index_of(kept).ok_or_else(|| {
                        LoaderError::Internal(format!("kept row {kept} of a unit out of range"))
                    })?;
                    Ok(Row { group, index })
                })
                .collect::<Result<Vec<_>, LoaderError>>()?;
            let span = tracing::trace_span!(target: "voxlake::trace", "assemble",
                epoch, batch = before + delivered, row_groups = %crate::assemble::RowGroups(&rows));
            let batch = span.in_scope(|| {
                self.assembler
                    .assemble_caught(&rows, epoch, before + delivered)
            })?;
            drop(rows); // releases row groups (and their budget) no longer buffered
            mixer.loosen(|group, kept| self.assembler.loosen(group, kept))?;
            self.counters
                .assemble_ns
                .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            delivered += 1;
            let position = if delivered >= total {
                // The epoch is over: a state taken now starts the next one.
                Position::start(epoch + 1, self.world_size)
            } else {
                Position {
                    epoch,
                    closed: at.closed.clone(),
                    world_size: self.world_size,
                    batches: delivered - ahead,
                    ahead: at.ahead,
                }
            };
            if self.tx.send(Msg::Batch(Box::new(batch), position)).is_err() {
                return Ok(false);
            }
            // The batch was in the queue, if only until the waiting loop took it.
            self.counters
                .batches_ready_peak
                .fetch_max(self.tx.len().max(1) as u64, Ordering::Relaxed);
        }
        if delivered != total {
            return Err(LoaderError::Internal(format!(
                "epoch {epoch} of {} ended after {delivered} of its {total} batches on rank {}",
                self.stream.scan().snapshot().location(),
                self.rank
            )));
        }
        Ok(true)
    }

    /// Rebuilds an epoch's state at `at` without reading its prefix: the draws (`drawn`) left
    /// by the closed segments, this rank's span, and its mixer rewound to `at.batches` with
    /// the row groups still buffered read again.
    async fn resume(
        &self,
        at: &Position,
        order: &voxlake_plan::order::EpochOrder,
        drawn: &Draws,
    ) -> Result<
        (
            Draws,
            Vec<voxlake_plan::order::Piece>,
            Mixer<Arc<Group>>,
            u64,
        ),
        LoaderError,
    > {
        let epoch = at.epoch;
        let settings = &self.settings;
        // Footers (metadata only): every file when other ranks' deliveries must be rewound,
        // else this rank's.
        let files: Vec<usize> = if at.closed.is_empty() {
            deal(order, drawn, self.world_size, self.rank, settings.uneven)
                .iter()
                .map(|p| p.file)
                .collect()
        } else {
            (0..self.stream.sources().file_count()).collect()
        };
        let footers = self.stream.footers(files).await?;
        let footer = |file: usize| {
            footers.get(&file).cloned().ok_or_else(|| {
                LoaderError::Internal(format!("no footer read for file {file} before the rewind"))
            })
        };
        let left = remaining(settings, order, epoch, drawn, &at.closed, footer)?;
        let rewound = rewind(
            settings,
            order,
            epoch,
            &at.closed,
            &left,
            self.world_size,
            self.rank,
            at.batches_of(self.rank),
            footer,
        )?;
        if rewound.batches < at.batches_of(self.rank) {
            return Err(LoaderError::State(format!(
                "the state is {} batches into epoch {epoch}, whose segment has only {} on rank {}",
                at.batches_of(self.rank),
                rewound.batches,
                self.rank
            )));
        }
        // Only the row groups still in the buffer are read again; a loose one is trimmed to its
        // rows still to draw as soon as it arrives, so the reads stay within the budget the
        // mixer's bound allows (read whole all at once, they outgrew it and waited forever).
        let live: Vec<(usize, Option<Vec<u64>>)> = rewound
            .mixer
            .live_rows()
            .into_iter()
            .map(|(u, rows)| (*u, rows))
            .collect();
        let units = &rewound.units;
        let mut groups: HashMap<usize, Arc<Group>> = futures::stream::iter(live)
            .map(|(u, rows)| async move {
                let data = self.stream.read_unit(units[u].clone(), u as u64).await?;
                self.received.fetch_add(1, Ordering::SeqCst);
                let group = Arc::new(self.assembler.group(data)?);
                let group = match rows {
                    Some(rows) => self.assembler.loosen(group, &rows)?,
                    None => group,
                };
                Ok::<_, LoaderError>((u, group))
            })
            .buffered(self.settings.interleave.max(4))
            .try_collect()
            .await?;
        let mixer = rewound.mixer.try_map(|u| {
            groups
                .remove(&u)
                .ok_or_else(|| LoaderError::Internal(format!("unit {u} was not read again")))
        })?;
        Ok((left, rewound.pieces, mixer, rewound.next_unit as u64))
    }

    /// The budget's state if the pipeline looks unable to deliver the group the mixer waits
    /// for: the next unit waits for budget that only buffered groups hold, and nothing else is
    /// on its way.
    fn deadlocked(&self) -> Option<voxlake_stream::BudgetProgress> {
        let p = self.stream.budget_progress();
        (p.waiting_bytes > 0
            && p.available_bytes < p.waiting_bytes
            && p.reserved_units == self.received.load(Ordering::SeqCst))
        .then_some(p)
    }

    fn deadlock_error(&self) -> LoaderError {
        let p = self.stream.budget_progress();
        let held = p.budget_bytes - p.available_bytes;
        LoaderError::Config(format!(
            "the memory budget of {} bytes is too small for this table: {held} bytes of it are held (row groups in the shuffle buffer, and what was set aside for the next one) and the next row group needs {} bytes; give at least {} bytes (or use a smaller batch or shuffle buffer)",
            p.budget_bytes,
            p.waiting_bytes,
            held + p.waiting_bytes
        ))
    }
}
