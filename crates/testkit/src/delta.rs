//! Delta logs as Databricks and Delta Spark write them, for tests: rows deleted with deletion
//! vectors (written by the Delta kernel's own writer), in-commit timestamps, commit times, and
//! commits of any actions. Local tables only.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delta_kernel::actions::deletion_vector_writer::{
    DeletionVector, KernelDeletionVector, StreamingDeletionVectorWriter,
};
use futures::TryStreamExt;
use serde_json::{Value, json};

/// Where a commit's deletion vectors go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DvStorage {
    /// One `deletion_vector_<uuid>.bin` beside the data files holding every vector of the
    /// commit, one after another (as Delta Spark writes them; offsets past the first).
    File,
    /// In the log itself (`storageType` `i`, the bitmap base85-encoded).
    Inline,
}

/// The roaring bitmap's magic number (little-endian before the bitmap).
const PORTABLE_MAGIC: u32 = 1681511377;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// The writer features a legacy writer version implies (the protocol's table).
fn legacy_writer_features(version: i64) -> Vec<&'static str> {
    let by_version: [(i64, &[&str]); 5] = [
        (2, &["appendOnly", "invariants"]),
        (3, &["checkConstraints"]),
        (4, &["changeDataFeed", "generatedColumns"]),
        (5, &["columnMapping"]),
        (6, &["identityColumns"]),
    ];
    by_version
        .iter()
        .filter(|(v, _)| version >= *v)
        .flat_map(|(_, f)| f.iter().copied())
        .collect()
}

/// The table's protocol with `reader` and `writer` features added, at reader version 3 and
/// writer version 7. Legacy versions are spelled out as the features they imply where
/// `legacy` says so (Databricks does when it upgrades an old table; a table created with the
/// features lists only them, as `table-with-dv-small` does).
fn protocol_with(protocol: &Value, reader: &[&str], writer: &[&str], legacy: bool) -> Value {
    let list = |key: &str| -> Vec<String> {
        protocol
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut readers = list("readerFeatures");
    let mut writers = list("writerFeatures");
    let reader_version = protocol["minReaderVersion"].as_i64().unwrap_or(1);
    let writer_version = protocol["minWriterVersion"].as_i64().unwrap_or(2);
    if reader_version == 2 {
        readers.push("columnMapping".into());
    }
    if legacy && writer_version < 7 {
        writers.extend(
            legacy_writer_features(writer_version)
                .into_iter()
                .map(String::from),
        );
    }
    for (all, add) in [(&mut readers, reader), (&mut writers, writer)] {
        for f in add {
            if !all.iter().any(|x| x == f) {
                all.push((*f).to_string());
            }
        }
    }
    json!({
        "minReaderVersion": reader_version.max(if readers.is_empty() { 1 } else { 3 }),
        "minWriterVersion": 7,
        "readerFeatures": readers,
        "writerFeatures": writers,
    })
}

/// The latest version of a local table's log (its highest commit).
pub fn latest_version(table: &Path) -> u64 {
    std::fs::read_dir(table.join("_delta_log"))
        .expect("a _delta_log")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let digits = name.strip_suffix(".json")?;
            (digits.len() == 20)
                .then(|| digits.parse::<u64>().ok())
                .flatten()
        })
        .max()
        .expect("a commit")
}

/// Writes commit `version` of a local table: `actions`, one JSON object a line, created only
/// if it does not exist (the atomic put every Delta writer relies on).
pub fn write_commit(table: &Path, version: u64, actions: &[Value]) {
    let path = table.join("_delta_log").join(format!("{version:020}.json"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for action in actions {
        writeln!(file, "{action}").unwrap();
    }
}

/// Deletes rows of a local table's files as Databricks' `DELETE` does with deletion vectors
/// on: one commit that removes each named file's add action and adds it back with a deletion
/// vector of `rows` (0-based rows of the file), its statistics marked wide. A table without
/// the `deletionVectors` feature is upgraded in the same commit (protocol and
/// `delta.enableDeletionVectors`; with `legacy`, the features its legacy writer version
/// implies listed too). Files are named by their add action's path; a file that has a vector
/// already is refused. Returns the new version.
pub async fn delete_rows(
    table: &Path,
    deletes: &[(&str, Vec<u64>)],
    storage: DvStorage,
    legacy: bool,
) -> u64 {
    let url = crate::url_of(table);
    let delta = deltalake::open_table(url).await.expect("the table opens");
    let state = delta.snapshot().expect("a loaded table");
    let read_version = state.version();
    let views: Vec<_> = state
        .snapshot()
        .file_views(delta.log_store().as_ref(), None)
        .try_collect()
        .await
        .expect("the table's files");
    let by_path: HashMap<String, _> = views.iter().map(|v| (v.path().to_string(), v)).collect();

    let mut actions = vec![json!({"commitInfo": {
        "timestamp": now_ms(),
        "operation": "DELETE",
        "operationParameters": {"predicate": "[\"(voxlake-testkit)\"]"},
        "readVersion": read_version,
        "isolationLevel": "WriteSerializable",
        "isBlindAppend": false,
        "engineInfo": "voxlake-testkit (Delta kernel deletion vector writer)",
    }})];
    let protocol = serde_json::to_value(state.protocol()).expect("the protocol serializes");
    let has_feature = protocol["readerFeatures"]
        .as_array()
        .is_some_and(|a| a.iter().any(|f| f == "deletionVectors"));
    if !has_feature {
        actions.push(json!({"protocol": protocol_with(&protocol, &["deletionVectors"], &["deletionVectors"], legacy)}));
        let mut metadata = serde_json::to_value(state.metadata()).expect("metadata serializes");
        metadata["configuration"]["delta.enableDeletionVectors"] = json!("true");
        actions.push(json!({"metaData": metadata}));
    }

    let uuid = uuid::Uuid::new_v4();
    let mut dv_file = Vec::new();
    let mut writer = StreamingDeletionVectorWriter::new(&mut dv_file);
    for (path, rows) in deletes {
        let view = by_path
            .get(*path)
            .unwrap_or_else(|| panic!("no file {path} in the table"));
        assert!(
            view.deletion_vector_descriptor().is_none(),
            "{path} has a deletion vector already"
        );
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(rows.iter().copied());
        let cardinality = dv.cardinality();
        let descriptor = match storage {
            DvStorage::File => {
                let written = writer
                    .write_deletion_vector(dv)
                    .expect("the vector is written");
                json!({
                    "storageType": "u",
                    "pathOrInlineDv": z85::encode(uuid.as_bytes()),
                    "offset": written.offset,
                    "sizeInBytes": written.size_in_bytes,
                    "cardinality": written.cardinality,
                })
            }
            DvStorage::Inline => {
                let bitmap = dv.serialize().expect("the vector serializes");
                let mut bytes = PORTABLE_MAGIC.to_le_bytes().to_vec();
                bytes.extend_from_slice(&bitmap);
                let size = bytes.len();
                // Base85 works on 4-byte words: zeros after the bitmap, which its reader
                // does not look at.
                bytes.resize(size.div_ceil(4) * 4, 0);
                json!({
                    "storageType": "i",
                    "pathOrInlineDv": z85::encode(&bytes),
                    "sizeInBytes": size,
                    "cardinality": cardinality,
                })
            }
        };
        let mut remove = serde_json::to_value(view.remove_action(true)).expect("remove");
        remove["deletionTimestamp"] = json!(now_ms());
        actions.push(json!({"remove": remove}));
        let mut add = json!({
            "path": view.path(),
            "partitionValues": view.partition_values_map(),
            "size": view.size(),
            "modificationTime": view.modification_time(),
            "dataChange": true,
            "deletionVector": descriptor,
        });
        // The statistics now bound deleted rows too: wide, no longer tight.
        if let Some(stats) = view.stats() {
            let mut stats: Value = serde_json::from_str(&stats).expect("stats are JSON");
            stats["tightBounds"] = json!(false);
            add["stats"] = json!(stats.to_string());
        }
        actions.push(json!({"add": add}));
    }
    writer.finalize().expect("the vector file is finished");
    if storage == DvStorage::File {
        std::fs::write(table.join(format!("deletion_vector_{uuid}.bin")), &dv_file)
            .expect("the vector file is written");
    }
    let version = read_version + 1;
    write_commit(table, version, &actions);
    version
}

/// Gives every commit of a local table an in-commit timestamp, as a table created with
/// `delta.enableInCommitTimestamps` has: `times[v]` (milliseconds) for commit `v`, the
/// `commitInfo` first in each commit, the feature in version 0's protocol and configuration.
pub fn set_in_commit_timestamps(table: &Path, times: &[i64]) {
    for (version, &ms) in times.iter().enumerate() {
        let path = table.join("_delta_log").join(format!("{version:020}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut info = json!({"timestamp": ms, "operation": "WRITE"});
        let mut rest = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut action: Value = serde_json::from_str(line).expect("a JSON action");
            if let Some(i) = action.get("commitInfo") {
                info = i.clone();
                continue;
            }
            if let Some(p) = action.get_mut("protocol") {
                *p = protocol_with(p, &[], &["inCommitTimestamp"], false);
            }
            if let Some(m) = action.get_mut("metaData") {
                m["configuration"]["delta.enableInCommitTimestamps"] = json!("true");
            }
            rest.push(action);
        }
        info["inCommitTimestamp"] = json!(ms);
        let mut lines = vec![json!({"commitInfo": info}).to_string()];
        lines.extend(rest.iter().map(Value::to_string));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
}

/// Sets the modification time of each commit `v` of a local table to `times[v]` (what time
/// travel reads where a table has no in-commit timestamps).
pub fn set_commit_times(table: &Path, times: &[SystemTime]) {
    for (version, &at) in times.iter().enumerate() {
        let path = table.join("_delta_log").join(format!("{version:020}.json"));
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.set_modified(at).unwrap();
    }
}

/// `ms` milliseconds after the Unix epoch.
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms as u64)
}
