//! A process's rank and world size as its launcher set them in the environment
//! ([`LoaderBuilder::with_rank_from_env`](crate::LoaderBuilder::with_rank_from_env)).
//!
//! Pure: the variables come from a lookup function, so every launcher's case is tested
//! without touching the process's environment.
//!
//! ```
//! use voxlake_loader::launch::from_vars;
//!
//! // As torchrun starts its fourth worker of eight.
//! let env = |name: &str| match name {
//!     "RANK" => Some("3".to_string()),
//!     "WORLD_SIZE" => Some("8".to_string()),
//!     _ => None,
//! };
//! let launch = from_vars(env).unwrap().unwrap();
//! assert_eq!((launch.rank, launch.world_size), (3, 8));
//! assert_eq!(launch.local_rank, None); // torchrun sets LOCAL_RANK too: the GPU to use
//! // No launcher: none (one process).
//! assert_eq!(from_vars(|_| None), Ok(None));
//! ```

/// One launcher's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launcher {
    /// The launcher, for logs and errors.
    pub name: &'static str,
    /// This process's rank.
    pub rank: &'static str,
    /// The number of ranks.
    pub world_size: &'static str,
    /// The rank among the node's.
    pub local_rank: &'static str,
    /// Whether the rank may be set without the world size, and then means no launch.
    pub rank_alone: bool,
}

/// The launchers read, first match wins. torchrun's come first: under `srun` or `mpirun` it
/// starts several workers per task, and its `RANK` is the global one.
pub const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        name: "torchrun / torch.distributed",
        rank: "RANK",
        world_size: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        rank_alone: false,
    },
    Launcher {
        name: "Open MPI",
        rank: "OMPI_COMM_WORLD_RANK",
        world_size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        rank_alone: false,
    },
    Launcher {
        name: "MPICH / Intel MPI (PMI)",
        rank: "PMI_RANK",
        world_size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        rank_alone: false,
    },
    // SLURM_STEP_NUM_TASKS is set in the tasks of a step `srun` started; an `sbatch` script
    // has SLURM_PROCID=0 and SLURM_NTASKS=N but is one process, not rank 0 of N.
    Launcher {
        name: "Slurm srun",
        rank: "SLURM_PROCID",
        world_size: "SLURM_STEP_NUM_TASKS",
        local_rank: "SLURM_LOCALID",
        rank_alone: true,
    },
];

/// A rank and world size, and which launcher's variables gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, from 0.
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
    /// The rank among this node's, where the launcher says it: the GPU to use
    /// (`Device::Cuda(local_rank)`) when each rank of a node has its own.
    pub local_rank: Option<usize>,
    /// The launcher and its two variables, for logs and errors.
    pub source: String,
}

/// The first launcher of [`LAUNCHERS`] whose two variables `var` returns; `None` when no
/// launcher's are set (a process started on its own). An error names the variables where
/// only one of a pair is set (except a rank alone where [`Launcher::rank_alone`]: Slurm's in an
/// `sbatch` script), a value is not a number, the world size is 0 or the rank is not below it.
pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, String> {
    for launcher in LAUNCHERS {
        let (rank_var, size_var, local_var) =
            (launcher.rank, launcher.world_size, launcher.local_rank);
        let (rank, size) = match (var(rank_var), var(size_var)) {
            (None, None) => continue,
            (Some(_), None) if launcher.rank_alone => continue,
            (Some(rank), Some(size)) => (rank, size),
            (rank, size) => {
                let (set, unset) = match rank {
                    Some(_) => (rank_var, size_var),
                    None => (size_var, rank_var),
                };
                let value = rank.or(size).unwrap_or_default();
                return Err(format!(
                    "{set}={value} is set but {unset} is not: {} sets both",
                    launcher.name
                ));
            }
        };
        let number = |name: &str, value: &str| {
            value.trim().parse::<usize>().map_err(|_| {
                format!("{name}={value:?} is not a rank or a count (a whole number from 0)")
            })
        };
        let (rank, world_size) = (number(rank_var, &rank)?, number(size_var, &size)?);
        let local_rank = match var(local_var) {
            Some(local) => Some(number(local_var, &local)?),
            None => None,
        };
        if rank >= world_size {
            return Err(format!(
                "{rank_var}={rank} must be below {size_var}={world_size} (ranks count from 0)"
            ));
        }
        return Ok(Some(Launch {
            rank,
            world_size,
            local_rank,
            source: format!("{} ({rank_var}, {size_var})", launcher.name),
        }));
    }
    Ok(None)
}

/// [`from_vars`] over this process's environment.
pub fn from_env() -> Result<Option<Launch>, String> {
    from_vars(|name| std::env::var(name).ok())
}

/// The variables a job's id is read from, first set wins: voxlake's own, then torchrun's run
/// id (not its default `none`: unnamed runs share it), then Slurm's job id.
pub const JOB_VARS: [&str; 3] = ["VOXLAKE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"];

/// The job's id as its launcher set it (see [`JOB_VARS`]), if one is.
///
/// ```
/// use voxlake_loader::launch::job_from_vars;
///
/// let env = |name: &str| match name {
///     "TORCHELASTIC_RUN_ID" => Some("none".to_string()),
///     "SLURM_JOB_ID" => Some("4242".to_string()),
///     _ => None,
/// };
/// assert_eq!(job_from_vars(env), Some("4242".to_string()));
/// assert_eq!(job_from_vars(|_| None), None);
/// ```
pub fn job_from_vars(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    JOB_VARS.iter().find_map(|name| {
        var(name)
            .map(|v| v.trim().to_string())
            // torchrun's default run id is shared by every unnamed run.
            .filter(|v| !(v.is_empty() || (*name == "TORCHELASTIC_RUN_ID" && v == "none")))
    })
}

/// [`job_from_vars`] over the process's environment.
pub fn job_from_env() -> Option<String> {
    job_from_vars(|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Option<Launch>, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_vars(|name| vars.get(name).cloned())
    }

    fn ranks(vars: &[(&str, &str)]) -> (usize, usize) {
        let launch = with(vars).unwrap().unwrap();
        (launch.rank, launch.world_size)
    }

    #[test]
    fn each_launcher_is_read() {
        assert_eq!(ranks(&[("RANK", "3"), ("WORLD_SIZE", "8")]), (3, 8));
        for Launcher {
            rank,
            world_size: size,
            local_rank: local,
            ..
        } in LAUNCHERS
        {
            let launch = with(&[(rank, "9"), (size, "16"), (local, "1")])
                .unwrap()
                .unwrap();
            assert_eq!(launch.local_rank, Some(1), "{local}");
            let launch = with(&[(rank, "9"), (size, "16")]).unwrap().unwrap();
            assert_eq!(launch.local_rank, None, "{local}");
            let e = with(&[(rank, "9"), (size, "16"), (local, "x")]).unwrap_err();
            assert!(e.contains(local), "{e}");
        }
        assert_eq!(
            ranks(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]),
            (1, 2)
        );
        assert_eq!(ranks(&[("PMI_RANK", "0"), ("PMI_SIZE", "4")]), (0, 4));
        let step = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_STEP_NUM_TASKS", "16"),
        ];
        let launch = with(&step).unwrap().unwrap();
        assert_eq!((launch.rank, launch.world_size), (5, 16));
        assert!(
            launch.source.contains("SLURM_STEP_NUM_TASKS"),
            "{}",
            launch.source
        );
        assert_eq!(with(&[]), Ok(None));
    }

    #[test]
    fn torchrun_wins_over_the_task_launcher_around_it() {
        // srun starts one torchrun per node (task 1 of 2); torchrun's worker 5 of 16 is the rank.
        let vars = [
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("RANK", "5"),
            ("WORLD_SIZE", "16"),
        ];
        assert_eq!(ranks(&vars), (5, 16));
        let vars = [
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ];
        assert_eq!(ranks(&vars), (3, 4));
    }

    #[test]
    fn an_sbatch_script_is_one_process() {
        // The batch script itself: Slurm's rank without a step is not a rank of the job.
        let script = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8")];
        assert_eq!(with(&script), Ok(None));
    }

    #[test]
    fn half_set_pairs_and_bad_values_are_errors_naming_the_variables() {
        for (vars, says) in [
            (vec![("RANK", "2")], "RANK=2 is set but WORLD_SIZE is not"),
            (
                vec![("WORLD_SIZE", "4")],
                "WORLD_SIZE=4 is set but RANK is not",
            ),
            (
                vec![("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_SIZE=4 is set but OMPI_COMM_WORLD_RANK is not",
            ),
            (
                vec![("SLURM_STEP_NUM_TASKS", "4")],
                "SLURM_STEP_NUM_TASKS=4 is set but SLURM_PROCID is not",
            ),
            (
                vec![("RANK", "two"), ("WORLD_SIZE", "4")],
                "RANK=\"two\" is not a rank",
            ),
            (
                vec![("RANK", "-1"), ("WORLD_SIZE", "4")],
                "RANK=\"-1\" is not a rank",
            ),
            (
                vec![("RANK", "4"), ("WORLD_SIZE", "4")],
                "RANK=4 must be below WORLD_SIZE=4",
            ),
            (
                vec![("PMI_RANK", "0"), ("PMI_SIZE", "0")],
                "PMI_RANK=0 must be below PMI_SIZE=0",
            ),
        ] {
            let e = with(&vars).unwrap_err();
            assert!(e.contains(says), "{vars:?}: {e}");
        }
        // Whitespace around a number is the launcher's formatting, not an error.
        assert_eq!(ranks(&[("RANK", " 1\n"), ("WORLD_SIZE", "2 ")]), (1, 2));
    }
}
