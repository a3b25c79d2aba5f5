//! The files of a folder of Parquet files without a Delta log, listed once.

use std::borrow::Cow;
use std::sync::Arc;

use deltalake::DeltaTableError;
use futures::TryStreamExt;
use object_store::ObjectStore;

use super::{Entry, FileList, FileListBuilder};
use crate::error::DeltaError;

/// The data files of a folder of Parquet files without a Delta log: every `.parquet` object
/// under the store's root, listed once and sorted by path, skipping folders and files whose
/// names start with `_` or `.` (`_delta_log`, `_SUCCESS`, `.crc` files).
pub(crate) async fn listed(
    store: &Arc<dyn ObjectStore>,
    location: &str,
) -> Result<FileList, DeltaError> {
    let objects: Vec<object_store::ObjectMeta> =
        store.list(None).try_collect().await.map_err(|e| {
            DeltaError::deltalake(location, DeltaTableError::ObjectStore { source: e })
        })?;
    let listed = objects.len();
    let mut builder = FileListBuilder::new(false);
    for o in objects.iter().filter(|o| {
        let parts: Vec<_> = o.location.parts().collect();
        parts
            .iter()
            .all(|p| !p.as_ref().starts_with('_') && !p.as_ref().starts_with('.'))
            && parts
                .last()
                .is_some_and(|p| p.as_ref().ends_with(".parquet"))
    }) {
        let tag = match (&o.e_tag, &o.version) {
            (Some(e_tag), _) => format!("etag={e_tag}"),
            (None, Some(version)) => format!("version={version}"),
            (None, None) => format!("modified={}", o.last_modified.timestamp_millis()),
        };
        builder.push(
            Entry {
                path: o.location.as_ref(),
                object_path: None,
                size: o.size,
                records: None,
                tag: &tag,
                stats: None,
                // Listed files are in path order.
                order: 0,
            },
            hive_partitions(o.location.as_ref())
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k), v.map(Cow::Owned))),
        );
    }
    drop(objects);
    let (files, _) = builder.finish(&[]);
    if files.is_empty() {
        return Err(match listed {
            0 => DeltaError::NotFound {
                location: location.to_string(),
                reason:
                    "nothing at this location: no Delta table (no _delta_log) and no .parquet files"
                        .to_string(),
            },
            n => DeltaError::Incompatible {
                location: location.to_string(),
                reason: format!(
                    "neither a Delta table (no _delta_log) nor a folder of .parquet files ({n} other objects)"
                ),
            },
        });
    }
    Ok(files)
}

/// `key=value` folders of a listed file's path, as hive writes partitions.
fn hive_partitions(path: &str) -> Vec<(String, Option<String>)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            let v = (v != "__HIVE_DEFAULT_PARTITION__").then(|| v.to_string());
            (k.to_string(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_folders_are_partitions() {
        assert_eq!(
            hive_partitions("region=a/year=2024/part-0.parquet"),
            vec![
                ("region".to_string(), Some("a".to_string())),
                ("year".to_string(), Some("2024".to_string()))
            ]
        );
        assert_eq!(
            hive_partitions("k=__HIVE_DEFAULT_PARTITION__/x=1.parquet"),
            vec![("k".to_string(), None)]
        );
        assert!(hive_partitions("part-0.parquet").is_empty());
    }
}
