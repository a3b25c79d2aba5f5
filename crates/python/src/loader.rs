//! `voxlake.Loader`: the Rust [`Loader`](voxlake_loader::Loader) as a Python iterator of
//! batches (dicts of numpy arrays). The table is opened when iteration starts (so that
//! `load_state_dict` and `set_epoch` come first); the GIL is released while the table opens
//! and while a batch is awaited, and a wait looks for Ctrl-C every 50 ms. A pass that ends
//! moves the next one on to the epoch after it, as a sampler's `set_epoch` would.

use std::sync::{Mutex, MutexGuard};
use std::task::Poll;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voxlake_loader::{LoaderState, Recycler};

use crate::arrays::LabelColumn;
use crate::errors::{config, internal, loader_error, no_panic};
use crate::options::{self, SIGNAL_CHECK};

/// What a `Loader` holds between calls.
struct Inner {
    /// The loader of the pass under way, if one was built.
    running: Option<Running>,
    /// A state to resume from, for the next build.
    state: Option<LoaderState>,
    /// The first epoch of the next build (`set_epoch`).
    start_epoch: u64,
}

impl Inner {
    /// Stops the pass under way, if any, and waits for its threads, the GIL released (a batch
    /// transform may be waiting for it): a process that forks next hands none of them on. In
    /// a process forked since it was built (a `DataLoader` worker that inherited it), its
    /// threads are the parent's: it is forgotten there, never stopped or freed.
    fn discard(&mut self) -> PyResult<()> {
        let Some(running) = self.running.take() else {
            return Ok(());
        };
        if running.pid != std::process::id() {
            std::mem::forget(running);
            return Ok(());
        }
        let Running { loader, .. } = running;
        Python::attach(|py| py.detach(|| loader.close())).map_err(loader_error)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = self.discard() {
            tracing::warn!("dropping a Loader: {e}");
        }
    }
}

/// A built loader, whether it has handed out a batch, whether it has ended.
struct Running {
    /// The process that built it: a process forked since has none of its threads.
    pid: u32,
    loader: voxlake_loader::Loader,
    recycler: Recycler,
    labels: LabelColumn,
    /// What the build shares with a `batch_transform` callable.
    batch_transform: crate::batch_transform::Shared,
    started: bool,
    ended: bool,
}

/// Batches of a voxlake (Delta) table: iterate it for dicts of field name → numpy array
/// (no copy: the arrays look at the loader's buffers), plus `label` and `id`. The keyword
/// arguments are those of `voxlake.loader_options()`; `help(voxlake.Loader)` lists them.
#[pyclass(module = "voxlake._voxlake", name = "Loader")]
pub(crate) struct Loader {
    table: crate::mixture::Table,
    options: Option<Py<PyDict>>,
    inner: Mutex<Inner>,
}

impl Loader {
    /// The inner state, its lock waited for with the GIL released (the thread holding it may
    /// be waiting for the GIL).
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Inner>> {
        if crate::batch_transform::in_call() {
            // The loop that waits for this batch holds the lock: waiting here would hang both.
            return Err(config(
                "a batch_transform cannot use a Loader (its loop waits for the batch being transformed)",
            ));
        }
        loop {
            match self.inner.try_lock() {
                Ok(inner) => return Ok(inner),
                Err(std::sync::TryLockError::Poisoned(_)) => {
                    return Err(config("the loader's lock was poisoned by a panic"));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(std::time::Duration::from_millis(1)));
                }
            }
        }
    }

    /// The loader for a new pass: the options applied, the rank resolved, a loaded state
    /// taken; built (the table opened) with the GIL released.
    fn build(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<()> {
        let options = self.options.as_ref().map(|o| o.bind(py).clone());
        let (builder, gathered) = options::apply(self.table.builder(), options.as_ref())?;
        let (rank, world_size, from_env) = match (gathered.rank, gathered.world_size) {
            (Some(rank), Some(world_size)) => (rank, world_size, false),
            _ => {
                let (rank, world_size) = default_rank(py)?;
                (rank, world_size, true)
            }
        };
        let mut builder = builder
            .with_rank(rank, world_size)
            .with_start_epoch(inner.start_epoch);
        // The ranks a launcher started agree on one version through the job it names, as the
        // Rust builder's `with_rank_from_env` does.
        if from_env
            && !gathered.job
            && let Some(job) = voxlake_loader::launcher_job(None)
        {
            builder = builder.with_job(job);
        }
        if let Some(state) = inner.state.take() {
            builder = builder.with_state(state);
        }
        crate::logs::install();
        let shared = gathered.batch_transform.clone();
        let built = build_interruptibly(py, builder, move |loader| {
            shared.built(LabelColumn::of(loader));
        });
        let drained = crate::logs::drain(py);
        let loader = built?;
        drained?;
        let recycler = loader.recycler();
        let labels = LabelColumn::of(&loader);
        inner.discard()?;
        inner.running = Some(Running {
            pid: std::process::id(),
            loader,
            recycler,
            labels,
            batch_transform: gathered.batch_transform,
            started: false,
            ended: false,
        });
        Ok(())
    }
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (table, **options))]
    fn new(table: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let table = crate::mixture::Table::extract(table)?;
        // Checked now, so that a bad option fails where it was written.
        let (_, gathered) = options::apply(table.builder(), options)?;
        if let crate::mixture::Table::Mixture(sources) = &table {
            if sources.is_empty() {
                return Err(config("table: a mixture of no source"));
            }
            gathered
                .spec
                .clone()
                .with_shares(table.shares())
                .check()
                .map_err(|e| config(format!("option {e}")))?;
        }
        Ok(Loader {
            table,
            options: options.map(|o| o.copy()).transpose()?.map(Bound::unbind),
            inner: Mutex::new(Inner {
                running: None,
                state: None,
                start_epoch: gathered.start_epoch.unwrap_or(0),
            }),
        })
    }

    /// Starts a pass (opening the table) unless one is under way.
    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        let py = slf.py();
        {
            let mut inner = slf.lock(py)?;
            if inner.running.as_ref().is_none_or(|r| r.ended) {
                slf.build(py, &mut inner)?;
            }
        }
        Ok(slf)
    }

    /// The next batch; `StopIteration` at the end of the last epoch.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        // The log first, before a batch is taken: a warning raised as an error (a `warnings`
        // filter) must not cost a batch. What this call logs comes out at the next one, or at
        // once where it hands out no batch.
        crate::logs::drain(py)?;
        let next = self.next_batch(py);
        if !matches!(next, Ok(Some(_))) {
            let drained = crate::logs::drain(py);
            if next.is_ok() {
                drained?;
            }
        }
        next
    }

    /// Stops the pass under way, if any: its threads end and its memory is freed. The next
    /// `iter()` starts a pass again (at the epoch the stopped one was in).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.lock(py)?;
        inner.discard()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Where the run stands, as a dict to save with a checkpoint: `load_state_dict` on a
    /// new loader (before iterating) resumes exactly after the last batch handed out, with
    /// this or another world size. Opens the table if no pass has started.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut inner = self.lock(py)?;
        let json = match (&inner.running, &inner.state) {
            (Some(running), _) => running.loader.state().to_json(),
            (None, Some(state)) => state.to_json(),
            (None, None) => {
                self.build(py, &mut inner)?;
                match &inner.running {
                    Some(running) => running.loader.state().to_json(),
                    None => return Err(config("the loader was not built")),
                }
            }
        };
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Resume from `state` (a dict from `state_dict`); before iterating.
    fn load_state_dict(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let json: String = match state.extract::<String>() {
            Ok(text) => text,
            Err(_) => py
                .import("json")?
                .call_method1("dumps", (state,))?
                .extract()?,
        };
        let state = LoaderState::from_json(&json).map_err(loader_error)?;
        let mut inner = self.lock(py)?;
        // A pass opened (by `version`, `rank()`, ...) but not iterated is opened again.
        if inner
            .running
            .as_ref()
            .is_some_and(|r| r.started && !r.ended)
        {
            return Err(config(
                "load_state_dict() comes before iterating: this loader has handed out batches of a pass under way",
            ));
        }
        inner.discard()?;
        inner.state = Some(state);
        Ok(())
    }

    /// The epoch the next pass starts at (as with a sampler's `set_epoch`): a pass under way
    /// is dropped, the next `iter()` opens the table at this epoch.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        let mut inner = self.lock(py)?;
        inner.discard()?;
        inner.start_epoch = epoch;
        Ok(())
    }

    /// `(rank, world_size)` of the pass under way (opening the table if none is).
    fn rank(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        self.with_running(py, |r| r.loader.rank())
    }

    /// The batch's tensor fields as `(name, dtype)` (`bf16` fields come as `uint16` arrays of
    /// the same bits; opening the table if no pass is under way).
    fn fields(&self, py: Python<'_>) -> PyResult<Vec<(String, &'static str)>> {
        self.with_running(py, |r| {
            r.loader
                .sample()
                .tensors()
                .map(|(name, spec)| (name.to_string(), spec.dtype().name()))
                .collect()
        })
    }

    /// The table's version read (of a mixture, the first source's; opening the table if no
    /// pass is under way).
    #[getter]
    fn version(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_running(py, |r| r.loader.version())
    }

    /// Where the option `metrics_port` serves the metrics, `(host, port)` (opening the table
    /// if no pass is under way); `None` without it.
    #[getter]
    fn metrics_address(&self, py: Python<'_>) -> PyResult<Option<(String, u16)>> {
        self.with_running(py, |r| {
            r.loader
                .metrics_address()
                .map(|a| (a.ip().to_string(), a.port()))
        })
    }

    /// The version of each table read: the one table's, or each source's of a mixture, in
    /// order (opening the tables if no pass is under way).
    #[getter]
    fn versions(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with_running(py, |r| r.loader.versions())
    }

    /// Batches a rank gets each epoch (opening the table if no pass is under way); over
    /// `world_size` ranks where given.
    #[pyo3(signature = (world_size=None))]
    fn batches_per_epoch(&self, py: Python<'_>, world_size: Option<usize>) -> PyResult<u64> {
        self.with_running(py, |r| match world_size {
            Some(world) => r.loader.iterations_per_epoch_over(world),
            None => r.loader.iterations_per_epoch(),
        })
    }

    /// What the pass under way has done so far: the table version it reads (`version`), the
    /// samples handed out per label value (`labels`: a balanced run's draws of each) and, of a
    /// mixture, per source (`sources`, a list in the sources' order), and every counter of
    /// `voxlake_loader::Loader::metrics` under its name (docs/usage.md, "What `stats()` holds"):
    /// the stages' times, the waits and the exposed wait's quantiles, bytes read, cache hits,
    /// the forecast.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (metrics, version, labels, sources) = self.with_running(py, |r| {
            (
                r.loader.metrics(),
                r.loader.version(),
                r.loader.labels_delivered(),
                r.loader.sources_delivered(),
            )
        })?;
        let out = PyDict::new(py);
        out.set_item("version", version)?;
        crate::metrics::put(&out, &metrics)?;
        let by_label = PyDict::new(py);
        for (label, n) in labels {
            by_label.set_item(label, n)?;
        }
        out.set_item("labels", by_label)?;
        if !sources.is_empty() {
            out.set_item("sources", sources)?;
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("voxlake.Loader({})", self.table.describe())
    }
}

impl Loader {
    /// The next batch of the pass under way (a pass opened if none is).
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut inner = self.lock(py)?;
        if inner.running.is_none() {
            self.build(py, &mut inner)?;
        }
        let Some(running) = inner.running.as_mut() else {
            return Err(config("the loader was not built"));
        };
        if running.ended {
            return Ok(None);
        }
        loop {
            let loader = &mut running.loader;
            let polled = py.detach(|| no_panic("the loader", || loader.poll_next(SIGNAL_CHECK)));
            let polled = polled.inspect_err(|_| running.ended = true)?;
            match polled {
                Poll::Pending => py.check_signals()?,
                Poll::Ready(None) => {
                    running.ended = true;
                    // The next pass reads the epoch after the last one read.
                    inner.start_epoch = running.loader.state().epoch;
                    return Ok(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    running.ended = true;
                    let e = loader_error(e);
                    e.set_cause(py, running.batch_transform.take_raised());
                    return Err(e);
                }
                Poll::Ready(Some(Ok(batch))) => {
                    running.started = true;
                    let (recycler, labels) = (running.recycler.clone(), running.labels);
                    let dict = no_panic("handing a batch to numpy", || {
                        crate::arrays::batch_dict(py, batch, recycler, labels)
                    });
                    return dict.and_then(|d| d).map(Some);
                }
            }
        }
    }

    fn with_running<T>(&self, py: Python<'_>, f: impl FnOnce(&Running) -> T) -> PyResult<T> {
        let mut inner = self.lock(py)?;
        if inner.running.is_none() {
            self.build(py, &mut inner)?;
        }
        inner
            .running
            .as_ref()
            .map(f)
            .ok_or_else(|| config("the loader was not built"))
    }
}

/// `builder.build()` (the table opened: round trips to the store) on its own thread, waited for
/// with the GIL released and Ctrl-C looked for every 50 ms: an interrupt ends the wait with
/// `KeyboardInterrupt`, and the thread's loader, when it comes, is dropped. `built` runs on
/// that thread with the loader built, without the GIL (the loader's own thread may already be
/// waiting for it: a batch transform waits for the table's label column).
fn build_interruptibly(
    py: Python<'_>,
    builder: voxlake_loader::LoaderBuilder,
    built: impl FnOnce(&voxlake_loader::Loader) + Send + 'static,
) -> PyResult<voxlake_loader::Loader> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let opening = std::thread::Builder::new()
        .name("voxlake-open".into())
        .spawn(move || {
            let loader = builder.build();
            if let Ok(loader) = &loader {
                built(loader);
            }
            let _ = tx.send(loader);
        })
        .map_err(|e| config(format!("cannot start the thread that opens the table: {e}")))?;
    loop {
        match py.detach(|| rx.recv_timeout(SIGNAL_CHECK)) {
            Ok(built) => {
                // It has sent its last: a fork after this call finds it gone.
                if let Err(panic) = py.detach(|| opening.join()) {
                    return Err(internal(format!(
                        "the thread that opened the table panicked after it answered: {}",
                        voxlake::io::panic_message(panic.as_ref())
                    )));
                }
                return built.map_err(loader_error);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(config(
                    "the thread that opened the table stopped without an answer",
                ));
            }
        }
    }
}

/// Threads of this process's loaders that a fork would inherit (`voxlake_loader::live_threads`):
/// zero where a `DataLoader` may fork its workers.
#[pyfunction]
pub(crate) fn live_threads() -> usize {
    voxlake_loader::live_threads()
}

/// The job the launcher's variables name (`VOXLAKE_JOB_ID`, `TORCHELASTIC_RUN_ID` unless
/// `none`, `SLURM_JOB_ID`), if any: the job a loader whose rank is left to the environment
/// joins.
#[pyfunction]
pub(crate) fn default_job() -> Option<String> {
    voxlake_loader::launcher_job(None).map(|job| job.id)
}

/// This process's `(rank, world_size)` where none is given: torch.distributed's where it is
/// initialized, else the launcher's variables (torchrun's `RANK`/`WORLD_SIZE`, Open MPI's,
/// MPICH's, Slurm's), else `(0, 1)`.
#[pyfunction]
pub(crate) fn default_rank(py: Python<'_>) -> PyResult<(usize, usize)> {
    // Only where the program imported it: importing torch here would cost seconds.
    let modules = py.import("sys")?.getattr("modules")?;
    if let Ok(dist) = modules.get_item("torch.distributed")
        && dist.call_method0("is_available")?.is_truthy()?
        && dist.call_method0("is_initialized")?.is_truthy()?
    {
        let rank = dist.call_method0("get_rank")?.extract()?;
        let world_size = dist.call_method0("get_world_size")?.extract()?;
        return Ok((rank, world_size));
    }
    match voxlake::plan::launch::from_env() {
        Ok(Some(launch)) => Ok((launch.rank, launch.world_size)),
        Ok(None) => Ok((0, 1)),
        Err(e) => Err(config(e)),
    }
}
