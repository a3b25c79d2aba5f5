//! Loading a table's log at a version as deltalake's lazy snapshot (its files are streamed by
//! `replay`), with errors that say what went wrong: a version past the end, the log file the
//! kernel could not parse, a store's fault as it is.

use deltalake::kernel::Snapshot;
use deltalake::{DeltaTable, DeltaTableError};

use super::check;
use crate::as_of::{self, AsOf};
use crate::error::DeltaError;

/// The log of `table` (built, not loaded) as of `as_of`: deltalake's lazy snapshot (protocol,
/// metadata and log segment; the files are streamed by the replay, never held whole), or `None`
/// where the location has no log (a folder of Parquet files, version 0). With `known_delta` (a
/// job's marker named the version) a missing log is not looked for. `display` names the table
/// in messages.
pub(crate) async fn load_at(
    table: &DeltaTable,
    as_of: AsOf,
    known_delta: bool,
    display: &str,
) -> Result<Option<Snapshot>, DeltaError> {
    let err = |source| DeltaError::deltalake(display, source);
    let version_error = |reason: String| DeltaError::Version {
        location: display.to_string(),
        reason,
    };
    let version = match as_of {
        AsOf::Latest => None,
        AsOf::Version(v) => Some(v),
        // Time travel reads the log's history first: a location without a log is told
        // apart before (one listing, on this path only).
        AsOf::Timestamp(t) => {
            if !known_delta && !table.verify_deltatable_existence().await.map_err(err)? {
                return Err(not_a_table(display, as_of));
            }
            Some(as_of::version_at(table, t).await.map_err(&version_error)?)
        }
    };
    // Loaded first, not asked whether there is a log: the kernel's listing answers both, and
    // a second listing is a round trip more for every rank that opens "latest". (The kernel
    // logs an error, "No files in log segment", for a location without a log.)
    let log_store = table.log_store();
    log_store.refresh().await.map_err(err)?;
    let e = match Snapshot::try_new(log_store.as_ref(), version).await {
        Ok(snapshot) => return Ok(Some(snapshot)),
        Err(e) => e,
    };
    // No log segment, or no folder at all: a folder of Parquet files (listed once), whose
    // only version is 0 (a loader state names it; the state's file-set hash tells listings
    // apart) — or a log that does not reach the version asked, which the existence check
    // tells apart. (A time travel looked before, above.)
    if !known_delta
        && no_log_found(&e)
        && !table.verify_deltatable_existence().await.map_err(err)?
    {
        if matches!(version, Some(v) if v != 0) {
            return Err(not_a_table(display, as_of));
        }
        return Ok(None);
    }
    Err(explain(table, version, e, display).await)
}

/// Whether `e` says the location has no log segment, or no folder at all.
fn no_log_found(e: &DeltaTableError) -> bool {
    fn kernel(e: &delta_kernel::Error) -> bool {
        match e {
            delta_kernel::Error::Backtraced { source, .. } => kernel(source),
            other => matches!(other, delta_kernel::Error::InvalidTableLocation(_)),
        }
    }
    match e {
        DeltaTableError::NotATable(_) | DeltaTableError::InvalidTableLocation(_) => true,
        DeltaTableError::KernelError(k) => kernel(k),
        _ => false,
    }
}

/// The error of a log that failed to load (or to replay) at `version` (`None`: the latest),
/// saying what went wrong: a version past the end, the log file the kernel could not parse,
/// a store's fault as it is.
pub(crate) async fn explain(
    table: &DeltaTable,
    version: Option<u64>,
    e: DeltaTableError,
    display: &str,
) -> DeltaError {
    // The kernel's message for a version past the end names log segments.
    if let Some(v) = version
        && let Some(reason) = as_of::missing_version(table, v).await
    {
        return DeltaError::Version {
            location: display.to_string(),
            reason,
        };
    }
    // The kernel does not say which log file it could not parse: find it (a store fault is
    // reported as it is, without more requests).
    let store_fault = matches!(e, DeltaTableError::ObjectStore { .. });
    if !store_fault
        && let Some(reason) = check::unreadable_log_file(&table.object_store(), version).await
    {
        return DeltaError::Log {
            location: display.to_string(),
            reason,
        };
    }
    // A log the kernel refuses: say which version was being read.
    if store_fault || matches!(e, DeltaTableError::NotATable(_)) {
        return DeltaError::deltalake(display, e);
    }
    let at = match version {
        Some(v) => format!("version {v}"),
        None => "the latest version".to_string(),
    };
    DeltaError::Log {
        location: display.to_string(),
        reason: format!("{} (reading {at})", crate::error::delta_message(&e)),
    }
}

/// The error for a version or time asked of a location without a Delta log.
fn not_a_table(display: &str, as_of: AsOf) -> DeltaError {
    let fixed = match as_of {
        AsOf::Version(v) => format!("version {v}"),
        AsOf::Timestamp(t) => format!("time {}", as_of::shown(t)),
        AsOf::Latest => "the latest version".to_string(),
    };
    DeltaError::deltalake(
        display,
        DeltaTableError::NotATable(format!(
            "no _delta_log at this location ({fixed} needs a Delta table)"
        )),
    )
}
