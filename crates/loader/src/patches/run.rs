//! A loader of patches (`Sampling::with_patches`): the epochs' patch draws
//! (`voxlake_plan::patch::PatchOrder`, volumes dealt to ranks), each draw's centre and origin
//! a function of (seed, epoch, volume, k), and each batch's bricks read through a lookup of
//! the pinned version on the loader's thread; the iterator, its state and its resume are the
//! row loader's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;
use voxlake_format::{DType, FieldKind, SampleSpec, TensorSpec};
use voxlake_plan::patch::{
    Dims, Pad, PatchDraws, PatchOrder, PatchSampling, grid_origins, origin_for_centre,
};
use voxlake_table::Volumes;

use crate::producer::Msg;
use crate::state::Position;
use crate::{Batch, Epochs, Loader, LoaderBuilder, LoaderError, Lookup, stall};

/// What the patch loader's thread needs.
struct PatchProducer {
    lookup: Lookup,
    volumes: Arc<Volumes>,
    patches: PatchSampling,
    order: PatchOrder,
    /// Each volume's draws an epoch.
    counts: Vec<u64>,
    /// Of a grid, each volume's patches' origins.
    grids: Vec<Vec<Dims>>,
    draws: PatchDraws,
    rank: usize,
    world_size: usize,
    end_epoch: Option<u64>,
    start: Position,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
}

impl LoaderBuilder {
    /// `build()` of a loader of patches (see the module docs).
    pub(crate) fn build_patches(self, started: Instant) -> Result<Loader, LoaderError> {
        let patches = self
            .sampling
            .patches()
            .cloned()
            .ok_or_else(|| LoaderError::Internal("a patch loader without patches".into()))?;
        let refused = |what: &str| {
            Err(LoaderError::Config(format!(
                "option patch: a loader of patches does not take {what} yet"
            )))
        };
        match () {
            _ if self.sources.is_some() => return refused("a mixture of sources"),
            _ if self.transforms.sample.is_some()
                || self.transforms.batch.is_some()
                || !self.transforms.named.is_empty() =>
            {
                return refused("transforms");
            }
            _ if self.device.is_some() => return refused("a device"),
            _ if self.metrics_port.is_some() || self.trace.is_some() => {
                return refused("a metrics endpoint or a trace");
            }
            _ if self.channels_first => {
                return refused("channels_first (bricks keep theirs first)");
            }
            _ => {}
        }
        let mut reads = self.clone();
        reads.sampling = Default::default();
        reads.state = None;
        let lookup = reads.build_lookup()?;
        let volumes = lookup.volumes()?;
        check_volumes(&volumes, &patches)?;
        let settings = self.order_settings();
        let grids = grids(&volumes, &patches)?;
        let order = PatchOrder {
            seed: settings.seed,
            // A grid's patches in order.
            shuffle: settings.shuffle && patches.grid().is_none(),
            window: patches.window(),
            batch_size: self.batch_size,
            uneven: settings.uneven,
        };
        let mut counts: Vec<u64> = match patches.grid() {
            Some(_) => grids.iter().map(|g| g.len() as u64).collect(),
            None => vec![patches.per_volume(); volumes.volumes().len()],
        };
        // A split keeps the volumes whose ids it holds (a volume's patches all in one split).
        if let Some(split) = self.sampling.split() {
            for (count, v) in counts.iter_mut().zip(volumes.volumes()) {
                if !split.contains(&v.id) {
                    *count = 0;
                }
            }
        }
        let draws_per_epoch = counts.iter().sum();
        let stream = lookup.stream().clone();
        let mut checked = settings;
        let start = match &self.state {
            Some(state) => {
                let files = stream.scan().file_set_hash();
                let bytes = lookup.sample_bytes();
                // Ranks dealt whole volumes pad more than a batch: each segment may deliver
                // up to its world's padded epoch.
                let padded: u64 = state
                    .closed
                    .iter()
                    .map(|s| s.world_size)
                    .chain([state.world_size])
                    // A world no run could have is refused by the check, not dealt here.
                    .map(|w| w.min(crate::state::MAX_RANKS))
                    .map(|w| order.batches(&counts, 0, &[], w) * (w * self.batch_size) as u64)
                    .sum();
                let most = padded.max(draws_per_epoch);
                self.check_state(state, &mut checked, &files, bytes, most)?
            }
            None => Position::start(self.start_epoch, self.world_size),
        };
        if self.epochs == Epochs::Infinite && order.batches(&counts, 0, &[], self.world_size) == 0 {
            return Err(LoaderError::Config(format!(
                "endless epochs of no batch: {draws_per_epoch} patches of {} volumes over {} ranks, batches of {}",
                counts.len(),
                self.world_size,
                self.batch_size
            )));
        }
        let spec = patch_spec(&volumes, patches.size())?;
        let state_template = self.state_template(&stream, &settings, &start);
        let counters = lookup.counters().clone();
        let (tx, rx) = crossbeam_channel::bounded(self.prefetch);
        let stop = Arc::new(AtomicBool::new(false));
        let producer = PatchProducer {
            lookup,
            volumes,
            patches,
            order,
            counts: counts.clone(),
            grids,
            draws: voxlake_plan::patch::PatchDraws::new(settings.seed),
            rank: self.rank,
            world_size: self.world_size,
            end_epoch: self.end_epoch(&start),
            start: start.clone(),
            stop: stop.clone(),
            tx,
        };
        let (thread, ended) = spawn(producer)?;
        Ok(Loader {
            rx,
            stop,
            shutdown: Arc::new(tokio::sync::Notify::new()),
            thread: Some(thread),
            ended,
            counters,
            stream,
            spec,
            started,
            settings,
            draws_per_epoch,
            world_size: self.world_size,
            position: start,
            state_template,
            finished: false,
            meter: stall::StallMeter::default(),
            waits: stall::WaitHistogram::default(),
            endpoint: None,
            trace: None,
            trace_failed: None,
            last_return: None,
            recycled: Arc::default(),
            recycle_max: crate::builder::RECYCLED_SPARES,
            waiting_since: None,
            labels: Default::default(),
            sources_delivered: Vec::new(),
            patch_order: Some((order, counts)),
        })
    }
}

/// The options checked against the volumes, before any brick is read: a label field the
/// table counts classes of, each class asked for held by some volume, a patch that fits
/// every volume where it may not be padded.
fn check_volumes(volumes: &Volumes, patches: &PatchSampling) -> Result<(), LoaderError> {
    let config = |m: String| Err(LoaderError::Config(m));
    if volumes.volumes().is_empty() {
        return config("option patch: the table holds no volume".into());
    }
    if let Some(field) = patches.label_field() {
        let fields = volumes.spec().class_fields();
        if !fields.iter().any(|f| f == field) {
            return config(format!(
                "option label_field: '{field}' is not a label field whose classes the table counts (those are {fields:?}; write with class_fields=[...])"
            ));
        }
        for (class, _) in patches.label_probabilities() {
            let held = volumes.volumes().iter().any(|v| {
                v.info
                    .classes
                    .get(field)
                    .is_some_and(|cs| cs.iter().any(|c| c.class == *class && c.count > 0))
            });
            if !held {
                return config(format!(
                    "option label_probabilities: class {class} is in no volume's '{field}'"
                ));
            }
        }
    }
    if patches.pad() == Pad::None {
        let size = patches.size();
        if let Some(v) = volumes
            .volumes()
            .iter()
            .find(|v| (0..3).any(|a| size[a] > v.info.shape[a]))
        {
            return config(format!(
                "option pad: a patch of {size:?} is larger than volume '{}' of {:?} (pad=\"none\")",
                v.id, v.info.shape
            ));
        }
    }
    Ok(())
}

/// Of a grid, each volume's patches' origins (else none).
fn grids(volumes: &Volumes, patches: &PatchSampling) -> Result<Vec<Vec<Dims>>, LoaderError> {
    let Some(overlap) = patches.grid() else {
        return Ok(Vec::new());
    };
    volumes
        .volumes()
        .iter()
        .map(|v| {
            grid_origins(v.info.shape, patches.size(), overlap)
                .map_err(|e| LoaderError::Config(format!("volume '{}': option {e}", v.id)))
        })
        .collect()
}

/// What a batch of patches holds: each volume field over the patch (channels first), then
/// `origin` (int64, 3).
fn patch_spec(volumes: &Volumes, size: Dims) -> Result<SampleSpec, LoaderError> {
    let mut fields = Vec::new();
    for field in volumes.spec().fields() {
        let shape = field.shape(size).into_iter().map(|d| d as usize).collect();
        fields.push((
            field.name.clone(),
            FieldKind::Tensor(TensorSpec::new(shape, field.dtype)),
        ));
    }
    fields.push((
        voxlake_format::volume::ORIGIN_FIELD.to_string(),
        FieldKind::Tensor(TensorSpec::new(vec![3], DType::I64)),
    ));
    SampleSpec::new(fields).map_err(|e| LoaderError::Config(format!("option patch: {e}")))
}

fn spawn(
    producer: PatchProducer,
) -> Result<(std::thread::JoinHandle<()>, crossbeam_channel::Receiver<()>), LoaderError> {
    let (ended, ended_rx) = crossbeam_channel::bounded::<()>(0);
    let live = crate::fork::Live::new();
    let thread = std::thread::Builder::new()
        .name("voxlake-patches".into())
        .spawn(move || {
            let tx = producer.tx.clone();
            let location = producer
                .lookup
                .stream()
                .scan()
                .snapshot()
                .location()
                .to_string();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| producer.run()));
            let msg = match run {
                Ok(Ok(true)) => Some(Msg::Done),
                Ok(Ok(false)) => None,
                Ok(Err(e)) => Some(Msg::Failed(e)),
                Err(panic) => Some(Msg::Failed(LoaderError::Panicked {
                    stage: "patches".into(),
                    object: location,
                    message: voxlake_io::panic_message(panic.as_ref()),
                })),
            };
            if let Some(msg) = msg {
                let _ = tx.send(msg);
            }
            drop(live);
            drop(ended);
        })
        .map_err(|e| LoaderError::Internal(format!("spawning the patch loader's thread: {e}")))?;
    Ok((thread, ended_rx))
}

impl PatchProducer {
    /// Every epoch; `Ok(false)` when the caller is gone.
    fn run(self) -> Result<bool, LoaderError> {
        let mut at = self.start.clone();
        loop {
            if self.end_epoch.is_some_and(|end| at.epoch >= end) {
                self.lookup.close();
                return Ok(true);
            }
            if !self.run_epoch(&at)? {
                return Ok(false);
            }
            at = Position::start(at.epoch + 1, self.world_size);
        }
    }

    /// The rest of an epoch from `at`; `Ok(false)` when the caller is gone.
    fn run_epoch(&self, at: &Position) -> Result<bool, LoaderError> {
        let epoch = at.epoch;
        let draws = self
            .order
            .draws(&self.counts, epoch, &at.closed, self.world_size, self.rank);
        let batch = self.order.batch_size.max(1);
        let total = (draws.len() / batch) as u64;
        let before = at.batches_before(self.rank);
        let ahead = u64::from(self.rank < at.ahead);
        let mut delivered = at.batches_of(self.rank);
        while delivered < total {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let chunk = &draws[delivered as usize * batch..(delivered as usize + 1) * batch];
            let at_patches: Vec<(usize, [i64; 3])> = chunk
                .iter()
                .map(|d| self.place(epoch, d.volume, d.k))
                .collect::<Result<_, _>>()?;
            let mut made: Batch =
                self.lookup
                    .patches(self.patches.size(), self.patches.pad(), &at_patches)?;
            made.epoch = epoch;
            made.index = before + delivered;
            delivered += 1;
            let position = match delivered >= total {
                true => Position::start(epoch + 1, self.world_size),
                false => Position {
                    epoch,
                    closed: at.closed.clone(),
                    world_size: self.world_size,
                    batches: delivered - ahead,
                    ahead: at.ahead,
                },
            };
            if self.tx.send(Msg::Batch(Box::new(made), position)).is_err() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Where draw `k` of volume `volume` sits: its centre (uniform, or by its voxel's class)
    /// and the origin the padding makes of it.
    fn place(&self, epoch: u64, volume: u64, k: u64) -> Result<(usize, [i64; 3]), LoaderError> {
        if let Some(origin) = self
            .grids
            .get(volume as usize)
            .and_then(|g| g.get(k as usize))
        {
            return Ok((volume as usize, origin.map(|o| o as i64)));
        }
        let v = &self.volumes.volumes()[volume as usize];
        let shape = v.info.shape;
        let classes: Vec<(i64, &[Dims])> = match self.patches.label_field() {
            Some(field) => v
                .info
                .classes
                .get(field)
                .map(|cs| cs.iter().map(|c| (c.class, c.coords.as_slice())).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let centre = self.draws.centre(
            epoch,
            volume,
            k,
            shape,
            self.patches.label_probabilities(),
            &classes,
        );
        let origin = origin_for_centre(shape, self.patches.size(), centre, self.patches.pad())
            .map_err(|e| LoaderError::Config(format!("volume '{}': {e}", v.id)))?;
        Ok((volume as usize, origin))
    }
}
