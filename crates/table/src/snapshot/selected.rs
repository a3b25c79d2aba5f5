//! The rows a snapshot reads: not deleted by a file's deletion vector, and kept by the filter
//! it was opened with (its selection, made once, where it is cheapest: see `crate::select`).

use std::sync::Arc;

use super::Snapshot;
use crate::error::TableError;
use crate::filter::FilterStats;
use crate::rows::{GroupRows, live_by_group};

impl Snapshot {
    /// The snapshot of only the rows `filter` (one SQL boolean expression over the files'
    /// columns and partition values, e.g. `label = 1 AND region IN ('a', 'b')`) keeps: files
    /// and row groups that cannot match are skipped unread (partition values, Delta and footer
    /// statistics, which are bounds of every row, deleted or not), the filter's columns of the
    /// rest read and decided row by row, deleted rows left out. Files without a selected row
    /// leave the snapshot; each file's row count is then its selected rows, and row groups read
    /// keep only those. Call it after [`load_row_counts`](Self::load_row_counts).
    pub async fn select_rows(mut self, filter: &str) -> Result<Snapshot, TableError> {
        let parsed =
            crate::filter::Filter::parse(filter).map_err(|reason| TableError::Incompatible {
                location: self.location.clone(),
                reason,
            })?;
        let mut selection = self.select(&parsed, filter).await?;
        let mut counts = Vec::with_capacity(self.files.len());
        for i in 0..self.files.len() {
            counts.push(match selection.rows.get(i) {
                Some(groups) if !groups.is_empty() => self.selected_count(i, groups).await?,
                _ => 0,
            });
        }
        selection.stats.rows_selected = counts.iter().sum();
        let keep: Vec<bool> = counts.iter().map(|&n| n > 0).collect();
        self.files = self.files.keep(&keep, &counts);
        self.footers = std::mem::take(&mut self.footers).keep(&keep);
        // Kept bytes are keyed by the old indices.
        self.small = Default::default();
        selection.rows = selection
            .rows
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(r, _)| r)
            .collect();
        tracing::debug!(
            location = self.location.as_str(),
            filter,
            stats = ?selection.stats,
            "filter applied"
        );
        self.selection = Some(selection);
        Ok(self)
    }

    /// Rows of file `index` the groups' selection keeps (its footer was read to select them:
    /// read again only if it was let go since).
    async fn selected_count(
        &self,
        index: usize,
        groups: &[Option<Arc<[u32]>>],
    ) -> Result<u64, TableError> {
        let meta = self.reader_metadata(index).await?;
        Ok(groups
            .iter()
            .zip(meta.metadata().row_groups())
            .map(|(g, rg)| match g {
                Some(selected) => selected.len() as u64,
                None => rg.num_rows().max(0) as u64,
            })
            .sum())
    }

    /// The filter's text, if the snapshot was filtered.
    pub fn filter(&self) -> Option<&str> {
        self.selection.as_ref().map(|s| s.text.as_str())
    }

    /// What the filter skipped and kept (`None` without a filter).
    pub fn filter_stats(&self) -> Option<&FilterStats> {
        self.selection.as_ref().map(|s| &s.stats)
    }

    /// The rows of row group `row_group` of file `index` that are read (ascending rows of the
    /// row group): those no deletion vector deletes and the filter, if any, selects; `None`
    /// when every row is (the file's footer is read first where it has a deletion vector).
    pub async fn selected_rows(
        &self,
        index: usize,
        row_group: usize,
    ) -> Result<Option<Arc<[u32]>>, TableError> {
        if let Some(selection) = &self.selection {
            return Ok(selection
                .rows
                .get(index)
                .and_then(|groups| groups.get(row_group))
                .cloned()
                .flatten());
        }
        Ok(self
            .undeleted(index)
            .await?
            .and_then(|groups| groups.get(row_group).cloned().flatten()))
    }

    /// Whether some row group reads only some of its rows (a deletion vector or a filter):
    /// the rows' places in their files then differ from their places among the rows read.
    pub fn selects_rows(&self) -> bool {
        self.selection.is_some() || self.has_deletes
    }

    /// For a file with a deletion vector, the rows each of its row groups keeps (`None` where
    /// one keeps them all); `None` without a vector.
    pub(crate) async fn undeleted(
        &self,
        index: usize,
    ) -> Result<Option<Arc<GroupRows>>, TableError> {
        let Some(deleted) = self.file(index)?.deleted() else {
            return Ok(None);
        };
        let meta = self.reader_metadata(index).await?;
        self.footers
            .entry(index)
            .undeleted
            .get_or_try_init(|| async {
                let sizes: Vec<u64> = meta
                    .metadata()
                    .row_groups()
                    .iter()
                    .map(|rg| rg.num_rows().max(0) as u64)
                    .collect();
                let kept =
                    live_by_group(&deleted.rows, &sizes).map_err(|reason| TableError::Corrupt {
                        location: self.location.clone(),
                        file: self.path_of(index).to_string(),
                        reason: format!("its deletion vector {}: {reason}", deleted.id),
                    })?;
                Ok::<_, TableError>(Arc::new(kept))
            })
            .await
            .cloned()
            .map(Some)
    }
}
