//! The `batch_transform` option of `voxlake.Loader`: a Python callable `f(batch, rng)` run on
//! every batch on the loader's own thread, ahead of the training loop (the Rust builder's
//! `with_batch_transform`). It gets the batch as the loop would (a dict of writable numpy
//! arrays looking at the batch's buffers, `label`, `id`) and a `numpy.random.Generator`
//! seeded from (seed, epoch, batch index), so a resume repeats it. It changes the arrays in
//! place and returns `None`, or returns a dict whose arrays replace the fields it names (any
//! shape with the batch's first axis, any numpy element type voxlake knows). Its time is the
//! loader's `batch_transform_s`; what it raises ends the run, the exception the loop gets
//! naming the batch, with the callable's own as its `__cause__`.
//!
//! The GIL: the callable runs with it on the loader's thread, which the consumer's `next()`
//! never waits for with the GIL held, and which dropping a loader never joins. At exit, an
//! `atexit` hook lets the calls under way finish and refuses new ones before the interpreter
//! finalizes: a thread of ours that took the GIL then would be ended by CPython in the middle
//! of Rust frames (an abort). Arrays the callable keeps past its call are left their buffer
//! (the batch gets a copy), so no numpy array ever looks at memory the loader fills again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ndarray::{ArrayD, IxDyn};
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voxlake_loader::transform::{Rng, TransformError, TransformRng};
use voxlake_loader::{Batch, FieldRef, LoaderBuilder, Tensors};

use crate::arrays::{LabelColumn, OWN_KEYS, TensorOwner, field_key, owner_array};
use crate::errors::{config, option};
use crate::extract::type_name;

/// How long the loader's thread waits to learn the table's label column, which the thread that
/// opened the table sets as soon as the loader is built.
const LABELS_WAIT: Duration = Duration::from_secs(60);

/// How long the exit hook waits for the calls under way.
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// Set by the exit hook: no callable is called any more.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Loader threads about to call, or calling, a callable.
static CALLING: AtomicUsize = AtomicUsize::new(0);

/// The `atexit` hook: refuses new calls and waits (the GIL released) for those under way.
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    if CALLING.load(Ordering::SeqCst) == 0 {
        // Nothing to wait for: the GIL is kept (other threads stay as they were at exit).
        return;
    }
    py.detach(|| {
        let start = Instant::now();
        while CALLING.load(Ordering::SeqCst) > 0 && start.elapsed() < EXIT_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Registered with `os.register_at_fork`: a child process has none of its parent's threads, so
/// none of their calls under way (its exit hook must not wait for them).
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    CALLING.store(0, Ordering::SeqCst);
}

std::thread_local! {
    /// Whether this thread is in a callable's call (a loader's own thread).
    static IN_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is running a `batch_transform` callable: it may not wait for a loader,
/// whose consumer may be waiting for it.
pub(crate) fn in_call() -> bool {
    IN_CALL.with(std::cell::Cell::get)
}

/// A call counted in [`CALLING`] while it lives.
struct Calling;

impl Calling {
    /// A call may start: `None` once the exit hook ran.
    fn start() -> Option<Calling> {
        CALLING.fetch_add(1, Ordering::SeqCst);
        let call = Calling;
        (!EXITING.load(Ordering::SeqCst)).then_some(call)
    }
}

/// Clears [`IN_CALL`] when a call ends, however it ends.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        IN_CALL.with(|c| c.set(false));
    }
}

impl Drop for Calling {
    fn drop(&mut self) {
        CALLING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a `Loader`'s build shares with its batch transform: the table's label column (known
/// once the loader is built, which may be after its first batch is assembled) and the last
/// exception the callable raised (the cause of the error the loop gets).
#[derive(Clone, Default)]
pub(crate) struct Shared {
    labels: Arc<(Mutex<Option<LabelColumn>>, Condvar)>,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl Shared {
    /// The loader is built: its table's label column.
    pub(crate) fn built(&self, labels: LabelColumn) {
        let (cell, ready) = &*self.labels;
        if let Ok(mut cell) = cell.lock() {
            *cell = Some(labels);
            ready.notify_all();
        }
    }

    /// The exception the callable raised, if the run ended on one.
    pub(crate) fn take_raised(&self) -> Option<PyErr> {
        self.raised.lock().ok().and_then(|mut e| e.take())
    }

    /// The table's label column, waited for (without the GIL) until the loader is built.
    fn labels(&self) -> Result<LabelColumn, String> {
        let (cell, ready) = &*self.labels;
        let cell = cell.lock().map_err(|_| "a lock was poisoned".to_string())?;
        let (cell, _) = ready
            .wait_timeout_while(cell, LABELS_WAIT, |c| c.is_none())
            .map_err(|_| "a lock was poisoned".to_string())?;
        cell.ok_or_else(|| "the loader was never built (its label column is unknown)".into())
    }
}

/// `batch_transform`: `v`, a callable, run on every batch by the loader's thread.
pub(crate) fn apply(
    b: LoaderBuilder,
    shared: &Shared,
    v: &Bound<'_, PyAny>,
) -> PyResult<LoaderBuilder> {
    if !v.is_callable() {
        return Err(option(format!(
            "option batch_transform: expected a callable f(batch, rng), got {}",
            type_name(v)
        )));
    }
    let f = v.clone().unbind();
    let shared = shared.clone();
    Ok(b.with_batch_transform(move |batch, rng| run(&f, &shared, batch, rng)))
}

/// One batch through the callable, on the loader's thread.
fn run(
    f: &Py<PyAny>,
    shared: &Shared,
    batch: &mut Batch,
    rng: &mut TransformRng,
) -> Result<(), TransformError> {
    let seed: u64 = rng.random();
    let labels = shared.labels()?;
    let Some(_calling) = Calling::start() else {
        return Err("the Python interpreter is exiting".into());
    };
    IN_CALL.with(|c| c.set(true));
    let _reset = Reset;
    let done = Python::try_attach(|py| {
        call(py, f, batch, seed, labels).map_err(|failed| match failed {
            Failed::Raised(e) => {
                let message = match e.get_type(py).name() {
                    Ok(name) => format!("batch_transform raised {name}: {}", e.value(py)),
                    Err(_) => format!("batch_transform raised {}", e.value(py)),
                };
                if let Ok(mut raised) = shared.raised.lock() {
                    *raised = Some(e);
                }
                message
            }
            Failed::Refused(e) => e.value(py).to_string(),
        })
    });
    match done {
        Some(done) => done.map_err(Into::into),
        None => Err("the Python interpreter is shutting down".into()),
    }
}

/// A batch's tensor field lent to the callable.
struct Lent<'py> {
    name: String,
    owner: Bound<'py, TensorOwner>,
    view: Bound<'py, PyAny>,
    bf16: bool,
}

/// How a call failed.
enum Failed {
    /// The callable raised this.
    Raised(PyErr),
    /// What it returned (or lending the batch) failed: this says why.
    Refused(PyErr),
}

impl From<PyErr> for Failed {
    fn from(e: PyErr) -> Self {
        Failed::Refused(e)
    }
}

/// The call: the batch lent as a dict, the callable's answer taken back into `batch`.
fn call(
    py: Python<'_>,
    f: &Py<PyAny>,
    batch: &mut Batch,
    seed: u64,
    labels: LabelColumn,
) -> Result<(), Failed> {
    let rng = py
        .import("numpy.random")?
        .call_method1("default_rng", (seed,))?;
    let fields: Vec<(String, bool)> = batch
        .fields()
        .into_iter()
        .map(|(name, f)| (name.to_string(), matches!(f, FieldRef::Tensors(_))))
        .collect();
    let given = PyDict::new(py);
    let mut lent = Vec::new();
    for (name, tensor) in &fields {
        field_key(name)?;
        if !tensor {
            given.set_item(name, PyList::new(py, batch.text(name).unwrap_or_default())?)?;
            continue;
        }
        let slot = batch
            .field_mut(name)
            .ok_or_else(|| config(format!("internal error: no tensor field {name}")))?;
        // A batch's tensors are in standard layout (the loader builds them so): the array lent
        // is a view of them, and what the callable writes into it stays in the batch.
        let tensors = std::mem::replace(slot, Tensors::U8(ArrayD::zeros(IxDyn(&[0]))));
        let bf16 = matches!(tensors, Tensors::BF16(_));
        let owner = Bound::new(py, TensorOwner::new(tensors, None))?;
        let view = owner_array(&owner)?;
        given.set_item(name, &view)?;
        lent.push(Lent {
            name: name.clone(),
            owner,
            view,
            bf16,
        });
    }
    labels.set_items(&given, &batch.labels)?;
    given.set_item("id", PyList::new(py, &batch.ids)?)?;

    let answer = f.bind(py).call1((&given, rng)).map_err(Failed::Raised)?;
    // What the callable left in the dict it got, updated with what it returned.
    let out = given.copy()?;
    if !answer.is_none() {
        let answer = answer.cast_into::<PyDict>().map_err(|e| {
            config(format!(
                "batch_transform returned {}, not a dict or None",
                type_name(e.into_inner().as_any())
            ))
        })?;
        for key in answer.keys() {
            let key: String = key.extract()?;
            let known = fields.iter().any(|(n, _)| *n == key)
                || (key == "id")
                || (labels.present && key == "label")
                || (labels.nullable && key == "label_valid");
            if !known {
                return Err(config(format!(
                    "batch_transform returned key {key:?}, which the batch does not have (its fields, {}): add new keys after the loader",
                    OWN_KEYS.join(", ")
                ))
                .into());
            }
        }
        out.update(answer.as_mapping())?;
    }
    let len = batch.len();
    let mut replaced = Vec::with_capacity(lent.len());
    for field in &lent {
        replaced.push(match out.get_item(&field.name)? {
            Some(v) if !v.is(&field.view) => Some(tensors_of(&field.name, &v, len, field.bf16)?),
            _ => None,
        });
    }
    for (name, tensor) in &fields {
        if !tensor {
            read_only(&out, name, batch.text(name).unwrap_or_default())?;
        }
    }
    read_only(&out, "id", &batch.ids)?;
    if labels.present {
        batch.labels = labels_of(&out, len, labels.nullable)?;
    }
    drop((out, given));
    for (field, new) in lent.into_iter().zip(replaced) {
        let Lent {
            name, owner, view, ..
        } = field;
        drop(view);
        let tensors = match new {
            Some(t) => t,
            None => TensorOwner::take_back(owner)?,
        };
        *batch
            .field_mut(&name)
            .ok_or_else(|| config(format!("internal error: no tensor field {name}")))? = tensors;
    }
    Ok(())
}

/// `v`, which the callable returned for field `name`, as the batch's tensors: a copy, its first
/// axis the batch's `len` samples (`uint16` as `bf16` bits where the field was `bf16`).
fn tensors_of(name: &str, v: &Bound<'_, PyAny>, len: usize, bf16: bool) -> PyResult<Tensors> {
    let a = v
        .py()
        .import("numpy")?
        .call_method1("ascontiguousarray", (v,))?;
    let shape: Vec<usize> = a.getattr("shape")?.extract()?;
    if shape.first() != Some(&len) {
        return Err(config(format!(
            "batch_transform returned field {name:?} of shape {shape:?}: its first axis is the batch's {len} samples"
        )));
    }
    let kind: String = a.getattr("dtype")?.getattr("name")?.extract()?;
    macro_rules! copy {
        ($t:ty, $variant:ident) => {
            Tensors::$variant(a.cast::<PyArrayDyn<$t>>()?.readonly().as_array().to_owned())
        };
    }
    Ok(match kind.as_str() {
        "bool" => copy!(bool, Bool),
        "int8" => copy!(i8, I8),
        "int16" => copy!(i16, I16),
        "int32" => copy!(i32, I32),
        "int64" => copy!(i64, I64),
        "uint8" => copy!(u8, U8),
        "uint16" if bf16 => Tensors::BF16(
            a.cast::<PyArrayDyn<u16>>()?
                .readonly()
                .as_array()
                .mapv(half::bf16::from_bits),
        ),
        "uint16" => copy!(u16, U16),
        "uint32" => copy!(u32, U32),
        "uint64" => copy!(u64, U64),
        "float16" => copy!(half::f16, F16),
        "float32" => copy!(f32, F32),
        "float64" => copy!(f64, F64),
        other => {
            return Err(config(format!(
                "batch_transform returned field {name:?} of numpy dtype {other}, which voxlake has no element type for"
            )));
        }
    })
}

/// Checks that the callable left `key` (a text field or the ids) as it was.
fn read_only(out: &Bound<'_, PyDict>, key: &str, was: &[String]) -> PyResult<()> {
    let now = out.get_item(key)?.map(|v| v.extract::<Vec<String>>());
    match now {
        Some(Ok(now)) if now == was => Ok(()),
        _ => Err(config(format!(
            "batch_transform changed {key:?}: text fields and ids are read only (rows keep their ids)"
        ))),
    }
}

/// The labels the callable left in `out` (`label`, with `label_valid` where nulls may be).
fn labels_of(out: &Bound<'_, PyDict>, len: usize, nullable: bool) -> PyResult<Vec<Option<i64>>> {
    let np = out.py().import("numpy")?;
    // Kinds numpy converts without loss: labels are integers, validity bools (a float label
    // would be truncated by a cast, so it is refused instead).
    let column = |key: &str, kinds: &str| -> PyResult<Bound<'_, PyAny>> {
        let v = out
            .get_item(key)?
            .ok_or_else(|| config(format!("batch_transform dropped {key:?}")))?;
        let a = np.call_method1("asarray", (v,))?;
        let shape: Vec<usize> = a.getattr("shape")?.extract()?;
        let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
        if shape != [len] || !kinds.contains(kind.as_str()) {
            let dtype: String = a.getattr("dtype")?.getattr("name")?.extract()?;
            return Err(config(format!(
                "batch_transform returned {key:?} of shape {shape:?} and dtype {dtype}, not the batch's [{len}] of {}",
                if kinds == "b" { "bools" } else { "integers" }
            )));
        }
        Ok(a)
    };
    let values: Vec<i64> = column("label", "iub")?.call_method0("tolist")?.extract()?;
    let valid: Vec<bool> = match nullable {
        true => column("label_valid", "b")?
            .call_method0("tolist")?
            .extract()?,
        false => vec![true; len],
    };
    Ok(values
        .into_iter()
        .zip(valid)
        .map(|(v, ok)| ok.then_some(v))
        .collect())
}
