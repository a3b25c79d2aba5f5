//! Small data files read whole: one request a file, not two.
//!
//! A footer is read with one ranged request of the file's last [`SMALL`] bytes, which for a
//! file of at most that size is the whole file; its row group was then asked for again. So a
//! small file's footer is parsed from the whole file, and where the file holds one row group
//! (one-row files, a commit's small tail) the bytes are kept until that row group is read (at
//! most [`KEPT`] bytes a snapshot; past that the row group asks for the file again), and a
//! later read of it (another epoch) asks for the whole file again: one entry of the node
//! cache, the same one the footer's read made. A small file of several row groups is read by
//! ranges, as a large one is (its bytes would be held across several reads).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

use bytes::Bytes;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::TableError;
use crate::snapshot::Snapshot;

/// Files of at most this many bytes are read whole (the footer's read would fetch them whole
/// anyway: `voxlake_io::reader`'s prefetch).
pub(crate) const SMALL: u64 = 256 * 1024;
/// Bytes of small files a snapshot keeps between their footer's read and their row group's.
const KEPT: usize = 16 << 20;
/// The smallest Parquet file: the footer's length and magic.
const FOOTER: u64 = 8;

/// The bytes of small files whose footer was read and whose row group was not yet.
#[derive(Debug, Default)]
pub(crate) struct SmallFiles {
    kept: Mutex<(HashMap<usize, Bytes>, usize)>,
}

impl SmallFiles {
    fn keep(&self, index: usize, bytes: Bytes) {
        if let Ok(mut kept) = self.kept.lock()
            && kept.1 + bytes.len() <= KEPT
        {
            kept.1 += bytes.len();
            if let Some(old) = kept.0.insert(index, bytes) {
                kept.1 -= old.len();
            }
        }
    }

    fn take(&self, index: usize) -> Option<Bytes> {
        let mut kept = self.kept.lock().ok()?;
        let bytes = kept.0.remove(&index)?;
        kept.1 -= bytes.len();
        Some(bytes)
    }
}

impl Snapshot {
    /// Whether file `index`'s footer is read from the whole file (a file too short to hold
    /// a footer is left to the footer reader's own error).
    pub(in crate::snapshot) fn is_small(&self, index: usize) -> bool {
        (FOOTER..=SMALL).contains(&self.files.at(index).size())
    }

    /// Whether file `index`'s row group is cut from the whole file: a small file of one row
    /// group (its footer read).
    pub(in crate::snapshot) fn reads_whole(&self, index: usize) -> bool {
        self.is_small(index)
            && self.footers.peek(index).is_some_and(|f| {
                f.plain
                    .get()
                    .is_some_and(|m| m.metadata().num_row_groups() == 1)
            })
    }

    /// The whole of small file `index`: the bytes its footer's read kept, else one request.
    async fn small_file(&self, index: usize) -> Result<Bytes, TableError> {
        if let Some(bytes) = self.small.take(index) {
            return Ok(bytes);
        }
        let size = self.files.at(index).size();
        let bytes = self
            .reader(index)
            .get_bytes(0..size)
            .await
            .map_err(|e| self.file_error(index, e))?;
        if bytes.len() as u64 != size {
            return Err(self.corrupt(
                index,
                format!(
                    "{} bytes read of a file the log says has {size}",
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }

    /// The footer of small file `index`, parsed from the whole file, whose bytes are kept for
    /// its row group where it has one.
    pub(in crate::snapshot) async fn small_footer(
        &self,
        index: usize,
    ) -> Result<ParquetMetaData, TableError> {
        let bytes = self.small_file(index).await?;
        let metadata = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .map_err(|e| self.file_error(index, e))?;
        if metadata.num_row_groups() == 1 {
            self.small.keep(index, bytes);
        }
        Ok(metadata)
    }

    /// `ranges` of small file `index`, cut from the whole file.
    pub(in crate::snapshot) async fn small_ranges(
        &self,
        index: usize,
        ranges: &[Range<u64>],
    ) -> Result<Vec<Bytes>, TableError> {
        let whole = self.small_file(index).await?;
        ranges
            .iter()
            .map(|r| {
                if r.start <= r.end && r.end <= whole.len() as u64 {
                    Ok(whole.slice(r.start as usize..r.end as usize))
                } else {
                    Err(self.corrupt(
                        index,
                        format!(
                            "its footer names bytes {r:?} of a {}-byte file",
                            whole.len()
                        ),
                    ))
                }
            })
            .collect()
    }

    fn corrupt(&self, index: usize, reason: String) -> TableError {
        TableError::Corrupt {
            location: self.location.clone(),
            file: self.path_of(index).to_string(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_bytes_are_bounded_and_taken_once() {
        let small = SmallFiles::default();
        small.keep(1, Bytes::from(vec![0u8; 10]));
        small.keep(2, Bytes::from(vec![0u8; KEPT]));
        assert_eq!(small.take(2), None, "past the bound: not kept");
        assert_eq!(small.take(1).map(|b| b.len()), Some(10));
        assert_eq!(small.take(1), None, "taken once");
        small.keep(2, Bytes::from(vec![0u8; KEPT]));
        assert_eq!(small.take(2).map(|b| b.len()), Some(KEPT), "room again");
    }
}
