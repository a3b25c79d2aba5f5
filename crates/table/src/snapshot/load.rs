//! Loading a table's log at a version, with errors that say what went wrong: a version past the
//! end, the log file the kernel could not parse, a store's fault as it is.

use deltalake::{DeltaTable, DeltaTableError};

use super::logcheck;
use super::travel::{self, AsOf};
use crate::error::TableError;

/// Loads `table` (built, not loaded) as of `as_of`; `false` where it has no log (a folder of
/// Parquet files, version 0). With `known_delta` (a job's marker named the version) the log is
/// not listed first to learn whether there is one. `display` names the table in messages.
pub(crate) async fn load_at(
    table: &mut DeltaTable,
    as_of: AsOf,
    known_delta: bool,
    display: &str,
) -> Result<bool, TableError> {
    let err = |source| TableError::Delta {
        location: display.to_string(),
        source: Box::new(source),
    };
    let version_error = |reason: String| TableError::Version {
        location: display.to_string(),
        reason,
    };
    // Ask first: loading a missing table makes the kernel log an error.
    if !known_delta && !table.verify_deltatable_existence().await.map_err(err)? {
        // No log: a folder of Parquet files (listed once), whose only version is 0 (a loader
        // state pins it; the state's file-set hash tells listings apart).
        if matches!(as_of, AsOf::Version(v) if v != 0) || matches!(as_of, AsOf::Timestamp(_)) {
            return Err(not_a_table(display, as_of));
        }
        return Ok(false);
    }
    let version = match as_of {
        AsOf::Latest => None,
        AsOf::Version(v) => Some(v),
        AsOf::Timestamp(t) => Some(travel::version_at(table, t).await.map_err(&version_error)?),
    };
    let loaded = match version {
        Some(v) => table.load_version(v).await,
        None => table.load().await,
    };
    let Err(e) = loaded else {
        return Ok(true);
    };
    // The kernel's message for a version past the end names log segments.
    if let Some(v) = version
        && let Some(reason) = travel::missing_version(table, v).await
    {
        return Err(version_error(reason));
    }
    // The kernel does not say which log file it could not parse: find it (a store fault is
    // reported as it is, without more requests).
    let store_fault = matches!(e, DeltaTableError::ObjectStore { .. });
    if !store_fault
        && let Some(reason) = logcheck::unreadable_log_file(&table.object_store(), version).await
    {
        return Err(TableError::Log {
            location: display.to_string(),
            reason,
        });
    }
    // A log the kernel refuses: say which version was being read.
    if store_fault || matches!(e, DeltaTableError::NotATable(_)) {
        return Err(err(e));
    }
    let at = match version {
        Some(v) => format!("version {v}"),
        None => "the latest version".to_string(),
    };
    Err(TableError::Log {
        location: display.to_string(),
        reason: format!("{} (reading {at})", crate::error::delta_message(&e)),
    })
}

/// The error for a version or time asked of a location without a Delta log.
fn not_a_table(display: &str, as_of: AsOf) -> TableError {
    let pinned = match as_of {
        AsOf::Version(v) => format!("version {v}"),
        AsOf::Timestamp(t) => format!("time {}", travel::shown(t)),
        AsOf::Latest => "the latest version".to_string(),
    };
    TableError::Delta {
        location: display.to_string(),
        source: Box::new(DeltaTableError::NotATable(format!(
            "no _delta_log at this location ({pinned} needs a Delta table)"
        ))),
    }
}
