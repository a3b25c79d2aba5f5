//! The object store every read of a remote table's data files goes through (footers, column
//! chunks, first values, whole files): it fetches large ranges as parallel parts, checks that
//! the store returned every byte asked for, counts the bytes fetched, and serves and fills
//! the node's disk cache ([`crate::cache`]) where the snapshot has one. Local tables are read
//! through [`crate::local`] instead, never cached.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, Result};
use object_store::{OBJECT_STORE_COALESCE_DEFAULT, coalesce_ranges};

use crate::cache::{DiskCache, EntryKey};
use crate::local::pool::BufferPool;

/// Ranges of at least twice this are fetched as parts of at least this many bytes, at once:
/// one connection to a cloud store moves ~25–95 MiB/s, so one large row group (Petastorm
/// writes 256 MB ones) would otherwise be one slow stream (AWS's CRT client and Lance split
/// reads into 8–16 MiB parts).
pub const PART_BYTES: u64 = 8 << 20;
/// Parts of one range fetched at once.
const PARTS_IN_FLIGHT: usize = 16;

/// What makes a data file's bytes immutable, besides its path.
#[derive(Debug, Clone)]
struct Identity {
    size: u64,
    /// Its e-tag or version where the store gave one, else its modification time.
    tag: String,
}

/// A remote table's store, as its snapshot reads it.
pub struct RemoteStore {
    inner: Arc<dyn ObjectStore>,
    /// The table, for cache keys.
    table: String,
    files: HashMap<Path, Identity>,
    cache: OnceLock<Arc<DiskCache>>,
    /// Bytes fetched from the store.
    fetched: AtomicU64,
    /// Buffers reads land in, recycled once their last view is dropped.
    pool: Arc<BufferPool>,
}

/// The inner store is left out: a store's own `Debug` may print its credentials (object_store's
/// Azure client prints its account key or SAS).
impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("table", &self.table)
            .field("files", &self.files.len())
            .field("cache", &self.cache.get().map(|c| c.dir().to_path_buf()))
            .field("fetched", &self.fetched.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// `inner` (rooted at the table) for `table`'s data files, each with its size and tag.
    pub fn new<'a>(
        inner: Arc<dyn ObjectStore>,
        table: &str,
        files: impl IntoIterator<Item = (&'a Path, u64, &'a str)>,
    ) -> RemoteStore {
        RemoteStore {
            inner,
            table: table.to_string(),
            files: files
                .into_iter()
                .map(|(path, size, tag)| {
                    (
                        path.clone(),
                        Identity {
                            size,
                            tag: tag.to_string(),
                        },
                    )
                })
                .collect(),
            cache: OnceLock::new(),
            fetched: AtomicU64::new(0),
            pool: Arc::default(),
        }
    }

    /// Serves the data files' reads from `cache` from now on (the first cache set stays).
    pub fn set_cache(&self, cache: Arc<DiskCache>) {
        let _ = self.cache.set(cache);
    }

    /// The cache its reads go through, if one was set.
    pub fn cache(&self) -> Option<&Arc<DiskCache>> {
        self.cache.get()
    }

    /// Bytes fetched from the store so far.
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// `ranges` of `location`, coalesced as object_store does (each fetched range is whole,
    /// so each slice of it is).
    async fn fetch(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        coalesce_ranges(
            ranges,
            |r| self.fetch_range(location, r),
            OBJECT_STORE_COALESCE_DEFAULT,
        )
        .await
    }

    /// One range, into a recycled buffer (a fresh one per read costs a page fault and the
    /// kernel's zeroing per 4 KiB: a quarter of a cold read's system time here), in parts of at
    /// least [`PART_BYTES`] fetched at once when it is large, each part streamed into its place.
    async fn fetch_range(&self, location: &Path, range: Range<u64>) -> Result<Bytes> {
        let len = range.end.saturating_sub(range.start);
        let n = (len / PART_BYTES).max(1);
        let mut filling = BufferPool::filling(&self.pool, len as usize);
        let mut parts = Vec::with_capacity(n as usize);
        let mut rest = filling.buf();
        for i in 0..n {
            let part = range.start + len * i / n..range.start + len * (i + 1) / n;
            let (head, tail) = rest.split_at_mut((part.end - part.start) as usize);
            parts.push(self.read_into(location, part, head));
            rest = tail;
        }
        futures::stream::iter(parts)
            .buffer_unordered(PARTS_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        self.fetched.fetch_add(len, Ordering::Relaxed);
        Ok(filling.into_bytes())
    }

    /// `range` of `location` streamed into `out` (its length); more or fewer bytes than that
    /// are an error naming the object and the range.
    async fn read_into(&self, location: &Path, range: Range<u64>, out: &mut [u8]) -> Result<()> {
        let options = GetOptions::new().with_range(Some(range.clone()));
        let body = self.inner.get_opts(location, options).await?.into_stream();
        fill(body, out, location, &range).await
    }
}

/// `out` filled from `body`, exactly: more or fewer bytes (a short answer would otherwise be
/// decoded, or cached, as if whole) are an error naming the object and the range.
async fn fill(
    mut body: BoxStream<'static, Result<Bytes>>,
    out: &mut [u8],
    location: &Path,
    range: &Range<u64>,
) -> Result<()> {
    let mut at = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let end = at + chunk.len();
        let Some(place) = out.get_mut(at..end) else {
            return Err(length_error(location, range, end));
        };
        place.copy_from_slice(&chunk);
        at = end;
    }
    if at != out.len() {
        return Err(length_error(location, range, at));
    }
    Ok(())
}

fn length_error(location: &Path, range: &Range<u64>, got: usize) -> object_store::Error {
    object_store::Error::Generic {
        store: "RemoteStore",
        source: format!("{location}: the store returned {got} bytes for range {range:?}").into(),
    }
}

impl RemoteStore {
    /// Every data read: see the module's documentation.
    async fn read_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let fetch = self.fetch(location, ranges);
        match (self.cache.get(), self.files.get(location)) {
            (Some(cache), Some(file)) => {
                let key =
                    EntryKey::new(&self.table, location.as_ref(), file.size, &file.tag, ranges);
                cache.get_or_fetch(key, location.as_ref(), fetch).await
            }
            _ => fetch.await,
        }
    }
}

crate::passthrough::reads_ranges_itself!(RemoteStore);

#[cfg(test)]
// One range is a list of ranges to object_store.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn store_with(data: &[u8]) -> (Arc<InMemory>, Path) {
        let inner = Arc::new(InMemory::new());
        let path = Path::from("part-0.parquet");
        futures::executor::block_on(inner.put(&path, data.to_vec().into())).unwrap();
        (inner, path)
    }

    #[tokio::test]
    async fn large_ranges_arrive_whole_from_parts_and_are_counted() {
        let data: Vec<u8> = (0..(PART_BYTES * 5 / 2)).map(|i| (i % 251) as u8).collect();
        let (inner, path) = store_with(&data);
        let store = RemoteStore::new(inner, "mem://t", [(&path, data.len() as u64, "v1")]);
        let end = data.len() as u64;
        let got = store.get_ranges(&path, &[3..end - 1, 0..10]).await.unwrap();
        assert_eq!(got[0], &data[3..end as usize - 1]);
        assert_eq!(got[1], &data[..10]);
        // One coalesced range (the two overlap), fetched once in two parts.
        assert_eq!(store.fetched(), end - 1);
    }

    #[tokio::test]
    async fn a_short_or_long_answer_is_an_error_naming_the_file() {
        let path = Path::from("part-0.parquet");
        let body = |chunks: &[&[u8]]| {
            let chunks: Vec<Result<Bytes>> =
                chunks.iter().map(|c| Ok(Bytes::from(c.to_vec()))).collect();
            futures::stream::iter(chunks).boxed()
        };
        let mut out = [0u8; 5];
        fill(body(&[b"ab", b"cde"]), &mut out, &path, &(20..25))
            .await
            .unwrap();
        assert_eq!(&out, b"abcde");
        for (chunks, got) in [
            (&[&b"ab"[..], b"cd"][..], 4),
            (&[&b"abc"[..], b"def"][..], 6),
        ] {
            let e = fill(body(chunks), &mut out, &path, &(20..25))
                .await
                .unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "part-0.parquet: the store returned {got} bytes for range 20..25"
                )),
                "{e}"
            );
        }
    }
}
