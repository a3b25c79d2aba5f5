//! The trace a loader writes of its first batches ([`with_trace`]): a Chrome trace-event file,
//! written by `tracing-chrome`, of the spans voxlake's crates open at target `voxlake::trace`
//! (level TRACE): `next` (the loop waiting inside `next()`), `assemble` (a batch), `row_group`
//! (a row group's read), `fetch` and `decode` (its column chunks), `get` and `read` (a store's
//! request, a local file's read). One track per thread; it opens in Perfetto and
//! `chrome://tracing` (docs/usage.md, "Where did a step's time go?").
//!
//! The loader's own threads (its runtime's and its producer's, and the building thread while
//! the table opens) take the trace's dispatcher as their default, which hands every event on
//! to the dispatcher the caller had when it built the loader, so its logs still reach the
//! caller's subscriber. The caller's thread is not the loader's: `next` spans are made on the
//! trace's dispatcher one at a time.
//!
//! `tracing-chrome` binds each thread to the first trace it writes into, for the life of the
//! thread: a thread that waited inside `next()` of an earlier traced loader would write this
//! trace's `next` spans into that one. Such a thread writes none, and says so once.
//!
//! [`with_trace`]: crate::LoaderBuilder::with_trace

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{Dispatch, Event, Metadata, span, subscriber::Interest};
use tracing_chrome::{ChromeLayer, ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::Registry;

use crate::LoaderError;

/// The target of the spans a trace records.
const TARGET: &str = "voxlake::trace";

/// Traces made in this process, numbering them.
static TRACES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The trace this thread wrote `next` spans into (0: none yet).
    static WROTE: Cell<u64> = const { Cell::new(0) };
    /// The trace's dispatcher as this thread's default, while a loader's thread lives.
    static DEFAULT: RefCell<Option<tracing::dispatcher::DefaultGuard>> = const { RefCell::new(None) };
}

/// A trace being written: its dispatcher, and what ends it.
pub(crate) struct Trace {
    id: u64,
    path: PathBuf,
    dispatch: Dispatch,
    /// Registered beside `dispatch` while the trace lives. With one dispatcher registered,
    /// tracing decides a callsite met for the first time by the default of the thread that
    /// met it, for every thread: a thread of no subscriber (the caller's, in a process without
    /// a global one) would turn the span off in the loader's threads too. With two, each
    /// callsite asks every registered dispatcher.
    _second: Dispatch,
    on: Arc<AtomicBool>,
    /// Whether it said that a thread wrote no `next` spans into it (once, whichever batch or
    /// poll of `next()` found it).
    warned: AtomicBool,
    /// Batches it covers.
    batches: u64,
    /// Dropped to end the file (`tracing-chrome` writes its closing bracket and joins).
    guard: Mutex<Option<FlushGuard>>,
    /// The first write error, if the file could not be written.
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("path", &self.path)
            .field("batches", &self.batches)
            .finish_non_exhaustive()
    }
}

/// The path where `rank` of `world_size` writes its own file of a run (a trace, `voxlake
/// bench`'s report): `{rank}` in `path` replaced by the rank; with several ranks and no
/// `{rank}`, the rank before the extension (`trace.json` → `trace.rank3.json`), so that no two
/// ranks (or `DataLoader` workers) write one file.
///
/// ```
/// use std::path::{Path, PathBuf};
/// use voxlake_loader::rank_path;
///
/// assert_eq!(rank_path(Path::new("r.html"), 0, 1), PathBuf::from("r.html"));
/// assert_eq!(rank_path(Path::new("r.html"), 3, 4), PathBuf::from("r.rank3.html"));
/// assert_eq!(rank_path(Path::new("{rank}/r.html"), 3, 4), PathBuf::from("3/r.html"));
/// ```
pub fn rank_path(path: &Path, rank: usize, world_size: usize) -> PathBuf {
    let text = path.to_string_lossy();
    if text.contains("{rank}") {
        return PathBuf::from(text.replace("{rank}", &rank.to_string()));
    }
    if world_size <= 1 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map_or_else(Default::default, |s| s.to_string_lossy());
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

impl Trace {
    /// Starts a trace of `batches` batches into `path` (created or truncated now: a path that
    /// cannot be written fails here), handing other events on to `caller`.
    pub(crate) fn start(
        path: PathBuf,
        batches: u64,
        caller: Dispatch,
    ) -> Result<Self, LoaderError> {
        let file = File::create(&path)
            .map_err(|e| LoaderError::Config(format!("the trace file {}: {e}", path.display())))?;
        let failed = Arc::new(Mutex::new(None));
        let writer = Checked {
            file,
            failed: failed.clone(),
        };
        let (chrome, guard) = ChromeLayerBuilder::new()
            .writer(writer)
            .include_args(true)
            .include_locations(false)
            .build();
        let on = Arc::new(AtomicBool::new(batches > 0));
        let layer = Traced {
            chrome,
            caller,
            on: on.clone(),
        };
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
        Ok(Trace {
            id: TRACES.fetch_add(1, Ordering::Relaxed) + 1,
            path,
            dispatch,
            _second: Dispatch::new(tracing::subscriber::NoSubscriber::default()),
            on,
            warned: AtomicBool::new(false),
            batches,
            guard: Mutex::new(Some(guard)),
            failed,
        })
    }

    /// The trace `builder` asks for (`with_trace`), its path made the rank's, started; its
    /// other events to `caller`.
    pub(crate) fn for_builder(
        builder: &crate::LoaderBuilder,
        caller: Dispatch,
    ) -> Result<Option<Arc<Trace>>, LoaderError> {
        let Some(path) = &builder.trace else {
            return Ok(None);
        };
        let path = rank_path(path, builder.rank, builder.world_size);
        Trace::start(path, builder.trace_batches, caller).map(|t| Some(Arc::new(t)))
    }

    /// The trace as this thread's default dispatcher while the guard lives (the loader's
    /// producer thread).
    pub(crate) fn thread_default(&self) -> tracing::dispatcher::DefaultGuard {
        tracing::dispatcher::set_default(&self.dispatch)
    }

    /// Makes the trace this thread's default dispatcher until [`leave_thread`] (a loader's
    /// runtime threads, as they start).
    pub(crate) fn enter_thread(&self) {
        let guard = tracing::dispatcher::set_default(&self.dispatch);
        DEFAULT.with(|d| *d.borrow_mut() = Some(guard));
    }

    /// The span of the caller waiting inside `next()` for batch `batch`, on this trace's
    /// dispatcher; none once the trace ended, or where this thread wrote an earlier trace.
    pub(crate) fn next_span(&self, batch: u64) -> span::EnteredSpan {
        if !self.on.load(Ordering::Relaxed) {
            return span::Span::none().entered();
        }
        let wrote = WROTE.with(|w| w.replace(self.id));
        if wrote != 0 && wrote != self.id {
            WROTE.with(|w| w.set(wrote));
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the trace {} holds no `next` spans: this thread waited in a loader traced \
                     before, and tracing-chrome binds a thread to its first trace (iterate from \
                     another thread for them)",
                    self.path.display()
                );
            }
            return span::Span::none().entered();
        }
        tracing::dispatcher::with_default(&self.dispatch, || {
            tracing::trace_span!(target: "voxlake::trace", "next", batch).entered()
        })
    }

    /// Says `delivered` batches were handed out: the trace ends with the last it covers; a
    /// file that could not be written is the error returned.
    pub(crate) fn delivered(&self, delivered: u64) -> Result<(), LoaderError> {
        // Once ended, nothing to do (no lock taken a batch).
        if delivered >= self.batches && self.on.load(Ordering::Relaxed) {
            return self.finish();
        }
        Ok(())
    }

    /// Ends the file (once): spans stop being made, `tracing-chrome` closes the JSON array;
    /// the first write that failed, naming the file.
    pub(crate) fn finish(&self) -> Result<(), LoaderError> {
        self.on.store(false, Ordering::Relaxed);
        let Some(guard) = self.guard.lock().ok().and_then(|mut g| g.take()) else {
            return Ok(());
        };
        drop(guard);
        match self.failed.lock().ok().and_then(|mut f| f.take()) {
            Some(e) => Err(LoaderError::Trace {
                path: self.path.display().to_string(),
                message: e.to_string(),
            }),
            None => {
                tracing::debug!("trace written: {}", self.path.display());
                Ok(())
            }
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        // Dropped before the batches it covers came (a loop that stopped early): no call is
        // left to answer with the failure.
        if let Err(e) = self.finish() {
            tracing::error!("{e}");
        }
    }
}

/// Ends [`Trace::enter_thread`] on this thread (as a loader's thread stops).
pub(crate) fn leave_thread() {
    DEFAULT.with(|d| drop(d.borrow_mut().take()));
}

/// The trace file: the first write error kept (for [`Trace::finish`] to report) and every
/// later write skipped, where `tracing-chrome`'s writer thread would panic on it.
struct Checked {
    file: File,
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

impl Write for Checked {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let Ok(mut failed) = self.failed.lock() else {
            return Ok(());
        };
        if failed.is_none()
            && let Err(e) = self.file.write_all(buf)
        {
            *failed = Some(e);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Ok(mut failed) = self.failed.lock()
            && failed.is_none()
            && let Err(e) = self.file.flush()
        {
            *failed = Some(e);
        }
        Ok(())
    }
}

/// The trace's layer: `voxlake::trace` spans to `tracing-chrome` while the trace is on; every
/// event to the caller's dispatcher, as its own filter decides. One layer with a global filter
/// (no per-layer filters: their state is one per thread, shared with the caller's subscriber,
/// whose `enabled` this calls).
struct Traced {
    chrome: ChromeLayer<Registry>,
    caller: Dispatch,
    on: Arc<AtomicBool>,
}

impl Traced {
    fn traced(&self, meta: &Metadata<'_>) -> bool {
        meta.target() == TARGET && self.on.load(Ordering::Relaxed)
    }
}

impl Layer<Registry> for Traced {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        match meta.is_span() && meta.target() != TARGET {
            // No other span is recorded (nor handed on: the caller's context is not here).
            true => Interest::never(),
            // Asked each time: the trace ends, and the caller's filter may change.
            false => Interest::sometimes(),
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, Registry>) -> bool {
        self.traced(meta) || (meta.is_event() && self.caller.enabled(meta))
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, Registry>) {
        self.chrome.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, Registry>) {
        self.chrome.on_record(id, values, ctx);
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, Registry>) {
        self.chrome.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, Registry>) {
        self.chrome.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, Registry>) {
        self.chrome.on_close(id, ctx);
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, Registry>) {
        if event.metadata().target() != TARGET {
            self.caller.event(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Subscriber;

    #[test]
    fn each_rank_has_a_file_of_its_own() {
        let p = Path::new("/t/trace.json");
        assert_eq!(rank_path(p, 0, 1), PathBuf::from("/t/trace.json"));
        assert_eq!(rank_path(p, 3, 4), PathBuf::from("/t/trace.rank3.json"));
        assert_eq!(
            rank_path(Path::new("/t/tr"), 1, 2),
            PathBuf::from("/t/tr.rank1")
        );
        let asked = Path::new("/t/{rank}/trace-{rank}.json");
        assert_eq!(rank_path(asked, 2, 4), PathBuf::from("/t/2/trace-2.json"));
    }

    /// Spans of the target reach the file until it ends; other events reach the caller's
    /// dispatcher; the file is one JSON array.
    #[test]
    fn a_trace_records_its_spans_and_hands_events_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let seen = Arc::new(AtomicU64::new(0));
        let caller = Dispatch::new(Counting(seen.clone()));
        let trace = Trace::start(path.clone(), 2, caller).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                trace.enter_thread();
                tracing::trace_span!(target: "voxlake::trace", "assemble", batch = 0)
                    .in_scope(|| tracing::warn!("handed on"));
                tracing::trace_span!(target: "other", "not traced").in_scope(|| {});
                leave_thread();
            });
        });
        std::thread::scope(|s| {
            s.spawn(|| {
                drop(trace.next_span(0));
                trace.delivered(1).unwrap();
                drop(trace.next_span(1));
                trace.delivered(2).unwrap();
                // Ended: no more spans.
                drop(trace.next_span(2));
            });
        });
        assert_eq!(seen.load(Ordering::Relaxed), 1);
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let begun = |name: &str| {
            events
                .iter()
                .filter(|e| e["ph"] == "B" && e["name"] == name)
                .count()
        };
        assert_eq!(begun("assemble"), 1, "{events:?}");
        assert_eq!(begun("next"), 2, "{events:?}");
        assert_eq!(begun("not traced"), 0, "{events:?}");
    }

    /// A thread that waited in one traced loader writes no `next` spans into another's trace
    /// (they would land in the first), and says so.
    #[test]
    fn a_thread_bound_to_an_earlier_trace_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let seen = Arc::new(AtomicU64::new(0));
        let caller = Dispatch::new(Counting(seen.clone()));
        std::thread::scope(|s| {
            s.spawn(|| {
                let a = Trace::start(first.clone(), 5, Dispatch::none()).unwrap();
                drop(a.next_span(0));
                drop(a);
                let b = Trace::start(second.clone(), 5, Dispatch::none()).unwrap();
                // Asked twice (a caller polling `next()`), said once.
                tracing::dispatcher::with_default(&caller, || {
                    drop(b.next_span(0));
                    drop(b.next_span(0));
                    drop(b.next_span(1));
                });
            });
        });
        assert_eq!(seen.load(Ordering::Relaxed), 1, "one warning");
        let spans = |path: &Path| {
            let events: Vec<serde_json::Value> =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            events.iter().filter(|e| e["ph"] == "B").count()
        };
        assert_eq!((spans(&first), spans(&second)), (1, 0));
    }

    /// A span's callsite first met before the trace began, or after it on a thread of no
    /// subscriber, is traced in the trace's threads (tracing caches each callsite's interest
    /// for every thread).
    #[test]
    fn callsites_met_elsewhere_first_are_traced() {
        fn before() -> bool {
            tracing::enabled!(target: "voxlake::trace", tracing::Level::TRACE)
        }
        fn after() -> bool {
            tracing::enabled!(target: "voxlake::trace", tracing::Level::TRACE)
        }
        std::thread::spawn(|| assert!(!before())).join().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let trace = Trace::start(dir.path().join("t.json"), 5, Dispatch::none()).unwrap();
        std::thread::spawn(|| assert!(!after())).join().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                trace.enter_thread();
                assert!(before() && after());
                leave_thread();
            });
        });
    }

    #[test]
    fn a_trace_file_that_cannot_be_made_fails_naming_it() {
        let err = Trace::start("/nonexistent/dir/t.json".into(), 1, Dispatch::none()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/dir/t.json"), "{err}");
    }

    /// A subscriber counting the events it is given.
    struct Counting(Arc<AtomicU64>);

    impl Subscriber for Counting {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, _: &Event<'_>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }
}
