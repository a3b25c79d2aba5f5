//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use voxlake_delta::{AsOf, ColumnMapping, DeltaLog, FileList, Found, LogAhead, LogVersion};
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
    /// The table at `location` (a local path or URL) as of `as_of`, through `root_store` (with
    /// `/` at the root of the store the location names) where given, its samples read as
    /// `hints` say, its log read as `how` says (the node's cache of the log, whether the table
    /// is known to have one, whether files' statistics are kept). See [`Snapshot::open`].
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
                Snapshot::from_log_in(*version, store, display, hints, identity).await
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

    /// The snapshot of a version whose log was read already ([`DeltaLog::read`],
    /// [`DeltaLog::of_table`]), its data files read through `store`, its samples as `hints`
    /// say; `location` names it in messages and cache keys.
    pub async fn from_log(
        version: LogVersion,
        store: Arc<dyn ObjectStore>,
        location: &str,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        Snapshot::from_log_in(version, store, location.to_string(), hints, location).await
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
