//! A job's version resolved once a node: the ranks of a node that start at once found no
//! marker, each resolved "latest" and replayed the log by itself (8 replays a node of 8 GPUs).
//! Through the node's cache the first of them resolves the job's version as a rank does
//! (`pin::open_for_job`: the marker's, else its latest, published) and keeps the answer, the
//! version and its file-set hash, as an entry named by the table and the job; the others wait
//! for it (the entry's lock, `DiskCache::get_or_make`), check it against the job's marker (one
//! GET: the marker is the truth across nodes), open that version — whose replay the first rank
//! kept (`snapshot::list_cache`) — and check their file set against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use voxlake_io::cache::DiskCache;
use voxlake_io::{location, redact};

use crate::error::TableError;
use crate::{AsOf, Snapshot};

/// Names the entries of this format.
const FORMAT: &str = "voxlake-job-version-1";

/// [`super::open_for_job`], once a node through `cache` (see the [module](self)).
pub(crate) async fn open_for_job<F, Fut>(
    cache: &Arc<DiskCache>,
    location: &str,
    storage_options: &HashMap<String, String>,
    job: &str,
    open: &F,
) -> Result<Snapshot, TableError>
where
    F: Fn(AsOf, super::Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Snapshot, TableError>>,
{
    let url = location::to_url(location, true)?;
    let storage = location::storage_options(storage_options);
    let identity = location::store_identity(&url, &storage);
    let shown = redact(url.as_str());
    let name = format!("{FORMAT}\n{shown}\n{job}");
    // Boxed: an open's future is large (see `options`).
    let resolve = || {
        Box::pin(super::open_for_job(
            location,
            storage_options,
            None,
            job,
            open,
        ))
    };
    // The snapshot this rank opened making the entry, handed out as it is.
    let mine: Mutex<Option<Result<Snapshot, TableError>>> = Mutex::new(None);
    let got = cache
        .get_or_make(&identity, &name, async {
            let opened = resolve().await;
            let answer = match &opened {
                Ok(s) => Ok(Bytes::from(format!(
                    "{}\n{}",
                    s.version(),
                    s.file_set_hash()
                ))),
                Err(_) => Err(object_store::Error::Generic {
                    store: "voxlake job version",
                    source: "the job's version was not resolved".into(),
                }),
            };
            *mine.lock().unwrap_or_else(|e| e.into_inner()) = Some(opened);
            answer
        })
        .await;
    if let Some(opened) = mine.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return opened;
    }
    let answer = got.ok().and_then(|bytes| parse(&bytes));
    let Some((version, files)) = answer else {
        tracing::warn!(
            location = %shown,
            job,
            "the node's answer for the job's version is unreadable: resolved here"
        );
        return resolve().await;
    };
    // Checked against the job's marker (one GET, no request of the log): a marker removed or
    // rewritten since the node kept its answer (a job restarted under its id) is the job's
    // truth across nodes, never overruled by what one node kept.
    match super::pinned(location, storage_options, None, job).await? {
        Some(marker) if marker.version == version && marker.files == files => {
            tracing::debug!(location = %shown, job, version, "the job's version from the node's cache");
            super::open_pinned(open, job, version, &files, None).await
        }
        marker => {
            tracing::warn!(
                location = %shown,
                job,
                kept = version,
                marker = ?marker.map(|m| m.version),
                "the node's answer for the job's version is not its marker's: resolved here"
            );
            resolve().await
        }
    }
}

/// The version and file-set hash an entry holds.
fn parse(bytes: &[u8]) -> Option<(u64, String)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (version, files) = text.split_once('\n')?;
    Some((version.parse().ok()?, files.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_reads_back_or_not_at_all() {
        assert_eq!(
            super::parse(b"12\nfnv1a64:00ff"),
            Some((12, "fnv1a64:00ff".to_string()))
        );
        assert_eq!(super::parse(b"x\nfnv"), None);
        assert_eq!(super::parse(b"12"), None);
        assert_eq!(super::parse(&[0xff, b'\n']), None);
    }
}
