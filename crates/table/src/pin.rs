//! One version per job. Ranks that each resolve "the latest version" while a writer commits
//! open different versions and deal rows from different file lists: rows missed or delivered
//! twice, silently. So where a job id is known ([`TableOptions::job`](crate::TableOptions)),
//! "latest" is resolved once per job: the first rank to open writes the version it opened to
//! a marker next to the table, `_voxlake/jobs/<job>.json`, with a create-if-absent put (one
//! writer wins, on every store object_store writes to); every other rank opens the marker's
//! version instead of its own. The marker holds the version's file-set hash too: a rank whose
//! files at that version differ (the table replaced under the same path) fails naming both.
//! A job restarted under the same id (an elastic restart) reads the version it began with.
//! Delta readers and `VACUUM` leave `_`-prefixed folders alone. A marker says when it was
//! written; the first rank of a later job removes those older than [`RETENTION`] (7 days). Where the marker cannot be
//! written (read-only data, the normal case on a cluster), the rank reads the version it
//! opened and warns (`caution`): a failure there would stop every read-only job.
//!
//! A rank looks for the marker before it opens anything ([`pinned`]), so the ranks after the
//! first replay the log once, at the job's version. The marker's name and contents are pure
//! ([`marker_path`], [`Marker`]); the reads and the put are in [`pinned`] and [`agree`].

mod expire;
#[cfg(unix)]
pub(crate) mod node;

pub use expire::RETENTION;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};

use crate::error::TableError;
use crate::snapshot::asked::LogAhead;

/// Where the markers live, under the table root.
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
    /// [`Snapshot::file_set_hash`](crate::Snapshot::file_set_hash) of that version, before any
    /// filter.
    pub files: String,
    /// When it was written, in seconds since the Unix epoch (0 in markers of earlier versions):
    /// markers are removed after [`RETENTION`].
    #[serde(default)]
    pub written: u64,
}

/// The marker's path for `job`: the id kept where it is a safe file name (letters, digits,
/// `.`, `_`, `-`, at most 100 of them), else replaced by its FNV-1a hash.
pub fn marker_path(job: &str) -> Path {
    let safe = !job.is_empty()
        && job.len() <= 100
        && !job.starts_with('.')
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let name = if safe {
        job.to_string()
    } else {
        format!("h{:016x}", voxlake_io::location::stable_hash(job))
    };
    Path::from(format!("{JOBS_FOLDER}/{name}.json"))
}

/// What this rank should do with the version it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreed {
    /// Read the version it opened (it published it, or the marker names it).
    Keep,
    /// Open the marker's version instead; its files must then hash to `files`
    /// ([`check_files`]).
    Reopen {
        /// The job's version.
        version: u64,
        /// Its file-set hash, as the rank that pinned it saw it.
        files: String,
    },
}

/// Refuses a rank whose files at the job's version (`files`) are not those the job pinned
/// (`pinned`): the table was replaced under its path.
pub fn check_files(
    location: &str,
    job: &str,
    version: u64,
    pinned: &str,
    files: &str,
) -> Result<(), TableError> {
    if pinned == files {
        return Ok(());
    }
    Err(TableError::Version {
        location: location.to_string(),
        reason: format!(
            "job {job} ({}): the job pinned version {version} with files {pinned}, this rank opened it with files {files}: the table changed under its path",
            marker_path(job)
        ),
    })
}

/// Agrees on the job's version through its marker in `store` (rooted at the table): this
/// rank's `opened` version and `files`, published if no rank's is (a conditional create),
/// else the marker's.
pub async fn agree(
    store: &dyn ObjectStore,
    location: &str,
    job: &str,
    opened: u64,
    files: &str,
) -> Result<Agreed, TableError> {
    let path = marker_path(job);
    let error = |reason: String| TableError::Version {
        location: location.to_string(),
        reason: format!("job {job} ({path}): {reason}"),
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
    };
    let body = serde_json::to_vec(&ours).map_err(|e| error(e.to_string()))?;
    let create = PutOptions::from(PutMode::Create);
    let marker = match store.put_opts(&path, body.into(), create).await {
        Ok(_) => {
            tracing::info!(job, version = opened, "this rank pinned the job's version");
            expire::expire(store, &path, now).await;
            return Ok(Agreed::Keep);
        }
        // Another rank was first.
        Err(object_store::Error::AlreadyExists { .. }) => read(store, &path)
            .await
            .map_err(&error)?
            .ok_or_else(|| error("the marker vanished after another rank wrote it".into()))?,
        // Read-only data (a shared dataset folder, read-only credentials) is the normal case
        // on a cluster: the rank reads what it opened, and says what the job risks.
        Err(e) => {
            tracing::warn!(
                caution = true,
                job,
                marker = %path,
                version = opened,
                error = %e,
                "the job's version could not be written beside the table: this rank reads the version it opened, and ranks opening while the table takes commits may read different versions. Pin a version (with_version, --version) or give the ranks torch.distributed (the Python package agrees through it)"
            );
            return Ok(Agreed::Keep);
        }
    };
    if marker.job != job || marker.format != FORMAT {
        return Err(error(format!(
            "the marker is of job {:?}, format {}: not this job's",
            marker.job, marker.format
        )));
    }
    if marker.version == opened {
        check_files(location, job, opened, &marker.files, files)?;
        return Ok(Agreed::Keep);
    }
    tracing::info!(
        job,
        pinned = marker.version,
        opened,
        "the job's version is pinned: reading it"
    );
    Ok(Agreed::Reopen {
        version: marker.version,
        files: marker.files,
    })
}

/// The job's marker for the table at `location`, if a rank wrote one: read before the table is
/// opened, through `root_store` (rooted at the store, as `TableOptions::root_store`) or the store
/// `storage_options` name.
pub async fn pinned(
    location: &str,
    storage_options: &std::collections::HashMap<String, String>,
    root_store: Option<&std::sync::Arc<dyn ObjectStore>>,
    job: &str,
) -> Result<Option<Marker>, TableError> {
    let (store, prefix) = marker_store(location, storage_options, root_store, job)?;
    pinned_in(store.as_ref(), &prefix, location, job).await
}

/// The store a job's marker is read from, at its root (as the table's open builds it), and the
/// table's prefix in it.
fn marker_store(
    location: &str,
    storage_options: &std::collections::HashMap<String, String>,
    root_store: Option<&std::sync::Arc<dyn ObjectStore>>,
    job: &str,
) -> Result<(std::sync::Arc<dyn ObjectStore>, Path), TableError> {
    Ok(match root_store {
        Some(store) => {
            let url = voxlake_io::location::to_url(location, true)?;
            let prefix = Path::from_url_path(url.path()).map_err(|e| TableError::Version {
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

/// [`pinned`], in `store` where the table lies at `prefix`.
async fn pinned_in(
    store: &dyn ObjectStore,
    prefix: &Path,
    location: &str,
    job: &str,
) -> Result<Option<Marker>, TableError> {
    let path = marker_path(job);
    let path = Path::from_iter(prefix.parts().chain(path.parts()));
    read(store, &path)
        .await
        .map_err(|reason| TableError::Version {
            location: voxlake_io::redact(location),
            reason: format!("job {job} ({path}): {reason}"),
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

/// What a rank knows of the table before it opens it, found while it looked for its job's
/// marker.
#[derive(Default)]
pub(crate) struct Prior {
    /// A marker named the version, so the table has a log.
    pub(crate) known_delta: bool,
    /// The log's first answers (`_last_checkpoint`, the listing under way), asked beside the
    /// marker: the open starts a round trip later than it would.
    pub(crate) ahead: Option<LogAhead>,
}

/// Opens `location` at job `job`'s version: the version its marker pins, else this rank's
/// latest, published as the job's (a rank that lost the race reopens the published one); the
/// file set is checked against the marker's. `open(as_of, prior)` opens the table. The marker
/// and the log's first answers are asked at once (either way the open needs the log).
pub(crate) async fn open_for_job<F, Fut>(
    location: &str,
    storage_options: &std::collections::HashMap<String, String>,
    root_store: Option<&std::sync::Arc<dyn ObjectStore>>,
    job: &str,
    open: &F,
) -> Result<crate::Snapshot, TableError>
where
    F: Fn(crate::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<crate::Snapshot, TableError>>,
{
    use crate::AsOf;
    let (store, prefix) = marker_store(location, storage_options, root_store, job)?;
    let url = voxlake_io::location::to_url(location, true)?;
    let (marker, ahead) = futures::join!(
        pinned_in(store.as_ref(), &prefix, location, job),
        LogAhead::read(&store, &url)
    );
    match marker? {
        Some(marker) => open_pinned(open, job, marker.version, &marker.files, ahead).await,
        None => {
            let snapshot = open(
                AsOf::Latest,
                Prior {
                    known_delta: false,
                    ahead,
                },
            )
            .await?;
            let agreed = agree(
                snapshot.store().as_ref(),
                snapshot.location(),
                job,
                snapshot.version(),
                &snapshot.file_set_hash(),
            )
            .await?;
            match agreed {
                Agreed::Keep => Ok(snapshot),
                // Another rank published first, between the look and the put.
                Agreed::Reopen { version, files } => {
                    open_pinned(open, job, version, &files, None).await
                }
            }
        }
    }
}

/// Opens version `version`, which job `job` pinned with the file-set hash `files`, and checks
/// that its files are those (see [`check_files`]); `ahead`: the log's first answers, if asked.
pub(crate) async fn open_pinned<F, Fut>(
    open: &F,
    job: &str,
    version: u64,
    files: &str,
    ahead: Option<LogAhead>,
) -> Result<crate::Snapshot, TableError>
where
    F: Fn(crate::AsOf, Prior) -> Fut,
    Fut: std::future::Future<Output = Result<crate::Snapshot, TableError>>,
{
    let prior = Prior {
        known_delta: true,
        ahead,
    };
    let snapshot = open(crate::AsOf::Version(version), prior).await?;
    check_files(
        snapshot.location(),
        job,
        version,
        files,
        &snapshot.file_set_hash(),
    )?;
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[test]
    fn job_ids_become_safe_names() {
        assert_eq!(
            marker_path("slurm-42.1").as_ref(),
            "_voxlake/jobs/slurm-42.1.json"
        );
        for unsafe_id in ["", "../x", "a/b", ".hidden", "ünïcode", &"x".repeat(101)] {
            let p = marker_path(unsafe_id);
            assert!(p.as_ref().starts_with("_voxlake/jobs/h"), "{p}");
            assert_eq!(p.parts().count(), 3, "{p}");
        }
        assert_ne!(marker_path("a/b"), marker_path("a:b"));
    }

    #[tokio::test]
    async fn the_first_rank_pins_the_version_and_the_others_read_it() {
        let store = InMemory::new();
        let agree = |opened, files: &'static str| {
            let store = &store;
            async move { agree(store, "mem://t", "job-1", opened, files).await }
        };
        assert_eq!(agree(11, "fnv1a64:a").await.unwrap(), Agreed::Keep);
        // A later rank that saw a later version reads the pinned one.
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
        // Another job pins its own.
        assert_eq!(
            agree_other(&store, 12).await.unwrap(),
            Agreed::Keep,
            "jobs are independent"
        );
        // Something else at the marker's path is refused, not trusted.
        store
            .put(&marker_path("job-2"), "not json".into())
            .await
            .unwrap();
        let e = agree_job(&store, "job-2", 3).await.unwrap_err().to_string();
        assert!(e.contains("not one voxlake wrote"), "{e}");
    }

    async fn agree_other(store: &InMemory, opened: u64) -> Result<Agreed, TableError> {
        agree_job(store, "job-other", opened).await
    }

    async fn agree_job(store: &InMemory, job: &str, opened: u64) -> Result<Agreed, TableError> {
        agree(store, "mem://t", job, opened, "fnv1a64:x").await
    }
}
