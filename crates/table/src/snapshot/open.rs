//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use deltalake::{DeltaTable, DeltaTableError};
use futures::TryStreamExt;
use object_store::ObjectStore;
use voxlake_format::TensorSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};

use super::file_list::{Entry, FileListBuilder};
use super::mapping::ColumnMapping;
use super::opening::{Opened, Opening};
use super::travel::AsOf;
use super::{FileList, Snapshot};
use crate::error::TableError;
use voxlake_io::location;
use voxlake_io::redact;

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
        crate::stores::register_handlers();
        let OpenHow {
            log_cache,
            known_delta,
            stats,
            ahead,
        } = how;
        let url = location::to_url(location, true)?;
        let options = location::storage_options(options);
        let opening = Opening {
            location,
            display: redact(url.as_str()),
            identity: location::store_identity(&url, &options),
            // Local tables read row groups into recycled buffers (see `local`).
            root_store: root_store.or_else(|| {
                (url.scheme() == "file").then(|| {
                    Arc::new(voxlake_io::local::MappedLocalStore::new()) as Arc<dyn ObjectStore>
                })
            }),
            url,
            options,
            as_of,
            log_cache,
            known_delta,
            stats,
            memo: std::sync::OnceLock::new(),
        };
        let shown: &str = &opening.display;
        tracing::debug!(
            location = shown,
            credentials = location::credential_method(&opening.url, &opening.options),
            "opening table"
        );
        // The reachability probe runs beside the open, not before it: it costs no round trip,
        // and when nothing answers its error comes first and ends the open.
        let probe = async {
            match opening.root_store {
                None => Ok(crate::stores::ensure_reachable(location, &opening.options).await?),
                Some(_) => Ok::<(), TableError>(()),
            }
        };
        let (opened, ()) = futures::try_join!(opening.open_log(ahead), probe)?;
        let (replayed, store, root) = match opened {
            Opened::Table(table, loaded) => opening.replay(table, *loaded).await?,
            Opened::Replayed(replayed, store, root) => (*replayed, store, root),
            Opened::Listing(store) => {
                opening.close_memo();
                let (display, identity) = (opening.display.clone(), &opening.identity);
                return Snapshot::from_listing_in(store, display, hints, identity).await;
            }
        };
        opening.close_memo();
        let (display, identity) = (opening.display.clone(), &opening.identity);
        Snapshot::from_replayed(replayed, store, &root, display, hints, identity).await
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
