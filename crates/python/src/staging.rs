//! `_copy_into`: a batch's array copied into a staging buffer, by a few threads at once and
//! without the GIL. `voxlake.torch.to_device` stages each batch in page-locked host memory
//! that torch allocated (a ring of buffers, each reused once its copy to the device has
//! finished) and copies it from there with `non_blocking=True`: the one host copy on the way
//! to a device, off the training loop's thread: `tensor.pin_memory()` on the loop's thread
//! starves the loader (libtorch's OpenMP threads spin after each copy; docs/benchmarks.md).

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Bytes a copying thread takes at least: below it, another thread costs more than it saves.
const BYTES_PER_THREAD: usize = 1 << 20;
/// Threads a copy uses at most (and by default, on a host of twice as many cores): fewer left
/// the feed short of the Rust feed's rate on a 16-core GPU host (docs/benchmarks.md); half the
/// cores leave the others to the loader's threads.
pub(crate) const MAX_THREADS: usize = 8;

/// Threads a copy uses unless told: half the cores, at most [`MAX_THREADS`].
fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / 2).clamp(1, MAX_THREADS)
}

/// The copying threads, started once (a thread started for each copy costs ~0.1 ms a batch);
/// `None` in a process forked after they started (a `DataLoader` worker): the fork has none of
/// its parent's threads, and a copy waiting for them would never end.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<(u32, rayon::ThreadPool)>> = std::sync::OnceLock::new();
    let (pid, pool) = POOL
        .get_or_init(|| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(MAX_THREADS - 1)
                .thread_name(|i| format!("voxlake-copy-{i}"))
                .build()
                .ok()?;
            Some((std::process::id(), pool))
        })
        .as_ref()?;
    (*pid == std::process::id()).then_some(pool)
}

/// Copies the C-contiguous numpy array `src` into the `dst_bytes` bytes at address `dst`.
///
/// Private to `voxlake.torch`: `dst` must be the address of a live, writable buffer of
/// `dst_bytes` bytes that nothing else reads or writes during the call (a torch tensor the
/// caller holds: `data_ptr()`, `nbytes`). Refused: a source that is not C-contiguous, longer
/// than the destination, or overlapping it. `threads`: how many copy at once (1 to
/// [`MAX_THREADS`]; by default half the cores).
#[pyfunction]
#[pyo3(name = "_copy_into", signature = (dst, dst_bytes, src, threads = None))]
pub(crate) fn copy_into(
    py: Python<'_>,
    dst: usize,
    dst_bytes: usize,
    src: &Bound<'_, PyUntypedArray>,
    threads: Option<usize>,
) -> PyResult<usize> {
    let threads = threads.unwrap_or_else(default_threads);
    if !(1..=MAX_THREADS).contains(&threads) {
        return Err(PyValueError::new_err(format!(
            "_copy_into: threads must be 1 to {MAX_THREADS}, not {threads}"
        )));
    }
    if !src.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "_copy_into: the source array is not C-contiguous",
        ));
    }
    let items: usize = src.shape().iter().product();
    let bytes = items
        .checked_mul(src.dtype().itemsize())
        .ok_or_else(|| PyValueError::new_err("_copy_into: the source's size overflows"))?;
    if bytes > dst_bytes {
        return Err(PyValueError::new_err(format!(
            "_copy_into: the source is {bytes} bytes, the destination {dst_bytes}"
        )));
    }
    if bytes == 0 {
        return Ok(0);
    }
    // Safety: a numpy array object's `data` field; the array lives through this call (the
    // caller's reference), and a C-contiguous array's `bytes` bytes start there.
    let from = unsafe { (*src.as_array_ptr()).fields.data } as usize;
    let (Some(dst_end), Some(from_end)) = (dst.checked_add(dst_bytes), from.checked_add(bytes))
    else {
        return Err(PyValueError::new_err(
            "_copy_into: the destination's range passes the end of memory",
        ));
    };
    if dst == 0 || from < dst_end && dst < from_end {
        return Err(PyValueError::new_err(
            "_copy_into: the destination is null or overlaps the source",
        ));
    }
    py.detach(|| copy_parallel(from, dst, bytes, threads));
    Ok(bytes)
}

/// Copies `bytes` bytes from address `from` to address `to` (valid, not overlapping: see
/// [`copy_into`]) in up to `threads` chunks at once: this thread's and the pool's.
fn copy_parallel(from: usize, to: usize, bytes: usize, threads: usize) {
    let threads = (bytes / BYTES_PER_THREAD).clamp(1, threads);
    let chunk = bytes.div_ceil(threads);
    let copy = |start: usize| {
        let len = chunk.min(bytes - start);
        // Safety: `start + len <= bytes`, within both buffers, which do not overlap; the
        // chunks are disjoint.
        unsafe {
            std::ptr::copy_nonoverlapping((from + start) as *const u8, (to + start) as *mut u8, len)
        };
    };
    // The pool is started by the first copy that needs more than this thread.
    match (threads > 1).then(pool).flatten() {
        Some(pool) => pool.in_place_scope(|scope| {
            for start in (chunk..bytes).step_by(chunk) {
                scope.spawn(move |_| copy(start));
            }
            copy(0);
        }),
        // One thread asked, or no pool (its threads could not start, or a fork's): this
        // thread copies it all.
        None => (0..bytes).step_by(chunk).for_each(copy),
    }
}
