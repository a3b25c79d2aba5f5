//! `voxlake._voxlake.Lookup`: the Rust [`Lookup`](voxlake_loader::Lookup) (a table's rows by
//! position or id) for `voxlake.torch.MapDataset`. Opened at construction with the GIL
//! released; each take is one batch dict, as `voxlake.Loader` hands them out. A lookup built
//! in another process (a forked `DataLoader` worker's copy) is refused, never used: its
//! threads are the parent's.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::LabelColumn;
use crate::errors::{config, loader_error, no_panic};

/// An opened lookup and the process that opened it.
struct Opened {
    pid: u32,
    lookup: voxlake_loader::Lookup,
    labels: LabelColumn,
}

/// A table's rows by position (`0..len`, in the order the version fixes) or id, as batch dicts
/// (each field, `label`, `id`). The keyword arguments are `voxlake.Loader`'s (the streaming
/// ones, such as the shuffle buffer or the rank, are not used); the version is resolved once,
/// when the lookup opens.
#[pyclass(module = "voxlake._voxlake", name = "Lookup")]
pub(crate) struct Lookup {
    table: String,
    opened: Mutex<Option<Opened>>,
}

impl Lookup {
    /// Runs `f` on the lookup, the GIL released while its lock is waited for too (a thread
    /// holding it may need the GIL: a batch transform); refused once closed or in another
    /// process.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&voxlake_loader::Lookup, LabelColumn) -> T + Send,
    ) -> PyResult<T> {
        let table = voxlake::io::redact(&self.table);
        let done = py.detach(|| {
            let opened = self
                .opened
                .lock()
                .map_err(|_| "the lookup's lock was poisoned by a panic".to_string())?;
            match opened.as_ref() {
                Some(o) if o.pid == std::process::id() => Ok(f(&o.lookup, o.labels)),
                Some(_) => Err(format!(
                    "this Lookup of {table} was opened in another process (this one was forked from it): open one here"
                )),
                None => Err(format!("this Lookup of {table} was closed")),
            }
        });
        done.map_err(config)
    }

    /// `batch` (or its error) as a dict.
    fn dict<'py>(
        py: Python<'py>,
        batch: Result<voxlake_loader::Batch, voxlake_loader::LoaderError>,
        recycler: voxlake_loader::Recycler,
        labels: LabelColumn,
    ) -> PyResult<Bound<'py, PyDict>> {
        let batch = batch.map_err(loader_error)?;
        no_panic("handing a batch to numpy", || {
            crate::arrays::batch_dict(py, batch, recycler, labels)
        })?
    }
}

#[pymethods]
impl Lookup {
    #[new]
    #[pyo3(signature = (table, **options))]
    fn new(py: Python<'_>, table: String, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let builder = voxlake_loader::Loader::builder(&table);
        let (builder, gathered) = crate::options::apply(builder, options)?;
        crate::logs::install();
        let built = py.detach(|| no_panic("opening the table", || builder.build_lookup()));
        let drained = crate::logs::drain(py);
        let lookup = built?.map_err(loader_error)?;
        drained?;
        let labels = LabelColumn::from_column(lookup.label_column());
        gathered.batch_transform.built(labels);
        Ok(Lookup {
            table,
            opened: Mutex::new(Some(Opened {
                pid: std::process::id(),
                lookup,
                labels,
            })),
        })
    }

    /// Rows of the version.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |l, _| l.len() as usize)
    }

    /// The table version read.
    #[getter]
    fn version(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |l, _| l.version())
    }

    /// The rows at `positions`, in the order asked, as one batch dict.
    fn take<'py>(&self, py: Python<'py>, positions: Vec<u64>) -> PyResult<Bound<'py, PyDict>> {
        let (batch, recycler, labels) =
            self.with(py, |l, labels| (l.take(&positions), l.recycler(), labels))?;
        Self::dict(py, batch, recycler, labels)
    }

    /// The rows of `ids`, in the order asked, as one batch dict.
    fn take_ids<'py>(&self, py: Python<'py>, ids: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
        let (batch, recycler, labels) = self.with(py, |l, labels| {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            (l.take_ids(&ids), l.recycler(), labels)
        })?;
        Self::dict(py, batch, recycler, labels)
    }

    /// The position of each of `ids`.
    fn positions(&self, py: Python<'_>, ids: Vec<String>) -> PyResult<Vec<u64>> {
        self.with(py, |l, _| {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            l.positions(&ids)
        })?
        .map_err(loader_error)
    }

    /// A bricked table's volumes, in their numbers' order: each a dict of `id`, `label` and
    /// its info (`shape`, `spacing` where known, `classes`: per class field, each class's
    /// `count` and voxel `coords`).
    fn volumes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        #[derive(serde::Serialize)]
        struct Listed<'a> {
            id: &'a str,
            label: Option<i64>,
            #[serde(flatten)]
            info: &'a voxlake::format::volume::VolumeInfo,
        }
        let volumes = self.with(py, |l, _| l.volumes())?;
        // A volume left out is said (a warning) through Python's logging.
        crate::logs::drain(py)?;
        let volumes = volumes.map_err(loader_error)?;
        let listed: Vec<Listed<'_>> = volumes
            .volumes()
            .iter()
            .map(|v| Listed {
                id: &v.id,
                label: v.label,
                info: &v.info,
            })
            .collect();
        crate::compact::to_python(py, &listed)
    }

    /// Patches of `size` voxels at `at` (each a volume's number and the patch's origin, z, y,
    /// x), padded as `pad` says (`"zero"`, `"edge"`, `"none"`), as one batch dict: each volume
    /// field `[B, C?, pz, py, px]`, `origin`, `label`, `id` (the volumes').
    #[pyo3(signature = (size, at, pad="zero"))]
    fn patches<'py>(
        &self,
        py: Python<'py>,
        size: [u64; 3],
        at: Vec<(usize, [i64; 3])>,
        pad: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        use voxlake::plan::patch::Pad;
        let pad = match pad {
            "zero" => Pad::Zero,
            "edge" => Pad::Edge,
            "none" => Pad::None,
            other => {
                return Err(config(format!(
                    "pad={other:?}: one of \"zero\", \"edge\", \"none\""
                )));
            }
        };
        let (batch, recycler, labels) = self.with(py, |l, labels| {
            (l.patches(size, pad, &at), l.recycler(), labels)
        })?;
        Self::dict(py, batch, recycler, labels)
    }

    /// Every id, in position order.
    fn ids(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, |l, _| l.id_list())?.map_err(loader_error)
    }

    /// The epoch the transforms are seeded with (a sampler's `set_epoch`).
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.with(py, |l, _| l.set_epoch(epoch))
    }

    /// The tensor fields and their element types (`bf16` is handed out as `uint16` bits).
    fn fields(&self, py: Python<'_>) -> PyResult<Vec<(String, &'static str)>> {
        self.with(py, |l, _| {
            l.spec()
                .tensors()
                .map(|(name, spec)| (name.to_string(), spec.dtype().name()))
                .collect()
        })
    }

    /// What the lookups have done so far: the version, and the counters of
    /// `voxlake_loader::LoaderStats::metrics` by name (samples and batches (takes) handed
    /// out, row groups and `bytes_read`, `assemble_s`, `batch_transform_s`, …; the waits of
    /// a loop are a `Loader`'s, zero here).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (stats, version) = self.with(py, |l, _| (l.stats(), l.version()))?;
        let out = PyDict::new(py);
        out.set_item("version", version)?;
        crate::metrics::put(&out, &stats.metrics())?;
        Ok(out)
    }

    /// Ends the lookup's threads, waiting for them, the GIL released: a process that forks
    /// next hands none on. A lookup of another process (a forked copy) is forgotten here.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let taken = self
                .opened
                .lock()
                .map_err(|_| "the lookup's lock was poisoned by a panic".to_string())?
                .take();
            match taken {
                Some(o) if o.pid == std::process::id() => o.lookup.close(),
                Some(o) => std::mem::forget(o),
                None => {}
            }
            Ok::<(), String>(())
        })
        .map_err(config)
    }

    fn __repr__(&self) -> String {
        format!("voxlake.Lookup({})", voxlake::io::redact(&self.table))
    }
}

impl Drop for Lookup {
    fn drop(&mut self) {
        // A forked copy's threads are the parent's: forgotten, never joined.
        if let Ok(mut opened) = self.opened.lock()
            && let Some(o) = opened.take()
            && o.pid != std::process::id()
        {
            std::mem::forget(o);
        }
    }
}
