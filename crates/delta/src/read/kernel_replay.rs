//! The Delta kernel's reader of the log: its lazy snapshot's files streamed batch by batch
//! into a [`Replayed`] (`load` loads the snapshot).

use std::borrow::Cow;

use deltalake::DeltaResult;
use deltalake::DeltaTable;
use deltalake::kernel::LogicalFileView;
use deltalake::kernel::{Metadata, Protocol as DeltaProtocol, SchemaRef};
use deltalake::logstore::LogStore;
use futures::TryStreamExt;
use futures::stream::BoxStream;

use crate::error::DeltaError;
use crate::file_list::{Entry, FileListBuilder};
use crate::mapping::ColumnMapping;
use crate::replayed::{Replayed, finish};

/// What a replay reads: deltalake's lazy snapshot as `load_at` gives it (its files streamed
/// from the log, batch by batch), or a loaded table's state (its files held already).
pub(crate) trait LogState: Sync {
    fn version(&self) -> u64;
    fn protocol(&self) -> &DeltaProtocol;
    fn metadata(&self) -> &Metadata;
    fn schema(&self) -> SchemaRef;
    fn file_views<'a>(
        &'a self,
        log_store: &'a dyn LogStore,
    ) -> BoxStream<'a, DeltaResult<LogicalFileView>>;
}

macro_rules! log_state {
    ($t:ty) => {
        impl LogState for $t {
            fn version(&self) -> u64 {
                <$t>::version(self)
            }
            fn protocol(&self) -> &DeltaProtocol {
                <$t>::protocol(self)
            }
            fn metadata(&self) -> &Metadata {
                <$t>::metadata(self)
            }
            fn schema(&self) -> SchemaRef {
                <$t>::schema(self)
            }
            fn file_views<'a>(
                &'a self,
                log_store: &'a dyn LogStore,
            ) -> BoxStream<'a, DeltaResult<LogicalFileView>> {
                <$t>::file_views(self, log_store, None)
            }
        }
    };
}
log_state!(deltalake::kernel::Snapshot);
log_state!(deltalake::kernel::EagerSnapshot);

/// Replays the log of `table` as `state` (a version of it) holds it into a [`Replayed`], the
/// files' statistics kept if `stats`; `location` is used in messages.
pub(crate) async fn replay(
    table: &DeltaTable,
    state: &impl LogState,
    location: &str,
    stats: bool,
) -> Result<Replayed, DeltaError> {
    let config = state.metadata().configuration().clone();
    let mapping =
        ColumnMapping::from_delta(&config, state.schema().as_ref()).map_err(|reason| {
            DeltaError::Incompatible {
                location: location.to_string(),
                reason,
            }
        })?;
    let log_store = table.log_store();
    let version = state.version();
    // File by file into columns: no struct per file, the statistics only where a filter reads
    // them (see `file_list`).
    let mut views = state.file_views(log_store.as_ref());
    let mut builder = FileListBuilder::new(stats);
    let mut vectors = Vec::new();
    loop {
        // The files are read from the log here (a lazy snapshot): a commit or checkpoint the
        // kernel cannot parse is named as a failed load's is.
        let f = match views.try_next().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                drop(views);
                return Err(super::kernel::explain(table, Some(version), e, location).await);
            }
        };
        let path = f.path();
        let object_path = f.object_store_path();
        let tag = format!("modified={}", f.modification_time());
        let stats = match stats {
            true => f.stats(),
            false => None,
        };
        if let Some(descriptor) = f.deletion_vector_descriptor() {
            vectors.push((builder.len(), descriptor));
        }
        builder.push(
            Entry {
                path: &path,
                object_path: Some(object_path.as_ref()),
                size: f.size() as u64,
                records: f.num_records().map(|n| n as u64),
                tag: &tag,
                stats: stats.as_deref(),
                order: f.modification_time(),
            },
            // Partition values are keyed by physical name under column mapping.
            f.partition_values_map()
                .into_iter()
                .map(|(k, v)| (Cow::Owned(mapping.logical_key(&k)), v.map(Cow::Owned))),
        );
    }
    drop(views);
    let (files, vectors) = finish(builder, vectors);
    Ok(Replayed {
        version,
        protocol: state.protocol().clone(),
        metadata: state.metadata().clone(),
        files,
        vectors,
    })
}
