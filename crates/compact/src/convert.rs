//! `.npy` objects → rows of the table.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use bytes::Bytes;
use deltalake::kernel::Action;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::DeltaWriter;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde::Serialize;
use voxlake_format::npy::NpyArray;
use voxlake_format::{Casting, ID_COLUMN, TensorSpec};

use crate::error::CompactError;
use crate::infer;
use crate::labels::Labels;
use crate::table::{Table, writer_for};
use crate::{Compactor, OnError, Progress};
use voxlake_stream::location::{self, stable_hash};

/// What a conversion did.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertSummary {
    /// Source objects converted by this run.
    pub files: usize,
    /// Rows added to the table (equals `files`).
    pub rows: usize,
    /// Bytes read from the source.
    pub bytes_read: u64,
    /// Bytes of Parquet written and committed.
    pub bytes_written: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// Table version after the run.
    pub version: u64,
    /// Objects skipped with `OnError::Skip`, with the reason.
    pub skipped: Vec<Skipped>,
    /// Source objects (of this shard) that were already in the table.
    pub already_present: usize,
    /// Keys of the labels file that name no `.npy` object of the source (all shards).
    pub labels_unmatched: usize,
    /// Parquet files added.
    pub parquet_files: usize,
    /// Commits made.
    pub commits: usize,
    /// The tensor spec of the table.
    pub tensor: String,
}

/// A skipped source object.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// Key relative to the source prefix.
    pub key: String,
    /// Why it was skipped.
    pub reason: String,
}

/// One source object to convert.
#[derive(Debug, Clone)]
struct SourceObject {
    key: String,
    location: Path,
    size: u64,
    /// The object's bytes when they were already read (to settle a new table's spec).
    fetched: Option<Bytes>,
}

/// A decoded sample ready for the table.
pub(crate) struct Row {
    pub key: String,
    pub label: Option<i64>,
    pub tensor: Bytes,
    /// CRC-32 of the row, computed where the tensor was made (on the blocking pool when
    /// converted).
    pub checksum: i64,
    pub bytes_read: u64,
}

impl Compactor {
    pub(crate) async fn run_convert(&self, source: &str) -> Result<ConvertSummary, CompactError> {
        if !self.hints.is_empty() {
            return self.run_convert_table(source).await;
        }
        let start = Instant::now();
        let options = location::storage_options(&self.storage_options);
        let src = location::open_store(source, true, &options)?;
        location::ensure_reachable(source, &options).await?;
        let labels = match &self.labels {
            Some(l) => Some(Arc::new(read_labels(l, &options).await?)),
            None => None,
        };

        // The listing, sorted, this shard's share.
        let mut objects: Vec<SourceObject> = src
            .store
            .list(Some(&src.prefix))
            .map_ok(|meta| {
                let key = meta
                    .location
                    .prefix_match(&src.prefix)
                    .map(|parts| {
                        parts
                            .map(|p| p.as_ref().to_string())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .unwrap_or_else(|| meta.location.to_string());
                SourceObject {
                    key,
                    location: meta.location,
                    size: meta.size,
                    fetched: None,
                }
            })
            .try_collect()
            .await
            .map_err(|e| CompactError::Source {
                location: src.display.clone(),
                source: e,
            })?;
        // No `.npy` objects but Parquet files (or a Delta log): a table to rewrite.
        let is_table =
            |o: &SourceObject| o.key.ends_with(".parquet") || o.key.starts_with("_delta_log/");
        if !objects.iter().any(|o| o.key.ends_with(".npy")) && objects.iter().any(is_table) {
            return self.run_convert_table(source).await;
        }
        objects.retain(|o| o.key.ends_with(".npy"));
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        // Labels for objects the source does not hold: a wrong prefix or a stale file.
        let labels_unmatched = match &labels {
            Some(labels) => {
                let keys: HashSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
                let unmatched = labels.unmatched(&keys);
                if !unmatched.is_empty() {
                    tracing::warn!(
                        count = unmatched.len(),
                        labels = labels.location(),
                        examples = ?&unmatched[..unmatched.len().min(5)],
                        "labels name objects the source does not hold"
                    );
                }
                unmatched.len()
            }
            None => 0,
        };
        if let Some((index, count)) = self.shard {
            objects.retain(|o| stable_hash(&o.key) % u64::from(count) == u64::from(index));
        }

        let table_url = location::table_url(&self.table)?;
        let table_display = crate::table::redact_url(&table_url);
        let existing = Table::open(&table_url, &table_display, &options).await?;

        // Only what the table does not hold yet: this makes re-runs exactly-once.
        let mut already_present = 0;
        if let Some(table) = &existing {
            let present = read_ids(table).await?;
            let before = objects.len();
            objects.retain(|o| !present.contains(&o.key));
            already_present = before - objects.len();
        }
        if objects.is_empty() && existing.is_none() {
            return Err(CompactError::EmptySource {
                location: src.display.clone(),
                detail: self
                    .shard
                    .map(|(i, n)| format!(" for shard {i}/{n}"))
                    .unwrap_or_default(),
            });
        }
        tracing::info!(
            to_convert = objects.len(),
            already_present,
            source = %src.display,
            table = %table_display,
            "listed source"
        );

        let mut skipped = Vec::new();
        let (table, spec) = match existing {
            Some(table) => {
                let spec = table.spec()?;
                if let Some(dtype) = self.dtype
                    && dtype != spec.dtype()
                {
                    return Err(CompactError::Incompatible {
                        location: table_display,
                        reason: format!("holds {} tensors, --dtype asks for {dtype}", spec.dtype()),
                    });
                }
                (table, spec)
            }
            None => {
                let spec = self.infer_spec(&src, &mut objects, &mut skipped).await?;
                let table = Table::create(&table_url, &table_display, &options, &spec).await?;
                (table, spec)
            }
        };
        let mut table = table;
        let mut summary = ConvertSummary {
            files: 0,
            rows: 0,
            bytes_read: 0,
            bytes_written: 0,
            seconds: 0.0,
            version: table.version(),
            skipped,
            already_present,
            labels_unmatched,
            parquet_files: 0,
            commits: 0,
            tensor: spec.to_string(),
        };
        let total = objects.len();
        self.report(&summary, total);

        let casting = if self.dtype.is_some() {
            Casting::SameKind
        } else {
            Casting::Safe
        };
        let spec = Arc::new(spec);
        let spec_for_reads = spec.clone();
        let store = src.store.clone();
        let src_display: Arc<str> = src.display.trim_end_matches('/').into();
        // Reading and decoding run in their own task, so they go on while the writer waits
        // on the store.
        let concurrency = self.concurrency.max(1);
        let reads = futures::stream::iter(objects)
            .map(move |object| {
                let store = store.clone();
                let spec = spec_for_reads.clone();
                let labels = labels.clone();
                let src_display = src_display.clone();
                async move {
                    let mut object = object;
                    let key = object.key.clone();
                    let bytes = match object.fetched.take() {
                        Some(bytes) => Ok(bytes),
                        None => match store.get(&object.location).await {
                            Ok(r) => r.bytes().await,
                            Err(e) => Err(e),
                        },
                    }
                    .map_err(|e| CompactError::Source {
                        location: format!("{src_display}/{key}"),
                        source: e,
                    });
                    let bytes = match bytes {
                        Ok(b) => b,
                        Err(e) => return (key, Err(e)),
                    };
                    let ready = NpyArray::parse(&bytes).is_ok_and(|a| a.is_le_c(spec.dtype()));
                    let decoded = if ready {
                        // Nothing to convert: a slice of the download.
                        decode(object, bytes, &spec, casting, labels.as_deref())
                    } else {
                        // Conversion is CPU work: keep it off the I/O threads.
                        tokio::task::spawn_blocking(move || {
                            decode(object, bytes, &spec, casting, labels.as_deref())
                        })
                        .await
                        .unwrap_or_else(|e| Err(CompactError::Internal(e.to_string())))
                    };
                    (key, decoded)
                }
            })
            .buffered(concurrency);
        let mut rows = voxlake_stream::spawn_ahead(
            reads.map(Ok::<_, CompactError>).boxed(),
            concurrency,
            |panic| CompactError::Internal(format!("reading the source panicked: {panic}")),
        );

        let mut sink = self.row_sink(&table, &spec)?;
        let result: Result<(), CompactError> = async {
            while let Some(read) = rows.next().await {
                let (key, decoded) = read?;
                match decoded {
                    Ok(row) => {
                        self.sink_row(&mut sink, row, &mut table, &mut summary)
                            .await?
                    }
                    Err(e) if self.on_error == OnError::Skip => {
                        tracing::warn!(%key, error = %e, "skipping");
                        summary.skipped.push(Skipped {
                            key,
                            reason: e.to_string(),
                        });
                    }
                    Err(e) => return Err(e),
                }
                self.report_progress(&summary, &sink.window, total);
            }
            Ok(())
        }
        .await;
        drop(rows);
        self.finish_sink(sink, result, &mut table, &mut summary)
            .await?;
        Ok(self.summarized(summary, &table, start, total))
    }

    /// The summary of a finished conversion, reported.
    pub(crate) fn summarized(
        &self,
        mut summary: ConvertSummary,
        table: &Table,
        start: Instant,
        total: usize,
    ) -> ConvertSummary {
        summary.version = table.version();
        summary.seconds = start.elapsed().as_secs_f64();
        self.report(&summary, total);
        summary
    }

    /// Flushes the writer's files and commits them in one Delta version.
    pub(crate) async fn commit(
        &self,
        writer: &mut deltalake::writer::RecordBatchWriter,
        table: &mut Table,
        window: &mut Window,
        summary: &mut ConvertSummary,
    ) -> Result<(), CompactError> {
        let adds = writer.flush().await.map_err(|e| table.error(e))?;
        summary.parquet_files += adds.len();
        summary.bytes_written += adds.iter().map(|a| a.size as u64).sum::<u64>();
        let actions = adds.into_iter().map(Action::Add).collect();
        let operation = DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: None,
            predicate: None,
        };
        let version = table.commit(actions, operation, "convert", true).await?;
        summary.files += window.files;
        summary.rows += window.files;
        summary.bytes_read += window.bytes_read;
        summary.commits += 1;
        summary.version = version;
        tracing::info!(version, files = window.files, "committed");
        *window = Window::default();
        Ok(())
    }

    /// Reads objects from the front of the list until one decodes, and takes its shape and
    /// dtype (or `--dtype`) as the new table's spec.
    async fn infer_spec(
        &self,
        src: &location::Location,
        objects: &mut Vec<SourceObject>,
        skipped: &mut Vec<Skipped>,
    ) -> Result<TensorSpec, CompactError> {
        let wanted = (self.shape.as_deref(), self.dtype);
        let mut samples = Vec::new();
        let mut next = 0;
        // Both given: no object decides anything.
        let enough = if matches!(wanted, (Some(_), Some(_))) {
            0
        } else {
            infer::SAMPLES
        };
        while samples.len() < enough && next < objects.len() {
            let object = &objects[next];
            let source_error = |e| CompactError::Source {
                location: format!("{}/{}", src.display.trim_end_matches('/'), object.key),
                source: e,
            };
            let bytes = src
                .store
                .get(&object.location)
                .await
                .map_err(source_error)?
                .bytes()
                .await
                .map_err(source_error)?;
            match NpyArray::parse(&bytes) {
                Ok(array) => {
                    samples.push(infer::Sample {
                        key: object.key.clone(),
                        shape: array.shape().to_vec(),
                        dtype: array.dtype(),
                    });
                    // Converted from these bytes later, not fetched again.
                    objects[next].fetched = Some(bytes.clone());
                    next += 1;
                }
                Err(e) if self.on_error == OnError::Skip => {
                    // It is skipped here and not converted later.
                    skipped.push(Skipped {
                        key: object.key.clone(),
                        reason: e.to_string(),
                    });
                    objects.remove(next);
                }
                Err(e) => {
                    return Err(CompactError::Npy {
                        key: object.key.clone(),
                        source: e,
                    });
                }
            }
        }
        if samples.is_empty() && enough > 0 {
            return Err(CompactError::EmptySource {
                location: src.display.clone(),
                detail: " that decode".into(),
            });
        }
        infer::settle(&samples, wanted.0, wanted.1, self.on_error == OnError::Skip).map_err(
            |reason| CompactError::Incompatible {
                location: src.display.clone(),
                reason,
            },
        )
    }

    pub(crate) fn report_progress(&self, summary: &ConvertSummary, window: &Window, total: usize) {
        if let Some(progress) = &self.progress {
            progress(&Progress {
                files_total: total,
                files_done: summary.files + window.files + summary.skipped.len(),
                bytes_read: summary.bytes_read + window.bytes_read,
                skipped: summary.skipped.len(),
                version: summary.version,
            });
        }
    }

    pub(crate) fn report(&self, summary: &ConvertSummary, total: usize) {
        self.report_progress(summary, &Window::default(), total);
    }
}

/// Files and rows flushed but not yet committed.
#[derive(Default)]
pub(crate) struct Window {
    pub files: usize,
    pub bytes_read: u64,
}

/// Where converted rows go: row groups built, written, and committed in windows of about
/// `files_per_commit` target-size files. Nothing of an open window is visible until its commit.
pub(crate) struct RowSink {
    writer: deltalake::writer::RecordBatchWriter,
    batch: BatchBuilder,
    pub window: Window,
    commit_bytes: u64,
    spec: TensorSpec,
}

impl Compactor {
    pub(crate) fn row_sink(
        &self,
        table: &Table,
        spec: &TensorSpec,
    ) -> Result<RowSink, CompactError> {
        Ok(RowSink {
            writer: writer_for(table, &self.layout)?,
            batch: BatchBuilder::new(
                self.layout.row_group_rows,
                spec.nbytes(),
                table.has_checksums()?,
            ),
            window: Window::default(),
            commit_bytes: self
                .layout
                .target_file_bytes
                .saturating_mul(self.files_per_commit as u64),
            spec: spec.clone(),
        })
    }

    /// Adds a row: a full row group is written, a full window committed.
    pub(crate) async fn sink_row(
        &self,
        sink: &mut RowSink,
        row: Row,
        table: &mut Table,
        summary: &mut ConvertSummary,
    ) -> Result<(), CompactError> {
        sink.window.bytes_read += row.bytes_read;
        sink.window.files += 1;
        sink.batch.push(row);
        if sink.batch.is_full() {
            let batch = sink.batch.finish(&sink.spec)?;
            sink.writer.write(batch).await.map_err(|e| table.error(e))?;
        }
        if sink.writer.buffer_len() as u64 >= sink.commit_bytes {
            self.commit(&mut sink.writer, table, &mut sink.window, summary)
                .await?;
        }
        Ok(())
    }

    /// Writes and commits what is left; on `Err` (from the caller's loop or here) nothing of
    /// the open window is committed and uploads in progress are aborted.
    pub(crate) async fn finish_sink(
        &self,
        mut sink: RowSink,
        result: Result<(), CompactError>,
        table: &mut Table,
        summary: &mut ConvertSummary,
    ) -> Result<(), CompactError> {
        let result = match result {
            Ok(()) => {
                async {
                    if sink.batch.len() > 0 {
                        let batch = sink.batch.finish(&sink.spec)?;
                        sink.writer.write(batch).await.map_err(|e| table.error(e))?;
                    }
                    if sink.window.files > 0 {
                        self.commit(&mut sink.writer, table, &mut sink.window, summary)
                            .await?;
                    }
                    Ok(())
                }
                .await
            }
            Err(e) => Err(e),
        };
        if result.is_err() {
            sink.writer.reset();
        }
        result
    }
}

fn decode(
    object: SourceObject,
    bytes: Bytes,
    spec: &TensorSpec,
    casting: Casting,
    labels: Option<&Labels>,
) -> Result<Row, CompactError> {
    let key = object.key;
    let npy_err = |source| CompactError::Npy {
        key: key.clone(),
        source,
    };
    let array = NpyArray::parse(&bytes).map_err(npy_err)?;
    if array.shape() != spec.shape() {
        return Err(CompactError::ShapeMismatch {
            key,
            expected: spec.shape().to_vec(),
            found: array.shape().to_vec(),
        });
    }
    if !array.dtype().can_cast(spec.dtype(), casting) {
        return Err(CompactError::DTypeMismatch {
            key,
            expected: spec.dtype(),
            found: array.dtype(),
            hint: if casting == Casting::Safe {
                " without loss (pass --dtype to allow narrowing)"
            } else {
                ""
            },
        });
    }
    let label = match labels {
        Some(labels) => Some(labels.get(&key).ok_or_else(|| CompactError::MissingLabel {
            key: key.clone(),
            labels: labels.location().to_string(),
        })?),
        None => None,
    };
    let tensor = if array.is_le_c(spec.dtype()) {
        // Already in table layout: share the downloaded buffer.
        let offset = bytes.len() - array.data().len();
        bytes.slice(offset..)
    } else {
        let mut out = Vec::with_capacity(spec.nbytes());
        array
            .write_le_c(spec.dtype(), casting, &mut out)
            .map_err(npy_err)?;
        Bytes::from(out)
    };
    let checksum = voxlake_format::row_checksum(&key, label, &tensor);
    Ok(Row {
        key,
        label,
        checksum,
        tensor,
        bytes_read: object.size,
    })
}

/// Accumulates one row group's worth of rows.
pub(crate) struct BatchBuilder {
    rows: usize,
    ids: StringBuilder,
    labels: Int64Builder,
    tensors: BinaryBuilder,
    /// The checksum column, where the table has one.
    checksums: Option<Int64Builder>,
    len: usize,
    sample_bytes: usize,
}

impl BatchBuilder {
    pub fn new(rows: usize, sample_bytes: usize, checksums: bool) -> Self {
        let rows = rows.max(1);
        BatchBuilder {
            rows,
            ids: StringBuilder::new(),
            labels: Int64Builder::with_capacity(rows),
            tensors: BinaryBuilder::with_capacity(rows, rows * sample_bytes),
            checksums: checksums.then(|| Int64Builder::with_capacity(rows)),
            len: 0,
            sample_bytes,
        }
    }
    pub fn push(&mut self, row: Row) {
        self.ids.append_value(&row.key);
        self.labels.append_option(row.label);
        self.tensors.append_value(&row.tensor);
        if let Some(c) = &mut self.checksums {
            c.append_value(row.checksum);
        }
        self.len += 1;
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_full(&self) -> bool {
        self.len >= self.rows
    }
    pub fn finish(&mut self, spec: &TensorSpec) -> Result<RecordBatch, CompactError> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.ids.finish()),
            Arc::new(self.labels.finish()),
            Arc::new(self.tensors.finish()),
        ];
        if let Some(c) = &mut self.checksums {
            columns.push(Arc::new(c.finish()));
        }
        self.tensors = BinaryBuilder::with_capacity(self.rows, self.rows * self.sample_bytes);
        self.len = 0;
        RecordBatch::try_new(spec.arrow_schema_with(self.checksums.is_some()), columns)
            .map_err(|e| CompactError::Internal(e.to_string()))
    }
}

/// The ids of every row in the table.
pub(crate) async fn read_ids(table: &Table) -> Result<HashSet<String>, CompactError> {
    let snapshot = table.snapshot().await?;
    let mut ids = HashSet::new();
    snapshot
        .scan_column(ID_COLUMN, |file, batches| {
            for batch in batches {
                let column = batch
                    .column_by_name(ID_COLUMN)
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                    .ok_or_else(|| CompactError::Incompatible {
                        location: table.display.clone(),
                        reason: format!("file {}: no Utf8 'id' column", file.path),
                    })?;
                ids.extend(column.iter().flatten().map(str::to_string));
            }
            Ok::<_, CompactError>(())
        })
        .await?;
    Ok(ids)
}

async fn read_labels(
    location: &str,
    options: &std::collections::HashMap<String, String>,
) -> Result<Labels, CompactError> {
    let err = |reason: String| CompactError::Labels {
        location: voxlake_stream::redact(location),
        reason,
    };
    let bytes = if location.contains("://") {
        let loc = location::open_store(location, false, options)?;
        loc.store
            .get(&loc.prefix)
            .await
            .map_err(|e| err(e.to_string()))?
            .bytes()
            .await
            .map_err(|e| err(e.to_string()))?
            .to_vec()
    } else {
        std::fs::read(location).map_err(|e| err(e.to_string()))?
    };
    let text = String::from_utf8(bytes).map_err(|_| err("not UTF-8 text".into()))?;
    Labels::parse(&text, &voxlake_stream::redact(location))
}
