//! Opening a table's log: the store stack deltalake reads it through, the log at the version
//! (or the node's cache's list of it), its files replayed and offered to that cache
//! ([`Opening`], driven by `Snapshot::open_logged`).

use std::collections::HashMap;
use std::sync::Arc;

use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use object_store::ObjectStore;
use voxlake_io::location;

use super::log::{Loaded, load};
use super::travel::AsOf;
use crate::error::TableError;

/// Bytes of log answers kept while a table opens (`voxlake_io::log_memo`): a log of 100 commits
/// of 10⁵ files is 32 MB, its checkpoint 17 MB; a larger log is read twice past it.
const LOG_MEMO_BYTES: u64 = 64 << 20;

/// What the log (or the node's cache of it) gave.
pub(super) enum Opened {
    /// The table (its store) and its log at the version (the files not yet read where the
    /// kernel loaded it).
    Table(DeltaTable, Box<Loaded>),
    /// The version's files as the node's cache kept them, the table's store and root.
    Replayed(Box<super::replay::Replayed>, Arc<dyn ObjectStore>, url::Url),
    /// No log: a folder of Parquet files.
    Listing(Arc<dyn ObjectStore>),
}

/// A table being opened (`Snapshot::open_logged`): where, and how.
pub(super) struct Opening<'a> {
    pub(super) location: &'a str,
    pub(super) url: url::Url,
    /// The location for messages (no query string).
    pub(super) display: String,
    /// The store settings, the environment's included.
    pub(super) options: HashMap<String, String>,
    /// What tells the store apart (cache entries are keyed by it).
    pub(super) identity: String,
    /// The caller's store, or the mapped local one for a local table.
    pub(super) root_store: Option<Arc<dyn ObjectStore>>,
    pub(super) as_of: AsOf,
    /// `OpenHow`'s, its log's first answers taken (they are not `Sync`).
    pub(super) log_cache: Option<crate::stores::LogCacheRef>,
    pub(super) known_delta: bool,
    pub(super) stats: bool,
    /// The log's answers kept while it opens: deltalake reads it twice (`LogMemo`).
    pub(super) memo: std::sync::OnceLock<Arc<voxlake_io::log_memo::LogMemo>>,
}

impl Opening<'_> {
    fn delta_error(&self, source: DeltaTableError) -> TableError {
        TableError::Delta {
            location: self.display.clone(),
            source: Box::new(source),
        }
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
    fn store_stack(&self) -> Result<Option<Arc<dyn ObjectStore>>, TableError> {
        let backend = match self.root_store.clone() {
            Some(store) => Some(store),
            None if self.remote_ours() => {
                let store = crate::stores::open_store(self.location, true, &self.options)?.store;
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
            let kept = Arc::new(voxlake_io::log_memo::LogMemo::new(store, LOG_MEMO_BYTES));
            let _ = self.memo.set(kept.clone());
            kept as Arc<dyn ObjectStore>
        }))
    }

    /// The log at the version asked (or the node's cache's list of it, or no log at all);
    /// `ahead`: its first answers, if asked already.
    pub(super) async fn open_log(
        &self,
        mut ahead: Option<super::asked::LogAhead>,
    ) -> Result<Opened, TableError> {
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
    /// by the first rank of the node and read by the others (`list_cache`); `None` where the
    /// cache gave nothing and the table was not found to have no log.
    async fn through_node_cache(
        &self,
        cache: &crate::stores::LogCacheRef,
        table: &DeltaTable,
        v: u64,
        ahead: Option<super::asked::LogAhead>,
    ) -> Result<Option<Opened>, TableError> {
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
                    super::replay::replay(table, state.as_ref(), display, true).await?,
                )),
                None => {
                    no_log = true;
                    Ok(None)
                }
            }
        };
        let stats = self.stats;
        let through = super::list_cache::through(cache, &self.identity, display, v, stats, make);
        let replayed = Box::pin(through).await?;
        if let Some(replayed) = replayed {
            return Ok(Some(Opened::Replayed(Box::new(replayed), store, root)));
        }
        // Found to have no log: not looked for again.
        Ok(no_log.then(|| Opened::Listing(store)))
    }

    /// The files of the loaded log, replayed where the kernel loaded it; offered to the node's
    /// cache for the ranks that open the version next (a job's marker names it to them).
    pub(super) async fn replay(
        &self,
        table: DeltaTable,
        loaded: Loaded,
    ) -> Result<(super::replay::Replayed, Arc<dyn ObjectStore>, url::Url), TableError> {
        let (display, identity, stats) = (&self.display, &self.identity, self.stats);
        let version = loaded.version();
        let offer = self.log_cache.as_ref().filter(|cache| {
            self.remote_ours() && !super::list_cache::kept(cache, identity, display, version)
        });
        let mut replayed = match loaded {
            Loaded::Kernel(state) => {
                let with_stats = stats || offer.is_some();
                let replayed =
                    super::replay::replay(&table, state.as_ref(), display, with_stats).await?;
                // deltalake's state of the version goes before the list is encoded.
                drop(state);
                replayed
            }
            Loaded::Replayed(replayed) => *replayed,
        };
        let (store, root) = (table.object_store(), table.log_store().root_url().clone());
        drop(table);
        if let Some(cache) = offer {
            super::list_cache::offer(cache, identity, display, &replayed).await;
        }
        if !stats {
            replayed.files = replayed.files.without_stats();
        }
        Ok((replayed, store, root))
    }

    /// Once the log is replayed (or found missing) it is not read again: its answers go, and
    /// the store reads the table's data from then on.
    pub(super) fn close_memo(&self) {
        if let Some(memo) = self.memo.get() {
            let shown: &str = &self.display;
            tracing::debug!(location = shown, reused = memo.hits(), "log answers reused");
            memo.close();
        }
    }
}
