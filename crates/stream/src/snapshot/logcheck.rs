//! Naming the log file a failed load tripped on. The Delta kernel reports a commit it cannot
//! parse by its parser's words only ("Json error: Truncated record…"); on that error path, and
//! only there, the commits the load read (those after the last checkpoint) are parsed again
//! line by line to say which file and line it was.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// A log file's version, if `name` is a commit (`00000000000000000003.json`) or a checkpoint
/// (`…10.checkpoint.parquet`, `…10.checkpoint.<uuid>.json`, multi-part ones).
fn parse_name(name: &str) -> Option<(u64, bool)> {
    let (digits, rest) = name.split_at_checked(20)?;
    let version = digits.parse::<u64>().ok()?;
    match rest {
        ".json" => Some((version, false)),
        r if r.starts_with(".checkpoint") => Some((version, true)),
        _ => None,
    }
}

/// The first commit among those a load up to `up_to` (the latest: `None`) reads whose text is
/// not JSON, as "commit FILE, line N: cause"; `None` when each of them parses (the failure was
/// elsewhere) or the log cannot be listed.
pub(crate) async fn malformed_commit(
    store: &dyn ObjectStore,
    up_to: Option<u64>,
) -> Option<String> {
    let log = Path::from("_delta_log");
    let listed: Vec<object_store::ObjectMeta> = store.list(Some(&log)).try_collect().await.ok()?;
    let mut commits = Vec::new();
    let mut checkpoint = None;
    for meta in &listed {
        // Only the log's own files, not `_sidecars/` or `_commits/`.
        let parts: Vec<_> = meta.location.prefix_match(&log)?.collect();
        let [name] = parts.as_slice() else { continue };
        let Some((version, is_checkpoint)) = parse_name(name.as_ref()) else {
            continue;
        };
        if up_to.is_some_and(|v| version > v) {
            continue;
        }
        if is_checkpoint {
            checkpoint = checkpoint.max(Some(version));
        } else {
            commits.push((version, meta.location.clone()));
        }
    }
    commits.retain(|(v, _)| checkpoint.is_none_or(|c| *v > c));
    commits.sort();
    for (_, path) in commits {
        let bytes = store.get(&path).await.ok()?.bytes().await.ok()?;
        let name = path.filename().unwrap_or_default().to_string();
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return Some(format!("commit {name} is not UTF-8 text"));
        };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                return Some(format!("commit {name}, line {}: {e}", i + 1));
            }
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
    fn log_names_say_their_version() {
        assert_eq!(parse_name("00000000000000000003.json"), Some((3, false)));
        assert_eq!(
            parse_name("00000000000000000010.checkpoint.parquet"),
            Some((10, true))
        );
        assert_eq!(
            parse_name("00000000000000000006.checkpoint.f5ee283b.json"),
            Some((6, true))
        );
        assert_eq!(parse_name("00000000000000000003.crc"), None);
        assert_eq!(parse_name("_last_checkpoint"), None);
    }

    #[tokio::test]
    async fn the_malformed_commit_after_the_checkpoint_is_named_with_its_line() {
        let store = InMemory::new();
        let put = |name: &str, text: &str| {
            let path = Path::from(format!("_delta_log/{name}"));
            let payload = PutPayload::from(text.as_bytes().to_vec());
            let store = &store;
            async move { store.put(&path, payload).await.unwrap() }
        };
        // A broken commit before the checkpoint is not read by a load: not reported.
        put("00000000000000000000.json", "{\"a\":1}\n{broken\n").await;
        put("00000000000000000001.checkpoint.parquet", "PAR1").await;
        put("00000000000000000002.json", "{\"a\":1}\n").await;
        assert_eq!(malformed_commit(&store, None).await, None);
        put(
            "00000000000000000003.json",
            "{\"a\":1}\n{\"add\":{\"path\":\n",
        )
        .await;
        let found = malformed_commit(&store, None).await.unwrap();
        assert!(
            found.starts_with("commit 00000000000000000003.json, line 2: "),
            "{found}"
        );
        // Pinned before it, the broken commit is not read.
        assert_eq!(malformed_commit(&store, Some(2)).await, None);
    }
}
