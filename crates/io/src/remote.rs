//! The object store every read of a remote table's data files goes through (footers, column
//! chunks, first values, whole files): it fetches large ranges as parallel parts, checks that
//! the store returned every byte asked for, asks again for a read that stalls (see
//! [`crate::reask`]), counts the bytes fetched, and serves and fills the node's disk cache
//! ([`crate::cache`]) where the snapshot has one. Local tables are read
//! through [`crate::local`] instead, never cached.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, Result};
use object_store::{OBJECT_STORE_COALESCE_DEFAULT, coalesce_ranges};
use tracing::Instrument;

use crate::cache::{DiskCache, EntryKey};
use crate::local::pool::BufferPool;
use crate::reask::ReaskClock;

/// Ranges of at least twice this are fetched as parts of at least this many bytes, at once:
/// one connection to a cloud store moves ~25–95 MiB/s, so one large row group (Petastorm
/// writes 256 MB ones) would otherwise be one slow stream (AWS's CRT client and Lance split
/// reads into 8–16 MiB parts).
pub(crate) const PART_BYTES: u64 = 8 << 20;
/// Parts of one range fetched at once.
const PARTS_IN_FLIGHT: usize = 16;

/// What makes a remote table's data files' bytes immutable besides their paths, looked up by
/// path: each file's size and tag (its e-tag or version where the store gave one, else its
/// modification time), for cache keys. The table's file list answers it (columnar, without a
/// map of its own: a map of 10⁵ paths took ~12 MB).
pub trait FileIdentities: Send + Sync {
    /// The size and tag of the data file at `path`, if it is one of the table's.
    fn identity(&self, path: &Path) -> Option<(u64, std::borrow::Cow<'_, str>)>;
    /// How many files there are.
    fn count(&self) -> usize;
}

/// A few files given whole (tests, tools).
impl FileIdentities for Vec<(Path, u64, String)> {
    fn identity(&self, path: &Path) -> Option<(u64, std::borrow::Cow<'_, str>)> {
        let (_, size, tag) = self.iter().find(|(p, _, _)| p == path)?;
        Some((*size, std::borrow::Cow::Borrowed(tag.as_str())))
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// A remote table's store, as its snapshot reads it.
pub struct RemoteStore {
    inner: Arc<dyn ObjectStore>,
    /// The table, for cache keys.
    table: String,
    files: Arc<dyn FileIdentities>,
    cache: OnceLock<Arc<DiskCache>>,
    /// Bytes fetched from the store.
    fetched: AtomicU64,
    /// The store's times to first byte, for when a read has stalled.
    stalls: Mutex<ReaskClock>,
    /// Reads asked again because they stalled.
    reasked: AtomicU64,
    /// Ranged requests made of the store (each part of a large read, each read asked again).
    requests: AtomicU64,
    /// Buffers reads land in, recycled once their last view is dropped.
    pool: Arc<BufferPool>,
}

/// The inner store is left out: a store's own `Debug` may print its credentials (object_store's
/// Azure client prints its account key or SAS).
impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("table", &self.table)
            .field("files", &self.files.count())
            .field("cache", &self.cache.get().map(|c| c.dir().to_path_buf()))
            .field("fetched", &self.fetched.load(Ordering::Relaxed))
            .field("reasked", &self.reasked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// `inner` (rooted at the table) for `table`'s data files, each with its size and tag.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        table: &str,
        files: Arc<dyn FileIdentities>,
    ) -> RemoteStore {
        RemoteStore {
            inner,
            table: table.to_string(),
            files,
            cache: OnceLock::new(),
            fetched: AtomicU64::new(0),
            stalls: Mutex::default(),
            reasked: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            pool: Arc::default(),
        }
    }

    /// Serves the data files' reads from `cache` from now on (the first cache set stays).
    pub fn set_cache(&self, cache: Arc<DiskCache>) {
        let _ = self.cache.set(cache);
    }

    /// The table's identity in cache keys (its store and location; `new`'s `table`).
    pub fn identity(&self) -> &str {
        &self.table
    }

    /// The cache its reads go through, if one was set.
    pub fn cache(&self) -> Option<&Arc<DiskCache>> {
        self.cache.get()
    }

    /// Bytes fetched from the store so far.
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// Reads asked again so far because they stalled.
    pub fn reasked(&self) -> u64 {
        self.reasked.load(Ordering::Relaxed)
    }

    /// Ranged requests made of the store so far: each part of a large read, each read asked
    /// again (the cache's hits make none).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
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
    /// are an error naming the object and the range. A request that has not answered, or a body
    /// that has sent nothing, by [`ReaskClock::deadline`] is dropped and the bytes still missing
    /// asked for again.
    async fn read_into(&self, location: &Path, range: Range<u64>, out: &mut [u8]) -> Result<()> {
        let mut at = 0;
        let mut reask = 0;
        loop {
            let deadline = self.deadline(reask);
            let rest = range.start + at as u64..range.end;
            let options = GetOptions::new().with_range(Some(rest.clone()));
            let asked = Instant::now();
            self.requests.fetch_add(1, Ordering::Relaxed);
            // A loader's trace (`with_trace`): one span a request, its answer and body.
            let span = tracing::trace_span!(target: "voxlake::trace", "get",
                object = %location, from = rest.start, bytes = rest.end - rest.start);
            let filled = async {
                let answer = match deadline {
                    Some(d) => {
                        tokio::time::timeout(d, self.inner.get_opts(location, options)).await
                    }
                    None => Ok(self.inner.get_opts(location, options).await),
                };
                Ok::<_, object_store::Error>(match answer {
                    Ok(answer) => {
                        let body = answer?.into_stream();
                        self.answered(asked.elapsed());
                        fill(body, out, &mut at, deadline, location, &range).await?
                    }
                    Err(_) => Filled::Stalled,
                })
            }
            .instrument(span)
            .await?;
            match filled {
                Filled::Whole => return Ok(()),
                Filled::Stalled => {
                    self.reasked.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut clock) = self.stalls.lock() {
                        clock.reasked();
                    }
                    tracing::warn!(
                        "{location}: nothing from the store for {:?} reading bytes {rest:?}; \
                         asked again",
                        deadline.unwrap_or_default()
                    );
                    reask += 1;
                }
            }
        }
    }

    fn deadline(&self, reask: u32) -> Option<Duration> {
        self.stalls.lock().map_or(None, |c| c.deadline(reask))
    }

    fn answered(&self, took: Duration) {
        if let Ok(mut clock) = self.stalls.lock() {
            clock.answered(took);
        }
    }
}

/// How a body ended.
#[derive(Debug, PartialEq)]
enum Filled {
    /// Every byte asked for arrived.
    Whole,
    /// Nothing arrived for the deadline; `at` says how much did before.
    Stalled,
}

/// `out[*at..]` filled from `body`, exactly, `at` advanced over what arrived: more or fewer
/// bytes (a short answer would otherwise be decoded, or cached, as if whole) are an error naming
/// the object and the range; no bytes for `deadline` a stall.
async fn fill(
    mut body: BoxStream<'static, Result<Bytes>>,
    out: &mut [u8],
    at: &mut usize,
    deadline: Option<Duration>,
    location: &Path,
    range: &Range<u64>,
) -> Result<Filled> {
    loop {
        let next = match deadline {
            Some(d) => match tokio::time::timeout(d, body.next()).await {
                Ok(next) => next,
                Err(_) => return Ok(Filled::Stalled),
            },
            None => body.next().await,
        };
        let Some(chunk) = next else { break };
        let chunk = chunk?;
        let end = *at + chunk.len();
        let Some(place) = out.get_mut(*at..end) else {
            return Err(length_error(location, range, end));
        };
        place.copy_from_slice(&chunk);
        *at = end;
    }
    if *at != out.len() {
        return Err(length_error(location, range, *at));
    }
    Ok(Filled::Whole)
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
        match (self.cache.get(), self.files.identity(location)) {
            (Some(cache), Some((size, tag))) => {
                let key = EntryKey::new(&self.table, location.as_ref(), size, &tag, ranges);
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

    fn files(path: &Path, size: u64) -> Arc<dyn FileIdentities> {
        Arc::new(vec![(path.clone(), size, "v1".to_string())])
    }

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
        let store = RemoteStore::new(inner, "mem://t", files(&path, data.len() as u64));
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
        let mut at = 0;
        let filled = fill(
            body(&[b"ab", b"cde"]),
            &mut out,
            &mut at,
            None,
            &path,
            &(20..25),
        );
        assert_eq!(filled.await.unwrap(), Filled::Whole);
        assert_eq!(&out, b"abcde");
        for (chunks, got) in [
            (&[&b"ab"[..], b"cd"][..], 4),
            (&[&b"abc"[..], b"def"][..], 6),
        ] {
            let e = fill(body(chunks), &mut out, &mut 0, None, &path, &(20..25))
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

    /// The first asking never answers, the second sends 100 bytes and then nothing: each is
    /// dropped at its deadline and the rest asked for; the bytes arrive whole, in about the
    /// two deadlines, not the client's timeout.
    #[tokio::test]
    async fn a_stalled_read_is_asked_again_for_what_is_missing() {
        use crate::reask::{FLOOR, WARM};
        use object_store::{GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta};
        use object_store::{PutMultipartOptions, PutOptions, PutPayload, PutResult};
        use std::sync::atomic::AtomicU32;

        #[derive(Debug)]
        struct Stalling {
            inner: InMemory,
            asked: AtomicU32,
        }
        impl std::fmt::Display for Stalling {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Stalling")
            }
        }
        #[async_trait::async_trait]
        impl ObjectStore for Stalling {
            async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
                match self.asked.fetch_add(1, Ordering::SeqCst) {
                    0 => futures::future::pending().await,
                    1 => {
                        let got = self.inner.get_opts(location, options).await?;
                        let whole = got.bytes().await?;
                        let first = whole.slice(..100);
                        let (range, meta, attributes) =
                            (0..whole.len() as u64, meta(), Default::default());
                        Ok(GetResult {
                            payload: GetResultPayload::Stream(
                                futures::stream::once(async move { Ok(first) })
                                    .chain(futures::stream::pending())
                                    .boxed(),
                            ),
                            meta,
                            range,
                            attributes,
                        })
                    }
                    _ => self.inner.get_opts(location, options).await,
                }
            }
            async fn put_opts(&self, _: &Path, _: PutPayload, _: PutOptions) -> Result<PutResult> {
                unimplemented!()
            }
            async fn put_multipart_opts(
                &self,
                _: &Path,
                _: PutMultipartOptions,
            ) -> Result<Box<dyn MultipartUpload>> {
                unimplemented!()
            }
            fn delete_stream(
                &self,
                _: BoxStream<'static, Result<Path>>,
            ) -> BoxStream<'static, Result<Path>> {
                unimplemented!()
            }
            fn list(&self, _: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
                unimplemented!()
            }
            async fn list_with_delimiter(&self, _: Option<&Path>) -> Result<ListResult> {
                unimplemented!()
            }
            async fn copy_opts(
                &self,
                _: &Path,
                _: &Path,
                _: object_store::CopyOptions,
            ) -> Result<()> {
                unimplemented!()
            }
        }
        fn meta() -> ObjectMeta {
            ObjectMeta {
                location: Path::from("part-0.parquet"),
                last_modified: Default::default(),
                size: 0,
                e_tag: None,
                version: None,
            }
        }

        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let (inner, path) = store_with(&data);
        let inner = Arc::into_inner(inner).unwrap();
        let stalling = Arc::new(Stalling {
            inner,
            asked: AtomicU32::new(0),
        });
        let store = RemoteStore::new(stalling.clone(), "mem://t", files(&path, 1000));
        // A store measured quick: the deadline is the floor.
        for _ in 0..WARM {
            store.answered(Duration::from_millis(1));
        }
        let started = Instant::now();
        let got = store.get_ranges(&path, &[10..1000]).await.unwrap();
        assert_eq!(got[0], &data[10..]);
        assert_eq!(store.reasked(), 2);
        assert_eq!(store.requests(), 3, "the first ask and two more");
        assert_eq!(stalling.asked.load(Ordering::SeqCst), 3);
        // The first asking waited the floor, the second twice that; not the client's timeout.
        let took = started.elapsed();
        assert!(
            took >= FLOOR * 3 && took < FLOOR * 3 + Duration::from_secs(5),
            "{took:?}"
        );
    }
}
