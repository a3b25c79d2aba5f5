//! The snapshot of a version as the Delta log describes it: its schema and samples resolved.

use std::sync::Arc;

use object_store::ObjectStore;
use voxlake_delta::LogVersion;
use voxlake_format::sample::ColumnHints;

use super::Snapshot;
use crate::error::TableError;

impl Snapshot {
    /// The snapshot of `described`, its files read through `store`, its samples as the
    /// table's configuration and `hints` say; `location` is used in messages, `identity` in
    /// cache keys.
    pub(crate) async fn from_log(
        described: LogVersion,
        store: Arc<dyn ObjectStore>,
        location: String,
        hints: &ColumnHints,
        identity: &str,
    ) -> Result<Snapshot, TableError> {
        let LogVersion {
            version,
            protocol,
            mapping,
            configuration,
            schema,
            partition_columns,
            files,
            ..
        } = described;
        if files.is_empty() {
            tracing::warn!(
                location = location.as_str(),
                version,
                "version {version} of the table has no data files: it reads no rows"
            );
        }
        let mut snapshot = Snapshot::new(location, version, files, store, identity);
        snapshot.delta = Some(super::schema::DeltaSchema {
            schema,
            partitions: partition_columns,
        });
        snapshot.protocol = Some(protocol);
        snapshot.mapping = mapping;
        snapshot.resolve_columns(&configuration, hints).await
    }
}
