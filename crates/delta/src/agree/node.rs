//! A job's version resolved once a node: the ranks of a node that start at once found no
//! marker, each resolved "latest" and replayed the log by itself (8 replays a node of 8 GPUs).
//! Through the node's cache the first of them resolves the job's version as a rank does
//! (`agree::open_for_job`: the marker's, else its latest, published) and keeps the answer, the
//! version and its file-set hash, as an entry named by the table and the job; the others wait
//! for it (the entry's lock, `DiskCache::get_or_make`), check it against the job's marker (one
//! GET: the marker is the truth across nodes) unless the entry says none was written (the job
//! had no place to agree: the node's ranks still agree through the entry), open that version —
//! whose replay the first rank kept (`voxlake_delta`'s `file_list::cache`) — and check their file set
//! against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use voxlake_io::cache::DiskCache;
use voxlake_io::{location, redact};

use crate::as_of::AsOf;
use crate::error::DeltaError;
use crate::open::Found;

/// Names the entries of this format.
const FORMAT: &str = "voxlake-job-version-2";

/// [`super::resolve`], once a node through `cache` (see the [module](self)), the job's
/// marker in `place`.
pub(crate) async fn open_for_job<F, Fut>(
    cache: &Arc<DiskCache>,
    location: &str,
    storage_options: &HashMap<String, String>,
    place: &super::Place,
    job: &super::Job,
    open: &F,
) -> Result<Found, DeltaError>
where
    F: Fn(AsOf, super::Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Found, DeltaError>>,
{
    let url = location::to_url(location, true)?;
    let storage = location::storage_options(storage_options);
    let identity = location::store_identity(&url, &storage);
    let shown = redact(url.as_str());
    let id = job.id.as_str();
    // The place is in the name: ranks told of another place agree there, not here.
    let name = format!("{FORMAT}\n{shown}\n{id}\n{}", place.shown);
    // Boxed: an open's future is large (see `options`).
    let resolve = || Box::pin(super::resolve(location, place, job, open));
    // The version this rank read making the entry, handed out as it is.
    let mine: Mutex<Option<Result<super::Resolved, DeltaError>>> = Mutex::new(None);
    let got = cache
        .get_or_make(&identity, &name, async {
            let opened = resolve().await;
            let answer = match &opened {
                Ok(r) => Ok(Bytes::from(format!(
                    "{}\n{}\n{}",
                    r.found.version(),
                    r.found.file_set_hash(),
                    if r.marked { MARKED } else { UNMARKED }
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
        return opened.map(|r| r.found);
    }
    let answer = got.ok().and_then(|bytes| parse(&bytes));
    let Some((version, files, marked)) = answer else {
        tracing::warn!(
            location = %shown,
            job = id,
            "the node's answer for the job's version is unreadable: resolved here"
        );
        return resolve().await.map(|r| r.found);
    };
    let kept = format!("the node's answer in {}", cache.dir().display());
    // No place took a marker: the node's ranks agree through the node's answer.
    if !marked {
        tracing::debug!(location = %shown, job = id, version, "the job's version from the node's cache (no marker)");
        return super::open_agreed(open, &shown, id, &kept, (version, &files), None).await;
    }
    // Checked against the job's marker (one GET, no request of the log): a marker removed or
    // rewritten since the node kept its answer (a job restarted under its id) is the job's
    // truth across nodes, never overruled by what one node kept.
    match super::agreed_in(place, location, id).await? {
        Some(marker) if marker.version == version && marker.files == files => {
            tracing::debug!(location = %shown, job = id, version, "the job's version from the node's cache");
            let marker = place.shown_marker(id);
            super::open_agreed(open, &shown, id, &marker, (version, &files), None).await
        }
        marker => {
            tracing::warn!(
                location = %shown,
                job = id,
                kept = version,
                marker = ?marker.map(|m| m.version),
                "the node's answer for the job's version is not its marker's: resolved here"
            );
            resolve().await.map(|r| r.found)
        }
    }
}

/// How an entry says whether a marker names its version.
const MARKED: &str = "marked";
const UNMARKED: &str = "unmarked";

/// The version, file-set hash and whether a marker names it, as an entry holds them.
fn parse(bytes: &[u8]) -> Option<(u64, String, bool)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split('\n');
    let (version, files) = (lines.next()?.parse().ok()?, lines.next()?.to_string());
    let marked = match lines.next()? {
        MARKED => true,
        UNMARKED => false,
        _ => return None,
    };
    lines.next().is_none().then_some((version, files, marked))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_reads_back_or_not_at_all() {
        assert_eq!(
            super::parse(b"12\nfnv1a64:00ff\nmarked"),
            Some((12, "fnv1a64:00ff".to_string(), true))
        );
        assert_eq!(
            super::parse(b"12\nfnv1a64:00ff\nunmarked"),
            Some((12, "fnv1a64:00ff".to_string(), false))
        );
        assert_eq!(super::parse(b"12\nfnv1a64:00ff"), None);
        assert_eq!(super::parse(b"12\nfnv1a64:00ff\nmarked\n"), None);
        assert_eq!(super::parse(b"x\nfnv\nmarked"), None);
        assert_eq!(super::parse(b"12"), None);
        assert_eq!(super::parse(&[0xff, b'\n']), None);
    }
}
