//! A scan's rows by their ids ([`Scan::row_index`], [`RowIndex`]): each row's id at its
//! position, read once from the id column (only that column), or made from the file and row
//! where the table has none, as the reads make them.

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};

use super::Scan;
use crate::error::TableError;
use crate::row_index::{RowIndex, RowIndexBuilder};

impl Scan {
    /// The index of the scan's rows by id: the id column of every file read (that column
    /// only, the files at once), or, where the table has no id column, the ids the reads make
    /// (`{file}#{row}`). A row's id is what a read of it says. An id that two rows share is
    /// an error naming it and both positions: rows asked by id need unique ids. A remote
    /// table read through the node's disk cache keeps the index there: the node's other
    /// processes, and a later lookup of the version, read it instead of the ids.
    pub async fn row_index(&self) -> Result<RowIndex, TableError> {
        match self.snapshot.cache_and_identity() {
            Some((cache, identity)) => self.row_index_through(cache, identity).await,
            None => self.read_row_index().await,
        }
    }

    /// [`row_index`](Self::row_index) read from the table.
    pub(super) async fn read_row_index(&self) -> Result<RowIndex, TableError> {
        let mut index = RowIndex::builder();
        match self.snapshot.columns().id.clone() {
            Some(column) => {
                let values = self.column_values(&[&column]).await?;
                for array in values.into_iter().next().unwrap_or_default() {
                    self.push_ids(&mut index, &column, &array)?;
                }
            }
            None => {
                let files = futures::stream::iter(0..self.files().len())
                    .map(
                        |file| async move { Ok::<_, TableError>((file, self.footer(file).await?)) },
                    )
                    .buffered(crate::READ_CONCURRENCY);
                futures::pin_mut!(files);
                while let Some((file, footer)) = files.try_next().await? {
                    self.push_made_ids(&mut index, file, &footer).await?;
                }
            }
        }
        index.finish().map_err(|dup| TableError::Incompatible {
            location: self.snapshot.location().to_string(),
            reason: format!(
                "id '{}' is the id of rows {} and {} of the scan of version {}: rows are asked by id only where ids are unique",
                dup.id,
                dup.first,
                dup.second,
                self.snapshot.version()
            ),
        })
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

    /// An id column's values as text (an integer id as its digits, as the reads give it),
    /// pushed in order.
    fn push_ids(
        &self,
        index: &mut RowIndexBuilder,
        column: &str,
        array: &arrow_array::ArrayRef,
    ) -> Result<(), TableError> {
        let refused = |reason: String| TableError::Incompatible {
            location: self.snapshot.location().to_string(),
            reason: format!("id column '{column}': {reason}"),
        };
        if array.null_count() > 0 {
            return Err(refused("a row has a null id".into()));
        }
        let text = arrow_cast::cast(array, &DataType::Utf8).map_err(|e| refused(e.to_string()))?;
        for id in text.as_string::<i32>().iter() {
            index.push(id.unwrap_or_default());
        }
        Ok(())
    }

    /// The ids the reads make for file `index`'s rows read (`footer`: its footer), pushed in
    /// order: `{path}#{row}`, the row counted over the file's row groups.
    async fn push_made_ids(
        &self,
        ids: &mut RowIndexBuilder,
        index: usize,
        footer: &parquet::file::metadata::ParquetMetaData,
    ) -> Result<(), TableError> {
        let path = self.snapshot.path_of(self.at(index)?).to_string();
        let mut first = 0u64;
        for (row_group, meta) in footer.row_groups().iter().enumerate() {
            let rows = u64::try_from(meta.num_rows()).unwrap_or(0);
            match self.selected_rows(index, row_group).await? {
                Some(kept) => {
                    for &r in kept.iter() {
                        ids.push(&format!("{path}#{}", first + u64::from(r)));
                    }
                }
                None => {
                    for r in 0..rows {
                        ids.push(&format!("{path}#{}", first + r));
                    }
                }
            }
            first += rows;
        }
        Ok(())
    }
}
