//! Where a job's ranks agree: the folder its markers are written to, the first of a folder the
//! user names ([`JOB_DIR_ENV`], `with_job_dir`), this user's folder on the node where every
//! rank runs on it ([`Job::one_node`]), and beside the table. A marker in a folder of the
//! user's or the node's lies under a name for the table (its store's identity, hashed), so one
//! folder serves every table.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use voxlake_io::location;

use super::{JOBS_FOLDER, Job, marker_name};
use crate::error::DeltaError;

/// Environment variable naming the folder (a local path or a store URL) where the ranks of a
/// job agree on its version, when the builder names none.
pub const JOB_DIR_ENV: &str = "VOXLAKE_JOB_DIR";

/// Which place a job's ranks agree in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// The folder the user named: a marker that cannot be written there is an error.
    JobDir,
    /// This user's folder on the node, every rank running on it.
    Node,
    /// `_voxlake/jobs/` beside the table.
    Table,
}

/// A place markers are read from and written to.
pub(crate) struct Place {
    /// The store, at its root.
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The table's store, at its root (for the log's first answers, asked beside the marker).
    pub(crate) table_store: Arc<dyn ObjectStore>,
    /// The markers' folder in it.
    pub(crate) folder: Path,
    pub(crate) channel: Channel,
    /// The place, for messages (no secret).
    pub(crate) shown: String,
}

impl Place {
    /// The place of job `job`'s markers for the table at `location`; `job_dir`: the folder the
    /// user named, else [`JOB_DIR_ENV`]'s.
    pub(crate) fn resolve(
        location: &str,
        storage_options: &HashMap<String, String>,
        root_store: Option<&Arc<dyn ObjectStore>>,
        job: &Job,
        job_dir: Option<&str>,
    ) -> Result<Place, DeltaError> {
        let (table_store, prefix) =
            super::table_store(location, storage_options, root_store, &job.id)?;
        let from_env = std::env::var(JOB_DIR_ENV)
            .ok()
            .filter(|d| !d.trim().is_empty());
        if let Some(dir) = job_dir.map(str::to_string).or(from_env) {
            return job_dir_place(location, storage_options, &dir, &job.id, table_store);
        }
        if job.one_node {
            match voxlake_io::private::user_folder() {
                Ok(folder) => {
                    let store = object_store::local::LocalFileSystem::new_with_prefix(&folder)
                        .map_err(|e| DeltaError::Version {
                            location: voxlake_io::redact(location),
                            reason: format!("job {}: {}: {e}", job.id, folder.display()),
                        })?;
                    return Ok(Place {
                        store: Arc::new(store),
                        table_store,
                        folder: Path::from_iter(["jobs", &table_key(location, storage_options)?]),
                        channel: Channel::Node,
                        shown: folder.join("jobs").display().to_string(),
                    });
                }
                Err(e) => tracing::warn!(
                    job = %job.id,
                    error = %e,
                    "this user's folder on the node cannot be used: the job's ranks agree beside the table"
                ),
            }
        }
        Ok(Place {
            store: table_store.clone(),
            table_store,
            folder: Path::from_iter(prefix.parts().chain(Path::from(JOBS_FOLDER).parts())),
            channel: Channel::Table,
            shown: format!("{}/{JOBS_FOLDER}", voxlake_io::redact(location)),
        })
    }

    /// A place in `store` at `folder` (tests build their own).
    #[cfg(test)]
    pub(crate) fn new(store: Arc<dyn ObjectStore>, folder: &str, channel: Channel) -> Place {
        Place {
            table_store: store.clone(),
            store,
            folder: Path::from(folder),
            channel,
            shown: folder.to_string(),
        }
    }

    /// Job `job`'s marker.
    pub(crate) fn marker(&self, job: &str) -> Path {
        self.folder.clone().join(marker_name(job))
    }

    /// The marker of job `job`, for messages.
    pub(crate) fn shown_marker(&self, job: &str) -> String {
        format!("{}/{}", self.shown, marker_name(job))
    }
}

/// The folder `dir` the user named, its local folder made if missing.
fn job_dir_place(
    location: &str,
    storage_options: &HashMap<String, String>,
    dir: &str,
    job: &str,
    table_store: Arc<dyn ObjectStore>,
) -> Result<Place, DeltaError> {
    let shown = voxlake_io::redact(dir);
    let fail = |reason: String| DeltaError::Version {
        location: voxlake_io::redact(location),
        reason: format!("job {job}: the job folder {shown}: {reason}"),
    };
    let url = location::to_url(dir, true).map_err(|e| fail(e.to_string()))?;
    if url.scheme() == "file"
        && let Ok(path) = url.to_file_path()
    {
        std::fs::create_dir_all(&path).map_err(|e| fail(format!("cannot create it: {e}")))?;
    }
    let opened =
        crate::stores::open_store(dir, true, storage_options).map_err(|e| fail(e.to_string()))?;
    let key = table_key(location, storage_options)?;
    Ok(Place {
        store: opened.store,
        table_store,
        folder: opened.prefix.clone().join(key.as_str()),
        channel: Channel::JobDir,
        shown: format!("{}/{key}", shown.trim_end_matches('/')),
    })
}

/// The table's name in a folder shared by tables: its store's identity (URL, account,
/// endpoint; no secret), hashed.
fn table_key(
    location: &str,
    storage_options: &HashMap<String, String>,
) -> Result<String, DeltaError> {
    let mut url = location::to_url(location, true)?;
    // `t` and `t/` are one table.
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    let identity = location::store_identity(&url, &location::storage_options(storage_options));
    Ok(format!("t{:016x}", location::stable_hash(&identity)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_their_own_names_in_a_shared_folder() {
        let none = HashMap::new();
        let a = table_key("s3://bucket/a", &none).unwrap();
        assert_eq!(a, table_key("s3://bucket/a/", &none).unwrap());
        assert_ne!(a, table_key("s3://bucket/b", &none).unwrap());
        let other_endpoint =
            HashMap::from([("aws_endpoint".to_string(), "http://127.0.0.1:9".to_string())]);
        assert_ne!(a, table_key("s3://bucket/a", &other_endpoint).unwrap());
    }

    #[test]
    fn a_named_folder_comes_first_and_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("table");
        std::fs::create_dir(&table).unwrap();
        let jobs = dir.path().join("scratch/jobs");
        let job = Job::new("7").with_one_node(true);
        let place = Place::resolve(
            table.to_str().unwrap(),
            &HashMap::new(),
            None,
            &job,
            Some(jobs.to_str().unwrap()),
        )
        .unwrap();
        assert_eq!(place.channel, Channel::JobDir);
        assert!(jobs.is_dir());
        let marker = place.marker("7");
        assert!(marker.as_ref().ends_with("/7.json"), "{marker}");
        assert!(place.shown_marker("7").starts_with(jobs.to_str().unwrap()));
        // No folder named, one node: this user's folder on the node.
        let place =
            Place::resolve(table.to_str().unwrap(), &HashMap::new(), None, &job, None).unwrap();
        assert_eq!(place.channel, Channel::Node);
        // Else beside the table.
        let job = Job::new("7");
        let place =
            Place::resolve(table.to_str().unwrap(), &HashMap::new(), None, &job, None).unwrap();
        assert_eq!(place.channel, Channel::Table);
        assert!(
            place
                .marker("7")
                .as_ref()
                .ends_with("table/_voxlake/jobs/7.json")
        );
    }
}
