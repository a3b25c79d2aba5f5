//! Reading a table's log at a version ([`DeltaLog`]): the store stack deltalake reads it
//! through, the log at the version (or the node's cache's list of it), its files replayed and
//! offered to that cache, the version described ([`LogVersion`]); or, where there is no log, the
//! folder's Parquet files listed once.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use object_store::ObjectStore;
use voxlake_io::cache::DiskCache;
use voxlake_io::{location, redact};

use crate::as_of::AsOf;
use crate::error::DeltaError;
use crate::file_list::FileList;
use crate::read::{Loaded, LogAhead, load};
use crate::replayed::Replayed;
use crate::version::{LogVersion, describe};
/// Bytes of log answers kept while a table opens (`log_memo`): a log of 100 commits of 10⁵
/// files fits, and its checkpoint; a larger log is read twice past it.
const LOG_MEMO_BYTES: u64 = 64 << 20;

/// What the log (or the node's cache of it) gave.
enum Opened {
    /// The table (its store) and its log at the version (the files not yet read where the
    /// kernel loaded it).
    Table(DeltaTable, Box<Loaded>),
    /// The version's files as the node's cache kept them, the table's store and root.
    Replayed(Box<Replayed>, Arc<dyn ObjectStore>, url::Url),
    /// No log: a folder of Parquet files.
    Listing(Arc<dyn ObjectStore>),
}

/// What a rank knows of the table before it opens it, found while it looked for its job's
/// marker ([`crate::agree`]); [`DeltaLog::with_prior`] hands it to the read.
#[derive(Default)]
pub struct Prior {
    /// A marker named the version, so the table has a log.
    pub(crate) known_delta: bool,
    /// The log's first answers (`_last_checkpoint`, the listing under way), asked beside the
    /// marker: the open starts a round trip later than it would.
    pub(crate) ahead: Option<LogAhead>,
}

/// What [`DeltaLog::read`] found at the location.
#[derive(Debug)]
#[non_exhaustive]
pub enum Found {
    /// A Delta table's version, and the store its data files are read through.
    Log(Box<LogVersion>, Arc<dyn ObjectStore>),
    /// No log: a folder of Parquet files, listed once (version 0), and its store.
    Listing(Box<FileList>, Arc<dyn ObjectStore>),
}

impl Found {
    /// The version found (0 for a listing).
    pub fn version(&self) -> u64 {
        match self {
            Found::Log(version, _) => version.version,
            Found::Listing(..) => 0,
        }
    }

    /// The files found.
    pub fn files(&self) -> &FileList {
        match self {
            Found::Log(version, _) => &version.files,
            Found::Listing(files, _) => files,
        }
    }

    /// What tells this file set from another (see [`FileList::file_set_hash`]): the ranks of
    /// a job check that they read the same files.
    pub fn file_set_hash(&self) -> String {
        self.files().file_set_hash()
    }
}

/// A table's log, to be read at a version: where the table is, and how the log is read.
///
/// ```no_run
/// # async fn f() -> Result<(), voxlake_delta::DeltaError> {
/// use std::collections::HashMap;
/// use voxlake_delta::{AsOf, DeltaLog, Found};
///
/// let log = DeltaLog::new("az://data/cubes", &HashMap::new())?.with_as_of(AsOf::Version(3));
/// if let Found::Log(version, _store) = log.read().await? {
///     assert_eq!(version.version, 3);
/// }
/// # Ok(()) }
/// ```
pub struct DeltaLog {
    location: String,
    url: url::Url,
    /// The location for messages (no query string).
    display: String,
    /// The store settings, the environment's included.
    options: HashMap<String, String>,
    /// What tells the store apart (cache entries are keyed by it).
    identity: String,
    /// The caller's store, or the mapped local one for a local table.
    root_store: Option<Arc<dyn ObjectStore>>,
    as_of: AsOf,
    /// A remote table's immutable log objects read through the node's disk cache.
    log_cache: Option<Arc<DiskCache>>,
    /// The table is known to have a log (a job's marker named the version): it is not listed
    /// first to learn whether there is one (a round trip less).
    known_delta: bool,
    /// The files' statistics are kept (a filter reads them; ~150 bytes a file).
    stats: bool,
    /// The log's first answers, asked before the open (beside a job's marker).
    ahead: std::sync::Mutex<Option<LogAhead>>,
    /// The log's answers kept while it opens: deltalake reads it twice (`LogMemo`).
    memo: OnceLock<Arc<crate::log_memo::LogMemo>>,
}

impl std::fmt::Debug for DeltaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaLog")
            .field("location", &self.display)
            .field("as_of", &self.as_of)
            .finish_non_exhaustive()
    }
}

impl DeltaLog {
    /// The log of the table at `location` (a local path or URL), with store settings `options`
    /// (the environment's added): its latest version, statistics kept.
    pub fn new(location: &str, options: &HashMap<String, String>) -> Result<DeltaLog, DeltaError> {
        crate::stores::register_handlers();
        let url = location::to_url(location, true)?;
        let options = location::storage_options(options);
        Ok(DeltaLog {
            location: location.to_string(),
            display: redact(url.as_str()),
            identity: location::store_identity(&url, &options),
            // Local tables read row groups into recycled buffers (see `voxlake_io::local`).
            root_store: (url.scheme() == "file").then(|| {
                Arc::new(voxlake_io::local::MappedLocalStore::new()) as Arc<dyn ObjectStore>
            }),
            url,
            options,
            as_of: AsOf::Latest,
            log_cache: None,
            known_delta: false,
            stats: true,
            ahead: std::sync::Mutex::new(None),
            memo: OnceLock::new(),
        })
    }

    /// The version to read.
    pub fn with_as_of(mut self, as_of: AsOf) -> DeltaLog {
        self.as_of = as_of;
        self
    }

    /// The table read through a store of the caller's (`None`: its own), with `/` at the root
    /// of the store the location names.
    pub fn with_root_store(mut self, store: Option<Arc<dyn ObjectStore>>) -> DeltaLog {
        if store.is_some() {
            self.root_store = store;
        }
        self
    }

    /// A remote table's immutable log objects and replayed file lists read through the node's
    /// disk cache (see `log_cache`).
    pub fn with_node_cache(mut self, cache: Option<Arc<DiskCache>>) -> DeltaLog {
        self.log_cache = cache;
        self
    }

    /// Whether the files' statistics are kept (a filter reads them).
    pub fn with_stats(mut self, stats: bool) -> DeltaLog {
        self.stats = stats;
        self
    }

    /// What a job's rank learnt of the table while it looked for the job's version
    /// ([`agree::open_for_job`](crate::agree::open_for_job)): whether the table has a log (it is
    /// then not listed first to learn so), the log's first answers if it asked them.
    pub fn with_prior(mut self, prior: Prior) -> DeltaLog {
        self.known_delta = prior.known_delta;
        if let Ok(mut slot) = self.ahead.lock() {
            *slot = prior.ahead;
        }
        self
    }

    /// The location for messages (no query string).
    pub fn display(&self) -> &str {
        &self.display
    }

    /// What tells the table's store apart from another's (cache keys).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Reads the log at the version: the version described, or the folder's Parquet files
    /// where there is no log. A remote endpoint is probed beside the read, not before it: the
    /// probe costs no round trip, and when nothing answers its error comes first. Once: the
    /// log's memo is let go when the read is done.
    pub async fn read(self) -> Result<Found, DeltaError> {
        let shown: &str = &self.display;
        tracing::debug!(
            location = shown,
            credentials = location::credential_method(&self.url, &self.options),
            "opening table"
        );
        let probe = async {
            match self.root_store {
                None => Ok(crate::stores::ensure_reachable(&self.location, &self.options).await?),
                Some(_) => Ok::<(), DeltaError>(()),
            }
        };
        let ahead = self.ahead.lock().ok().and_then(|mut a| a.take());
        let (opened, ()) = futures::try_join!(self.open_log(ahead), probe)?;
        let (replayed, store, root) = match opened {
            Opened::Table(table, loaded) => self.replay(table, *loaded).await?,
            Opened::Replayed(replayed, store, root) => (*replayed, store, root),
            Opened::Listing(store) => {
                self.close_memo();
                let files = crate::file_list::listed(&store, &self.display).await?;
                return Ok(Found::Listing(Box::new(files), store));
            }
        };
        self.close_memo();
        let described = describe(replayed, &store, &root, &self.display).await?;
        Ok(Found::Log(Box::new(described), store))
    }
}

impl DeltaLog {
    fn delta_error(&self, source: DeltaTableError) -> DeltaError {
        DeltaError::deltalake(&self.display, source)
    }

    /// A remote table read through its own store stack (not the caller's): the node's caches
    /// of its log and file lists may serve it.
    fn remote_ours(&self) -> bool {
        !matches!(self.url.scheme(), "file" | "memory") && self.root_store.is_none()
    }

    /// The store deltalake reads the table through (`None`: its own factory's): a remote
    /// table's built here, as deltalake's factories build it, so that an answer of the log
    /// that breaks is asked again (`stores::open_store` wraps it in `RetryBroken`; object_store
    /// retries requests and gets' bodies), its immutable log objects through the node's cache;
    /// either way behind the log's memo.
    fn store_stack(&self) -> Result<Option<Arc<dyn ObjectStore>>, DeltaError> {
        let backend = match self.root_store.clone() {
            Some(store) => Some(store),
            None if self.remote_ours() => {
                let store = crate::stores::open_store(&self.location, true, &self.options)?.store;
                let cache = self.log_cache.as_ref();
                Some(crate::stores::through_log_cache(
                    store,
                    cache,
                    &self.identity,
                ))
            }
            None => None,
        };
        Ok(backend.map(|store| {
            let kept = Arc::new(crate::log_memo::LogMemo::new(store, LOG_MEMO_BYTES));
            let _ = self.memo.set(kept.clone());
            kept as Arc<dyn ObjectStore>
        }))
    }

    /// The log at the version asked (or the node's cache's list of it, or no log at all);
    /// `ahead`: its first answers, if asked already.
    async fn open_log(&self, mut ahead: Option<LogAhead>) -> Result<Opened, DeltaError> {
        let mut builder = DeltaTableBuilder::from_url(self.url.clone())
            .map_err(|e| self.delta_error(e))?
            .with_storage_options(location::with_retry_defaults(&self.options));
        if let Some(store) = self.store_stack()? {
            builder = builder.with_storage_backend(store, self.url.clone());
        }
        let table = builder.build().map_err(|e| self.delta_error(e))?;
        if let (Some(cache), AsOf::Version(v)) = (&self.log_cache, self.as_of)
            && self.remote_ours()
            && let Some(opened) = self
                .through_node_cache(cache, &table, v, ahead.take())
                .await?
        {
            return Ok(opened);
        }
        let memo = self.memo.get().map(|m| m.as_ref());
        // Statistics kept where the node's cache may be offered the list (it keeps them).
        let with_stats = self.stats || self.log_cache.is_some();
        let (as_of, known, display) = (self.as_of, self.known_delta, &self.display);
        Ok(
            match load(&table, as_of, known, display, with_stats, ahead, memo).await? {
                Some(loaded) => Opened::Table(table, Box::new(loaded)),
                None => Opened::Listing(table.object_store()),
            },
        )
    }

    /// Version `v` of a remote table through the node's cache: its replayed file list, made
    /// by the first rank of the node and read by the others (`file_list::cache`); `None` where the
    /// cache gave nothing and the table was not found to have no log.
    async fn through_node_cache(
        &self,
        cache: &Arc<DiskCache>,
        table: &DeltaTable,
        v: u64,
        ahead: Option<LogAhead>,
    ) -> Result<Option<Opened>, DeltaError> {
        let store = table.object_store();
        let root = table.log_store().root_url().clone();
        let display = &self.display;
        // Replayed with the statistics, for whichever rank filters.
        let mut no_log = false;
        let make = async {
            let memo = self.memo.get().map(|m| m.as_ref());
            let known = self.known_delta;
            match load(table, self.as_of, known, display, true, ahead, memo).await? {
                Some(Loaded::Replayed(replayed)) => Ok(Some(*replayed)),
                Some(Loaded::Kernel(state)) => Ok(Some(
                    crate::read::kernel_replay::replay(table, state.as_ref(), display, true)
                        .await?,
                )),
                None => {
                    no_log = true;
                    Ok(None)
                }
            }
        };
        let stats = self.stats;
        let through =
            crate::file_list::cache::through(cache, &self.identity, display, v, stats, make);
        let replayed = Box::pin(through).await?;
        if let Some(replayed) = replayed {
            return Ok(Some(Opened::Replayed(Box::new(replayed), store, root)));
        }
        // Found to have no log: not looked for again.
        Ok(no_log.then(|| Opened::Listing(store)))
    }

    /// The files of the loaded log, replayed where the kernel loaded it; offered to the node's
    /// cache for the ranks that open the version next (a job's marker names it to them).
    async fn replay(
        &self,
        table: DeltaTable,
        loaded: Loaded,
    ) -> Result<(Replayed, Arc<dyn ObjectStore>, url::Url), DeltaError> {
        let (display, identity, stats) = (&self.display, &self.identity, self.stats);
        let version = loaded.version();
        let offer = self.log_cache.as_ref().filter(|cache| {
            self.remote_ours() && !crate::file_list::cache::kept(cache, identity, display, version)
        });
        let mut replayed = match loaded {
            Loaded::Kernel(state) => {
                let with_stats = stats || offer.is_some();
                let replayed =
                    crate::read::kernel_replay::replay(&table, state.as_ref(), display, with_stats)
                        .await?;
                // deltalake's state of the version goes before the list is encoded.
                drop(state);
                replayed
            }
            Loaded::Replayed(replayed) => *replayed,
        };
        let (store, root) = (table.object_store(), table.log_store().root_url().clone());
        drop(table);
        if let Some(cache) = offer {
            crate::file_list::cache::offer(cache, identity, display, &replayed).await;
        }
        if !stats {
            replayed.files = replayed.files.without_stats();
        }
        Ok((replayed, store, root))
    }

    /// Once the log is replayed (or found missing) it is not read again: its answers go, and
    /// the store reads the table's data from then on.
    fn close_memo(&self) {
        if let Some(memo) = self.memo.get() {
            let shown: &str = &self.display;
            tracing::debug!(location = shown, reused = memo.hits(), "log answers reused");
            memo.close();
        }
    }
}
