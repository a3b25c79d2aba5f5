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
use futures::StreamExt;
use voxlake_format::SampleSpec;
use voxlake_format::sample::{ColumnHints, FieldHint};
use voxlake_format::volume::BrickSpec;
use voxlake_format::{ID_COLUMN, LABEL_COLUMN};
use voxlake_io::cache::CacheChoice;
use voxlake_io::location;
use voxlake_stream::TableStream;
use voxlake_table::{Snapshot, TableOptions};

use crate::Compactor;
use crate::error::CompactError;
use crate::sink::{ConvertSummary, read_ids};
use crate::source::Row;
use crate::table::Table;

impl Compactor {
    pub(crate) async fn run_convert_table(
        &self,
        source: &str,
    ) -> Result<ConvertSummary, CompactError> {
        let start = Instant::now();
        let hints = self.table_hints(source)?;
        let options = TableOptions {
            storage_options: self.storage_options.clone(),
            hints: hints.clone(),
            cache: CacheChoice::Off,
            ..TableOptions::default()
        };
        let snapshot = Snapshot::builder(source)
            .with_options(options)
            .with_statistics(false)
            .build()
            .await?;
        let source_display = snapshot.location().to_string();
        let spec = snapshot.sample().clone();
        if self.labels.is_some() {
            return Err(CompactError::Incompatible {
                location: source_display,
                reason: "a table's labels come from its label column (--label-column), not a labels file".into(),
            });
        }
        // A bricked table's layout goes with all its fields (a volume's bricks and info).
        let bricks = snapshot
            .bricks()
            .filter(|b| b.sample().is_ok_and(|s| s == spec));
        if bricks.is_some() && self.shard.is_some() {
            return Err(CompactError::Incompatible {
                location: source_display,
                reason: "a bricked table is copied whole (--shard splits rows, not volumes)".into(),
            });
        }
        let (mut table, present, table_display) = self.destination(&spec, bricks).await?;
        tracing::info!(
            source = %source_display,
            table = %table_display,
            sample = %snapshot.sample(),
            rows = snapshot.num_rows(),
            "converting a table"
        );
        let mut summary = ConvertSummary::starting(
            table.version(),
            spec.to_string(),
            start.elapsed().as_secs_f64(),
        );
        let total = snapshot.num_rows() as usize;
        self.report(&summary, total);

        // The source in table order, through the loader's reader (budgeted, prefetched).
        // Opened above with the sample's column hints.
        let scan = Arc::new(snapshot).scan_builder().build().await?;
        let stream = TableStream::over(Arc::new(scan)).build();
        let mut groups = stream.epoch(0);
        let mut sink = self.row_sink(&table, &spec)?;
        let mut seen = HashSet::new();
        let result: Result<(), CompactError> = async {
            loop {
                let waiting = Instant::now();
                let Some(group) = groups.next().await else { break };
                summary.timings.wait_s += waiting.elapsed().as_secs_f64();
                let group = group?;
                let file = stream.scan().files().at(group.file()).path();
                let data = &group.batch;
                let column = |name: &str| data.column_by_name(name);
                let fields: Option<Vec<_>> = spec
                    .fields()
                    .iter()
                    .map(|f| column(&f.name).and_then(FieldValues::of))
                    .collect();
                let (Some(ids), Some(fields)) = (
                    column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>()),
                    fields,
                ) else {
                    return Err(CompactError::Internal(format!(
                        "row group {} of {file} came without ids or a field",
                        group.row_group()
                    )));
                };
                let labels = column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>());
                for i in 0..data.num_rows() {
                    let id = ids.value(i);
                    if present.contains(id) {
                        summary.already_present += 1;
                        continue;
                    }
                    if !self.in_shard(id) {
                        continue;
                    }
                    // Ids key the exactly-once re-runs: a second row of one id would be lost.
                    if !seen.insert(id.to_string()) {
                        return Err(CompactError::Incompatible {
                            location: source_display.clone(),
                            reason: format!(
                                "id '{id}' appears twice (row {} of {file}): ids must be unique, name another column with --id-column",
                                group.file_row(i).unwrap_or(0)
                            ),
                        });
                    }
                    let label = labels.and_then(|l| (!l.is_null(i)).then(|| l.value(i)));
                    // Copied, not viewed: the row group's budget share goes back when it is
                    // dropped, and the sink may hold the row longer.
                    let values: Vec<Bytes> = fields
                        .iter()
                        .map(|f| Bytes::copy_from_slice(f.value(i)))
                        .collect();
                    let row = Row::new(id.to_string(), label, values);
                    self.sink_row(&mut sink, row, &mut table, &mut summary)
                        .await?;
                }
                self.report_progress(&summary, &sink.window, total);
            }
            Ok(())
        }
        .await;
        drop(groups);
        self.finish_sink(sink, result, &mut table, &mut summary)
            .await?;
        Ok(self.summarized(summary, &table, start, total))
    }

    /// How the source table's samples are read: the sample columns given, with the shape,
    /// type and fields `--shape`, `--dtype` and `--fields` name (given once).
    fn table_hints(&self, source: &str) -> Result<ColumnHints, CompactError> {
        let mut hints = self.hints.clone();
        hints.shape = hints.shape.or_else(|| self.shape.clone());
        hints.dtype = hints.dtype.or(self.dtype);
        // `with_fields` names a table source's columns too; shapes and types come with hints.
        match (&self.fields, hints.fields.is_empty()) {
            (Some(names), true) => {
                hints.fields = names.iter().map(FieldHint::new).collect();
            }
            (Some(_), false) => {
                return Err(CompactError::Incompatible {
                    location: source.to_string(),
                    reason: "give a table source's fields once: with_fields (--fields) or the sample columns' fields (--field)".into(),
                });
            }
            (None, _) => {}
        }
        Ok(hints)
    }

    /// The table written, created for samples of `spec` if missing (an existing one must
    /// hold them), the ids it holds already, and its location for messages.
    pub(crate) async fn destination(
        &self,
        spec: &SampleSpec,
        bricks: Option<&BrickSpec>,
    ) -> Result<(Table, HashSet<String>, String), CompactError> {
        let options = location::storage_options(&self.storage_options);
        let table_url = location::table_url(&self.table)?;
        let table_display = crate::table::redact_url(&table_url);
        match Table::open(&table_url, &table_display, &options).await? {
            Some(mut table) => {
                if table.sample()? != *spec {
                    return Err(CompactError::Incompatible {
                        location: table_display,
                        reason: format!("holds {} tensors, the source {spec}", table.sample()?),
                    });
                }
                let held = table.bricks()?;
                if held.as_ref() != bricks {
                    let said = |b: Option<&BrickSpec>| match b {
                        Some(b) => format!(
                            "volumes in bricks of {:?}, classes of {:?}",
                            b.brick(),
                            b.class_fields()
                        ),
                        None => "rows that are not bricks".to_string(),
                    };
                    return Err(CompactError::Incompatible {
                        location: table_display,
                        reason: format!(
                            "holds {}, the source {}",
                            said(held.as_ref()),
                            said(bricks)
                        ),
                    });
                }
                let present = read_ids(&mut table).await?;
                Ok((table, present, table_display))
            }
            None => {
                let table =
                    Table::create(&table_url, &table_display, &options, spec, bricks).await?;
                Ok((table, HashSet::new(), table_display))
            }
        }
    }
}

/// One field's column of a row group as read: tensors' bytes, or text.
enum FieldValues<'a> {
    Tensors(&'a arrow_array::BinaryViewArray),
    Text(&'a StringArray),
    TextView(&'a arrow_array::StringViewArray),
}

impl<'a> FieldValues<'a> {
    fn of(column: &'a arrow_array::ArrayRef) -> Option<Self> {
        column
            .as_binary_view_opt()
            .map(FieldValues::Tensors)
            .or_else(|| column.as_string_opt::<i32>().map(FieldValues::Text))
            .or_else(|| column.as_string_view_opt().map(FieldValues::TextView))
    }

    /// Row `i`'s bytes (a text's UTF-8; a null text, masked by its policy, as empty text).
    fn value(&self, i: usize) -> &'a [u8] {
        use arrow_array::Array;
        match self {
            FieldValues::Tensors(t) => t.value(i),
            FieldValues::Text(t) if t.is_null(i) => &[],
            FieldValues::Text(t) => t.value(i).as_bytes(),
            FieldValues::TextView(t) if t.is_null(i) => &[],
            FieldValues::TextView(t) => t.value(i).as_bytes(),
        }
    }
}
