//! Whole files read at once: every record batch of a file, some of its rows left out (see
//! `Scan::read_file`).

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::errors::ParquetError;

use crate::error::TableError;
use crate::snapshot::Snapshot;

impl Snapshot {
    /// Every record batch of file `index` without the rows `left_out` (ascending rows of the
    /// file; `None`: its deleted rows): only `columns` (all if `None`), `batch_rows` rows at a
    /// time (fewer where rows were left out).
    pub(crate) async fn read_file(
        &self,
        index: usize,
        columns: Option<&[&str]>,
        batch_rows: usize,
        left_out: Option<&[u64]>,
    ) -> Result<Vec<RecordBatch>, TableError> {
        let perr = |e| self.file_error(index, e);
        let metadata = self.reader_metadata(index).await?;
        let reader = self
            .reader(index)
            .with_metadata(metadata.metadata().clone());
        let logical = self.logical_schema(&metadata);
        let roots: Option<Vec<usize>> = columns.map(|columns| {
            // By position: under column mapping the file names its columns otherwise. Columns
            // the file lacks are not read.
            columns
                .iter()
                .filter_map(|c| logical.index_of(c).ok())
                .collect()
        });
        let builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, metadata);
        let builder = match roots {
            Some(roots) => {
                let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
                builder.with_projection(mask)
            }
            None => builder,
        };
        let stream = builder.with_batch_size(batch_rows).build().map_err(perr)?;
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(perr)?;
        let deleted = self.files.at(index).deleted();
        let batches = match left_out.or(deleted.map(|d| &d.rows[..])) {
            None => batches,
            Some(rows) => without_rows(batches, rows)
                .map_err(|e| perr(ParquetError::ArrowError(e.to_string())))?,
        };
        Ok(batches.into_iter().map(|b| self.logical_batch(b)).collect())
    }
}

/// `batches` (a file's rows in order) without the rows `deleted` (ascending rows of the file).
fn without_rows(
    batches: Vec<RecordBatch>,
    deleted: &[u64],
) -> Result<Vec<RecordBatch>, arrow_schema::ArrowError> {
    let mut at = 0u64;
    let mut next = 0usize;
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        let n = batch.num_rows() as u64;
        let end = at + n;
        let first = next;
        while next < deleted.len() && deleted[next] < end {
            next += 1;
        }
        if first == next {
            out.push(batch);
        } else {
            let mut keep = vec![true; n as usize];
            for &row in &deleted[first..next] {
                keep[(row - at) as usize] = false;
            }
            let mask = arrow_array::BooleanArray::from(keep);
            out.push(arrow_select::filter::filter_record_batch(&batch, &mask)?);
        }
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow_array::{Array, Int64Array};

    #[test]
    fn deleted_rows_leave_a_files_batches_wherever_they_fall() {
        let batch = |values: Vec<i64>| {
            let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "x",
                arrow_schema::DataType::Int64,
                false,
            )]));
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).unwrap()
        };
        let batches = vec![
            batch(vec![0, 1, 2]),
            batch(vec![3, 4, 5]),
            batch(vec![6, 7]),
        ];
        let kept = without_rows(batches, &[1, 3, 4, 5, 7]).unwrap();
        let values: Vec<i64> = kept
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        assert_eq!(values, [0, 2, 6]);
        assert_eq!(
            kept[1].num_rows(),
            0,
            "a batch of deleted rows only is empty"
        );
    }
}
