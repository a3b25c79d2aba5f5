//! A version's replayed file list, kept in the node's disk cache: the first rank of a node to
//! open a version of a remote table replays its log and writes what the replay gave (the file
//! list with its statistics, the protocol, the metadata) as one entry; the node's other ranks,
//! and a resume of that version, read it and never read the log (each rank replayed 10⁵ log
//! entries itself: ~0.3 s of CPU and ~30 MB each). Only ranks that ask at once wait, and only
//! for it (`DiskCache::get_or_make`).
//!
//! A version of a Delta table never changes, so the entry is keyed by the store, the table and
//! the version (and this format). It is an Arrow IPC stream: a batch of the files' columns,
//! then a batch of their statistics alone (a rank without a filter drops it before it takes
//! memory), the protocol and metadata as JSON in the schema's metadata. The cache checks every
//! entry's CRC-32 before a byte is used; an entry that is whole but does not decode (written
//! by another format) is not trusted: the rank replays the log itself.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use deltalake::kernel::{DeletionVectorDescriptor, Metadata, Protocol};

use super::{Columns, FileList};
use crate::error::DeltaError;
use crate::replayed::Replayed;

/// Names the entries of this format (a new format is another entry, never misread).
const FORMAT: &str = "voxlake-file-list-1";
const PARTITION: &str = "partition:";

/// The replay of version `version` of the table `shown` (in the store `identity` names),
/// through `cache`: read if a rank of the node made it, else made by `make` (the log loaded
/// and replayed with the statistics) and written. The statistics are kept if `stats`. `None`
/// where `make` found no log (a folder of Parquet files: nothing to keep) or the entry did not
/// decode (the caller replays the log itself).
pub(crate) async fn through<F>(
    cache: &Arc<voxlake_io::cache::DiskCache>,
    identity: &str,
    shown: &str,
    version: u64,
    stats: bool,
    make: F,
) -> Result<Option<Replayed>, DeltaError>
where
    F: std::future::Future<Output = Result<Option<Replayed>, DeltaError>>,
{
    let name = entry_name(shown, version);
    // What the make gave, handed out as it is (no decoding of what was just encoded).
    let made: Mutex<Option<Result<Option<Replayed>, DeltaError>>> = Mutex::new(None);
    let got = cache
        .get_or_make(identity, &name, async {
            let replayed = make.await;
            let encoded = match &replayed {
                Ok(Some(r)) => encode(r).map_err(|e| e.to_string()),
                Ok(None) => Err("no Delta log: nothing kept".to_string()),
                Err(_) => Err("the log's replay failed".to_string()),
            };
            *made.lock().unwrap_or_else(|e| e.into_inner()) = Some(replayed);
            encoded.map_err(|reason| object_store::Error::Generic {
                store: "voxlake file list",
                source: reason.into(),
            })
        })
        .await;
    let keep = |r: Replayed| match stats {
        true => r,
        false => Replayed {
            files: r.files.without_stats(),
            ..r
        },
    };
    if let Some(replayed) = made.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if let (Err(e), Ok(Some(_))) = (&got, &replayed) {
            tracing::warn!(location = shown, version, error = %e, "file list not kept in the node's cache");
        }
        return Ok(replayed?.map(keep));
    }
    let bytes = match got {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(location = shown, version, error = %e, "the node's file list not read: the log is replayed here");
            return Ok(None);
        }
    };
    match decode(&bytes, stats) {
        Ok(replayed) if replayed.version == version => {
            tracing::debug!(
                location = shown,
                version,
                files = replayed.files.len(),
                "file list read from the node's cache"
            );
            Ok(Some(replayed))
        }
        Ok(other) => {
            tracing::warn!(
                location = shown,
                version,
                holds = other.version,
                "the node's file list is of another version: not used"
            );
            Ok(None)
        }
        Err(reason) => {
            tracing::warn!(
                location = shown,
                version,
                reason,
                "the node's file list does not decode: not used, the log is replayed here"
            );
            Ok(None)
        }
    }
}

/// The name of version `version`'s entry of the table `shown`.
fn entry_name(shown: &str, version: u64) -> String {
    format!("{FORMAT}\n{shown}\n{version}")
}

/// Whether a rank of the node already kept version `version` of the table `shown` (in the
/// store `identity` names): a rank that replayed it need not keep it again.
pub(crate) fn kept(
    cache: &voxlake_io::cache::DiskCache,
    identity: &str,
    shown: &str,
    version: u64,
) -> bool {
    cache.has_made(identity, &entry_name(shown, version))
}

/// Keeps `replayed` (replayed here, its statistics kept) in `cache` for the ranks that open
/// its version next, unless one of them already did. A failure is a warning: they replay.
pub(crate) async fn offer(
    cache: &Arc<voxlake_io::cache::DiskCache>,
    identity: &str,
    shown: &str,
    replayed: &Replayed,
) {
    let version = replayed.version;
    let name = entry_name(shown, version);
    let made = cache
        .get_or_make(identity, &name, async {
            encode(replayed).map_err(|e| object_store::Error::Generic {
                store: "voxlake file list",
                source: Box::new(e),
            })
        })
        .await;
    if let Err(e) = made {
        tracing::warn!(location = shown, version, error = %e, "file list not kept in the node's cache");
    }
}

/// `replayed` as an entry (see the [module](self)).
pub(crate) fn encode(replayed: &Replayed) -> Result<Bytes, arrow_schema::ArrowError> {
    let json = |e: serde_json::Error| arrow_schema::ArrowError::ExternalError(Box::new(e));
    let columns = replayed.files.columns();
    let mut vectors: Vec<Option<String>> = vec![None; columns.paths.len()];
    for (index, descriptor) in &replayed.vectors {
        vectors[*index] = Some(serde_json::to_string(descriptor).map_err(json)?);
    }
    let mut fields = vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("object_path", DataType::Utf8, true),
        Field::new("size", DataType::UInt64, false),
        Field::new("records", DataType::UInt64, true),
        Field::new("tag", DataType::Utf8, false),
        Field::new("deletion_vector", DataType::Utf8, true),
    ];
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(columns.paths),
        Arc::new(columns.object_paths),
        Arc::new(columns.sizes),
        Arc::new(columns.records),
        Arc::new(columns.tags),
        Arc::new(StringArray::from(vectors)),
    ];
    for (name, values) in columns.partitions {
        fields.push(Field::new(
            format!("{PARTITION}{name}"),
            DataType::Utf8,
            true,
        ));
        arrays.push(Arc::new(values));
    }
    let metadata = [
        ("version".to_string(), replayed.version.to_string()),
        (
            "protocol".to_string(),
            serde_json::to_string(&replayed.protocol).map_err(json)?,
        ),
        (
            "metaData".to_string(),
            serde_json::to_string(&replayed.metadata).map_err(json)?,
        ),
    ];
    let schema = Arc::new(Schema::new_with_metadata(fields, metadata.into()));
    let files = RecordBatch::try_new(schema.clone(), arrays)?;
    let stats_schema = Arc::new(Schema::new(vec![Field::new("stats", DataType::Utf8, true)]));
    let stats = columns
        .stats
        .unwrap_or_else(|| StringArray::new_null(files.num_rows()));
    let stats = RecordBatch::try_new(stats_schema.clone(), vec![Arc::new(stats)])?;
    let mut out = Vec::new();
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema)?;
        writer.write(&files)?;
        writer.finish()?;
    }
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &stats_schema)?;
        writer.write(&stats)?;
        writer.finish()?;
    }
    Ok(Bytes::from(out))
}

/// The [`Replayed`] an entry holds, its statistics kept if `stats`; what is wrong with it
/// otherwise.
pub(crate) fn decode(bytes: &[u8], stats: bool) -> Result<Replayed, String> {
    let mut cursor = Cursor::new(bytes);
    let files = one_batch(&mut cursor).map_err(|e| format!("its files: {e}"))?;
    let stats = match stats {
        true => {
            let batch = one_batch(&mut cursor).map_err(|e| format!("its statistics: {e}"))?;
            Some(strings(&batch, "stats", true)?)
        }
        false => None,
    };
    let metadata = files.schema().metadata().clone();
    let meta = |key: &str| {
        metadata
            .get(key)
            .ok_or_else(|| format!("no {key} in its schema's metadata"))
    };
    let version: u64 = meta("version")?
        .parse()
        .map_err(|e| format!("version: {e}"))?;
    let protocol: Protocol =
        serde_json::from_str(meta("protocol")?).map_err(|e| format!("protocol: {e}"))?;
    let table: Metadata =
        serde_json::from_str(meta("metaData")?).map_err(|e| format!("metaData: {e}"))?;
    let numbers = |name: &str| -> Result<UInt64Array, String> {
        files
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .cloned()
            .ok_or_else(|| format!("no UInt64 column {name}"))
    };
    let mut partitions = Vec::new();
    for (i, field) in files.schema().fields().iter().enumerate() {
        if let Some(name) = field.name().strip_prefix(PARTITION) {
            let values = files.column(i).as_any().downcast_ref::<StringArray>();
            let values = values.ok_or_else(|| format!("partition column {name} is not Utf8"))?;
            partitions.push((name.to_string(), values.clone()));
        }
    }
    let list = FileList::from_columns(Columns {
        paths: strings(&files, "path", false)?,
        object_paths: strings(&files, "object_path", true)?,
        sizes: numbers("size")?,
        records: numbers("records")?,
        tags: strings(&files, "tag", false)?,
        stats,
        partitions,
    })?;
    let vectors_column = strings(&files, "deletion_vector", true)?;
    let mut vectors = Vec::new();
    for index in 0..vectors_column.len() {
        if vectors_column.is_valid(index) {
            let descriptor: DeletionVectorDescriptor =
                serde_json::from_str(vectors_column.value(index))
                    .map_err(|e| format!("deletion vector of file {index}: {e}"))?;
            vectors.push((index, descriptor));
        }
    }
    Ok(Replayed {
        version,
        protocol,
        metadata: table,
        files: list,
        vectors,
    })
}

/// The one batch of the next IPC stream in `cursor`.
fn one_batch(cursor: &mut Cursor<&[u8]>) -> Result<RecordBatch, String> {
    let mut reader =
        arrow_ipc::reader::StreamReader::try_new(&mut *cursor, None).map_err(|e| e.to_string())?;
    let batch = reader
        .next()
        .ok_or("no batch")?
        .map_err(|e| e.to_string())?;
    // The stream's end marker, so that the next stream starts where the cursor is.
    if let Some(more) = reader.next() {
        return Err(format!(
            "more than one batch ({:?})",
            more.map(|b| b.num_rows())
        ));
    }
    Ok(batch)
}

/// Column `name` of `batch` as strings (nulls only where `nullable`).
fn strings(batch: &RecordBatch, name: &str, nullable: bool) -> Result<StringArray, String> {
    let column = batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| format!("no Utf8 column {name}"))?;
    if !nullable && column.null_count() > 0 {
        return Err(format!("column {name} has nulls"));
    }
    Ok(column.clone())
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::file_list::{Entry, FileListBuilder};

    fn replayed() -> Replayed {
        let mut b = FileListBuilder::new(true);
        for i in 0..5u64 {
            let path = format!("k=v{i}/part-{i}.parquet");
            b.push(
                Entry {
                    path: &path,
                    object_path: (i == 3).then_some("k=v3/part 3.parquet"),
                    size: 100 + i,
                    records: (i != 2).then_some(i),
                    tag: "modified=7",
                    stats: (i != 1).then_some("{\"numRecords\":1}"),
                    order: i as i64,
                },
                [(
                    Cow::Borrowed("k"),
                    (i != 4).then(|| Cow::Owned(format!("v{i}"))),
                )],
            );
        }
        let (files, _) = b.finish(&[]);
        let descriptor: DeletionVectorDescriptor = serde_json::from_str(
            r#"{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":4,"sizeInBytes":40,"cardinality":6}"#,
        )
        .unwrap();
        let protocol: Protocol =
            serde_json::from_str(r#"{"minReaderVersion":1,"minWriterVersion":2}"#).unwrap();
        let metadata: Metadata = serde_json::from_str(
            r#"{"id":"x","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":["k"],"configuration":{"a":"b"},"createdTime":1}"#,
        )
        .unwrap();
        Replayed {
            version: 12,
            protocol,
            metadata,
            files,
            vectors: vec![(2, descriptor)],
        }
    }

    #[test]
    fn a_replay_reads_back_as_it_was_written() {
        let original = replayed();
        let bytes = encode(&original).unwrap();
        for stats in [true, false] {
            let back = decode(&bytes, stats).unwrap();
            assert_eq!(back.version, 12);
            assert_eq!(back.protocol, original.protocol);
            assert_eq!(back.metadata, original.metadata);
            assert_eq!(back.vectors, original.vectors);
            assert_eq!(back.files.len(), 5);
            assert_eq!(back.files.columns().tags, original.files.columns().tags);
            for (a, b) in original.files.iter().zip(back.files.iter()) {
                assert_eq!(a.path(), b.path());
                assert_eq!(a.object_path(), b.object_path());
                assert_eq!(
                    (a.size(), a.rows(), a.records()),
                    (b.size(), b.rows(), b.records())
                );
                assert_eq!(
                    a.partitions().collect::<Vec<_>>(),
                    b.partitions().collect::<Vec<_>>()
                );
                let want = if stats { a.delta_stats() } else { None };
                assert_eq!(b.delta_stats(), want);
            }
        }
    }

    #[test]
    fn a_damaged_entry_is_an_error_not_a_list() {
        let bytes = encode(&replayed()).unwrap();
        assert!(decode(&bytes[..bytes.len() / 2], true).is_err());
        assert!(decode(b"not arrow", false).is_err());
        assert!(decode(&[], false).is_err());
    }
}
