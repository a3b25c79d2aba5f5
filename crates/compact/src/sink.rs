//! Where converted rows go, for every source (`.npy` objects, another table): rows built into
//! row groups, written into target-size files and committed in windows, nothing of an open
//! window visible before its commit; and the summary a conversion reports.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use deltalake::kernel::Action;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::DeltaWriter;
use serde::Serialize;
use voxlake_format::{FieldKind, ID_COLUMN, SampleSpec};

use crate::error::CompactError;
use crate::source::Row;
use crate::table::{Table, writer_for};
use crate::{Compactor, Progress};

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
    /// Where the time went.
    #[serde(flatten)]
    pub timings: ConvertTimings,
}

impl ConvertSummary {
    /// The summary of a run that starts at table `version`, for samples `tensor`, after
    /// `list_s` seconds of listing its source.
    pub(crate) fn starting(version: u64, tensor: String, list_s: f64) -> ConvertSummary {
        ConvertSummary {
            files: 0,
            rows: 0,
            bytes_read: 0,
            bytes_written: 0,
            seconds: 0.0,
            version,
            skipped: Vec::new(),
            already_present: 0,
            labels_unmatched: 0,
            parquet_files: 0,
            commits: 0,
            tensor,
            timings: ConvertTimings {
                list_s,
                ..Default::default()
            },
        }
    }
}

/// Where a conversion's time went, in seconds. Reads and decodes run many at once, so their
/// sums exceed the wall time; `wait_s` says how long the writer waited for them.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct ConvertTimings {
    /// Before the first read: listing the source, reading labels, opening or creating the
    /// table and reading the ids it holds.
    pub list_s: f64,
    /// Reading source objects (summed over the reads in flight).
    pub read_s: f64,
    /// Decoding and converting them (summed).
    pub decode_s: f64,
    /// The writer waiting for decoded rows: reads are the bottleneck while this grows.
    pub wait_s: f64,
    /// Building row groups from the rows.
    pub encode_s: f64,
    /// Writing row groups: Parquet encoding and multipart uploads (deltalake's writer).
    pub write_s: f64,
    /// Finishing files and committing them to the log.
    pub commit_s: f64,
}

/// A skipped source object.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// Key relative to the source prefix.
    pub key: String,
    /// Why it was skipped.
    pub reason: String,
}

impl Compactor {
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
        let started = Instant::now();
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
        summary.timings.commit_s += started.elapsed().as_secs_f64();
        tracing::info!(version, files = window.files, "committed");
        *window = Window::default();
        Ok(())
    }

    /// Tells the progress callback where the conversion stands, the open window counted.
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

    /// Tells the progress callback where the conversion stands between windows.
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
    sample: SampleSpec,
}

impl Compactor {
    pub(crate) fn row_sink(
        &self,
        table: &Table,
        sample: &SampleSpec,
    ) -> Result<RowSink, CompactError> {
        Ok(RowSink {
            writer: writer_for(table, &self.layout)?,
            batch: BatchBuilder::new(self.layout.row_group_rows, sample, table.has_checksums()?),
            window: Window::default(),
            commit_bytes: self
                .layout
                .target_file_bytes
                .saturating_mul(self.files_per_commit as u64),
            sample: sample.clone(),
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
        sink.batch.push(row)?;
        if sink.batch.is_full() {
            self.write_batch(sink, table, summary).await?;
        }
        if sink.writer.buffer_len() as u64 >= sink.commit_bytes {
            self.commit(&mut sink.writer, table, &mut sink.window, summary)
                .await?;
        }
        Ok(())
    }

    /// The rows built so far as a row group, written.
    async fn write_batch(
        &self,
        sink: &mut RowSink,
        table: &Table,
        summary: &mut ConvertSummary,
    ) -> Result<(), CompactError> {
        let encoding = Instant::now();
        let batch = sink.batch.finish(&sink.sample)?;
        let writing = Instant::now();
        summary.timings.encode_s += (writing - encoding).as_secs_f64();
        sink.writer.write(batch).await.map_err(|e| table.error(e))?;
        summary.timings.write_s += writing.elapsed().as_secs_f64();
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
                        self.write_batch(&mut sink, table, summary).await?;
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

/// Accumulates one row group's worth of rows.
pub(crate) struct BatchBuilder {
    rows: usize,
    ids: StringBuilder,
    labels: Int64Builder,
    /// One builder per field.
    fields: Vec<FieldBuilder>,
    /// The checksum column, where the table has one.
    checksums: Option<Int64Builder>,
    len: usize,
}

/// One field's column: a tensor's bytes (and the bytes of one sample), or text.
enum FieldBuilder {
    Tensor(BinaryBuilder, usize),
    Text(StringBuilder),
}

impl FieldBuilder {
    fn new(kind: &FieldKind, rows: usize) -> Self {
        match kind.tensor() {
            Some(spec) => {
                let bytes = spec.nbytes();
                FieldBuilder::Tensor(BinaryBuilder::with_capacity(rows, rows * bytes), bytes)
            }
            None => FieldBuilder::Text(StringBuilder::new()),
        }
    }
}

impl BatchBuilder {
    pub(crate) fn new(rows: usize, sample: &SampleSpec, checksums: bool) -> Self {
        let rows = rows.max(1);
        BatchBuilder {
            rows,
            ids: StringBuilder::new(),
            labels: Int64Builder::with_capacity(rows),
            fields: sample
                .fields()
                .iter()
                .map(|f| FieldBuilder::new(&f.kind, rows))
                .collect(),
            checksums: checksums.then(|| Int64Builder::with_capacity(rows)),
            len: 0,
        }
    }

    /// Adds `row`, whose text fields are UTF-8 (checked by whoever made the row: the writer).
    pub(crate) fn push(&mut self, row: Row) -> Result<(), CompactError> {
        // Each text field checked once, before anything of the row is appended.
        let texts = self
            .fields
            .iter()
            .zip(&row.fields)
            .map(|(builder, bytes)| match builder {
                FieldBuilder::Text(_) => std::str::from_utf8(bytes).map(Some),
                FieldBuilder::Tensor(..) => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                CompactError::Internal(format!("row '{}': a text field is not UTF-8: {e}", row.key))
            })?;
        self.ids.append_value(&row.key);
        self.labels.append_option(row.label);
        for ((builder, bytes), text) in self.fields.iter_mut().zip(&row.fields).zip(texts) {
            match (builder, text) {
                (FieldBuilder::Text(b), Some(text)) => b.append_value(text),
                (FieldBuilder::Text(b), None) => b.append_value(""),
                (FieldBuilder::Tensor(b, _), _) => b.append_value(bytes),
            }
        }
        if let Some(c) = &mut self.checksums {
            c.append_value(row.checksum);
        }
        self.len += 1;
        Ok(())
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.rows
    }
    pub(crate) fn finish(&mut self, sample: &SampleSpec) -> Result<RecordBatch, CompactError> {
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(self.ids.finish()), Arc::new(self.labels.finish())];
        for builder in &mut self.fields {
            columns.push(match builder {
                FieldBuilder::Tensor(b, bytes) => {
                    let column = Arc::new(b.finish());
                    *b = BinaryBuilder::with_capacity(self.rows, self.rows * *bytes);
                    column
                }
                FieldBuilder::Text(b) => Arc::new(b.finish()),
            });
        }
        if let Some(c) = &mut self.checksums {
            columns.push(Arc::new(c.finish()));
        }
        self.len = 0;
        RecordBatch::try_new(sample.arrow_schema_with(self.checksums.is_some()), columns)
            .map_err(|e| CompactError::Internal(e.to_string()))
    }
}

/// The ids of every row in the table.
pub(crate) async fn read_ids(table: &mut Table) -> Result<HashSet<String>, CompactError> {
    let scan = table.scan().await?;
    let mut ids = HashSet::new();
    scan.scan_column(ID_COLUMN, |file, batches| {
        for batch in batches {
            let column = batch
                .column_by_name(ID_COLUMN)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| CompactError::Incompatible {
                    location: table.display.clone(),
                    reason: format!("file {}: no Utf8 'id' column", file.path()),
                })?;
            ids.extend(column.iter().flatten().map(str::to_string));
        }
        Ok::<_, CompactError>(())
    })
    .await?;
    Ok(ids)
}
