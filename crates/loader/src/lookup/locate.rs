//! Where a lookup's positions are (file, row group, row: the row groups' row counts from the
//! footers, cached per file), the unit that reads a row group whole, and how many row groups
//! a take may read at once in the memory budget.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use voxlake_plan::order::Unit;
use voxlake_stream::StreamError;
use voxlake_table::TableError;

use super::Lookup;
use crate::LoaderError;

/// Per file looked up so far: the position in the file of each row group's first row.
pub(super) type GroupStarts = std::collections::HashMap<usize, Arc<[u64]>>;

/// Row groups a take reads at once, at most: a remote store's round trip is hidden behind
/// the others in flight (each within the budget at a whole row group's peak).
const MOST_READS: u64 = 64;

/// Where an asked row is: the file, its row group, the row among those the row group reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub file: usize,
    pub row_group: usize,
    pub row: u64,
}

impl Lookup {
    /// Where each of `positions` is; [`TableError::NoRow`] for the first past the rows.
    pub(super) async fn locate(&self, positions: &[u64]) -> Result<Vec<Place>, LoaderError> {
        let total = self.len();
        if let Some(&position) = positions.iter().find(|&&p| p >= total) {
            let snapshot = self.stream.scan().snapshot();
            return Err(LoaderError::Stream(StreamError::Table(TableError::NoRow {
                location: snapshot.location().to_string(),
                position,
                rows: total,
                version: snapshot.version(),
            })));
        }
        // The last file whose first row is at or before p (a file of no rows starts where the
        // next does); p is below the total, so never the end.
        let starts = &self.starts;
        let file_of = |p: u64| starts.partition_point(|&s| s <= p) - 1;
        let mut files: Vec<usize> = positions.iter().map(|&p| file_of(p)).collect();
        files.sort_unstable();
        files.dedup();
        let firsts: Vec<(usize, Arc<[u64]>)> = futures::stream::iter(files)
            .map(|file| async move { Ok::<_, LoaderError>((file, self.group_starts(file).await?)) })
            .buffered(voxlake_table::READ_CONCURRENCY)
            .try_collect()
            .await?;
        positions
            .iter()
            .map(|&p| {
                let file = file_of(p);
                let within = p - starts[file];
                let at = firsts.binary_search_by_key(&file, |(f, _)| *f);
                let groups = at
                    .map(|i| &firsts[i].1)
                    .map_err(|_| LoaderError::Internal(format!("file #{file} was not located")))?;
                let row_group = groups.partition_point(|&s| s <= within) - 1;
                Ok(Place {
                    file,
                    row_group,
                    row: within - groups[row_group],
                })
            })
            .collect()
    }

    /// The position in file `file` of each of its row groups' first row read (a row group
    /// of no rows starts where the next does; read from the footer once).
    async fn group_starts(&self, file: usize) -> Result<Arc<[u64]>, LoaderError> {
        if let Some(known) = self.groups_lock()?.get(&file) {
            return Ok(known.clone());
        }
        let rows = self.stream.row_group_rows(file).await?;
        let mut at = 0u64;
        let starts: Arc<[u64]> = rows
            .iter()
            .map(|&r| {
                let start = at;
                at += r;
                start
            })
            .collect();
        self.groups_lock()?.insert(file, starts.clone());
        Ok(starts)
    }

    fn groups_lock(&self) -> Result<std::sync::MutexGuard<'_, GroupStarts>, LoaderError> {
        self.groups
            .lock()
            .map_err(|_| LoaderError::Internal("the row groups' lock".into()))
    }

    /// The unit that reads row group `row_group` of file `file` whole.
    pub(super) async fn unit(&self, file: usize, row_group: usize) -> Result<Unit, LoaderError> {
        let starts = self.group_starts(file).await?;
        let first_row = starts.get(row_group).copied().ok_or_else(|| {
            LoaderError::Internal(format!("row group {row_group} of file #{file}"))
        })?;
        let end = starts
            .get(row_group + 1)
            .copied()
            .unwrap_or(self.starts[file + 1] - self.starts[file]);
        let rows = end - first_row;
        Ok(Unit {
            file,
            row_group,
            rows,
            first_row,
            draws: std::iter::once(0..rows).collect(),
            pad: false,
        })
    }

    /// How many of `reads` (file, row group, rows asked) to read at once: the asked rows
    /// (`asked` in all, copied out of their row groups) and the batch made of them held in the
    /// budget beside the row groups in flight, each at its peak. Rows that leave no room for
    /// one row group are refused, not waited for.
    pub(super) async fn check_budget(
        &self,
        asked: usize,
        reads: &[(usize, usize, Vec<u64>)],
    ) -> Result<usize, LoaderError> {
        let mut peak = 0u64;
        let mut files: Vec<usize> = reads.iter().map(|r| r.0).collect();
        files.sort_unstable();
        files.dedup();
        for file in files {
            let budgets = self.stream.group_budgets(file).await?;
            for (_, row_group, _) in reads.iter().filter(|r| r.0 == file) {
                peak = peak.max(budgets.get(*row_group).map_or(0, |b| b.peak));
            }
        }
        let sample = self.sample_bytes.max(1);
        let held = 2 * asked as u64 * sample;
        let budget = self.stream.row_group_budget();
        match budget.checked_sub(held) {
            Some(room) if reads.len() <= 1 || room >= peak => {
                Ok((room / peak.max(1)).clamp(1, MOST_READS) as usize)
            }
            _ => Err(LoaderError::Config(format!(
                "a take of {asked} rows holds {held} bytes beside a row group's read ({peak} bytes), more than the memory budget's {budget} bytes for reads: take fewer rows at a time, or raise the memory budget"
            ))),
        }
    }
}
