//! A decoded row group as the stream hands it out, holding its share of the memory budget.

use std::sync::Arc;

use arrow_array::RecordBatch;
use tokio::sync::OwnedSemaphorePermit;
use voxlake_table::rows::copy_rows;

use crate::error::StreamError;
use crate::kept::{Checks, Kept, KeptGroup, Share, Whole, keep_key};
use voxlake_plan::order::Unit;

/// A decoded row group, with its share of the memory budget: the budget is given back when
/// the last clone of this value is dropped (or kept with the row group for the next epoch's
/// read of it, while no read waits for budget).
#[derive(Debug, Clone)]
pub struct RowGroupBatch {
    /// The projected columns of the row group (of some of its rows after [`take`](Self::take)).
    pub batch: RecordBatch,
    /// The unit read: file, row group, and the rows of it this rank keeps.
    pub unit: Arc<Unit>,
    /// The unit's index in the rank's reading order for the epoch.
    pub position: u64,
    /// `None` while `batch` holds every row of the row group; after [`take`](Self::take), row
    /// `i` of `batch` is row `rows[i]` of the row group.
    rows: Option<Arc<[u64]>>,
    share: Arc<Share>,
    /// Under a filter: the row group's first row in the file and the rows of it selected
    /// (the unit's rows count only those).
    file_rows: Option<(u64, Option<Arc<[u32]>>)>,
    /// Where the consumer checks each row before it uses it ([`check_row`](Self::check_row)).
    checks: Checks,
}

impl RowGroupBatch {
    pub(crate) fn new(
        batch: RecordBatch,
        unit: Arc<Unit>,
        position: u64,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        RowGroupBatch {
            batch,
            unit,
            position,
            rows: None,
            share: Arc::new(Share::new(permit)),
            file_rows: None,
            checks: None,
        }
    }

    /// Rows `rows` of `unit`'s row group (row `i` of `batch` is row `rows[i]`), read alone
    /// and checked: never kept for another read.
    pub(crate) fn of_rows(
        batch: RecordBatch,
        unit: Arc<Unit>,
        position: u64,
        permit: OwnedSemaphorePermit,
        rows: Arc<[u64]>,
    ) -> Self {
        RowGroupBatch {
            rows: Some(rows),
            ..RowGroupBatch::new(batch, unit, position, permit)
        }
    }

    /// A row group kept since an earlier read of it, as `unit` at `position`.
    pub(crate) fn from_kept(
        group: KeptGroup,
        unit: Arc<Unit>,
        position: u64,
        kept: &Arc<Kept>,
    ) -> Self {
        let KeptGroup { whole, permit } = group;
        let mut batch = RowGroupBatch::new(whole.batch, unit, position, permit);
        batch.file_rows = whole.file_rows;
        batch.checks = whole.checks;
        batch.kept_in(kept)
    }

    /// Has the row group kept in `kept` when its last clone is dropped.
    pub(crate) fn kept_in(mut self, kept: &Arc<Kept>) -> Self {
        if self.rows.is_none() {
            let group = Whole {
                batch: self.batch.clone(),
                file_rows: self.file_rows.clone(),
                checks: self.checks.clone(),
            };
            Share::keep_in(&mut self.share, kept, keep_key(&self.unit), group);
        }
        self
    }

    /// The row group `share` holds (a whole one, read for another unit still in use), as
    /// `unit` at `position`: its memory and budget share are that read's.
    pub(crate) fn sharing(share: Arc<Share>, unit: Arc<Unit>, position: u64) -> Option<Self> {
        let whole = share.whole()?;
        Some(RowGroupBatch {
            batch: whole.batch,
            unit,
            position,
            rows: None,
            file_rows: whole.file_rows,
            share,
            checks: whole.checks,
        })
    }

    /// Index of the file in the snapshot.
    pub fn file(&self) -> usize {
        self.unit.file
    }

    /// The row group inside the file.
    pub fn row_group(&self) -> usize {
        self.unit.row_group
    }

    /// The row of the row group at index `i` of [`batch`](Self::batch).
    pub fn row_in_group(&self, i: usize) -> Option<u64> {
        match &self.rows {
            None => (i < self.batch.num_rows()).then_some(i as u64),
            Some(rows) => rows.get(i).copied(),
        }
    }

    /// The index in [`batch`](Self::batch) of row `row` of the row group, if it holds it.
    pub fn index_of_row(&self, row: u64) -> Option<usize> {
        match &self.rows {
            None => (row < self.batch.num_rows() as u64).then_some(row as usize),
            Some(rows) => rows.binary_search(&row).ok(),
        }
    }

    /// Only the rows at `indices` (ascending) of [`batch`](Self::batch), copied out of the row group's
    /// buffers so that the rest of it is freed, with the budget share shrunk in proportion
    /// (kept whole while another clone shares it). The loader's shuffle buffer does this to the
    /// few rows a row group has left, so its memory follows the rows it buffers.
    pub fn take(self, indices: &[u64]) -> Result<RowGroupBatch, StreamError> {
        let fail = |e: String| {
            StreamError::Internal(format!(
                "copying {} rows out of row group {} of file #{}: {e}",
                indices.len(),
                self.unit.row_group,
                self.unit.file
            ))
        };
        if indices.windows(2).any(|w| w[0] >= w[1]) {
            return Err(fail("indices not ascending".into()));
        }
        let rows: Arc<[u64]> = indices
            .iter()
            .map(|&i| self.row_in_group(i as usize))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| fail(format!("an index past its {} rows", self.batch.num_rows())))?
            .into();
        let batch = copy_rows(&self.batch, indices).map_err(|e| fail(e.to_string()))?;
        // The copy's rows are checked as they are used, like the row group's.
        let checks = match &self.checks {
            Some(checks) => checks.for_copy(&batch)?.map(Arc::new),
            None => None,
        };
        let total = self.batch.num_rows().max(1);
        let share = match Arc::try_unwrap(self.share) {
            Ok(share) => Arc::new(share.for_rows(indices.len(), total)),
            Err(shared) => shared,
        };
        Ok(RowGroupBatch {
            batch,
            unit: self.unit,
            position: self.position,
            rows: Some(rows),
            share,
            file_rows: self.file_rows,
            checks,
        })
    }

    /// The row in the file of row `i` of [`batch`](Self::batch) (lineage): under a filter the
    /// row group holds only its selected rows, and this maps them back.
    pub fn file_row(&self, i: usize) -> Option<u64> {
        let row = self.row_in_group(i)?;
        match &self.file_rows {
            None => Some(self.unit.first_row + row),
            Some((first, None)) => Some(first + row),
            Some((first, Some(selected))) => {
                Some(first + u64::from(*selected.get(usize::try_from(row).ok()?)?))
            }
        }
    }

    /// Checks row `i` of [`batch`](Self::batch) against its checksum where the stream leaves
    /// that to its consumer ([`Verify::OnUse`](crate::Verify::OnUse); else there is nothing
    /// left to check): a row found whole is not read again, a corrupt one is an error naming
    /// file, row group, row and id, each time it is checked.
    pub fn check_row(&self, i: usize) -> Result<(), StreamError> {
        match &self.checks {
            Some(checks) => Ok(checks.check(i)?),
            None => Ok(()),
        }
    }

    /// Has the consumer check the rows with `checks` ([`check_row`](Self::check_row)).
    pub(crate) fn with_checks(mut self, checks: Checks) -> Self {
        self.checks = checks;
        self
    }

    /// Marks the batch as the rows `selected` (all: `None`) of its row group, whose first row
    /// is `first_row` of the file: a filtered snapshot's units count selected rows only.
    pub(crate) fn with_file_rows(mut self, first_row: u64, selected: Option<Arc<[u32]>>) -> Self {
        self.file_rows = Some((first_row, selected));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::{BinaryViewArray, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use tokio::sync::Semaphore;

    fn group(budget: &Arc<Semaphore>, kib: u32) -> RowGroupBatch {
        let tensors: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 4096]).collect();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Utf8, false),
                Field::new("label", DataType::Int64, true),
                Field::new("tensor", DataType::BinaryView, false),
            ])),
            vec![
                Arc::new(StringArray::from_iter_values(
                    (0..8).map(|i| format!("s{i}")),
                )),
                Arc::new(Int64Array::from_iter_values(0..8)),
                Arc::new(BinaryViewArray::from_iter_values(tensors.iter())),
            ],
        )
        .unwrap();
        let unit = Unit {
            file: 2,
            row_group: 1,
            first_row: 8,
            rows: 8,
            draws: std::iter::once(0..8).collect(),
            pad: false,
        };
        let permit = budget.clone().try_acquire_many_owned(kib).unwrap();
        RowGroupBatch::new(batch, Arc::new(unit), 0, permit)
    }

    #[test]
    fn taken_rows_are_copied_and_give_their_budget_back() {
        let budget = Arc::new(Semaphore::new(100));
        let whole = group(&budget, 40);
        let data_before = whole.batch.column(2).as_binary_view().data_buffers()[0].len();
        let two = whole.take(&[1, 6]).unwrap();
        assert_eq!(budget.available_permits(), 90, "a quarter of 40 KiB kept");
        let tensors = two.batch.column(2).as_binary_view();
        assert_eq!(tensors.value(0), &[1u8; 4096][..]);
        assert_eq!(tensors.value(1), &[6u8; 4096][..]);
        let data_after: usize = tensors.data_buffers().iter().map(|b| b.len()).sum();
        assert!(data_after <= 2 * 4096 && data_after < data_before);
        assert_eq!(two.batch.column(0).as_string::<i32>().value(1), "s6");
        assert_eq!(
            (two.row_in_group(0), two.row_in_group(1)),
            (Some(1), Some(6))
        );
        assert_eq!(two.row_in_group(2), None);
        assert_eq!((two.index_of_row(6), two.index_of_row(2)), (Some(1), None));
        // Taking again composes the row numbers.
        let one = two.take(&[1]).unwrap();
        assert_eq!(one.row_in_group(0), Some(6));
        assert_eq!(budget.available_permits(), 95);
        drop(one);
        assert_eq!(budget.available_permits(), 100);
    }

    #[test]
    fn a_shared_group_keeps_its_share_and_bad_indices_are_errors() {
        let budget = Arc::new(Semaphore::new(100));
        let whole = group(&budget, 40);
        let clone = whole.clone();
        let two = whole.take(&[0, 1]).unwrap();
        assert_eq!(
            budget.available_permits(),
            60,
            "the clone still holds the row group"
        );
        drop((two, clone));
        assert_eq!(budget.available_permits(), 100);
        let err = group(&budget, 8).take(&[3, 9]).unwrap_err().to_string();
        assert!(err.contains("row group 1 of file #2"), "{err}");
        let err = group(&budget, 8).take(&[3, 1]).unwrap_err().to_string();
        assert!(err.contains("not ascending"), "{err}");
    }
}
