//! A snapshot of a table at one version: its data files (as voxlake-delta read the version, or listed
//! once where there is no log, each with its live row count), how its samples are read (its
//! tensor spec), its store, and the footers and small files' bytes its scans share. Making it
//! is `open`'s and `from_log`'s job (`columns` decides how samples are read, `schema` the
//! table's columns); `undeleted` says which rows deletion vectors leave; reads of footers,
//! row groups and files by the snapshot's file numbers are `read`'s, which `crate::Scan`
//! calls with the rows it reads.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use voxlake_format::TensorSpec;
use voxlake_format::sample::SampleColumns;
use voxlake_io::ObjectFileReader;

use crate::error::TableError;

mod builder;
mod columns;
mod from_log;
mod open;
mod read;
mod schema;
mod undeleted;

pub use builder::SnapshotBuilder;
pub(crate) use read::{Ahead, RowGroupRead};
pub use read::{FOOTER_CACHE_BYTES, ReadTimings};
pub(crate) use schema::{column_at_path, root_of};

use voxlake_delta::{ColumnMapping, DataFile, FileList, MappingMode, Protocol};

/// Footers and small-column reads in flight at once.
pub const READ_CONCURRENCY: usize = 16;

/// A snapshot of a table at one version: a voxlake table, another Delta table, or a folder of Parquet
/// files (version 0; the files listed once at open).
pub struct Snapshot {
    location: String,
    version: u64,
    columns: SampleColumns,
    /// A voxlake table's stored fields (its configuration's).
    stored: Option<voxlake_format::SampleSpec>,
    /// A bricked voxlake table's layout (its configuration's).
    bricks: Option<voxlake_format::volume::BrickSpec>,
    /// The table's columns at this version under their logical names: the Delta schema of the
    /// version (a file's footer only refines how a column it holds is encoded), or for a folder
    /// of Parquet files the first file's columns and its hive partitions.
    schema: arrow_schema::SchemaRef,
    /// The Delta schema of the version and its partition columns (`None` for a listing).
    delta: Option<schema::DeltaSchema>,
    /// Partition columns the files do not hold (hive folders, Delta partitions), typed as the
    /// Delta schema says (a listing's: Int64 where every value is an integer, else Utf8).
    partition_types: HashMap<String, arrow_schema::DataType>,
    /// The protocol of a Delta table (`None` for a folder of Parquet files).
    protocol: Option<Protocol>,
    /// How the files name the table's columns.
    mapping: ColumnMapping,
    files: FileList,
    store: Arc<dyn ObjectStore>,
    /// A remote table's store (`store` is it): counts, parts, the disk cache.
    remote: Option<Arc<voxlake_io::remote::RemoteStore>>,
    /// The footers read, the most recently used kept (`footer_cache`).
    footers: read::FooterCache,
    /// Small files' bytes between their footer's read and their row group's (`small`).
    small: read::SmallFiles,
    /// Whether a file has a deletion vector.
    has_deletes: bool,
}

/// What the snapshot is, without its store: a store's own `Debug` may print its credentials.
impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("location", &self.location)
            .field("version", &self.version)
            .field("files", &self.files.len())
            .field("sample", &self.columns.sample)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// The type of partition column `name` where the files do not hold it (the Delta schema's;
    /// a listing's Int64 when every value is an integer, else Utf8), once the sample columns
    /// were resolved.
    pub fn partition_type(&self, name: &str) -> Option<&arrow_schema::DataType> {
        self.partition_types.get(name)
    }
    /// The table's columns at this version, under their logical names (see
    /// [`SnapshotBuilder::build`](crate::SnapshotBuilder::build)): a column a file lacks reads as null there, a column a file
    /// holds in a narrower type reads widened.
    pub fn schema(&self) -> &arrow_schema::SchemaRef {
        &self.schema
    }

    /// The table's protocol (`None` for a folder of Parquet files).
    pub fn protocol(&self) -> Option<&Protocol> {
        self.protocol.as_ref()
    }

    /// How the table's files name its columns.
    pub fn column_mapping(&self) -> MappingMode {
        self.mapping.mode()
    }

    /// The name column `logical` has in the log's statistics and partition values.
    pub(crate) fn physical_name<'a>(&'a self, logical: &'a str) -> &'a str {
        self.mapping.physical(logical)
    }

    /// A file's Arrow schema (from its footer `meta`) with its columns under their logical
    /// names, in the file's order: look columns up here, never in the footer's own schema,
    /// which names them as the file does (parquet checks those names, so the footers keep
    /// them).
    pub fn logical_schema(&self, meta: &ArrowReaderMetadata) -> arrow_schema::SchemaRef {
        if self.mapping.is_identity() {
            return meta.schema().clone();
        }
        Arc::new(self.mapping.logical_schema(meta.schema()))
    }

    /// A decoded batch's columns under their logical names.
    pub(crate) fn logical_batch(
        &self,
        batch: arrow_array::RecordBatch,
    ) -> arrow_array::RecordBatch {
        self.mapping.logical_batch(batch)
    }

    /// The table location, for messages (query string removed).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The version read.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The first field's tensor spec (the one tensor of a one-tensor table): from the table
    /// configuration, or resolved from the files.
    pub fn spec(&self) -> &TensorSpec {
        self.columns.sample.first()
    }

    /// The sample's fields and their specs.
    pub fn sample(&self) -> &voxlake_format::SampleSpec {
        &self.columns.sample
    }

    /// The fields a voxlake table stores (its configuration's), whatever of them is read.
    pub fn stored_sample(&self) -> Option<&voxlake_format::SampleSpec> {
        self.stored.as_ref()
    }

    /// A bricked table's layout: each row a brick of a volume (docs/format.md, "Bricked
    /// volumes").
    pub fn bricks(&self) -> Option<&voxlake_format::volume::BrickSpec> {
        self.bricks.as_ref()
    }

    /// How samples are read: the tensor column and its encoding, the label and id columns.
    pub fn columns(&self) -> &SampleColumns {
        &self.columns
    }

    /// The active data files, in write order (modification time, then path).
    pub fn files(&self) -> &FileList {
        &self.files
    }

    /// Bytes of memory the snapshot holds for its files: the file list (see
    /// [`FileList::memory_size`]) and the footers kept (at most [`FOOTER_CACHE_BYTES`]). A
    /// remote table's store adds an index of its files by path, 4 bytes a file, on first read.
    pub fn memory_size(&self) -> usize {
        self.files.memory_size() + self.footers.bytes()
    }

    /// The path of file `index` (an index of [`files`](Self::files)), for messages.
    pub(crate) fn path_of(&self, index: usize) -> &str {
        self.files.at(index).path()
    }

    /// The table's object store (paths relative to the table root).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Serves this remote table's reads of its data files (footers, row groups) from `cache`,
    /// fetching and writing what it lacks: a later epoch, or another process of the node using
    /// the same folder, reads them from local disk. A local table is never cached (returned as
    /// it is).
    pub(crate) fn with_cache(self, cache: Arc<voxlake_io::cache::DiskCache>) -> Snapshot {
        match &self.remote {
            Some(remote) => remote.set_cache(cache),
            None => tracing::debug!(
                location = self.location.as_str(),
                "a local table is not cached"
            ),
        }
        self
    }

    /// The disk cache serving this snapshot's reads, with the table's identity in its keys.
    pub(crate) fn cache_and_identity(&self) -> Option<(&Arc<voxlake_io::cache::DiskCache>, &str)> {
        let remote = self.remote.as_ref()?;
        Some((remote.cache()?, remote.identity()))
    }

    /// The disk cache serving this snapshot's reads, if any.
    pub fn cache(&self) -> Option<&Arc<voxlake_io::cache::DiskCache>> {
        self.remote.as_ref().and_then(|r| r.cache())
    }

    /// Whether the table is in a remote store (read through one store that counts, splits
    /// and caches; see [`SnapshotBuilder::with_cache`](crate::SnapshotBuilder::with_cache)),
    /// not on a local filesystem.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Bytes of data files (and deletion vectors) fetched from a remote table's store so far,
    /// the cache's hits not included (0 for a local table).
    pub fn store_bytes_fetched(&self) -> u64 {
        if let Some(remote) = &self.remote {
            return remote.fetched();
        }
        0
    }

    /// Ranged requests made of a remote table's store for its data files so far (each part of
    /// a large read, each read asked again; 0 for a local table).
    pub fn store_requests(&self) -> u64 {
        self.remote.as_ref().map_or(0, |r| r.requests())
    }

    /// Reads of a remote table's store asked again because they stalled (see
    /// `voxlake_io::reask`; 0 for a local table).
    pub fn store_reads_reasked(&self) -> u64 {
        if let Some(remote) = &self.remote {
            return remote.reasked();
        }
        0
    }

    /// The snapshot with every file's row count: files whose add action recorded none get it
    /// from their footer (read concurrently; the footers kept as `FOOTER_CACHE_BYTES` allows).
    pub(crate) async fn load_row_counts(mut self) -> Result<Snapshot, TableError> {
        let missing: Vec<usize> = (0..self.files.len())
            .filter(|&i| self.files.at(i).rows().is_none())
            .collect();
        if missing.is_empty() {
            return Ok(self);
        }
        let this = &self;
        let counts: Vec<(usize, u64)> = futures::stream::iter(missing)
            .map(|i| async move {
                let meta = this.reader_metadata(i).await?;
                let rows = meta.metadata().file_metadata().num_rows().max(0) as u64;
                let deleted = this.files.at(i).deleted_rows();
                let live = rows
                    .checked_sub(deleted)
                    .ok_or_else(|| TableError::Corrupt {
                        location: this.location.clone(),
                        file: this.path_of(i).to_string(),
                        reason: format!(
                            "its deletion vector deletes {deleted} rows, the file has {rows}"
                        ),
                    })?;
                Ok::<_, TableError>((i, live))
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_collect()
            .await?;
        for (i, rows) in counts {
            self.files.set_rows(i, rows);
        }
        Ok(self)
    }

    /// Live rows of the version (every file's row count is known once a snapshot is made:
    /// from its add action, else its footer).
    pub fn num_rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows().unwrap_or(0)).sum()
    }

    /// Whether a file has a deletion vector.
    pub(crate) fn has_deletes(&self) -> bool {
        self.has_deletes
    }

    /// The error for a failed read of file `index`: a vanished file is named as such.
    pub(crate) fn file_error(&self, index: usize, source: ParquetError) -> TableError {
        let file = self.path_of(index).to_string();
        if let ParquetError::External(e) = &source
            && let Some(object_store::Error::NotFound { .. }) =
                e.downcast_ref::<object_store::Error>()
        {
            return TableError::MissingFile {
                location: self.location.clone(),
                file,
                version: self.version,
            };
        }
        TableError::Parquet {
            location: self.location.clone(),
            file,
            source,
        }
    }

    /// The error for a blocking task of file `index` that panicked or was cancelled.
    fn task_error(&self, stage: &str, index: usize, e: tokio::task::JoinError) -> TableError {
        let message = match e.try_into_panic() {
            Ok(payload) => voxlake_io::panic_message(payload.as_ref()),
            Err(e) => e.to_string(),
        };
        TableError::Panicked {
            location: self.location.clone(),
            stage: stage.to_string(),
            object: self.path_of(index).to_string(),
            message,
        }
    }

    pub(crate) fn reader(&self, index: usize) -> ObjectFileReader {
        let file = self.files.at(index);
        ObjectFileReader::new(self.store.clone(), file.object_path(), file.size())
    }

    /// File `index`, or an error naming the index and the file count.
    pub(crate) fn file(&self, index: usize) -> Result<DataFile<'_>, TableError> {
        self.files
            .get(index)
            .ok_or_else(|| TableError::Incompatible {
                location: self.location.clone(),
                reason: format!(
                    "no file {index}: version {} has {} data files",
                    self.version,
                    self.files.len()
                ),
            })
    }

    /// The footer of file `index` (one ranged GET of the tail; a small file's whole, see
    /// `small`), kept while it is among the most recently used ([`FOOTER_CACHE_BYTES`]).
    pub(crate) async fn reader_metadata(
        &self,
        index: usize,
    ) -> Result<ArrowReaderMetadata, TableError> {
        let file = self.file(index)?;
        let footer = self.footers.entry(index);
        let mut loaded = None;
        let meta = footer
            .plain
            .get_or_try_init(|| async {
                let metadata = match self.is_small(index) {
                    true => Arc::new(self.small_footer(index).await?),
                    false => self
                        .reader(index)
                        .get_metadata(None)
                        .await
                        .map_err(|e| self.file_error(index, e))?,
                };
                read::check_footer(&metadata, file.size(), file.records()).map_err(|reason| {
                    TableError::Corrupt {
                        location: self.location.clone(),
                        file: file.path().to_string(),
                        reason,
                    }
                })?;
                loaded = Some(metadata.memory_size());
                ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::default())
                    .map_err(|e| self.file_error(index, e))
            })
            .await
            .cloned()?;
        if let Some(bytes) = loaded {
            self.footers.loaded(index, &footer, bytes);
        }
        Ok(meta)
    }

    /// The footer of file `index` with its binary columns read as `BinaryView`: parquet then
    /// decodes PLAIN values as views into the fetched page instead of copying them out.
    pub(crate) async fn view_metadata(
        &self,
        index: usize,
    ) -> Result<ArrowReaderMetadata, TableError> {
        let plain = self.reader_metadata(index).await?;
        self.footers
            .entry(index)
            .view
            .get_or_try_init(|| async {
                let fields: Vec<arrow_schema::FieldRef> = plain
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| match f.data_type() {
                        arrow_schema::DataType::Binary | arrow_schema::DataType::LargeBinary => {
                            Arc::new(
                                f.as_ref()
                                    .clone()
                                    .with_data_type(arrow_schema::DataType::BinaryView),
                            )
                        }
                        _ => f.clone(),
                    })
                    .collect();
                let schema = Arc::new(arrow_schema::Schema::new_with_metadata(
                    fields,
                    plain.schema().metadata().clone(),
                ));
                ArrowReaderMetadata::try_new(
                    plain.metadata().clone(),
                    ArrowReaderOptions::new().with_schema(schema),
                )
                .map_err(|e| self.file_error(index, e))
            })
            .await
            .cloned()
    }
}
