//! Whole files of a scan read at once, for `compact` (convert from a table, optimize,
//! inspect): every record batch of a file, the rows the scan does not read left out, or one
//! column of every file in file order. The row groups the loader streams are `Scan`'s reads.

use arrow_array::RecordBatch;
use futures::StreamExt;
use voxlake_delta::DataFile;

use super::Scan;
use crate::error::TableError;
use crate::snapshot::READ_CONCURRENCY;

impl Scan {
    /// Every record batch of file `index`, only the rows the scan reads (not deleted,
    /// selected by its filter): only `columns` (all if `None`), `batch_rows` rows at a time
    /// (fewer where rows were left out).
    pub async fn read_file(
        &self,
        index: usize,
        columns: Option<&[&str]>,
        batch_rows: usize,
    ) -> Result<Vec<RecordBatch>, TableError> {
        let at = self.at(index)?;
        let left_out = match &self.narrowed {
            None => None,
            Some(_) => Some(self.left_out(index).await?),
        };
        self.snapshot
            .read_file(at, columns, batch_rows, left_out.as_deref())
            .await
    }

    /// The rows of file `index` (ascending rows of the file) its filter leaves out, deleted
    /// ones among them.
    async fn left_out(&self, index: usize) -> Result<Vec<u64>, TableError> {
        let meta = self.reader_metadata(index).await?;
        let mut out = Vec::new();
        let mut first = 0u64;
        for (g, rg) in meta.metadata().row_groups().iter().enumerate() {
            let n = rg.num_rows().max(0) as u64;
            if let Some(rows) = self.selected_rows(index, g).await? {
                let mut kept = rows.iter().map(|&r| u64::from(r)).peekable();
                for r in 0..n {
                    match kept.peek() {
                        Some(&k) if k == r => {
                            kept.next();
                        }
                        _ => out.push(first + r),
                    }
                }
            }
            first += n;
        }
        Ok(out)
    }

    /// Reads one column of every file, [`READ_CONCURRENCY`] files at a time, and hands each
    /// file's batches (the rows the scan reads) to `f` in file order.
    pub async fn scan_column<E: From<TableError>>(
        &self,
        column: &str,
        mut f: impl FnMut(DataFile<'_>, Vec<RecordBatch>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut reads = futures::stream::iter(0..self.files().len())
            .map(|index| async move {
                let batches = self.read_file(index, Some(&[column]), 8192).await?;
                Ok::<_, TableError>((index, batches))
            })
            .buffered(READ_CONCURRENCY);
        while let Some(result) = reads.next().await {
            let (index, batches) = result?;
            f(self.files().at(index), batches)?;
        }
        Ok(())
    }
}
