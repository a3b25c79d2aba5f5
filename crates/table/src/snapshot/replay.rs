//! A Delta version's files and table description, as the log replays them ([`replay`]), and
//! the snapshot made of them ([`Snapshot::from_replayed`]): apart, so that what the replay
//! gives can be kept by the node's cache and a rank that finds it there never reads the log
//! (see `list_cache`).

use std::borrow::Cow;
use std::sync::Arc;

use deltalake::DeltaResult;
use deltalake::DeltaTable;
use deltalake::kernel::LogicalFileView;
use deltalake::kernel::{DeletionVectorDescriptor, Metadata, Protocol as DeltaProtocol, SchemaRef};
use deltalake::logstore::LogStore;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStore;
use url::Url;
use voxlake_format::sample::ColumnHints;

use super::deletes::{self, Wanted};
use super::features::Protocol;
use super::file_list::{Entry, FileListBuilder};
use super::mapping::ColumnMapping;
use super::{FileList, Snapshot};
use crate::error::TableError;

/// What a Delta version is, as its log says.
pub(crate) struct Replayed {
    pub version: u64,
    pub protocol: DeltaProtocol,
    pub metadata: Metadata,
    /// The active files (their statistics where asked for), deletion vectors not yet read.
    pub files: FileList,
    /// The files with a deletion vector (their index in `files`) and its descriptor.
    pub vectors: Vec<(usize, DeletionVectorDescriptor)>,
}

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
) -> Result<Replayed, TableError> {
    let config = state.metadata().configuration().clone();
    let mapping =
        ColumnMapping::from_delta(&config, state.schema().as_ref()).map_err(|reason| {
            TableError::Incompatible {
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
                return Err(super::load::explain(table, Some(version), e, location).await);
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

/// The files pushed, sorted, and the deletion vectors (pushed at the index of their file) at
/// their file's sorted index. The log's order is not stable across checkpoints: sorted so plans
/// are reproducible, by write time first so that "table order" is the order the rows were
/// written in.
pub(super) fn finish(
    builder: FileListBuilder,
    vectors: Vec<(usize, DeletionVectorDescriptor)>,
) -> (FileList, Vec<(usize, DeletionVectorDescriptor)>) {
    let pushed: Vec<usize> = vectors.iter().map(|(i, _)| *i).collect();
    let (files, places) = builder.finish(&pushed);
    let vectors = vectors
        .into_iter()
        .zip(places)
        .map(|((_, descriptor), index)| (index, descriptor))
        .collect();
    (files, vectors)
}

impl Snapshot {
    /// The snapshot of `replayed`: its files read through `store` (rooted at the table, whose
    /// URL is `root`), their deletion vectors read, its samples as the table's configuration
    /// and `hints` say; `location` is used in messages, `identity` in cache keys.
    pub(crate) async fn from_replayed(
        replayed: Replayed,
        store: Arc<dyn ObjectStore>,
        root: &Url,
        location: String,
        hints: &ColumnHints,
        identity: &str,
    ) -> Result<Snapshot, TableError> {
        let Replayed {
            version,
            protocol,
            metadata,
            mut files,
            vectors,
        } = replayed;
        let incompatible = |reason: String| TableError::Incompatible {
            location: location.clone(),
            reason,
        };
        let protocol = Protocol::of(&protocol).map_err(&incompatible)?;
        protocol.check_readable().map_err(&incompatible)?;
        let config = metadata.configuration().clone();
        let schema = metadata
            .parse_schema()
            .map_err(|e| incompatible(format!("the Delta schema does not parse: {e}")))?;
        let mapping = ColumnMapping::from_delta(&config, &schema).map_err(&incompatible)?;
        let wanted: Vec<Wanted> = vectors
            .into_iter()
            .map(|(index, descriptor)| Wanted {
                index,
                file: files.at(index).path().to_string(),
                rows: files.at(index).rows(),
                descriptor,
            })
            .collect();
        if !wanted.is_empty() {
            let mut root = root.clone();
            if !root.path().ends_with('/') {
                root.set_path(&format!("{}/", root.path()));
            }
            attach(&mut files, &store, &root, &location, wanted).await?;
        }
        let delta_schema = super::schema::DeltaSchema {
            schema: delta_kernel::engine::arrow_conversion::TryIntoArrow::try_into_arrow(&schema)
                .map_err(|e: arrow_schema::ArrowError| {
                incompatible(format!("the Delta schema has no Arrow form: {e}"))
            })?,
            partitions: metadata.partition_columns().to_vec(),
        };
        if files.is_empty() {
            tracing::warn!(
                location = location.as_str(),
                version,
                "version {version} of the table has no data files: it reads no rows"
            );
        }
        let mut snapshot = Snapshot::new(location, version, files, store, identity);
        snapshot.delta = Some(delta_schema);
        snapshot.protocol = Some(protocol);
        snapshot.mapping = mapping;
        snapshot.resolve_columns(&config, hints).await
    }
}

/// Reads the vectors of `wanted` (see [`deletes::read_all`]) and attaches each to its file of `files`,
/// whose live rows are then its add action's count less the deleted ones.
async fn attach(
    files: &mut FileList,
    store: &Arc<dyn ObjectStore>,
    table: &Url,
    location: &str,
    wanted: Vec<Wanted>,
) -> Result<(), TableError> {
    let count = wanted.len();
    for (index, deleted) in deletes::read_all(store, table, location, wanted).await? {
        let gone = deleted.rows.len() as u64;
        if let Some(rows) = files.at(index).rows() {
            let live = rows.checked_sub(gone).ok_or_else(|| TableError::Corrupt {
                location: location.to_string(),
                file: files.at(index).path().to_string(),
                reason: format!(
                    "its deletion vector deletes {gone} rows, its add action counts {rows}"
                ),
            })?;
            files.set_rows(index, live);
        }
        files.set_deleted(index, deleted);
    }
    tracing::debug!(location, files = count, "deletion vectors read");
    Ok(())
}
