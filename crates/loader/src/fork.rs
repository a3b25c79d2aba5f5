//! The loader's threads and `fork()`: a child process has none of its parent's threads, but
//! it has a copy of the lock table that parking_lot (and so tokio, which deltalake builds with
//! parking_lot) keeps for the whole process. A thread parked there at the fork, such as an
//! idle runtime worker, stays in the child's copy, pointing into a stack the child frees or
//! reuses: the child's own runtime later walks that entry and crashes (seen: a `DataLoader`
//! worker killed by SIGSEGV, a misaligned pointer in `parking_lot_core::unpark_requeue`).
//!
//! So every thread of ours that may park there is counted while it lives; a fork handler
//! records in the child how many lived at the fork, and a loader built in such a child fails
//! with [`LoaderError::Forked`] instead of crashing at random. A loader closed, or at the end
//! of its run, waits for its threads: a process that forks after that hands on nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use crate::LoaderError;
use crate::trace::Trace;

/// Threads of this process that may park in parking_lot's table: runtime threads, the
/// producer's, a build's.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// In a forked process: such threads its parent (and theirs) had at the fork.
static INHERITED: AtomicUsize = AtomicUsize::new(0);

/// Runs in the child right after a fork (async-signal-safe: atomics only).
extern "C" fn in_child() {
    INHERITED.fetch_add(LIVE.swap(0, Ordering::SeqCst), Ordering::SeqCst);
}

/// Installs the fork handler, once.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Safety: `in_child` only touches atomics. A failure (ENOMEM) leaves forks unchecked,
        // as they were before.
        let failed = unsafe { libc::pthread_atfork(None, None, Some(in_child)) } != 0;
        if failed {
            tracing::warn!("pthread_atfork failed: a fork while a loader runs is not detected");
        }
    });
}

/// A thread counted in [`LIVE`] while this lives.
pub(crate) struct Live(());

impl Live {
    pub(crate) fn new() -> Live {
        install();
        LIVE.fetch_add(1, Ordering::SeqCst);
        Live(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // A guard made before a fork and dropped in the child: the swap there already took it.
        let _ = LIVE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

/// A multi-threaded tokio runtime of `threads` workers named `name`, whose threads (workers and
/// blocking ones) are counted while they live, so that a process forked while they run knows
/// it (see the module documentation). Dropping it, or `shutdown_timeout`, waits for them.
pub fn tokio_runtime(threads: usize, name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    traced_runtime(threads, name, None)
}

/// [`tokio_runtime`], whose threads record into `trace` (a loader's `with_trace`).
pub(crate) fn traced_runtime(
    threads: usize,
    name: &str,
    trace: Option<Arc<Trace>>,
) -> std::io::Result<tokio::runtime::Runtime> {
    install();
    let traced = trace.is_some();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .on_thread_start(move || {
            LIVE.fetch_add(1, Ordering::SeqCst);
            if let Some(trace) = &trace {
                trace.enter_thread();
            }
        })
        .on_thread_stop(move || {
            if traced {
                crate::trace::leave_thread();
            }
            let _ = LIVE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        })
        .enable_all()
        .build()
}

/// The threads of this process that a fork would leave dangling in tokio's lock table: those
/// of loaders running (or ending), of a build under way, of a [`tokio_runtime`] not yet shut
/// down. Zero after every loader was closed, dropped long enough ago or run to its end.
pub fn live_threads() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Fails where this process was forked while threads of its parent's loaders ran.
pub(crate) fn check() -> Result<(), LoaderError> {
    match INHERITED.load(Ordering::SeqCst) {
        0 => Ok(()),
        threads => Err(LoaderError::Forked { threads }),
    }
}
