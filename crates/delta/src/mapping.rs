//! Delta column mapping: a table whose log names its columns (`cube`) by other names in its
//! files (`col-5f0e…`, Databricks does this on any rename or drop). Every name a user gives is
//! a logical name; each file's columns are found by physical name (`name` mode) or Parquet
//! field id (`id` mode), and read under their logical names, so the rest of the snapshot, and
//! its errors, speak logical names only. Partition values and file statistics in the log are
//! keyed by physical name.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, FieldRef, Schema};
use deltalake::kernel::{MetadataValue, StructType};

/// The Arrow field metadata key parquet gives a field's Parquet field id under.
const FIELD_ID_KEY: &str = "PARQUET:field_id";
const MODE_KEY: &str = "delta.columnMapping.mode";
const PHYSICAL_KEY: &str = "delta.columnMapping.physicalName";
const ID_KEY: &str = "delta.columnMapping.id";

/// How the files find a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MappingMode {
    /// Files name columns as the log does.
    #[default]
    None,
    /// By physical name.
    Name,
    /// By Parquet field id.
    Id,
}

/// A table's top-level columns: logical name → physical name and field id.
#[derive(Debug, Clone, Default)]
pub struct ColumnMapping {
    mode: MappingMode,
    by_logical: HashMap<String, (String, Option<i64>)>,
    by_physical: HashMap<String, String>,
    by_id: HashMap<i64, String>,
}

impl ColumnMapping {
    /// The mapping the table's configuration and schema describe. A mapped column without a
    /// physical name (or, in `id` mode, an id) is an error naming it.
    pub(crate) fn from_delta(
        config: &HashMap<String, String>,
        schema: &StructType,
    ) -> Result<ColumnMapping, String> {
        let mode = match config.get(MODE_KEY).map(String::as_str) {
            None | Some("none") => return Ok(ColumnMapping::default()),
            Some("name") => MappingMode::Name,
            Some("id") => MappingMode::Id,
            Some(other) => {
                return Err(format!(
                    "column mapping mode '{other}' is not one of none, name, id"
                ));
            }
        };
        let mut mapping = ColumnMapping {
            mode,
            ..ColumnMapping::default()
        };
        for field in schema.fields() {
            let logical = field.name().clone();
            let physical = match field.metadata().get(PHYSICAL_KEY) {
                Some(MetadataValue::String(p)) => p.clone(),
                _ => {
                    return Err(format!(
                        "column '{logical}' has no {PHYSICAL_KEY} under column mapping mode {mode:?}"
                    ));
                }
            };
            let id = match field.metadata().get(ID_KEY) {
                Some(MetadataValue::Number(n)) => Some(*n),
                _ if mode == MappingMode::Id => {
                    return Err(format!(
                        "column '{logical}' has no {ID_KEY} under column mapping mode id"
                    ));
                }
                _ => None,
            };
            mapping
                .by_physical
                .insert(physical.clone(), logical.clone());
            if let Some(id) = id {
                mapping.by_id.insert(id, logical.clone());
            }
            mapping.by_logical.insert(logical, (physical, id));
        }
        Ok(mapping)
    }

    /// The mode.
    pub fn mode(&self) -> MappingMode {
        self.mode
    }

    /// Whether files name columns as the log does.
    pub fn is_identity(&self) -> bool {
        self.mode == MappingMode::None
    }

    /// The name column `logical` has in the log's statistics and partition values.
    pub fn physical<'a>(&'a self, logical: &'a str) -> &'a str {
        self.by_logical
            .get(logical)
            .map_or(logical, |(physical, _)| physical.as_str())
    }

    /// The logical name of a partition value's key (physical under column mapping).
    pub fn logical_key(&self, physical: &str) -> String {
        match self.mode {
            MappingMode::None => physical.to_string(),
            _ => self
                .by_physical
                .get(physical)
                .cloned()
                .unwrap_or_else(|| physical.to_string()),
        }
    }

    /// The logical name of a file's column `field` (by physical name, or by field id in `id`
    /// mode), or `None` when the table does not map it (a dropped column: it keeps its name,
    /// and no logical name reaches it).
    fn logical_of(&self, field: &Field) -> Option<&String> {
        match self.mode {
            MappingMode::None => None,
            MappingMode::Name => self.by_physical.get(field.name()),
            MappingMode::Id => field
                .metadata()
                .get(FIELD_ID_KEY)
                .and_then(|id| id.parse::<i64>().ok())
                .and_then(|id| self.by_id.get(&id))
                .or_else(|| self.by_physical.get(field.name())),
        }
    }

    fn renamed(&self, field: &FieldRef) -> FieldRef {
        match self.logical_of(field) {
            Some(logical) if logical != field.name() => {
                Arc::new(field.as_ref().clone().with_name(logical.as_str()))
            }
            _ => field.clone(),
        }
    }

    /// A file's Arrow schema with its columns under their logical names.
    pub fn logical_schema(&self, schema: &Schema) -> Schema {
        let fields: Vec<FieldRef> = schema.fields().iter().map(|f| self.renamed(f)).collect();
        Schema::new_with_metadata(fields, schema.metadata().clone())
    }

    /// A decoded batch with its columns under their logical names (the decoder names them as
    /// the file does).
    pub fn logical_batch(&self, batch: RecordBatch) -> RecordBatch {
        if self.is_identity() {
            return batch;
        }
        let schema = Arc::new(self.logical_schema(batch.schema().as_ref()));
        let rows = batch.num_rows();
        let columns = batch.columns().to_vec();
        RecordBatch::try_new_with_options(
            schema,
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        // Only names change: the columns fit the schema they came with.
        .unwrap_or(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::DataType;

    fn schema(mode: &str) -> (HashMap<String, String>, StructType) {
        let json = r#"{"type":"struct","fields":[
            {"name":"Full Name","type":"string","nullable":true,"metadata":{"delta.columnMapping.id":2,"delta.columnMapping.physicalName":"col-b"}},
            {"name":"cube","type":"binary","nullable":true,"metadata":{"delta.columnMapping.id":3,"delta.columnMapping.physicalName":"col-c"}}]}"#;
        let config = HashMap::from([(MODE_KEY.to_string(), mode.to_string())]);
        (config, serde_json::from_str(json).unwrap())
    }

    fn with_id(name: &str, id: i64) -> Field {
        Field::new(name, DataType::Utf8, true)
            .with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), id.to_string())]))
    }

    #[test]
    fn name_mode_reads_columns_by_physical_name() {
        let (config, delta) = schema("name");
        let mapping = ColumnMapping::from_delta(&config, &delta).unwrap();
        let file = Schema::new(vec![
            with_id("col-b", 2),
            Field::new("col-c", DataType::Binary, true),
            Field::new("col-dropped", DataType::Int32, true),
        ]);
        let logical = mapping.logical_schema(&file);
        let names: Vec<&str> = logical.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["Full Name", "cube", "col-dropped"]);
        assert_eq!(mapping.physical("cube"), "col-c");
        assert_eq!(mapping.physical("other"), "other");
        assert_eq!(mapping.logical_key("col-b"), "Full Name");
    }

    #[test]
    fn id_mode_reads_columns_by_field_id_whatever_their_name() {
        let (config, delta) = schema("id");
        let mapping = ColumnMapping::from_delta(&config, &delta).unwrap();
        // A file that named the column otherwise: its field id decides.
        let file = Schema::new(vec![with_id("written_as", 3), with_id("col-b", 2)]);
        let logical = mapping.logical_schema(&file);
        assert_eq!(logical.field(0).name(), "cube");
        assert_eq!(logical.field(1).name(), "Full Name");
        // In name mode the same file's first column is unknown (not a physical name).
        let (config, delta) = schema("name");
        let by_name = ColumnMapping::from_delta(&config, &delta).unwrap();
        assert_eq!(by_name.logical_schema(&file).field(0).name(), "written_as");
    }

    #[test]
    fn tables_without_mapping_keep_their_names_and_bad_ones_are_named() {
        let (_, delta) = schema("none");
        let none = ColumnMapping::from_delta(&HashMap::new(), &delta).unwrap();
        assert!(none.is_identity());
        assert_eq!(none.logical_key("col-b"), "col-b");
        let bad = HashMap::from([(MODE_KEY.to_string(), "uuid".to_string())]);
        let err = ColumnMapping::from_delta(&bad, &delta).unwrap_err();
        assert!(err.contains("'uuid'"), "{err}");
        let unnamed: StructType = serde_json::from_str(
            r#"{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}"#,
        )
        .unwrap();
        let err =
            ColumnMapping::from_delta(&HashMap::from([(MODE_KEY.into(), "name".into())]), &unnamed)
                .unwrap_err();
        assert!(err.contains("column 'x'"), "{err}");
    }
}
