//! `_compare_exchange`: an atomic compare-and-swap on a 64-bit word of memory that processes
//! share (a `multiprocessing.RawArray`). `voxlake.torch.Dataset` agrees on each pass's epoch
//! with it across the main process and its `DataLoader` workers: a `multiprocessing.Lock`
//! made under `fork` cannot reach a `spawn` worker, and a worker may be killed while holding
//! one; a compare-and-swap holds nothing.

use std::sync::atomic::{AtomicI64, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Sets the `int64` at `address` to `new` if it holds `expected`; returns what it held.
/// `address` is private to the package: a word of a `RawArray` it keeps alive.
#[pyfunction]
#[pyo3(name = "_compare_exchange")]
pub(crate) fn compare_exchange(address: usize, expected: i64, new: i64) -> PyResult<i64> {
    if address == 0 || !address.is_multiple_of(std::mem::align_of::<AtomicI64>()) {
        return Err(PyValueError::new_err(format!(
            "_compare_exchange: {address:#x} is not the address of an aligned int64"
        )));
    }
    // Safety: the caller passes the address of a live, aligned int64 of shared memory (the
    // package's own `RawArray`), which only this function and aligned loads touch.
    let word = unsafe { AtomicI64::from_ptr(address as *mut i64) };
    Ok(
        match word.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(previous) | Err(previous) => previous,
        },
    )
}
