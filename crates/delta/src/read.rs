//! Which reader reads a table's log: voxlake's own where it is commits only (`commits`), else
//! the Delta kernel's lazy snapshot (`kernel`), whose files `kernel_replay` streams. Both give a
//! [`Replayed`]; `asked` holds the log's first answers, `check` names what breaks a log.

use deltalake::DeltaTable;
use deltalake::kernel::Snapshot;

mod asked;
mod check;
mod commits;
mod kernel;
pub(crate) mod kernel_replay;

pub use asked::LogAhead;
pub(crate) use kernel::load_at;

use crate::as_of::AsOf;
use crate::error::DeltaError;
use crate::replayed::Replayed;
use asked::log_root;

/// A table's log, loaded.
pub(crate) enum Loaded {
    /// A log of commits only, replayed (`commits`).
    Replayed(Box<Replayed>),
    /// deltalake's lazy snapshot, its files not read yet (`replay` reads them).
    Kernel(Box<Snapshot>),
}

impl Loaded {
    /// The version loaded.
    pub(crate) fn version(&self) -> u64 {
        match self {
            Loaded::Replayed(replayed) => replayed.version,
            Loaded::Kernel(snapshot) => snapshot.version(),
        }
    }
}

/// The log of `table` (built, not loaded) as of `as_of`: read by voxlake where it is commits
/// only (`commits::replay`, `stats`: with the files' statistics), else by `load_at`. `memo`:
/// the table's store's memo, to hand what was read to the kernel; `ahead`: the log's first
/// answers, asked before the open. `None` where the location has no log (see `load_at`).
pub(crate) async fn load(
    table: &DeltaTable,
    as_of: AsOf,
    known_delta: bool,
    display: &str,
    stats: bool,
    ahead: Option<LogAhead>,
    memo: Option<&crate::log_memo::LogMemo>,
) -> Result<Option<Loaded>, DeltaError> {
    let version = match as_of {
        AsOf::Latest => Some(None),
        AsOf::Version(v) => Some(Some(v)),
        AsOf::Timestamp(_) => None,
    };
    if let Some(version) = version
        && let Some(log_root) = log_root(table.log_store().root_url())
        && let Some(replayed) = commits::replay(
            &table.log_store().root_object_store(None),
            &log_root,
            version,
            display,
            stats,
            ahead,
            memo,
        )
        .await?
    {
        return Ok(Some(Loaded::Replayed(Box::new(replayed))));
    }
    Ok(load_at(table, as_of, known_delta, display)
        .await?
        .map(|snapshot| Loaded::Kernel(Box::new(snapshot))))
}
