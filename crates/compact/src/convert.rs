//! Source samples (`.npy` objects, a folder per field, `.npz` archives: see `source`) → rows
//! of the table, written in row groups and committed in windows.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::StreamExt;
use object_store::ObjectStoreExt;
use voxlake_format::npy::NpyArray;
use voxlake_format::{FieldKind, SampleSpec};

use crate::error::CompactError;
use crate::infer;
use crate::labels::Labels;
use crate::sink::{ConvertSummary, ConvertTimings, RowSink, Skipped, read_ids};
use crate::source::{self, Row, SourceLayout, SourceObject, SourceSample};
use crate::table::Table;
use crate::{Compactor, OnError};
use voxlake_delta::stores;
use voxlake_io::location;

mod read;

pub(crate) use read::list;

impl Compactor {
    pub(crate) async fn run_convert(&self, source: &str) -> Result<ConvertSummary, CompactError> {
        if let Some(brick) = self.bricks {
            return self.run_convert_volumes(source, brick).await;
        }
        if !self.hints.is_empty() {
            return self.run_convert_table(source).await;
        }
        let start = Instant::now();
        let (src, options, labels) = self.open_source(source).await?;
        let objects = read::list(&src).await?;
        // No `.npy` or `.npz` objects but Parquet files (or a Delta log): a table to rewrite.
        let Some(layout) = self.layout_of(&objects, &src.display)? else {
            return self.run_convert_table(source).await;
        };
        let (mut samples, incomplete) = source::group(objects, &layout);
        let skipped = self.skip_incomplete(incomplete)?;
        let labels_unmatched = labels
            .as_ref()
            .map_or(0, |labels| unmatched_labels(labels, &samples));
        samples.retain(|s| self.in_shard(&s.key));

        let table_url = location::table_url(&self.table)?;
        let table_display = crate::table::redact_url(&table_url);
        let mut existing = Table::open(&table_url, &table_display, &options).await?;

        let already_present = self
            .drop_present(&mut existing, &mut samples, &src.display)
            .await?;
        tracing::info!(
            to_convert = samples.len(),
            already_present,
            source = %src.display,
            table = %table_display,
            "listed source"
        );

        let mut skipped = skipped;
        let destination = (&table_url, table_display.as_str(), &options);
        let (mut table, sample, layout) = self
            .table_for(
                existing,
                destination,
                &src,
                &mut samples,
                layout,
                &mut skipped,
            )
            .await?;
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

        let (mut rows, reader) = read::start(
            &src,
            &sample,
            layout,
            labels,
            samples,
            self.dtype.is_some(),
            self.concurrency,
        );
        let mut sink = self.row_sink(&table, &sample)?;
        let written = self.write_rows(&mut rows, &mut sink, &mut table, &mut summary, total);
        let result = written.await;
        drop(rows);
        self.finish_sink(sink, result, &mut table, &mut summary)
            .await?;
        summary.timings.read_s = reader.read_ns.load(Ordering::Relaxed) as f64 / 1e9;
        summary.timings.decode_s = reader.decode_ns.load(Ordering::Relaxed) as f64 / 1e9;
        Ok(self.summarized(summary, &table, start, total))
    }

    /// The source's store (checked reachable), the store settings, and the labels file read.
    pub(crate) async fn open_source(
        &self,
        source: &str,
    ) -> Result<
        (
            location::Location,
            std::collections::HashMap<String, String>,
            Option<Arc<Labels>>,
        ),
        CompactError,
    > {
        let options = location::storage_options(&self.storage_options);
        let src = stores::open_store(source, true, &options)?;
        stores::ensure_reachable(source, &options).await?;
        let labels = match &self.labels {
            Some(l) => Some(Arc::new(Labels::read(l, &options).await?)),
            None => None,
        };
        Ok((src, options, labels))
    }

    /// Leaves out of `samples` those `existing` holds already (re-runs are exactly-once), and
    /// says how many; nothing to convert into no table is an error naming the source.
    async fn drop_present(
        &self,
        existing: &mut Option<Table>,
        samples: &mut Vec<SourceSample>,
        source: &str,
    ) -> Result<usize, CompactError> {
        let mut already_present = 0;
        if let Some(table) = existing {
            let present = read_ids(table).await?;
            let before = samples.len();
            samples.retain(|s| !present.contains(&s.key));
            already_present = before - samples.len();
        }
        if samples.is_empty() && existing.is_none() {
            return Err(CompactError::EmptySource {
                location: source.to_string(),
                detail: self
                    .shard
                    .map(|(i, n)| format!(" for shard {i}/{n}"))
                    .unwrap_or_default(),
            });
        }
        Ok(already_present)
    }

    /// The table converted into (`destination`: its URL, its name in messages, the store
    /// settings), its sample, and the source's `layout` for it: an existing table's (the
    /// layout checked against it), else a table created for the sample inferred from the
    /// source's first `samples` (those that do not decode go to `skipped`).
    async fn table_for(
        &self,
        existing: Option<Table>,
        destination: (&url::Url, &str, &HashMap<String, String>),
        src: &location::Location,
        samples: &mut Vec<SourceSample>,
        layout: SourceLayout,
        skipped: &mut Vec<Skipped>,
    ) -> Result<(Table, SampleSpec, SourceLayout), CompactError> {
        let (url, display, options) = destination;
        Ok(match existing {
            Some(table) => {
                let sample = table.sample()?;
                let layout = self.layout_for(display, &sample, layout)?;
                (table, sample, layout)
            }
            None => {
                let (sample, layout) = self.infer_sample(src, samples, layout, skipped).await?;
                let table = Table::create(url, display, options, &sample, None).await?;
                (table, sample, layout)
            }
        })
    }

    /// How the listed `objects` of source `display` hold samples; `None` for a table's files
    /// (Parquet files or a Delta log, and no `.npy` or `.npz` object).
    pub(crate) fn layout_of(
        &self,
        objects: &[SourceObject],
        display: &str,
    ) -> Result<Option<SourceLayout>, CompactError> {
        let has = |suffix: &str| objects.iter().any(|o| o.key.ends_with(suffix));
        let is_table =
            |o: &SourceObject| o.key.ends_with(".parquet") || o.key.starts_with("_delta_log/");
        if !has(".npy") && !has(".npz") && objects.iter().any(is_table) {
            return Ok(None);
        }
        let layout = match (&self.fields, !has(".npy") && has(".npz")) {
            (Some(fields), true) => SourceLayout::Npz(fields.clone()),
            (Some(fields), false) => SourceLayout::Folders(fields.clone()),
            // The arrays of the first archive, once one is read.
            (None, true) => SourceLayout::Npz(Vec::new()),
            (None, false) => SourceLayout::Npy,
        };
        // A bricked conversion's --dtype is its first field's (the image's).
        let dtype = self.dtype.is_some() && self.bricks.is_none();
        if layout != SourceLayout::Npy && (self.shape.is_some() || dtype) {
            return Err(CompactError::Incompatible {
                location: display.to_string(),
                reason: "--shape and --dtype are for a source of one field (.npy objects); each field's shape and type come from its arrays".into(),
            });
        }
        Ok(Some(layout))
    }

    /// The samples missing a field: an error, or skipped with `--on-error skip`.
    pub(crate) fn skip_incomplete(
        &self,
        incomplete: Vec<(String, String, String)>,
    ) -> Result<Vec<Skipped>, CompactError> {
        let mut skipped = Vec::new();
        for (key, field, expected) in incomplete {
            let e = CompactError::MissingField {
                key: key.clone(),
                field,
                expected,
            };
            if self.on_error != OnError::Skip {
                return Err(e);
            }
            tracing::warn!(%key, error = %e, "skipping");
            skipped.push(Skipped {
                key,
                reason: e.to_string(),
            });
        }
        Ok(skipped)
    }

    /// Each decoded row into the sink (committed in windows), `rows` until they end; a row
    /// that failed is skipped with `--on-error skip`, else the error.
    async fn write_rows(
        &self,
        rows: &mut (
                 impl futures::Stream<Item = Result<(String, Result<Row, CompactError>), CompactError>>
                 + Unpin
             ),
        sink: &mut RowSink,
        table: &mut Table,
        summary: &mut ConvertSummary,
        total: usize,
    ) -> Result<(), CompactError> {
        loop {
            let waiting = Instant::now();
            let Some(read) = rows.next().await else {
                return Ok(());
            };
            summary.timings.wait_s += waiting.elapsed().as_secs_f64();
            let (key, decoded) = read?;
            match decoded {
                Ok(row) => self.sink_row(sink, row, table, summary).await?,
                Err(e) if self.on_error == OnError::Skip => {
                    tracing::warn!(%key, error = %e, "skipping");
                    summary.skipped.push(Skipped {
                        key,
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
            self.report_progress(summary, &sink.window, total);
        }
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
            let parsed = source::arrays(
                &sample.key,
                &parts,
                &layout,
                voxlake_format::npy::NPZ_DEFAULT_CAP,
            )
            .and_then(|arrays| {
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
}

/// Labels for samples the source does not hold (a wrong prefix or a stale file): how many,
/// with a warning naming a few.
fn unmatched_labels(labels: &Labels, samples: &[SourceSample]) -> usize {
    let unmatched = labels.unmatched(&source::keys(samples));
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
