//! [`ScanBuilder`]: making a scan as its [`ScanOptions`] say: a filter is applied here, once,
//! where it is cheapest (see `crate::select`).

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::{Narrowed, Scan};
use crate::error::TableError;
use crate::filter::Filter;
use crate::options::ScanOptions;
use crate::snapshot::Snapshot;
use voxlake_format::{ID_COLUMN, LABEL_COLUMN};

/// Configures and makes a [`Scan`] of a snapshot: `snapshot.scan_builder()`, the `with_*`
/// setters of [`scan_options_setters`](crate::scan_options_setters), then `build()`.
#[derive(Debug, Clone)]
pub struct ScanBuilder {
    snapshot: Arc<Snapshot>,
    options: ScanOptions,
}

impl Snapshot {
    /// A scan of this snapshot: every live row unless a setter says otherwise.
    pub fn scan_builder(self: &Arc<Self>) -> ScanBuilder {
        ScanBuilder {
            snapshot: self.clone(),
            options: ScanOptions::default(),
        }
    }
}

impl ScanBuilder {
    crate::scan_options_setters!(options);

    /// Every setting at once (replacing those given before).
    pub fn with_options(mut self, options: ScanOptions) -> Self {
        self.options = options;
        self
    }

    /// The scan: its columns resolved; with a filter, its selection made (files and row
    /// groups that cannot match skipped unread, the filter's columns of the rest read and
    /// decided row by row); files without a selected row then leave the scan, and each
    /// file's row count is its selected rows.
    pub async fn build(self) -> Result<Scan, TableError> {
        let snapshot = self.snapshot;
        let narrowed = match &self.options.filter {
            Some(filter) => Some(narrow(&snapshot, filter).await?),
            None => None,
        };
        let columns = match self.options.columns {
            Some(columns) => columns,
            None => default_columns(&snapshot),
        };
        let files = match &narrowed {
            Some(n) => &n.files,
            None => snapshot.files(),
        };
        let starts = std::iter::once(0)
            .chain(files.iter().scan(0u64, |total, file| {
                *total += file.rows().unwrap_or(0);
                Some(*total)
            }))
            .collect();
        Ok(Scan {
            snapshot,
            columns,
            narrowed,
            starts,
            group_starts: Default::default(),
        })
    }
}

/// The columns a scan reads by default: id, label and every field of the snapshot's sample.
fn default_columns(snapshot: &Snapshot) -> Vec<String> {
    [ID_COLUMN, LABEL_COLUMN]
        .into_iter()
        .map(String::from)
        .chain(snapshot.sample().fields().iter().map(|f| f.name.clone()))
        .collect()
}

/// The files and rows `filter` selects of `snapshot`.
async fn narrow(snapshot: &Snapshot, filter: &str) -> Result<Narrowed, TableError> {
    let parsed = Filter::parse(filter).map_err(|reason| TableError::Incompatible {
        location: snapshot.location().to_string(),
        reason,
    })?;
    let mut selection = snapshot.select(&parsed, filter).await?;
    let files = snapshot.files();
    // A footer let go since the selection read it is read again: concurrently, as there.
    let rows = &selection.rows;
    let counts: Vec<u64> = futures::stream::iter(0..files.len())
        .map(|i| async move {
            match rows.get(i) {
                Some(groups) if !groups.is_empty() => selected_count(snapshot, i, groups).await,
                _ => Ok(0),
            }
        })
        .buffered(crate::READ_CONCURRENCY)
        .try_collect()
        .await?;
    selection.stats.rows_selected = counts.iter().sum();
    let keep: Vec<bool> = counts.iter().map(|&n| n > 0).collect();
    let of: Vec<usize> = (0..files.len()).filter(|&i| keep[i]).collect();
    selection.rows = selection
        .rows
        .into_iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(r, _)| r)
        .collect();
    tracing::debug!(
        location = snapshot.location(),
        filter,
        stats = ?selection.stats,
        "filter applied"
    );
    Ok(Narrowed {
        files: files.keep(&keep, &counts),
        of,
        selection,
    })
}

/// Rows of the snapshot's file `index` the groups' selection keeps (its footer was read to
/// select them: read again only if it was let go since).
async fn selected_count(
    snapshot: &Snapshot,
    index: usize,
    groups: &[Option<Arc<[u32]>>],
) -> Result<u64, TableError> {
    let meta = snapshot.reader_metadata(index).await?;
    Ok(groups
        .iter()
        .zip(meta.metadata().row_groups())
        .map(|(g, rg)| match g {
            Some(selected) => selected.len() as u64,
            None => rg.num_rows().max(0) as u64,
        })
        .sum())
}
