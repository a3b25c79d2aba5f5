//! A scan's rows by their positions ([`Scan::take`]): each position located in its file and
//! row group by the row counts the snapshot holds and the footers, only the row groups that
//! hold an asked row read, each once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use futures::{StreamExt, TryStreamExt};

use super::Scan;
use crate::error::TableError;

/// Where a row of a scan is ([`Scan::places`]): the scan's file, its row group, the row among
/// those the row group reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct RowPlace {
    /// The scan's file.
    pub file: usize,
    /// The row group in the file.
    pub row_group: usize,
    /// The row among those the row group reads ([`Scan::selected_rows`]).
    pub row: usize,
}

impl Scan {
    /// The rows at `positions`, in the order asked (a position may be asked more than once),
    /// as one batch of the scan's [`columns`](Self::columns).
    ///
    /// A scan's rows are numbered `0..num_rows()` in an order its version fixes: file after
    /// file as [`files`](Self::files) numbers them, row group after row group, and in each the
    /// rows it reads ([`selected_rows`](Self::selected_rows): none a deletion vector deletes,
    /// only those a filter selects) in the file's order. Only the row groups holding an asked
    /// row are read, each once and [`READ_CONCURRENCY`](crate::READ_CONCURRENCY) at a time,
    /// every row read checked against its checksum. A position at or past `num_rows()` is
    /// [`TableError::NoRow`], before anything is read. No positions read nothing: a batch of
    /// no rows and no columns. Every row group read is held until the batch is made (no
    /// memory budget here): ask a batch's worth of rows at a time.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), voxlake_table::TableError> {
    /// use voxlake_table::{ScanOptions, Snapshot};
    ///
    /// let scan = Snapshot::builder("az://data/cubes").build_scan(ScanOptions::default()).await?;
    /// let rows = scan.take(&[7, 0, 7]).await?;
    /// assert_eq!(rows.num_rows(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn take(&self, positions: &[u64]) -> Result<RecordBatch, TableError> {
        let places = self.places(positions).await?;
        // Each row group read once, its asked rows taken from it.
        let mut groups: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for place in &places {
            let next = groups.len();
            groups.entry((place.file, place.row_group)).or_insert(next);
        }
        let mut reads: Vec<((usize, usize), usize)> =
            groups.iter().map(|(k, v)| (*k, *v)).collect();
        reads.sort_by_key(|(_, slot)| *slot);
        let batches: Vec<RecordBatch> = futures::stream::iter(reads)
            .map(|((file, row_group), _)| async move {
                let meta = self.reader_metadata(file).await?;
                let projection = self.snapshot.projection(&meta, &self.columns)?;
                self.read_row_group(file, row_group, projection).await
            })
            .buffered(crate::READ_CONCURRENCY)
            .try_collect()
            .await?;
        let indices: Vec<(usize, usize)> = places
            .iter()
            .map(|p| (groups[&(p.file, p.row_group)], p.row))
            .collect();
        let batches: Vec<&RecordBatch> = batches.iter().collect();
        if batches.is_empty() {
            return Ok(RecordBatch::new_empty(Arc::new(Schema::empty())));
        }
        // Row groups of files written at other times may differ in their columns' types.
        arrow_select::interleave::interleave_record_batch(&batches, &indices).map_err(|e| {
            TableError::Incompatible {
                location: self.snapshot.location().to_string(),
                reason: format!("the rows taken do not make one batch: {e}"),
            }
        })
    }

    /// Where each of `positions` is (the footers of their files read, once each while cached);
    /// [`TableError::NoRow`] for the first past the scan's rows, before anything is read.
    pub async fn places(&self, positions: &[u64]) -> Result<Vec<RowPlace>, TableError> {
        let (starts, total) = (&self.starts, self.num_rows());
        if let Some(&position) = positions.iter().find(|&&p| p >= total) {
            return Err(TableError::NoRow {
                location: self.snapshot.location().to_string(),
                position,
                rows: total,
                version: self.snapshot.version(),
            });
        }
        // Per file asked: the position of each row group's first row read, from its footer
        // (the footers fetched at once).
        // The last file whose first row is at or before p (a file of no rows starts where
        // the next does); p is below the total, so never the end.
        let file_of = |p: u64| starts.partition_point(|&s| s <= p) - 1;
        let asked: BTreeSet<usize> = positions.iter().map(|&p| file_of(p)).collect();
        let group_starts: BTreeMap<usize, Arc<[u64]>> =
            futures::stream::iter(asked)
                .map(|file| async move {
                    Ok::<_, TableError>((file, self.row_group_starts(file).await?))
                })
                .buffered(crate::READ_CONCURRENCY)
                .try_collect()
                .await?;
        positions
            .iter()
            .map(|&p| {
                let file = file_of(p);
                let within = p - starts[file];
                let groups = &group_starts[&file];
                let row_group = groups.partition_point(|&s| s <= within) - 1;
                let row = within - groups[row_group];
                Ok(RowPlace {
                    file,
                    row_group,
                    row: usize::try_from(row)
                        .map_err(|_| TableError::Internal(format!("row {row} of a row group")))?,
                })
            })
            .collect()
    }

    /// The position within file `index` of each of its row groups' first row read (made once
    /// a scan); a footer whose rows read disagree with the file's count is an error.
    pub async fn row_group_starts(&self, index: usize) -> Result<Arc<[u64]>, TableError> {
        let known = |s: &Self| -> Result<Option<Arc<[u64]>>, TableError> {
            let cache = s.group_starts.lock().map_err(|_| {
                TableError::Internal("the row group starts' lock was poisoned".into())
            })?;
            Ok(cache.get(&index).cloned())
        };
        if let Some(starts) = known(self)? {
            return Ok(starts);
        }
        let footer = self.footer(index).await?;
        let mut starts = Vec::with_capacity(footer.num_row_groups() + 1);
        let mut at = 0u64;
        for (row_group, meta) in footer.row_groups().iter().enumerate() {
            starts.push(at);
            at += match self.selected_rows(index, row_group).await? {
                Some(rows) => rows.len() as u64,
                None => u64::try_from(meta.num_rows()).unwrap_or(0),
            };
        }
        let file = self.file(index)?;
        if Some(at) != file.rows() {
            return Err(TableError::Corrupt {
                location: self.snapshot.location().to_string(),
                file: file.path().to_string(),
                reason: format!(
                    "its row groups hold {at} rows read, the version counts {:?}",
                    file.rows()
                ),
            });
        }
        let starts: Arc<[u64]> = starts.into();
        if let Ok(mut cache) = self.group_starts.lock() {
            cache.insert(index, starts.clone());
        }
        Ok(starts)
    }
}
