//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::collections::HashMap;
use std::sync::Arc;

use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use futures::TryStreamExt;
use object_store::ObjectStore;
use tokio::sync::OnceCell;
use voxlake_format::TensorSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};

use super::deletes::{self, Wanted};
use super::features::Protocol;
use super::logcheck;
use super::mapping::ColumnMapping;
use super::travel::{self, AsOf};
use super::{DataFile, Snapshot};
use crate::error::TableError;
use voxlake_io::location;
use voxlake_io::redact;

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
            None,
            false,
        )
        .await
    }

    /// [`open_with`](Self::open_with), a remote table's immutable log objects read through
    /// `log_cache` (the node's disk cache: see `voxlake_io::log_cache`). With `known_delta`
    /// (a job's marker named the version) the log is not listed first to learn whether there
    /// is one: a round trip less.
    pub(crate) async fn open_logged(
        location: &str,
        options: &HashMap<String, String>,
        as_of: AsOf,
        root_store: Option<Arc<dyn ObjectStore>>,
        hints: &ColumnHints,
        log_cache: Option<crate::stores::LogCacheRef>,
        known_delta: bool,
    ) -> Result<Snapshot, TableError> {
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
        #[cfg(unix)]
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
        let version_error = |reason: String| TableError::Version {
            location: display.clone(),
            reason,
        };
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
            if let Some(store) = backend {
                builder = builder.with_storage_backend(store, url.clone());
            }
            let mut table = builder.build().map_err(err)?;
            // Ask first: loading a missing table makes the kernel log an error.
            if !known_delta && !table.verify_deltatable_existence().await.map_err(err)? {
                // No log: a folder of Parquet files (listed once), whose only version is 0 (a
                // loader state pins it; the state's file-set hash tells listings apart).
                let pinned = match as_of {
                    AsOf::Version(v) if v != 0 => Some(format!("version {v}")),
                    AsOf::Timestamp(t) => Some(format!("time {}", travel::shown(t))),
                    _ => None,
                };
                if let Some(pinned) = pinned {
                    return Err(err(DeltaTableError::NotATable(format!(
                        "no _delta_log at this location ({pinned} needs a Delta table)"
                    ))));
                }
                return Ok(Err(table.object_store()));
            }
            let version = match as_of {
                AsOf::Latest => None,
                AsOf::Version(v) => Some(v),
                AsOf::Timestamp(t) => Some(
                    travel::version_at(&table, t)
                        .await
                        .map_err(&version_error)?,
                ),
            };
            let loaded = match version {
                Some(v) => table.load_version(v).await,
                None => table.load().await,
            };
            if let Err(e) = loaded {
                // The kernel's message for a version past the end names log segments.
                if let Some(v) = version
                    && let Some(reason) = travel::missing_version(&table, v).await
                {
                    return Err(version_error(reason));
                }
                // The kernel does not say which log file it could not parse: find it (a
                // store fault is reported as it is, without more requests).
                let store_fault = matches!(e, DeltaTableError::ObjectStore { .. });
                if !store_fault
                    && let Some(reason) =
                        logcheck::unreadable_log_file(&table.object_store(), version).await
                {
                    return Err(TableError::Log {
                        location: display.clone(),
                        reason,
                    });
                }
                // A log the kernel refuses: say which version was being read.
                if store_fault || matches!(e, DeltaTableError::NotATable(_)) {
                    return Err(err(e));
                }
                let at = match version {
                    Some(v) => format!("version {v}"),
                    None => "the latest version".to_string(),
                };
                return Err(TableError::Log {
                    location: display.clone(),
                    reason: format!("{} (reading {at})", crate::error::delta_message(&e)),
                });
            }
            Ok(Ok(table))
        };
        let (table, ()) = futures::try_join!(open, probe)?;
        match table {
            Ok(table) => Snapshot::from_table_in(&table, display, hints, &identity).await,
            Err(store) => Snapshot::from_listing_in(store, display, hints, &identity).await,
        }
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
        let identity = location.clone();
        Snapshot::from_table_in(table, location, hints, &identity).await
    }

    /// [`from_table_with`](Self::from_table_with), its store told apart from others by
    /// `identity` ([`location::store_identity`]) in cache keys.
    async fn from_table_in(
        table: &DeltaTable,
        location: String,
        hints: &ColumnHints,
        identity: &str,
    ) -> Result<Snapshot, TableError> {
        let err = |source| TableError::Delta {
            location: location.clone(),
            source: Box::new(source),
        };
        let state = table.snapshot().map_err(err)?;
        let config = state.metadata().configuration().clone();
        let incompatible = |reason: String| TableError::Incompatible {
            location: location.clone(),
            reason,
        };
        let protocol = Protocol::of(state.protocol()).map_err(&incompatible)?;
        protocol.check_readable().map_err(&incompatible)?;
        let mapping =
            ColumnMapping::from_delta(&config, state.schema().as_ref()).map_err(&incompatible)?;
        let log_store = table.log_store();
        let views: Vec<_> = state
            .snapshot()
            .file_views(log_store.as_ref(), None)
            .try_collect()
            .await
            .map_err(err)?;
        let mut files: Vec<(i64, DataFile, Option<_>)> = views
            .iter()
            .map(|f| {
                // Partition values are keyed by physical name under column mapping.
                let mut partitions: Vec<(String, Option<String>)> = f
                    .partition_values_map()
                    .into_iter()
                    .map(|(k, v)| (mapping.logical_key(&k), v))
                    .collect();
                partitions.sort();
                let file = DataFile {
                    path: f.path().to_string(),
                    object_path: f.object_store_path(),
                    size: f.size() as u64,
                    rows: f.num_records().map(|n| n as u64),
                    records: f.num_records().map(|n| n as u64),
                    partitions,
                    delta_stats: f.stats(),
                    deleted: None,
                    tag: format!("modified={}", f.modification_time()),
                };
                (f.modification_time(), file, f.deletion_vector_descriptor())
            })
            .collect();
        // The log's order is not stable across checkpoints: sort so plans are reproducible,
        // by write time first so that "table order" is the order the rows were written in.
        files.sort_by(|(ta, a, _), (tb, b, _)| ta.cmp(tb).then_with(|| a.path.cmp(&b.path)));
        let mut wanted = Vec::new();
        let mut files: Vec<DataFile> = files
            .into_iter()
            .enumerate()
            .map(|(index, (_, file, dv))| {
                if let Some(descriptor) = dv {
                    wanted.push(Wanted {
                        index,
                        file: file.path.clone(),
                        rows: file.rows,
                        descriptor,
                    });
                }
                file
            })
            .collect();
        if !wanted.is_empty() {
            let mut root = log_store.root_url().clone();
            if !root.path().ends_with('/') {
                root.set_path(&format!("{}/", root.path()));
            }
            deletes::attach(&mut files, &table.object_store(), &root, &location, wanted).await?;
        }
        let delta_schema = super::schema::DeltaSchema {
            schema: delta_kernel::engine::arrow_conversion::TryIntoArrow::try_into_arrow(
                state.schema().as_ref(),
            )
            .map_err(|e: arrow_schema::ArrowError| {
                incompatible(format!("the Delta schema has no Arrow form: {e}"))
            })?,
            partitions: state.metadata().partition_columns().to_vec(),
        };
        if files.is_empty() {
            tracing::warn!(
                location = location.as_str(),
                version = state.version(),
                "version {} of the table has no data files: it reads no rows",
                state.version()
            );
        }
        let mut snapshot = Snapshot::new(
            location,
            state.version(),
            files,
            table.object_store(),
            identity,
        );
        snapshot.delta = Some(delta_schema);
        snapshot.protocol = Some(protocol);
        snapshot.mapping = mapping;
        snapshot.resolve_columns(&config, hints).await
    }

    /// The snapshot of a folder of Parquet files without a Delta log: every `.parquet` object
    /// under the store's root, listed once and sorted by path, skipping folders and files
    /// whose names start with `_` or `.` (`_delta_log`, `_SUCCESS`, `.crc` files). Version 0;
    /// the file set hash tells one listing from another.
    pub async fn from_listing(
        store: Arc<dyn ObjectStore>,
        location: String,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        let identity = location.clone();
        Snapshot::from_listing_in(store, location, hints, &identity).await
    }

    /// [`from_listing`](Self::from_listing), its store told apart by `identity`.
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
        let mut files: Vec<DataFile> = objects
            .into_iter()
            .filter(|o| {
                let parts: Vec<_> = o.location.parts().collect();
                parts
                    .iter()
                    .all(|p| !p.as_ref().starts_with('_') && !p.as_ref().starts_with('.'))
                    && parts
                        .last()
                        .is_some_and(|p| p.as_ref().ends_with(".parquet"))
            })
            .map(|o| DataFile {
                tag: match (&o.e_tag, &o.version) {
                    (Some(e_tag), _) => format!("etag={e_tag}"),
                    (None, Some(version)) => format!("version={version}"),
                    (None, None) => format!("modified={}", o.last_modified.timestamp_millis()),
                },
                partitions: hive_partitions(o.location.as_ref()),
                path: o.location.to_string(),
                object_path: o.location,
                size: o.size,
                rows: None,
                records: None,
                delta_stats: None,
                deleted: None,
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if files.is_empty() {
            let reason = match listed {
                0 => {
                    "nothing at this location: no Delta table (no _delta_log) and no .parquet files"
                        .to_string()
                }
                n => format!(
                    "neither a Delta table (no _delta_log) nor a folder of .parquet files ({n} other objects)"
                ),
            };
            return Err(TableError::Incompatible { location, reason });
        }
        Snapshot::new(location, 0, files, store, identity)
            .resolve_columns(&HashMap::new(), hints)
            .await
    }

    fn new(
        location: String,
        version: u64,
        files: Vec<DataFile>,
        store: Arc<dyn ObjectStore>,
        identity: &str,
    ) -> Snapshot {
        let footers = files.iter().map(|_| OnceCell::new()).collect();
        let view_footers = files.iter().map(|_| OnceCell::new()).collect();
        let undeleted = files.iter().map(|_| OnceCell::new()).collect();
        let files_have_deletes = files.iter().any(DataFile::has_deletion_vector);
        // Every read of a remote table's data files goes through one store (see `remote`).
        #[cfg(unix)]
        let remote = (!location.starts_with("file:")).then(|| {
            Arc::new(voxlake_io::remote::RemoteStore::new(
                store.clone(),
                identity,
                files
                    .iter()
                    .map(|f| (&f.object_path, f.size, f.tag.as_str())),
            ))
        });
        #[cfg(unix)]
        let store = remote.clone().map_or(store, |r| r as Arc<dyn ObjectStore>);
        Snapshot {
            #[cfg(unix)]
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
            footers,
            view_footers,
            small: Default::default(),
            has_deletes: files_have_deletes,
            undeleted,
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
