//! [`LogCache`]: a store that reads a Delta log's immutable objects through the node's disk
//! cache, so that the ranks of a node fetch each of them from the store once.
//!
//! Every rank opens the table by reading its log: 8 ranks of a node fetched each checkpoint
//! part and commit 8 times (17 MB each at 10⁵ files), and the log reader fetches some twice in
//! one open. A commit (`00000000000000000012.json`), a checkpoint (classic, multi-part or v2),
//! a sidecar and a compacted log file never change once written (Delta writes them
//! put-if-absent, or not at all), so their bytes can be kept by what names them: the table's
//! store, the path, and the size and e-tag (else modification time) the listing of
//! `_delta_log` gave. Only objects that listing named are cached; `_last_checkpoint`, listings
//! and anything else pass through, as do conditional and versioned reads. A `head` of a listed
//! log object is answered from the listing, without a request.
//!
//! The bytes go through `DiskCache::get_or_fetch`: checked (CRC-32) on every read, fetched
//! once per node when ranks ask at once, written aside and renamed into place; counted as
//! `log_hits` and `log_misses`, apart from data reads.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ListResult, ObjectMeta, ObjectStore, Result,
};

use voxlake_io::cache::DiskCache;

use crate::log_file::is_immutable;

/// Cached reads in flight at once, per process. A miss holds its entry's lock while it fetches,
/// and the ranks that want the entry wait on that lock on a blocking thread: a log reader that
/// asks for thousands of commits at once (10⁴ commits, 8 processes) filled the blocking pool
/// with waiters until the writes they waited for could not run, and every wait ran out
/// (`LOCK_WAIT`): 107 s to open instead of 7.
const IN_FLIGHT: usize = 64;

/// Reads `inner`'s immutable Delta log objects through `cache` (see the [module](self)).
#[derive(Debug)]
pub(crate) struct LogCache {
    inner: Arc<dyn ObjectStore>,
    cache: Arc<DiskCache>,
    /// Cached reads in flight ([`IN_FLIGHT`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// What tells this store apart from others in cache keys (`location::store_identity`).
    identity: String,
    /// The immutable log objects listings named, by path.
    listed: Arc<Mutex<HashMap<Path, ObjectMeta>>>,
}

impl LogCache {
    /// `inner`, its immutable log objects read through `cache`, keyed under `identity`.
    pub(crate) fn new(
        inner: Arc<dyn ObjectStore>,
        cache: Arc<DiskCache>,
        identity: &str,
    ) -> LogCache {
        LogCache {
            inner,
            cache,
            in_flight: Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT)),
            identity: identity.to_string(),
            listed: Arc::default(),
        }
    }

    /// Remembers the immutable log objects of a listing as they go by.
    fn noted(
        &self,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let listed = self.listed.clone();
        listing
            .inspect_ok(move |meta| {
                if is_immutable(&meta.location)
                    && let Ok(mut listed) = listed.lock()
                {
                    listed.insert(meta.location.clone(), meta.clone());
                }
            })
            .boxed()
    }

    fn listed(&self, location: &Path) -> Option<ObjectMeta> {
        self.listed.lock().ok()?.get(location).cloned()
    }
}

/// The absolute range `range` asks for in an object of `size` bytes; `None` where it is out of
/// the object (the store's own answer, an error, is the one to give).
fn resolve(range: &Option<GetRange>, size: u64) -> Option<Range<u64>> {
    let r = match range {
        None => 0..size,
        Some(GetRange::Bounded(r)) => r.start..r.end.min(size),
        Some(GetRange::Offset(start)) => *start..size,
        Some(GetRange::Suffix(n)) => size.saturating_sub(*n)..size,
    };
    (r.start < r.end || (size == 0 && r == (0..0))).then_some(r)
}

/// Whether a get asks for the object as it is, whatever its version: no condition, no version
/// (the answers an immutable object's bytes can be kept for).
pub(crate) fn unconditional(options: &GetOptions) -> bool {
    options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

voxlake_io::wrapper_store!(LogCache, {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain = unconditional(&options);
        let meta = match self.listed(location) {
            Some(meta) if plain => meta,
            _ => return self.inner.get_opts(location, options).await,
        };
        let Some(range) = resolve(&options.range, meta.size) else {
            return self.inner.get_opts(location, options).await;
        };
        if options.head {
            return Ok(GetResult {
                payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
                meta,
                range,
                attributes: Default::default(),
            });
        }
        let tag = match &meta.e_tag {
            Some(e_tag) => format!("etag={e_tag}"),
            None => format!("modified={}", meta.last_modified.timestamp_millis()),
        };
        let whole = range == (0..meta.size);
        let fetch = async {
            // The whole object is asked for as a plain get, as the caller asked.
            let get = GetOptions {
                range: (!whole).then(|| GetRange::Bounded(range.clone())),
                ..GetOptions::default()
            };
            let bytes = self.inner.get_opts(location, get).await?.bytes().await?;
            if bytes.len() as u64 != range.end - range.start {
                return Err(object_store::Error::Generic {
                    store: "LogCache",
                    source: format!(
                        "{location}: {} bytes answered for range {range:?} of a {}-byte object (changed since it was listed?)",
                        bytes.len(),
                        meta.size
                    )
                    .into(),
                });
            }
            Ok(bytes)
        };
        // Never closed: a permit always comes.
        let _permit = self.in_flight.acquire().await.ok();
        let (object, size) = (location.as_ref(), meta.size);
        let bytes = self
            .cache
            .get_or_fetch_log(&self.identity, object, size, &tag, range.clone(), fetch)
            .await?;
        Ok(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed()),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.noted(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.noted(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[test]
    fn ranges_resolve_within_the_object() {
        assert_eq!(resolve(&None, 10), Some(0..10));
        assert_eq!(resolve(&Some(GetRange::Bounded(2..20)), 10), Some(2..10));
        assert_eq!(resolve(&Some(GetRange::Suffix(4)), 10), Some(6..10));
        assert_eq!(resolve(&Some(GetRange::Offset(3)), 10), Some(3..10));
        assert_eq!(resolve(&Some(GetRange::Offset(12)), 10), None);
    }

    #[tokio::test]
    async fn listed_commits_are_read_once_and_heads_answered_from_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        let store = Arc::new(InMemory::new());
        let commit = Path::from("t/_delta_log/00000000000000000000.json");
        let last = Path::from("t/_delta_log/_last_checkpoint");
        store.put(&commit, "{\"add\":{}}".into()).await.unwrap();
        store.put(&last, "{}".into()).await.unwrap();
        let logs = LogCache::new(store.clone(), cache.clone(), "mem");
        // Not listed yet: passed through, not cached.
        assert_eq!(
            logs.get(&commit)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .len(),
            10
        );
        assert_eq!(cache.stats().log_misses, 0);
        let listed: Vec<_> = logs
            .list(Some(&Path::from("t/_delta_log")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 2);
        for _ in 0..3 {
            let got = logs.get(&commit).await.unwrap().bytes().await.unwrap();
            assert_eq!(&got[..], b"{\"add\":{}}");
            cache.flush().await;
        }
        let range = logs.get_range(&commit, 1..6).await.unwrap();
        assert_eq!(&range[..], b"\"add\"");
        cache.flush().await;
        let stats = cache.stats();
        assert_eq!((stats.log_misses, stats.log_hits), (2, 2), "{stats:?}");
        assert_eq!(
            (stats.misses, stats.hits),
            (0, 0),
            "data reads counted apart"
        );
        assert_eq!(logs.head(&commit).await.unwrap().size, 10);
        // `_last_checkpoint` changes: never cached.
        logs.get(&last).await.unwrap();
        cache.flush().await;
        assert_eq!(cache.stats().log_misses, 2);
    }

    #[tokio::test]
    async fn a_corrupt_log_entry_is_fetched_again_never_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        let store = Arc::new(InMemory::new());
        let commit = Path::from("t/_delta_log/00000000000000000007.json");
        let body = "{\"add\":{\"path\":\"a.parquet\"}}";
        store.put(&commit, body.into()).await.unwrap();
        let logs = LogCache::new(store, cache.clone(), "mem");
        let _: Vec<_> = logs.list(None).try_collect().await.unwrap();
        logs.get(&commit).await.unwrap().bytes().await.unwrap();
        cache.flush().await;
        // Flip a byte of the payload of every entry on disk.
        let entries = dir
            .path()
            .join(voxlake_io::cache::CACHE_SUBDIR)
            .join("entries");
        let mut flipped = 0;
        for entry in std::fs::read_dir(&entries).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            let last = bytes.len() - 2;
            bytes[last] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            flipped += 1;
        }
        assert_eq!(flipped, 1);
        let again = logs.get(&commit).await.unwrap().bytes().await.unwrap();
        assert_eq!(
            &again[..],
            body.as_bytes(),
            "fetched again, not the corrupt bytes"
        );
        let stats = cache.stats();
        assert_eq!((stats.corrupt, stats.log_misses), (1, 2), "{stats:?}");
    }
}
