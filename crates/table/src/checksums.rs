//! Row checksums (`row_crc32`) checked row by row: [`RowChecks`] holds a decoded row group's
//! columns that a row's checksum covers, and remembers the rows it has found whole, so a row
//! is checked once however often it is used (a row group kept from one epoch to the next).
//!
//! A read checks every row it returns ([`Scan::read_row_group_hooked`](crate::Scan::read_row_group_hooked) with `verify`);
//! a reader that copies rows out itself may check each just before its copy instead
//! ([`Scan::row_checks`](crate::Scan::row_checks)): the row's bytes are then read from memory once, into the cache
//! the copy reads them from.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::{Array, ArrayRef, BinaryArray, BinaryViewArray, Int64Array, RecordBatch};
use arrow_array::{StringArray, StringViewArray};
use voxlake_format::{CHECKSUM_COLUMN, ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};

use crate::error::TableError;
use crate::snapshot::Snapshot;

/// The columns of a decoded row group that its rows' checksums cover, and which rows were found
/// whole. Shared by every holder of the row group (its rows are checked once).
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{BinaryViewArray, Int64Array, RecordBatch, StringArray};
/// use voxlake_table::checksums::RowChecks;
///
/// let (id, label, tensor) = ("a", Some(1), [1u8, 2, 3]);
/// let sum = voxlake_format::row_checksum(id, label, &tensor);
/// let batch = RecordBatch::try_from_iter([
///     ("id", Arc::new(StringArray::from(vec![id, id])) as _),
///     ("label", Arc::new(Int64Array::from(vec![1, 1])) as _),
///     ("tensor", Arc::new(BinaryViewArray::from(vec![&tensor[..], &[1, 2, 4][..]])) as _),
///     ("row_crc32", Arc::new(Int64Array::from(vec![sum, sum])) as _),
/// ])
/// .unwrap();
/// let checks = RowChecks::new(&batch, &["tensor".into()], "table", "part-0.parquet", 0)
///     .unwrap()
///     .unwrap();
/// assert!(checks.check(0).is_ok());
/// let err = checks.check(1).unwrap_err().to_string();
/// assert!(err.contains("part-0.parquet") && err.contains("row 1"), "{err}");
/// ```
#[derive(Debug)]
pub struct RowChecks {
    location: Arc<str>,
    file: Arc<str>,
    row_group: usize,
    /// The field names covered, in the table's order (for a copy's own checks).
    fields: Arc<[String]>,
    sums: Int64Array,
    ids: StringArray,
    labels: Int64Array,
    tensors: Vec<ArrayRef>,
    /// One bit per row: found whole.
    whole: Box<[AtomicU64]>,
}

impl RowChecks {
    /// The checks of `batch`'s rows (row group `row_group` of `file` in the table at
    /// `location`), over id, label and the `fields` in order; `None` where the batch has no
    /// checksum column (files written before it). The columns a checksum covers missing is a
    /// [`TableError::Corrupt`]: a projection that reads the checksum brings them with it.
    pub fn new(
        batch: &RecordBatch,
        fields: &[String],
        location: &str,
        file: &str,
        row_group: usize,
    ) -> Result<Option<Self>, TableError> {
        let column = |name: &str| batch.column_by_name(name);
        let Some(sums) = column(CHECKSUM_COLUMN) else {
            return Ok(None);
        };
        let sums = sums.as_any().downcast_ref::<Int64Array>().cloned();
        let ids = column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let labels =
            column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
        let tensors: Option<Vec<ArrayRef>> = fields.iter().map(|f| column(f).cloned()).collect();
        let (Some(sums), Some(ids), Some(labels), Some(tensors)) = (sums, ids, labels, tensors)
        else {
            return Err(TableError::Corrupt {
                location: location.to_string(),
                file: file.to_string(),
                reason: format!(
                    "row group {row_group}: {CHECKSUM_COLUMN} cannot be checked: {ID_COLUMN} (Utf8), {LABEL_COLUMN} (Int64), {} and {CHECKSUM_COLUMN} (Int64) must all be read",
                    fields.join(", ")
                ),
            });
        };
        let words = batch.num_rows().div_ceil(64);
        Ok(Some(RowChecks {
            location: location.into(),
            file: file.into(),
            row_group,
            fields: fields.into(),
            sums,
            ids,
            labels,
            tensors,
            whole: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }))
    }

    /// The same checks for `batch`, a copy of some of the rows (none found whole yet).
    pub fn for_copy(&self, batch: &RecordBatch) -> Result<Option<Self>, TableError> {
        RowChecks::new(
            batch,
            &self.fields,
            &self.location,
            &self.file,
            self.row_group,
        )
    }

    /// Checks row `row` (once: a row found whole is not read again). A mismatch is a
    /// [`TableError::Corrupt`] naming the file, row group, row and id.
    pub fn check(&self, row: usize) -> Result<(), TableError> {
        let (word, bit) = (row / 64, 1u64 << (row % 64));
        let Some(done) = self.whole.get(word).filter(|_| row < self.sums.len()) else {
            return Err(self.corrupt(format!("row {row} checked, of {} rows", self.sums.len())));
        };
        if done.load(Ordering::Acquire) & bit != 0 {
            return Ok(());
        }
        if !self.sums.is_null(row) && !self.ids.is_null(row) {
            let label = (!self.labels.is_null(row)).then(|| self.labels.value(row));
            let parts: Vec<&[u8]> = self.tensors.iter().map(|t| value(t, row)).collect();
            let id = self.ids.value(row);
            let (want, got) = (
                self.sums.value(row),
                voxlake_format::row_checksum_of(id, label, &parts),
            );
            if want != got {
                return Err(self.corrupt(format!(
                    "row {row} ({id}): its CRC-32 is {got:08x}, the table recorded {want:08x} (corrupt data)"
                )));
            }
        }
        done.fetch_or(bit, Ordering::Release);
        Ok(())
    }

    /// Checks every row, in order; the first mismatch is the error.
    pub fn check_all(&self) -> Result<(), TableError> {
        (0..self.sums.len()).try_for_each(|row| self.check(row))
    }

    fn corrupt(&self, what: String) -> TableError {
        TableError::Corrupt {
            location: self.location.to_string(),
            file: self.file.to_string(),
            reason: format!("row group {}, {what}", self.row_group),
        }
    }
}

/// Row `i`'s bytes in a column a checksum covers (empty for a type it does not cover).
fn value(array: &ArrayRef, i: usize) -> &[u8] {
    let any = array.as_any();
    if let Some(views) = any.downcast_ref::<BinaryViewArray>() {
        views.value(i)
    } else if let Some(plain) = any.downcast_ref::<BinaryArray>() {
        plain.value(i)
    } else if let Some(text) = any.downcast_ref::<StringArray>() {
        text.value(i).as_bytes()
    } else if let Some(text) = any.downcast_ref::<StringViewArray>() {
        text.value(i).as_bytes()
    } else {
        &[]
    }
}

impl Snapshot {
    /// The checks of `batch`'s rows, read from row group `row_group` of file `index` (the
    /// columns of every field the table stores, with id, label and the checksum): `None` where
    /// the file has no checksums.
    pub(crate) fn row_checks(
        &self,
        index: usize,
        row_group: usize,
        batch: &RecordBatch,
    ) -> Result<Option<RowChecks>, TableError> {
        // The checksum covers every field the table stores, in order.
        let fields: Vec<String> = self
            .stored_sample()
            .map(|s| s.fields().iter().map(|f| f.name.clone()).collect())
            .unwrap_or_else(|| vec![TENSOR_COLUMN.to_string()]);
        RowChecks::new(
            batch,
            &fields,
            self.location(),
            self.path_of(index),
            row_group,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(rows: usize, corrupt: Option<usize>) -> RecordBatch {
        let ids: Vec<String> = (0..rows).map(|i| format!("s{i}")).collect();
        let tensors: Vec<Vec<u8>> = (0..rows).map(|i| vec![i as u8; 100]).collect();
        let sums: Vec<i64> = (0..rows)
            .map(|i| {
                let sum = voxlake_format::row_checksum(&ids[i], Some(i as i64), &tensors[i]);
                if Some(i) == corrupt { sum ^ 1 } else { sum }
            })
            .collect();
        RecordBatch::try_from_iter([
            ("id", Arc::new(StringArray::from(ids)) as ArrayRef),
            (
                "label",
                Arc::new(Int64Array::from_iter_values(0..rows as i64)) as _,
            ),
            (
                "tensor",
                Arc::new(BinaryViewArray::from_iter_values(tensors.iter())) as _,
            ),
            ("row_crc32", Arc::new(Int64Array::from(sums)) as _),
        ])
        .unwrap()
    }

    /// Every row of a whole batch passes (past 64 rows: the second word of bits); a corrupt
    /// one fails each time it is checked, named; a copy's checks start afresh.
    #[test]
    fn rows_are_checked_once_and_a_corrupt_one_every_time() {
        let fields = ["tensor".to_string()];
        let good = RowChecks::new(&batch(130, None), &fields, "t", "f", 3)
            .unwrap()
            .unwrap();
        good.check_all().unwrap();
        assert!(
            good.whole
                .iter()
                .map(|w| w.load(Ordering::Relaxed).count_ones())
                .sum::<u32>()
                == 130
        );
        let bad = RowChecks::new(&batch(70, Some(66)), &fields, "t", "f", 3)
            .unwrap()
            .unwrap();
        for _ in 0..2 {
            let e = bad.check(66).unwrap_err().to_string();
            assert!(
                e.contains("row group 3, row 66 (s66)") && e.contains("corrupt"),
                "{e}"
            );
        }
        assert!(bad.check(65).is_ok());
        assert!(bad.check(70).is_err(), "a row past the batch");
        let copy = bad.for_copy(&batch(2, None)).unwrap().unwrap();
        assert_eq!(
            copy.whole
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .sum::<u64>(),
            0
        );
        copy.check_all().unwrap();
        // No checksum column: nothing to check; one without the columns it covers: an error.
        let plain = batch(3, None).project(&[0, 1, 2]).unwrap();
        assert!(
            RowChecks::new(&plain, &fields, "t", "f", 0)
                .unwrap()
                .is_none()
        );
        let partial = batch(3, None).project(&[0, 3]).unwrap();
        let e = RowChecks::new(&partial, &fields, "t", "f", 0).unwrap_err();
        assert!(e.to_string().contains("cannot be checked"), "{e}");
    }
}
