//! A filter applied to a snapshot when it is opened, where it is cheapest: files by partition
//! values and Delta file statistics (no read), row groups by their footers' statistics (the
//! footers are read anyway), then the filter's columns of what is left read and decided row by
//! row. The snapshot then plans only the selected rows, so ranks still get equal batch counts
//! and a resume replays the same order; each row group read keeps its selected rows.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::{DataType, Schema};
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::error::TableError;
use crate::filter::stats::{
    comparable, delta_stats, is_temporal, kind_of, stats_of, temporal_literal, value_at,
};
use crate::filter::{Filter, FilterStats, Stats, Value};
use crate::rows::{GroupRows, Selection, intersect};
use crate::snapshot::Snapshot;
use voxlake_delta::DataFile;

/// A partition column's value in a file: `None` when the column is not a partition column,
/// `Some(None)` for a null partition.
type PartitionValue<'a> = dyn Fn(DataFile<'_>, &str) -> Option<Option<Value>> + Sync + 'a;

/// What the filter left of one file.
struct FileSelection {
    groups: GroupRows,
    skipped: u64,
    decided: u64,
}

impl Snapshot {
    /// Selects the rows `filter` keeps (see the module docs).
    pub(crate) async fn select(
        &self,
        filter: &Filter,
        text: &str,
    ) -> Result<Selection, TableError> {
        let incompatible = |reason: String| TableError::Incompatible {
            location: self.location().to_string(),
            reason: format!("filter '{text}': {reason}"),
        };
        let files = self.files();
        let (typed, in_files, timestamps) = self.checked(filter, &incompatible)?;
        let timestamps: Vec<&str> = timestamps.iter().map(String::as_str).collect();
        let filter = &typed;
        let like = |column: &str| filter.literals_of(column).first().map(|v| (*v).clone());
        // A partition value, typed as the column is (else as the filter's literal is).
        let partition = |file: DataFile<'_>, column: &str| -> Option<Option<Value>> {
            let Some(raw) = file.partition(column)? else {
                return Some(None);
            };
            let kind = match self.partition_type(column) {
                Some(t) if is_temporal(t) => {
                    let parsed = voxlake_delta::partition_column(Some(raw), t, 1)
                        .and_then(|a| comparable(&a).map_err(|e| e.to_string()))
                        .ok()?;
                    return Some(value_at(&parsed, 0));
                }
                Some(t) if t.is_integer() => Value::Int(0),
                Some(t) if t.is_floating() => Value::Float(0.0),
                Some(DataType::Boolean) => Value::Bool(false),
                Some(_) => Value::Str(String::new()),
                None => like(column).unwrap_or(Value::Str(String::new())),
            };
            Some(Value::parse_like(raw, &kind))
        };
        let mut stats = FilterStats {
            rows_before: files.iter().filter_map(|f| f.rows()).sum(),
            ..FilterStats::default()
        };
        // 1. Files: partition values, Delta statistics.
        let mut kept = Vec::new();
        for (index, file) in files.iter().enumerate() {
            let json: Option<serde_json::Value> = file
                .delta_stats()
                .and_then(|s| serde_json::from_str(s).ok());
            let may = filter.may_match(&|column| match partition(file, column) {
                Some(value) => Some(Stats::exactly(value, file.rows())),
                None if timestamps.contains(&column) => None,
                // The log's statistics are keyed by physical name under column mapping.
                None => json.as_ref().and_then(|j| {
                    delta_stats(j, self.physical_name(column), like(column).as_ref())
                }),
            });
            if may {
                kept.push(index);
            } else {
                stats.files_skipped += 1;
            }
        }
        // 2. Row groups: footer statistics; 3. rows: the filter's columns read and decided.
        let per_file: Vec<(usize, FileSelection)> = futures::stream::iter(kept)
            .map(|index| {
                let in_files = &in_files;
                let partition = &partition;
                async move {
                    let selected = self.select_in_file(index, filter, in_files, partition);
                    selected.await.map(|s| (index, s))
                }
            })
            .buffered(crate::READ_CONCURRENCY)
            .try_collect()
            .await?;
        let mut rows = vec![Vec::new(); files.len()];
        for (index, selected) in per_file {
            stats.row_groups_skipped += selected.skipped;
            stats.rows_decided += selected.decided;
            rows[index] = selected.groups;
        }
        Ok(Selection {
            text: text.to_string(),
            rows,
            stats,
        })
    }

    /// `filter` checked against the table (every column exists, its literals are of its
    /// kind), its date and timestamp literals made the numbers those values compare as; the
    /// columns the files hold (the others are partitions) and, of those, the dates and
    /// timestamps (the log writes their statistics as text: not used).
    fn checked(
        &self,
        filter: &Filter,
        incompatible: &dyn Fn(String) -> TableError,
    ) -> Result<(Filter, Vec<String>, Vec<String>), TableError> {
        let schema: Arc<Schema> = self.schema().clone();
        let partition_columns: Vec<&str> = self.files().partition_columns().collect();
        // Every column must exist, and its literals be of its kind.
        let mut in_files = Vec::new();
        // Dates and timestamps compare as numbers (days, microseconds); the log's statistics
        // write them as text: not used, the footers' and the rows' decide.
        let mut timestamps = Vec::new();
        for column in filter.columns() {
            let kind = if partition_columns.contains(&column) {
                self.partition_type(column).and_then(kind_of)
            } else {
                let field = schema.field_with_name(column).map_err(|_| {
                    incompatible(format!(
                        "no column '{column}' (the table has {:?}{})",
                        schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>(),
                        if partition_columns.is_empty() {
                            String::new()
                        } else {
                            format!(", partitions {partition_columns:?}")
                        }
                    ))
                })?;
                in_files.push(column.to_string());
                if is_temporal(field.data_type()) {
                    timestamps.push(column.to_string());
                }
                Some(kind_of(field.data_type()).ok_or_else(|| {
                    incompatible(format!(
                        "column '{column}' is {}: filters compare numbers, strings and bools",
                        field.data_type()
                    ))
                })?)
            };
            for literal in filter.literals_of(column) {
                if let Some(kind) = kind
                    && literal.kind() != kind
                {
                    let holds = if timestamps.iter().any(|t| t == column)
                        || schema
                            .field_with_name(column)
                            .is_ok_and(|f| is_temporal(f.data_type()))
                    {
                        "dates or timestamps, written as text ('2024-01-05', '2024-01-05T10:00:00Z')"
                            .to_string()
                    } else {
                        format!("{kind}s")
                    };
                    return Err(incompatible(format!(
                        "column '{column}' holds {holds}, the filter compares it with a {}",
                        literal.kind()
                    )));
                }
            }
        }
        // Date and timestamp literals as the numbers the values compare as.
        let mut typed = filter.clone();
        for column in filter.columns() {
            if let Ok(field) = schema.field_with_name(column)
                && is_temporal(field.data_type())
            {
                typed = typed
                    .map_literals(column, &|v| match v {
                        Value::Str(text) => temporal_literal(text, field.data_type()),
                        other => Ok(other.clone()),
                    })
                    .map_err(|e| incompatible(format!("column '{column}': {e}")))?;
            }
        }
        Ok((typed, in_files, timestamps))
    }

    /// The selected rows of each row group of file `index` (an empty list for a skipped one),
    /// the row groups skipped and the rows decided.
    async fn select_in_file(
        &self,
        index: usize,
        filter: &Filter,
        in_files: &[String],
        partition: &PartitionValue<'_>,
    ) -> Result<FileSelection, TableError> {
        let file = self.files().at(index);
        // This file's partition values, typed once (not per row).
        let partitions: HashMap<&str, Option<Value>> = filter
            .columns()
            .into_iter()
            .filter_map(|c| Some((c, partition(file, c)?)))
            .collect();
        let meta = self.reader_metadata(index).await?;
        let groups = meta.metadata().row_groups();
        // The filter's file columns by position (under column mapping the file names them
        // otherwise): their root in the schema and, for footer statistics, their leaf.
        let descr = meta.metadata().file_metadata().schema_descr();
        let logical = self.logical_schema(&meta);
        // A struct's leaf (`meta.depth`) is read with its struct; footer statistics are
        // used for top-level columns only.
        let table = self.schema();
        let mut roots: Vec<usize> = in_files
            .iter()
            .filter_map(|c| logical.index_of(crate::snapshot::root_of(table, c)).ok())
            .collect();
        roots.sort_unstable();
        roots.dedup();
        let leaves: HashMap<&str, usize> = in_files
            .iter()
            .filter_map(|c| {
                let root = logical.index_of(c).ok()?;
                let leaf =
                    (0..descr.num_columns()).find(|&i| descr.get_column_root_idx(i) == root)?;
                Some((c.as_str(), leaf))
            })
            .collect();
        // Deleted rows are never selected.
        let undeleted = self.undeleted(index).await?;
        let live = |g: usize, selected: Option<Arc<[u32]>>| {
            intersect(selected, undeleted.as_ref().and_then(|u| u[g].as_ref()))
        };
        let mut survivors = Vec::new();
        let mut skipped = 0;
        for (g, rg) in groups.iter().enumerate() {
            let may = filter.may_match(&|column| match partitions.get(column) {
                Some(value) => Some(Stats::exactly(
                    value.clone(),
                    Some(rg.num_rows().max(0) as u64),
                )),
                None => leaves.get(column).and_then(|&leaf| stats_of(rg, leaf)),
            });
            if may {
                survivors.push(g);
            } else {
                skipped += 1;
            }
        }
        let empty: Arc<[u32]> = Arc::from(Vec::new());
        let mut out: GroupRows = vec![Some(empty); groups.len()];
        let done = |groups, decided| FileSelection {
            groups,
            skipped,
            decided,
        };
        if survivors.is_empty() {
            return Ok(done(out, 0));
        }
        if in_files.is_empty() {
            // Partition columns only: every row of a surviving row group matches.
            for &g in &survivors {
                out[g] = live(g, None);
            }
            return Ok(done(out, 0));
        }
        let (columns, read) = self
            .filter_columns(index, &meta, roots, &survivors, in_files)
            .await?;
        let mut at = 0usize;
        let mut decided = 0u64;
        for &g in &survivors {
            let n = groups[g].num_rows().max(0) as usize;
            let selected: Vec<u32> = (0..n)
                .filter(|&r| {
                    filter.matches(&|column| match partitions.get(column) {
                        Some(value) => value.clone(),
                        None => columns.get(column).and_then(|a| value_at(a, at + r)),
                    })
                })
                .map(|r| r as u32)
                .collect();
            decided += n as u64;
            at += n;
            out[g] = live(g, (selected.len() != n).then(|| Arc::from(selected)));
        }
        if at != read {
            return Err(TableError::Corrupt {
                location: self.location().to_string(),
                file: file.path().to_string(),
                reason: format!(
                    "the filter's columns hold {read} rows, the footer's row groups {at}"
                ),
            });
        }
        Ok(done(out, decided))
    }

    /// The filter's columns `in_files` of row groups `survivors` of file `index` (whose
    /// metadata is `meta`; their roots in the file `roots`), as the values compare, and the
    /// rows read.
    async fn filter_columns(
        &self,
        index: usize,
        meta: &ArrowReaderMetadata,
        roots: Vec<usize>,
        survivors: &[usize],
        in_files: &[String],
    ) -> Result<(HashMap<String, ArrayRef>, usize), TableError> {
        let all = self
            .projected_rows(index, meta, roots, survivors.to_vec())
            .await?;
        let columns: HashMap<String, ArrayRef> = in_files
            .iter()
            .filter_map(|c| Some((c.clone(), crate::snapshot::column_at_path(&all, c)?)))
            .map(|(c, a)| Ok((c, comparable(&a)?)))
            .collect::<Result<_, arrow_schema::ArrowError>>()
            .map_err(|e| {
                self.file_error(
                    index,
                    parquet::errors::ParquetError::ArrowError(e.to_string()),
                )
            })?;
        Ok((columns, all.num_rows()))
    }
}
