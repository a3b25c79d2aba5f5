//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use futures::TryStreamExt;
use object_store::ObjectStore;
use voxlake_format::TensorSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};

use super::file_list::{Entry, FileListBuilder};
use super::log::{Loaded, load};
use super::mapping::ColumnMapping;
use super::travel::AsOf;
use super::{FileList, Snapshot};
use crate::error::TableError;
use voxlake_io::location;
use voxlake_io::redact;

/// Bytes of log answers kept while a table opens (`voxlake_io::log_memo`): a log of 100 commits
/// of 10⁵ files is 32 MB, its checkpoint 17 MB; a larger log is read twice past it.
const LOG_MEMO_BYTES: u64 = 64 << 20;

/// What the log (or the node's cache of it) gave.
enum Opened {
    /// The table (its store) and its log at the version (the files not yet read where the
    /// kernel loaded it).
    Table(DeltaTable, Box<Loaded>),
    /// The version's files as the node's cache kept them, the table's store and root.
    Replayed(Box<super::replay::Replayed>, Arc<dyn ObjectStore>, url::Url),
    /// No log: a folder of Parquet files.
    Listing(Arc<dyn ObjectStore>),
}

/// How [`Snapshot::open_logged`] opens a table.
pub(crate) struct OpenHow {
    /// A remote table's immutable log objects read through the node's disk cache (see
    /// `voxlake_io::log_cache`).
    pub log_cache: Option<crate::stores::LogCacheRef>,
    /// A job's marker named the version: the log is not listed first to learn whether there
    /// is one (a round trip less).
    pub known_delta: bool,
    /// The files' statistics are kept (a filter reads them; ~150 bytes a file).
    pub stats: bool,
    /// The log's first answers, asked before the open (beside a job's marker).
    pub ahead: Option<super::asked::LogAhead>,
}

impl Default for OpenHow {
    fn default() -> Self {
        OpenHow {
            log_cache: None,
            known_delta: false,
            stats: true,
            ahead: None,
        }
    }
}

impl Snapshot {
    /// Opens the table at `location` (a local path or URL) as of `as_of`: a version
    /// (`Some(3)`, `3`), the latest (`None`), or an [`AsOf`] (a timestamp).
    pub async fn open(
        location: &str,
        options: &HashMap<String, String>,
        as_of: impl Into<AsOf>,
    ) -> Result<Snapshot, TableError> {
        Snapshot::open_with_store(location, options, as_of, None).await
    }

    /// [`open`](Self::open) through a store of the caller's: `root_store` has `/` at the root
    /// of the store that `location` names (e.g. a `LocalFileSystem::new()` wrapped in object
    /// store's `ThrottledStore`, or a store with a custom client).
    pub async fn open_with_store(
        location: &str,
        options: &HashMap<String, String>,
        as_of: impl Into<AsOf>,
        root_store: Option<Arc<dyn ObjectStore>>,
    ) -> Result<Snapshot, TableError> {
        Snapshot::open_with(
            location,
            options,
            as_of,
            root_store,
            &ColumnHints::default(),
        )
        .await
    }

    /// [`open_with_store`](Self::open_with_store) reading samples as `hints` say: the table
    /// may be any Delta table, or a folder (prefix) of Parquet files without a log, with its
    /// tensors in any encoding of [`voxlake_format::sample::TensorEncoding`]. A table that is
    /// not voxlake's is resolved from the first file's footer (and, for BINARY columns of
    /// `np.save` bytes, its first value).
    ///
    /// A Delta table is read as its protocol says: deleted rows (deletion vectors) are left
    /// out, columns go by their logical names (column mapping), and a reader feature the
    /// snapshot does not handle is an error naming it ([`SUPPORTED_READER_FEATURES`]).
    ///
    /// [`SUPPORTED_READER_FEATURES`]: crate::SUPPORTED_READER_FEATURES
    pub async fn open_with(
        location: &str,
        options: &HashMap<String, String>,
        as_of: impl Into<AsOf>,
        root_store: Option<Arc<dyn ObjectStore>>,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        Snapshot::open_logged(
            location,
            options,
            as_of.into(),
            root_store,
            hints,
            OpenHow::default(),
        )
        .await
    }

    /// [`open_with`](Self::open_with) as `how` says (the node's cache of the log, whether the
    /// table is known to have one, whether files' statistics are kept).
    pub(crate) async fn open_logged(
        location: &str,
        options: &HashMap<String, String>,
        as_of: AsOf,
        root_store: Option<Arc<dyn ObjectStore>>,
        hints: &ColumnHints,
        how: OpenHow,
    ) -> Result<Snapshot, TableError> {
        let OpenHow {
            log_cache,
            known_delta,
            stats,
            mut ahead,
        } = how;
        crate::stores::register_handlers();
        let url = location::to_url(location, true)?;
        let display = redact(url.as_str());
        let err = |source| TableError::Delta {
            location: display.clone(),
            source: Box::new(source),
        };
        let options = location::storage_options(options);
        let identity = location::store_identity(&url, &options);
        let shown: &str = &display;
        tracing::debug!(
            location = shown,
            credentials = location::credential_method(&url, &options),
            "opening table"
        );
        // Local tables read row groups into recycled buffers (see `local`).
        let root_store = root_store.or_else(|| {
            (url.scheme() == "file").then(|| {
                Arc::new(voxlake_io::local::MappedLocalStore::new()) as Arc<dyn ObjectStore>
            })
        });
        // The reachability probe runs beside the open, not before it: it costs no round trip,
        // and when nothing answers its error comes first and ends the open.
        let probe = async {
            match root_store {
                None => Ok(crate::stores::ensure_reachable(location, &options).await?),
                Some(_) => Ok::<(), TableError>(()),
            }
        };
        let memo = std::sync::OnceLock::<Arc<voxlake_io::log_memo::LogMemo>>::new();
        let open = async {
            let mut builder = DeltaTableBuilder::from_url(url.clone())
                .map_err(err)?
                .with_storage_options(location::with_retry_defaults(&options));
            // A remote table's store is built here, as deltalake's factories build it, so
            // that an answer of the log that breaks is asked again (`stores::open_store`
            // wraps it in `RetryBroken`; object_store retries requests and gets' bodies).
            let backend = match root_store.clone() {
                Some(store) => Some(store),
                None if !matches!(url.scheme(), "file" | "memory") => {
                    let store = crate::stores::open_store(location, true, &options)?.store;
                    Some(crate::stores::through_log_cache(
                        store,
                        log_cache.as_ref(),
                        &identity,
                    ))
                }
                None => None,
            };
            // The log's answers kept while it opens: deltalake reads it twice (`LogMemo`).
            let backend = backend.map(|store| {
                let kept = Arc::new(voxlake_io::log_memo::LogMemo::new(store, LOG_MEMO_BYTES));
                let _ = memo.set(kept.clone());
                kept as Arc<dyn ObjectStore>
            });
            if let Some(store) = backend {
                builder = builder.with_storage_backend(store, url.clone());
            }
            let table = builder.build().map_err(err)?;
            // A version asked of a remote table through the node's cache: its replayed file
            // list, made by the first rank of the node and read by the others (`list_cache`).
            if let (Some(cache), AsOf::Version(v)) = (&log_cache, as_of)
                && !matches!(url.scheme(), "file" | "memory")
                && root_store.is_none()
            {
                let store = table.object_store();
                let root = table.log_store().root_url().clone();
                // Replayed with the statistics, for whichever rank filters.
                let mut no_log = false;
                let ahead = ahead.take();
                let make = async {
                    let memo = memo.get().map(|m| m.as_ref());
                    match load(&table, as_of, known_delta, &display, true, ahead, memo).await? {
                        Some(Loaded::Replayed(replayed)) => Ok(Some(*replayed)),
                        Some(Loaded::Kernel(state)) => Ok(Some(
                            super::replay::replay(&table, state.as_ref(), &display, true).await?,
                        )),
                        None => {
                            no_log = true;
                            Ok(None)
                        }
                    }
                };
                let replayed = Box::pin(super::list_cache::through(
                    cache, &identity, &display, v, stats, make,
                ))
                .await?;
                if let Some(replayed) = replayed {
                    return Ok(Opened::Replayed(Box::new(replayed), store, root));
                }
                // Found to have no log: not looked for again.
                if no_log {
                    return Ok(Opened::Listing(store));
                }
            }
            let memo = memo.get().map(|m| m.as_ref());
            // Statistics kept where the node's cache may be offered the list (it keeps them).
            let with_stats = stats || log_cache.is_some();
            Ok(
                match load(
                    &table,
                    as_of,
                    known_delta,
                    &display,
                    with_stats,
                    ahead,
                    memo,
                )
                .await?
                {
                    Some(loaded) => Opened::Table(table, Box::new(loaded)),
                    None => Opened::Listing(table.object_store()),
                },
            )
        };
        let (opened, ()) = futures::try_join!(open, probe)?;
        // Once the log is replayed (or found missing) it is not read again: its answers go,
        // and the store reads the table's data from then on.
        let close_memo = || {
            if let Some(memo) = memo.get() {
                let shown: &str = &display;
                tracing::debug!(location = shown, reused = memo.hits(), "log answers reused");
                memo.close();
            }
        };
        let (replayed, store, root) = match opened {
            Opened::Table(table, loaded) => {
                let version = loaded.version();
                // Through the node's cache, the version this rank resolved is kept for the
                // ranks that open it next (a job's marker names it to them).
                let offer = log_cache.as_ref().filter(|cache| {
                    !matches!(url.scheme(), "file" | "memory")
                        && root_store.is_none()
                        && !super::list_cache::kept(cache, &identity, &display, version)
                });
                let mut replayed = match *loaded {
                    Loaded::Kernel(state) => {
                        let replayed = super::replay::replay(
                            &table,
                            state.as_ref(),
                            &display,
                            stats || offer.is_some(),
                        )
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
                    super::list_cache::offer(cache, &identity, &display, &replayed).await;
                }
                if !stats {
                    replayed.files = replayed.files.without_stats();
                }
                (replayed, store, root)
            }
            Opened::Replayed(replayed, store, root) => (*replayed, store, root),
            Opened::Listing(store) => {
                close_memo();
                return Snapshot::from_listing_in(store, display, hints, &identity).await;
            }
        };
        close_memo();
        Snapshot::from_replayed(replayed, store, &root, display, hints, &identity).await
    }

    /// The snapshot of an already loaded table; `location` is used in messages.
    pub async fn from_table(table: &DeltaTable, location: String) -> Result<Snapshot, TableError> {
        Snapshot::from_table_with(table, location, &ColumnHints::default()).await
    }

    /// [`from_table`](Self::from_table) reading samples as `hints` say.
    pub async fn from_table_with(
        table: &DeltaTable,
        location: String,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        let state = table.snapshot().map_err(|source| TableError::Delta {
            location: location.clone(),
            source: Box::new(source),
        })?;
        let replayed = super::replay::replay(table, state.snapshot(), &location, true).await?;
        let root = table.log_store().root_url().clone();
        Snapshot::from_replayed(
            replayed,
            table.object_store(),
            &root,
            location.clone(),
            hints,
            &location,
        )
        .await
    }

    /// The snapshot of a folder of Parquet files without a Delta log, its store told apart by
    /// `identity`: every `.parquet` object under the store's root, listed once and sorted by
    /// path, skipping folders and files whose names start with `_` or `.` (`_delta_log`,
    /// `_SUCCESS`, `.crc` files). Version 0; the file set hash tells one listing from another.
    async fn from_listing_in(
        store: Arc<dyn ObjectStore>,
        location: String,
        hints: &ColumnHints,
        identity: &str,
    ) -> Result<Snapshot, TableError> {
        let objects: Vec<object_store::ObjectMeta> =
            store
                .list(None)
                .try_collect()
                .await
                .map_err(|e| TableError::Delta {
                    location: location.clone(),
                    source: Box::new(DeltaTableError::ObjectStore { source: e }),
                })?;
        let listed = objects.len();
        let mut builder = FileListBuilder::new(false);
        for o in objects.iter().filter(|o| {
            let parts: Vec<_> = o.location.parts().collect();
            parts
                .iter()
                .all(|p| !p.as_ref().starts_with('_') && !p.as_ref().starts_with('.'))
                && parts
                    .last()
                    .is_some_and(|p| p.as_ref().ends_with(".parquet"))
        }) {
            let tag = match (&o.e_tag, &o.version) {
                (Some(e_tag), _) => format!("etag={e_tag}"),
                (None, Some(version)) => format!("version={version}"),
                (None, None) => format!("modified={}", o.last_modified.timestamp_millis()),
            };
            builder.push(
                Entry {
                    path: o.location.as_ref(),
                    object_path: None,
                    size: o.size,
                    records: None,
                    tag: &tag,
                    stats: None,
                    // Listed files are in path order.
                    order: 0,
                },
                hive_partitions(o.location.as_ref())
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k), v.map(Cow::Owned))),
            );
        }
        drop(objects);
        let (files, _) = builder.finish(&[]);
        if files.is_empty() {
            return Err(match listed {
                0 => TableError::NotFound {
                    location,
                    reason: "nothing at this location: no Delta table (no _delta_log) and no .parquet files".to_string(),
                },
                n => TableError::Incompatible {
                    location,
                    reason: format!(
                        "neither a Delta table (no _delta_log) nor a folder of .parquet files ({n} other objects)"
                    ),
                },
            });
        }
        Snapshot::new(location, 0, files, store, identity)
            .resolve_columns(&HashMap::new(), hints)
            .await
    }

    pub(super) fn new(
        location: String,
        version: u64,
        files: FileList,
        store: Arc<dyn ObjectStore>,
        identity: &str,
    ) -> Snapshot {
        let files_have_deletes = files.iter().any(|f| f.has_deletion_vector());
        // Every read of a remote table's data files goes through one store (see `remote`).
        let remote = (!location.starts_with("file:")).then(|| {
            // The remote store looks files up in the list it shares: no map of its own.
            let lookup: Arc<dyn voxlake_io::remote::FileIdentities> = Arc::new(files.identities());
            Arc::new(voxlake_io::remote::RemoteStore::new(
                store.clone(),
                identity,
                lookup,
            ))
        });
        let store = remote.clone().map_or(store, |r| r as Arc<dyn ObjectStore>);
        Snapshot {
            remote,
            location,
            version,
            // Replaced by `resolve_columns` before the snapshot is handed out.
            columns: SampleColumns::stored(
                &TensorSpec::new(Vec::new(), voxlake_format::DType::U8).into(),
            ),
            stored: None,
            schema: Arc::new(arrow_schema::Schema::empty()),
            delta: None,
            partition_types: HashMap::new(),
            selection: None,
            protocol: None,
            mapping: ColumnMapping::default(),
            files,
            store,
            footers: Default::default(),
            small: Default::default(),
            has_deletes: files_have_deletes,
        }
    }
}

/// `key=value` folders of a listed file's path, as hive writes partitions.
fn hive_partitions(path: &str) -> Vec<(String, Option<String>)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            let v = (v != "__HIVE_DEFAULT_PARTITION__").then(|| v.to_string());
            (k.to_string(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_folders_are_partitions() {
        assert_eq!(
            hive_partitions("region=a/year=2024/part-0.parquet"),
            vec![
                ("region".to_string(), Some("a".to_string())),
                ("year".to_string(), Some("2024".to_string()))
            ]
        );
        assert_eq!(
            hive_partitions("k=__HIVE_DEFAULT_PARTITION__/x=1.parquet"),
            vec![("k".to_string(), None)]
        );
        assert!(hive_partitions("part-0.parquet").is_empty());
    }
}
