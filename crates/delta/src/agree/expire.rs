//! Old job markers removed: the first rank of a job, having written its own marker, deletes
//! those of its folder (`_voxlake/jobs/` beside the table, or the table's folder in a job
//! folder or the node's) last modified more than [`RETENTION`] ago. Best effort: a
//! listing or a delete that fails (a store that allows creating but not deleting, another
//! job's rank deleting the same one) leaves the marker for a later job.

use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::MAX_MARKER_BYTES;

/// How long a job's marker is kept: longer than any job runs (a job restarted under its id
/// within it reads the version it began with; after it, the latest).
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Deletes the markers in `folder` of `store` older than [`RETENTION`] at `now`, except
/// `ours`; returns how many it deleted.
pub(crate) async fn expire(
    store: &dyn ObjectStore,
    folder: &Path,
    ours: &Path,
    now: SystemTime,
) -> usize {
    let Some(cutoff) = now.checked_sub(RETENTION) else {
        return 0;
    };
    let listed: Vec<_> = match store.list(Some(folder)).try_collect().await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::debug!(error = %e, "old job markers not listed");
            return 0;
        }
    };
    let mut deleted = 0;
    for meta in listed {
        let is_marker = meta.location.as_ref().ends_with(".json") && meta.size <= MAX_MARKER_BYTES;
        let old = SystemTime::from(meta.last_modified) < cutoff;
        if !is_marker || !old || &meta.location == ours {
            continue;
        }
        match store.delete(&meta.location).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                tracing::debug!(marker = %meta.location, error = %e, "old job marker not deleted")
            }
        }
    }
    if deleted > 0 {
        tracing::info!(deleted, "job markers older than the retention removed");
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agree::{Channel, JOBS_FOLDER, Place};
    use object_store::local::LocalFileSystem;
    use std::sync::Arc;

    #[tokio::test]
    async fn markers_past_the_retention_are_removed_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join(JOBS_FOLDER);
        std::fs::create_dir_all(&jobs).unwrap();
        let now = SystemTime::now();
        let aged = |name: &str, age: Duration| {
            let path = jobs.join(name);
            std::fs::write(&path, b"{}").unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(now - age).unwrap();
        };
        aged("old.json", RETENTION + Duration::from_secs(60));
        aged("ours.json", RETENTION * 2);
        aged("recent.json", RETENTION - Duration::from_secs(60));
        aged("notes.txt", RETENTION * 3);
        let store = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let ours = Path::from(format!("{JOBS_FOLDER}/ours.json"));
        let folder = Path::from(JOBS_FOLDER);
        assert_eq!(expire(&store, &folder, &ours, now).await, 1);
        let mut left: Vec<String> = std::fs::read_dir(&jobs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt", "ours.json", "recent.json"]);
        // The first rank of a new job removes them as it publishes its version; a later rank, no.
        aged("old.json", RETENTION * 2);
        let place = Place::new(Arc::new(store), JOBS_FOLDER, Channel::Table);
        let agreed = super::super::agree(&place, "file:///t", "job-new", 3, "fnv1a64:a").await;
        assert_eq!(agreed.unwrap(), super::super::Agreed::Keep);
        assert!(!jobs.join("old.json").exists());
        let marker: super::super::Marker =
            serde_json::from_slice(&std::fs::read(jobs.join("job-new.json")).unwrap()).unwrap();
        let written = SystemTime::UNIX_EPOCH + Duration::from_secs(marker.written);
        assert!(
            written.elapsed().unwrap_or_default() < Duration::from_secs(600),
            "{marker:?}"
        );
        // Nothing to list: nothing deleted, no error.
        let empty = tempfile::tempdir().unwrap();
        let store = LocalFileSystem::new_with_prefix(empty.path()).unwrap();
        assert_eq!(expire(&store, &folder, &ours, now).await, 0);
    }
}
