//! Opening a snapshot: the Delta log (or a listing), the data files, how samples are read.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use voxlake_delta::{ColumnMapping, FileList, Found};
use voxlake_format::TensorSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};

use super::Snapshot;
use crate::error::TableError;

impl Snapshot {
    /// The snapshot of what the log (or a listing) gave
    /// ([`DeltaLog::read`](voxlake_delta::DeltaLog::read)); `location` names
    /// it in messages, `identity` tells its store apart in cache keys.
    pub(crate) async fn from_found(
        found: Found,
        location: &str,
        identity: &str,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        let location = location.to_string();
        match found {
            Found::Log(version, store) => {
                Snapshot::from_log(*version, store, location, hints, identity).await
            }
            Found::Listing(files, store) => {
                Snapshot::new(location, 0, *files, store, identity)
                    .resolve_columns(&HashMap::new(), hints)
                    .await
            }
            _ => Err(TableError::Internal(format!(
                "table {location}: found neither a log nor a listing"
            ))),
        }
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
            bricks: None,
            schema: Arc::new(arrow_schema::Schema::empty()),
            delta: None,
            partition_types: HashMap::new(),
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
