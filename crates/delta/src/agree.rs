//! One version per job. Ranks that each resolve "the latest version" while a writer commits
//! open different versions and deal rows from different file lists: rows missed or delivered
//! twice, silently. So where a job is known (`voxlake_table::TableOptions::job`),
//! "latest" is resolved once per job: the first rank to open writes the version it opened to
//! the job's marker with a create-if-absent put (one writer wins, on every store object_store
//! writes to); every other rank opens the marker's version instead of its own. The marker
//! holds the version's file-set hash too: a rank whose files at that version differ (the table
//! replaced under the same path) fails naming both. A job restarted under the same id (an
//! elastic restart) reads the version it began with.
//!
//! The marker lies in the first place the job has (`place`): a folder the user names
//! (`with_job_dir`, [`JOB_DIR_ENV`]), this user's folder on the node when every rank runs on
//! it, else `_voxlake/jobs/<job>.json` beside the table (Delta readers and `VACUUM` leave
//! `_`-prefixed folders alone). A marker says when it was written; the first rank of a later
//! job removes those of its folder older than [`RETENTION`] (7 days). Where no marker can be
//! written (read-only data beside the table, the normal case on a cluster) the ranks read the
//! latest version committed before the job started, where the launcher says when
//! ([`Job::started`]), else the version each opened, with a warning (`caution`) naming the ways
//! out: never a failure for lack of write access.
//!
//! A rank looks for the marker before it opens anything (`open_for_job`), so the ranks after
//! the first replay the log once, at the job's version. The marker's name and contents are
//! pure ([`marker_name`], [`Marker`]); the reads and the put are in `agree` and
//! `agreed_in`.

mod expire;
mod job;
mod node;
mod place;

pub use expire::RETENTION;
pub use job::{JOB_VARS, Job, START_VAR};
pub use place::JOB_DIR_ENV;
pub(crate) use place::{Channel, Place};

use std::collections::HashMap;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use voxlake_io::cache::DiskCache;

use crate::error::DeltaError;
use crate::open::{Found, Prior};
use crate::read::LogAhead;

/// Where the markers live beside a table, under its root.
pub const JOBS_FOLDER: &str = "_voxlake/jobs";
/// The marker's format.
const FORMAT: u32 = 1;
/// The most bytes a marker may hold (a few hundred are written).
const MAX_MARKER_BYTES: u64 = 64 << 10;

/// What a job's marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The marker's format (1).
    pub format: u32,
    /// The job id, as given.
    pub job: String,
    /// The version every rank of the job reads.
    pub version: u64,
    /// [`Found::file_set_hash`] of that version, before any
    /// filter.
    pub files: String,
    /// When it was written, in seconds since the Unix epoch (0 in markers of earlier versions):
    /// markers are removed after [`RETENTION`].
    #[serde(default)]
    pub written: u64,
    /// The table, for whoever reads a job folder shared by tables (no secret; empty in
    /// markers of earlier versions).
    #[serde(default)]
    pub table: String,
}

/// The marker's file name for `job`: the id kept where it is a safe file name (letters,
/// digits, `.`, `_`, `-`, at most 100 of them), else replaced by its FNV-1a hash.
///
/// ```
/// use voxlake_delta::agree::marker_name;
///
/// assert_eq!(marker_name("slurm-42.1"), "slurm-42.1.json");
/// assert!(marker_name("../x").starts_with('h'));
/// ```
pub fn marker_name(job: &str) -> String {
    let safe = !job.is_empty()
        && job.len() <= 100
        && !job.starts_with('.')
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    match safe {
        true => format!("{job}.json"),
        false => format!("h{:016x}.json", voxlake_io::location::stable_hash(job)),
    }
}

/// What this rank should do with the version it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Agreed {
    /// Read the version it opened (it published it, or the marker names it).
    Keep,
    /// Open the marker's version instead; its files must then hash to `files`
    /// ([`check_files`]).
    Reopen {
        /// The job's version.
        version: u64,
        /// Its file-set hash, as the rank that published it saw it.
        files: String,
    },
    /// No marker could be written there (read-only data): the job has no place to agree.
    Unwritable(String),
}

/// Refuses a rank whose files at the job's version (`files`) are not those the job agreed on
/// (`agreed`, in the marker `marker`): the table was replaced under its path.
fn check_files(
    location: &str,
    job: &str,
    marker: &str,
    version: u64,
    agreed: &str,
    files: &str,
) -> Result<(), DeltaError> {
    if agreed == files {
        return Ok(());
    }
    Err(DeltaError::Version {
        location: location.to_string(),
        reason: format!(
            "job {job} ({marker}): the job agreed on version {version} with files {agreed}, this rank opened it with files {files}: the table changed under its path"
        ),
    })
}

/// Agrees on the job's version through its marker in `place`: this rank's `opened` version
/// and `files`, published if no rank's is (a conditional create), else the marker's.
pub(crate) async fn agree(
    place: &Place,
    location: &str,
    job: &str,
    opened: u64,
    files: &str,
) -> Result<Agreed, DeltaError> {
    let path = place.marker(job);
    let shown = place.shown_marker(job);
    let error = |reason: String| DeltaError::Version {
        location: location.to_string(),
        reason: format!("job {job} ({shown}): {reason}"),
    };
    // Published at once (a conditional create): the caller looked before it opened the table
    // and found none, so reading again first would only cost a round trip.
    let now = std::time::SystemTime::now();
    let ours = Marker {
        format: FORMAT,
        job: job.to_string(),
        version: opened,
        files: files.to_string(),
        written: now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        table: voxlake_io::redact(location),
    };
    let body = serde_json::to_vec(&ours).map_err(|e| error(e.to_string()))?;
    let create = PutOptions::from(PutMode::Create);
    let marker = match place.store.put_opts(&path, body.into(), create).await {
        Ok(_) => {
            tracing::info!(job, version = opened, marker = %shown, "this rank published the job's version");
            expire::expire(place.store.as_ref(), &place.folder, &path, now).await;
            return Ok(Agreed::Keep);
        }
        // Another rank was first.
        Err(object_store::Error::AlreadyExists { .. }) => read(place.store.as_ref(), &path)
            .await
            .map_err(&error)?
            .ok_or_else(|| error("the marker vanished after another rank wrote it".into()))?,
        // The folder the user named is one they meant to be written.
        Err(e) if place.channel == Channel::JobDir => {
            return Err(error(format!("the marker cannot be written: {e}")));
        }
        // Read-only data (a shared dataset folder, read-only credentials) is the normal case
        // on a cluster.
        Err(e) => return Ok(Agreed::Unwritable(format!("{shown}: {e}"))),
    };
    if marker.job != job || marker.format != FORMAT {
        return Err(error(format!(
            "the marker is of job {:?}, format {}: not this job's",
            marker.job, marker.format
        )));
    }
    if marker.version == opened {
        check_files(location, job, &shown, opened, &marker.files, files)?;
        return Ok(Agreed::Keep);
    }
    tracing::info!(
        job,
        agreed = marker.version,
        opened,
        "the job agreed on its version: reading it"
    );
    Ok(Agreed::Reopen {
        version: marker.version,
        files: marker.files,
    })
}

/// The table's store at its root (as the table's open builds it), and the table's prefix in
/// it.
pub(crate) fn table_store(
    location: &str,
    storage_options: &HashMap<String, String>,
    root_store: Option<&std::sync::Arc<dyn ObjectStore>>,
    job: &str,
) -> Result<(std::sync::Arc<dyn ObjectStore>, Path), DeltaError> {
    Ok(match root_store {
        Some(store) => {
            let url = voxlake_io::location::to_url(location, true)?;
            let prefix = Path::from_url_path(url.path()).map_err(|e| DeltaError::Version {
                location: location.to_string(),
                reason: format!("job {job}: {e}"),
            })?;
            (store.clone(), prefix)
        }
        None => {
            let opened = crate::stores::open_store(location, true, storage_options)?;
            (opened.store, opened.prefix)
        }
    })
}

/// Job `job`'s marker in `place`, if a rank wrote one.
pub(crate) async fn agreed_in(
    place: &Place,
    location: &str,
    job: &str,
) -> Result<Option<Marker>, DeltaError> {
    read(place.store.as_ref(), &place.marker(job))
        .await
        .map_err(|reason| DeltaError::Version {
            location: voxlake_io::redact(location),
            reason: format!("job {job} ({}): {reason}", place.shown_marker(job)),
        })
}

/// The marker at `path`, if there is one; one that is not a marker is an error.
async fn read(store: &dyn ObjectStore, path: &Path) -> Result<Option<Marker>, String> {
    let got = match store.get(path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(format!("reading the marker: {e}")),
    };
    if got.meta.size > MAX_MARKER_BYTES {
        return Err(format!(
            "the marker is {} bytes, not a marker (at most {MAX_MARKER_BYTES})",
            got.meta.size
        ));
    }
    let bytes = got
        .bytes()
        .await
        .map_err(|e| format!("reading the marker: {e}"))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("the marker is not one voxlake wrote: {e}"))
}

/// A job's version as a rank resolved it.
pub(crate) struct Resolved {
    /// The table at the job's version.
    pub(crate) found: Found,
    /// Whether a marker names it (else the job had no place to agree: see `without_a_place`).
    pub(crate) marked: bool,
}

/// What a rank of `job` reads of the table at `location` (store settings `storage_options`,
/// the caller's store `root_store`, if any): the job's version, agreed through the job's
/// marker in its place (`job_dir`, else [`JOB_DIR_ENV`]'s, the node's folder for a
/// one-node job, or beside the table) and, where the node has a disk `cache`, resolved once a
/// node (see `node`). `open(as_of, prior)` reads the table at a version
/// ([`DeltaLog::with_prior`](crate::DeltaLog::with_prior) takes `prior`).
pub async fn open_for_job<F, Fut>(
    location: &str,
    storage_options: &HashMap<String, String>,
    root_store: Option<&Arc<dyn ObjectStore>>,
    job: &Job,
    job_dir: Option<&str>,
    cache: Option<&Arc<DiskCache>>,
    open: &F,
) -> Result<Found, DeltaError>
where
    F: Fn(crate::as_of::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Found, DeltaError>>,
{
    let place = Place::resolve(location, storage_options, root_store, job, job_dir)?;
    match cache {
        Some(cache) if root_store.is_none() => {
            node::open_for_job(cache, location, storage_options, &place, job, open).await
        }
        _ => resolve(location, &place, job, open).await.map(|r| r.found),
    }
}

/// Opens `location` at job `job`'s version: the version its marker in `place` names, else this
/// rank's latest, published as the job's (a rank that lost the race reopens the published
/// one); the file set is checked against the marker's. `open(as_of, prior)` opens the table.
/// The marker and the log's first answers are asked at once (either way the open needs the
/// log).
pub(crate) async fn resolve<F, Fut>(
    location: &str,
    place: &Place,
    job: &Job,
    open: &F,
) -> Result<Resolved, DeltaError>
where
    F: Fn(crate::as_of::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Found, DeltaError>>,
{
    use crate::as_of::AsOf;
    let marked = |found| Resolved {
        found,
        marked: true,
    };
    let id = job.id.as_str();
    let url = voxlake_io::location::to_url(location, true)?;
    let table = voxlake_io::redact(url.as_str());
    let (marker, ahead) = futures::join!(
        agreed_in(place, location, id),
        LogAhead::read(&place.table_store, &url)
    );
    if let Some(marker) = marker? {
        let shown = place.shown_marker(id);
        let agreed = (marker.version, marker.files.as_str());
        return open_agreed(open, &table, id, &shown, agreed, ahead)
            .await
            .map(marked);
    }
    let prior = Prior {
        known_delta: false,
        ahead,
    };
    let found = open(AsOf::Latest, prior).await?;
    let (opened, files) = (found.version(), found.file_set_hash());
    match agree(place, &table, id, opened, &files).await? {
        Agreed::Keep => Ok(marked(found)),
        // Another rank published first, between the look and the put.
        Agreed::Reopen { version, files } => {
            let shown = place.shown_marker(id);
            open_agreed(open, &table, id, &shown, (version, &files), None)
                .await
                .map(marked)
        }
        Agreed::Unwritable(reason) => Ok(Resolved {
            found: without_a_place(found, job, &reason, open).await?,
            marked: false,
        }),
    }
}

/// The version for a job whose ranks have no place to agree (`reason`: why the marker could
/// not be written), having opened `latest`: the latest committed before the job started where
/// the launcher says when, else `latest`, with a warning.
async fn without_a_place<F, Fut>(
    latest: Found,
    job: &Job,
    reason: &str,
    open: &F,
) -> Result<Found, DeltaError>
where
    F: Fn(crate::as_of::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Found, DeltaError>>,
{
    let id = job.id.as_str();
    if let Some(started) = job.started {
        let known = Prior {
            known_delta: true,
            ahead: None,
        };
        match open(crate::as_of::AsOf::Timestamp(started), known).await {
            Ok(at_start) => {
                let (version, latest_version) = (at_start.version(), latest.version());
                if version != latest_version {
                    tracing::warn!(
                        caution = true,
                        job = id,
                        version,
                        latest = latest_version,
                        "the table took commits since the job started: every rank reads the latest version committed before the start, not the latest"
                    );
                } else {
                    tracing::info!(
                        job = id,
                        version,
                        "no marker can be written ({reason}): the job reads the latest version committed before it started"
                    );
                }
                return Ok(at_start);
            }
            // A table younger than the job (made by an earlier step of it): nothing before
            // the start to agree on.
            Err(DeltaError::Version { reason: why, .. }) => {
                tracing::debug!(job = id, why, "no version before the job's start")
            }
            Err(e) => return Err(e),
        }
    }
    tracing::warn!(
        caution = true,
        job = id,
        version = latest.version(),
        reason,
        "the job's ranks have no place to agree on a version (the table is read-only here, no job folder is named, the ranks span nodes): this rank reads the latest version it opened, and ranks opening while the table takes commits may read different versions. Name a folder the ranks may write (with_job_dir, --job-dir, VOXLAKE_JOB_DIR), pin a version (with_version, --version) or give the ranks torch.distributed (the Python package agrees through it)"
    );
    Ok(latest)
}

/// Opens the version job `job` agreed on, with its file-set hash (`agreed`) in marker `marker`,
/// and checks that its files are those (see [`check_files`]); `table` names the table in
/// messages; `ahead`: the log's first answers, if asked.
pub(crate) async fn open_agreed<F, Fut>(
    open: &F,
    table: &str,
    job: &str,
    marker: &str,
    agreed: (u64, &str),
    ahead: Option<LogAhead>,
) -> Result<Found, DeltaError>
where
    F: Fn(crate::as_of::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<Found, DeltaError>>,
{
    let (version, files) = agreed;
    let prior = Prior {
        known_delta: true,
        ahead,
    };
    let found = open(crate::as_of::AsOf::Version(version), prior).await?;
    check_files(table, job, marker, version, files, &found.file_set_hash())?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use std::sync::Arc;

    #[test]
    fn job_ids_become_safe_names() {
        assert_eq!(marker_name("slurm-42.1"), "slurm-42.1.json");
        for unsafe_id in ["", "../x", "a/b", ".hidden", "ünïcode", &"x".repeat(101)] {
            let name = marker_name(unsafe_id);
            assert!(name.starts_with('h') && name.len() == 22, "{name}");
            assert_eq!(Path::from(name.as_str()).parts().count(), 1, "{name}");
        }
        assert_ne!(marker_name("a/b"), marker_name("a:b"));
    }

    fn place(store: &Arc<InMemory>, channel: Channel) -> Place {
        Place::new(store.clone(), JOBS_FOLDER, channel)
    }

    #[tokio::test]
    async fn the_first_rank_pins_the_version_and_the_others_read_it() {
        let store = Arc::new(InMemory::new());
        let beside = place(&store, Channel::Table);
        let agree = |opened, files: &'static str| {
            let beside = &beside;
            async move { agree(beside, "mem://t", "job-1", opened, files).await }
        };
        assert_eq!(agree(11, "fnv1a64:a").await.unwrap(), Agreed::Keep);
        // A later rank that saw a later version reads the agreed one.
        assert_eq!(
            agree(12, "fnv1a64:b").await.unwrap(),
            Agreed::Reopen {
                version: 11,
                files: "fnv1a64:a".into()
            }
        );
        assert_eq!(agree(11, "fnv1a64:a").await.unwrap(), Agreed::Keep);
        // The same version with other files: the table changed under its path.
        let e = agree(11, "fnv1a64:c").await.unwrap_err().to_string();
        assert!(
            e.contains("job job-1") && e.contains("fnv1a64:a") && e.contains("fnv1a64:c"),
            "{e}"
        );
        // Another job agrees on its own.
        let other = super::agree(&beside, "mem://t", "job-other", 12, "fnv1a64:x").await;
        assert_eq!(other.unwrap(), Agreed::Keep, "jobs are independent");
        // Something else at the marker's path is refused, not trusted.
        let planted = beside.marker("job-2");
        store.put(&planted, "not json".into()).await.unwrap();
        let e = super::agree(&beside, "mem://t", "job-2", 3, "fnv1a64:x").await;
        let e = e.unwrap_err().to_string();
        assert!(e.contains("not one voxlake wrote"), "{e}");
        // The marker names its table.
        let marker = read(store.as_ref(), &beside.marker("job-1")).await.unwrap();
        assert_eq!(marker.unwrap().table, "mem://t");
    }

    /// A store that takes no write, as read-only credentials.
    #[derive(Debug)]
    struct ReadOnly(InMemory);

    impl std::fmt::Display for ReadOnly {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("ReadOnly")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for ReadOnly {
        async fn put_opts(
            &self,
            location: &Path,
            _: object_store::PutPayload,
            _: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            Err(object_store::Error::PermissionDenied {
                path: location.to_string(),
                source: "read-only".into(),
            })
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn a_place_that_takes_no_marker_is_told_apart_by_channel() {
        let store: Arc<dyn ObjectStore> = Arc::new(ReadOnly(InMemory::new()));
        // Beside the table or on the node: no place to agree, for the caller to decide.
        for channel in [Channel::Table, Channel::Node] {
            let place = Place::new(store.clone(), JOBS_FOLDER, channel);
            let agreed = agree(&place, "mem://t", "job-ro", 4, "fnv1a64:a").await;
            match agreed.unwrap() {
                Agreed::Unwritable(reason) => assert!(reason.contains("read-only"), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
        // A folder the user named must take it.
        let place = Place::new(store, "scratch/t1", Channel::JobDir);
        let e = agree(&place, "mem://t", "job-ro", 4, "fnv1a64:a").await;
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("scratch/t1/job-ro.json") && e.contains("cannot be written"),
            "{e}"
        );
    }
}
