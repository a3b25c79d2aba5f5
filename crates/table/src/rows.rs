//! Which rows of a file's row groups are read, as pure arithmetic: the rows a deletion vector
//! leaves, the rows both a vector and a filter keep, and whether a row group keeping some of
//! its rows copies them out of its pages. No I/O here; the snapshot, the selection and the
//! stream all use it.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::DataType;

use crate::filter::FilterStats;

/// Per row group of a file: its selected rows (ascending), `None` for all of them.
pub type GroupRows = Vec<Option<Arc<[u32]>>>;

/// The rows of each kept file's row groups a filter selects.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// The filter's text.
    pub text: String,
    /// Per file, per row group: the selected rows of the row group (ascending), `None` for all.
    pub rows: Vec<GroupRows>,
    pub stats: FilterStats,
}

/// The live rows of each row group (not deleted), for a file whose row groups hold `group_rows`
/// rows and whose rows `deleted` (ascending, unique) are deleted: per row group its live rows
/// (ascending rows of the row group), `None` where none is deleted. A deleted row past the file's end is an
/// error (the vector is not this file's).
pub fn live_by_group(deleted: &[u64], group_rows: &[u64]) -> Result<GroupRows, String> {
    let total: u64 = group_rows.iter().sum();
    if let Some(&last) = deleted.last()
        && last >= total
    {
        return Err(format!("it deletes row {last}, the file has {total} rows"));
    }
    let mut out = Vec::with_capacity(group_rows.len());
    let mut next = 0usize;
    let mut start = 0u64;
    for &rows in group_rows {
        let end = start + rows;
        let from = next;
        while next < deleted.len() && deleted[next] < end {
            next += 1;
        }
        let gone = &deleted[from..next];
        if gone.is_empty() {
            out.push(None);
        } else {
            let rows = u32::try_from(rows)
                .map_err(|_| format!("a row group of {rows} rows (at most 2^32 are read)"))?;
            let mut kept = Vec::with_capacity(rows as usize - gone.len());
            let mut gone = gone.iter().map(|&r| (r - start) as u32).peekable();
            for r in 0..rows {
                if gone.peek() == Some(&r) {
                    gone.next();
                } else {
                    kept.push(r);
                }
            }
            out.push(Some(kept.into()));
        }
        start = end;
    }
    Ok(out)
}

/// The rows both selections keep (`None`: all rows).
pub fn intersect(a: Option<Arc<[u32]>>, b: Option<&Arc<[u32]>>) -> Option<Arc<[u32]>> {
    match (a, b) {
        (None, None) => None,
        (Some(a), None) => Some(a),
        (None, Some(b)) => Some(b.clone()),
        (Some(a), Some(b)) => {
            let (mut i, mut j) = (0, 0);
            let mut both = Vec::with_capacity(a.len().min(b.len()));
            while i < a.len() && j < b.len() {
                match a[i].cmp(&b[j]) {
                    std::cmp::Ordering::Less => i += 1,
                    std::cmp::Ordering::Greater => j += 1,
                    std::cmp::Ordering::Equal => {
                        both.push(a[i]);
                        i += 1;
                        j += 1;
                    }
                }
            }
            Some(both.into())
        }
    }
}

/// Whether a row group of which `selected` of its `rows` rows are read (the others deleted by
/// a vector, or not selected by a filter) copies them out of its pages: when fewer than half
/// are, so its budget share shrinks with them. Otherwise the selected rows stay views into the
/// pages (a deletion vector rarely leaves fewer: a copy of most of a row group, into fresh
/// memory, cost more than half the read rate) and the group keeps its whole share.
pub fn copies_selected_rows(selected: usize, rows: usize) -> bool {
    selected * 2 < rows
}

/// The rows at `indices` of `batch`: copied out of its buffers (view columns too, which `take`
/// would leave pointing into the whole row group's pages) when
/// [`copies_selected_rows`] says so, else as views into them.
pub fn take_rows(
    batch: &RecordBatch,
    indices: &[u64],
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    if copies_selected_rows(indices.len(), batch.num_rows()) {
        copy_rows(batch, indices)
    } else {
        arrow_select::take::take_record_batch(batch, &UInt64Array::from(indices.to_vec()))
    }
}

/// The rows at `indices` of `batch`, copied out of its buffers (view columns too, which
/// `take` would leave pointing into the whole row group's pages).
pub fn copy_rows(
    batch: &RecordBatch,
    indices: &[u64],
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let taken = arrow_select::take::take_record_batch(batch, &UInt64Array::from(indices.to_vec()))?;
    gc_views(&taken)
}

/// `batch` with its view columns' bytes copied out of the buffers they point into (a row
/// group's pages), nothing else copied.
pub fn gc_views(taken: &RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let columns: Vec<ArrayRef> = taken
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::BinaryView => Arc::new(c.as_binary_view().gc()) as ArrayRef,
            DataType::Utf8View => Arc::new(c.as_string_view().gc()) as ArrayRef,
            _ => c.clone(),
        })
        .collect();
    RecordBatch::try_new(taken.schema(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::BinaryViewArray;
    use arrow_schema::{Field, Schema};
    use proptest::prelude::*;

    fn kept(groups: &[Option<Arc<[u32]>>], sizes: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut start = 0;
        for (g, &n) in groups.iter().zip(sizes) {
            match g {
                None => out.extend(start..start + n),
                Some(rows) => out.extend(rows.iter().map(|&r| start + u64::from(r))),
            }
            start += n;
        }
        out
    }

    #[test]
    fn deletions_spanning_row_groups_leave_the_other_rows() {
        let sizes = [4, 4, 4];
        let groups = live_by_group(&[1, 3, 4, 5, 6, 7, 11], &sizes).unwrap();
        assert_eq!(groups[0].as_deref(), Some(&[0, 2][..]));
        assert_eq!(
            groups[1].as_deref(),
            Some(&[][..]),
            "every row of group 1 deleted"
        );
        assert_eq!(groups[2].as_deref(), Some(&[0, 1, 2][..]));
        assert_eq!(kept(&groups, &sizes), vec![0, 2, 8, 9, 10]);
        assert!(
            live_by_group(&[], &sizes)
                .unwrap()
                .iter()
                .all(Option::is_none)
        );
        let err = live_by_group(&[12], &sizes).unwrap_err();
        assert!(err.contains("row 12") && err.contains("12 rows"), "{err}");
    }

    #[test]
    fn intersections_keep_rows_both_keep() {
        let a: Arc<[u32]> = Arc::from(vec![0, 2, 3, 7]);
        let b: Arc<[u32]> = Arc::from(vec![2, 4, 7, 9]);
        assert_eq!(
            intersect(Some(a.clone()), Some(&b)).as_deref(),
            Some(&[2, 7][..])
        );
        assert_eq!(intersect(None, Some(&b)).as_deref(), Some(&b[..]));
        assert_eq!(intersect(Some(a.clone()), None).as_deref(), Some(&a[..]));
        assert_eq!(intersect(None, None), None);
    }

    #[test]
    fn most_rows_kept_stay_views_and_few_are_copied_out() {
        let tensors: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 4096]).collect();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "tensor",
                DataType::BinaryView,
                false,
            )])),
            vec![Arc::new(BinaryViewArray::from_iter_values(tensors.iter()))],
        )
        .unwrap();
        let pages = |b: &RecordBatch| {
            let views = b.column_by_name("tensor").unwrap().as_binary_view();
            (
                views
                    .data_buffers()
                    .iter()
                    .map(|d| d.as_ptr())
                    .collect::<Vec<_>>(),
                views.clone(),
            )
        };
        let (original, _) = pages(&batch);
        // Seven of eight (a deletion vector's usual lot): views into the same pages.
        let most = take_rows(&batch, &[0, 1, 2, 4, 5, 6, 7]).unwrap();
        let (buffers, views) = pages(&most);
        assert_eq!(buffers, original);
        assert_eq!(views.value(3), vec![4u8; 4096]);
        // Three of eight: copied out into buffers of their own, three tensors' bytes.
        let few = take_rows(&batch, &[1, 5, 6]).unwrap();
        let (buffers, views) = pages(&few);
        assert!(buffers.iter().all(|b| !original.contains(b)));
        let held: usize = views.data_buffers().iter().map(|d| d.len()).sum();
        assert_eq!(held, 3 * 4096);
        assert_eq!(views.value(2), vec![6u8; 4096]);
        assert!(copies_selected_rows(3, 8) && !copies_selected_rows(4, 8));
    }

    proptest! {
        /// Every row not deleted is kept, once, in order; every deleted one is gone.
        #[test]
        fn live_rows_are_the_complement_of_the_deleted(
            sizes in proptest::collection::vec(0u64..40, 1..8),
            picks in proptest::collection::vec(any::<u64>(), 0..60),
        ) {
            let total: u64 = sizes.iter().sum();
            prop_assume!(total > 0);
            let mut deleted: Vec<u64> = picks.iter().map(|p| p % total).collect();
            deleted.sort_unstable();
            deleted.dedup();
            let groups = live_by_group(&deleted, &sizes).unwrap();
            prop_assert_eq!(groups.len(), sizes.len());
            let want: Vec<u64> = (0..total).filter(|r| deleted.binary_search(r).is_err()).collect();
            prop_assert_eq!(kept(&groups, &sizes), want);
            for (g, &n) in groups.iter().zip(&sizes) {
                if let Some(rows) = g {
                    prop_assert!(rows.windows(2).all(|w| w[0] < w[1]));
                    prop_assert!(rows.iter().all(|&r| u64::from(r) < n));
                }
            }
        }
    }
}
