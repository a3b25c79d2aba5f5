//! [`RetryListings`]: a store that retries listings whose response breaks. object_store retries
//! a failed request and re-reads a `get` body that breaks mid-stream, but a listing page whose
//! body breaks (a reset, a truncated XML body) fails the listing; for a table's log that fails
//! the whole open. Here a listing is read whole and started over when it breaks, a few times
//! with backoff; a definite answer (not found, denied) is returned at once. Everything else
//! passes through.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

use crate::error::store_error_is_transient;

/// Tries of one listing, the first included.
const TRIES: u32 = 6;
/// The first wait between tries, doubled each time, at most [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Retries the listings of `inner` (see the [module](self) documentation).
#[derive(Debug)]
pub struct RetryListings {
    inner: Arc<dyn ObjectStore>,
}

impl RetryListings {
    /// `inner`, its listings retried.
    pub fn new(inner: Arc<dyn ObjectStore>) -> RetryListings {
        RetryListings { inner }
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
    tracing::debug!(what, attempt, error = %e, "retrying a broken listing");
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

impl std::fmt::Display for RetryListings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RetryListings({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for RetryListings {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        // object_store re-reads a body that breaks itself (`retry_stream`).
        self.inner.get_opts(location, options).await
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

    /// A store whose first `breaks` listings fail mid-way.
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
            self.inner.get_opts(location, options).await
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
    async fn broken_listings_are_started_over() {
        let breaking = Arc::new(Breaking {
            inner: InMemory::new(),
            breaks: AtomicU32::new(0),
        });
        let path = Path::from("_delta_log/00000000000000000000.json");
        breaking.put(&path, "whole commit".into()).await.unwrap();
        let store = RetryListings::new(breaking.clone());
        breaking.breaks.store(TRIES - 1, Ordering::SeqCst);
        let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1);
        // Past its tries, the last error.
        breaking.breaks.store(TRIES, Ordering::SeqCst);
        assert!(store.list(None).try_collect::<Vec<_>>().await.is_err());
        // Gets pass through: the inner store's answer, a definite one at once.
        breaking.breaks.store(0, Ordering::SeqCst);
        let missing = store.get(&Path::from("nope")).await.unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }
}
