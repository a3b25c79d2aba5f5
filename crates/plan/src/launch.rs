//! A process's rank and world size as its launcher set them in the environment (what
//! `voxlake_loader::LoaderBuilder::with_rank_from_env` reads), and the node affinity they
//! imply ([`affinity`](crate::affinity)).
//!
//! Pure: the variables come from a lookup function, so every launcher's case is tested
//! without touching the process's environment.
//!
//! ```
//! use voxlake_plan::launch::from_vars;
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

use crate::affinity::Affinity;

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
    /// Where the node the rank runs on is said (for node affinity).
    pub node: NodeVars,
}

/// How a launcher says which node a rank runs on, and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeVars {
    /// The node's index and the ranks each node runs (nodes: the world size over those).
    IndexAndRanksPerNode(&'static str, &'static str),
    /// The ranks each node runs; ranks are numbered in blocks, node after node.
    RanksPerNode(&'static str),
    /// The node's index and the number of nodes.
    IndexAndNodes(&'static str, &'static str),
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
        node: NodeVars::IndexAndRanksPerNode("GROUP_RANK", "LOCAL_WORLD_SIZE"),
    },
    Launcher {
        name: "Open MPI",
        rank: "OMPI_COMM_WORLD_RANK",
        world_size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        rank_alone: false,
        node: NodeVars::RanksPerNode("OMPI_COMM_WORLD_LOCAL_SIZE"),
    },
    Launcher {
        name: "MPICH / Intel MPI (PMI)",
        rank: "PMI_RANK",
        world_size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
        rank_alone: false,
        node: NodeVars::RanksPerNode("MPI_LOCALNRANKS"),
    },
    // SLURM_STEP_NUM_TASKS is set in the tasks of a step `srun` started; an `sbatch` script
    // has SLURM_PROCID=0 and SLURM_NTASKS=N but is one process, not rank 0 of N.
    Launcher {
        name: "Slurm srun",
        rank: "SLURM_PROCID",
        world_size: "SLURM_STEP_NUM_TASKS",
        local_rank: "SLURM_LOCALID",
        rank_alone: true,
        node: NodeVars::IndexAndNodes("SLURM_NODEID", "SLURM_STEP_NUM_NODES"),
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
    /// The node this rank runs on and the number of nodes, where the launcher says them
    /// (see [`NodeVars`]).
    pub node: Option<(usize, usize)>,
    /// The launcher and its two variables, for logs and errors.
    pub source: String,
}

/// The global rank PyTorch Lightning's launcher implies: it sets `WORLD_SIZE`, `NODE_RANK` and
/// `LOCAL_RANK` but not `RANK`; ranks are numbered node after node, `LOCAL_WORLD_SIZE` of them
/// on each (needed beyond node 0).
fn lightning_rank(var: &impl Fn(&str) -> Option<String>, size: &str) -> Result<String, String> {
    let number = |name: &str| -> Result<Option<usize>, String> {
        var(name)
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{name}={v:?} is not a rank or a count"))
            })
            .transpose()
    };
    let local = number("LOCAL_RANK")?.unwrap_or(0);
    match (
        number("NODE_RANK")?.unwrap_or(0),
        number("LOCAL_WORLD_SIZE")?,
    ) {
        (0, _) => Ok(local.to_string()),
        (node, Some(per_node)) => Ok((node * per_node + local).to_string()),
        (node, None) => Err(format!(
            "WORLD_SIZE={size}, NODE_RANK={node} and LOCAL_RANK={local} are set but RANK and LOCAL_WORLD_SIZE are not: the global rank is unknown"
        )),
    }
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
            (None, Some(size)) if rank_var == "RANK" && var(local_var).is_some() => {
                (lightning_rank(&var, &size)?, size)
            }
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
        let count = |name: &str| match var(name) {
            Some(v) => match number(name, &v)? {
                0 => Err(format!("{name}=0 is not a count")),
                n => Ok(Some(n)),
            },
            None => Ok(None),
        };
        let node = match launcher.node {
            NodeVars::IndexAndRanksPerNode(index, per_node) => {
                match (var(index), count(per_node)?) {
                    (Some(i), Some(per)) => Some((number(index, &i)?, world_size.div_ceil(per))),
                    _ => None,
                }
            }
            NodeVars::RanksPerNode(per_node) => {
                count(per_node)?.map(|per| (rank / per, world_size.div_ceil(per)))
            }
            NodeVars::IndexAndNodes(index, nodes) => match (var(index), count(nodes)?) {
                (Some(i), Some(n)) => Some((number(index, &i)?, n)),
                _ => None,
            },
        };
        return Ok(Some(Launch {
            rank,
            world_size,
            local_rank,
            node,
            source: format!("{} ({rank_var}, {size_var})", launcher.name),
        }));
    }
    Ok(None)
}

/// [`from_vars`] over this process's environment.
pub fn from_env() -> Result<Option<Launch>, String> {
    from_vars(|name| std::env::var(name).ok())
}

/// The number of nodes the launcher's variables (`var`) say, if they say one: where it is 1, a
/// job's ranks agree on their version on this node (`voxlake_delta::agree::Job::from_vars`).
pub fn nodes_from_vars(var: impl Fn(&str) -> Option<String>) -> Option<usize> {
    from_vars(var).ok().flatten()?.node.map(|(_, nodes)| nodes)
}

/// [`nodes_from_vars`] over this process's environment.
pub fn nodes_from_env() -> Option<usize> {
    nodes_from_vars(|name| std::env::var(name).ok())
}

/// Which node affinity a loader asked for (`voxlake_loader::LoaderBuilder::with_node_affinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NodeAffinity {
    /// The files shuffled over all ranks every epoch.
    #[default]
    Off,
    /// This rank runs on node `.0` of `.1`.
    Given(usize, usize),
    /// The node from the launcher's variables (see [`NodeVars`]).
    FromEnv,
}

/// The affinity of rank `rank` of `world` on node `node` of `nodes`, checked: `None` on one
/// node; an error where the nodes do not divide the world into equal blocks or the rank is not
/// in its node's block (the deal gives node `k` ranks `k·L … (k+1)·L − 1`).
///
/// ```
/// use voxlake_plan::launch::affinity;
///
/// assert_eq!(affinity(5, 8, 1, 2).unwrap().unwrap().ranks_per_node(), 4);
/// assert_eq!(affinity(5, 8, 0, 1), Ok(None));
/// assert!(affinity(5, 8, 0, 2).unwrap_err().contains("blocks"));
/// ```
pub fn affinity(
    rank: usize,
    world: usize,
    node: usize,
    nodes: usize,
) -> Result<Option<Affinity>, String> {
    if node >= nodes.max(1) {
        return Err(format!(
            "node {node} of {nodes}: nodes count from 0 and must be below their number"
        ));
    }
    if nodes <= 1 {
        return Ok(None);
    }
    let affinity = Affinity::new(nodes, world).ok_or_else(|| {
        format!(
            "node affinity over {nodes} nodes needs a world size they divide (the same number of ranks on every node); the world size is {world}"
        )
    })?;
    let per = affinity.ranks_per_node();
    if affinity.node_of(rank) != node {
        return Err(format!(
            "rank {rank} of {world} runs on node {node}, but node affinity over {nodes} nodes gives node {node} ranks {}..{}: launch ranks in blocks, node after node (torchrun does; srun --distribution=block)",
            node * per,
            (node + 1) * per
        ));
    }
    Ok(Some(affinity))
}

/// What `asked` means for rank `rank` of `world` (see [`affinity`]); with
/// [`NodeAffinity::FromEnv`], an error where the launcher says no node (`launch`: the
/// launcher's variables, `None` for a process started on its own: one node).
pub fn resolve_affinity(
    asked: NodeAffinity,
    rank: usize,
    world: usize,
    launch: Option<&Launch>,
) -> Result<Option<Affinity>, String> {
    match asked {
        NodeAffinity::Off => Ok(None),
        NodeAffinity::Given(node, nodes) => affinity(rank, world, node, nodes),
        NodeAffinity::FromEnv => match launch {
            None => Ok(None),
            Some(Launch {
                node: Some((node, nodes)),
                ..
            }) => affinity(rank, world, *node, *nodes),
            Some(l) => Err(format!(
                "node affinity from the environment: {} says no node (for torchrun GROUP_RANK and LOCAL_WORLD_SIZE, Open MPI OMPI_COMM_WORLD_LOCAL_SIZE, MPICH MPI_LOCALNRANKS, Slurm SLURM_NODEID and SLURM_STEP_NUM_NODES)",
                l.source
            )),
        },
    }
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
        // PyTorch Lightning's launcher: no RANK, the node's and the local one.
        let lightning = |vars: &[(&str, &str)]| {
            let mut all = vec![("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
            all.extend_from_slice(vars);
            with(&all)
        };
        assert_eq!(lightning(&[]).unwrap().unwrap().rank, 1);
        assert_eq!(lightning(&[("NODE_RANK", "0")]).unwrap().unwrap().rank, 1);
        let second = [("NODE_RANK", "1"), ("LOCAL_WORLD_SIZE", "2")];
        assert_eq!(lightning(&second).unwrap().unwrap().rank, 3);
        let e = lightning(&[("NODE_RANK", "1")]).unwrap_err();
        assert!(e.contains("LOCAL_WORLD_SIZE are not"), "{e}");
    }

    #[test]
    fn each_launcher_says_the_node() {
        let node = |vars: &[(&str, &str)]| with(vars).unwrap().unwrap().node;
        let torchrun = [("RANK", "5"), ("WORLD_SIZE", "8"), ("GROUP_RANK", "1")];
        assert_eq!(node(&torchrun), None, "no LOCAL_WORLD_SIZE");
        let torchrun = [torchrun.as_slice(), &[("LOCAL_WORLD_SIZE", "4")]].concat();
        assert_eq!(node(&torchrun), Some((1, 2)));
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ];
        assert_eq!(node(&ompi), Some((1, 2)));
        let mpich = [
            ("PMI_RANK", "2"),
            ("PMI_SIZE", "8"),
            ("MPI_LOCALNRANKS", "2"),
        ];
        assert_eq!(node(&mpich), Some((1, 4)));
        let slurm = [
            ("SLURM_PROCID", "5"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_NUM_NODES", "2"),
        ];
        assert_eq!(node(&slurm), Some((1, 2)));
        let e = with(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("GROUP_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "0"),
        ])
        .unwrap_err();
        assert!(e.contains("LOCAL_WORLD_SIZE=0"), "{e}");

        // Resolved: the node must hold the rank; a launcher that says none is an error.
        let launch = with(&slurm).unwrap();
        let a = resolve_affinity(NodeAffinity::FromEnv, 5, 8, launch.as_ref()).unwrap();
        assert_eq!(a.map(|a| a.nodes()), Some(2));
        let bare = with(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap();
        let e = resolve_affinity(NodeAffinity::FromEnv, 1, 2, bare.as_ref()).unwrap_err();
        assert!(e.contains("GROUP_RANK"), "{e}");
        assert_eq!(
            resolve_affinity(NodeAffinity::FromEnv, 0, 1, None),
            Ok(None)
        );
        let e = resolve_affinity(NodeAffinity::Given(2, 2), 0, 4, None).unwrap_err();
        assert!(e.contains("below"), "{e}");
    }
}
