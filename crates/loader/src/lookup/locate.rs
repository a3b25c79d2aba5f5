//! Where a lookup's positions are (the scan's places), the unit that reads a row group (its
//! first row and rows: the scan's row group starts), and how many row groups a take may read
//! at once in the memory budget.

use voxlake_plan::order::Unit;
use voxlake_stream::StreamError;
use voxlake_table::RowPlace;

use super::Lookup;
use crate::LoaderError;

/// Row groups a take reads at once, at most: a remote store's round trip is hidden behind
/// the others in flight (each within the budget at a whole row group's peak).
const MOST_READS: u64 = 64;

impl Lookup {
    /// Where each of `positions` is (`voxlake_table::Scan::places`);
    /// [`TableError::NoRow`](voxlake_table::TableError::NoRow) for the first past the rows.
    pub(super) async fn locate(&self, positions: &[u64]) -> Result<Vec<RowPlace>, LoaderError> {
        Ok(self
            .stream
            .scan()
            .places(positions)
            .await
            .map_err(StreamError::from)?)
    }

    /// The unit that reads row group `row_group` of file `file` whole.
    pub(super) async fn unit(&self, file: usize, row_group: usize) -> Result<Unit, LoaderError> {
        let starts = self
            .stream
            .scan()
            .row_group_starts(file)
            .await
            .map_err(StreamError::from)?;
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
            let groups: Vec<usize> = reads.iter().filter(|r| r.0 == file).map(|r| r.1).collect();
            for budget in self.stream.row_group_budgets(file, &groups).await? {
                peak = peak.max(budget.peak);
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
