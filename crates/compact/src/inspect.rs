//! What a table holds: version, protocol, files, live rows (deletion vectors applied), bytes,
//! row groups, tensor spec, label counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array};
use futures::StreamExt;
use serde::Serialize;
use voxlake_format::LABEL_COLUMN;
use voxlake_format::sample::SampleColumns;

use crate::Compactor;
use crate::error::CompactError;
use voxlake_io::cache::CacheChoice;
use voxlake_table::{READ_CONCURRENCY, Scan, Snapshot, TableOptions};

/// One data file of a table.
#[derive(Debug, Clone, Serialize)]
pub struct FileInfo {
    /// Path relative to the table root.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Live rows: the footer's less those its deletion vector deletes.
    pub rows: u64,
    /// Rows its deletion vector deletes (0 without one).
    pub rows_deleted: u64,
    /// Row groups, from the footer.
    pub row_groups: usize,
}

/// One field of a table's samples.
#[derive(Debug, Clone, Serialize)]
pub struct FieldInfo {
    /// The field's name.
    pub name: String,
    /// The column holding it.
    pub column: String,
    /// Its shape (`None` for text).
    pub shape: Option<Vec<usize>>,
    /// Its element type (`None` for text).
    pub dtype: Option<String>,
    /// How the column holds it.
    pub encoding: String,
    /// What its numbers mean, for a date, timestamp or decimal column.
    pub unit: Option<String>,
}

/// A summary of a voxlake table.
#[derive(Debug, Clone, Serialize)]
pub struct TableInfo {
    /// The table location (without query string).
    pub location: String,
    /// The table version.
    pub version: u64,
    /// The Delta protocol: reader and writer versions and features (`None` without a log).
    pub protocol: Option<voxlake_delta::Protocol>,
    /// How files name the columns: `none`, `name` or `id` (Delta column mapping).
    pub column_mapping: String,
    /// Number of active data files.
    pub files: usize,
    /// Live rows (deleted rows left out).
    pub rows: u64,
    /// Rows deletion vectors delete.
    pub rows_deleted: u64,
    /// Data files with a deletion vector.
    pub deletion_vectors: usize,
    /// Bytes of all data files.
    pub bytes: u64,
    /// Row groups over all files.
    pub row_groups: usize,
    /// Smallest and largest row group, in rows.
    pub row_group_rows: (u64, u64),
    /// Tensor shape of one sample (of its first field).
    pub shape: Vec<usize>,
    /// Element type (of the first field).
    pub dtype: String,
    /// The column holding the tensors (the first field).
    pub tensor_column: String,
    /// How the tensors are read from it.
    pub encoding: String,
    /// Every field of a sample, in order (one, `tensor`, for a one-tensor table).
    pub fields: Vec<FieldInfo>,
    /// Whether the table is in voxlake's own layout (else read through the encoding above).
    pub native: bool,
    /// The label column, if any.
    pub label_column: Option<String>,
    /// The id column, if any (else rows are named by file and row).
    pub id_column: Option<String>,
    /// Rows per label value (`null` for unlabelled rows).
    pub labels: BTreeMap<String, u64>,
    /// Every data file.
    pub file_list: Vec<FileInfo>,
    /// A bricked table's volumes (`None` for a table of samples).
    pub volumes: Option<VolumesInfo>,
}

/// A bricked table's volumes, as `inspect` shows them.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct VolumesInfo {
    /// Voxels of a brick along z, y, x.
    pub brick: [u64; 3],
    /// The label maps whose classes are counted.
    pub class_fields: Vec<String>,
    /// Of each class field, voxels per class over every volume.
    pub class_voxels: BTreeMap<String, BTreeMap<i64, u64>>,
    /// Each volume: its id, label, shape and spacing, and its class counts (no coordinates).
    pub list: Vec<VolumeSummary>,
    /// Volumes whose bricks are there but not their info (left out by readers).
    pub unfinished: Vec<String>,
}

/// One volume of a bricked table, as `inspect` shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct VolumeSummary {
    /// Its id.
    pub id: String,
    /// Its label.
    pub label: Option<i64>,
    /// Voxels along z, y, x.
    pub shape: [u64; 3],
    /// The voxels' spacing, where known.
    pub spacing: Option<[f64; 3]>,
    /// Of each class field, voxels per class.
    pub classes: BTreeMap<String, BTreeMap<i64, u64>>,
}

/// What `scan`'s table says of its volumes, where it is bricked.
async fn volumes_info(scan: &Scan) -> Result<Option<VolumesInfo>, CompactError> {
    if scan.snapshot().bricks().is_none() {
        return Ok(None);
    }
    let volumes = scan.volumes().await?;
    let mut class_voxels: BTreeMap<String, BTreeMap<i64, u64>> = BTreeMap::new();
    let list = volumes
        .volumes()
        .iter()
        .map(|v| {
            let mut classes = BTreeMap::new();
            for (field, counted) in &v.info.classes {
                let total = class_voxels.entry(field.clone()).or_default();
                let mine: BTreeMap<i64, u64> = counted.iter().map(|c| (c.class, c.count)).collect();
                for (class, count) in &mine {
                    *total.entry(*class).or_default() += count;
                }
                classes.insert(field.clone(), mine);
            }
            VolumeSummary {
                id: v.id.clone(),
                label: v.label,
                shape: v.info.shape,
                spacing: v.info.spacing,
                classes,
            }
        })
        .collect();
    Ok(Some(VolumesInfo {
        brick: volumes.spec().brick(),
        class_fields: volumes.spec().class_fields().to_vec(),
        class_voxels,
        list,
        unfinished: volumes.unfinished().to_vec(),
    }))
}

impl Compactor {
    /// The table's version (as `with_as_of` says) opened to be looked at, and a scan of every
    /// row: no disk cache, no file statistics.
    pub(crate) async fn open_to_inspect(&self) -> Result<(Arc<Snapshot>, Scan), CompactError> {
        let options = TableOptions {
            storage_options: self.storage_options.clone(),
            as_of: self.as_of,
            hints: self.hints.clone(),
            cache: CacheChoice::Off,
            ..TableOptions::default()
        };
        let snapshot = Snapshot::builder(&self.table)
            .with_options(options)
            .with_statistics(false)
            .build()
            .await?;
        let snapshot = Arc::new(snapshot);
        let scan = snapshot.scan_builder().build().await?;
        Ok((snapshot, scan))
    }

    pub(crate) async fn run_inspect(&self) -> Result<TableInfo, CompactError> {
        let (snapshot, scan) = self.open_to_inspect().await?;
        let columns = snapshot.columns().clone();
        let spec = columns.sample.first().clone();
        let fields = columns
            .fields
            .iter()
            .map(|f| FieldInfo {
                name: f.name.clone(),
                column: f.column.clone(),
                shape: f.kind.tensor().map(|s| s.shape().to_vec()),
                dtype: f.kind.tensor().map(|s| s.dtype().to_string()),
                encoding: f.encoding.describe().to_string(),
                unit: f.unit.clone(),
            })
            .collect();
        let files = snapshot.files();

        let (file_list, row_group_rows) = file_infos(&scan).await?;
        let labels = label_counts(&scan, &columns, &file_list).await?;
        let volumes = volumes_info(&scan).await?;

        Ok(TableInfo {
            location: snapshot.location().to_string(),
            version: snapshot.version(),
            protocol: snapshot.protocol().cloned(),
            column_mapping: match snapshot.column_mapping() {
                voxlake_delta::MappingMode::Name => "name",
                voxlake_delta::MappingMode::Id => "id",
                _ => "none",
            }
            .to_string(),
            files: file_list.len(),
            rows: file_list.iter().map(|f| f.rows).sum(),
            rows_deleted: file_list.iter().map(|f| f.rows_deleted).sum(),
            deletion_vectors: files.iter().filter(|f| f.has_deletion_vector()).count(),
            bytes: file_list.iter().map(|f| f.bytes).sum(),
            row_groups: file_list.iter().map(|f| f.row_groups).sum(),
            row_group_rows,
            shape: spec.shape().to_vec(),
            dtype: spec.dtype().to_string(),
            tensor_column: columns.first().column.clone(),
            encoding: columns.first().encoding.describe().to_string(),
            fields,
            native: columns.native,
            label_column: columns.label.clone(),
            id_column: columns.id.clone(),
            labels,
            file_list,
            volumes,
        })
    }
}

/// Each data file of `scan` as its footer says (rows less those deleted), and the smallest
/// and largest row group in rows.
async fn file_infos(scan: &Scan) -> Result<(Vec<FileInfo>, (u64, u64)), CompactError> {
    let files = scan.files();
    let mut footers = futures::stream::iter(0..files.len())
        .map(|index| async move { scan.footer(index).await.map(|m| (files.at(index), m)) })
        .buffered(READ_CONCURRENCY);
    let mut file_list = Vec::with_capacity(files.len());
    let mut row_group_rows = (u64::MAX, 0);
    while let Some(result) = footers.next().await {
        let (file, meta) = result?;
        for rg in meta.row_groups() {
            let rows = rg.num_rows() as u64;
            row_group_rows = (row_group_rows.0.min(rows), row_group_rows.1.max(rows));
        }
        let deleted = file.deleted_rows();
        file_list.push(FileInfo {
            path: file.path().to_string(),
            bytes: file.size(),
            rows: (meta.file_metadata().num_rows().max(0) as u64).saturating_sub(deleted),
            rows_deleted: deleted,
            row_groups: meta.num_row_groups(),
        });
    }
    if file_list.is_empty() {
        row_group_rows = (0, 0);
    }
    Ok((file_list, row_group_rows))
}

/// Rows per label value (`null` for unlabelled rows): a partition label counted from each
/// file's value and rows (`file_list`), a label column read and normalized as the loader
/// hands it out.
async fn label_counts(
    scan: &Scan,
    columns: &SampleColumns,
    file_list: &[FileInfo],
) -> Result<BTreeMap<String, u64>, CompactError> {
    let files = scan.files();
    let snapshot = scan.snapshot();
    let mut labels = BTreeMap::new();
    let partition_label = columns
        .label
        .as_deref()
        .is_some_and(|c| snapshot.partition_type(c).is_some());
    if partition_label {
        // A label from the folders (a partition column): each file's value, its rows.
        let column = columns.label.as_deref().unwrap_or_default();
        for (file, info) in files.iter().zip(file_list) {
            let key = file
                .partition(column)
                .flatten()
                .unwrap_or("null")
                .to_string();
            *labels.entry(key).or_insert(0) += info.rows;
        }
    } else if let Some(column) = &columns.label {
        let location = snapshot.location().to_string();
        scan.scan_column(column, |file, batches| {
            for batch in batches {
                // Labels as the loader hands them out (Int64, whatever the column).
                let normalized = columns.normalize(&batch, |_| String::new()).map_err(|e| {
                    CompactError::Incompatible {
                        location: location.clone(),
                        reason: format!("file {}: {e}", file.path()),
                    }
                })?;
                let values = normalized
                    .column_by_name(LABEL_COLUMN)
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                    .ok_or_else(|| CompactError::Incompatible {
                        location: location.clone(),
                        reason: format!("file {}: '{column}' is not Int64", file.path()),
                    })?;
                for value in values.iter() {
                    let key = value.map_or_else(|| "null".to_string(), |v| v.to_string());
                    *labels.entry(key).or_insert(0) += 1;
                }
            }
            Ok::<_, CompactError>(())
        })
        .await?;
    }
    Ok(labels)
}
