//! Which version of a table to open: the latest, a version, or the one a timestamp names (time
//! travel), and the errors for versions and timestamps the log does not have.

use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};
use delta_kernel::history_manager::error::{LogHistoryError, NearestTimestamp};
use delta_kernel::history_manager::{HistoryCommitType, latest_version_as_of};
use deltalake::DeltaTable;

/// The version a snapshot opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AsOf {
    /// The latest version when it opens.
    #[default]
    Latest,
    /// This version.
    Version(u64),
    /// The latest version committed at or before this time (the commit's in-commit timestamp
    /// where the table records them, else its log file's modification time, as Delta defines).
    Timestamp(SystemTime),
}

impl From<Option<u64>> for AsOf {
    fn from(version: Option<u64>) -> AsOf {
        version.map_or(AsOf::Latest, AsOf::Version)
    }
}

impl From<u64> for AsOf {
    fn from(version: u64) -> AsOf {
        AsOf::Version(version)
    }
}

impl From<SystemTime> for AsOf {
    fn from(at: SystemTime) -> AsOf {
        AsOf::Timestamp(at)
    }
}

impl AsOf {
    /// An RFC 3339 time (`2026-11-23T10:00:00Z`, `2026-11-23T11:00:00+01:00`) as a time travel.
    pub fn parse_timestamp(text: &str) -> Result<AsOf, String> {
        DateTime::parse_from_rfc3339(text)
            .map(|t| AsOf::Timestamp(t.with_timezone(&Utc).into()))
            .map_err(|e| {
                format!("'{text}' is not an RFC 3339 time such as 2026-11-23T10:00:00Z: {e}")
            })
    }
}

/// A time as messages show it (RFC 3339, UTC, milliseconds).
pub(crate) fn shown(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn millis(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms"),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

/// The version `at` names in `table` (a loaded or unloaded table handle): the kernel's
/// `latest_version_as_of`, which reads in-commit timestamps where the table has them. A time
/// before the first commit is an error saying when the table starts.
pub(crate) async fn version_at(table: &DeltaTable, at: SystemTime) -> Result<u64, String> {
    let log_store = table.log_store();
    let engine = log_store.engine(None);
    let mut root = log_store.root_url().clone();
    if !root.path().ends_with('/') {
        root.set_path(&format!("{}/", root.path()));
    }
    let ms = DateTime::<Utc>::from(at).timestamp_millis();
    // The kernel's log reads are blocking calls into the engine's executor.
    tokio::task::spawn_blocking(move || {
        let snapshot = delta_kernel::snapshot::Snapshot::builder_for(root.as_str())
            .build(engine.as_ref())
            .map_err(|e| crate::error::kernel_message(&e))?;
        match latest_version_as_of(
            &snapshot,
            engine.as_ref(),
            ms,
            HistoryCommitType::Recreatable,
        ) {
            Ok(commit) => Ok(commit.version),
            Err(e) => Err(match history_error(&e) {
                Some(LogHistoryError::TimestampOutOfRange {
                    nearest_timestamp: NearestTimestamp::Earliest(first),
                    ..
                }) => format!(
                    "{} is before the table's earliest readable commit, at {}",
                    shown(at),
                    millis(*first)
                ),
                _ => format!(
                    "no version as of {}: {}",
                    shown(at),
                    crate::error::kernel_message(&e)
                ),
            }),
        }
    })
    .await
    .map_err(|e| format!("time travel to {} stopped: {e}", shown(at)))?
}

fn history_error(e: &delta_kernel::Error) -> Option<&LogHistoryError> {
    match e {
        delta_kernel::Error::Backtraced { source, .. } => history_error(source),
        delta_kernel::Error::LogHistory(h) => Some(h),
        _ => None,
    }
}

/// Why version `version` could not be loaded, when the table has no such version: `None` when
/// it has (the load failed for another reason).
pub(crate) async fn missing_version(table: &DeltaTable, version: u64) -> Option<String> {
    let latest = table.log_store().get_latest_version(0).await.ok()?;
    (version > latest).then(|| format!("version {version} does not exist: the latest is {latest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_rfc_3339_in_any_offset() {
        let AsOf::Timestamp(t) = AsOf::parse_timestamp("2026-11-23T11:00:00+01:00").unwrap() else {
            panic!("a timestamp");
        };
        assert_eq!(shown(t), "2026-11-23T10:00:00.000Z");
        let err = AsOf::parse_timestamp("2026-11-23 10:00").unwrap_err();
        assert!(err.contains("RFC 3339"), "{err}");
        assert_eq!(AsOf::from(Some(3)), AsOf::Version(3));
        assert_eq!(AsOf::from(None), AsOf::Latest);
    }
}
