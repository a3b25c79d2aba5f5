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

/// The variables a job's id is read from, first set wins: voxlake's own, then torchrun's run
/// id (not its default `none`: unnamed runs share it), then Slurm's job id.
pub const JOB_VARS: [&str; 3] = ["VOXLAKE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"];

/// Slurm's variable with the job's start, in seconds since the Unix epoch: the same for every
/// rank of the job. (torchrun exports no start time.)
pub const START_VAR: &str = "SLURM_JOB_START_TIME";

impl Job {
    /// The job a rank of this launch is one of: `given` (a job the caller named), else the one
    /// [`JOB_VARS`] name; with what the launcher says of it: every rank on one node (`nodes`,
    /// the launcher's count of nodes where it says one, `voxlake_plan::launch::Launch::node`,
    /// else Slurm's `SLURM_JOB_NUM_NODES`, is 1) and when it started ([`START_VAR`]). `None`
    /// where neither names one.
    ///
    /// ```
    /// use voxlake_delta::agree::Job;
    ///
    /// let env = |name: &str| match name {
    ///     "TORCHELASTIC_RUN_ID" => Some("none".to_string()),
    ///     "SLURM_JOB_ID" => Some("4242".to_string()),
    ///     "SLURM_JOB_NUM_NODES" => Some("1".to_string()),
    ///     _ => None,
    /// };
    /// let job = Job::from_vars(None, None, env).unwrap();
    /// assert_eq!((job.id.as_str(), job.one_node), ("4242", true));
    /// assert_eq!(Job::from_vars(None, None, |_| None), None);
    /// ```
    pub fn from_vars(
        given: Option<Job>,
        nodes: Option<usize>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Option<Job> {
        let mut job = given.or_else(|| {
            JOB_VARS.iter().find_map(|name| {
                var(name)
                    .map(|v| v.trim().to_string())
                    // torchrun's default run id is shared by every unnamed run.
                    .filter(|v| !(v.is_empty() || (*name == "TORCHELASTIC_RUN_ID" && v == "none")))
                    .map(Job::new)
            })
        })?;
        let nodes = nodes
            .or_else(|| var("SLURM_JOB_NUM_NODES").and_then(|n| n.trim().parse::<usize>().ok()));
        job.one_node |= nodes == Some(1);
        let started = var(START_VAR).and_then(|t| t.trim().parse::<u64>().ok());
        if job.started.is_none()
            && let Some(secs) = started
        {
            job.started = Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        }
        Some(job)
    }

    /// [`from_vars`](Self::from_vars) over the process's environment.
    pub fn from_env(given: Option<Job>, nodes: Option<usize>) -> Option<Job> {
        Job::from_vars(given, nodes, |name| std::env::var(name).ok())
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The job `vars` say, with the node count the launcher's variables among them say, as
    /// the loader and the Python package compose the two.
    fn job(given: Option<Job>, vars: &[(&str, &str)]) -> Option<Job> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let var = |name: &str| vars.get(name).cloned();
        Job::from_vars(given, voxlake_plan::launch::nodes_from_vars(var), var)
    }

    #[test]
    fn a_job_is_told_where_and_when_it_runs() {
        use std::time::{Duration, UNIX_EPOCH};
        // torchrun --standalone, 2 workers: one node, no start time.
        let standalone = [
            ("TORCHELASTIC_RUN_ID", "3f2c"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("GROUP_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "2"),
        ];
        let j = job(None, &standalone).unwrap();
        assert_eq!((j.id.as_str(), j.one_node, j.started), ("3f2c", true, None));
        // Two nodes of two.
        let mut two_nodes = standalone;
        two_nodes[2] = ("WORLD_SIZE", "4");
        assert!(!job(None, &two_nodes).unwrap().one_node);
        // A Slurm step over 2 nodes, its job's start.
        let slurm = [
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_PROCID", "3"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_NUM_NODES", "2"),
            ("SLURM_JOB_START_TIME", "1790000000"),
        ];
        let j = job(None, &slurm).unwrap();
        assert!(!j.one_node);
        assert_eq!(
            j.started,
            Some(UNIX_EPOCH + Duration::from_secs(1_790_000_000))
        );
        // A one-node allocation says so even without a step's variables.
        let j = job(None, &[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NUM_NODES", "1")]).unwrap();
        assert!(j.one_node);
        // A job the caller named keeps its id, and learns the rest.
        let j = job(Some(Job::new("mine")), &slurm).unwrap();
        assert_eq!((j.id.as_str(), j.started.is_some()), ("mine", true));
        assert_eq!(job(None, &[("SLURM_JOB_START_TIME", "1")]), None);
        assert_eq!(job(None, &[("TORCHELASTIC_RUN_ID", "none")]), None);
    }
}
