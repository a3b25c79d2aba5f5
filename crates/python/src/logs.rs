//! The Rust crates' `tracing` events in Python's `logging`: `voxlake_loader::start` logs to
//! `logging.getLogger("voxlake.loader.start")` at the event's level, other crates' warnings to
//! `voxlake.deps.<crate>`. An event marked `caution` (a warning about what a run reads, not
//! how fast: ranks that may read different versions, a shuffle buffer cut to the budget)
//! reaches the user through one channel: that logger where a handler is configured for it
//! (`hasHandlers`), else `warnings.warn(..., voxlake.VoxlakeWarning)`; once a process (a forked
//! worker inherits what its parent said).
//!
//! Events come from the loader's threads, which must never wait for the GIL (the thread that
//! holds it may be waiting for them): they are queued, and the calls a user makes (a batch, a
//! pass opened, a command run) hand the queue to Python.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// Events queued at most; beyond, the oldest are dropped (and counted).
const QUEUED: usize = 1024;

/// One event, as Python will log it.
struct Record {
    level: Level,
    target: String,
    text: String,
    caution: bool,
}

static QUEUE: Mutex<VecDeque<Record>> = Mutex::new(VecDeque::new());
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The cautions this process has said (a forked worker inherits its parent's): each once.
static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The most verbose level recorded: the `voxlake` logger's (1 error … 4 debug); warnings until
/// Python is first asked.
static MAX_LEVEL: AtomicU8 = AtomicU8::new(2);

fn rank(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

/// Whether an event of `meta` is recorded now.
fn wanted(meta: &Metadata<'_>) -> bool {
    let ours = meta.target().starts_with("voxlake");
    let level = rank(meta.level());
    level <= MAX_LEVEL.load(Ordering::Relaxed) && (ours || level <= 2)
}

/// The layer that queues events.
struct Queue;

impl<S: Subscriber> Layer<S> for Queue {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Asked again at each event: the level Python wants changes.
        match *meta.level() {
            Level::TRACE => tracing::subscriber::Interest::never(),
            _ => tracing::subscriber::Interest::sometimes(),
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        wanted(meta)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if !wanted(meta) {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let record = Record {
            level: *meta.level(),
            target: meta.target().to_string(),
            text: text.message + &text.fields,
            caution: text.caution,
        };
        let Ok(mut queue) = QUEUE.lock() else { return };
        if queue.len() >= QUEUED {
            queue.pop_front();
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        queue.push_back(record);
    }
}

/// An event's message, then its other fields as ` name=value`.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
    caution: bool,
}

impl Visit for Text {
    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "caution" {
            self.caution = value;
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            name => {
                let _ = write!(self.fields, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }
}

/// Installs the queue as this module's subscriber, once, when a loader or a conversion
/// starts (a subscriber already set stays: the console scripts set the command lines' own, as
/// the binaries do).
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _already_set =
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Queue));
    });
}

/// The logger an event's target goes to: `voxlake_loader::start` → `voxlake.loader.start`.
fn logger_name(target: &str) -> String {
    let mut parts = target.split("::");
    let krate = parts.next().unwrap_or_default();
    let head = match krate.strip_prefix("voxlake_") {
        Some(ours) => format!("voxlake.{ours}"),
        None if krate == "voxlake" => "voxlake.cli".to_string(),
        None => format!("voxlake.deps.{krate}"),
    };
    parts.fold(head, |name, part| name + "." + part)
}

/// Whether this process says the caution `text` for the first time (and now has).
fn first_time(text: &str) -> bool {
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.iter().any(|s| s == text) {
        return false;
    }
    said.push(text.to_string());
    true
}

/// Hands the queued events to Python's `logging` (and the cautions to `warnings`), and reads
/// the level the `voxlake` logger now wants.
pub(crate) fn drain(py: Python<'_>) -> PyResult<()> {
    let logging = py.import("logging")?;
    let level: u8 = logging
        .call_method1("getLogger", ("voxlake",))?
        .call_method0("getEffectiveLevel")?
        .extract()?;
    // Python's DEBUG 10, INFO 20, WARNING 30, ERROR 40.
    let max = match level {
        0..=10 => 4,
        11..=20 => 3,
        21..=30 => 2,
        _ => 1,
    };
    MAX_LEVEL.store(max, Ordering::Relaxed);
    let records: Vec<Record> = match QUEUE.lock() {
        Ok(mut queue) if !queue.is_empty() => queue.drain(..).collect(),
        _ => return Ok(()),
    };
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        logging.call_method1("getLogger", ("voxlake",))?.call_method1(
            "warning",
            (format!("{dropped} log events of voxlake's dropped (more than {QUEUED} between two calls)"),),
        )?;
    }
    for record in records {
        let python_level = match record.level {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            _ => 10,
        };
        let logger = logging.call_method1("getLogger", (logger_name(&record.target),))?;
        // A caution reaches the user once, through one channel: `logging` where they
        // configured a handler, else `warnings` (not also logging's last-resort line).
        if record.caution && !first_time(&record.text) {
            continue;
        }
        if record.caution && !logger.call_method0("hasHandlers")?.extract::<bool>()? {
            let class = py.import("voxlake._errors")?.getattr("VoxlakeWarning")?;
            py.import("warnings")?
                .call_method1("warn", (&record.text, class, 2))?;
        } else {
            logger.call_method1("log", (python_level, &record.text))?;
        }
    }
    Ok(())
}
