//! A LIST tensor column (Spark's `array<float>`, pyarrow's lists and `fixed_shape_tensor`, of
//! floats or integers) decoded straight from its column chunk with parquet's column reader.
//!
//! Arrow's list reader builds a validity bitmap for every value and walks the repetition
//! levels to build offsets: on a file of reference cubes it took 4–5× the time of this decode
//! (docs/benchmarks.md, "What does each kind of table cost to read?"). A tensor column has no nulls and
//! lists of one length, so here the levels are decoded a few rows at a time (they stay in
//! cache), checked (every definition level at its maximum: no null list, no null value), the
//! row starts read off the repetition levels, and the values appended to one buffer. The result
//! is the Arrow array the list reader would have made (a `List` or `FixedSizeList` over the
//! values, no nulls), so the same normalization checks each row's length. A chunk holding a
//! null or an empty list is handed back to the Arrow path (`None`), which names the row (its
//! other columns then decoded again: only on the way to that error).

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, FieldRef, Schema};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::errors::{ParquetError, Result};

use voxlake_format::TensorSpec;

use super::list_decode::{applies, decode};
use super::row_group::ReadTimings;
use crate::error::TableError;

/// A LIST tensor field decoded from its pages: the field's index in the sample, its leaf
/// column, and the Arrow type of its values.
pub(in crate::snapshot) struct ListLeaf {
    field: usize,
    leaf: usize,
    item: DataType,
}

impl crate::snapshot::Snapshot {
    /// The first LIST tensor field decoded here (see [`applies`]), when `projection` reads
    /// it: the field, its leaf, and the Arrow type of its values. Other LIST fields of the
    /// sample go through Arrow's reader.
    pub(in crate::snapshot) fn list_leaf(
        &self,
        metadata: &ArrowReaderMetadata,
        projection: &ProjectionMask,
    ) -> Option<ListLeaf> {
        use voxlake_format::sample::TensorEncoding;
        let schema = metadata.metadata().file_metadata().schema_descr();
        // By position: under column mapping the file names the column otherwise.
        let logical = self.logical_schema(metadata);
        self.columns
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                matches!(
                    f.encoding,
                    TensorEncoding::List | TensorEncoding::FixedSizeList
                )
            })
            .find_map(|(field, f)| {
                let root = logical.index_of(&f.column).ok()?;
                let included = (0..schema.num_columns())
                    .any(|i| schema.get_column_root_idx(i) == root && projection.leaf_included(i));
                included.then_some((field, root))
            })
            .and_then(|(field, root)| self.list_leaf_of(metadata, projection, field, root))
    }

    /// [`list_leaf`](Self::list_leaf) of field `field`, whose column is root `root`.
    fn list_leaf_of(
        &self,
        metadata: &ArrowReaderMetadata,
        projection: &ProjectionMask,
        field: usize,
        root: usize,
    ) -> Option<ListLeaf> {
        let schema = metadata.metadata().file_metadata().schema_descr();
        let logical = self.logical_schema(metadata);
        let column = &self.columns.fields[field].column;
        let mut leaves =
            (0..schema.num_columns()).filter(|&i| schema.get_column_root_idx(i) == root);
        let leaf = leaves.next()?;
        // What Arrow's reader makes of the values (the file's Arrow schema applied).
        let item = match logical.field_with_name(column).ok()?.data_type() {
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
                item.data_type().clone()
            }
            _ => return None,
        };
        (leaves.next().is_none()
            && projection.leaf_included(leaf)
            && applies(&schema.column(leaf), &item))
        .then_some(ListLeaf { field, leaf, item })
    }

    /// Row group `row_group` of file `index` with its LIST tensor column (leaf `leaf`) decoded
    /// here and the other columns by the push decoder, normalized; `None` where the column
    /// holds a null.
    pub(in crate::snapshot) async fn read_list_row_group(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        projection: &ProjectionMask,
        ListLeaf { field, leaf, item }: ListLeaf,
        hooks: &crate::hooks::Hooks,
    ) -> Result<Option<(Vec<RecordBatch>, ReadTimings)>, TableError> {
        let field = &self.columns.fields[field];
        let parquet = metadata.metadata();
        let schema = parquet.file_metadata().schema_descr();
        let group = parquet.row_group(row_group);
        let rows = group.num_rows().max(0) as usize;
        let others: Vec<usize> = (0..schema.num_columns())
            .filter(|&i| i != leaf && projection.leaf_included(i))
            .collect();
        let mut timings = ReadTimings::default();
        let chunk = group.column(leaf).clone();
        // One read for the row group: the tensor chunk first, then the other columns' chunks
        // (on a remote store object_store coalesces them into one request; `MappedLocalStore`
        // maps the large one). The other columns' bytes go to their decoder up front.
        let mut ranges: Vec<Range<u64>> = std::iter::once(leaf)
            .chain(others.iter().copied())
            .map(|i| {
                let (start, len) = group.column(i).byte_range();
                start..start + len
            })
            .collect();
        let mut data = self.fetch(index, ranges.clone(), &mut timings).await?;
        let (other_ranges, other_data) = (ranges.split_off(1), data.split_off(1));
        let bytes = data.remove(0);
        // The other columns and the tensor chunk are decoded at once, on the blocking pool.
        let rest = async {
            let mut other_timings = ReadTimings::default();
            if others.is_empty() {
                return Ok((Vec::new(), other_timings));
            }
            let mask = ProjectionMask::leaves(schema, others.iter().copied());
            let mut decoder = self.push_decoder(index, row_group, metadata, mask, rows.max(1))?;
            decoder
                .push_ranges(other_ranges, other_data)
                .map_err(|e| self.file_error(index, e))?;
            let decoded = self
                .decode_projected(
                    index,
                    decoder,
                    hooks,
                    &mut other_timings,
                    Default::default(),
                )
                .await?;
            Ok::<_, TableError>((decoded, other_timings))
        };
        let column = schema.column(leaf);
        let numel = field.kind.tensor().map_or(0, TensorSpec::numel);
        let fixed = matches!(
            field.encoding,
            voxlake_format::sample::TensorEncoding::FixedSizeList
        );
        let object = self.path_of(index).to_string();
        let list_hooks = hooks.clone();
        let list = async {
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                list_hooks
                    .check(crate::hooks::Stage::Decode, &object)
                    .map_err(|e| Err(TableError::Internal(e)))?;
                let array =
                    decode(bytes, &chunk, column, (rows, numel), &item, fixed).map_err(Ok)?;
                Ok::<_, Result<ParquetError, TableError>>((array, started.elapsed()))
            })
            .await
            .map_err(|e| self.task_error("decode", index, e))?
            .map_err(|e| match e {
                Ok(parquet) => self.file_error(index, parquet),
                Err(stream) => stream,
            })
        };
        let ((array, took), (decoded, other_timings)) = tokio::try_join!(list, rest)?;
        timings.decode += took + other_timings.decode;
        timings.fetch += other_timings.fetch;
        timings.bytes += other_timings.bytes;
        let Some(array) = array else {
            return Ok(None);
        };
        let others = match decoded.is_empty() {
            true => RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                Vec::new(),
                &RecordBatchOptions::new().with_row_count(Some(rows)),
            )
            .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))?,
            false => self.concat(index, decoded)?,
        };
        let mut fields: Vec<FieldRef> = others.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            field.column.as_str(),
            array.data_type().clone(),
            true,
        )));
        let mut columns = others.columns().to_vec();
        columns.push(array);
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))?;
        Ok(Some((vec![batch], timings)))
    }
}
