//! [`RetryBroken`]: a store that asks again where an answer broke and object_store does not.
//! object_store retries a failed request and re-reads a `get` body that breaks mid-stream,
//! but not
//! - a listing page whose body breaks (a reset, a truncated XML body): the listing fails, and
//!   for a table's log the whole open;
//! - an answer with an error status whose body breaks (a `404` for `_last_checkpoint`, which
//!   every table without a checkpoint answers, cut off before its XML ends): object_store reads
//!   that body for its message and fails the request on a broken one.
//!
//! Here a listing is read whole and started over when it breaks, and a `get` or `head` whose
//! answer broke is asked again, a few times with backoff; a definite answer (not found, denied)
//! is returned at once. Uploads, copies and deletes pass through (object_store retries what of
//! them is safe to repeat). Every remote store voxlake opens is wrapped in it
//! (`voxlake_delta::stores::open_store`): tables, sources, labels.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, ObjectMeta, ObjectStore, Result};

use crate::error::store_error_is_transient;

/// Tries of one listing or get, the first included.
const TRIES: u32 = 6;
/// The first wait between tries, doubled each time, at most [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Asks `inner` again where an answer broke (see the [module](self) documentation).
#[derive(Debug)]
pub struct RetryBroken {
    inner: Arc<dyn ObjectStore>,
}

impl RetryBroken {
    /// `inner`, its broken answers asked again.
    pub fn new(inner: Arc<dyn ObjectStore>) -> RetryBroken {
        RetryBroken { inner }
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
    tracing::debug!(what, attempt, error = %e, "asking again after a broken answer");
    Some(wait)
}

/// Whether `e` is an answer that broke while it was read (its body cut off or reset), which
/// object_store does not retry outside a successful `get`'s body. object_store keeps its error
/// kinds private: its message says so ("HTTP error: request or response body error",
/// "error decoding response body").
fn answer_broke(e: &object_store::Error) -> bool {
    let text = e.to_string();
    text.contains("body error") || text.contains("decoding response body")
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

crate::wrapper_store!(RetryBroken, {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        // A body that breaks after a successful answer object_store re-reads itself
        // (`retry_stream`); an answer that broke before it was whole is asked for again.
        let mut attempt = 0;
        loop {
            match self.inner.get_opts(location, options.clone()).await {
                Err(e) if answer_broke(&e) => match again(attempt, &e, location.as_ref()) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(e),
                },
                answer => return answer,
            }
            attempt += 1;
        }
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
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use object_store::{
        CopyOptions, MultipartUpload, PutMultipartOptions, PutOptions, PutPayload, PutResult,
        RenameOptions,
    };
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A store whose first `breaks` listings fail mid-way, and first `get_breaks` gets.
    #[derive(Debug)]
    struct Breaking {
        inner: InMemory,
        breaks: AtomicU32,
        get_breaks: AtomicU32,
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
            if self.get_breaks.load(Ordering::SeqCst) > 0 {
                self.get_breaks.fetch_sub(1, Ordering::SeqCst);
                return Err(cut());
            }
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
            get_breaks: AtomicU32::new(0),
        });
        let path = Path::from("_delta_log/00000000000000000000.json");
        breaking.put(&path, "whole commit".into()).await.unwrap();
        let store = RetryBroken::new(breaking.clone());
        breaking.breaks.store(TRIES - 1, Ordering::SeqCst);
        let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1);
        // Past its tries, the last error.
        breaking.breaks.store(TRIES, Ordering::SeqCst);
        assert!(store.list(None).try_collect::<Vec<_>>().await.is_err());
        // A definite answer at once.
        breaking.breaks.store(0, Ordering::SeqCst);
        let missing = store.get(&Path::from("nope")).await.unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }

    #[tokio::test]
    async fn broken_answers_to_gets_are_asked_again() {
        let breaking = Arc::new(Breaking {
            inner: InMemory::new(),
            breaks: AtomicU32::new(0),
            get_breaks: AtomicU32::new(TRIES - 1),
        });
        let path = Path::from("_delta_log/_last_checkpoint");
        breaking.put(&path, "{}".into()).await.unwrap();
        let store = RetryBroken::new(breaking.clone());
        let got = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(got, "{}");
        assert_eq!(breaking.get_breaks.load(Ordering::SeqCst), 0);
        // Past its tries, the last error; a broken answer to a missing object likewise.
        breaking.get_breaks.store(TRIES, Ordering::SeqCst);
        let e = store.get(&path).await.unwrap_err();
        assert!(e.to_string().contains("decoding response body"), "{e}");
        breaking.get_breaks.store(2, Ordering::SeqCst);
        let missing = store.head(&Path::from("nope")).await.unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }));
    }
}
