//! Every read row's values of a few small columns (a label, a weight, an id), in table order:
//! what a sampler weighs or splits rows by before the first epoch. Only those columns' chunks
//! are fetched; a partition column's values come from the log.

use std::ops::Range;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::Schema;
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::arrow::push_decoder::ParquetPushDecoderBuilder;

use crate::error::TableError;
use crate::scan::Scan;
use crate::snapshot::{Snapshot, column_at_path, root_of};

/// The most bytes of a file's chunks fetched ahead of their decode in one go; more are
/// fetched row group by row group as the decoder asks.
const PREFETCH_BYTES: u64 = 64 << 20;

impl Scan {
    /// The values of `columns` in every row the scan reads (not deleted, selected by its
    /// filter), file by file in the scan's order, each file's rows in file order: per column,
    /// one array per file. A column the table lacks is an error naming it.
    pub async fn column_values(&self, columns: &[&str]) -> Result<Vec<Vec<ArrayRef>>, TableError> {
        let scan = self;
        let snapshot = scan.snapshot();
        let schema = snapshot.schema().clone();
        let partitions: Vec<&str> = snapshot.files().partition_columns().collect();
        for &c in columns {
            if !partitions.contains(&c) && schema.field_with_name(c).is_err() {
                return Err(TableError::Incompatible {
                    location: snapshot.location().to_string(),
                    reason: format!(
                        "no column '{c}' (the table has {:?})",
                        schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
                    ),
                });
            }
        }
        let partitions = &partitions;
        let per_file: Vec<Vec<ArrayRef>> = futures::stream::iter(0..scan.files().len())
            .map(|index| async move {
                let meta = scan.reader_metadata(index).await?;
                let mut selected = Vec::with_capacity(meta.metadata().num_row_groups());
                for g in 0..meta.metadata().num_row_groups() {
                    selected.push(scan.selected_rows(index, g).await?);
                }
                let at = scan.at(index)?;
                let file = FileRows {
                    index: at,
                    meta: &meta,
                    selected: &selected,
                };
                snapshot.values_in_file(file, columns, partitions).await
            })
            .buffered(crate::READ_CONCURRENCY)
            .try_collect()
            .await?;
        Ok((0..columns.len())
            .map(|c| per_file.iter().map(|f| f[c].clone()).collect())
            .collect())
    }
}

/// The rows read of one file: the snapshot's file `index`, its footer `meta`, per row group
/// its selected rows (`None`: all).
struct FileRows<'a> {
    index: usize,
    meta: &'a ArrowReaderMetadata,
    selected: &'a [Option<std::sync::Arc<[u32]>>],
}

impl Snapshot {
    /// `columns`' values in the read rows of a file.
    async fn values_in_file(
        &self,
        file: FileRows<'_>,
        columns: &[&str],
        partitions: &[&str],
    ) -> Result<Vec<ArrayRef>, TableError> {
        let FileRows {
            index,
            meta,
            selected,
        } = file;
        let perr = |e| self.file_error(index, e);
        let groups = meta.metadata().row_groups();
        // The read rows: per row group those kept, as rows of the file.
        let mut kept = Vec::new();
        let mut first = 0u64;
        let mut every = true;
        for (g, rg) in groups.iter().enumerate() {
            let n = rg.num_rows().max(0) as u64;
            match &selected[g] {
                Some(rows) => {
                    every = false;
                    kept.extend(rows.iter().map(|&r| first + u64::from(r)));
                }
                None => kept.extend(first..first + n),
            }
            first += n;
        }
        let logical = self.logical_schema(meta);
        let table = self.schema();
        let in_file: Vec<&str> = columns
            .iter()
            .copied()
            .filter(|c| !partitions.contains(c))
            .collect();
        let mut roots: Vec<usize> = in_file
            .iter()
            .filter_map(|c| logical.index_of(root_of(table, c)).ok())
            .collect();
        roots.sort_unstable();
        roots.dedup();
        let all = if in_file.is_empty() {
            RecordBatch::new_empty(std::sync::Arc::new(Schema::empty()))
        } else {
            let groups = (0..groups.len()).collect();
            self.projected_rows(index, meta, roots, groups).await?
        };
        if !in_file.is_empty() && all.num_rows() as u64 != first {
            return Err(TableError::Corrupt {
                location: self.location().to_string(),
                file: self.path_of(index).to_string(),
                reason: format!(
                    "its columns {in_file:?} hold {} rows, the footer's row groups {first}",
                    all.num_rows()
                ),
            });
        }
        let take = (!every).then(|| UInt64Array::from(kept.clone()));
        let file = self.files().at(index);
        columns
            .iter()
            .map(|&c| {
                let values: ArrayRef = if partitions.contains(&c) {
                    let data_type = self
                        .partition_type(c)
                        .cloned()
                        .unwrap_or(arrow_schema::DataType::Utf8);
                    return voxlake_delta::partition_column(
                        file.partition(c).flatten(),
                        &data_type,
                        kept.len(),
                    )
                    .map_err(|e| self.partition_error(index, c, e));
                } else {
                    column_at_path(&all, c).ok_or_else(|| TableError::Corrupt {
                        location: self.location().to_string(),
                        file: self.path_of(index).to_string(),
                        reason: format!("column '{c}' is not in the file"),
                    })?
                };
                match &take {
                    Some(indices) => arrow_select::take::take(values.as_ref(), indices, None)
                        .map_err(|e| {
                            perr(parquet::errors::ParquetError::ArrowError(e.to_string()))
                        }),
                    None => Ok(values),
                }
            })
            .collect::<Result<Vec<ArrayRef>, TableError>>()
    }

    /// The columns whose roots in the file are `roots`, of row groups `groups` of file `index`
    /// (whose metadata is `meta`), as one batch named as the table names them.
    pub(crate) async fn projected_rows(
        &self,
        index: usize,
        meta: &ArrowReaderMetadata,
        roots: Vec<usize>,
        groups: Vec<usize>,
    ) -> Result<RecordBatch, TableError> {
        let perr = |e| self.file_error(index, e);
        let descr = meta.metadata().file_metadata().schema_descr();
        let mask = ProjectionMask::roots(descr, roots);
        // Every chunk asked for, fetched at once where they are small (object_store coalesces
        // neighbours): a file of many small row groups is a few reads, not one a row group.
        let ranges: Vec<Range<u64>> = groups
            .iter()
            .flat_map(|&g| {
                let rg = meta.metadata().row_group(g);
                (0..rg.num_columns())
                    .filter(|&c| mask.leaf_included(c))
                    .map(move |c| {
                        let (start, length) = rg.column(c).byte_range();
                        start..start.saturating_add(length)
                    })
            })
            .collect();
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let decoder = ParquetPushDecoderBuilder::new_with_metadata(meta.clone())
            .with_projection(mask)
            .with_row_groups(groups)
            .with_batch_size(8192)
            .build()
            .map_err(perr)?;
        let mut timings = crate::snapshot::ReadTimings::default();
        let ahead = match total <= PREFETCH_BYTES {
            true => {
                let data = self.fetch(index, ranges.clone(), &mut timings).await?;
                crate::snapshot::Ahead::new(ranges, data)
            }
            false => crate::snapshot::Ahead::default(),
        };
        let hooks = crate::hooks::Hooks::default();
        let batches = self
            .decode_projected(index, decoder, &hooks, &mut timings, ahead)
            .await?;
        let schema = batches
            .first()
            .map(RecordBatch::schema)
            .unwrap_or_else(|| std::sync::Arc::new(Schema::empty()));
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| perr(parquet::errors::ParquetError::ArrowError(e.to_string())))
    }

    fn partition_error(&self, index: usize, column: &str, e: impl std::fmt::Display) -> TableError {
        TableError::Corrupt {
            location: self.location().to_string(),
            file: self.path_of(index).to_string(),
            reason: format!("partition value of '{column}': {e}"),
        }
    }
}
