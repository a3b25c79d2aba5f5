//! A data file's footer checked against what is known without it, before any of its sizes is
//! trusted: every column chunk inside the file's size (from the log), the row groups' rows the
//! log's count. A footer is the one place a crafted file states sizes memory is taken for.

use parquet::file::metadata::ParquetMetaData;

/// Refuses a footer whose sizes no file of `size` bytes (and `records` rows, where the log
/// counts them) can hold, before any of them sizes a buffer: each column chunk inside the
/// file, row counts not negative and adding up to the log's.
pub(crate) fn check_footer(
    meta: &ParquetMetaData,
    size: u64,
    records: Option<u64>,
) -> Result<(), String> {
    let mut rows = 0u64;
    for (g, group) in meta.row_groups().iter().enumerate() {
        let n = u64::try_from(group.num_rows())
            .map_err(|_| format!("row group {g} has {} rows", group.num_rows()))?;
        rows = rows
            .checked_add(n)
            .ok_or_else(|| format!("row group {g}: the row counts overflow"))?;
        for (c, chunk) in group.columns().iter().enumerate() {
            // Not `byte_range()`: it asserts, and a crafted footer's offsets may be negative.
            let offset = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset());
            let (Ok(start), Ok(len)) = (
                u64::try_from(offset),
                u64::try_from(chunk.compressed_size()),
            ) else {
                return Err(format!(
                    "row group {g}, column {c}: its chunk has offset {offset} and size {}",
                    chunk.compressed_size()
                ));
            };
            if start.checked_add(len).is_none_or(|end| end > size) {
                return Err(format!(
                    "row group {g}, column {c}: its chunk of {len} bytes at {start} lies past the file's {size} bytes"
                ));
            }
        }
    }
    match records {
        Some(records) if records != rows => Err(format!(
            "its footer counts {rows} rows, the Delta log {records}"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_footer;
    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::WriterProperties;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A Parquet file of 30 rows in row groups of 7, as voxlake's writer lays one out.
    fn file() -> Vec<u8> {
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..30));
        let cubes: ArrayRef = Arc::new(BinaryArray::from_iter_values(
            (0..30u8).map(|i| vec![i; 64]),
        ));
        let batch = RecordBatch::try_from_iter([("id", ids), ("cube", cubes)]).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(7))
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    proptest! {
        /// A footer with a byte changed (sizes, offsets, counts: whatever it hits): if parquet
        /// still parses it and the check passes, every column chunk lies inside the file and
        /// the row groups hold the rows the log counts; nothing panics either way.
        #[test]
        fn a_crafted_footer_passes_only_when_its_sizes_hold(at in 0usize..4096, value in 1u8..=255) {
            let mut bytes = file();
            let size = bytes.len();
            let footer = u32::from_le_bytes(bytes[size - 8..size - 4].try_into().unwrap()) as usize;
            // The footer and its length (not the magic: a file without it is refused whole).
            let i = size - 8 - footer + at % (footer + 4);
            bytes[i] ^= value;
            let parsed = std::panic::catch_unwind(|| {
                ParquetMetaDataReader::new().parse_and_finish(&Bytes::from(bytes.clone()))
            });
            prop_assert!(parsed.is_ok(), "parquet panicked on the footer");
            if let Ok(Ok(meta)) = parsed
                && check_footer(&meta, size as u64, Some(30)).is_ok()
            {
                let mut rows = 0;
                for group in meta.row_groups() {
                    rows += group.num_rows();
                    for chunk in group.columns() {
                        let (start, len) = chunk.byte_range();
                        prop_assert!(start + len <= size as u64);
                    }
                }
                prop_assert_eq!(rows, 30);
            }
        }
    }

    #[test]
    fn a_chunk_past_the_file_or_a_wrong_row_count_is_named() {
        let bytes = file();
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(bytes.clone()))
            .unwrap();
        let size = bytes.len() as u64;
        assert_eq!(check_footer(&meta, size, Some(30)), Ok(()));
        let end = meta
            .row_groups()
            .iter()
            .flat_map(|g| g.columns())
            .map(|c| c.byte_range().0 + c.byte_range().1)
            .max()
            .unwrap();
        let short = check_footer(&meta, end - 1, Some(30)).unwrap_err();
        assert!(short.contains("lies past the file's"), "{short}");
        let rows = check_footer(&meta, size, Some(31)).unwrap_err();
        assert_eq!(rows, "its footer counts 30 rows, the Delta log 31");
    }
}
