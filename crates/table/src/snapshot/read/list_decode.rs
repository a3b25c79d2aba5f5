//! The LIST decoder: a tensor column's levels checked a few rows at a time, its row starts
//! read off the repetition levels and its values appended to one buffer, as the Arrow array
//! the list reader would have made (see `list_chunk` for why and where it is used).

use std::sync::Arc;

use arrow_array::types::{
    ArrowPrimitiveType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{ArrayRef, FixedSizeListArray, ListArray, PrimitiveArray};
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use bytes::Bytes;
use parquet::basic::Type as PhysicalType;
use parquet::column::reader::{
    ColumnReader, ColumnReaderImpl, get_column_reader, get_typed_column_reader,
};
use parquet::data_type::{
    DataType as ParquetType, DoubleType, FloatType, Int32Type as Int32Values,
    Int64Type as Int64Values,
};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::ColumnDescPtr;

use super::pages::Chunk;

/// Levels decoded at once, about: two `i16` per value, so 256 Ki values keep them in L2.
pub(in crate::snapshot) const LEVELS_AT_ONCE: usize = 256 << 10;

/// Whether a list column stored in leaf `column`, whose values Arrow's reader makes `item`s,
/// is decoded here: one level of repetition, and values Arrow's reader takes as they are
/// (FLOAT, DOUBLE, INT32, INT64) or narrows or reinterprets from INT32 / INT64 (the 8- and
/// 16-bit and unsigned integers).
pub(in crate::snapshot) fn applies(column: &ColumnDescPtr, item: &DataType) -> bool {
    use DataType::*;
    column.max_rep_level() == 1
        && matches!(
            (column.physical_type(), item),
            (PhysicalType::FLOAT, Float32)
                | (PhysicalType::DOUBLE, Float64)
                | (
                    PhysicalType::INT32,
                    Int8 | Int16 | Int32 | UInt8 | UInt16 | UInt32
                )
                | (PhysicalType::INT64, Int64 | UInt64)
        )
}

/// Decodes the column chunk `bytes` (read from `meta.byte_range()`) of leaf `column`, `rows`
/// rows of samples of `numel` values of Arrow type `item` (see [`applies`]): a `FixedSizeList`
/// when `fixed`, else a `List`. `None` where a definition level shows a null (left to the
/// Arrow path to report).
pub(in crate::snapshot) fn decode(
    bytes: Bytes,
    meta: &ColumnChunkMetaData,
    column: ColumnDescPtr,
    (rows, numel): (usize, usize),
    item: &DataType,
    fixed: bool,
) -> Result<Option<ArrayRef>> {
    decode_in(
        bytes,
        meta,
        column,
        (rows, numel),
        item,
        fixed,
        LEVELS_AT_ONCE,
    )
}

/// [`decode`], about `levels_at_once` levels at a time.
pub(in crate::snapshot) fn decode_in(
    bytes: Bytes,
    meta: &ColumnChunkMetaData,
    column: ColumnDescPtr,
    (rows, numel): (usize, usize),
    item: &DataType,
    fixed: bool,
    levels_at_once: usize,
) -> Result<Option<ArrayRef>> {
    let at_once = (levels_at_once / numel.max(1)).max(1);
    let (start, _) = meta.byte_range();
    let pages = SerializedPageReader::new(Arc::new(Chunk { bytes, start }), meta, rows, None)?;
    let reader = get_column_reader(column.clone(), Box::new(pages));
    let s = (rows, numel, fixed, at_once);
    let c = &column;
    // The narrowing and reinterpreting casts are the ones Arrow's reader makes (`as`).
    match (column.physical_type(), item) {
        (PhysicalType::FLOAT, DataType::Float32) => {
            cast::<FloatType, Float32Type>(reader, c, s, |v| v)
        }
        (PhysicalType::DOUBLE, DataType::Float64) => {
            cast::<DoubleType, Float64Type>(reader, c, s, |v| v)
        }
        (PhysicalType::INT32, DataType::Int32) => {
            cast::<Int32Values, Int32Type>(reader, c, s, |v| v)
        }
        (PhysicalType::INT64, DataType::Int64) => {
            cast::<Int64Values, Int64Type>(reader, c, s, |v| v)
        }
        (PhysicalType::INT32, DataType::Int8) => {
            cast::<Int32Values, Int8Type>(reader, c, s, |v| v as i8)
        }
        (PhysicalType::INT32, DataType::Int16) => {
            cast::<Int32Values, Int16Type>(reader, c, s, |v| v as i16)
        }
        (PhysicalType::INT32, DataType::UInt8) => {
            cast::<Int32Values, UInt8Type>(reader, c, s, |v| v as u8)
        }
        (PhysicalType::INT32, DataType::UInt16) => {
            cast::<Int32Values, UInt16Type>(reader, c, s, |v| v as u16)
        }
        (PhysicalType::INT32, DataType::UInt32) => {
            cast::<Int32Values, UInt32Type>(reader, c, s, |v| v as u32)
        }
        (PhysicalType::INT64, DataType::UInt64) => {
            cast::<Int64Values, UInt64Type>(reader, c, s, |v| v as u64)
        }
        (physical, item) => Err(ParquetError::General(format!(
            "a list of {physical} as {item} is not decoded here"
        ))),
    }
}

/// Rows, values per sample, fixed-size or not, rows decoded at once.
type Shape = (usize, usize, bool, usize);

/// [`decode_in`] for values of Parquet type `P`, each made an `A` by `f` (the identity where
/// the types agree).
fn cast<P: ParquetType, A: ArrowPrimitiveType>(
    reader: ColumnReader,
    column: &ColumnDescPtr,
    (rows, numel, fixed, at_once): Shape,
    f: impl Fn(P::T) -> A::Native,
) -> Result<Option<ArrayRef>>
where
    P::T: Copy,
{
    let reader = get_typed_column_reader::<P>(reader);
    let Some((values, offsets)) = read(reader, column, (rows, numel, at_once), f)? else {
        return Ok(None);
    };
    let values = PrimitiveArray::<A>::new(ScalarBuffer::from(values), None);
    array(Arc::new(values), offsets, numel, fixed)
}

/// A value's position as a List offset.
fn offset(position: usize) -> Result<i32> {
    i32::try_from(position)
        .map_err(|_| ParquetError::General("more list values than a List's offsets hold".into()))
}

/// A chunk's values and the row offsets into them.
type Decoded<V> = (Vec<V>, Vec<i32>);

/// The values, each made an `O` by `f`, and the row offsets into them, or `None` at the first
/// null. The decoded values pass through a small buffer that stays in cache (for 8-bit
/// integers, stored as INT32, a whole chunk of them would be four times the result).
fn read<T: ParquetType, O>(
    mut reader: ColumnReaderImpl<T>,
    column: &ColumnDescPtr,
    (rows, numel, at_once): (usize, usize, usize),
    f: impl Fn(T::T) -> O,
) -> Result<Option<Decoded<O>>>
where
    T::T: Copy,
{
    let max_def = column.max_def_level();
    let mut values: Vec<O> = Vec::with_capacity(rows * numel);
    let mut offsets: Vec<i32> = Vec::with_capacity(rows + 1);
    let (mut def, mut rep, mut decoded) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        def.clear();
        rep.clear();
        decoded.clear();
        let before = values.len();
        let (records, _, levels) =
            reader.read_records(at_once, Some(&mut def), Some(&mut rep), &mut decoded)?;
        if records == 0 {
            break;
        }
        // Branch-free folds, so they vectorize: these loops see every value.
        if !def.iter().fold(true, |ok, &d| ok & (d == max_def)) {
            return Ok(None);
        }
        values.extend(decoded.iter().map(|&v| f(v)));
        // No nulls: one value per level, a row starting at each repetition level 0. Rows of
        // `numel` values are checked as a block; any other length is found level by level.
        let rep = &rep[..levels];
        let mut pos = 0;
        while pos < levels {
            offsets.push(offset(before + pos)?);
            let end = pos + numel;
            let whole = numel > 0
                && end <= levels
                && rep[pos + 1..end].iter().fold(true, |ok, &r| ok & (r != 0))
                && (end == levels || rep[end] == 0);
            pos = match whole {
                true => end,
                false => rep[pos + 1..]
                    .iter()
                    .position(|&r| r == 0)
                    .map_or(levels, |n| pos + 1 + n),
            };
        }
    }
    offsets.push(offset(values.len())?);
    if offsets.len() != rows + 1 {
        return Err(ParquetError::General(format!(
            "the column chunk holds {} rows, the row group {rows}",
            offsets.len() - 1
        )));
    }
    Ok(Some((values, offsets)))
}

/// The values as the Arrow list the list reader would have made (nullable items, no nulls);
/// `None` for a fixed-size list with a row of another length (the Arrow path reports it).
fn array(
    values: ArrayRef,
    offsets: Vec<i32>,
    numel: usize,
    fixed: bool,
) -> Result<Option<ArrayRef>> {
    let item = Arc::new(Field::new("item", values.data_type().clone(), true));
    let general = |e: arrow_schema::ArrowError| ParquetError::General(e.to_string());
    if !fixed {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        let list = ListArray::try_new(item, offsets, values, None).map_err(general)?;
        return Ok(Some(Arc::new(list)));
    }
    let Ok(size) = i32::try_from(numel) else {
        return Ok(None);
    };
    if offsets.windows(2).any(|w| w[1] - w[0] != size) {
        return Ok(None);
    }
    let list = FixedSizeListArray::try_new(item, size, values, None).map_err(general)?;
    Ok(Some(Arc::new(list)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{Float32Builder, ListBuilder};
    use arrow_array::{Array, RecordBatch};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use proptest::prelude::*;

    /// One row: its values, or a null row; a value may be null.
    type Row = Option<Vec<Option<f32>>>;

    /// Every element type decoded here.
    const ITEMS: [DataType; 10] = [
        DataType::Float32,
        DataType::Float64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
    ];

    /// `rows` as a list of `item`s: integers take each value's whole part below 100 (every
    /// integer type holds it).
    fn list_of(rows: &[Row], item: &DataType) -> ArrayRef {
        let whole = |v: f32| match item.is_floating() {
            true => v,
            false => v.trunc() % 100.0,
        };
        let mut b = ListBuilder::new(Float32Builder::new());
        for row in rows {
            match row {
                Some(values) => {
                    b.values().extend(values.iter().map(|v| v.map(whole)));
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        let to = DataType::List(Arc::new(Field::new("item", item.clone(), true)));
        arrow_cast::cast(&b.finish(), &to).unwrap()
    }

    /// `rows` written as a one-column Parquet file (a list of `item`s), pages of `page_rows`
    /// rows, dictionary and compression as asked.
    fn file(
        rows: &[Row],
        item: &DataType,
        page_rows: usize,
        dictionary: bool,
        snappy: bool,
    ) -> Bytes {
        written(list_of(rows, item), page_rows, dictionary, snappy)
    }

    /// A one-column file of `array`, as [`file`] writes it.
    fn written(array: ArrayRef, page_rows: usize, dictionary: bool, snappy: bool) -> Bytes {
        let batch = RecordBatch::try_from_iter([("volume", array)]).unwrap();
        let props = WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .set_data_page_row_count_limit(page_rows)
            .set_write_batch_size(page_rows)
            .set_compression(match snappy {
                true => Compression::SNAPPY,
                false => Compression::UNCOMPRESSED,
            })
            .build();
        super::super::pages::written(&batch, props)
    }

    /// The column decoded here, and as Arrow's reader decodes it.
    fn both(file: Bytes, numel: usize, fixed: bool) -> (Option<ArrayRef>, ArrayRef) {
        both_in(file, numel, fixed, LEVELS_AT_ONCE)
    }

    /// [`both`], decoding about `levels` levels at a time.
    fn both_in(
        file: Bytes,
        numel: usize,
        fixed: bool,
        levels: usize,
    ) -> (Option<ArrayRef>, ArrayRef) {
        let reader = SerializedFileReader::new(file.clone()).unwrap();
        let group = reader.metadata().row_group(0);
        let chunk = group.column(0);
        let (start, len) = chunk.byte_range();
        let bytes = file.slice(start as usize..(start + len) as usize);
        let column = reader.metadata().file_metadata().schema_descr().column(0);
        let rows = group.num_rows() as usize;
        let mut arrow = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let theirs = arrow.next().unwrap().unwrap().column(0).clone();
        let DataType::List(item) = theirs.data_type() else {
            panic!("{}", theirs.data_type())
        };
        assert!(applies(&column, item.data_type()), "{item}");
        let shape = (rows, numel);
        let ours = decode_in(bytes, chunk, column, shape, item.data_type(), fixed, levels).unwrap();
        (ours, theirs)
    }

    fn rows(values: &[Vec<f32>]) -> Vec<Row> {
        values
            .iter()
            .map(|v| Some(v.iter().copied().map(Some).collect()))
            .collect()
    }

    #[test]
    fn lists_decode_as_the_arrow_reader_does() {
        let values: Vec<Vec<f32>> = (0..9)
            .map(|r| (0..40).map(|i| (r * 40 + i) as f32 * 0.5).collect())
            .collect();
        for item in &ITEMS {
            for (dictionary, snappy) in [(false, false), (true, true), (false, true)] {
                let written = file(&rows(&values), item, 2, dictionary, snappy);
                let (ours, theirs) = both(written, 40, false);
                assert_eq!(
                    ours.unwrap().as_ref(),
                    theirs.as_ref(),
                    "{item} {dictionary} {snappy}"
                );
            }
        }
        // As a fixed-size list: the same values.
        let f32 = &DataType::Float32;
        let (ours, theirs) = both(file(&rows(&values), f32, 4, false, false), 40, true);
        let ours = ours.unwrap();
        let fixed = ours.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
        let list = theirs.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(fixed.len(), 9);
        assert_eq!(fixed.values().as_ref(), list.values().as_ref());
    }

    #[test]
    fn integers_at_their_limits_decode_as_the_arrow_reader_does() {
        // Unsigned values above the signed range are stored as negative INT32 / INT64, the
        // narrow ones widened: what comes back must be what Arrow's reader makes of them.
        use arrow_array::{
            Int8Array, Int16Array, Int64Array, UInt8Array, UInt16Array, UInt32Array, UInt64Array,
        };
        let values: [ArrayRef; 7] = [
            Arc::new(Int8Array::from(vec![i8::MIN, -1, 0, 1, i8::MAX, 7])),
            Arc::new(Int16Array::from(vec![i16::MIN, -1, 0, 1, i16::MAX, 7])),
            Arc::new(Int64Array::from(vec![i64::MIN, -1, 0, 1, i64::MAX, 7])),
            Arc::new(UInt8Array::from(vec![0, 1, 127, 128, 200, u8::MAX])),
            Arc::new(UInt16Array::from(vec![
                0,
                1,
                0x7FFF,
                0x8000,
                60_000,
                u16::MAX,
            ])),
            Arc::new(UInt32Array::from(vec![
                0,
                1,
                1 << 31,
                u32::MAX - 1,
                u32::MAX,
                7,
            ])),
            Arc::new(UInt64Array::from(vec![
                0,
                1,
                1 << 63,
                u64::MAX - 1,
                u64::MAX,
                7,
            ])),
        ];
        for values in values {
            let item = Arc::new(Field::new("item", values.data_type().clone(), true));
            let offsets = OffsetBuffer::new(ScalarBuffer::from(vec![0, 2, 4, 6]));
            let list: ArrayRef = Arc::new(ListArray::new(item, offsets, values.clone(), None));
            for dictionary in [false, true] {
                let (ours, theirs) = both(written(list.clone(), 2, dictionary, false), 2, false);
                assert_eq!(
                    ours.unwrap().as_ref(),
                    theirs.as_ref(),
                    "{}",
                    values.data_type()
                );
                let theirs = theirs.as_any().downcast_ref::<ListArray>().unwrap();
                assert_eq!(theirs.values().as_ref(), values.as_ref());
            }
        }
    }

    #[test]
    fn nulls_go_back_to_the_arrow_path_and_odd_lengths_stay_visible() {
        let mut values = rows(&vec![vec![1.0; 6]; 5]);
        // A row of another length: kept, for normalization to name (a fixed-size list: not).
        values[2] = Some(vec![Some(2.0); 4]);
        let f32 = &DataType::Float32;
        let (ours, theirs) = both(file(&values, f32, 2, false, false), 6, false);
        let ours = ours.unwrap();
        assert_eq!(ours.as_ref(), theirs.as_ref());
        let list = ours.as_any().downcast_ref::<ListArray>().unwrap();
        assert_eq!(list.value_length(2), 4);
        assert!(
            both(file(&values, f32, 2, false, false), 6, true)
                .0
                .is_none()
        );
        // Two short rows that add up to one of the expected length stay two rows.
        let split = rows(&[vec![1.0; 4], vec![2.0; 2], vec![3.0; 2], vec![4.0; 4]]);
        let (ours, theirs) = both(file(&split, f32, 8, false, false), 4, false);
        assert_eq!(ours.unwrap().as_ref(), theirs.as_ref());
        // A null value, a null row, an empty row: the Arrow path decides.
        for odd in [Some(vec![Some(1.0), None]), None, Some(Vec::new())] {
            let mut values = rows(&vec![vec![1.0; 2]; 3]);
            values[1] = odd.clone();
            assert!(
                both(file(&values, f32, 2, false, false), 2, false)
                    .0
                    .is_none(),
                "{odd:?}"
            );
        }
    }

    proptest! {
        /// Any row count, row lengths, page size, encoding, compression and levels at a time:
        /// the same array as Arrow's reader, or `None` exactly when there is a null or an
        /// empty list.
        #[test]
        fn decoded_lists_match_arrow(
            shape in (1usize..12, 1usize..70),
            page_rows in 1usize..6,
            dictionary: bool,
            snappy: bool,
            item in proptest::sample::select(ITEMS.to_vec()),
            null_at in proptest::option::of(0usize..12),
            seed: u32,
            levels in 1usize..300,
            odd in proptest::collection::vec((0usize..12, 0usize..5), 0..4),
        ) {
            let (count, numel) = shape;
            let mut values: Vec<Row> = (0..count)
                .map(|r| Some((0..numel).map(|i| Some(((seed as usize + r * 7 + i) % 13) as f32)).collect()))
                .collect();
            // Rows of other lengths (shorter, longer, or empty: empty lists are left to the
            // Arrow path like nulls).
            for &(r, k) in odd.iter().filter(|&&(r, _)| r < count) {
                let len = (numel + k).saturating_sub(2);
                values[r] = Some((0..len).map(|i| Some(i as f32)).collect());
            }
            let empty = values.iter().any(|v| v.as_ref().is_some_and(Vec::is_empty));
            let nulls = null_at.filter(|&r| r < count);
            if let Some(r) = nulls {
                values[r] = None;
            }
            let written = file(&values, &item, page_rows, dictionary, snappy);
            let (ours, theirs) = both_in(written, numel, false, levels);
            match (nulls.is_some() || empty, ours) {
                (true, ours) => prop_assert!(ours.is_none()),
                (false, ours) => {
                    let ours = ours.unwrap();
                    prop_assert_eq!(ours.as_ref(), theirs.as_ref());
                }
            }
        }
    }
}
