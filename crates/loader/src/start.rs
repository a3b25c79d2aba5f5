//! `LoaderBuilder::build`: the settings checked, the table opened, the stream, the assembler
//! and the producer's thread started, and the [`Loader`] that the training loop iterates.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use voxlake_delta::AsOf;
use voxlake_plan::plan::Shard;
use voxlake_plan::resume::OrderSettings;
use voxlake_stream::{ReadOptions, TableStream, Verify};

use voxlake_format::SampleSpec;

use crate::assemble::Assembler;
use crate::builder::{INTERLEAVE, LoaderBuilder, RECYCLED_SPARES, batches_outside};
use crate::counters::Counters;
use crate::endpoint::Endpoint;
use crate::producer::Producer;
use crate::state::{LoaderState, Position, STATE_FORMAT};
use crate::{Epochs, Loader, LoaderError, Tensors, budget, stall};

/// The job this process's launcher names, if any ([`voxlake_delta::agree::Job::from_env`]:
/// `VOXLAKE_JOB_ID`, torchrun's run id, Slurm's job id), told how many nodes the launch spans
/// ([`voxlake_plan::launch::nodes_from_env`]); `given` is kept and completed from the
/// launcher's variables. The job a loader whose rank the launcher gives joins.
pub fn launcher_job(given: Option<voxlake_delta::agree::Job>) -> Option<voxlake_delta::agree::Job> {
    voxlake_delta::agree::Job::from_env(given, voxlake_plan::launch::nodes_from_env())
}

impl LoaderBuilder {
    /// The epoch the run ends before (`None`: never) when it starts at `start`. A state
    /// decides where the run is; the run still ends where it would have, but never before the
    /// state's epoch is done, unless the state is that end itself.
    pub(crate) fn end_epoch(&self, start: &Position) -> Option<u64> {
        let Epochs::Count(n) = self.epochs else {
            return None;
        };
        let end = self.start_epoch.saturating_add(n);
        let at_end =
            start.epoch == end && start.batches == 0 && start.ahead == 0 && start.closed.is_empty();
        Some(match self.state.is_some() && !at_end {
            true => end.max(start.epoch.saturating_add(1)),
            false => end,
        })
    }

    /// The rank, world size and job from the launcher where asked for (the launcher's
    /// variables, also where node affinity comes from them); a job of one rank dropped.
    fn place(&mut self) -> Result<Option<voxlake_plan::launch::Launch>, LoaderError> {
        let from_env =
            self.rank_from_env || self.node_affinity == voxlake_plan::launch::NodeAffinity::FromEnv;
        let launch = match from_env {
            true => voxlake_plan::launch::from_env()
                .map_err(|e| LoaderError::Config(format!("the rank from the environment: {e}")))?,
            false => None,
        };
        // The launcher says where and when the job runs, which decides how its ranks agree.
        self.options.job = match (self.options.job.take(), self.rank_from_env) {
            (None, false) => None,
            (given, _) => launcher_job(given),
        };
        if self.rank_from_env {
            (self.rank, self.world_size) = match &launch {
                Some(l) => {
                    tracing::info!(rank = l.rank, world_size = l.world_size, source = %l.source, "rank from the launcher");
                    (l.rank, l.world_size)
                }
                None => {
                    tracing::info!(
                        "no launcher's rank variables are set: one process, rank 0 of 1"
                    );
                    (0, 1)
                }
            };
        }
        if self.world_size == 1 && self.options.job.take().is_some() {
            // One rank: nothing to agree on, nothing written beside the table.
            tracing::debug!("a job of one rank: its version is not published");
        }
        Ok(launch)
    }

    /// Opens the table (its log only) and starts the background work. It blocks while the
    /// table opens, on a runtime of its own: called on a thread that drives async tasks
    /// (tokio refuses to block one on another runtime), it opens on a thread of its own.
    pub fn build(self) -> Result<Loader, LoaderError> {
        // A trace hands the events it does not record on to the caller's subscriber.
        let caller = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        if tokio::runtime::Handle::try_current().is_err() {
            return self.build_here(caller);
        }
        let table = voxlake_io::redact(&self.table);
        std::thread::scope(|s| s.spawn(move || self.build_here(caller)).join()).map_err(
            |panic| LoaderError::Panicked {
                stage: "build".into(),
                object: table,
                message: voxlake_io::panic_message(panic.as_ref()),
            },
        )?
    }

    fn build_here(mut self, caller: tracing::Dispatch) -> Result<Loader, LoaderError> {
        crate::fork::check()?;
        // This thread waits on the runtime while the table opens.
        let _live = crate::fork::Live::new();
        let launch = self.place()?;
        let shard = self.check_sizes()?;
        self.mix_sampling()?;
        self.sampling
            .check()
            .map_err(crate::sampling::config_error)?;
        if self.sampling.patches().is_some() {
            return self.build_patches(Instant::now());
        }
        // A port taken fails before the table is opened.
        let endpoint = self.metrics_port.map(Endpoint::bind).transpose()?;
        // CUDA's context is made while the table opens (`feed::Setup`).
        let warming = match self.device {
            Some(device) => crate::device::warm(device)?,
            None => None,
        };
        let affinity = voxlake_plan::launch::resolve_affinity(
            self.node_affinity,
            self.rank,
            self.world_size,
            launch.as_ref(),
        )
        .map_err(LoaderError::Config)?;
        let versions = self.versions_to_read()?;
        let started = Instant::now();
        let trace = crate::trace::Trace::for_builder(&self, caller)?;
        // The table opens on this thread too.
        let _traced = trace.as_ref().map(|t| t.thread_default());
        let runtime =
            crate::fork::traced_runtime(self.runtime_threads, "voxlake-io", trace.clone())
                .map_err(|e| LoaderError::Internal(format!("tokio runtime: {e}")))?;
        let mut settings = OrderSettings {
            // Node affinity only changes a shuffled order.
            affinity: affinity.filter(|_| self.shuffle.is_some()),
            loosen: voxlake_plan::mixer::Loosen::for_epochs(!self.sampling.is_plain()),
            ..self.order_settings()
        };
        let opened = self.open_stream(&runtime, versions, shard, &mut settings)?;
        let sampler = Arc::new(runtime.block_on(crate::sampling::sampler(
            &opened.stream,
            &self.sampling,
            settings.seed,
        ))?);
        let start = self.check_run(&runtime, &opened, &mut settings, sampler.draws_per_epoch())?;
        let (counters, recycled) = (Arc::new(Counters::default()), Arc::default());
        let assembler = self.assembler(&opened, &settings, &counters, &recycled, warming)?;
        let state_template = self.state_template(&opened.stream, &settings, &start);
        let (tx, rx) = crossbeam_channel::bounded(self.prefetch);
        let producer = Producer {
            stream: opened.stream.clone(),
            assembler,
            settings,
            sampler: sampler.clone(),
            rank: self.rank,
            world_size: self.world_size,
            end_epoch: self.end_epoch(&start),
            start: start.clone(),
            counters: counters.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            shutdown: Arc::new(tokio::sync::Notify::new()),
            tx,
            received: Default::default(),
        };
        let (stop, shutdown) = (producer.stop.clone(), producer.shutdown.clone());
        let sources_delivered = match opened.stream.sources().len() {
            1 => Vec::new(),
            n => vec![0; n],
        };
        let (thread, ended) = spawn_producer(runtime, producer, trace.clone())?;
        Ok(Loader {
            rx,
            stop,
            shutdown,
            thread: Some(thread),
            ended,
            counters,
            stream: opened.stream,
            spec: opened.spec,
            started,
            settings,
            draws_per_epoch: sampler.draws_per_epoch(),
            world_size: self.world_size,
            position: start,
            state_template,
            finished: false,
            meter: stall::StallMeter::default(),
            waits: stall::WaitHistogram::default(),
            endpoint,
            trace,
            trace_failed: None,
            last_return: None,
            recycled,
            recycle_max: RECYCLED_SPARES,
            waiting_since: None,
            labels: Default::default(),
            sources_delivered,
            patch_order: None,
        })
    }

    /// What copies the rows of `opened`'s row groups into batches: its threads (the assembly
    /// pool), the channels' layout and, for a CUDA device, the staging ring (set up beside the
    /// stream's first reads, after the context `warming` made).
    pub(crate) fn assembler(
        &self,
        opened: &Opened,
        settings: &OrderSettings,
        counters: &Arc<Counters>,
        recycled: &Arc<Mutex<Vec<Tensors>>>,
        warming: Option<crate::device::Warming>,
    ) -> Result<Assembler, LoaderError> {
        let feed = match self.device {
            Some(device) => crate::device::staging(device, &opened.spec, self.batch_size, warming)?,
            None => None,
        };
        let pool = match self.assembly_threads {
            1 => None,
            n => Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("voxlake-assemble-{i}"))
                    .build()
                    .map_err(|e| LoaderError::Internal(format!("the assembly threads: {e}")))?,
            )),
        };
        Ok(Assembler {
            sources: opened.stream.sources().clone(),
            spec: opened.spec.clone(),
            input_spec: opened.input_spec.clone(),
            transforms: opened.transforms.clone(),
            seed: settings.seed,
            channels: self.channels(&opened.spec)?,
            counters: counters.clone(),
            hooks: self.read.hooks.clone(),
            device: self.device,
            feed,
            recycled: recycled.clone(),
            spare_samples: Mutex::default(),
            ahead: Mutex::default(),
            pool,
        })
    }

    /// The batch size and thread count checked, and this rank's shard.
    fn check_sizes(&self) -> Result<Shard, LoaderError> {
        if self.batch_size == 0 {
            return Err(LoaderError::Config("batch size must be at least 1".into()));
        }
        if self.assembly_threads == 0 {
            return Err(LoaderError::Config(
                "assembly threads must be at least 1".into(),
            ));
        }
        Shard::new(self.rank, self.world_size).ok_or_else(|| {
            LoaderError::Config(format!(
                "rank {} must be below the world size {} (ranks count from 0)",
                self.rank, self.world_size
            ))
        })
    }

    /// Opens the table (or a mixture's sources) at `versions` and builds the stream of this
    /// rank's `shard` in what the budget leaves it; the shuffle buffer in `settings` cut to
    /// the budget.
    pub(crate) fn open_stream(
        &self,
        runtime: &tokio::runtime::Runtime,
        versions: Vec<AsOf>,
        shard: Shard,
        settings: &mut OrderSettings,
    ) -> Result<Opened, LoaderError> {
        let sources = runtime.block_on(self.open_sources(versions))?;
        let snapshot = sources.scans()[0].snapshot();
        // The table's samples, and what the loader hands out (a transform may change them).
        let input_spec = snapshot.sample().clone();
        let transforms = self
            .transforms
            .resolved(&input_spec)
            .map_err(LoaderError::Config)?;
        let spec = match &transforms.output {
            Some(output) => crate::transform::output_of(&input_spec, output),
            None => input_spec.clone(),
        };
        let sample_bytes = spec.tensor_bytes().max(input_spec.tensor_bytes()).max(1) as u64;
        // The budget covers the batches outside the stream too: those queued for the caller,
        // the one being assembled, the caller's, and the spares kept for recycling; and the
        // table's file list (~80 bytes a file: 8 MB at 10⁵ files).
        let outside = self.outside_bytes(self.batch_size, sample_bytes) + files_bytes(&sources);
        // (Too little left for the stream is refused later, with the smallest budget that works.)
        let stream_budget = self.memory_budget.saturating_sub(outside).max(1024);
        let stream = TableStream::over(sources)
            .with_shard(shard)
            .with_read_options(ReadOptions {
                // Each row is checked just before its copy into a batch (`crate::Check`).
                verify: match self.read.verify {
                    Verify::OnRead => Verify::OnUse,
                    other => other,
                },
                ..self.read.clone()
            })
            .with_shuffle(settings.shuffle)
            .with_seed(settings.seed)
            .with_interleave(INTERLEAVE)
            .with_affinity(settings.affinity)
            .with_row_group_budget(stream_budget);
        let stream = match self.row_group_prefetch {
            Some(n) => stream.with_row_group_prefetch(n),
            None => stream,
        };
        let stream = stream.build();
        // Buffered row groups keep their budget share: the buffer takes at most half of the
        // stream's.
        if let Some((_, rows)) = self.shuffle {
            settings.buffer_rows =
                budget::buffer_rows(stream_budget, sample_bytes, rows, self.batch_size);
            if settings.buffer_rows < rows {
                tracing::warn!(
                    caution = true,
                    requested = rows,
                    fits = settings.buffer_rows,
                    "shuffle buffer reduced to fit the memory budget"
                );
            }
        }
        Ok(Opened {
            stream,
            spec,
            input_spec,
            transforms,
            sample_bytes,
            outside,
        })
    }

    /// Where the run starts (a state's position, checked against the table and `settings`,
    /// which take its order), once the budget and the epochs of `total` draws each are known
    /// to work.
    fn check_run(
        &self,
        runtime: &tokio::runtime::Runtime,
        opened: &Opened,
        settings: &mut OrderSettings,
        total: u64,
    ) -> Result<Position, LoaderError> {
        let Opened {
            stream,
            sample_bytes,
            outside,
            ..
        } = opened;
        let sample_bytes = *sample_bytes;
        // A state brings its own order settings: check them before the budget, which depends
        // on them.
        let start = match &self.state {
            Some(state) => {
                let files = stream.scan().file_set_hash();
                self.check_sources(state, stream)?;
                self.check_state(state, settings, &files, sample_bytes, total)?
            }
            None => Position::start(self.start_epoch, self.world_size),
        };
        let batch_bytes = self.batch_size as u64 * sample_bytes;
        if stream.sources().file_count() > 0 {
            self.check_budget(runtime, stream, settings, sample_bytes)?;
        } else if outside + batch_bytes > self.memory_budget {
            return Err(LoaderError::Config(format!(
                "a memory budget of {} bytes cannot hold the {} batches of {} samples of {sample_bytes} bytes the loader keeps ({} queued ahead, the one being assembled, yours, {RECYCLED_SPARES} spares); the smallest budget that works is {} bytes",
                self.memory_budget,
                batches_outside(self.prefetch),
                self.batch_size,
                self.prefetch,
                outside + batch_bytes
            )));
        }
        if self.epochs == Epochs::Infinite && settings.batches(total, self.world_size) == 0 {
            return Err(LoaderError::Config(format!(
                "endless epochs of no batch: an epoch draws {total} rows, {} per rank of {}, batches of {}{}",
                voxlake_plan::order::rows_per_rank(total, self.world_size, self.read.uneven),
                self.world_size,
                self.batch_size,
                if self.drop_last {
                    " with drop_last"
                } else {
                    ""
                }
            )));
        }
        Ok(start)
    }

    /// The channel axis to move first, where asked: the first field's last (the volume; a
    /// mask has no channel axis).
    fn channels(&self, spec: &SampleSpec) -> Result<Option<usize>, LoaderError> {
        let first = spec.first();
        match (self.channels_first, first.shape().last()) {
            (true, Some(&c)) if first.shape().len() >= 2 => Ok(Some(c)),
            (true, _) => Err(LoaderError::Config(format!(
                "channels first needs at least two axes, the tensors are {:?}",
                first.shape()
            ))),
            (false, _) => Ok(None),
        }
    }

    /// The state at `start` before any batch: what every state of the run shares.
    pub(crate) fn state_template(
        &self,
        stream: &TableStream,
        settings: &OrderSettings,
        start: &Position,
    ) -> LoaderState {
        LoaderState {
            format: STATE_FORMAT,
            table: voxlake_io::redact(&self.table),
            version: stream.scan().snapshot().version(),
            files: stream.scan().file_set_hash(),
            file_count: stream.scan().files().len(),
            seed: settings.seed,
            shuffle: settings.shuffle,
            shuffle_buffer: self.shuffle.map_or(0, |s| s.1),
            buffer_rows: settings.buffer_rows,
            batch_size: settings.batch_size,
            drop_last: settings.drop_last,
            uneven: settings.uneven.as_str().to_string(),
            interleave: settings.interleave,
            nodes: settings.affinity.map_or(1, |a| a.nodes()),
            world_size: self.world_size,
            rank: self.rank,
            epoch: start.epoch,
            closed: Vec::new(),
            batches: 0,
            ahead: 0,
            samples_in_epoch: 0,
            sampling: self.sampling.options(),
            sources: crate::state::sources_of(self.sources.as_deref().unwrap_or_default(), stream),
        }
    }
}

/// The table opened and its stream built, with what the budget counts.
pub(crate) struct Opened {
    pub(crate) stream: TableStream,
    /// What the loader hands out (after transforms).
    spec: SampleSpec,
    /// The table's samples.
    input_spec: SampleSpec,
    /// The transforms, those chosen by name made for `input_spec`.
    transforms: crate::transform::Transforms,
    /// The larger sample of the two.
    pub(crate) sample_bytes: u64,
    /// The budget's bytes outside the stream: the batches the loader keeps, the file list.
    outside: u64,
}

/// Bytes the sources' file lists take (~80 bytes a file).
pub(crate) fn files_bytes(sources: &voxlake_stream::Sources) -> u64 {
    sources
        .scans()
        .iter()
        .map(|s| (s.snapshot().files().memory_size() + s.memory_size()) as u64)
        .sum()
}

/// Runs `producer` on a thread of its own, on `runtime`, which goes with it; with the
/// receiver its thread closes as it ends, the runtime's threads ended first.
fn spawn_producer(
    runtime: tokio::runtime::Runtime,
    producer: Producer,
    trace: Option<Arc<crate::trace::Trace>>,
) -> Result<(std::thread::JoinHandle<()>, crossbeam_channel::Receiver<()>), LoaderError> {
    let (ended, ended_rx) = crossbeam_channel::bounded::<()>(0);
    let live = crate::fork::Live::new();
    let thread = std::thread::Builder::new()
        .name("voxlake-loader".into())
        .spawn(move || {
            let _traced = trace.as_ref().map(|t| t.thread_default());
            runtime.block_on(producer.run());
            runtime.shutdown_timeout(crate::loader::THREADS_WAIT);
            drop(live);
            drop(ended);
        })
        .map_err(|e| LoaderError::Internal(format!("spawning the loader thread: {e}")))?;
    Ok((thread, ended_rx))
}
