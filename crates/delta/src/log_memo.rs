//! [`LogMemo`]: a store that remembers, while a table opens, the bytes of the immutable log
//! objects it was asked for, so that a read asked again is answered from memory.
//!
//! deltalake's open reads the log twice: the kernel's pass for the protocol and metadata reads
//! the commits (all of them where only version 0 holds the metadata), then the pass for the
//! files reads them again; a checkpoint's footer was read 4 times and its row groups twice. A
//! commit, a checkpoint part or a sidecar never
//! changes once written (`log_file::is_immutable`), so the same request (object and
//! range) gets the same bytes: the first answer is kept and handed out again, and a request
//! asked while the same one is in flight waits for it rather than asking the store too.
//!
//! A log Parquet file (a checkpoint part) is read from its end first: its last 8 bytes, then
//! its footer, then the small column chunks of protocol and metadata, one round trip each, then
//! its file actions. Where the listing told its size, the first request within its last
//! `TAIL_BYTES` fetches all of them, and the others are answered from that tail; a file of at
//! most `WHOLE_BYTES` is fetched whole by that request (the file actions are most of a
//! checkpoint), so its reads are one round trip.
//!
//! A read longer than `PART_BYTES` (a checkpoint's file actions are one column chunk: 19 MB
//! at 10⁵ files, 168 MB at 10⁶) is asked in parts, all at once, not as one GET.
//!
//! Answers of objects that can change (`_last_checkpoint`, a listing of `_delta_log`) can be
//! primed by a reader that just got them ([`LogMemo::prime_get`], [`LogMemo::prime_listing`]):
//! the next request for the same is answered with them, once (see `primed`).
//!
//! Only while the table opens ([`LogMemo::close`] lets everything go and passes every request
//! through from then on), and only up to [`LogMemo::new`]'s cap of bytes (past it, requests pass
//! through). Conditional and versioned gets and `head`s pass through.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ListResult, OBJECT_STORE_COALESCE_DEFAULT,
    ObjectMeta, ObjectStore, Result, coalesce_ranges,
};
use tokio::sync::OnceCell;

use crate::log_cache::unconditional;
use crate::log_file::is_immutable;

mod primed;
use primed::Primed;

/// What one request got: its bytes and what the store said of them.
#[derive(Clone)]
struct Answer {
    bytes: Bytes,
    meta: ObjectMeta,
    range: std::ops::Range<u64>,
}

/// The object and the range asked for (`GetRange` is not `Hash`: its `Debug` text names it).
type Key = (Path, String);

/// Bytes fetched at once from the end of a log Parquet file when a read falls in them.
pub(crate) const TAIL_BYTES: u64 = 1 << 20;

/// A log read longer than this is asked in parts of this size, all at once.
pub(crate) const PART_BYTES: u64 = 8 << 20;

/// A listed log Parquet file of at most this many bytes is fetched whole (in parts at once) by
/// its first read.
pub(crate) const WHOLE_BYTES: u64 = 32 << 20;

/// Remembers a table's log answers while it opens (see the [module](self)).
#[derive(Debug)]
pub(crate) struct LogMemo {
    inner: Arc<dyn ObjectStore>,
    cap: u64,
    kept: Mutex<HashMap<Key, Arc<OnceCell<Answer>>>>,
    bytes: AtomicU64,
    closed: AtomicBool,
    /// Requests answered from memory.
    hits: AtomicU64,
    /// The sizes of the log's Parquet files, as listings gave them.
    sizes: Arc<Mutex<HashMap<Path, u64>>>,
    /// Answers just read by one reader, for the next (see `primed`).
    primed: Primed,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes of {}", self.bytes.len(), self.meta.location)
    }
}

impl LogMemo {
    /// `inner`, its log objects' answers kept up to `cap` bytes until [`close`](Self::close).
    pub(crate) fn new(inner: Arc<dyn ObjectStore>, cap: u64) -> LogMemo {
        LogMemo {
            inner,
            cap,
            kept: Mutex::default(),
            bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            sizes: Arc::default(),
            primed: Primed::default(),
        }
    }

    /// The next plain get of `location` (a mutable object just read: `_last_checkpoint`) is
    /// answered with `found` (its bytes and metadata, or `None`: not found), once.
    pub(crate) fn prime_get(&self, location: Path, found: Option<(Bytes, ObjectMeta)>) {
        if !self.closed.load(Ordering::SeqCst) {
            self.primed.get(location, found);
        }
    }

    /// The next listing of `prefix` (whole, or from an offset) is answered from `objects`, a
    /// whole listing of it just made, once.
    pub(crate) fn prime_listing(&self, prefix: Path, objects: Vec<ObjectMeta>) {
        if !self.closed.load(Ordering::SeqCst) {
            self.primed.listing(prefix, objects);
        }
    }

    /// Lets every kept answer go; every request passes through from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut kept) = self.kept.lock() {
            kept.clear();
        }
        self.primed.clear();
        self.bytes.store(0, Ordering::SeqCst);
    }

    /// Requests answered from memory so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The slot of `key`: the one kept, else a new one while under the cap and open.
    fn slot(&self, key: Key) -> Option<Arc<OnceCell<Answer>>> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let mut kept = self.kept.lock().ok()?;
        if let Some(slot) = kept.get(&key) {
            return Some(slot.clone());
        }
        if self.bytes.load(Ordering::Relaxed) >= self.cap {
            return None;
        }
        Some(kept.entry(key).or_default().clone())
    }

    /// The window `range` falls in, where `location` is a log Parquet file of known size: the
    /// whole file up to [`WHOLE_BYTES`], else its last [`TAIL_BYTES`].
    fn window(&self, location: &Path, range: &Option<GetRange>) -> Option<Range<u64>> {
        let size = *self.sizes.lock().ok()?.get(location)?;
        let window = match size <= WHOLE_BYTES {
            true => 0..size,
            false => size.saturating_sub(TAIL_BYTES)..size,
        };
        match range {
            Some(GetRange::Bounded(r))
                if r.start < r.end && r.start >= window.start && r.end <= size =>
            {
                Some(window)
            }
            _ => None,
        }
    }

    /// A listing, the sizes of the log's Parquet files noted on the way.
    fn noting(
        &self,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let sizes = self.sizes.clone();
        listing
            .inspect(move |item| {
                if let Ok(meta) = item
                    && is_immutable(&meta.location)
                    && meta.location.as_ref().ends_with(".parquet")
                    && let Ok(mut sizes) = sizes.lock()
                {
                    sizes.insert(meta.location.clone(), meta.size);
                }
            })
            .boxed()
    }

    /// A kept answer (asked once, the first time), counted.
    async fn kept(
        &self,
        slot: Arc<OnceCell<Answer>>,
        location: &Path,
        options: GetOptions,
    ) -> Result<Answer> {
        let mut asked = false;
        let answer = slot
            .get_or_try_init(|| {
                asked = true;
                self.ask(location, options)
            })
            .await?
            .clone();
        if asked {
            self.bytes
                .fetch_add(answer.bytes.len() as u64, Ordering::Relaxed);
        } else {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(answer)
    }

    /// The store's answer to `options`; a range longer than [`PART_BYTES`] asked in parts at
    /// once (a checkpoint's file actions are one column chunk: 168 MB at 10⁶ files).
    async fn ask(&self, location: &Path, options: GetOptions) -> Result<Answer> {
        let Some(GetRange::Bounded(range)) = options.range.clone() else {
            return self.ask_one(location, options).await;
        };
        if range.end.saturating_sub(range.start) <= PART_BYTES {
            return self.ask_one(location, options).await;
        }
        let parts = (range.start..range.end)
            .step_by(PART_BYTES as usize)
            .map(|start| {
                let get = GetOptions {
                    range: Some((start..(start + PART_BYTES).min(range.end)).into()),
                    ..GetOptions::default()
                };
                self.ask_one(location, get)
            });
        let got = futures::future::try_join_all(parts).await?;
        // Sized by what came, not by the range asked.
        let mut bytes = Vec::with_capacity(got.iter().map(|a| a.bytes.len()).sum());
        for part in &got {
            bytes.extend_from_slice(&part.bytes);
        }
        let meta = got[0].meta.clone();
        let end = range.start + bytes.len() as u64;
        Ok(Answer {
            bytes: bytes.into(),
            meta,
            range: range.start..end,
        })
    }

    async fn ask_one(&self, location: &Path, options: GetOptions) -> Result<Answer> {
        let result = self.inner.get_opts(location, options).await?;
        let (meta, range) = (result.meta.clone(), result.range.clone());
        let bytes = result.bytes().await?;
        Ok(Answer { bytes, meta, range })
    }
}

voxlake_io::wrapper_store!(LogMemo, {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain = unconditional(&options) && !options.head;
        if plain
            && options.range.is_none()
            && let Some(found) = self.primed.take_get(location)
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            let Some((bytes, meta)) = found else {
                return Err(object_store::Error::NotFound {
                    path: location.to_string(),
                    source: "not found when it was read a moment before".into(),
                });
            };
            let range = 0..meta.size;
            return Ok(GetResult {
                payload: GetResultPayload::Stream(
                    futures::stream::once(async { Ok(bytes) }).boxed(),
                ),
                meta,
                range,
                attributes: Default::default(),
            });
        }
        if !plain || !is_immutable(location) {
            return self.inner.get_opts(location, options).await;
        }
        // A read in a Parquet file's window: the whole window, once, and this read cut from it.
        if let Some(window) = self.window(location, &options.range)
            && let Some(slot) = self.slot((location.clone(), "window".to_string()))
            && let Some(GetRange::Bounded(asked)) = &options.range
        {
            let get = GetOptions {
                range: Some(window.clone().into()),
                ..GetOptions::default()
            };
            let got = self.kept(slot, location, get).await?;
            if got.range == window {
                let at = (asked.start - window.start) as usize..(asked.end - window.start) as usize;
                let bytes = got.bytes.slice(at);
                return Ok(GetResult {
                    payload: GetResultPayload::Stream(
                        futures::stream::once(async { Ok(bytes) }).boxed(),
                    ),
                    meta: got.meta,
                    range: asked.clone(),
                    attributes: Default::default(),
                });
            }
        }
        let answer = match self.slot((location.clone(), format!("{:?}", options.range))) {
            Some(slot) => self.kept(slot, location, options).await?,
            // Past the cap or closed: not kept, still asked in parts.
            None => self.ask(location, options).await?,
        };
        let bytes = answer.bytes;
        Ok(GetResult {
            payload: GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed()),
            meta: answer.meta,
            range: answer.range,
            attributes: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        // Data reads keep the inner store's own (a mapped local store maps them).
        if !is_immutable(location) || self.closed.load(Ordering::SeqCst) {
            return self.inner.get_ranges(location, ranges).await;
        }
        // Coalesced as object_store's own `get_ranges` does (a checkpoint's column chunks are
        // one request), each merged range kept.
        coalesce_ranges(
            ranges,
            |range| async move {
                let get = GetOptions {
                    range: Some(range.into()),
                    ..GetOptions::default()
                };
                self.get_opts(location, get).await?.bytes().await
            },
            OBJECT_STORE_COALESCE_DEFAULT,
        )
        .await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        if let Some(objects) = self.primed.take_listing(prefix, None) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return self.noting(futures::stream::iter(objects.into_iter().map(Ok)).boxed());
        }
        self.noting(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        if let Some(objects) = self.primed.take_listing(prefix, Some(offset)) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return self.noting(futures::stream::iter(objects.into_iter().map(Ok)).boxed());
        }
        self.noting(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
});

#[cfg(test)]
// One range is a list of ranges to object_store.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    /// Counts the gets that reach it.
    #[derive(Debug)]
    struct Counting {
        inner: InMemory,
        gets: AtomicU64,
    }

    impl std::fmt::Display for Counting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Counting")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Counting {
        async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            self.inner.get_opts(location, options).await
        }
        async fn put_opts(
            &self,
            location: &Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn a_log_object_asked_again_is_answered_from_memory_until_closed() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let commit = Path::from("t/_delta_log/00000000000000000003.json");
        let last = Path::from("t/_delta_log/_last_checkpoint");
        let data = Path::from("t/part-0.parquet");
        for p in [&commit, &last, &data] {
            store.put(p, "{\"add\":{}}".into()).await.unwrap();
        }
        let memo = LogMemo::new(store.clone(), 1 << 20);
        // Asked at once: one request reaches the store.
        let (a, b) = tokio::join!(memo.get(&commit), memo.get(&commit));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.meta.size, 10);
        assert_eq!(a.bytes().await.unwrap(), b.bytes().await.unwrap());
        assert_eq!(store.gets.load(Ordering::SeqCst), 1);
        // A range is its own request, answered as the store would.
        assert_eq!(
            &memo.get_range(&commit, 1..6).await.unwrap()[..],
            b"\"add\""
        );
        assert_eq!(
            &memo.get_range(&commit, 1..6).await.unwrap()[..],
            b"\"add\""
        );
        assert_eq!(store.gets.load(Ordering::SeqCst), 2);
        assert_eq!(memo.hits(), 2);
        // `_last_checkpoint` and data files change or are not the log's: never kept.
        for p in [&last, &data, &last] {
            memo.get(p).await.unwrap();
        }
        assert_eq!(store.gets.load(Ordering::SeqCst), 5);
        // Ranges of a log object are kept too; a data file's go to the inner store.
        let ranges = memo.get_ranges(&commit, &[1..6, 7..9]).await.unwrap();
        assert_eq!(
            (&ranges[0][..], &ranges[1][..]),
            (&b"\"add\""[..], &b"{}"[..])
        );
        assert_eq!(
            store.gets.load(Ordering::SeqCst),
            6,
            "1..6 kept, 7..9 asked"
        );
        assert_eq!(memo.get_ranges(&data, &[0..2]).await.unwrap()[0], "{\"");
        assert_eq!(store.gets.load(Ordering::SeqCst), 7);
        // Closed: nothing kept, everything asked.
        memo.close();
        memo.get(&commit).await.unwrap();
        assert_eq!(store.gets.load(Ordering::SeqCst), 8);
        // A missing object is an error each time, not a kept answer.
        let gone = Path::from("t/_delta_log/00000000000000000009.json");
        let fresh = LogMemo::new(store.clone(), 1 << 20);
        assert!(fresh.get(&gone).await.is_err());
        assert!(fresh.get(&gone).await.is_err());
        assert_eq!(store.gets.load(Ordering::SeqCst), 10);
    }

    #[tokio::test]
    async fn a_listed_checkpoints_tail_is_read_once() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let part = Path::from("t/_delta_log/00000000000000000010.checkpoint.parquet");
        let body: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        store.put(&part, body.clone().into()).await.unwrap();
        let memo = LogMemo::new(store.clone(), 1 << 20);
        // Its size unknown (not listed): each read is its own request.
        memo.get_range(&part, 2992..3000).await.unwrap();
        memo.get_range(&part, 2900..2992).await.unwrap();
        assert_eq!(store.gets.load(Ordering::SeqCst), 2);
        // Listed: the end, the footer and a small chunk before it come from one request.
        let fresh = LogMemo::new(store.clone(), 1 << 20);
        let listed: Vec<_> = fresh
            .list(Some(&Path::from("t/_delta_log")))
            .collect()
            .await;
        assert_eq!(listed.len(), 1);
        let reads = [2992..3000, 2900..2992, 10..40, 0..3000];
        for r in reads.clone() {
            let got = fresh.get_range(&part, r.clone()).await.unwrap();
            assert_eq!(&got[..], &body[r.start as usize..r.end as usize]);
        }
        assert_eq!(
            store.gets.load(Ordering::SeqCst),
            3,
            "one more, for the tail"
        );
        let (a, b) = tokio::join!(
            fresh.get_range(&part, 5..9),
            fresh.get_ranges(&part, &[100..200, 300..400])
        );
        assert_eq!(&a.unwrap()[..], &body[5..9]);
        assert_eq!(&b.unwrap()[1][..], &body[300..400]);
        assert_eq!(store.gets.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_listed_checkpoint_is_fetched_whole_up_to_a_size() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let log = Path::from("t/_delta_log");
        let small = log.clone().join("00000000000000000010.checkpoint.parquet");
        let large = log.clone().join("00000000000000000020.checkpoint.parquet");
        let body = |len: u64| -> Vec<u8> { (0..len).map(|i| (i % 247) as u8).collect() };
        // Past the tail (its file actions out of it) yet under the size: one request for all.
        let (small_len, large_len) = (3 * TAIL_BYTES, WHOLE_BYTES + 10);
        let (small_body, large_body) = (body(small_len), body(large_len));
        store.put(&small, small_body.clone().into()).await.unwrap();
        store.put(&large, large_body.clone().into()).await.unwrap();
        let memo = LogMemo::new(store.clone(), 1 << 30);
        let listed: Vec<_> = memo.list(Some(&log)).collect().await;
        assert_eq!(listed.len(), 2);
        let at = |len: u64| [len - 8..len, len - 500..len - 8, 4..len - TAIL_BYTES - 1];
        for r in at(small_len) {
            let got = memo.get_range(&small, r.clone()).await.unwrap();
            assert_eq!(&got[..], &small_body[r.start as usize..r.end as usize]);
        }
        assert_eq!(store.gets.load(Ordering::SeqCst), 1, "the file in one read");
        // Larger: its tail in one read, then what lies before the tail in its own, in parts.
        for r in at(large_len) {
            let got = memo.get_range(&large, r.clone()).await.unwrap();
            assert_eq!(&got[..], &large_body[r.start as usize..r.end as usize]);
        }
        let parts = (large_len - TAIL_BYTES - 5).div_ceil(PART_BYTES);
        assert_eq!(store.gets.load(Ordering::SeqCst), 1 + 1 + parts);
    }

    #[tokio::test]
    async fn a_long_read_is_asked_in_parts_at_once() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let part = Path::from("_delta_log/00000000000000000010.checkpoint.parquet");
        let len = 2 * PART_BYTES + 100;
        let body: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        store.put(&part, body.clone().into()).await.unwrap();
        // Kept (under the cap) and not kept (past it): the same bytes, in 3 requests each.
        for cap in [1 << 30, 0] {
            let memo = LogMemo::new(store.clone(), cap);
            let before = store.gets.load(Ordering::SeqCst);
            let got = memo.get_range(&part, 50..len).await.unwrap();
            assert_eq!(&got[..], &body[50..]);
            assert_eq!(store.gets.load(Ordering::SeqCst) - before, 3);
        }
    }

    #[tokio::test]
    async fn past_its_cap_requests_pass_through() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let commit = Path::from("_delta_log/00000000000000000000.json");
        store.put(&commit, vec![7u8; 100].into()).await.unwrap();
        let other = Path::from("_delta_log/00000000000000000001.json");
        store.put(&other, vec![8u8; 10].into()).await.unwrap();
        let memo = LogMemo::new(store.clone(), 50);
        for _ in 0..3 {
            memo.get(&commit).await.unwrap();
            memo.get(&other).await.unwrap();
        }
        // The first answer is kept (the cap is checked before it), then nothing new is.
        assert_eq!(store.gets.load(Ordering::SeqCst), 1 + 3);
    }

    #[tokio::test]
    async fn a_primed_answer_is_handed_out_once() {
        let store = Arc::new(Counting {
            inner: InMemory::new(),
            gets: AtomicU64::new(0),
        });
        let hint = Path::from("t/_delta_log/_last_checkpoint");
        store.put(&hint, "{\"version\":9}".into()).await.unwrap();
        let log = Path::from("t/_delta_log");
        let names = ["00000000000000000000.json", "00000000000000000001.json"];
        for name in names {
            store
                .put(&log.clone().join(name), "{}".into())
                .await
                .unwrap();
        }
        let memo = LogMemo::new(store.clone(), 1 << 20);
        // What another reader just saw: an older hint, and a listing of the first commit only.
        let seen = store.get(&hint).await.unwrap().meta;
        memo.prime_get(hint.clone(), Some(("{\"version\":8}".into(), seen)));
        let first = store.list(Some(&log)).take(1).try_collect().await.unwrap();
        memo.prime_listing(log.clone(), first);
        let gets = store.gets.load(Ordering::SeqCst);
        let got = memo.get(&hint).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"{\"version\":8}");
        assert_eq!(
            store.gets.load(Ordering::SeqCst),
            gets,
            "answered from the primed one"
        );
        // Once: then the store's.
        let got = memo.get(&hint).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"{\"version\":9}");
        let offset = log.clone().join("00000000000000000000.json");
        let listed: Vec<ObjectMeta> = memo.list(Some(&log)).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1, "the primed listing");
        let listed: Vec<ObjectMeta> = memo
            .list_with_offset(Some(&log), &offset)
            .try_collect()
            .await
            .unwrap();
        // The store's, past the offset: the second commit and `_last_checkpoint`.
        assert_eq!(listed.len(), 2);
        // Primed as not found: the next get says so without asking.
        memo.prime_get(hint.clone(), None);
        let missing = memo.get(&hint).await;
        assert!(matches!(missing, Err(object_store::Error::NotFound { .. })));
        assert_eq!(store.gets.load(Ordering::SeqCst), gets + 1);
        // From an offset, a primed listing keeps what lies past it.
        let all = store.list(Some(&log)).try_collect().await.unwrap();
        memo.prime_listing(log.clone(), all);
        let listed: Vec<ObjectMeta> = memo
            .list_with_offset(Some(&log), &offset)
            .try_collect()
            .await
            .unwrap();
        let names_listed: Vec<_> = listed.iter().map(|o| o.location.filename()).collect();
        assert_eq!(names_listed, [Some(names[1]), Some("_last_checkpoint")]);
        assert!(memo.hits() >= 3);
    }
}
