//! A log of commits only (no checkpoint) replayed by voxlake itself: its commits fetched all at
//! once ([`COMMIT_READS`] in flight) and their actions reconciled newest first, as the Delta
//! protocol says, into the files of the version.
//!
//! The Delta kernel reads such a log twice (once for the protocol and metadata, which version 0
//! holds, once for the files), a commit after the other through its own reader. Here each
//! commit is fetched once and parsed once, all at once (docs/benchmarks.md, "How does opening
//! scale").
//!
//! Only the plain case is read here: commits `0..=v`, all listed, no checkpoint (nor a
//! `_last_checkpoint`), every line parsed, a protocol and metadata found. Anything else —
//! a checkpoint, a gap, a line that does not parse, a version past the end — is left to the
//! kernel ([`replay`] answers `None`), whose reading and errors are the reference; what was
//! read here is handed to it through the [`LogMemo`] (the commits kept, `_last_checkpoint`
//! and the listing primed), so leaving costs no round trip. `_last_checkpoint` and the
//! listing are asked at once ([`Asked`], or before the open: [`LogAhead`]): where there is a
//! checkpoint, the listing is handed on if its first page held it all, else dropped (the
//! kernel lists from the checkpoint).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::log_memo::LogMemo;
use bytes::Bytes;
use deltalake::DeltaTableError;
use deltalake::kernel::{DeletionVectorDescriptor, Metadata, Protocol as DeltaProtocol};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use percent_encoding::percent_decode_str;
use serde::Deserialize;
use url::Url;

use super::asked::{Asked, LogAhead, log_paths};
use crate::error::DeltaError;
use crate::file_list::{Entry, FileListBuilder};
use crate::log_file::LogFile;
use crate::mapping::ColumnMapping;
use crate::replayed::Replayed;

/// Commits fetched at once.
pub(crate) const COMMIT_READS: usize = 128;

/// The log folder, under the table's root.
const LOG: &str = "_delta_log";

/// One line of a commit: the actions this reader uses (others are skipped unparsed).
#[derive(Deserialize)]
struct Line {
    add: Option<Add>,
    remove: Option<Remove>,
    protocol: Option<DeltaProtocol>,
    #[serde(rename = "metaData")]
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Add {
    path: String,
    #[serde(default)]
    partition_values: HashMap<String, Option<String>>,
    size: i64,
    modification_time: i64,
    stats: Option<String>,
    deletion_vector: Option<DeletionVectorDescriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Remove {
    path: String,
    deletion_vector: Option<DeletionVectorDescriptor>,
}

/// The row count of an add's statistics.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Records {
    num_records: Option<i64>,
}

/// A file's identity in the log: its path and its deletion vector's (the protocol's
/// `(path, deletionVector.uniqueId)`).
type FileKey = (String, Option<(String, String, Option<i32>)>);

fn key(path: &str, dv: Option<&DeletionVectorDescriptor>) -> FileKey {
    let dv = dv.map(|d| {
        let storage = serde_json::to_string(&d.storage_type).unwrap_or_default();
        (storage, d.path_or_inline_dv.clone(), d.offset)
    });
    (path.to_string(), dv)
}

/// The listing's commits, where the log is one this reader takes: no checkpoint, versions
/// `0..=target` all there. `version`: the one asked (`None`: the latest).
fn commits_to_read(listing: &[ObjectMeta], version: Option<u64>) -> Option<Vec<ObjectMeta>> {
    let mut commits: Vec<(u64, &ObjectMeta)> = Vec::new();
    for meta in listing {
        let Some(name) = meta.location.filename() else {
            continue;
        };
        // Only objects right under `_delta_log/` (not `_sidecars/`, `_staged_commits/`, …).
        if meta.location.as_ref().rsplit('/').nth(1) != Some(LOG) {
            continue;
        }
        match LogFile::parse(name) {
            Some(LogFile::Commit(version)) => commits.push((version, meta)),
            // A checkpoint (or a name like one): the kernel reads it.
            Some(LogFile::Checkpoint(_)) => return None,
            None if name.contains(".checkpoint") => return None,
            None => {}
        }
    }
    commits.sort_by_key(|(v, _)| *v);
    let latest = commits.last()?.0;
    let target = version.unwrap_or(latest);
    if target > latest {
        return None;
    }
    let wanted: Vec<ObjectMeta> = commits
        .into_iter()
        .take_while(|(v, _)| *v <= target)
        .enumerate()
        .map(|(i, (v, meta))| (i as u64 == v).then(|| meta.clone()))
        .collect::<Option<_>>()?;
    (wanted.len() as u64 == target + 1).then_some(wanted)
}

/// A commit's bytes.
async fn fetch(store: Arc<dyn ObjectStore>, location: Path) -> object_store::Result<Bytes> {
    store.get(&location).await?.bytes().await
}

/// The table's partition columns by logical name with their types, and the values found to
/// parse as them: a value the kernel refuses as it replays (`'someday'` for a date) leaves the
/// log to it, so that such a table is refused as it opens, not when the file is read.
struct Partitions {
    types: HashMap<String, arrow_schema::DataType>,
    parsed: HashSet<(String, String)>,
}

impl Partitions {
    fn of(schema: &deltalake::kernel::StructType, columns: &[String]) -> Partitions {
        let types = columns
            .iter()
            .filter_map(|name| {
                let field = schema.field(name)?;
                let arrow: arrow_schema::DataType =
                    delta_kernel::engine::arrow_conversion::TryIntoArrow::try_into_arrow(
                        field.data_type(),
                    )
                    .ok()?;
                Some((name.clone(), arrow))
            })
            .collect();
        Partitions {
            types,
            parsed: HashSet::new(),
        }
    }

    /// Whether `value` of partition column `name` parses as its type (a value seen before,
    /// once: partition values repeat).
    fn parse(&mut self, name: &str, value: Option<&str>) -> bool {
        let (Some(value), Some(data_type)) = (value, self.types.get(name)) else {
            return true;
        };
        let key = (name.to_string(), value.to_string());
        if self.parsed.contains(&key) {
            return true;
        }
        let ok = crate::partition::partition_column(Some(value), data_type, 1).is_ok();
        if ok {
            self.parsed.insert(key);
        }
        ok
    }
}

/// What the commits say, reconciled newest first.
struct Reconciled {
    protocol: Option<DeltaProtocol>,
    metadata: Option<Metadata>,
    seen: HashSet<FileKey>,
    /// The live adds, newest first.
    adds: Vec<Add>,
}

impl Reconciled {
    /// Takes one commit's actions; `None` where a line does not parse (left to the kernel).
    fn commit(&mut self, bytes: &[u8]) -> Option<()> {
        let mut removed = Vec::new();
        let mut added = Vec::new();
        for line in bytes.split(|&b| b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line: Line = serde_json::from_slice(line).ok()?;
            if let Some(p) = line.protocol {
                self.protocol.get_or_insert(p);
            }
            if let Some(m) = line.metadata {
                self.metadata.get_or_insert(m);
            }
            if let Some(r) = line.remove {
                removed.push(key(&r.path, r.deletion_vector.as_ref()));
            }
            if let Some(a) = line.add {
                added.push(a);
            }
        }
        // A file added by a newer commit, or removed by a newer commit, is decided already.
        for add in added {
            if self
                .seen
                .insert(key(&add.path, add.deletion_vector.as_ref()))
            {
                self.adds.push(add);
            }
        }
        self.seen.extend(removed);
        Some(())
    }
}

/// The replay at `version` (`None`: the latest) of the log at `log_root` (`_delta_log/`'s URL)
/// in `store` (the table's store at its root, as the kernel's engine reads it), where it is a
/// log of commits only; `None` for any other log (left to the kernel, see the
/// [module](self)). `stats` keeps the files' statistics; `location` names the table in
/// messages; `ahead`: the log's first answers where they were asked before the open.
pub(crate) async fn replay(
    store: &Arc<dyn ObjectStore>,
    log_root: &Url,
    version: Option<u64>,
    location: &str,
    stats: bool,
    ahead: Option<LogAhead>,
    memo: Option<&LogMemo>,
) -> Result<Option<Replayed>, DeltaError> {
    let store_error = |source: object_store::Error| {
        DeltaError::deltalake(location, DeltaTableError::ObjectStore { source })
    };
    // A `_last_checkpoint` says there is a checkpoint: the kernel's log (handed what was read).
    let Some(paths) = log_paths(log_root) else {
        return Ok(None);
    };
    // The hint and the listing asked at once: one round trip, not two, before the commits
    // (none where they were asked ahead, beside a job's marker).
    let mut asked = match ahead.and_then(|ahead| ahead.take(&paths)) {
        Some(asked) => asked,
        None => Asked::new(store, paths.clone()),
    };
    let (hint, prefix) = paths;
    let found = asked.hint().await.map_err(store_error)?;
    if found.is_some() {
        // The kernel's log: the hint handed on, and the listing where it is whole already.
        if let Some(memo) = memo {
            memo.prime_get(hint, found);
            if let Some(listing) = asked.whole_listing().await {
                memo.prime_listing(prefix, listing);
            }
        }
        return Ok(None);
    }
    if let Some(memo) = memo {
        memo.prime_get(hint, None);
    }
    let listing = asked.listing().await.map_err(store_error)?;
    let commits = commits_to_read(&listing, version);
    if let Some(memo) = memo {
        memo.prime_listing(prefix, listing);
    }
    let Some(commits) = commits else {
        return Ok(None);
    };
    let mut reconciled = Reconciled {
        protocol: None,
        metadata: None,
        seen: HashSet::new(),
        adds: Vec::new(),
    };
    // Newest first, in order, many at once (owned futures: a borrowing closure's future is
    // not `Send` for every lifetime, which a spawned open needs).
    let fetches: Vec<_> = commits
        .iter()
        .rev()
        .map(|meta| fetch(store.clone(), meta.location.clone()))
        .collect();
    let mut bodies = futures::stream::iter(fetches).buffered(COMMIT_READS);
    while let Some(body) = bodies.next().await {
        let body: Bytes = body.map_err(store_error)?;
        if reconciled.commit(&body).is_none() {
            return Ok(None);
        }
    }
    drop(bodies);
    let target = commits.len() as u64 - 1;
    tracing::debug!(
        location,
        version = target,
        commits = commits.len(),
        "log replayed from its commits"
    );
    build(reconciled, target, location, stats)
}

/// The [`Replayed`] of the reconciled actions; `None` without a protocol and metadata, or where
/// an add's statistics do not parse (the kernel's to say).
fn build(
    reconciled: Reconciled,
    version: u64,
    location: &str,
    stats: bool,
) -> Result<Option<Replayed>, DeltaError> {
    let Reconciled {
        protocol,
        metadata,
        adds,
        ..
    } = reconciled;
    let (Some(protocol), Some(metadata)) = (protocol, metadata) else {
        return Ok(None);
    };
    let Ok(schema) = metadata.parse_schema() else {
        return Ok(None);
    };
    let mapping =
        ColumnMapping::from_delta(metadata.configuration(), &schema).map_err(|reason| {
            DeltaError::Incompatible {
                location: location.to_string(),
                reason,
            }
        })?;
    let mut partitions = Partitions::of(&schema, metadata.partition_columns());
    let mut builder = FileListBuilder::new(stats);
    let mut vectors = Vec::new();
    for add in adds {
        let records = match &add.stats {
            Some(s) => match serde_json::from_str::<Records>(s) {
                Ok(r) => r.num_records.and_then(|n| u64::try_from(n).ok()),
                Err(_) => return Ok(None),
            },
            None => None,
        };
        // As the kernel's file view gives them: the path decoded, the store's path parsed
        // from it where it can be.
        let path = percent_decode_str(&add.path).decode_utf8_lossy();
        let object_path = Path::parse(path.as_ref()).unwrap_or_else(|_| Path::from(path.as_ref()));
        let (Ok(size), tag) = (
            u64::try_from(add.size),
            format!("modified={}", add.modification_time),
        ) else {
            return Ok(None);
        };
        let values: Vec<(String, Option<String>)> = add
            .partition_values
            .into_iter()
            .map(|(k, v)| (mapping.logical_key(&k), v))
            .collect();
        if !values
            .iter()
            .all(|(k, v)| partitions.parse(k, v.as_deref()))
        {
            return Ok(None);
        }
        if let Some(descriptor) = add.deletion_vector {
            vectors.push((builder.len(), descriptor));
        }
        builder.push(
            Entry {
                path: &path,
                object_path: Some(object_path.as_ref()),
                size,
                records,
                tag: &tag,
                stats: if stats { add.stats.as_deref() } else { None },
                order: add.modification_time,
            },
            values
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k), v.map(Cow::Owned))),
        );
    }
    let (files, vectors) = crate::replayed::finish(builder, vectors);
    Ok(Some(Replayed {
        version,
        protocol,
        metadata,
        files,
        vectors,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::as_of::AsOf;
    use crate::read::load_at;
    use object_store::local::LocalFileSystem;

    const PROTOCOL: &str = r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}"#;

    fn metadata() -> String {
        let schema = r#"{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},{"name":"part","type":"string","nullable":true,"metadata":{}}]}"#;
        serde_json::json!({"metaData": {
            "id": "t", "format": {"provider": "parquet", "options": {}},
            "schemaString": schema, "partitionColumns": ["part"],
            "configuration": {"delta.enableDeletionVectors": "true"}, "createdTime": 1
        }})
        .to_string()
    }

    fn add(path: &str, part: Option<&str>, rows: u64, time: i64, dv: Option<&str>) -> String {
        let mut add = serde_json::json!({
            "path": path, "partitionValues": {"part": part}, "size": 100 + rows,
            "modificationTime": time, "dataChange": true,
            "stats": format!(r#"{{"numRecords":{rows},"minValues":{{"id":0}}}}"#),
        });
        if let Some(id) = dv {
            add["deletionVector"] = serde_json::json!({
                "storageType": "u", "pathOrInlineDv": id, "offset": 1,
                "sizeInBytes": 10, "cardinality": 1
            });
        }
        serde_json::json!({ "add": add }).to_string()
    }

    fn remove(path: &str, dv: Option<&str>) -> String {
        let mut remove =
            serde_json::json!({"path": path, "deletionTimestamp": 9, "dataChange": true});
        if let Some(id) = dv {
            remove["deletionVector"] = serde_json::json!({
                "storageType": "u", "pathOrInlineDv": id, "offset": 1,
                "sizeInBytes": 10, "cardinality": 1
            });
        }
        serde_json::json!({ "remove": remove }).to_string()
    }

    /// A log whose replay needs every rule: removes, a path re-added, an encoded path, a null
    /// partition, a deletion vector replaced, a commit without files, a blank line.
    fn commits() -> Vec<Vec<String>> {
        let info = r#"{"commitInfo":{"operation":"WRITE","timestamp":5}}"#.to_string();
        vec![
            vec![
                PROTOCOL.to_string(),
                metadata(),
                add("part=x/a.parquet", Some("x"), 3, 10, None),
                add("part=x/b%20c.parquet", Some("x"), 4, 10, None),
                add("n.parquet", None, 5, 11, None),
            ],
            vec![
                add("d.parquet", Some("y"), 6, 20, None),
                remove("part=x/a.parquet", None),
            ],
            vec![add("part=x/a.parquet", Some("x"), 7, 30, None)],
            vec![info.clone(), String::new()],
            vec![add("e.parquet", Some("y"), 8, 40, Some("vectorOne"))],
            vec![
                remove("e.parquet", Some("vectorOne")),
                add("e.parquet", Some("y"), 8, 40, Some("vectorTwo")),
                remove("n.parquet", None),
                info,
            ],
        ]
    }

    fn write(dir: &std::path::Path, commits: &[Vec<String>]) {
        let log = dir.join(LOG);
        std::fs::create_dir_all(&log).unwrap();
        for (v, lines) in commits.iter().enumerate() {
            std::fs::write(log.join(format!("{v:020}.json")), lines.join("\n")).unwrap();
        }
    }

    async fn ours(dir: &std::path::Path, version: Option<u64>) -> Option<Replayed> {
        let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new());
        let log_root = url::Url::from_directory_path(dir.join(LOG)).unwrap();
        replay(&store, &log_root, version, "t", true, None, None)
            .await
            .unwrap()
    }

    async fn kernels(dir: &std::path::Path, version: Option<u64>) -> Replayed {
        let url = url::Url::from_directory_path(dir).unwrap();
        let table = deltalake::DeltaTableBuilder::from_url(url)
            .unwrap()
            .build()
            .unwrap();
        let as_of = version.map_or(AsOf::Latest, AsOf::Version);
        let state = load_at(&table, as_of, false, "t").await.unwrap().unwrap();
        crate::read::kernel_replay::replay(&table, &state, "t", true)
            .await
            .unwrap()
    }

    /// Every file as a comparable line: path, store path, size, rows, partitions, statistics.
    fn described(r: &Replayed) -> Vec<String> {
        let mut files: Vec<String> = r
            .files
            .iter()
            .map(|f| {
                let parts: Vec<_> = f.partitions().collect();
                format!(
                    "{} {} {} {:?} {:?} {:?}",
                    f.path(),
                    f.object_path(),
                    f.size(),
                    f.records(),
                    parts,
                    f.delta_stats().map(|s| s.contains("numRecords"))
                )
            })
            .collect();
        files.sort();
        files
    }

    fn vectors(r: &Replayed) -> Vec<(String, DeletionVectorDescriptor)> {
        r.vectors
            .iter()
            .map(|(i, d)| (r.files.at(*i).path().to_string(), d.clone()))
            .collect()
    }

    #[tokio::test]
    async fn a_log_of_commits_replays_as_the_kernel_replays_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &commits());
        for version in [None, Some(0), Some(1), Some(2), Some(4), Some(5)] {
            let ours = ours(dir.path(), version)
                .await
                .expect("a log of commits only");
            let kernels = kernels(dir.path(), version).await;
            assert_eq!(ours.version, kernels.version, "{version:?}");
            assert_eq!(ours.protocol, kernels.protocol);
            assert_eq!(ours.metadata, kernels.metadata);
            assert_eq!(described(&ours), described(&kernels), "{version:?}");
            assert_eq!(vectors(&ours), vectors(&kernels), "{version:?}");
        }
        // The rules, as the log above means them.
        let latest = ours(dir.path(), None).await.unwrap();
        let paths: Vec<&str> = latest.files.iter().map(|f| f.path()).collect();
        assert_eq!(paths.len(), 4, "{paths:?}");
        assert!(paths.contains(&"part=x/b c.parquet"), "{paths:?}");
        assert!(!paths.contains(&"n.parquet"));
        let re_added = latest.files.iter().find(|f| f.path() == "part=x/a.parquet");
        assert_eq!(re_added.unwrap().records(), Some(7));
        assert_eq!(vectors(&latest)[0].1.path_or_inline_dv, "vectorTwo");
    }

    #[tokio::test]
    async fn other_logs_are_left_to_the_kernel() {
        // A checkpoint hint, a gap, a line that does not parse, a version past the end, no
        // metadata: each `None`.
        let hint = tempfile::tempdir().unwrap();
        write(hint.path(), &commits());
        std::fs::write(hint.path().join(LOG).join("_last_checkpoint"), "{}").unwrap();
        assert!(ours(hint.path(), None).await.is_none());
        let gap = tempfile::tempdir().unwrap();
        write(gap.path(), &commits());
        std::fs::remove_file(gap.path().join(LOG).join(format!("{:020}.json", 2))).unwrap();
        assert!(ours(gap.path(), None).await.is_none());
        assert!(ours(gap.path(), Some(1)).await.is_some(), "before the gap");
        let broken = tempfile::tempdir().unwrap();
        let mut lines = commits();
        lines[3].push("{\"add\": {\"path\": ".to_string());
        write(broken.path(), &lines);
        assert!(ours(broken.path(), None).await.is_none());
        assert!(ours(broken.path(), Some(9)).await.is_none());
        let no_metadata = tempfile::tempdir().unwrap();
        write(no_metadata.path(), &[vec![PROTOCOL.to_string()]]);
        assert!(ours(no_metadata.path(), None).await.is_none());
        let checkpointed = tempfile::tempdir().unwrap();
        write(checkpointed.path(), &commits());
        std::fs::write(
            checkpointed
                .path()
                .join(LOG)
                .join(format!("{:020}.checkpoint.parquet", 2)),
            "x",
        )
        .unwrap();
        assert!(ours(checkpointed.path(), None).await.is_none());
    }
}
