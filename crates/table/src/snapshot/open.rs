//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::collections::HashMap;
use std::sync::Arc;

use deltalake::DeltaTable;
use object_store::ObjectStore;
use voxlake_delta::{AsOf, ColumnMapping, DeltaLog, FileList, Found, LogAhead};
use voxlake_format::TensorSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};

use super::Snapshot;
use crate::error::TableError;

/// How [`Snapshot::open_logged`] reads a table's log, beyond where and which version.
pub(crate) struct OpenHow {
    /// A remote table's immutable log objects read through the node's disk cache.
    pub log_cache: Option<Arc<voxlake_io::cache::DiskCache>>,
    /// A job's marker named the version: the log is not listed first to learn whether there
    /// is one (a round trip less).
    pub known_delta: bool,
    /// The files' statistics are kept (a filter reads them; ~150 bytes a file).
    pub stats: bool,
    /// The log's first answers, asked before the open (beside a job's marker).
    pub ahead: Option<LogAhead>,
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
    /// [`SUPPORTED_READER_FEATURES`]: voxlake_delta::SUPPORTED_READER_FEATURES
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
            ahead,
        } = how;
        let log = DeltaLog::new(location, options)?
            .with_as_of(as_of)
            .with_root_store(root_store)
            .with_node_cache(log_cache)
            .with_known_delta(known_delta)
            .with_stats(stats)
            .with_ahead(ahead);
        let (display, identity) = (log.display().to_string(), log.identity());
        match log.read().await? {
            Found::Log(version, store) => {
                Snapshot::from_log(*version, store, display, hints, identity).await
            }
            Found::Listing(files, store) => {
                Snapshot::new(display, 0, *files, store, identity)
                    .resolve_columns(&HashMap::new(), hints)
                    .await
            }
            _ => Err(TableError::Internal(format!(
                "table {display}: found neither a log nor a listing"
            ))),
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
        let (version, store) = DeltaLog::of_table(table, &location).await?;
        Snapshot::from_log(version, store, location.clone(), hints, &location).await
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
