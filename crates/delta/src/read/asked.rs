//! The log's first two questions, asked at once: `_last_checkpoint` (is there a checkpoint?)
//! and the listing of `_delta_log` (which commits?). The commit reader (`commits`) asks them
//! when it opens a table; a rank resolving its job's version asks them beside the job's marker
//! ([`LogAhead`], `agree::open_for_job`), a round trip before the open, which continues from
//! those answers.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use url::Url;

/// A listing's objects handed to the kernel beside a checkpoint hint when the listing ended
/// within them: one page of S3's and GCS's (1,000 objects). A longer log's listing is not paged
/// through: the kernel lists from its checkpoint.
const HINTED_LISTING: usize = 1000;

/// `_last_checkpoint`'s bytes and metadata, or `None` where there is none.
pub(crate) type Hint = Option<(Bytes, ObjectMeta)>;

/// `_last_checkpoint` and the listing of `_delta_log`, asked at once.
pub(crate) struct Asked {
    /// Where they are: `_last_checkpoint` and `_delta_log`, as the kernel's engine names them.
    paths: (Path, Path),
    hint: HintState,
    listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
    listed: Vec<ObjectMeta>,
    /// The listing ended (or failed: the error).
    ended: Option<Option<object_store::Error>>,
}

enum HintState {
    Asking(BoxFuture<'static, object_store::Result<Hint>>),
    Answered(Hint),
    /// It failed, and said why (a finished future is not polled again).
    Failed,
}

/// The store paths of `_last_checkpoint` and of `_delta_log` in the log at `log_root`
/// (`_delta_log/`'s URL), as the Delta kernel's engine reads them (`read_files`), so that what
/// is read here is keyed as the kernel asks for it.
pub(crate) fn log_paths(log_root: &Url) -> Option<(Path, Path)> {
    let hint = engine_path(&log_root.join("_last_checkpoint").ok()?)?;
    let prefix = Path::from_url_path(log_root.path()).ok()?;
    Some((hint, prefix))
}

/// The store's path of `url` as the Delta kernel's engine reads it.
pub(crate) fn engine_path(url: &Url) -> Option<Path> {
    match url.scheme() {
        "file" => Path::from_absolute_path(url.to_file_path().ok()?).ok(),
        _ => Some(Path::from(url.path())),
    }
}

/// `_delta_log/`'s URL under a table's root URL, as deltalake gives it to the kernel (the root
/// with a slash, joined).
pub(crate) fn log_root(root: &Url) -> Option<Url> {
    let mut root = root.clone();
    if !root.path().ends_with('/') {
        root.set_path(&format!("{}/", root.path()));
    }
    root.join("_delta_log/").ok()
}

impl Asked {
    /// Asks both of `store` (at the root the kernel's engine reads, see [`log_paths`]).
    pub(crate) fn new(store: &Arc<dyn ObjectStore>, paths: (Path, Path)) -> Asked {
        let (store, hint) = (store.clone(), paths.0.clone());
        let listing = store.list(Some(&paths.1));
        let hint = async move {
            match store.get(&hint).await {
                Ok(got) => {
                    let meta = got.meta.clone();
                    Ok(Some((got.bytes().await?, meta)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        };
        Asked {
            paths,
            hint: HintState::Asking(hint.boxed()),
            listing,
            listed: Vec::new(),
            ended: None,
        }
    }

    /// Where the answers are from: `_last_checkpoint`'s and `_delta_log`'s paths.
    pub(crate) fn paths(&self) -> &(Path, Path) {
        &self.paths
    }

    /// The hint's answer, the listing taken in meanwhile (up to [`HINTED_LISTING`] objects);
    /// asked once.
    pub(crate) async fn hint(&mut self) -> object_store::Result<Hint> {
        let hint = match &mut self.hint {
            HintState::Answered(hint) => return Ok(hint.clone()),
            HintState::Failed => {
                return Err(object_store::Error::Generic {
                    store: "voxlake log",
                    source: format!("{} could not be read", self.paths.0).into(),
                });
            }
            HintState::Asking(hint) => hint,
        };
        let found = loop {
            let listing = self.ended.is_none() && self.listed.len() < HINTED_LISTING;
            tokio::select! {
                found = &mut *hint => break found,
                item = self.listing.next(), if listing => {
                    Self::take(&mut self.listed, &mut self.ended, item)
                }
            }
        };
        self.hint = match &found {
            Ok(hint) => HintState::Answered(hint.clone()),
            Err(_) => HintState::Failed,
        };
        found
    }

    /// One item of the listing, kept (fields, not `self`: the hint's future is borrowed).
    fn take(
        listed: &mut Vec<ObjectMeta>,
        ended: &mut Option<Option<object_store::Error>>,
        item: Option<object_store::Result<ObjectMeta>>,
    ) {
        match item {
            Some(Ok(meta)) => listed.push(meta),
            Some(Err(e)) => *ended = Some(Some(e)),
            None => *ended = Some(None),
        }
    }

    /// The listing, if it ends without an error within [`HINTED_LISTING`] objects: the first
    /// page, asked with the hint, awaited (its answer is near); no further page is asked.
    pub(crate) async fn whole_listing(mut self) -> Option<Vec<ObjectMeta>> {
        while self.ended.is_none() && self.listed.len() < HINTED_LISTING {
            let item = self.listing.next().await;
            Self::take(&mut self.listed, &mut self.ended, item);
        }
        matches!(self.ended, Some(None)).then_some(self.listed)
    }

    /// The whole listing.
    pub(crate) async fn listing(mut self) -> object_store::Result<Vec<ObjectMeta>> {
        while self.ended.is_none() {
            let item = self.listing.next().await;
            Self::take(&mut self.listed, &mut self.ended, item);
        }
        match self.ended {
            Some(Some(e)) => Err(e),
            _ => Ok(self.listed),
        }
    }
}

/// The log's first answers, asked ahead of the open beside a job's marker: `_last_checkpoint`
/// answered, the listing under way. Taken by the open (`LogAhead::take`) only where it reads
/// the same paths of the same store.
pub struct LogAhead(Asked);

impl LogAhead {
    /// Asks `store` (the table's store at its root, as the open builds it) for the log of the
    /// table at `root` (its URL) until `_last_checkpoint` answers; `None` where the table is
    /// local (no round trip to save) or the store fails (the open asks again, and says why).
    pub async fn read(store: &Arc<dyn ObjectStore>, root: &Url) -> Option<LogAhead> {
        if matches!(root.scheme(), "file" | "memory") {
            return None;
        }
        let mut asked = Asked::new(store, log_paths(&log_root(root)?)?);
        match asked.hint().await {
            Ok(_) => Some(LogAhead(asked)),
            Err(e) => {
                tracing::debug!(error = %e, "the log's first answers were not read ahead");
                None
            }
        }
    }

    /// The answers, where they are of `paths` (the open's own: else asked again).
    pub(crate) fn take(self, paths: &(Path, Path)) -> Option<Asked> {
        (self.0.paths() == paths).then_some(self.0)
    }
}
