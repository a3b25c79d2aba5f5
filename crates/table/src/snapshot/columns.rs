//! How a snapshot's samples are read, decided once at open: a voxlake table read as it is
//! from its configuration alone; any other table from the first file's footer and, for a
//! BINARY tensor column, its first value (`np.save` bytes say their shape).

use std::collections::HashMap;

use parquet::arrow::async_reader::AsyncFileReader;
use voxlake_format::SampleSpec;
use voxlake_format::sample::{ColumnHints, SampleColumns};
use voxlake_format::volume::BrickSpec;

use super::read::first_binary_value;
use super::{Snapshot, schema};
use crate::error::TableError;

/// The first read of a BINARY tensor column's first value at open (see `first_value`): one
/// `np.save` cube of the reference case is 360 KB.
const FIRST_VALUE_BYTES: u64 = 1 << 20;

impl Snapshot {
    /// Decides how samples are read. A voxlake table read as it is needs its configuration
    /// only; any other table is resolved from the first file's footer (and, for a BINARY
    /// tensor column, its first value: `np.save` bytes say their shape).
    pub(super) async fn resolve_columns(
        mut self,
        config: &HashMap<String, String>,
        hints: &ColumnHints,
    ) -> Result<Snapshot, TableError> {
        let incompatible = |e: voxlake_format::FormatError| TableError::Incompatible {
            location: self.location.clone(),
            reason: e.to_string(),
        };
        let voxlake = config.contains_key(voxlake_format::FORMAT_VERSION_KEY);
        if voxlake {
            self.stored = Some(SampleSpec::from_table_configuration(config).map_err(incompatible)?);
            self.bricks = BrickSpec::from_table_configuration(config).map_err(incompatible)?;
        }
        if let (Some(stored), true, Some(_)) = (&self.stored, hints.is_empty(), &self.delta) {
            // The configuration says how samples are read: no footer needed.
            let (schema, partitions) =
                schema::table_schema(self.delta.as_ref(), None, &HashMap::new());
            (self.schema, self.partition_types) = (schema, partitions);
            self.columns = SampleColumns::stored(stored);
            return Ok(self);
        }
        if self.files.is_empty() && self.delta.is_none() {
            return Err(TableError::Incompatible {
                location: self.location.clone(),
                reason: format!(
                    "version {} has no data files to learn the tensor column from",
                    self.version
                ),
            });
        }
        let footer = match self.files.is_empty() {
            true => None,
            false => Some(self.logical_schema(&self.reader_metadata(0).await?)),
        };
        // A listing's hive partitions: Int64 where every value is an integer, else Utf8.
        let keys: Vec<&str> = self.files.partition_columns().collect();
        let listed: HashMap<String, arrow_schema::DataType> = match self.delta {
            Some(_) => HashMap::new(),
            None => keys
                .into_iter()
                .map(|key| {
                    let integers = self.files.iter().all(|f| {
                        f.partition(key)
                            .flatten()
                            .is_none_or(|v| v.parse::<i64>().is_ok())
                    });
                    let t = if integers {
                        arrow_schema::DataType::Int64
                    } else {
                        arrow_schema::DataType::Utf8
                    };
                    (key.to_string(), t)
                })
                .collect(),
        };
        let (table_schema, partitions) =
            schema::table_schema(self.delta.as_ref(), footer.as_deref(), &listed);
        (self.schema, self.partition_types) = (table_schema.clone(), partitions);
        let schema = table_schema.as_ref();
        // The first value of each BINARY field column of a table that is not voxlake's.
        let binary: Vec<String> = SampleColumns::field_columns(schema, hints)
            .map_err(incompatible)?
            .iter()
            .filter(|c| {
                !voxlake
                    && footer
                        .as_ref()
                        .is_some_and(|f| f.field_with_name(c.field.name()).is_ok())
                    && matches!(
                        c.field.data_type(),
                        arrow_schema::DataType::Binary
                            | arrow_schema::DataType::LargeBinary
                            | arrow_schema::DataType::BinaryView
                    )
            })
            .map(|c| c.field.name().clone())
            .collect();
        let mut first = HashMap::new();
        for column in binary {
            if let Some(value) = self.first_value(&column).await? {
                first.insert(column, value);
            }
        }
        let columns = match SampleColumns::resolve(schema, config, hints, &first) {
            Ok(columns) => columns,
            // An empty version has no first value to learn a BINARY column's tensors from, and
            // no rows to read with them: it opens, and reads nothing.
            Err(e) if self.files.is_empty() => {
                tracing::debug!(
                    location = self.location.as_str(),
                    reason = %e,
                    "an empty version: the sample is not resolved"
                );
                self.columns.clone()
            }
            Err(e) => return Err(incompatible(e)),
        };
        tracing::debug!(
            location = self.location.as_str(),
            sample = %columns.sample,
            encodings = ?columns.fields.iter().map(|f| f.encoding.describe()).collect::<Vec<_>>(),
            native = columns.native,
            "resolved the sample columns"
        );
        self.columns = columns;
        Ok(self)
    }

    /// The first value of binary column `column` of file 0 (its first row), read from the first
    /// pages of its chunk in row group 0: a prefix of [`FIRST_VALUE_BYTES`], doubled until the
    /// first value's pages are in it, not the whole chunk (a Petastorm row group's tensor chunk
    /// is up to 256 MB).
    async fn first_value(&self, column: &str) -> Result<Option<Vec<u8>>, TableError> {
        let meta = self.reader_metadata(0).await?;
        let parquet = meta.metadata();
        if parquet.num_row_groups() == 0 {
            return Ok(None);
        }
        let schema = parquet.file_metadata().schema_descr();
        // By position: under column mapping the file names the column otherwise.
        let Ok(root) = self.logical_schema(&meta).index_of(column) else {
            return Ok(None);
        };
        let Some(leaf) = (0..schema.num_columns()).find(|&i| {
            schema.get_column_root_idx(i) == root && schema.column(i).path().parts().len() == 1
        }) else {
            return Ok(None);
        };
        let group = parquet.row_group(0);
        let chunk = group.column(leaf);
        let rows = group.num_rows().max(0) as usize;
        let (start, len) = chunk.byte_range();
        let mut want = FIRST_VALUE_BYTES.min(len);
        loop {
            let prefix = self
                .reader(0)
                .get_bytes(start..start + want)
                .await
                .map_err(|e| self.file_error(0, e))?;
            match first_binary_value(prefix, chunk, schema.column(leaf), rows) {
                Ok(value) => return Ok(value),
                // Most likely the prefix ends inside the first value's pages: read more.
                Err(_) if want < len => want = want.saturating_mul(2).min(len),
                Err(e) => return Err(self.file_error(0, e)),
            }
        }
    }
}
