//! [`Loader`]: the iterator the training loop calls, its state and its statistics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use voxlake_format::{SampleSpec, TensorSpec};
use voxlake_plan::resume::OrderSettings;
use voxlake_stream::TableStream;

use crate::builder::LoaderBuilder;
use crate::counters::Counters;
use crate::producer::Msg;
use crate::state::{LoaderState, Position, SegmentState};
use crate::{Batch, LoaderError, Recycler, Tensors, stall};

/// Steps after which the stall meter logs its first reading.
const STALL_LOG_AFTER: u64 = 20;

/// The longest [`Loader::close`] or the run's end waits for the loader's threads: blocking
/// decodes under way finish first.
pub(crate) const THREADS_WAIT: Duration = Duration::from_secs(10);

/// The batching iterator. See the crate documentation.
///
/// Dropping it stops the background work without waiting for it; [`close`](Self::close)
/// waits for its threads, and so does the end of the run (a process that forks after either
/// hands none of them on: see [`LoaderError::Forked`]).
#[derive(Debug)]
pub struct Loader {
    pub(crate) rx: Receiver<Msg>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) shutdown: Arc<tokio::sync::Notify>,
    /// The producer thread: never joined by a drop (dropping the loader must not block); it
    /// ends on its own once it sees the stop flag or the closed channel. Joined once `ended`
    /// says it is ending.
    pub(crate) thread: Option<JoinHandle<()>>,
    /// Closed by the producer thread as it ends, its runtime's threads ended before.
    pub(crate) ended: Receiver<()>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) stream: TableStream,
    pub(crate) spec: SampleSpec,
    pub(crate) started: Instant,
    pub(crate) settings: OrderSettings,
    /// Rows an epoch draws over all ranks (the table's rows without sampling).
    pub(crate) draws_per_epoch: u64,
    pub(crate) world_size: usize,
    /// Where the run stands after the last batch handed out.
    pub(crate) position: Position,
    /// The state's fixed fields.
    pub(crate) state_template: LoaderState,
    /// The run ended (finished or failed): `next()` returns `None` from now on.
    pub(crate) finished: bool,
    pub(crate) meter: stall::StallMeter,
    /// Each step's wait inside `next()`.
    pub(crate) waits: stall::WaitHistogram,
    /// Where the metrics are served (`with_metrics_port`).
    pub(crate) endpoint: Option<crate::endpoint::Endpoint>,
    /// The trace of the first batches (`with_trace`).
    pub(crate) trace: Option<Arc<crate::trace::Trace>>,
    /// The trace's write failure, for the next call to answer with (the batch that ended the
    /// trace was delivered).
    pub(crate) trace_failed: Option<LoaderError>,
    /// When the last batch was handed out (the training loop computes from then on).
    pub(crate) last_return: Option<Instant>,
    /// Tensor memory given back with `recycle`, for the assembler to fill again.
    pub(crate) recycled: Arc<Mutex<Vec<Tensors>>>,
    pub(crate) recycle_max: usize,
    /// When the caller began waiting for the batch not yet received (`poll_next`).
    pub(crate) waiting_since: Option<Instant>,
    /// Samples handed out per label value (`None`: no label).
    pub(crate) labels: std::collections::BTreeMap<Option<i64>, u64>,
    /// Of a mixture, samples handed out per source.
    pub(crate) sources_delivered: Vec<u64>,
    /// A loader of patches: its order and volumes (a rank's batches follow its volumes).
    pub(crate) patch_order: Option<(voxlake_plan::patch::PatchOrder, Vec<u64>)>,
}

impl Loader {
    /// A builder for the table at `table` (a local path or URL).
    pub fn builder(table: impl Into<String>) -> LoaderBuilder {
        LoaderBuilder::new(table.into())
    }

    /// A builder for a mixture of tables, each drawn its share of every epoch (see
    /// [`Source`](crate::Source)); the builder's table settings apply to every source that
    /// does not name its own.
    pub fn mixture(sources: Vec<crate::Source>) -> LoaderBuilder {
        let first = sources.first().map(|s| s.location().to_string());
        let mut builder = LoaderBuilder::new(first.unwrap_or_default());
        builder.sources = Some(sources);
        builder
    }

    /// What the filter skipped and kept (`None` without `with_filter`); of a mixture, summed
    /// over the sources that have a filter.
    pub fn filter_stats(&self) -> Option<voxlake_table::FilterStats> {
        self.stream.sources().filter_stats()
    }

    /// The spec of one sample's first field (its one tensor, `Batch::tensors`) as handed out:
    /// the table's (as stored), or the per-sample transform's output (`with_transform_to`).
    pub fn spec(&self) -> &TensorSpec {
        self.spec.first()
    }

    /// Every field of one sample as handed out, in order.
    pub fn sample(&self) -> &SampleSpec {
        &self.spec
    }

    /// The table's label column, if it has one, and whether its schema lets it be null
    /// (`Batch::labels` is all `None` where the table has no label; where it has, `None`
    /// marks a null label). Of a mixture (whose sources all have one or none): the first
    /// source's name, nullable where any source's is.
    pub fn label_column(&self) -> Option<(&str, bool)> {
        crate::open::label_column(&self.stream)
    }

    /// This process's rank (from 0) and the number of ranks.
    pub fn rank(&self) -> (usize, usize) {
        (self.state_template.rank, self.state_template.world_size)
    }

    /// The table version read (of a mixture, the first source's: see
    /// [`versions`](Self::versions)).
    pub fn version(&self) -> u64 {
        self.stream.scan().snapshot().version()
    }

    /// The version of each table read: the one table's, or each source's of a mixture
    /// in order.
    pub fn versions(&self) -> Vec<u64> {
        self.stream
            .sources()
            .scans()
            .iter()
            .map(|s| s.snapshot().version())
            .collect()
    }

    /// Rows of the whole table.
    pub fn table_rows(&self) -> Option<u64> {
        Some(self.stream.rows_per_file().iter().sum())
    }

    /// Batches per epoch: the same on every rank and in every epoch (an epoch resumed with
    /// another world size has its own count for the rest of it).
    pub fn iterations_per_epoch(&self) -> u64 {
        self.iterations_per_epoch_over(self.world_size)
    }

    /// Batches per epoch each rank would get over `world_size` ranks (a front end that splits
    /// a rank into workers counts theirs from the rank's loader).
    pub fn iterations_per_epoch_over(&self, world_size: usize) -> u64 {
        match &self.patch_order {
            Some((order, counts)) => order.batches(counts, 0, &[], world_size.max(1)),
            None => self
                .settings
                .batches(self.draws_per_epoch, world_size.max(1)),
        }
    }

    /// Rows an epoch draws over all ranks: the table's rows (those its filter keeps), or what
    /// [`LoaderBuilder::with_sampling`](crate::LoaderBuilder::with_sampling) makes of them (a
    /// split's rows, an epoch size, a subset).
    pub fn draws_per_epoch(&self) -> u64 {
        self.draws_per_epoch
    }

    /// Where the run stands after the last batch handed out (before the first: where it
    /// starts). Give it to [`LoaderBuilder::with_state`] to resume right after that batch.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), voxlake_loader::LoaderError> {
    /// use voxlake_loader::{Loader, LoaderState};
    ///
    /// let builder = Loader::builder("/data/cubes-table").with_shuffle(7, 1024).with_epochs(10);
    /// let mut loader = builder.clone().build()?;
    /// for _ in 0..100 {
    ///     let _batch = loader.next().transpose()?;
    /// }
    /// let saved = loader.state().to_json(); // with the model's checkpoint
    /// drop(loader);
    /// let resumed = builder.with_state(LoaderState::from_json(&saved)?).build()?;
    /// # Ok(()) }
    /// ```
    pub fn state(&self) -> LoaderState {
        let p = &self.position;
        LoaderState {
            epoch: p.epoch,
            closed: p
                .closed
                .iter()
                .map(|s| SegmentState {
                    world_size: s.world_size,
                    batches: s.batches,
                    ahead: s.ahead,
                })
                .collect(),
            batches: p.batches,
            ahead: p.ahead,
            samples_in_epoch: p.samples(self.settings.batch_size),
            ..self.state_template.clone()
        }
    }

    /// Where [`with_metrics_port`](crate::LoaderBuilder::with_metrics_port) serves the
    /// metrics (`None` without it).
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.endpoint.as_ref().map(|e| e.address())
    }

    /// The stall meter: per-step waits and compute times of the training loop.
    pub fn stall_meter(&self) -> stall::StallMeter {
        self.meter
    }

    /// Forecasts an epoch of `iterations_per_epoch` steps and a run of `epochs`, from the
    /// timings so far (`None` before the third batch). See [`stall`].
    pub fn forecast(
        &self,
        iterations_per_epoch: u64,
        epochs: u64,
        validation_per_epoch: Duration,
        price_per_hour: Option<f64>,
    ) -> Option<stall::Forecast> {
        let m = &self.meter;
        Some(stall::Forecast::compute(
            m.init,
            m.first_iteration,
            m.steady_iteration()?,
            iterations_per_epoch,
            epochs,
            validation_per_epoch,
            price_per_hour,
        ))
    }

    /// Gives a batch's tensor memory back: a later batch of the same shape is assembled into
    /// it instead of fresh memory (fresh memory costs a page fault per 4 KiB on first touch:
    /// 7 % of a local epoch's profile). Optional: call it when done with a batch's `ndarray`
    /// tensors; two are kept (counted in the memory budget), libtorch tensors and the rest are
    /// dropped.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), voxlake_loader::LoaderError> {
    /// let mut loader = voxlake_loader::Loader::builder("/data/cubes-table").build()?;
    /// while let Some(batch) = loader.next() {
    ///     let batch = batch?;
    ///     // … train on batch.tensors …
    ///     loader.recycle(batch);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recycle(&self, batch: Batch) {
        self.recycler().recycle(batch.tensors);
    }

    /// A handle that gives tensor memory back as [`recycle`](Self::recycle) does, from
    /// wherever the batch's first field ended up (another thread, an owner in another
    /// language); it outlives the loader harmlessly.
    pub fn recycler(&self) -> Recycler {
        Recycler::new(self.recycled.clone(), self.recycle_max)
    }
}

impl Iterator for Loader {
    type Item = Result<Batch, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.trace_failed.take() {
            return Some(Err(e));
        }
        if self.finished {
            return None;
        }
        let start = self.waiting_since.unwrap_or_else(Instant::now);
        let span = (self.trace.as_ref())
            .map(|t| t.next_span(self.counters.batches.load(Ordering::Relaxed)));
        let message = self.rx.recv().map_err(|_| ());
        drop(span);
        self.received(message, start)
    }
}

impl Loader {
    /// [`next`](Iterator::next), waiting at most `wait` for the batch: `Poll::Pending` when
    /// none came in that time (ask again). For a caller that must do something else while it
    /// waits, such as a Python binding checking for Ctrl-C.
    pub fn poll_next(
        &mut self,
        wait: Duration,
    ) -> std::task::Poll<Option<Result<Batch, LoaderError>>> {
        if let Some(e) = self.trace_failed.take() {
            return std::task::Poll::Ready(Some(Err(e)));
        }
        if self.finished {
            return std::task::Poll::Ready(None);
        }
        // The wait is counted from the first ask, once the batch comes.
        let start = *self.waiting_since.get_or_insert_with(Instant::now);
        let span = (self.trace.as_ref())
            .map(|t| t.next_span(self.counters.batches.load(Ordering::Relaxed)));
        let message = match self.rx.recv_timeout(wait) {
            Ok(message) => Ok(message),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => return std::task::Poll::Pending,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(()),
        };
        drop(span);
        std::task::Poll::Ready(self.received(message, start))
    }

    /// What a message from the producer thread (`Err`: the thread is gone) gives the caller
    /// who began waiting at `start`; counted as [`next`](Iterator::next) counts it.
    fn received(
        &mut self,
        message: Result<Msg, ()>,
        start: Instant,
    ) -> Option<Result<Batch, LoaderError>> {
        self.waiting_since = None;
        // At the run's end its threads end before the caller hears it: a fork after it hands
        // none on.
        let mut ended = match message {
            Ok(Msg::Batch(..)) => Ok(true),
            _ => self.wait_for_threads(),
        };
        let item = match message {
            Ok(Msg::Batch(batch, position)) => {
                self.position = position;
                for label in &batch.labels {
                    *self.labels.entry(*label).or_default() += 1;
                }
                for &s in &batch.sources {
                    if let Some(n) = self.sources_delivered.get_mut(s as usize) {
                        *n += 1;
                    }
                }
                Some(Ok(*batch))
            }
            Ok(Msg::Failed(e)) => {
                self.finished = true;
                Some(Err(e))
            }
            Ok(Msg::Done) => {
                self.finished = true;
                None
            }
            Err(()) => {
                self.finished = true;
                Some(Err(match std::mem::replace(&mut ended, Ok(true)) {
                    Err(panic) => panic,
                    _ => LoaderError::Internal(
                        "the loader thread stopped without finishing or reporting an error".into(),
                    ),
                }))
            }
        };
        match ended {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "the loader's threads did not end within {THREADS_WAIT:?} of the run's end"
            ),
            Err(e) => tracing::error!("after the run's end: {e}"),
        }
        let now = Instant::now();
        let waited = now - start;
        let c = &self.counters;
        c.consumer_wait_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        if let Some(Ok(batch)) = &item {
            self.waits.record(waited);
            let m = &mut self.meter;
            m.waited += waited;
            m.samples += batch.len() as u64;
            match self.last_return {
                None => m.init = now - self.started,
                Some(last) => {
                    m.computed += start - last;
                    if m.steps == 1 {
                        m.first_iteration = now - last;
                    } else {
                        m.record_steady(now - last);
                    }
                }
            }
            m.steps += 1;
            self.last_return = Some(now);
            if m.steps == STALL_LOG_AFTER
                && let Some(f) = self.forecast(self.iterations_per_epoch(), 1, Duration::ZERO, None)
            {
                tracing::info!(
                    input_bound = format!("{:.0}%", 100.0 * self.meter.input_bound_fraction()),
                    samples_per_s =
                        format!("{:.0}", self.meter.samples_per_s(self.settings.batch_size)),
                    epoch_s = format!("{:.1}", f.epoch.as_secs_f64()),
                    "stall meter"
                );
            }
        }
        if let Some(Ok(batch)) = &item {
            if c.batches.fetch_add(1, Ordering::Relaxed) == 0 {
                c.first_batch_ns
                    .store(self.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            c.samples.fetch_add(batch.len() as u64, Ordering::Relaxed);
            c.tensor_bytes
                .fetch_add(batch.tensor_bytes() as u64, Ordering::Relaxed);
        }
        if let Some(trace) = &self.trace
            && let Err(e) = trace.delivered(match self.finished {
                true => u64::MAX,
                false => c.batches.load(Ordering::Relaxed),
            })
        {
            self.trace_failed = Some(e);
        }
        if self
            .endpoint
            .as_ref()
            .is_some_and(|e| e.due() || self.finished)
        {
            let metrics = self.metrics();
            if let Some(endpoint) = &mut self.endpoint {
                endpoint.publish(&metrics);
            }
        }
        match item {
            // The run's end: the failure is this call's answer (the next says the end).
            None => self.trace_failed.take().map(Err),
            item => item,
        }
    }
}

impl Loader {
    /// Stops the background work and waits for the loader's threads to end (at most 10 s, the
    /// blocking decodes under way finishing first); an error where they did not end in time.
    /// Where the training loop calls it without holding what a batch transform waits for
    /// (Python's GIL), nothing of the loader outlives the call.
    pub fn close(mut self) -> Result<(), LoaderError> {
        self.stop_work();
        match self.wait_for_threads()? {
            true => Ok(()),
            false => Err(LoaderError::Internal(format!(
                "the loader's threads of {} did not end within {THREADS_WAIT:?} of close()",
                self.stream.scan().snapshot().location()
            ))),
        }
    }

    /// Whether the producer thread (its runtime's threads before it) ended within
    /// [`THREADS_WAIT`]; its panic, where it panicked.
    fn wait_for_threads(&mut self) -> Result<bool, LoaderError> {
        if self.ended.recv_timeout(THREADS_WAIT)
            != Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        {
            return Ok(false);
        }
        // It has nothing left to do but return (or unwind).
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => Err(LoaderError::Panicked {
                stage: "loader".into(),
                object: self.stream.scan().snapshot().location().to_string(),
                message: voxlake_io::panic_message(panic.as_ref()),
            }),
            _ => Ok(true),
        }
    }

    /// Tells the producer to stop, wherever it waits.
    fn stop_work(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake a producer waiting on the stream (a permit is stored if it is not waiting).
        self.shutdown.notify_one();
        // Unblock a producer waiting to send: its send fails once the receiver is gone.
        let (_, dead) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.rx, dead));
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop_work();
    }
}
