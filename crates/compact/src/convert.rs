//! Source samples (`.npy` objects, a folder per field, `.npz` archives: see `source`) → rows
//! of the table, written in row groups and committed in windows.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use deltalake::kernel::Action;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::DeltaWriter;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use serde::Serialize;
use voxlake_format::npy::NpyArray;
use voxlake_format::{Casting, FieldKind, ID_COLUMN, SampleSpec};

use crate::error::CompactError;
use crate::infer;
use crate::labels::Labels;
use crate::source::{self, Row, SourceLayout, SourceObject, SourceSample};
use crate::table::{Table, writer_for};
use crate::{Compactor, OnError, Progress};
use voxlake_io::depth::Depth;
use voxlake_io::inflight::{Metered, Slots};
use voxlake_io::location::{self, stable_hash};
use voxlake_table::stores;

/// Source reads in flight at the start of a conversion, and at most (objects of a few hundred
/// KB: 256 hold ~100 MB).
const START_READS: usize = 16;
const MAX_READS: usize = 256;
/// Decoded rows waiting for the writer at most.
const MAX_AHEAD: usize = 64;

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
    pub(crate) async fn run_convert(&self, source: &str) -> Result<ConvertSummary, CompactError> {
        if !self.hints.is_empty() {
            return self.run_convert_table(source).await;
        }
        let start = Instant::now();
        let options = location::storage_options(&self.storage_options);
        let src = stores::open_store(source, true, &options)?;
        stores::ensure_reachable(source, &options).await?;
        let labels = match &self.labels {
            Some(l) => Some(Arc::new(read_labels(l, &options).await?)),
            None => None,
        };

        // The listing.
        let objects: Vec<SourceObject> = src
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
        let has = |suffix: &str| objects.iter().any(|o| o.key.ends_with(suffix));
        // No `.npy` or `.npz` objects but Parquet files (or a Delta log): a table to rewrite.
        let is_table =
            |o: &SourceObject| o.key.ends_with(".parquet") || o.key.starts_with("_delta_log/");
        if !has(".npy") && !has(".npz") && objects.iter().any(is_table) {
            return self.run_convert_table(source).await;
        }
        let layout = match (&self.fields, !has(".npy") && has(".npz")) {
            (Some(fields), true) => SourceLayout::Npz(fields.clone()),
            (Some(fields), false) => SourceLayout::Folders(fields.clone()),
            // The arrays of the first archive, once one is read.
            (None, true) => SourceLayout::Npz(Vec::new()),
            (None, false) => SourceLayout::Npy,
        };
        if layout != SourceLayout::Npy && (self.shape.is_some() || self.dtype.is_some()) {
            return Err(CompactError::Incompatible {
                location: src.display.clone(),
                reason: "--shape and --dtype are for a source of one field (.npy objects); each field's shape and type come from its arrays".into(),
            });
        }
        let (mut samples, incomplete) = source::group(objects, &layout);
        let mut skipped = Vec::new();
        for (key, field, expected) in incomplete {
            let e = CompactError::MissingField {
                key,
                field,
                expected,
            };
            if self.on_error != OnError::Skip {
                return Err(e);
            }
            let CompactError::MissingField { key, .. } = &e else {
                continue;
            };
            tracing::warn!(%key, error = %e, "skipping");
            skipped.push(Skipped {
                key: key.clone(),
                reason: e.to_string(),
            });
        }
        // Labels for samples the source does not hold: a wrong prefix or a stale file.
        let labels_unmatched = match &labels {
            Some(labels) => {
                let unmatched = labels.unmatched(&source::keys(&samples));
                if !unmatched.is_empty() {
                    tracing::warn!(
                        count = unmatched.len(),
                        labels = labels.location(),
                        examples = ?&unmatched[..unmatched.len().min(5)],
                        "labels name samples the source does not hold"
                    );
                }
                unmatched.len()
            }
            None => 0,
        };
        if let Some((index, count)) = self.shard {
            samples.retain(|s| stable_hash(&s.key) % u64::from(count) == u64::from(index));
        }

        let table_url = location::table_url(&self.table)?;
        let table_display = crate::table::redact_url(&table_url);
        let existing = Table::open(&table_url, &table_display, &options).await?;

        // Only what the table does not hold yet: this makes re-runs exactly-once.
        let mut already_present = 0;
        if let Some(table) = &existing {
            let present = read_ids(table).await?;
            let before = samples.len();
            samples.retain(|s| !present.contains(&s.key));
            already_present = before - samples.len();
        }
        if samples.is_empty() && existing.is_none() {
            return Err(CompactError::EmptySource {
                location: src.display.clone(),
                detail: self
                    .shard
                    .map(|(i, n)| format!(" for shard {i}/{n}"))
                    .unwrap_or_default(),
            });
        }
        tracing::info!(
            to_convert = samples.len(),
            already_present,
            source = %src.display,
            table = %table_display,
            "listed source"
        );

        let (table, sample, layout) = match existing {
            Some(table) => {
                let sample = table.sample()?;
                let layout = self.layout_for(&table_display, &sample, layout)?;
                (table, sample, layout)
            }
            None => {
                let (sample, layout) = self
                    .infer_sample(&src, &mut samples, layout, &mut skipped)
                    .await?;
                let table = Table::create(&table_url, &table_display, &options, &sample).await?;
                (table, sample, layout)
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
            tensor: sample.to_string(),
            timings: ConvertTimings {
                list_s: start.elapsed().as_secs_f64(),
                ..ConvertTimings::default()
            },
        };
        let total = samples.len();
        self.report(&summary, total);

        let casting = if self.dtype.is_some() {
            Casting::SameKind
        } else {
            Casting::Safe
        };
        let shared = Arc::new(sample.clone());
        let layout = Arc::new(layout);
        let store = src.store.clone();
        let src_display: Arc<str> = src.display.trim_end_matches('/').into();
        // Reading and decoding run in their own task, so they go on while the writer waits
        // on the store.
        // Reads in flight sized to the store: Little's law over the measured GET time and the
        // writer's pace (a store 100 ms away needs ~50 for ~400 objects a second).
        let (depth, most) = match self.concurrency {
            Some(n) => (Depth::fixed(n), n),
            None => (Depth::new(START_READS, MAX_READS), MAX_READS),
        };
        let slots = Slots::new(depth);
        let paced = slots.clone();
        let (read_ns, decode_ns) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (read_sum, decode_sum) = (read_ns.clone(), decode_ns.clone());
        let reads = futures::stream::iter(samples)
            .map(move |sample| {
                let (read_ns, decode_ns) = (read_ns.clone(), decode_ns.clone());
                let slots = slots.clone();
                let store = store.clone();
                let spec = shared.clone();
                let layout = layout.clone();
                let labels = labels.clone();
                let src_display = src_display.clone();
                async move {
                    let key = sample.key.clone();
                    let size = sample.size();
                    let slot = match slots.acquire().await {
                        Ok(slot) => slot,
                        Err(e) => return (key, Err(CompactError::Internal(e.to_string()))),
                    };
                    let reading = Instant::now();
                    let mut parts = Vec::with_capacity(sample.parts.len());
                    for mut object in sample.parts {
                        let bytes = match object.fetched.take() {
                            Some(bytes) => Ok(bytes),
                            None => match store.get(&object.location).await {
                                Ok(r) => r.bytes().await,
                                Err(e) => Err(e),
                            },
                        }
                        .map_err(|e| CompactError::Source {
                            location: format!("{src_display}/{}", object.key),
                            source: e,
                        });
                        match bytes {
                            Ok(b) => parts.push((object.key, b)),
                            Err(e) => return (key, Err(e)),
                        }
                    }
                    slot.done();
                    read_ns.fetch_add(reading.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    // Nothing to convert: slices of the downloads, decoded here.
                    let ready = !matches!(*layout, SourceLayout::Npz(_))
                        && parts
                            .iter()
                            .zip(spec.tensors())
                            .all(|((_, b), (_, s))| source::ready(b, s));
                    let named = key.clone();
                    let run = move || {
                        let decoding = Instant::now();
                        let arrays = source::arrays(&key, &parts, &layout)?;
                        let row =
                            source::decode(key, arrays, size, &spec, casting, labels.as_deref());
                        decode_ns
                            .fetch_add(decoding.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        row
                    };
                    let decoded = if ready {
                        run()
                    } else {
                        // Conversion (and inflating archives) is CPU work: keep it off the
                        // I/O threads.
                        tokio::task::spawn_blocking(run)
                            .await
                            .unwrap_or_else(|e| Err(CompactError::Internal(e.to_string())))
                    };
                    (named, decoded)
                }
            })
            .buffered(most);
        let rows = voxlake_io::spawn_ahead(
            reads.map(Ok::<_, CompactError>).boxed(),
            most.min(MAX_AHEAD),
            |panic| CompactError::Internal(format!("reading the source panicked: {panic}")),
        );
        let mut rows = Metered::new(rows, paced);

        let mut sink = self.row_sink(&table, &sample)?;
        let result: Result<(), CompactError> = async {
            loop {
                let waiting = Instant::now();
                let Some(read) = rows.next().await else { break };
                summary.timings.wait_s += waiting.elapsed().as_secs_f64();
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
        summary.timings.read_s = read_sum.load(Ordering::Relaxed) as f64 / 1e9;
        summary.timings.decode_s = decode_sum.load(Ordering::Relaxed) as f64 / 1e9;
        Ok(self.summarized(summary, &table, start, total))
    }

    /// The source's layout for an existing table of `sample`: its fields must be the table's.
    fn layout_for(
        &self,
        table: &str,
        sample: &SampleSpec,
        layout: SourceLayout,
    ) -> Result<SourceLayout, CompactError> {
        let names: Vec<String> = sample.fields().iter().map(|f| f.name.clone()).collect();
        let layout = match layout {
            SourceLayout::Npz(given) if given.is_empty() => SourceLayout::Npz(names.clone()),
            other => other,
        };
        let fits = match &layout {
            SourceLayout::Npy => sample.is_single(),
            SourceLayout::Folders(f) | SourceLayout::Npz(f) => *f == names,
        };
        if !fits {
            return Err(CompactError::Incompatible {
                location: table.to_string(),
                reason: format!(
                    "holds samples of {sample}, the source's are {}",
                    layout
                        .fields()
                        .map_or_else(|| "one tensor".to_string(), |f| f.join(", "))
                ),
            });
        }
        if let Some(dtype) = self.dtype
            && dtype != sample.first().dtype()
        {
            return Err(CompactError::Incompatible {
                location: table.to_string(),
                reason: format!(
                    "holds {} tensors, --dtype asks for {dtype}",
                    sample.first().dtype()
                ),
            });
        }
        Ok(layout)
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

    /// Reads samples from the front of the list until enough decode, and takes the shapes and
    /// dtypes they settle on (per field; `--shape` and `--dtype` for one field) as the new
    /// table's sample. An `.npz` source without `--fields` takes the first archive's arrays.
    async fn infer_sample(
        &self,
        src: &location::Location,
        samples: &mut Vec<SourceSample>,
        mut layout: SourceLayout,
        skipped: &mut Vec<Skipped>,
    ) -> Result<(SampleSpec, SourceLayout), CompactError> {
        let wanted = (self.shape.as_deref(), self.dtype);
        // Both given (one field): no object decides anything.
        let enough = if matches!(wanted, (Some(_), Some(_))) {
            0
        } else {
            infer::SAMPLES
        };
        let names: Vec<String> = match &layout {
            SourceLayout::Npy => vec![voxlake_format::TENSOR_COLUMN.to_string()],
            SourceLayout::Folders(f) | SourceLayout::Npz(f) => f.clone(),
        };
        let mut seen: Vec<Vec<infer::Sample>> = vec![Vec::new(); names.len()];
        let mut decoded = 0;
        let mut next = 0;
        while decoded < enough && next < samples.len() {
            let sample = &mut samples[next];
            let mut parts = Vec::with_capacity(sample.parts.len());
            for object in &mut sample.parts {
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
                // Converted from these bytes later, not fetched again.
                object.fetched = Some(bytes.clone());
                parts.push((object.key.clone(), bytes));
            }
            if let SourceLayout::Npz(fields) = &mut layout
                && fields.is_empty()
                && let Some((key, bytes)) = parts.first()
                && let Ok(found) = source::npz_names(bytes, key)
            {
                *fields = found;
                seen = vec![Vec::new(); fields.len()];
            }
            let parsed = source::arrays(&sample.key, &parts, &layout).and_then(|arrays| {
                arrays
                    .into_iter()
                    .map(|(key, bytes)| {
                        NpyArray::parse(&bytes)
                            .map(|a| infer::Sample {
                                key: key.clone(),
                                shape: a.shape().to_vec(),
                                dtype: a.dtype(),
                            })
                            .map_err(|source| CompactError::Npy { key, source })
                    })
                    .collect::<Result<Vec<_>, _>>()
            });
            match parsed {
                Ok(fields) => {
                    for (seen, field) in seen.iter_mut().zip(fields) {
                        seen.push(field);
                    }
                    decoded += 1;
                    next += 1;
                }
                Err(e) if self.on_error == OnError::Skip => {
                    // It is skipped here and not converted later.
                    skipped.push(Skipped {
                        key: sample.key.clone(),
                        reason: e.to_string(),
                    });
                    samples.remove(next);
                }
                Err(e) => return Err(e),
            }
        }
        if decoded == 0 && enough > 0 {
            return Err(CompactError::EmptySource {
                location: src.display.clone(),
                detail: " that decode".into(),
            });
        }
        let names = match &layout {
            SourceLayout::Npy => names,
            SourceLayout::Folders(f) | SourceLayout::Npz(f) => f.clone(),
        };
        let mut fields = Vec::with_capacity(names.len());
        for (name, seen) in names.iter().zip(&seen) {
            let spec = infer::settle(seen, wanted.0, wanted.1, self.on_error == OnError::Skip)
                .map_err(|reason| CompactError::Incompatible {
                    location: src.display.clone(),
                    reason: match layout {
                        SourceLayout::Npy => reason,
                        _ => format!("field '{name}': {reason}"),
                    },
                })?;
            fields.push((name.clone(), FieldKind::Tensor(spec)));
        }
        let sample = SampleSpec::new(fields).map_err(|e| CompactError::Incompatible {
            location: src.display.clone(),
            reason: e.to_string(),
        })?;
        Ok((sample, layout))
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
        sink.batch.push(row);
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
    /// One builder per field, and the bytes of one sample of it.
    fields: Vec<(BinaryBuilder, usize)>,
    /// The checksum column, where the table has one.
    checksums: Option<Int64Builder>,
    len: usize,
}

impl BatchBuilder {
    pub fn new(rows: usize, sample: &SampleSpec, checksums: bool) -> Self {
        let rows = rows.max(1);
        BatchBuilder {
            rows,
            ids: StringBuilder::new(),
            labels: Int64Builder::with_capacity(rows),
            fields: sample
                .tensors()
                .map(|(_, s)| {
                    let bytes = s.nbytes();
                    (BinaryBuilder::with_capacity(rows, rows * bytes), bytes)
                })
                .collect(),
            checksums: checksums.then(|| Int64Builder::with_capacity(rows)),
            len: 0,
        }
    }
    pub fn push(&mut self, row: Row) {
        self.ids.append_value(&row.key);
        self.labels.append_option(row.label);
        for ((builder, _), bytes) in self.fields.iter_mut().zip(&row.fields) {
            builder.append_value(bytes);
        }
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
    pub fn finish(&mut self, sample: &SampleSpec) -> Result<RecordBatch, CompactError> {
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(self.ids.finish()), Arc::new(self.labels.finish())];
        for (builder, bytes) in &mut self.fields {
            columns.push(Arc::new(builder.finish()));
            *builder = BinaryBuilder::with_capacity(self.rows, self.rows * *bytes);
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
        location: voxlake_io::redact(location),
        reason,
    };
    let bytes = if location.contains("://") {
        let loc = stores::open_store(location, false, options)?;
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
    Labels::parse(&text, &voxlake_io::redact(location))
}
