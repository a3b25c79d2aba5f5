//! Some rows of a row group with only their tensors' bytes fetched ([`Scan::read_rows_hooked`]):
//! voxlake writes each tensor column chunk as one uncompressed PLAIN page (docs/format.md), so
//! the values are the chunk's last `rows × (4 + size)` bytes, each a 4-byte length and the
//! tensor; a row's tensor is one ranged read. The other columns (id, label, the checksum, text
//! fields) are read whole, and every row read is checked against its checksum, which a row
//! read at the wrong place cannot pass: a file laid out otherwise (several pages, nulls,
//! compression, no checksums) is read whole instead (`None`).

use std::ops::Range;
use std::sync::Arc;

use arrow_array::builder::BinaryViewBuilder;
use arrow_array::{ArrayRef, BinaryViewArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ProjectionMask;
use parquet::basic::Compression;
use parquet::file::metadata::RowGroupMetaData;
use voxlake_format::FieldKind;
use voxlake_format::sample::TensorEncoding;

use super::Scan;
use crate::error::TableError;
use crate::snapshot::ReadTimings;

/// A tensor column read by ranges: its name in batches, its leaf, where its first value's
/// length is in the file, a value's bytes.
struct Ranged {
    name: String,
    leaf: usize,
    values_start: u64,
    size: usize,
}

impl Scan {
    /// Rows `rows` (ascending, among the rows the row group reads: its
    /// [`selected_rows`](Self::selected_rows)) of row group `row_group` of file `index`, with
    /// the columns of `projection`, each tensor column's values of those rows fetched alone
    /// (see the module docs) and every row checked against its checksum; `None` where the
    /// file's layout does not allow it (read the row group whole).
    pub async fn read_rows_hooked(
        &self,
        index: usize,
        row_group: usize,
        rows: &[u64],
        projection: &ProjectionMask,
        hooks: &crate::hooks::Hooks,
    ) -> Result<Option<(RecordBatch, ReadTimings)>, TableError> {
        let columns = self.snapshot.columns();
        if !columns.native || rows.is_empty() || rows.windows(2).any(|w| w[0] >= w[1]) {
            return Ok(None);
        }
        let meta = self.view_metadata(index).await?;
        let group = meta.metadata().row_group(row_group);
        let mut ranged = Vec::new();
        for field in &columns.fields {
            let FieldKind::Tensor(spec) = &field.kind else {
                continue;
            };
            let mask = self
                .snapshot
                .projection(&meta, std::slice::from_ref(&field.name))?;
            let leaves: Vec<usize> = (0..group.num_columns())
                .filter(|&l| mask.leaf_included(l) && projection.leaf_included(l))
                .collect();
            match (field.encoding, leaves.as_slice()) {
                (_, []) => {}
                (TensorEncoding::Raw, &[leaf]) => match values_start(group, leaf, spec.nbytes()) {
                    Some(values_start) => ranged.push(Ranged {
                        name: field.name.clone(),
                        leaf,
                        values_start,
                        size: spec.nbytes(),
                    }),
                    None => return Ok(None),
                },
                _ => return Ok(None),
            }
        }
        if ranged.is_empty() {
            return Ok(None);
        }
        let schema = meta.metadata().file_metadata().schema_descr();
        let others: Vec<usize> = (0..group.num_columns())
            .filter(|&l| projection.leaf_included(l) && ranged.iter().all(|r| r.leaf != l))
            .collect();
        let others = ProjectionMask::leaves(schema, others);
        // The rows' places in the file's row group.
        let physical: Vec<u64> = match self.selected_rows(index, row_group).await? {
            Some(kept) => rows
                .iter()
                .map(|&r| kept.get(r as usize).map(|&k| u64::from(k)))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    self.corrupt(
                        index,
                        format!(
                            "row group {row_group}: rows {rows:?} asked of {}",
                            kept.len()
                        ),
                    )
                })?,
            None => rows.to_vec(),
        };
        // The small columns and the tensors at once: one round trip to a remote store.
        let small = self.read_row_group_hooked(index, row_group, others, false, hooks);
        let tensors = futures::future::try_join_all(
            ranged
                .iter()
                .map(|column| self.fetch_values(index, column, &physical)),
        );
        let ((small, mut timings), tensors) = futures::future::try_join(small, tensors).await?;
        let picked = crate::rows::take_rows(&small, rows)
            .map_err(|e| self.corrupt(index, format!("row group {row_group}: {e}")))?;
        let mut fields: Vec<Arc<Field>> = picked.schema().fields().iter().cloned().collect();
        let mut arrays: Vec<ArrayRef> = picked.columns().to_vec();
        for (column, fetched) in ranged.iter().zip(tensors) {
            let Some((values, fetch)) = fetched else {
                return Ok(None);
            };
            timings.fetch += fetch.fetch;
            timings.bytes += fetch.bytes;
            fields.push(Arc::new(Field::new(
                &column.name,
                DataType::BinaryView,
                true,
            )));
            arrays.push(Arc::new(values));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| self.corrupt(index, format!("row group {row_group}: {e}")))?;
        match self.row_checks(index, row_group, &batch)? {
            Some(checks) => checks.check_all()?,
            None => return Ok(None),
        }
        Ok(Some((batch, timings)))
    }

    /// `column`'s values of the file's rows `physical`, each fetched alone (object_store
    /// coalesces neighbours); `None` where a length is not the tensor's size.
    async fn fetch_values(
        &self,
        index: usize,
        column: &Ranged,
        physical: &[u64],
    ) -> Result<Option<(BinaryViewArray, ReadTimings)>, TableError> {
        let mut timings = ReadTimings::default();
        let stride = 4 + column.size as u64;
        let ranges: Vec<Range<u64>> = physical
            .iter()
            .map(|&row| {
                let start = column.values_start + row * stride;
                start..start + stride
            })
            .collect();
        let data = self
            .snapshot
            .fetch(self.at(index)?, ranges, &mut timings)
            .await?;
        // Views into the fetched bytes: no copy.
        let mut values = BinaryViewBuilder::with_capacity(data.len());
        for bytes in data {
            let length = bytes.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok());
            if length.map(u32::from_le_bytes) != Some(column.size as u32)
                || bytes.len() != 4 + column.size
            {
                return Ok(None);
            }
            let block = values.append_block(arrow_buffer::Buffer::from(bytes));
            values
                .try_append_view(block, 4, column.size as u32)
                .map_err(|e| self.corrupt(index, e.to_string()))?;
        }
        Ok(Some((values.finish(), timings)))
    }

    fn corrupt(&self, index: usize, reason: String) -> TableError {
        TableError::Corrupt {
            location: self.snapshot.location().to_string(),
            file: self
                .file(index)
                .map(|f| f.path().to_string())
                .unwrap_or_default(),
            reason,
        }
    }
}

/// Where the first value of leaf `leaf` (one uncompressed PLAIN page of `rows` values of
/// `size` bytes, without a dictionary or repetition) starts: `rows × (4 + size)` bytes before
/// the chunk's end, after a page header and levels of at least a few bytes.
fn values_start(group: &RowGroupMetaData, leaf: usize, size: usize) -> Option<u64> {
    let chunk = group.column(leaf);
    let rows = u64::try_from(group.num_rows()).ok()?;
    let plain = chunk.compression() == Compression::UNCOMPRESSED
        && chunk.dictionary_page_offset().is_none()
        && chunk.column_descr().max_rep_level() == 0
        && u64::try_from(chunk.num_values()).ok()? == rows
        && chunk.encodings().all(|e| {
            matches!(
                e,
                parquet::basic::Encoding::PLAIN | parquet::basic::Encoding::RLE
            )
        });
    if !plain {
        return None;
    }
    let start = u64::try_from(chunk.data_page_offset()).ok()?;
    let total = u64::try_from(chunk.compressed_size()).ok()?;
    let values = rows.checked_mul(4 + size as u64)?;
    // A page header takes at least a few bytes before its values.
    let header = total.checked_sub(values).filter(|&h| h >= 8)?;
    Some(start + header)
}
