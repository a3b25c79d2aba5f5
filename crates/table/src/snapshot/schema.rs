//! The table's columns at the version read: the Delta schema of that version decides every
//! column's presence and type; a file's footer only refines how a column it holds is encoded
//! (a fixed-size list, a tensor extension type). Batches of a file are made to fit it
//! ([`Snapshot::conform`]): partition values parsed as the Delta protocol serializes them, a
//! column the file lacks (written before the column was added) as nulls, a column the file
//! holds in a narrower type (before a type widening) cast to the table's, a struct's leaf
//! taken out by its dotted path.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_cast::CastOptions;
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use parquet::errors::ParquetError;

use super::Snapshot;
use crate::error::TableError;

/// The Delta schema of the version read, as Arrow, and its partition columns.
#[derive(Debug, Clone)]
pub(crate) struct DeltaSchema {
    /// Logical names and types (the kernel's Arrow conversion of `metaData.schemaString`).
    pub schema: Schema,
    /// Its partition columns (logical names).
    pub partitions: Vec<String>,
}

/// Whether values of type `t` are one fixed-width number, bool, date, time or decimal per row:
/// the types a table may widen and a file's narrower one is cast to.
fn is_scalar(t: &DataType) -> bool {
    t.is_primitive() || *t == DataType::Boolean
}

/// The table's schema: the Delta schema's columns in its order, each the footer's field where
/// the first file holds it (its encoding: a fixed-size list, a tensor extension) unless the
/// table widened a scalar type; partition columns as the Delta schema types them. Without a
/// Delta log (a listing), the footer's columns and then the listed hive partitions.
pub(crate) fn table_schema(
    delta: Option<&DeltaSchema>,
    footer: Option<&Schema>,
    listed: &HashMap<String, DataType>,
) -> (SchemaRef, HashMap<String, DataType>) {
    let Some(delta) = delta else {
        let mut fields: Vec<FieldRef> = footer
            .map(|s| s.fields().iter().cloned().collect())
            .unwrap_or_default();
        let mut names: Vec<&String> = listed.keys().collect();
        names.sort();
        for name in names {
            if fields.iter().all(|f| f.name() != name) {
                fields.push(Arc::new(Field::new(name, listed[name].clone(), true)));
            }
        }
        let partitions = listed
            .iter()
            .filter(|(k, _)| footer.is_none_or(|s| s.field_with_name(k).is_err()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        return (with_struct_leaves(fields), partitions);
    };
    let mut partitions = HashMap::new();
    let fields: Vec<FieldRef> = delta
        .schema
        .fields()
        .iter()
        .map(|field| {
            let held = footer.and_then(|s| s.field_with_name(field.name()).ok());
            if delta.partitions.contains(field.name()) {
                if held.is_none() {
                    partitions.insert(field.name().clone(), field.data_type().clone());
                }
                return field.clone();
            }
            match held {
                Some(held)
                    if !(is_scalar(held.data_type())
                        && is_scalar(field.data_type())
                        && held.data_type() != field.data_type()) =>
                {
                    Arc::new(held.clone().with_nullable(field.is_nullable()))
                }
                _ => field.clone(),
            }
        })
        .collect();
    (with_struct_leaves(fields), partitions)
}

/// `fields`, then the leaves of their struct columns by dotted path.
fn with_struct_leaves(fields: Vec<FieldRef>) -> SchemaRef {
    let schema = Schema::new(fields);
    let leaves = struct_leaves(&schema);
    if leaves.is_empty() {
        return Arc::new(schema);
    }
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    fields.extend(leaves);
    Arc::new(Schema::new(fields))
}

/// The leaves of `schema`'s struct columns, each as a field named by its dotted path
/// (`meta.depth`), nullable (null where a parent is): a struct's leaf may be a field or a
/// filter's column.
pub(crate) fn struct_leaves(schema: &Schema) -> Vec<FieldRef> {
    fn walk(prefix: &str, field: &Field, out: &mut Vec<FieldRef>) {
        let DataType::Struct(children) = field.data_type() else {
            return;
        };
        for child in children {
            let path = format!("{prefix}.{}", child.name());
            match child.data_type() {
                DataType::Struct(_) => walk(&path, child, out),
                t => out.push(Arc::new(Field::new(path, t.clone(), true))),
            }
        }
    }
    let mut out = Vec::new();
    for field in schema.fields() {
        walk(field.name(), field, &mut out);
    }
    out.retain(|leaf| schema.field_with_name(leaf.name()).is_err());
    out
}

/// The top-level column a column of the table is read from: itself, or for a struct's leaf
/// (`meta.depth`) its struct (`meta`).
pub(crate) fn root_of<'a>(schema: &Schema, name: &'a str) -> &'a str {
    match name.split_once('.') {
        Some((root, _))
            if schema
                .field_with_name(root)
                .is_ok_and(|f| matches!(f.data_type(), DataType::Struct(_))) =>
        {
            root
        }
        _ => name,
    }
}

/// Column `path` of `batch`: a column of that name, else the leaf of a struct column by its
/// dotted path, null wherever a parent is.
pub(crate) fn column_at_path(batch: &RecordBatch, path: &str) -> Option<ArrayRef> {
    if let Some(column) = batch.column_by_name(path) {
        return Some(column.clone());
    }
    let mut parts = path.split('.');
    let mut array = batch.column_by_name(parts.next()?)?.clone();
    let mut nulls = array.logical_nulls();
    for part in parts {
        let parent = array.as_any().downcast_ref::<arrow_array::StructArray>()?;
        let child = parent.column_by_name(part)?.clone();
        nulls = arrow_buffer::NullBuffer::union(nulls.as_ref(), child.logical_nulls().as_ref());
        array = child;
    }
    let data = array.to_data().into_builder().nulls(nulls).build().ok()?;
    Some(arrow_array::make_array(data))
}

impl Snapshot {
    /// A decoded batch of file `index` made to fit the table's schema, for the columns the
    /// sample is read from (`wanted`): partition values as constant columns, columns the file
    /// lacks as nulls, scalar columns of a narrower type cast to the table's.
    pub(super) fn conform(
        &self,
        index: usize,
        batch: RecordBatch,
        wanted: &[&String],
    ) -> Result<RecordBatch, TableError> {
        let rows = batch.num_rows();
        let schema = batch.schema();
        let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
        let mut arrays = batch.columns().to_vec();
        let mut changed = false;
        let file = self.files.at(index);
        let bad = |reason: String| TableError::Incompatible {
            location: self.location.clone(),
            reason: format!("file {}: {reason}", file.path()),
        };
        for (i, field) in schema.fields().iter().enumerate() {
            let Ok(table) = self.schema.field_with_name(field.name()) else {
                continue;
            };
            if table.data_type() != field.data_type()
                && is_scalar(table.data_type())
                && is_scalar(field.data_type())
            {
                arrays[i] = arrow_cast::cast_with_options(
                    &arrays[i],
                    table.data_type(),
                    &CastOptions {
                        safe: false,
                        ..Default::default()
                    },
                )
                .map_err(|e| {
                    bad(format!(
                        "column '{}' of {} does not widen to the table's {}: {e}",
                        field.name(),
                        field.data_type(),
                        table.data_type()
                    ))
                })?;
                fields[i] = Arc::new(
                    field
                        .as_ref()
                        .clone()
                        .with_data_type(table.data_type().clone()),
                );
                changed = true;
            }
        }
        for &name in wanted {
            if batch.column_by_name(name).is_some() || fields.iter().any(|f| f.name() == name) {
                continue;
            }
            // A struct's leaf, where the file holds the struct.
            let leaf = match name.contains('.') {
                true => column_at_path(&batch, name),
                false => None,
            };
            let array = match self.partition_types.get(name) {
                _ if leaf.is_some() => {
                    leaf.unwrap_or_else(|| arrow_array::new_empty_array(&DataType::Null))
                }
                Some(data_type) => {
                    let value = file.partition(name).flatten();
                    voxlake_delta::partition_column(value, data_type, rows)
                        .map_err(|e| bad(format!("partition column '{name}': {e}")))?
                }
                // Written before the column was added to the table: null in this file.
                None => match self.schema.field_with_name(name) {
                    Ok(field) => arrow_array::new_null_array(field.data_type(), rows),
                    Err(_) => continue,
                },
            };
            fields.push(Arc::new(Field::new(name, array.data_type().clone(), true)));
            arrays.push(array);
            changed = true;
        }
        if !changed {
            return Ok(batch);
        }
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            arrays,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delta_schema_decides_presence_and_scalar_types() {
        let delta = DeltaSchema {
            schema: Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new(
                    "v",
                    DataType::List(Arc::new(Field::new("element", DataType::Float32, true))),
                    true,
                ),
                Field::new("added", DataType::Utf8, true),
                Field::new("code", DataType::Utf8, true),
            ]),
            partitions: vec!["code".into()],
        };
        let fsl = DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 4);
        let footer = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("v", fsl.clone(), true),
        ]);
        let (schema, partitions) = table_schema(Some(&delta), Some(&footer), &HashMap::new());
        let types: Vec<&DataType> = schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(
            types,
            [&DataType::Int64, &fsl, &DataType::Utf8, &DataType::Utf8]
        );
        assert_eq!(
            partitions,
            HashMap::from([("code".to_string(), DataType::Utf8)])
        );
        // A listing: the footer's columns, then the hive partitions.
        let listed = HashMap::from([("year".to_string(), DataType::Int64)]);
        let (schema, partitions) = table_schema(None, Some(&footer), &listed);
        assert_eq!(schema.fields().len(), 3);
        assert_eq!(partitions, listed);
    }
}

#[cfg(test)]
mod struct_tests {
    use super::*;
    use arrow_array::cast::AsArray;

    #[test]
    fn a_struct_leaf_is_null_where_a_parent_is() {
        let depth: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![
            Some(1.5),
            None,
            Some(9.0),
        ]));
        let meta = arrow_array::StructArray::try_new(
            vec![Field::new("depth", DataType::Float64, true)].into(),
            vec![depth],
            Some(arrow_buffer::NullBuffer::from(vec![true, true, false])),
        )
        .unwrap();
        let batch = RecordBatch::try_from_iter([("meta", Arc::new(meta) as ArrayRef)]).unwrap();
        let leaf = column_at_path(&batch, "meta.depth").unwrap();
        let values = leaf.as_primitive::<arrow_array::types::Float64Type>();
        assert_eq!(values.iter().collect::<Vec<_>>(), [Some(1.5), None, None]);
        assert!(column_at_path(&batch, "meta.nope").is_none());
        let leaves = struct_leaves(&batch.schema());
        assert_eq!(leaves[0].name(), "meta.depth");
        assert_eq!(root_of(&batch.schema(), "meta.depth"), "meta");
        let flat = Schema::new(vec![Field::new("meta", DataType::Int8, true)]);
        assert_eq!(root_of(&flat, "meta.depth"), "meta.depth");
    }
}
