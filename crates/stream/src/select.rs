//! A filter applied to a snapshot when it is opened, where it is cheapest: files by partition
//! values and Delta file statistics (no read), row groups by their footers' statistics (the
//! footers are read anyway), then the filter's columns of what is left read and decided row by
//! row. The snapshot then plans only the selected rows, so ranks still get equal batch counts
//! and a resume replays the same order; each row group read keeps its selected rows.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema};
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;

use crate::error::StreamError;
use crate::filter::{Filter, Stats, Value};
use crate::snapshot::{DataFile, Snapshot};

/// What a filter left out, counted when the snapshot was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Files skipped by partition values or Delta statistics, unread.
    pub files_skipped: u64,
    /// Row groups skipped by their footer statistics, unread.
    pub row_groups_skipped: u64,
    /// Rows whose filter columns were read and decided one by one.
    pub rows_decided: u64,
    /// Rows the filter keeps.
    pub rows_selected: u64,
    /// Rows of the table before the filter, where known.
    pub rows_before: u64,
}

/// Per row group of a file: its selected rows (ascending), `None` for all of them.
pub(crate) type GroupRows = Vec<Option<Arc<[u32]>>>;

/// A partition column's value in a file: `None` when the column is not a partition column,
/// `Some(None)` for a null partition.
type PartitionValue<'a> = dyn Fn(&DataFile, &str) -> Option<Option<Value>> + Sync + 'a;

/// What the filter left of one file.
struct FileSelection {
    groups: GroupRows,
    skipped: u64,
    decided: u64,
}

/// The rows of each kept file's row groups a filter selects.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// The filter's text.
    pub text: String,
    /// Per file, per row group: the selected rows of the row group (ascending), `None` for all.
    pub rows: Vec<GroupRows>,
    pub stats: FilterStats,
}

/// The value of `array` at `i` as a filter sees it (`None`: null or a type filters cannot
/// compare, which the check at open rules out).
fn value_at(array: &ArrayRef, i: usize) -> Option<Value> {
    if array.is_null(i) {
        return None;
    }
    macro_rules! int {
        ($t:ty) => {
            Value::Int(array.as_primitive::<$t>().value(i) as i64)
        };
    }
    Some(match array.data_type() {
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => {
            let v = array.as_primitive::<UInt64Type>().value(i);
            i64::try_from(v).map_or(Value::Float(v as f64), Value::Int)
        }
        DataType::Float16 => Value::Float(
            array
                .as_primitive::<arrow_array::types::Float16Type>()
                .value(i)
                .to_f64(),
        ),
        DataType::Float32 => Value::Float(f64::from(array.as_primitive::<Float32Type>().value(i))),
        DataType::Float64 => Value::Float(array.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => Value::Bool(array.as_boolean().value(i)),
        DataType::Utf8 => Value::Str(array.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Value::Str(array.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Value::Str(array.as_string_view().value(i).to_string()),
        _ => return None,
    })
}

/// The kind of values a column of `data_type` holds, as filter literals name them.
fn kind_of(data_type: &DataType) -> Option<&'static str> {
    match data_type {
        t if t.is_integer() || t.is_floating() => Some("number"),
        DataType::Boolean => Some("bool"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some("string"),
        // Dates and timestamps compare as their ISO text ('2024-01-05', '2024-01-05T10:00:00'),
        // whose order is time order.
        t if is_temporal(t) => Some("string"),
        _ => None,
    }
}

fn is_temporal(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
    )
}

/// A date or timestamp column as its ISO text; other columns as they are.
fn comparable(array: &ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError> {
    if is_temporal(array.data_type()) {
        arrow_cast::cast(array, &DataType::Utf8)
    } else {
        Ok(array.clone())
    }
}

/// A footer statistic of leaf column `leaf` as a filter value.
fn stats_of(rg: &RowGroupMetaData, leaf: usize) -> Option<Stats> {
    let chunk = rg.columns().get(leaf)?;
    let s = chunk.statistics()?;
    let pair = |min: Option<Value>, max: Option<Value>| (min, max);
    let logical = chunk.column_descr().logical_type_ref();
    let is_date = matches!(logical, Some(parquet::basic::LogicalType::Date));
    let is_timestamp = matches!(logical, Some(parquet::basic::LogicalType::Timestamp { .. }))
        || chunk.column_type() == parquet::basic::Type::INT96;
    let (min, max) = match s {
        Statistics::Boolean(v) => pair(
            v.min_opt().map(|&b| Value::Bool(b)),
            v.max_opt().map(|&b| Value::Bool(b)),
        ),
        Statistics::Int32(v) if is_date => {
            let day = |d: i32| {
                arrow_array::temporal_conversions::date32_to_datetime(d)
                    .map(|t| Value::Str(t.date().to_string()))
            };
            (
                v.min_opt().and_then(|&d| day(d)),
                v.max_opt().and_then(|&d| day(d)),
            )
        }
        Statistics::Int32(v) => pair(
            v.min_opt().map(|&x| Value::Int(i64::from(x))),
            v.max_opt().map(|&x| Value::Int(i64::from(x))),
        ),
        // Timestamps: their statistics are not turned into text (no skipping, rows decide).
        Statistics::Int64(_) if is_timestamp => (None, None),
        Statistics::Int64(v) => pair(
            v.min_opt().map(|&x| Value::Int(x)),
            v.max_opt().map(|&x| Value::Int(x)),
        ),
        Statistics::Float(v) => pair(
            v.min_opt().map(|&x| Value::Float(f64::from(x))),
            v.max_opt().map(|&x| Value::Float(f64::from(x))),
        ),
        Statistics::Double(v) => pair(
            v.min_opt().map(|&x| Value::Float(x)),
            v.max_opt().map(|&x| Value::Float(x)),
        ),
        Statistics::ByteArray(v) => {
            // Strings only when exact (a truncated max would rule out rows that match).
            let text = |b: Option<&parquet::data_type::ByteArray>| {
                b.and_then(|b| std::str::from_utf8(b.data()).ok())
                    .map(|s| Value::Str(s.to_string()))
            };
            (
                text(v.min_opt()).filter(|_| v.min_is_exact()),
                text(v.max_opt()).filter(|_| v.max_is_exact()),
            )
        }
        _ => (None, None),
    };
    // Unsigned columns are stored as signed Parquet integers: their statistics' bits read as
    // signed would misorder large values.
    let unsigned = chunk
        .column_descr()
        .logical_type_ref()
        .is_some_and(|t| matches!(t, parquet::basic::LogicalType::Integer(i) if !i.is_signed));
    let (min, max) = if unsigned { (None, None) } else { (min, max) };
    Some(Stats {
        min,
        max,
        nulls: s.null_count_opt(),
        rows: Some(rg.num_rows().max(0) as u64),
    })
}

/// A Delta add action's statistics for `column`.
fn delta_stats(json: &serde_json::Value, column: &str, like: Option<&Value>) -> Option<Stats> {
    let value = |v: &serde_json::Value| -> Option<Value> {
        match v {
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(Value::Int)
                .or_else(|| n.as_f64().map(Value::Float)),
            serde_json::Value::String(s) => match like {
                // Delta writes dates and timestamps as strings: only strings compare to strings.
                Some(Value::Str(_)) => Some(Value::Str(s.clone())),
                _ => None,
            },
            serde_json::Value::Bool(b) => Some(Value::Bool(*b)),
            _ => None,
        }
    };
    let get = |key: &str| json.get(key).and_then(|m| m.get(column));
    let stats = Stats {
        min: get("minValues").and_then(value),
        max: get("maxValues").and_then(value),
        nulls: get("nullCount").and_then(serde_json::Value::as_u64),
        rows: json.get("numRecords").and_then(serde_json::Value::as_u64),
    };
    (stats != Stats::default()).then_some(stats)
}

/// `key=value` folders of a listed file's path, as hive writes partitions.
pub(crate) fn hive_partitions(path: &str) -> Vec<(String, Option<String>)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            let v = (v != "__HIVE_DEFAULT_PARTITION__").then(|| v.to_string());
            (k.to_string(), v)
        })
        .collect()
}

impl Snapshot {
    /// Selects the rows `filter` keeps (see the module docs).
    pub(crate) async fn select(
        &self,
        filter: &Filter,
        text: &str,
    ) -> Result<Selection, StreamError> {
        let incompatible = |reason: String| StreamError::Incompatible {
            location: self.location().to_string(),
            reason: format!("filter '{text}': {reason}"),
        };
        let files = self.files();
        let schema: Arc<Schema> = match files.first() {
            Some(_) => self.logical_schema(&self.reader_metadata(0).await?),
            None => Arc::new(Schema::empty()),
        };
        let partition_columns: Vec<&str> = files
            .iter()
            .flat_map(|f| f.partitions.iter().map(|(k, _)| k.as_str()))
            .collect();
        // Every column must exist, and its literals be of its kind.
        let mut in_files = Vec::new();
        // Delta writes timestamp statistics in another text form than the rows compare in
        // ('…T10:00:00.000Z' against '…T10:00:00'): not used, lest a file be skipped wrongly.
        let mut timestamps = Vec::new();
        for column in filter.columns() {
            let kind = if partition_columns.contains(&column) {
                self.partition_type(column).and_then(kind_of)
            } else {
                let field = schema.field_with_name(column).map_err(|_| {
                    incompatible(format!(
                        "no column '{column}' (the files have {:?}{})",
                        schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>(),
                        if partition_columns.is_empty() {
                            String::new()
                        } else {
                            format!(", partitions {partition_columns:?}")
                        }
                    ))
                })?;
                in_files.push(column.to_string());
                if matches!(field.data_type(), DataType::Timestamp(_, _)) {
                    timestamps.push(column);
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
                    let holds = if timestamps.contains(&column)
                        || schema
                            .field_with_name(column)
                            .is_ok_and(|f| is_temporal(f.data_type()))
                    {
                        "dates or timestamps, compared as ISO text ('2024-01-05')".to_string()
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
        let like = |column: &str| filter.literals_of(column).first().map(|v| (*v).clone());
        // A partition value, typed as the column is (else as the filter's literal is).
        let partition = |file: &DataFile, column: &str| -> Option<Option<Value>> {
            let (_, raw) = file.partitions.iter().find(|(k, _)| k == column)?;
            let Some(raw) = raw.as_deref() else {
                return Some(None);
            };
            let kind = match self.partition_type(column) {
                Some(DataType::Int64) => Value::Int(0),
                Some(_) => Value::Str(String::new()),
                None => like(column).unwrap_or(Value::Str(String::new())),
            };
            Some(Value::parse_like(raw, &kind))
        };
        let mut stats = FilterStats {
            rows_before: files.iter().filter_map(|f| f.rows).sum(),
            ..FilterStats::default()
        };
        // 1. Files: partition values, Delta statistics.
        let mut kept = Vec::new();
        for (index, file) in files.iter().enumerate() {
            let json: Option<serde_json::Value> = file
                .delta_stats
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok());
            let may = filter.may_match(&|column| match partition(file, column) {
                Some(value) => Some(Stats::exactly(value, file.rows)),
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

    /// The selected rows of each row group of file `index` (an empty list for a skipped one),
    /// the row groups skipped and the rows decided.
    async fn select_in_file(
        &self,
        index: usize,
        filter: &Filter,
        in_files: &[String],
        partition: &PartitionValue<'_>,
    ) -> Result<FileSelection, StreamError> {
        let file = &self.files()[index];
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
        let roots: Vec<usize> = in_files
            .iter()
            .filter_map(|c| logical.index_of(c).ok())
            .collect();
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
            crate::snapshot::intersect(selected, undeleted.and_then(|u| u[g].as_ref()))
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
        let perr = |e| self.file_error(index, e);
        let mask = ProjectionMask::roots(descr, roots);
        let reader = self.reader(index).with_metadata(meta.metadata().clone());
        let batches: Vec<RecordBatch> =
            ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta.clone())
                .with_projection(mask)
                .with_row_groups(survivors.clone())
                .with_batch_size(8192)
                .build()
                .map_err(perr)?
                .try_collect()
                .await
                .map_err(perr)?;
        let batches: Vec<RecordBatch> =
            batches.into_iter().map(|b| self.logical_batch(b)).collect();
        let schema = batches
            .first()
            .map(RecordBatch::schema)
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let all = arrow_select::concat::concat_batches(&schema, &batches).map_err(|e| {
            self.file_error(
                index,
                parquet::errors::ParquetError::ArrowError(e.to_string()),
            )
        })?;
        let columns: HashMap<&str, ArrayRef> = in_files
            .iter()
            .filter_map(|c| Some((c.as_str(), all.column_by_name(c)?)))
            .map(|(c, a)| Ok((c, comparable(a)?)))
            .collect::<Result<_, arrow_schema::ArrowError>>()
            .map_err(|e| {
                self.file_error(
                    index,
                    parquet::errors::ParquetError::ArrowError(e.to_string()),
                )
            })?;
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
        if at != all.num_rows() {
            return Err(StreamError::Corrupt {
                location: self.location().to_string(),
                file: file.path.clone(),
                reason: format!(
                    "the filter's columns hold {} rows, the footer's row groups {at}",
                    all.num_rows()
                ),
            });
        }
        Ok(done(out, decided))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_values_as_filters_see_them() {
        use arrow_array::{BooleanArray, Float16Array, StringArray, UInt64Array};
        let halves: ArrayRef = Arc::new(Float16Array::from(vec![
            Some(half::f16::from_f32(1.5)),
            None,
        ]));
        assert_eq!(value_at(&halves, 0), Some(Value::Float(1.5)));
        assert_eq!(value_at(&halves, 1), None);
        let big: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX, 7]));
        assert_eq!(value_at(&big, 0), Some(Value::Float(u64::MAX as f64)));
        assert_eq!(value_at(&big, 1), Some(Value::Int(7)));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        assert_eq!(value_at(&text, 0), Some(Value::Str("a".into())));
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true]));
        assert_eq!(value_at(&flags, 0), Some(Value::Bool(true)));
        assert_eq!(kind_of(&DataType::Float16), Some("number"));
        assert_eq!(kind_of(&DataType::Binary), None);
    }

    #[test]
    fn hive_folders_are_partitions() {
        assert_eq!(
            hive_partitions("region=a/year=2024/part-0.parquet"),
            vec![
                ("region".to_string(), Some("a".to_string())),
                ("year".to_string(), Some("2024".to_string()))
            ]
        );
        assert_eq!(
            hive_partitions("k=__HIVE_DEFAULT_PARTITION__/x=1.parquet"),
            vec![("k".to_string(), None)]
        );
        assert!(hive_partitions("part-0.parquet").is_empty());
    }

    #[test]
    fn delta_statistics_become_ranges() {
        let json: serde_json::Value = serde_json::from_str(
            r#"{"numRecords":12,"minValues":{"depth":100,"sample":"cube-002","t":"2024-01-01"},"maxValues":{"depth":330,"sample":"cube-023"},"nullCount":{"depth":0}}"#,
        )
        .unwrap();
        let s = delta_stats(&json, "depth", Some(&Value::Int(1))).unwrap();
        assert_eq!(
            s,
            Stats {
                min: Some(Value::Int(100)),
                max: Some(Value::Int(330)),
                nulls: Some(0),
                rows: Some(12)
            }
        );
        // A string statistic compares only with string literals.
        let s = delta_stats(&json, "t", Some(&Value::Int(1))).unwrap();
        assert_eq!((s.min, s.rows), (None, Some(12)));
        assert!(
            delta_stats(&json, "sample", Some(&Value::Str(String::new())))
                .unwrap()
                .max
                .is_some()
        );
    }
}
