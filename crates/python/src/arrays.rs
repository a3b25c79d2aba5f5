//! A batch's buffers handed to numpy without a copy. The first field's tensor is owned by a
//! [`TensorOwner`], the numpy array's `base`: when Python frees the array, the owner gives
//! the memory back to its loader ([`Recycler`]) to be filled again. The other tensor fields
//! and the labels become arrays that own their Rust buffers (numpy's `from_owned_array`: the
//! buffer moves, its bytes do not); text fields and the ids become lists of str.

use std::sync::Mutex;

use ndarray::ArrayD;
use numpy::{Element, PyArray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voxlake_loader::{Batch, FieldBatch, Recycler, Tensors, each_tensor};

/// Owns a batch's tensor while numpy arrays look at it; gives it back to the loader (where
/// it has a recycler: the first field's) when the last of them is freed.
#[pyclass(module = "voxlake._voxlake", frozen)]
pub(crate) struct TensorOwner {
    /// Behind a lock only to be `Sync` (a libtorch tensor is not) and to be taken back by a
    /// batch transform's caller once no array looks at it.
    tensors: Mutex<Option<Tensors>>,
    recycler: Option<Recycler>,
}

impl Drop for TensorOwner {
    fn drop(&mut self) {
        let tensors = self.tensors.get_mut().ok().and_then(Option::take);
        if let (Some(tensors), Some(recycler)) = (tensors, &self.recycler) {
            recycler.recycle(tensors);
        }
    }
}

#[pymethods]
impl TensorOwner {
    fn __repr__(&self) -> String {
        match self.tensors.lock().as_deref() {
            Ok(Some(t)) => format!("<voxlake tensor buffer {:?} {:?}>", t.dtype(), t.shape()),
            _ => "<voxlake tensor buffer>".to_string(),
        }
    }
}

impl TensorOwner {
    /// An owner of `tensors`, given back to `recycler` (if any) when it is freed.
    pub(crate) fn new(tensors: Tensors, recycler: Option<Recycler>) -> Self {
        TensorOwner {
            tensors: Mutex::new(Some(tensors)),
            recycler,
        }
    }

    /// The tensors back, where no array looks at them any more (`owner` is the one reference
    /// left); else a copy, the original left to the arrays that still look at it.
    pub(crate) fn take_back(owner: Bound<'_, TensorOwner>) -> PyResult<Tensors> {
        // Safety: `owner` is a live object and this thread holds the GIL.
        let alone = unsafe { pyo3::ffi::Py_REFCNT(owner.as_ptr()) } == 1;
        let mut held = owner.get().tensors.lock().map_err(|_| poisoned())?;
        let tensors = match alone {
            true => held.take(),
            false => held.clone(),
        };
        tensors.ok_or_else(given_back_twice)
    }
}

/// A view of `array`, kept alive by `owner` (the numpy array's `base`).
fn borrowed<'py, T: Element>(
    array: &ArrayD<T>,
    owner: &Bound<'py, TensorOwner>,
) -> Bound<'py, PyAny> {
    // Safety: the view's memory is `owner`'s tensor, which `owner` holds unmoved (a frozen
    // pyclass: taken out only by `take_back`, when no array looks at it) until numpy drops
    // its reference to `owner`, the array's base; no Rust code touches the buffer meanwhile.
    unsafe { PyArray::borrow_from_array(array, owner.clone().into_any()) }.into_any()
}

fn poisoned() -> PyErr {
    crate::errors::internal("internal error: a tensor buffer's lock was poisoned")
}

fn given_back_twice() -> PyErr {
    crate::errors::internal("internal error: a tensor buffer was given back twice")
}

/// The first field as a numpy array whose base is its [`TensorOwner`].
fn first_array<'py>(
    py: Python<'py>,
    tensors: Tensors,
    recycler: Recycler,
) -> PyResult<Bound<'py, PyAny>> {
    let owner = Bound::new(py, TensorOwner::new(tensors, Some(recycler)))?;
    owner_array(&owner)
}

/// A writable numpy array of `owner`'s tensors, whose base is `owner` (`bf16` as `uint16`).
pub(crate) fn owner_array<'py>(owner: &Bound<'py, TensorOwner>) -> PyResult<Bound<'py, PyAny>> {
    let held = owner.get().tensors.lock().map_err(|_| poisoned())?;
    let Some(held) = held.as_ref() else {
        return Err(given_back_twice());
    };
    if let Tensors::BF16(a) = held {
        // numpy has no bfloat16: the same bits as uint16 (`voxlake.torch` views them as
        // `torch.bfloat16`).
        return match a.as_slice() {
            Some(values) => {
                let bits: &[u16] = bf16_bits(values);
                let view = ndarray::ArrayViewD::from_shape(a.shape(), bits)
                    .map_err(|e| crate::errors::internal(format!("a bf16 field's shape: {e}")))?;
                // Safety: as `borrowed`: the view's memory is the owner's tensor.
                Ok(
                    unsafe { PyArray::borrow_from_array(&view, owner.clone().into_any()) }
                        .into_any(),
                )
            }
            None => {
                Ok(PyArray::from_owned_array(owner.py(), a.mapv(half::bf16::to_bits)).into_any())
            }
        };
    }
    Ok(each_tensor!(held, a => borrowed(a, owner), _ => return Err(not_numpy())))
}

/// bf16 values as their bits.
fn bf16_bits(values: &[half::bf16]) -> &[u16] {
    // Safety: `bf16` is a `repr(transparent)` `u16`: same size, alignment and validity.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u16>(), values.len()) }
}

/// A tensor field as a numpy array owning its buffer.
fn owned_array(py: Python<'_>, tensors: Tensors) -> PyResult<Bound<'_, PyAny>> {
    if let Tensors::BF16(a) = tensors {
        return Ok(PyArray::from_owned_array(py, a.mapv(half::bf16::to_bits)).into_any());
    }
    Ok(
        each_tensor!(tensors, a => PyArray::from_owned_array(py, a).into_any(), _ => return Err(not_numpy())),
    )
}

/// The error for libtorch tensors, which the Python package's loader never asks for.
fn not_numpy() -> PyErr {
    crate::errors::config("a batch of libtorch tensors cannot be handed to numpy")
}

/// The table's labels as every batch of it holds them: whether it has a label column, and
/// whether that column may hold nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabelColumn {
    pub present: bool,
    pub nullable: bool,
}

impl LabelColumn {
    /// The label column of `loader`'s table.
    pub(crate) fn of(loader: &voxlake_loader::Loader) -> Self {
        Self::from_column(loader.label_column())
    }

    /// A table's label column as `label_column()` names it (name, nullable), if any.
    pub(crate) fn from_column(column: Option<(&str, bool)>) -> Self {
        match column {
            Some((_, nullable)) => LabelColumn {
                present: true,
                nullable,
            },
            None => LabelColumn {
                present: false,
                nullable: false,
            },
        }
    }

    /// `labels` into `out` as a batch dict holds them: `label` (an int64 array, a null as 0)
    /// and `label_valid` (where the column may hold nulls); nothing where there is no column.
    pub(crate) fn set_items(
        &self,
        out: &Bound<'_, PyDict>,
        labels: &[Option<i64>],
    ) -> PyResult<()> {
        if !self.present {
            return Ok(());
        }
        let py = out.py();
        let valid: Vec<bool> = labels.iter().map(Option::is_some).collect();
        if !self.nullable && valid.contains(&false) {
            return Err(crate::errors::raise(
                crate::errors::Kind::Table,
                "a null label in a label column whose schema says it is never null",
                false,
            ));
        }
        let values: Vec<i64> = labels.iter().map(|l| l.unwrap_or(0)).collect();
        out.set_item("label", PyArray::from_vec(py, values))?;
        if self.nullable {
            out.set_item("label_valid", PyArray::from_vec(py, valid))?;
        }
        Ok(())
    }
}

/// The keys of a batch dict beside its fields.
pub(crate) const OWN_KEYS: [&str; 4] = ["label", "label_valid", "id", "source"];

/// Checks that field `name` does not take one of the dict's own keys (it would be lost).
pub(crate) fn field_key(name: &str) -> PyResult<()> {
    match OWN_KEYS.contains(&name) {
        true => Err(crate::errors::config(format!(
            "a field named {name:?} would hide the batch's own {name:?} key: read that column under another field name"
        ))),
        false => Ok(()),
    }
}

/// `batch` as a dict, the same keys and types in every batch of a table: each field by name,
/// then `label` where the table has a label column (an int64 array, a null as 0) with
/// `label_valid` beside it where the column may hold nulls (a bool array), and `id` (a list of
/// str), and of a mixture `source` (each sample's source, an int64 array).
pub(crate) fn batch_dict<'py>(
    py: Python<'py>,
    mut batch: Batch,
    recycler: Recycler,
    label_column: LabelColumn,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let more = batch.take_more_fields();
    let first = batch.first_name().to_string();
    for name in std::iter::once(first.as_str()).chain(more.iter().map(|(n, _)| &**n)) {
        field_key(name)?;
    }
    let labels = std::mem::take(&mut batch.labels);
    let ids = std::mem::take(&mut batch.ids);
    let sources = std::mem::take(&mut batch.sources);
    let tensors = batch.tensors;
    out.set_item(first, first_array(py, tensors, recycler)?)?;
    for (name, field) in more {
        match field {
            FieldBatch::Tensors(t) => out.set_item(&*name, owned_array(py, t)?)?,
            FieldBatch::Text(text) => out.set_item(&*name, PyList::new(py, text)?)?,
            _ => {
                return Err(crate::errors::config(format!(
                    "field {name} is of a kind this package does not know"
                )));
            }
        }
    }
    label_column.set_items(&out, &labels)?;
    out.set_item("id", PyList::new(py, ids)?)?;
    if !sources.is_empty() {
        let sources: Vec<i64> = sources.into_iter().map(i64::from).collect();
        out.set_item("source", PyArray::from_vec(py, sources))?;
    }
    Ok(out)
}
