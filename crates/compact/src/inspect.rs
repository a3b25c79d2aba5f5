//! What a table holds: version, files, rows, bytes, row groups, tensor spec, label counts.

use std::collections::BTreeMap;

use arrow_array::{Array, Int64Array};
use futures::StreamExt;
use serde::Serialize;
use voxlake_format::LABEL_COLUMN;

use crate::Compactor;
use crate::error::CompactError;
use voxlake_stream::{READ_CONCURRENCY, location};

/// One data file of a table.
#[derive(Debug, Clone, Serialize)]
pub struct FileInfo {
    /// Path relative to the table root.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Rows, from the footer.
    pub rows: u64,
    /// Row groups, from the footer.
    pub row_groups: usize,
}

/// A summary of a voxlake table.
#[derive(Debug, Clone, Serialize)]
pub struct TableInfo {
    /// The table location (without query string).
    pub location: String,
    /// The table version.
    pub version: u64,
    /// Number of active data files.
    pub files: usize,
    /// Number of rows.
    pub rows: u64,
    /// Bytes of all data files.
    pub bytes: u64,
    /// Row groups over all files.
    pub row_groups: usize,
    /// Smallest and largest row group, in rows.
    pub row_group_rows: (u64, u64),
    /// Tensor shape of one sample.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: String,
    /// Rows per label value (`null` for unlabelled rows).
    pub labels: BTreeMap<String, u64>,
    /// Every data file.
    pub file_list: Vec<FileInfo>,
}

impl Compactor {
    pub(crate) async fn run_inspect(&self) -> Result<TableInfo, CompactError> {
        let options = location::storage_options(&self.storage_options);
        let table = self.open_existing(&options).await?;
        let spec = table.spec()?;
        let snapshot = table.snapshot().await?;
        let files = snapshot.files();

        let mut footers = futures::stream::iter(0..files.len())
            .map(|index| {
                let snapshot = &snapshot;
                async move { snapshot.footer(index).await.map(|m| (&files[index], m)) }
            })
            .buffered(READ_CONCURRENCY);
        let mut file_list = Vec::with_capacity(files.len());
        let mut row_group_rows = (u64::MAX, 0);
        while let Some(result) = footers.next().await {
            let (file, meta) = result?;
            for rg in meta.row_groups() {
                let rows = rg.num_rows() as u64;
                row_group_rows = (row_group_rows.0.min(rows), row_group_rows.1.max(rows));
            }
            file_list.push(FileInfo {
                path: file.path.clone(),
                bytes: file.size,
                rows: meta.file_metadata().num_rows() as u64,
                row_groups: meta.num_row_groups(),
            });
        }
        if file_list.is_empty() {
            row_group_rows = (0, 0);
        }

        let mut labels = BTreeMap::new();
        snapshot
            .scan_column(LABEL_COLUMN, |file, batches| {
                for batch in batches {
                    let column = batch
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .ok_or_else(|| CompactError::Incompatible {
                            location: table.display.clone(),
                            reason: format!("file {}: 'label' is not Int64", file.path),
                        })?;
                    for value in column.iter() {
                        let key = value.map_or_else(|| "null".to_string(), |v| v.to_string());
                        *labels.entry(key).or_insert(0) += 1;
                    }
                }
                Ok::<_, CompactError>(())
            })
            .await?;

        Ok(TableInfo {
            location: table.display.clone(),
            version: table.version(),
            files: file_list.len(),
            rows: file_list.iter().map(|f| f.rows).sum(),
            bytes: file_list.iter().map(|f| f.bytes).sum(),
            row_groups: file_list.iter().map(|f| f.row_groups).sum(),
            row_group_rows,
            shape: spec.shape().to_vec(),
            dtype: spec.dtype().to_string(),
            labels,
            file_list,
        })
    }
}
