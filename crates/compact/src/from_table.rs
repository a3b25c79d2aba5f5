//! `compact convert` from a table: any Delta table or folder of Parquet files the loader reads
//! (Spark `array<float>`, pyarrow and Ray tensors, Petastorm's codecs, raw bytes; see
//! `voxlake_format::sample`), rewritten in voxlake's layout, so a team moves a table onto the
//! fast path in one command. Re-runs are exactly-once as for `.npy` sources: rows whose id the
//! table holds are skipped, and nothing of an interrupted commit window is committed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{Array, Int64Array, StringArray};
use bytes::Bytes;
use deltalake::writer::DeltaWriter;
use futures::StreamExt;
use voxlake_format::{ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};
use voxlake_stream::location::{self, stable_hash};
use voxlake_stream::{Snapshot, TableStream};

use crate::Compactor;
use crate::convert::{BatchBuilder, ConvertSummary, Row, Window, read_ids};
use crate::error::CompactError;
use crate::table::{Table, writer_for};

impl Compactor {
    pub(crate) async fn run_convert_table(
        &self,
        source: &str,
    ) -> Result<ConvertSummary, CompactError> {
        let start = Instant::now();
        let mut hints = self.hints.clone();
        hints.shape = hints.shape.or_else(|| self.shape.clone());
        hints.dtype = hints.dtype.or(self.dtype);
        let snapshot = Snapshot::open_with(source, &self.storage_options, None, None, &hints)
            .await?
            .with_row_counts()
            .await?;
        let source_display = snapshot.location().to_string();
        let spec = snapshot.spec().clone();
        if self.labels.is_some() {
            return Err(CompactError::Incompatible {
                location: source_display,
                reason: "a table's labels come from its label column (--label-column), not a labels file".into(),
            });
        }
        let options = location::storage_options(&self.storage_options);
        let table_url = location::table_url(&self.table)?;
        let table_display = crate::table::redact_url(&table_url);
        let existing = Table::open(&table_url, &table_display, &options).await?;
        let mut present = HashSet::new();
        let mut table = match existing {
            Some(table) => {
                if table.spec()? != spec {
                    return Err(CompactError::Incompatible {
                        location: table_display,
                        reason: format!("holds {} tensors, the source {spec}", table.spec()?),
                    });
                }
                present = read_ids(&table).await?;
                table
            }
            None => Table::create(&table_url, &table_display, &options, &spec).await?,
        };
        tracing::info!(
            source = %source_display,
            table = %table_display,
            encoding = snapshot.columns().encoding.describe(),
            rows = snapshot.num_rows().unwrap_or(0),
            "converting a table"
        );
        let mut summary = ConvertSummary {
            files: 0,
            rows: 0,
            bytes_read: 0,
            bytes_written: 0,
            seconds: 0.0,
            version: table.version(),
            skipped: Vec::new(),
            already_present: 0,
            labels_unmatched: 0,
            parquet_files: 0,
            commits: 0,
            tensor: spec.to_string(),
        };
        let total = snapshot.num_rows().unwrap_or(0) as usize;
        self.report(&summary, total);

        // The source in table order, through the loader's reader (budgeted, prefetched).
        let stream = TableStream::builder(source)
            .with_sample_columns(hints)
            .build_on(Arc::new(snapshot));
        let mut groups = stream.epoch(0);
        let mut writer = writer_for(&table, &self.layout)?;
        let mut batch = BatchBuilder::new(
            self.layout.row_group_rows,
            spec.nbytes(),
            table.has_checksums()?,
        );
        let mut window = Window::default();
        let commit_bytes = self
            .layout
            .target_file_bytes
            .saturating_mul(self.files_per_commit as u64);
        let mut seen = HashSet::new();
        let result: Result<(), CompactError> = async {
            while let Some(group) = groups.next().await {
                let group = group?;
                let data = &group.batch;
                let column = |name: &str| data.column_by_name(name);
                let (Some(ids), Some(tensors)) = (
                    column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>()),
                    column(TENSOR_COLUMN).map(|c| c.as_binary_view()),
                ) else {
                    return Err(CompactError::Internal(format!(
                        "row group {} of file #{} came without ids or tensors",
                        group.row_group(),
                        group.file()
                    )));
                };
                let labels = column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>());
                for i in 0..data.num_rows() {
                    let id = ids.value(i);
                    if present.contains(id) {
                        summary.already_present += 1;
                        continue;
                    }
                    if let Some((index, count)) = self.shard
                        && stable_hash(id) % u64::from(count) != u64::from(index)
                    {
                        continue;
                    }
                    // Ids key the exactly-once re-runs: a second row of one id would be lost.
                    if !seen.insert(id.to_string()) {
                        return Err(CompactError::Incompatible {
                            location: source_display.clone(),
                            reason: format!(
                                "id '{id}' appears twice (row {} of file #{}): ids must be unique, name another column with --id-column",
                                group.file_row(i).unwrap_or(0),
                                group.file()
                            ),
                        });
                    }
                    let label = labels.and_then(|l| (!l.is_null(i)).then(|| l.value(i)));
                    let tensor = Bytes::copy_from_slice(tensors.value(i));
                    window.bytes_read += tensor.len() as u64;
                    window.files += 1;
                    batch.push(Row {
                        checksum: voxlake_format::row_checksum(id, label, &tensor),
                        key: id.to_string(),
                        label,
                        tensor,
                        bytes_read: 0,
                    });
                    if batch.is_full() {
                        writer
                            .write(batch.finish(&spec)?)
                            .await
                            .map_err(|e| table.error(e))?;
                    }
                    if writer.buffer_len() as u64 >= commit_bytes {
                        self.commit(&mut writer, &mut table, &mut window, &mut summary)
                            .await?;
                    }
                }
                self.report_progress(&summary, &window, total);
            }
            if batch.len() > 0 {
                writer
                    .write(batch.finish(&spec)?)
                    .await
                    .map_err(|e| table.error(e))?;
            }
            if window.files > 0 {
                self.commit(&mut writer, &mut table, &mut window, &mut summary)
                    .await?;
            }
            Ok(())
        }
        .await;
        drop(groups);
        if let Err(e) = result {
            // Nothing of the open window is committed; uploads in progress are aborted.
            writer.reset();
            return Err(e);
        }
        summary.version = table.version();
        summary.seconds = start.elapsed().as_secs_f64();
        self.report(&summary, total);
        Ok(summary)
    }
}
