//! Naming the log file a failed load tripped on. The Delta kernel reports a log file it cannot
//! parse by its parser's words only ("Json error: Truncated record…", "Parquet error: Corrupt
//! footer"); on that error path, and only there, the files the load read are checked again: the
//! commits after the last checkpoint line by line, and that checkpoint's files (JSON lines, or
//! Parquet footers; v2 sidecars too), to say which file (and line) it was.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use parquet::arrow::async_reader::AsyncFileReader;
use voxlake_io::ObjectFileReader;

use crate::log_file::LogFile;

/// The first commit missing from a log whose last checkpoint is `checkpoint` and whose
/// commits after it are `commits` (ascending): "commit 2 is missing between 1 and 3".
fn gap(checkpoint: Option<u64>, commits: impl Iterator<Item = u64>) -> Option<String> {
    let mut last = checkpoint;
    for version in commits {
        match last {
            Some(before) if version > before + 1 => {
                let missing = before + 1;
                return Some(format!(
                    "commit {missing} ({missing:020}.json) is missing between {} {before} and commit {version}: the log is not contiguous",
                    if checkpoint == Some(before) {
                        "checkpoint"
                    } else {
                        "commit"
                    }
                ));
            }
            None if version > 0 => {
                return Some(format!(
                    "commit 0 (00000000000000000000.json) is missing and no checkpoint precedes commit {version}"
                ));
            }
            _ => {}
        }
        last = Some(version);
    }
    None
}

/// The first file among those a load up to `up_to` (the latest: `None`) reads that does not
/// parse, as "commit FILE, line N: cause" or "checkpoint FILE: cause"; `None` when each of
/// them parses (the failure was elsewhere) or the log cannot be listed.
pub(crate) async fn unreadable_log_file(
    store: &Arc<dyn ObjectStore>,
    up_to: Option<u64>,
) -> Option<String> {
    let log = Path::from("_delta_log");
    let listed: Vec<ObjectMeta> = store.list(Some(&log)).try_collect().await.ok()?;
    let mut commits = Vec::new();
    let mut checkpoints: Vec<(u64, ObjectMeta)> = Vec::new();
    for meta in listed {
        // The log's own files and its sidecars, not `_commits/`.
        let parts: Vec<String> = meta
            .location
            .prefix_match(&log)?
            .map(|p| p.as_ref().to_string())
            .collect();
        let name = match parts.as_slice() {
            [name] => name.as_str(),
            [folder, name] if folder == "_sidecars" => name.as_str(),
            _ => continue,
        };
        let Some(file) = LogFile::parse(name) else {
            continue;
        };
        let (version, is_checkpoint) = (file.version(), matches!(file, LogFile::Checkpoint(_)));
        if up_to.is_some_and(|v| version > v) {
            continue;
        }
        if is_checkpoint {
            checkpoints.push((version, meta));
        } else if parts.len() == 1 {
            commits.push((version, meta.location));
        }
    }
    let checkpoint = checkpoints.iter().map(|(v, _)| *v).max();
    commits.retain(|(v, _)| checkpoint.is_none_or(|c| *v > c));
    commits.sort();
    if let Some(gap) = gap(checkpoint, commits.iter().map(|(v, _)| *v)) {
        return Some(gap);
    }
    for (_, path) in commits {
        if let Some(found) = bad_json(store, &path, "commit").await {
            return Some(found);
        }
    }
    for (_, meta) in checkpoints.iter().filter(|(v, _)| Some(*v) == checkpoint) {
        let found = if meta.location.as_ref().ends_with(".json") {
            bad_json(store, &meta.location, "checkpoint").await
        } else {
            let mut reader = ObjectFileReader::new(store.clone(), meta.location.clone(), meta.size);
            let name = meta.location.filename().unwrap_or_default();
            match reader.get_metadata(None).await {
                Ok(_) => None,
                Err(e) => Some(format!("checkpoint {name}: {e}")),
            }
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// `what` (`commit` or `checkpoint`) at `path` named with the first line that is not JSON.
async fn bad_json(store: &Arc<dyn ObjectStore>, path: &Path, what: &str) -> Option<String> {
    let bytes = store.get(path).await.ok()?.bytes().await.ok()?;
    let name = path.filename().unwrap_or_default().to_string();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Some(format!("{what} {name} is not UTF-8 text"));
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
            return Some(format!("{what} {name}, line {}: {e}", i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::PutPayload;
    use object_store::memory::InMemory;

    #[test]
    fn a_missing_commit_is_named() {
        let e = gap(None, [0, 1, 3].into_iter()).unwrap();
        assert!(
            e.starts_with(
                "commit 2 (00000000000000000002.json) is missing between commit 1 and commit 3"
            ),
            "{e}"
        );
        assert!(
            gap(Some(10), [12].into_iter())
                .unwrap()
                .contains("between checkpoint 10")
        );
        assert!(gap(None, [1, 2].into_iter()).unwrap().contains("commit 0"));
        assert_eq!(gap(Some(10), [11, 12].into_iter()), None);
        assert_eq!(gap(None, [0, 1, 2].into_iter()), None);
        assert_eq!(gap(Some(3), std::iter::empty()), None);
    }

    /// Writes `_delta_log/<name>` of `store`.
    async fn put(store: &Arc<dyn ObjectStore>, name: &str, text: &str) {
        let path = Path::from(format!("_delta_log/{name}"));
        let payload = PutPayload::from(text.as_bytes().to_vec());
        store.put(&path, payload).await.unwrap();
    }

    #[tokio::test]
    async fn the_file_a_load_reads_and_cannot_parse_is_named() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        // A broken commit before the checkpoint is not read by a load: not reported.
        put(&store, "00000000000000000000.json", "{\"a\":1}\n{broken\n").await;
        put(&store, "00000000000000000002.json", "{\"a\":1}\n").await;
        // A checkpoint of version 1 that is not Parquet (cut short).
        put(&store, "00000000000000000001.checkpoint.parquet", "PAR1xx").await;
        let found = unreadable_log_file(&store, None).await.unwrap();
        assert!(
            found.starts_with("checkpoint 00000000000000000001.checkpoint.parquet: "),
            "{found}"
        );
        // At a version before the checkpoint, the load reads commit 0: its line 2 is named.
        let found = unreadable_log_file(&store, Some(0)).await.unwrap();
        assert!(
            found.starts_with("commit 00000000000000000000.json, line 2: "),
            "{found}"
        );
        // A broken commit after the checkpoint comes first.
        let broken = "{\"a\":1}\n{\"add\":{\"path\":\n";
        put(&store, "00000000000000000003.json", broken).await;
        let found = unreadable_log_file(&store, None).await.unwrap();
        assert!(
            found.starts_with("commit 00000000000000000003.json, line 2: "),
            "{found}"
        );
        // A v2 checkpoint's sidecar is checked with it.
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let sidecar = "_sidecars/00000000000000000006.checkpoint.0000000001.0000000001.ab.parquet";
        put(
            &store,
            "00000000000000000006.checkpoint.f5ee.json",
            "{\"a\":1}\n",
        )
        .await;
        put(&store, sidecar, "not parquet").await;
        let found = unreadable_log_file(&store, None).await.unwrap();
        assert!(found.contains("0000000001.ab.parquet: "), "{found}");
        assert_eq!(unreadable_log_file(&store, Some(5)).await, None);
    }
}
