//! Column chunks read page by page with parquet's column reader, from bytes already fetched:
//! the page reader's view of those bytes, and the first value of a BINARY column read from a
//! prefix of its chunk (its first pages), not the whole chunk.

use std::sync::Arc;

use bytes::Bytes;
use parquet::column::reader::{get_column_reader, get_typed_column_reader};
use parquet::data_type::ByteArrayType;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescPtr;

/// The column chunk's bytes, read at the file offsets the page reader asks for.
pub(in crate::snapshot) struct Chunk {
    /// The bytes.
    pub bytes: Bytes,
    /// Their offset in the file.
    pub start: u64,
}

impl Length for Chunk {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl Chunk {
    /// Where file offset `start` is in the chunk, if `length` bytes from there are in it.
    fn offset(&self, start: u64, length: usize) -> Result<usize> {
        start
            .checked_sub(self.start)
            .map(|s| s as usize)
            .filter(|&s| s.saturating_add(length) <= self.bytes.len())
            .ok_or_else(|| {
                ParquetError::General(format!(
                    "page bytes {start}+{length} outside the column chunk at {}+{}",
                    self.start,
                    self.bytes.len()
                ))
            })
    }
}

impl ChunkReader for Chunk {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T> {
        let from = self.offset(start, 0)?;
        Ok(bytes::Buf::reader(self.bytes.slice(from..)))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes> {
        let from = self.offset(start, length)?;
        Ok(self.bytes.slice(from..from + length))
    }
}

/// The first value of the BINARY column chunk whose first bytes are `prefix` (from
/// `meta.byte_range()`'s start): `Ok(None)` where it is null or the chunk has no rows; an error
/// where `prefix` ends before the first value's pages do (read more and ask again) or the pages
/// do not decode.
pub(in crate::snapshot) fn first_binary_value(
    prefix: Bytes,
    meta: &ColumnChunkMetaData,
    column: ColumnDescPtr,
    rows: usize,
) -> Result<Option<Vec<u8>>> {
    if rows == 0 {
        return Ok(None);
    }
    let start = meta.byte_range().0;
    let pages = SerializedPageReader::new(
        Arc::new(Chunk {
            bytes: prefix,
            start,
        }),
        meta,
        rows,
        None,
    )?;
    let max_def = column.max_def_level();
    let mut reader =
        get_typed_column_reader::<ByteArrayType>(get_column_reader(column, Box::new(pages)));
    let (mut def, mut values) = (Vec::new(), Vec::new());
    let (records, _, _) = reader.read_records(1, Some(&mut def), None, &mut values)?;
    if records == 0 {
        return Err(ParquetError::General(format!(
            "the column chunk holds {rows} rows but its first pages none"
        )));
    }
    if max_def > 0 && def.first().is_some_and(|&d| d < max_def) {
        return Ok(None);
    }
    Ok(values.first().map(|v| v.data().to_vec()))
}

/// `batch` as a Parquet file written with `props` (for the page-level decoders' tests).
#[cfg(test)]
pub(in crate::snapshot) fn written(
    batch: &arrow_array::RecordBatch,
    props: parquet::file::properties::WriterProperties,
) -> Bytes {
    let mut out = Vec::new();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BinaryArray, RecordBatch};
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    /// `values` written as a one-column BINARY file, one value a page (or a dictionary), and
    /// the first column chunk's bytes, metadata and descriptor.
    fn chunk(
        values: &[Option<Vec<u8>>],
        dictionary: bool,
        snappy: bool,
    ) -> (Bytes, ColumnChunkMetaData, ColumnDescPtr) {
        let array = BinaryArray::from_iter(values.iter().map(|v| v.as_deref()));
        let batch = RecordBatch::try_from_iter([("volume", Arc::new(array) as _)]).unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .set_data_page_row_count_limit(1)
            .set_write_batch_size(1)
            .set_compression(match snappy {
                true => Compression::SNAPPY,
                false => Compression::UNCOMPRESSED,
            })
            .build();
        let file = written(&batch, props);
        let reader = SerializedFileReader::new(file.clone()).unwrap();
        let meta = reader.metadata().row_group(0).column(0).clone();
        let desc = reader.metadata().file_metadata().schema_descr().column(0);
        let (start, len) = meta.byte_range();
        (
            file.slice(start as usize..(start + len) as usize),
            meta,
            desc,
        )
    }

    fn value(i: u8, len: usize) -> Vec<u8> {
        (0..len).map(|k| (k as u8).wrapping_mul(13) ^ i).collect()
    }

    #[test]
    fn the_first_value_needs_only_the_first_pages() {
        let values: Vec<Option<Vec<u8>>> = (0..4).map(|i| Some(value(i, 100_000))).collect();
        for (dictionary, snappy) in [(false, false), (false, true), (true, false), (true, true)] {
            let (bytes, meta, desc) = chunk(&values, dictionary, snappy);
            let case = format!("dictionary {dictionary}, snappy {snappy}");
            let whole = first_binary_value(bytes.clone(), &meta, desc.clone(), 4).unwrap();
            assert_eq!(
                whole.as_deref(),
                Some(&values[0].as_ref().unwrap()[..]),
                "{case}"
            );
            // Without a dictionary, the first page alone (a little over one value) is enough;
            // a prefix ending inside it is an error (the caller reads more).
            if !dictionary {
                let page = bytes.len() / 4 + 64;
                let first = first_binary_value(bytes.slice(..page), &meta, desc.clone(), 4);
                assert_eq!(first.unwrap(), whole, "{case}");
                let short = first_binary_value(bytes.slice(..page / 2), &meta, desc.clone(), 4);
                assert!(short.is_err(), "{case}");
            }
        }
    }

    #[test]
    fn a_null_first_value_is_none() {
        let values = vec![None, Some(value(1, 1000))];
        let (bytes, meta, desc) = chunk(&values, false, false);
        assert_eq!(first_binary_value(bytes, &meta, desc, 2).unwrap(), None);
    }
}
