//! [`RetryBodies`]: a store that retries what object_store's client does not. Its retries end
//! once a response's headers arrive, so a body cut mid-stream (a reset, a truncated body) or a
//! listing page that breaks fails the call; for a table's log (commits, checkpoints,
//! `_last_checkpoint`, the log's listing) that fails the whole open. Here a `get` of an object
//! of the log (`_delta_log/`) reads its body whole and asks again when the body breaks, and a
//! listing is read whole and started over when a page fails, a few times with backoff; a
//! definite answer (not found, denied) is returned at once. Data files' reads pass through:
//! `RemoteStore` retries them itself, streamed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

use crate::error::store_error_is_transient;

/// The folder of a Delta table's log: the objects whose bodies are read whole and retried.
const LOG_FOLDER: &str = "_delta_log/";

/// Tries of one body or listing, the first included.
const TRIES: u32 = 6;
/// The first wait between tries, doubled each time, at most [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Retries bodies and listings of `inner` (see the [module](self) documentation).
#[derive(Debug)]
pub struct RetryBodies {
    inner: Arc<dyn ObjectStore>,
}

impl RetryBodies {
    /// `inner`, its bodies and listings retried.
    pub fn new(inner: Arc<dyn ObjectStore>) -> RetryBodies {
        RetryBodies { inner }
    }
}

/// `attempt` (from 0) failed with `e`: how long to wait before the next, or `None` to give up.
fn again(attempt: u32, e: &object_store::Error, what: &str) -> Option<Duration> {
    if attempt + 1 >= TRIES || !store_error_is_transient(e) {
        return None;
    }
    let wait = FIRST_BACKOFF
        .saturating_mul(1 << attempt.min(10))
        .min(MAX_BACKOFF);
    tracing::debug!(what, attempt, error = %e, "retrying a broken body or listing");
    Some(wait)
}

/// Every item of a listing, started over while it breaks.
async fn whole_listing<F>(list: F, what: &str) -> Result<Vec<ObjectMeta>>
where
    F: Fn() -> BoxStream<'static, Result<ObjectMeta>>,
{
    let mut attempt = 0;
    loop {
        match list().try_collect::<Vec<_>>().await {
            Ok(items) => return Ok(items),
            Err(e) => match again(attempt, &e, what) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Err(e),
            },
        }
        attempt += 1;
    }
}

fn stream_of(items: Result<Vec<ObjectMeta>>) -> BoxStream<'static, Result<ObjectMeta>> {
    match items {
        Ok(items) => futures::stream::iter(items.into_iter().map(Ok)).boxed(),
        Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
    }
}

impl std::fmt::Display for RetryBodies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RetryBodies({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for RetryBodies {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        // The log's reads only: a data file's reads keep their streamed bodies (the remote
        // store retries those itself), and buffering them here cost 13 % of a remote epoch.
        if options.head || !location.as_ref().contains(LOG_FOLDER) {
            return self.inner.get_opts(location, options).await;
        }
        let mut attempt = 0;
        loop {
            let result = self.inner.get_opts(location, options.clone()).await?;
            let (meta, range, attributes) = (
                result.meta.clone(),
                result.range.clone(),
                result.attributes.clone(),
            );
            match result.bytes().await {
                Ok(bytes) => {
                    let body: BoxStream<'static, Result<Bytes>> =
                        futures::stream::once(async move { Ok(bytes) }).boxed();
                    return Ok(GetResult {
                        payload: GetResultPayload::Stream(body),
                        meta,
                        range,
                        attributes,
                    });
                }
                Err(e) => match again(attempt, &e, location.as_ref()) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(e),
                },
            }
            attempt += 1;
        }
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<Bytes>> {
        // A data file's ranges go to the store's own `get_ranges`, exactly as unwrapped.
        if !location.as_ref().contains(LOG_FOLDER) {
            return self.inner.get_ranges(location, ranges).await;
        }
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let options = GetOptions {
                range: Some(range.clone().into()),
                ..GetOptions::default()
            };
            out.push(self.get_opts(location, options).await?.bytes().await?);
        }
        Ok(out)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            let shown = prefix.as_ref().map_or("/", |p| p.as_ref()).to_string();
            stream_of(whole_listing(|| inner.list(prefix.as_ref()), &shown).await)
        })
        .flatten()
        .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        futures::stream::once(async move {
            let shown = prefix.as_ref().map_or("/", |p| p.as_ref()).to_string();
            let list = || inner.list_with_offset(prefix.as_ref(), &offset);
            stream_of(whole_listing(list, &shown).await)
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut attempt = 0;
        loop {
            match self.inner.list_with_delimiter(prefix).await {
                Ok(listed) => return Ok(listed),
                Err(e) => match again(attempt, &e, prefix.map_or("/", |p| p.as_ref())) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(e),
                },
            }
            attempt += 1;
        }
    }

    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A store whose first `breaks` bodies and listings fail mid-way.
    #[derive(Debug)]
    struct Breaking {
        inner: InMemory,
        breaks: AtomicU32,
    }

    impl std::fmt::Display for Breaking {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Breaking")
        }
    }

    fn cut() -> object_store::Error {
        object_store::Error::Generic {
            store: "Breaking",
            source: "error decoding response body: connection reset".into(),
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Breaking {
        async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
            let mut result = self.inner.get_opts(location, options).await?;
            if self.breaks.load(Ordering::SeqCst) > 0 {
                self.breaks.fetch_sub(1, Ordering::SeqCst);
                let half = futures::stream::iter([Ok(Bytes::from_static(b"ha")), Err(cut())]);
                result.payload = GetResultPayload::Stream(half.boxed());
            }
            Ok(result)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            if self.breaks.load(Ordering::SeqCst) > 0 {
                self.breaks.fetch_sub(1, Ordering::SeqCst);
                return futures::stream::once(async { Err(cut()) }).boxed();
            }
            self.inner.list(prefix)
        }
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> Result<PutResult> {
            self.inner.put_opts(l, p, o).await
        }
        async fn put_multipart_opts(
            &self,
            l: &Path,
            o: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(l, o).await
        }
        fn delete_stream(
            &self,
            l: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(l)
        }
        fn list_with_offset(
            &self,
            p: Option<&Path>,
            o: &Path,
        ) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list_with_offset(p, o)
        }
        async fn list_with_delimiter(&self, p: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(p).await
        }
        async fn copy_opts(&self, f: &Path, t: &Path, o: CopyOptions) -> Result<()> {
            self.inner.copy_opts(f, t, o).await
        }
        async fn rename_opts(&self, f: &Path, t: &Path, o: RenameOptions) -> Result<()> {
            self.inner.rename_opts(f, t, o).await
        }
    }

    #[tokio::test]
    async fn cut_bodies_and_broken_listings_are_read_again() {
        let breaking = Arc::new(Breaking {
            inner: InMemory::new(),
            breaks: AtomicU32::new(0),
        });
        let path = Path::from("_delta_log/00000000000000000000.json");
        breaking.put(&path, "whole commit".into()).await.unwrap();
        let store = RetryBodies::new(breaking.clone());
        breaking.breaks.store(3, Ordering::SeqCst);
        let body = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(body, "whole commit");
        breaking.breaks.store(2, Ordering::SeqCst);
        let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1);
        // Past its tries, the last error; a definite answer at once.
        breaking.breaks.store(TRIES + 1, Ordering::SeqCst);
        assert!(store.get(&path).await.is_err());
        breaking.breaks.store(0, Ordering::SeqCst);
        let missing = store.get(&Path::from("nope")).await.unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }
}
