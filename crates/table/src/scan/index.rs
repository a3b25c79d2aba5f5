//! A scan's rows by their ids ([`RowIndex`], [`Scan::row_index`]): each row's id at its
//! position, read once from the id column (only that column), or made from the file and row
//! where the table has none, as the reads make them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};

use super::Scan;
use crate::error::TableError;

/// The ids of a scan's rows by position (`0..len()`, the positions of [`Scan::take`]) and the
/// position of each id. Built once per scan ([`Scan::row_index`]); ids are unique in it.
///
/// ```no_run
/// # async fn f() -> Result<(), voxlake_table::TableError> {
/// use voxlake_table::{ScanOptions, Snapshot};
///
/// let scan = Snapshot::builder("az://data/cubes").build_scan(ScanOptions::default()).await?;
/// let index = scan.row_index().await?;
/// let rows = scan.take_ids(&index, &["cube-000123"]).await?;
/// assert_eq!(index.id(index.position("cube-000123").unwrap()), Some("cube-000123"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct RowIndex {
    ids: Vec<Arc<str>>,
    positions: HashMap<Arc<str>, u64>,
}

impl RowIndex {
    /// Rows indexed: the scan's.
    pub fn len(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Whether the scan reads no row.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of the row at `position`.
    pub fn id(&self, position: u64) -> Option<&str> {
        let at = usize::try_from(position).ok()?;
        self.ids.get(at).map(|id| &**id)
    }

    /// The position of the row `id`, `None` where the scan reads no row of that id.
    pub fn position(&self, id: &str) -> Option<u64> {
        self.positions.get(id).copied()
    }

    /// Every id, in position order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = &str> {
        self.ids.iter().map(|id| &**id)
    }

    /// Bytes the index holds (its ids twice over: by position and in the map), about.
    pub fn memory_size(&self) -> usize {
        let text: usize = self.ids.iter().map(|id| id.len()).sum();
        text + self.ids.len() * (2 * std::mem::size_of::<Arc<str>>() + 24)
    }
}

impl Scan {
    /// The index of the scan's rows by id: the id column of every file read (that column
    /// only, the files at once), or, where the table has no id column, the ids the reads make
    /// (`{file}#{row}`). A row's id is what a read of it says. An id that two rows share is
    /// an error naming it and both positions: rows asked by id need unique ids.
    pub async fn row_index(&self) -> Result<RowIndex, TableError> {
        let per_file: Vec<Vec<Arc<str>>> = match self.snapshot.columns().id.clone() {
            Some(column) => {
                let values = self.column_values(&[&column]).await?;
                let values = values.into_iter().next().unwrap_or_default();
                values
                    .iter()
                    .map(|array| self.id_strings(&column, array))
                    .collect::<Result<_, _>>()?
            }
            None => {
                futures::stream::iter(0..self.files().len())
                    .map(|index| self.made_ids(index))
                    .buffered(crate::READ_CONCURRENCY)
                    .try_collect()
                    .await?
            }
        };
        let rows: usize = per_file.iter().map(Vec::len).sum();
        let mut index = RowIndex {
            ids: Vec::with_capacity(rows),
            positions: HashMap::with_capacity(rows),
        };
        for id in per_file.into_iter().flatten() {
            let position = index.ids.len() as u64;
            if let Some(first) = index.positions.insert(id.clone(), position) {
                return Err(TableError::Incompatible {
                    location: self.snapshot.location().to_string(),
                    reason: format!(
                        "id '{id}' is the id of rows {first} and {position} of the scan of version {}: rows are asked by id only where ids are unique",
                        self.snapshot.version()
                    ),
                });
            }
            index.ids.push(id);
        }
        Ok(index)
    }

    /// The rows of `ids`, in the order asked, as [`take`](Self::take) gives them (`index`:
    /// this scan's [`row_index`](Self::row_index)). An id the scan reads no row of is
    /// [`TableError::NoId`], before anything is read.
    pub async fn take_ids(
        &self,
        index: &RowIndex,
        ids: &[&str],
    ) -> Result<RecordBatch, TableError> {
        let positions = ids
            .iter()
            .map(|&id| {
                index.position(id).ok_or_else(|| TableError::NoId {
                    location: self.snapshot.location().to_string(),
                    id: id.to_string(),
                    version: self.snapshot.version(),
                })
            })
            .collect::<Result<Vec<u64>, _>>()?;
        self.take(&positions).await
    }

    /// An id column's values as text (an integer id as its digits, as the reads give it).
    fn id_strings(
        &self,
        column: &str,
        array: &arrow_array::ArrayRef,
    ) -> Result<Vec<Arc<str>>, TableError> {
        let refused = |reason: String| TableError::Incompatible {
            location: self.snapshot.location().to_string(),
            reason: format!("id column '{column}': {reason}"),
        };
        if array.null_count() > 0 {
            return Err(refused("a row has a null id".into()));
        }
        let text = arrow_cast::cast(array, &DataType::Utf8).map_err(|e| refused(e.to_string()))?;
        Ok(text
            .as_string::<i32>()
            .iter()
            .map(|id| Arc::from(id.unwrap_or_default()))
            .collect())
    }

    /// The ids the reads make for file `index`'s rows read: `{path}#{row}`, the row counted
    /// over the file's row groups.
    async fn made_ids(&self, index: usize) -> Result<Vec<Arc<str>>, TableError> {
        let footer = self.footer(index).await?;
        let path = self.snapshot.path_of(self.at(index)?).to_string();
        let mut ids = Vec::new();
        let mut first = 0u64;
        for (row_group, meta) in footer.row_groups().iter().enumerate() {
            let rows = u64::try_from(meta.num_rows()).unwrap_or(0);
            match self.selected_rows(index, row_group).await? {
                Some(kept) => ids.extend(
                    kept.iter()
                        .map(|&r| Arc::from(format!("{path}#{}", first + u64::from(r)))),
                ),
                None => ids.extend((0..rows).map(|r| Arc::from(format!("{path}#{}", first + r)))),
            }
            first += rows;
        }
        Ok(ids)
    }
}
