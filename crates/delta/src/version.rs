//! A version as the log describes it ([`LogVersion`]): its protocol checked, its schema and
//! column mapping parsed, its files' deletion vectors read.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use url::Url;

use crate::deletes::{self, Wanted};
use crate::error::DeltaError;
use crate::features::Protocol;
use crate::file_list::FileList;
use crate::mapping::ColumnMapping;
use crate::replayed::Replayed;

/// A version of a Delta table as its log describes it, checked readable.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LogVersion {
    /// The version.
    pub version: u64,
    /// Its protocol (reader features all handled: [`Protocol::check_readable`]).
    pub protocol: Protocol,
    /// How its files name the table's columns.
    pub mapping: ColumnMapping,
    /// The table's configuration (`metaData.configuration`).
    pub configuration: HashMap<String, String>,
    /// The Delta schema as Arrow: logical names and types.
    pub schema: arrow_schema::Schema,
    /// Its partition columns (logical names).
    pub partition_columns: Vec<String>,
    /// The active data files, their deleted rows attached (live rows counted without them).
    pub files: FileList,
}

/// The version `replayed` describes, its deletion vectors read through `store` (rooted at the
/// table, whose URL is `root`); `location` is used in messages.
pub(crate) async fn describe(
    replayed: Replayed,
    store: &Arc<dyn ObjectStore>,
    root: &Url,
    location: &str,
) -> Result<LogVersion, DeltaError> {
    let Replayed {
        version,
        protocol,
        metadata,
        mut files,
        vectors,
    } = replayed;
    let incompatible = |reason: String| DeltaError::Incompatible {
        location: location.to_string(),
        reason,
    };
    let protocol = Protocol::of(&protocol).map_err(&incompatible)?;
    protocol.check_readable().map_err(&incompatible)?;
    let config = metadata.configuration().clone();
    let schema = metadata
        .parse_schema()
        .map_err(|e| incompatible(format!("the Delta schema does not parse: {e}")))?;
    let mapping = ColumnMapping::from_delta(&config, &schema).map_err(&incompatible)?;
    let wanted: Vec<Wanted> = vectors
        .into_iter()
        .map(|(index, descriptor)| Wanted {
            index,
            file: files.at(index).path().to_string(),
            rows: files.at(index).rows(),
            descriptor,
        })
        .collect();
    if !wanted.is_empty() {
        let mut root = root.clone();
        if !root.path().ends_with('/') {
            root.set_path(&format!("{}/", root.path()));
        }
        attach(&mut files, store, &root, location, wanted).await?;
    }
    let schema = delta_kernel::engine::arrow_conversion::TryIntoArrow::try_into_arrow(&schema)
        .map_err(|e: arrow_schema::ArrowError| {
            incompatible(format!("the Delta schema has no Arrow form: {e}"))
        })?;
    Ok(LogVersion {
        version,
        protocol,
        mapping,
        configuration: config,
        schema,
        partition_columns: metadata.partition_columns().to_vec(),
        files,
    })
}

/// Reads the vectors of `wanted` (see [`deletes::read_all`]) and attaches each to its file of `files`,
/// whose live rows are then its add action's count less the deleted ones.
async fn attach(
    files: &mut FileList,
    store: &Arc<dyn ObjectStore>,
    table: &Url,
    location: &str,
    wanted: Vec<Wanted>,
) -> Result<(), DeltaError> {
    let count = wanted.len();
    for (index, deleted) in deletes::read_all(store, table, location, wanted).await? {
        let gone = deleted.rows.len() as u64;
        if let Some(rows) = files.at(index).rows() {
            let live = rows.checked_sub(gone).ok_or_else(|| DeltaError::Corrupt {
                location: location.to_string(),
                file: files.at(index).path().to_string(),
                reason: format!(
                    "its deletion vector deletes {gone} rows, its add action counts {rows}"
                ),
            })?;
            files.set_rows(index, live);
        }
        files.set_deleted(index, deleted);
    }
    tracing::debug!(location, files = count, "deletion vectors read");
    Ok(())
}
