//! A scan of a snapshot: the rows a reader reads of it (a filter's selection; deleted rows are
//! always left out) and the reads themselves. The snapshot is the table's state at a version;
//! a scan is one reading of it, made by [`ScanBuilder`] (`snapshot.scan_builder()`), and several
//! scans share one snapshot (its store, footers and small files' bytes).
//!
//! A scan reads the columns it was given, else id, label and every field of the sample
//! ([`Scan::columns`]). It numbers its files `0..files().len()`: the snapshot's files, less
//! those without a selected row, each counting its selected rows. Every read of a scan takes
//! the scan's file numbers; its rows, numbered `0..num_rows()` in that order, are also read by
//! their positions ([`Scan::take`]) or their ids ([`Scan::take_ids`], through a [`RowIndex`]).

use std::sync::Arc;

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::file::metadata::ParquetMetaData;
use voxlake_delta::{DataFile, FileList};

use crate::checksums::RowChecks;
use crate::error::TableError;
use crate::filter::FilterStats;
use crate::rows::Selection;
use crate::snapshot::{ReadTimings, Snapshot};
use voxlake_io::location;

mod build;
mod files;
mod index;
mod index_cache;
mod ranged;
mod take;

pub use build::ScanBuilder;
pub use take::RowPlace;

/// The rows a reader reads of a [`Snapshot`], and their reads (see the module docs).
///
/// ```no_run
/// # async fn f() -> Result<(), voxlake_table::TableError> {
/// use std::sync::Arc;
/// use voxlake_table::Snapshot;
///
/// let snapshot = Arc::new(Snapshot::builder("az://data/cubes").with_version(3).build().await?);
/// let scan = snapshot.scan_builder().with_filter("label = 1").build().await?;
/// assert!(scan.num_rows() <= snapshot.num_rows());
/// # Ok(()) }
/// ```
pub struct Scan {
    snapshot: Arc<Snapshot>,
    /// The columns read (voxlake's names: id, label, the fields; or the table's).
    columns: Vec<String>,
    /// The scan's files when a filter narrowed them (the snapshot's otherwise).
    narrowed: Option<Narrowed>,
    /// `starts[i]`: the position of file i's first row read; last, the rows read. Made once
    /// at build: every [`take`](Scan::take) locates its positions by them.
    starts: Vec<u64>,
    /// Per file located so far, the position of each row group's first row read (8 bytes a
    /// row group, kept while the scan lives: each take would walk every row group again).
    group_starts: std::sync::Mutex<std::collections::HashMap<usize, Arc<[u64]>>>,
}

/// A filter's files and rows.
struct Narrowed {
    /// The files with a selected row, each counting its selected rows.
    files: FileList,
    /// `of[i]`: the snapshot's number of the scan's file `i`.
    of: Vec<usize>,
    /// Per file of the scan, per row group, the selected rows.
    selection: Selection,
}

impl std::fmt::Debug for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("snapshot", &self.snapshot)
            .field("files", &self.files().len())
            .field("filter", &self.filter())
            .field("columns", &self.columns)
            .finish()
    }
}

impl Scan {
    /// The snapshot scanned.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The columns the scan reads: those given ([`ScanOptions::columns`](crate::ScanOptions)),
    /// else id, label and every field of the snapshot's sample. A row group's projection of
    /// them is [`Snapshot::projection`].
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The files the scan reads, numbered as its reads number them: the snapshot's, less
    /// those without a selected row (each then counting its selected rows).
    pub fn files(&self) -> &FileList {
        match &self.narrowed {
            Some(n) => &n.files,
            None => self.snapshot.files(),
        }
    }

    /// File `index` of the scan, or an error naming the index and the file count.
    pub fn file(&self, index: usize) -> Result<DataFile<'_>, TableError> {
        self.files()
            .get(index)
            .ok_or_else(|| TableError::Incompatible {
                location: self.snapshot.location().to_string(),
                reason: format!(
                    "no file {index}: the scan of version {} reads {} data files",
                    self.snapshot.version(),
                    self.files().len()
                ),
            })
    }

    /// The snapshot's number of the scan's file `index` (checked by [`file`](Self::file)).
    pub(crate) fn at(&self, index: usize) -> Result<usize, TableError> {
        self.file(index)?;
        Ok(match &self.narrowed {
            Some(n) => n.of[index],
            None => index,
        })
    }

    /// Rows the scan reads: live rows, those the filter selects.
    pub fn num_rows(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The filter's text, if the scan has one.
    pub fn filter(&self) -> Option<&str> {
        self.narrowed.as_ref().map(|n| n.selection.text.as_str())
    }

    /// What the filter skipped and kept (`None` without a filter).
    pub fn filter_stats(&self) -> Option<&FilterStats> {
        self.narrowed.as_ref().map(|n| &n.selection.stats)
    }

    /// A hash of the files read, in plan order: `fnv1a64:` and 16 hex digits over each file's
    /// path and size (and deletion vector) and the filter. Two scans with the same hash plan
    /// the same epochs.
    pub fn file_set_hash(&self) -> String {
        let mut hash = location::StableHasher::default();
        self.files().hash_into(&mut hash);
        // Another filter plans other rows.
        if let Some(filter) = self.filter() {
            hash.write(&format!("filter\0{filter}\n"));
        }
        format!("fnv1a64:{:016x}", hash.finish())
    }

    /// Bytes of memory the scan holds of its own: a filter's file list and numbering (0
    /// without a filter). Its snapshot's are [`Snapshot::memory_size`].
    pub fn memory_size(&self) -> usize {
        self.narrowed.as_ref().map_or(0, |n| {
            n.files.memory_size() + n.of.len() * std::mem::size_of::<usize>()
        })
    }

    /// Whether some row group reads only some of its rows (a deletion vector or a filter):
    /// the rows' places in their files then differ from their places among the rows read.
    pub fn selects_rows(&self) -> bool {
        self.narrowed.is_some() || self.snapshot.has_deletes()
    }

    /// The rows of row group `row_group` of file `index` that are read (ascending rows of the
    /// row group): those no deletion vector deletes and the filter, if any, selects; `None`
    /// when every row is (the file's footer is read first where it has a deletion vector).
    pub async fn selected_rows(
        &self,
        index: usize,
        row_group: usize,
    ) -> Result<Option<Arc<[u32]>>, TableError> {
        let at = self.at(index)?;
        if let Some(n) = &self.narrowed {
            return Ok(n
                .selection
                .rows
                .get(index)
                .and_then(|groups| groups.get(row_group))
                .cloned()
                .flatten());
        }
        Ok(self
            .snapshot
            .undeleted(at)
            .await?
            .and_then(|groups| groups.get(row_group).cloned().flatten()))
    }

    /// The footer of file `index` (one ranged GET of the tail; a small file's whole), kept
    /// while it is among the snapshot's most recently used
    /// ([`FOOTER_CACHE_BYTES`](crate::FOOTER_CACHE_BYTES)).
    pub async fn reader_metadata(&self, index: usize) -> Result<ArrowReaderMetadata, TableError> {
        self.snapshot.reader_metadata(self.at(index)?).await
    }

    /// The footer of file `index` with its binary columns read as `BinaryView`: parquet then
    /// decodes PLAIN values as views into the fetched page instead of copying them out.
    pub async fn view_metadata(&self, index: usize) -> Result<ArrowReaderMetadata, TableError> {
        self.snapshot.view_metadata(self.at(index)?).await
    }

    /// The Parquet metadata of file `index` (cached).
    pub async fn footer(&self, index: usize) -> Result<Arc<ParquetMetaData>, TableError> {
        Ok(self.reader_metadata(index).await?.metadata().clone())
    }

    /// Reads the scan's rows of one row group of file `index`: the projected column chunks
    /// are fetched with one coalesced `get_ranges` and decoded on the blocking pool; binary
    /// columns come back as `BinaryView` arrays that point into the fetched pages (no copy of
    /// the tensors). Every row read is checked against its checksum where the projection
    /// reads it.
    pub async fn read_row_group(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
    ) -> Result<RecordBatch, TableError> {
        let hooks = crate::hooks::Hooks::default();
        let read = self.read_row_group_hooked(index, row_group, projection, true, &hooks);
        Ok(read.await?.0)
    }

    /// [`read_row_group`](Self::read_row_group) with a test's fault hooks, also returning
    /// where the time went: the row group's rows that are read
    /// ([`selected_rows`](Self::selected_rows)) taken out of the decoded pages when it keeps
    /// only some (copied when it keeps fewer than half, see
    /// [`copies_selected_rows`](crate::rows::copies_selected_rows)). With `verify`, every row
    /// read is checked against its checksum where the projection reads it; without, the
    /// caller checks each row before it uses it ([`row_checks`](Self::row_checks)).
    pub async fn read_row_group_hooked(
        &self,
        index: usize,
        row_group: usize,
        projection: ProjectionMask,
        verify: bool,
        hooks: &crate::hooks::Hooks,
    ) -> Result<(RecordBatch, ReadTimings), TableError> {
        let at = self.at(index)?;
        // Rows are selected first: a row that is not delivered is never converted or checked.
        let kept = self.selected_rows(index, row_group).await?;
        let read = crate::snapshot::RowGroupRead {
            index: at,
            row_group,
            kept,
            projection,
            verify,
        };
        self.snapshot.read_rows(read, hooks).await
    }

    /// The checks of `batch`'s rows, read from row group `row_group` of file `index` (the
    /// columns of every field the table stores, with id, label and the checksum): `None` where
    /// the file has no checksums.
    pub fn row_checks(
        &self,
        index: usize,
        row_group: usize,
        batch: &RecordBatch,
    ) -> Result<Option<RowChecks>, TableError> {
        self.snapshot.row_checks(self.at(index)?, row_group, batch)
    }
}
