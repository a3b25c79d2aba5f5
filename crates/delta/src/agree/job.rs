//! [`Job`]: what a rank knows of the job it is one of, which decides where its ranks agree.

use std::time::SystemTime;

/// The job a process is a rank of (`voxlake_table::TableOptions::job`): its id, and
/// what its launcher says of it, which decides how its ranks agree on one version (see
/// [`crate::agree`]).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use voxlake_delta::agree::Job;
///
/// let started = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
/// let job = Job::new("4242").with_one_node(true).with_started(started);
/// assert_eq!(job.id, "4242");
/// assert!(job.one_node);
/// assert_eq!(Job::from("4242"), Job::new("4242"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Job {
    /// The id every rank of the job shares (a Slurm job id, torchrun's run id).
    pub id: String,
    /// Every rank runs on this node: they agree in this user's folder on it
    /// ([`voxlake_io::private::user_folder`]), not beside the table.
    pub one_node: bool,
    /// When the launcher started the job, the same for every rank (Slurm's
    /// `SLURM_JOB_START_TIME`): where the ranks have no place to agree, they read the latest
    /// version committed before it.
    pub started: Option<SystemTime>,
}

impl Job {
    /// Job `id`, of ranks on any number of nodes, started at a time no one said.
    pub fn new(id: impl Into<String>) -> Job {
        Job {
            id: id.into(),
            one_node: false,
            started: None,
        }
    }

    /// Whether every rank runs on this node.
    pub fn with_one_node(mut self, one_node: bool) -> Job {
        self.one_node = one_node;
        self
    }

    /// When the launcher started the job.
    pub fn with_started(mut self, started: SystemTime) -> Job {
        self.started = Some(started);
        self
    }
}

impl From<&str> for Job {
    fn from(id: &str) -> Job {
        Job::new(id)
    }
}

impl From<String> for Job {
    fn from(id: String) -> Job {
        Job::new(id)
    }
}
