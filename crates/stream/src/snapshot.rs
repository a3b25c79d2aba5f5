//! A pinned snapshot of a table: its data files (from the Delta log, or listed once where there
//! is no log), how its samples are read (its tensor spec), cached footers, and reads of files,
//! columns and row groups.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_select::concat::concat_batches;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use tokio::sync::OnceCell;
use voxlake_format::reader::ObjectFileReader;
use voxlake_format::sample::{ColumnHints, SampleColumns};
use voxlake_format::{CHECKSUM_COLUMN, ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN, TensorSpec};

use crate::error::{StreamError, redact};
use crate::location;

mod list_chunk;

/// Values decoded at once from a LIST tensor column (see `read_whole_row_group`).
const LIST_DECODE_BYTES: usize = 1 << 20;

/// Footers and small-column reads in flight at once.
pub const READ_CONCURRENCY: usize = 16;

/// One active data file, as the Delta log records it (or as listed).
#[derive(Debug, Clone)]
pub struct DataFile {
    /// Path relative to the table root (the add action's path).
    pub path: String,
    /// The path in the table's object store.
    pub object_path: Path,
    /// Size in bytes.
    pub size: u64,
    /// Rows, from the add action's statistics (`None` if the writer recorded none); under a
    /// filter, the rows it selects.
    pub rows: Option<u64>,
    /// Partition values: the add action's, or a listed file's hive `key=value` folders
    /// (`None`: null).
    pub partitions: Vec<(String, Option<String>)>,
    /// The add action's statistics (JSON), for filters.
    pub(crate) delta_stats: Option<String>,
}

/// A pinned snapshot of a table: a voxlake table, another Delta table, or a folder of Parquet
/// files (version 0; the files listed once at open).
#[derive(Debug)]
pub struct Snapshot {
    location: String,
    version: u64,
    columns: SampleColumns,
    /// Partition columns the files do not hold (hive folders, Delta partitions): Int64 where
    /// every value is an integer, else Utf8. Label and id may be read from them.
    partition_types: HashMap<String, arrow_schema::DataType>,
    selection: Option<crate::select::Selection>,
    files: Vec<DataFile>,
    store: Arc<dyn ObjectStore>,
    footers: Vec<OnceCell<ArrowReaderMetadata>>,
    view_footers: Vec<OnceCell<ArrowReaderMetadata>>,
}

impl Snapshot {
    /// Opens the table at `location` (a local path or URL) at `version`, or the latest.
    pub async fn open(
        location: &str,
        options: &HashMap<String, String>,
        version: Option<u64>,
    ) -> Result<Snapshot, StreamError> {
        Snapshot::open_with_store(location, options, version, None).await
    }

    /// [`open`](Self::open) through a store of the caller's: `root_store` has `/` at the root
    /// of the store that `location` names (e.g. a `LocalFileSystem::new()` wrapped in object
    /// store's `ThrottledStore`, or a store with a custom client).
    pub async fn open_with_store(
        location: &str,
        options: &HashMap<String, String>,
        version: Option<u64>,
        root_store: Option<Arc<dyn ObjectStore>>,
    ) -> Result<Snapshot, StreamError> {
        Snapshot::open_with(
            location,
            options,
            version,
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
    pub async fn open_with(
        location: &str,
        options: &HashMap<String, String>,
        version: Option<u64>,
        root_store: Option<Arc<dyn ObjectStore>>,
        hints: &ColumnHints,
    ) -> Result<Snapshot, StreamError> {
        location::register_handlers();
        let url = location::to_url(location, true)?;
        let display = redact(url.as_str());
        let err = |source| StreamError::Table {
            location: display.clone(),
            source: Box::new(source),
        };
        let options = location::storage_options(options);
        let shown: &str = &display;
        tracing::debug!(
            location = shown,
            credentials = location::credential_method(&url, &options),
            "opening table"
        );
        // Local tables read row groups into recycled buffers (see `local`).
        #[cfg(unix)]
        let root_store = root_store.or_else(|| {
            (url.scheme() == "file")
                .then(|| Arc::new(crate::local::MappedLocalStore::new()) as Arc<dyn ObjectStore>)
        });
        // The reachability probe runs beside the open, not before it: it costs no round trip,
        // and when nothing answers its error comes first and ends the open.
        let probe = async {
            match root_store {
                None => location::ensure_reachable(location, &options).await,
                Some(_) => Ok(()),
            }
        };
        let open = async {
            let mut builder = DeltaTableBuilder::from_url(url.clone())
                .map_err(err)?
                .with_storage_options(options.clone());
            if let Some(store) = root_store.clone() {
                builder = builder.with_storage_backend(store, url.clone());
            }
            if let Some(v) = version {
                builder = builder.with_version(v);
            }
            let mut table = builder.build().map_err(err)?;
            // Ask first: loading a missing table makes the kernel log an error.
            if !table.verify_deltatable_existence().await.map_err(err)? {
                // No log: a folder of Parquet files (listed once), whose only version is 0 (a
                // loader state pins it; the state's file-set hash tells listings apart).
                if let Some(v) = version.filter(|&v| v != 0) {
                    return Err(err(DeltaTableError::NotATable(format!(
                        "no _delta_log at this location (version {v} pins a Delta table)"
                    ))));
                }
                return Ok(Err(table.object_store()));
            }
            match version {
                Some(v) => table.load_version(v).await.map_err(err)?,
                None => table.load().await.map_err(err)?,
            }
            Ok(Ok(table))
        };
        let (table, ()) = futures::try_join!(open, probe)?;
        match table {
            Ok(table) => Snapshot::from_table_with(&table, display, hints).await,
            Err(store) => Snapshot::from_listing(store, display, hints).await,
        }
    }

    /// The snapshot of an already loaded table; `location` is used in messages.
    pub async fn from_table(table: &DeltaTable, location: String) -> Result<Snapshot, StreamError> {
        Snapshot::from_table_with(table, location, &ColumnHints::default()).await
    }

    /// [`from_table`](Self::from_table) reading samples as `hints` say.
    pub async fn from_table_with(
        table: &DeltaTable,
        location: String,
        hints: &ColumnHints,
    ) -> Result<Snapshot, StreamError> {
        let err = |source| StreamError::Table {
            location: location.clone(),
            source: Box::new(source),
        };
        let state = table.snapshot().map_err(err)?;
        let config = state.metadata().configuration().clone();
        let log_store = table.log_store();
        let views: Vec<_> = state
            .snapshot()
            .file_views(log_store.as_ref(), None)
            .try_collect()
            .await
            .map_err(err)?;
        let mut files: Vec<(i64, DataFile)> = views
            .iter()
            .map(|f| {
                let mut partitions: Vec<(String, Option<String>)> =
                    f.partition_values_map().into_iter().collect();
                partitions.sort();
                let file = DataFile {
                    path: f.path().to_string(),
                    object_path: f.object_store_path(),
                    size: f.size() as u64,
                    rows: f.num_records().map(|n| n as u64),
                    partitions,
                    delta_stats: f.stats(),
                };
                (f.modification_time(), file)
            })
            .collect();
        // The log's order is not stable across checkpoints: sort so plans are reproducible,
        // by write time first so that "table order" is the order the rows were written in.
        files.sort_by(|(ta, a), (tb, b)| ta.cmp(tb).then_with(|| a.path.cmp(&b.path)));
        let files: Vec<DataFile> = files.into_iter().map(|(_, f)| f).collect();
        Snapshot::new(location, state.version(), files, table.object_store())
            .resolve_columns(&config, hints)
            .await
    }

    /// The snapshot of a folder of Parquet files without a Delta log: every `.parquet` object
    /// under the store's root, listed once and sorted by path, skipping folders and files
    /// whose names start with `_` or `.` (`_delta_log`, `_SUCCESS`, `.crc` files). Version 0;
    /// the file set hash tells one listing from another.
    pub async fn from_listing(
        store: Arc<dyn ObjectStore>,
        location: String,
        hints: &ColumnHints,
    ) -> Result<Snapshot, StreamError> {
        let objects: Vec<object_store::ObjectMeta> =
            store
                .list(None)
                .try_collect()
                .await
                .map_err(|e| StreamError::Table {
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
                partitions: crate::select::hive_partitions(o.location.as_ref()),
                path: o.location.to_string(),
                object_path: o.location,
                size: o.size,
                rows: None,
                delta_stats: None,
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
            return Err(StreamError::Incompatible { location, reason });
        }
        Snapshot::new(location, 0, files, store)
            .resolve_columns(&HashMap::new(), hints)
            .await
    }

    fn new(
        location: String,
        version: u64,
        files: Vec<DataFile>,
        store: Arc<dyn ObjectStore>,
    ) -> Snapshot {
        let footers = files.iter().map(|_| OnceCell::new()).collect();
        let view_footers = files.iter().map(|_| OnceCell::new()).collect();
        Snapshot {
            location,
            version,
            // Replaced by `resolve_columns` before the snapshot is handed out.
            columns: SampleColumns {
                tensor: TENSOR_COLUMN.into(),
                encoding: voxlake_format::sample::TensorEncoding::Raw,
                spec: TensorSpec::new(Vec::new(), voxlake_format::DType::U8),
                label: None,
                id: None,
                native: true,
            },
            partition_types: HashMap::new(),
            selection: None,
            files,
            store,
            footers,
            view_footers,
        }
    }

    /// The snapshot of only the rows `filter` (one SQL boolean expression over the files'
    /// columns and partition values, e.g. `label = 1 AND region IN ('a', 'b')`) keeps: files
    /// and row groups that cannot match are skipped unread (partition values, Delta and footer
    /// statistics), the filter's columns of the rest read and decided row by row. Files without
    /// a selected row leave the snapshot; each file's row count is then its selected rows, and
    /// row groups read keep only those. Call it after [`with_row_counts`](Self::with_row_counts).
    pub async fn with_filter(mut self, filter: &str) -> Result<Snapshot, StreamError> {
        let parsed =
            crate::filter::Filter::parse(filter).map_err(|reason| StreamError::Incompatible {
                location: self.location.clone(),
                reason,
            })?;
        let mut selection = self.select(&parsed, filter).await?;
        let counts: Vec<u64> = (0..self.files.len())
            .map(|i| match selection.rows.get(i) {
                Some(groups) if !groups.is_empty() => self.selected_count(i, groups),
                _ => 0,
            })
            .collect();
        selection.stats.rows_selected = counts.iter().sum();
        let keep: Vec<bool> = counts.iter().map(|&n| n > 0).collect();
        let mut kept = keep.iter();
        let files = std::mem::take(&mut self.files);
        self.files = files
            .into_iter()
            .zip(&counts)
            .filter(|_| kept.next() == Some(&true))
            .map(|(f, &n)| DataFile { rows: Some(n), ..f })
            .collect();
        let pick = |cells: Vec<OnceCell<ArrowReaderMetadata>>| {
            cells
                .into_iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| c)
                .collect()
        };
        self.footers = pick(std::mem::take(&mut self.footers));
        self.view_footers = pick(std::mem::take(&mut self.view_footers));
        selection.rows = selection
            .rows
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(r, _)| r)
            .collect();
        tracing::debug!(
            location = self.location.as_str(),
            filter,
            stats = ?selection.stats,
            "filter applied"
        );
        self.selection = Some(selection);
        Ok(self)
    }

    /// Rows of file `index` the groups' selection keeps (its footer is cached by then).
    fn selected_count(&self, index: usize, groups: &[Option<Arc<[u32]>>]) -> u64 {
        let Some(meta) = self.footers[index].get() else {
            return 0;
        };
        groups
            .iter()
            .zip(meta.metadata().row_groups())
            .map(|(g, rg)| match g {
                Some(selected) => selected.len() as u64,
                None => rg.num_rows().max(0) as u64,
            })
            .sum()
    }

    /// The type of partition column `name` where the files do not hold it (Int64 when every
    /// value is an integer, else Utf8), once the sample columns were resolved.
    pub fn partition_type(&self, name: &str) -> Option<&arrow_schema::DataType> {
        self.partition_types.get(name)
    }

    /// The filter's text, if the snapshot was filtered.
    pub fn filter(&self) -> Option<&str> {
        self.selection.as_ref().map(|s| s.text.as_str())
    }

    /// What the filter skipped and kept (`None` without a filter).
    pub fn filter_stats(&self) -> Option<&crate::select::FilterStats> {
        self.selection.as_ref().map(|s| &s.stats)
    }

    /// The rows of row group `row_group` of file `index` the filter selects (ascending rows of
    /// the row group), or `None` when it keeps them all (or there is no filter).
    pub fn selected_rows(&self, index: usize, row_group: usize) -> Option<&Arc<[u32]>> {
        self.selection
            .as_ref()?
            .rows
            .get(index)?
            .get(row_group)?
            .as_ref()
    }

    /// Decides how samples are read. A voxlake table read as it is needs its configuration
    /// only; any other table is resolved from the first file's footer (and, for a BINARY
    /// tensor column, its first value: `np.save` bytes say their shape).
    async fn resolve_columns(
        mut self,
        config: &HashMap<String, String>,
        hints: &ColumnHints,
    ) -> Result<Snapshot, StreamError> {
        let incompatible = |e: voxlake_format::FormatError| StreamError::Incompatible {
            location: self.location.clone(),
            reason: e.to_string(),
        };
        let voxlake = config.contains_key(voxlake_format::FORMAT_VERSION_KEY);
        if voxlake && hints.is_empty() {
            let spec = TensorSpec::from_table_configuration(config).map_err(incompatible)?;
            self.columns = SampleColumns {
                spec,
                label: Some(LABEL_COLUMN.into()),
                id: Some(ID_COLUMN.into()),
                ..self.columns
            };
            return Ok(self);
        }
        if self.files.is_empty() {
            return Err(StreamError::Incompatible {
                location: self.location.clone(),
                reason: format!(
                    "version {} has no data files to learn the tensor column from",
                    self.version
                ),
            });
        }
        let meta = self.reader_metadata(0).await?;
        let file_schema = meta.schema().clone();
        // Partition columns join the schema the columns are resolved against.
        let mut keys: Vec<&str> = self
            .files
            .iter()
            .flat_map(|f| f.partitions.iter().map(|(k, _)| k.as_str()))
            .filter(|k| file_schema.field_with_name(k).is_err())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let partition_types: HashMap<String, arrow_schema::DataType> = keys
            .into_iter()
            .map(|key| {
                let integers = self.files.iter().all(|f| {
                    f.partitions
                        .iter()
                        .filter(|(k, _)| k == key)
                        .all(|(_, v)| v.as_deref().is_none_or(|v| v.parse::<i64>().is_ok()))
                });
                let t = if integers {
                    arrow_schema::DataType::Int64
                } else {
                    arrow_schema::DataType::Utf8
                };
                (key.to_string(), t)
            })
            .collect();
        let mut fields: Vec<arrow_schema::FieldRef> =
            file_schema.fields().iter().cloned().collect();
        let mut partition_names: Vec<&String> = partition_types.keys().collect();
        partition_names.sort();
        for name in partition_names {
            fields.push(Arc::new(arrow_schema::Field::new(
                name.as_str(),
                partition_types[name].clone(),
                true,
            )));
        }
        let schema = arrow_schema::Schema::new(fields);
        self.partition_types = partition_types;
        let tensor = SampleColumns::tensor_field(&schema, hints).map_err(incompatible)?;
        let first = match tensor.data_type() {
            arrow_schema::DataType::Binary
            | arrow_schema::DataType::LargeBinary
            | arrow_schema::DataType::BinaryView
                if !voxlake =>
            {
                self.first_value(tensor.name()).await?
            }
            _ => None,
        };
        let columns = SampleColumns::resolve(&schema, config, hints, first.as_deref())
            .map_err(incompatible)?;
        tracing::debug!(
            location = self.location.as_str(),
            tensor = columns.tensor.as_str(),
            encoding = columns.encoding.describe(),
            spec = %columns.spec,
            "resolved the sample columns"
        );
        self.columns = columns;
        Ok(self)
    }

    /// The first value of binary column `column` of file 0 (one row of its first row group).
    async fn first_value(&self, column: &str) -> Result<Option<Vec<u8>>, StreamError> {
        use arrow_array::Array;
        use arrow_array::cast::AsArray;
        let perr = |e| self.file_error(0, e);
        let meta = self.reader_metadata(0).await?;
        if meta.metadata().num_row_groups() == 0 {
            return Ok(None);
        }
        let mask =
            ProjectionMask::columns(meta.metadata().file_metadata().schema_descr(), [column]);
        let reader = self.reader(0).with_metadata(meta.metadata().clone());
        let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
            .with_projection(mask)
            .with_row_groups(vec![0])
            .with_limit(1)
            .with_batch_size(1)
            .build()
            .map_err(perr)?;
        let Some(batch) = stream.try_next().await.map_err(perr)? else {
            return Ok(None);
        };
        let Some(array) = batch
            .columns()
            .first()
            .filter(|a| !a.is_empty() && a.is_valid(0))
        else {
            return Ok(None);
        };
        Ok(match array.data_type() {
            arrow_schema::DataType::Binary => Some(array.as_binary::<i32>().value(0).to_vec()),
            arrow_schema::DataType::LargeBinary => Some(array.as_binary::<i64>().value(0).to_vec()),
            arrow_schema::DataType::BinaryView => Some(array.as_binary_view().value(0).to_vec()),
            _ => None,
        })
    }

    /// The table location, for messages (query string removed).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The pinned version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The tensor spec: from the table configuration, or resolved from the files.
    pub fn spec(&self) -> &TensorSpec {
        &self.columns.spec
    }

    /// How samples are read: the tensor column and its encoding, the label and id columns.
    pub fn columns(&self) -> &SampleColumns {
        &self.columns
    }

    /// The active data files, in write order (modification time, then path).
    pub fn files(&self) -> &[DataFile] {
        &self.files
    }

    /// The table's object store (paths relative to the table root).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// A hash of the file set, in plan order: `fnv1a64:` and 16 hex digits over each file's
    /// path and size. Two snapshots with the same hash plan the same epochs.
    pub fn file_set_hash(&self) -> String {
        let mut listing: String = self
            .files
            .iter()
            .map(|f| format!("{}\0{}\n", f.path, f.size))
            .collect();
        // Another filter plans other rows.
        if let Some(filter) = self.filter() {
            listing.push_str(&format!("filter\0{filter}\n"));
        }
        format!("fnv1a64:{:016x}", location::stable_hash(&listing))
    }

    /// The snapshot with every file's row count: files whose add action recorded none get it
    /// from their footer (read concurrently; the footers stay cached).
    pub async fn with_row_counts(mut self) -> Result<Snapshot, StreamError> {
        let missing: Vec<usize> = (0..self.files.len())
            .filter(|&i| self.files[i].rows.is_none())
            .collect();
        if missing.is_empty() {
            return Ok(self);
        }
        let this = &self;
        let counts: Vec<(usize, u64)> = futures::stream::iter(missing)
            .map(|i| async move {
                let meta = this.reader_metadata(i).await?;
                Ok::<_, StreamError>((i, meta.metadata().file_metadata().num_rows().max(0) as u64))
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_collect()
            .await?;
        for (i, rows) in counts {
            self.files[i].rows = Some(rows);
        }
        Ok(self)
    }

    /// Total rows, if every add action recorded its row count.
    pub fn num_rows(&self) -> Option<u64> {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// The error for a failed read of file `index`: a vanished file is named as such.
    pub fn file_error(&self, index: usize, source: ParquetError) -> StreamError {
        let file = self.files[index].path.clone();
        if let ParquetError::External(e) = &source
            && let Some(object_store::Error::NotFound { .. }) =
                e.downcast_ref::<object_store::Error>()
        {
            return StreamError::MissingFile {
                location: self.location.clone(),
                file,
                version: self.version,
            };
        }
        StreamError::Parquet {
            location: self.location.clone(),
            file,
            source,
        }
    }

    /// The error for a blocking task of file `index` that panicked or was cancelled.
    fn task_error(&self, stage: &str, index: usize, e: tokio::task::JoinError) -> StreamError {
        let message = match e.try_into_panic() {
            Ok(payload) => crate::error::panic_message(payload.as_ref()),
            Err(e) => e.to_string(),
        };
        StreamError::Panicked {
            location: self.location.clone(),
            stage: stage.to_string(),
            object: self.files[index].path.clone(),
            message,
        }
    }

    pub(crate) fn reader(&self, index: usize) -> ObjectFileReader {
        let file = &self.files[index];
        ObjectFileReader::new(self.store.clone(), file.object_path.clone(), file.size)
    }

    /// File `index`, or an error naming the index and the file count.
    pub fn file(&self, index: usize) -> Result<&DataFile, StreamError> {
        self.files
            .get(index)
            .ok_or_else(|| StreamError::Incompatible {
                location: self.location.clone(),
                reason: format!(
                    "no file {index}: version {} has {} data files",
                    self.version,
                    self.files.len()
                ),
            })
    }

    /// The footer of file `index`, read once (one ranged GET of the tail) and cached.
    pub async fn reader_metadata(&self, index: usize) -> Result<ArrowReaderMetadata, StreamError> {
        self.file(index)?;
        self.footers[index]
            .get_or_try_init(|| async {
                let metadata = self
                    .reader(index)
                    .get_metadata(None)
                    .await
                    .map_err(|e| self.file_error(index, e))?;
                ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::default())
                    .map_err(|e| self.file_error(index, e))
            })
            .await
            .cloned()
    }

    /// The footer of file `index` with its binary columns read as `BinaryView`: parquet then
    /// decodes PLAIN values as views into the fetched page instead of copying them out.
    pub async fn view_metadata(&self, index: usize) -> Result<ArrowReaderMetadata, StreamError> {
        let plain = self.reader_metadata(index).await?;
        self.view_footers[index]
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

    /// The Parquet metadata of file `index` (cached).
    pub async fn footer(&self, index: usize) -> Result<Arc<ParquetMetaData>, StreamError> {
        Ok(self.reader_metadata(index).await?.metadata().clone())
    }

    /// A projection of `columns` for file `index`'s schema; unknown columns are an error, except
    /// the checksum column, which files written before it lack.
    pub fn projection(
        &self,
        metadata: &ArrowReaderMetadata,
        columns: &[String],
    ) -> Result<ProjectionMask, StreamError> {
        let schema = metadata.schema();
        let mut roots = Vec::with_capacity(columns.len());
        for name in columns {
            // The checksum column is read where the file has one (older tables have none).
            if name == CHECKSUM_COLUMN && schema.index_of(name).is_err() {
                continue;
            }
            // voxlake's names map to the table's columns; an id the table lacks is made, and
            // partition columns come from the file's path or add action.
            let Some(name) = self.columns.source_of(name) else {
                continue;
            };
            if self.partition_types.contains_key(name) && schema.index_of(name).is_err() {
                continue;
            }
            let index = schema
                .index_of(name)
                .map_err(|_| StreamError::Incompatible {
                    location: self.location.clone(),
                    reason: format!(
                        "no column '{name}' (the table has {:?})",
                        schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
                    ),
                })?;
            roots.push(index);
        }
        Ok(ProjectionMask::roots(
            metadata.metadata().file_metadata().schema_descr(),
            roots,
        ))
    }

    /// Reads one row group of file `index`: the projected column chunks are fetched with one
    /// coalesced `get_ranges`, and decoded on the blocking pool. Binary columns come back as
    /// `BinaryView` arrays that point into the fetched pages (no copy of the tensors).
    pub async fn read_row_group(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
    ) -> Result<RecordBatch, StreamError> {
        Ok(self
            .read_row_group_timed(index, row_group, projection)
            .await?
            .0)
    }

    /// [`read_row_group`](Self::read_row_group), also returning where the time went.
    pub async fn read_row_group_timed(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
    ) -> Result<(RecordBatch, ReadTimings), StreamError> {
        self.read_row_group_hooked(
            index,
            row_group,
            projection,
            &crate::hooks::Hooks::default(),
        )
        .await
    }

    /// [`read_row_group_timed`](Self::read_row_group_timed) with a test's fault hooks: the row
    /// group's rows the filter selects (all without one), copied out of the decoded pages when
    /// it keeps only some (on the blocking pool).
    pub(crate) async fn read_row_group_hooked(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
        hooks: &crate::hooks::Hooks,
    ) -> Result<(RecordBatch, ReadTimings), StreamError> {
        let (batch, timings) = self
            .read_whole_row_group(index, row_group, projection, hooks)
            .await?;
        let Some(rows) = self.selected_rows(index, row_group).cloned() else {
            return Ok((batch, timings));
        };
        let selected = tokio::task::spawn_blocking(move || {
            let indices: Vec<u64> = rows.iter().map(|&r| u64::from(r)).collect();
            crate::group::copy_rows(&batch, &indices)
        })
        .await
        .map_err(|e| self.task_error("decode", index, e))?
        .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))?;
        Ok((selected, timings))
    }

    /// Every row of one row group, decoded, verified and in voxlake's layout.
    async fn read_whole_row_group(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
        hooks: &crate::hooks::Hooks,
    ) -> Result<(RecordBatch, ReadTimings), StreamError> {
        let metadata = self.view_metadata(index).await?;
        // A LIST tensor column straight from its pages (`list_chunk`), unless it holds a null:
        // then the Arrow path below names the row.
        if let Some(leaf) = self.list_leaf(&metadata, &projection)
            && let Some(read) = self
                .read_list_row_group(index, row_group, &metadata, &projection, leaf, hooks)
                .await?
        {
            return Ok(read);
        }
        let rows = metadata.metadata().row_group(row_group).num_rows().max(1) as usize;
        // LIST columns decode a repetition and a definition level per value: in batches of
        // about 1 MiB of values the levels stay in cache (decode time halved on the reference
        // cubes, docs/benchmarks.md); the batches are normalized to views and joined without
        // copying the values.
        let batch_rows = match self.columns.encoding {
            voxlake_format::sample::TensorEncoding::List
            | voxlake_format::sample::TensorEncoding::FixedSizeList => {
                (LIST_DECODE_BYTES / self.spec().nbytes().max(1)).clamp(1, rows)
            }
            _ => rows,
        };
        let mut timings = ReadTimings::default();
        let batches = self
            .decode_projected(
                index,
                row_group,
                &metadata,
                projection,
                batch_rows,
                hooks,
                &mut timings,
            )
            .await?;
        if batches.is_empty() {
            return Err(StreamError::Internal(format!(
                "file {}: row group {row_group} decoded to nothing",
                self.files[index].path
            )));
        }
        if !self.columns.native {
            return Ok((
                self.normalize(index, row_group, &metadata, batches).await?,
                timings,
            ));
        }
        let batch = self.concat(index, batches)?;
        if batch.column_by_name(CHECKSUM_COLUMN).is_some() {
            let (verified, mismatch) = tokio::task::spawn_blocking(move || {
                let mismatch = verify_checksums(&batch);
                (batch, mismatch)
            })
            .await
            .map_err(|e| self.task_error("verify", index, e))?;
            if let Some(reason) = mismatch {
                return Err(StreamError::Corrupt {
                    location: self.location.clone(),
                    file: self.files[index].path.clone(),
                    reason: format!("row group {row_group}, {reason}"),
                });
            }
            return Ok((verified, timings));
        }
        Ok((batch, timings))
    }

    /// Row group `row_group` of file `index`, the columns of `projection` decoded in batches
    /// of `batch_rows` (on the blocking pool), fetching what the decoder asks for.
    #[allow(clippy::too_many_arguments)]
    async fn decode_projected(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        projection: ProjectionMask,
        batch_rows: usize,
        hooks: &crate::hooks::Hooks,
        timings: &mut ReadTimings,
    ) -> Result<Vec<RecordBatch>, StreamError> {
        let mut decoder = ParquetPushDecoderBuilder::new_with_metadata(metadata.clone())
            .with_row_groups(vec![row_group])
            .with_projection(projection)
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| self.file_error(index, e))?;
        let mut batches = Vec::new();
        let path = &self.files[index].path;
        loop {
            let hooks = hooks.clone();
            let object = path.clone();
            let (back, step) = tokio::task::spawn_blocking(move || {
                let start = Instant::now();
                if let Err(e) = hooks.check(crate::hooks::Stage::Decode, &object) {
                    return (decoder, Err(StreamError::Internal(e)));
                }
                let step = decode_until_data_needed(&mut decoder);
                (decoder, Ok(step.map(|s| (s, start.elapsed()))))
            })
            .await
            .map_err(|e| self.task_error("decode", index, e))?;
            decoder = back;
            let ((decoded, needs), took) = step?.map_err(|e| self.file_error(index, e))?;
            timings.decode += took;
            batches.extend(decoded);
            let Some(ranges) = needs else { break };
            let start = Instant::now();
            let data = self
                .reader(index)
                .get_byte_ranges(ranges.clone())
                .await
                .map_err(|e| self.file_error(index, e))?;
            timings.fetch += start.elapsed();
            timings.bytes += data.iter().map(|d| d.len() as u64).sum::<u64>();
            decoder
                .push_ranges(ranges, data)
                .map_err(|e| self.file_error(index, e))?;
        }
        Ok(batches)
    }

    /// The decoded batches of one row group as one.
    fn concat(&self, index: usize, batches: Vec<RecordBatch>) -> Result<RecordBatch, StreamError> {
        match batches.as_slice() {
            [only] => Ok(only.clone()),
            [first, ..] => concat_batches(&first.schema(), &batches)
                .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string()))),
            [] => Ok(RecordBatch::new_empty(Arc::new(
                arrow_schema::Schema::empty(),
            ))),
        }
    }

    /// The decoded batches of a row group of a table that is not voxlake's, in voxlake's
    /// layout, as one (on the blocking pool: views are joined, values not copied); a row that
    /// does not decode is named by file, row group and row.
    async fn normalize(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        batches: Vec<RecordBatch>,
    ) -> Result<RecordBatch, StreamError> {
        let first_row: u64 = metadata.metadata().row_groups()[..row_group]
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .sum();
        let columns = self.columns.clone();
        let path = self.files[index].path.clone();
        let named = path.clone();
        let batches = batches
            .into_iter()
            .map(|b| self.with_partition_columns(index, b))
            .collect::<Result<Vec<_>, _>>()?;
        let normalized = tokio::task::spawn_blocking(move || {
            let mut at = first_row;
            let mut out = Vec::with_capacity(batches.len());
            for batch in &batches {
                let start = at;
                let one = columns
                    .normalize(batch, |row| format!("{named}#{}", start + row as u64))
                    .map_err(|e| (start + e.row as u64, e.reason))?;
                at += batch.num_rows() as u64;
                out.push(one);
            }
            Ok::<_, (u64, String)>(out)
        })
        .await
        .map_err(|e| self.task_error("decode", index, e))?;
        let normalized = normalized.map_err(|(row, reason)| StreamError::BadRow {
            location: self.location.clone(),
            file: path,
            row_group,
            row,
            reason,
        })?;
        self.concat(index, normalized)
    }

    /// `batch` of file `index` with the partition columns the label or id are read from, as
    /// constant columns of the file's values.
    fn with_partition_columns(
        &self,
        index: usize,
        batch: RecordBatch,
    ) -> Result<RecordBatch, StreamError> {
        let wanted: Vec<&String> = [&self.columns.label, &self.columns.id]
            .into_iter()
            .flatten()
            .filter(|c| self.partition_types.contains_key(*c) && batch.column_by_name(c).is_none())
            .collect();
        if wanted.is_empty() {
            return Ok(batch);
        }
        let rows = batch.num_rows();
        let schema = batch.schema();
        let mut fields: Vec<arrow_schema::FieldRef> = schema.fields().iter().cloned().collect();
        let mut arrays = batch.columns().to_vec();
        let file = &self.files[index];
        for name in wanted {
            let value = file
                .partitions
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.clone());
            let array: arrow_array::ArrayRef =
                match self.partition_types[name] {
                    arrow_schema::DataType::Int64 => Arc::new(arrow_array::Int64Array::from(vec![
                    value.and_then(|v| v.parse::<i64>().ok());
                    rows
                ])),
                    _ => Arc::new(arrow_array::StringArray::from(vec![value; rows])),
                };
            fields.push(Arc::new(arrow_schema::Field::new(
                name.as_str(),
                array.data_type().clone(),
                true,
            )));
            arrays.push(array);
        }
        RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), arrays)
            .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))
    }

    /// Streams every record batch of file `index`: only `columns` (all if `None`),
    /// `batch_rows` rows at a time.
    pub async fn read_file(
        &self,
        index: usize,
        columns: Option<&[&str]>,
        batch_rows: usize,
    ) -> Result<Vec<RecordBatch>, StreamError> {
        let perr = |e| self.file_error(index, e);
        let metadata = self.reader_metadata(index).await?;
        let reader = self
            .reader(index)
            .with_metadata(metadata.metadata().clone());
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata);
        let builder = match columns {
            Some(columns) => {
                let mask =
                    ProjectionMask::columns(builder.parquet_schema(), columns.iter().copied());
                builder.with_projection(mask)
            }
            None => builder,
        };
        let stream = builder.with_batch_size(batch_rows).build().map_err(perr)?;
        stream.try_collect().await.map_err(perr)
    }

    /// Reads one column of every file, [`READ_CONCURRENCY`] files at a time, and hands each
    /// file's batches to `f` in file order.
    pub async fn scan_column<E: From<StreamError>>(
        &self,
        column: &str,
        mut f: impl FnMut(&DataFile, Vec<RecordBatch>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut reads = futures::stream::iter(0..self.files.len())
            .map(|index| async move {
                let batches = self.read_file(index, Some(&[column]), 8192).await?;
                Ok::<_, StreamError>((index, batches))
            })
            .buffered(READ_CONCURRENCY);
        while let Some(result) = reads.next().await {
            let (index, batches) = result?;
            f(&self.files[index], batches)?;
        }
        Ok(())
    }
}

/// Where the time of one row-group read went.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadTimings {
    /// Waiting for the store.
    pub fetch: Duration,
    /// Decoding on the blocking pool.
    pub decode: Duration,
    /// Bytes fetched.
    pub bytes: u64,
}

type Decoded = (Vec<RecordBatch>, Option<Vec<Range<u64>>>);

/// The first row of `batch` that does not match its recorded checksum, described (also when
/// the columns it covers are not there to check: the projection brings them with it).
fn verify_checksums(batch: &RecordBatch) -> Option<String> {
    use arrow_array::{Array, BinaryArray, BinaryViewArray, Int64Array, StringArray};
    let column = |name: &str| batch.column_by_name(name);
    let sums = column(CHECKSUM_COLUMN)?
        .as_any()
        .downcast_ref::<Int64Array>();
    let ids = column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
    let labels =
        column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
    let (Some(sums), Some(ids), Some(labels), Some(tensors)) =
        (sums, ids, labels, column(TENSOR_COLUMN))
    else {
        return Some(format!(
            "{CHECKSUM_COLUMN} cannot be checked: {ID_COLUMN} (Utf8), {LABEL_COLUMN} (Int64), {TENSOR_COLUMN} and {CHECKSUM_COLUMN} (Int64) must all be read"
        ));
    };
    let tensor = |i: usize| -> &[u8] {
        if let Some(views) = tensors.as_any().downcast_ref::<BinaryViewArray>() {
            views.value(i)
        } else if let Some(plain) = tensors.as_any().downcast_ref::<BinaryArray>() {
            plain.value(i)
        } else {
            &[]
        }
    };
    (0..batch.num_rows()).find_map(|i| {
        if sums.is_null(i) || ids.is_null(i) {
            return None;
        }
        let label = (!labels.is_null(i)).then(|| labels.value(i));
        let (want, got) = (
            sums.value(i),
            voxlake_format::row_checksum(ids.value(i), label, tensor(i)),
        );
        (want != got).then(|| {
            format!(
                "row {i} ({}): its CRC-32 is {got:08x}, the table recorded {want:08x} (corrupt data)",
                ids.value(i)
            )
        })
    })
}

/// Decodes what the pushed data allows; returns the batches and the ranges still needed.
fn decode_until_data_needed(decoder: &mut ParquetPushDecoder) -> Result<Decoded, ParquetError> {
    let mut batches = Vec::new();
    loop {
        match decoder.try_decode()? {
            DecodeResult::Data(batch) => batches.push(batch),
            DecodeResult::NeedsData(ranges) => return Ok((batches, Some(ranges))),
            DecodeResult::Finished => return Ok((batches, None)),
        }
    }
}
