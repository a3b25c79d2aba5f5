//! `voxlake bench`'s arguments.

use std::path::PathBuf;

use crate::compact as cli;
use voxlake_plan::order::Uneven;

/// Run the loader over TABLE, touch every value of every batch, and report throughput.
#[derive(clap::Args)]
pub(super) struct BenchArgs {
    /// Table: a local path or a URL; several: a mixture of them, each its share of the draws
    /// (--proportion, --repeat, --choose; default: every row of each once an epoch).
    #[arg(required = true, num_args = 1.., value_name = "TABLE")]
    pub(super) tables: Vec<String>,
    /// Samples per batch.
    #[arg(long, default_value_t = 32)]
    pub(super) batch_size: usize,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    pub(super) epochs: u64,
    /// Shuffle files, row groups and rows.
    #[arg(long)]
    pub(super) shuffle: bool,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Shuffle buffer in rows.
    #[arg(long, default_value_t = voxlake_loader::DEFAULT_SHUFFLE_BUFFER)]
    pub(super) shuffle_buffer: usize,
    /// This process's rank.
    #[arg(long, default_value_t = 0)]
    pub(super) rank: usize,
    /// Number of ranks.
    #[arg(long, default_value_t = 1)]
    pub(super) world_size: usize,
    /// Take the rank and world size from the launcher's variables (torchrun's RANK and
    /// WORLD_SIZE, Open MPI's, MPICH's PMI_RANK and PMI_SIZE, a Slurm step's).
    #[arg(long, conflicts_with_all = ["rank", "world_size"])]
    pub(super) rank_from_env: bool,
    /// Node affinity: this process runs on node K of N (`K/N`, ranks numbered in blocks per
    /// node), or `env` for the launcher's variables (torchrun's GROUP_RANK and
    /// LOCAL_WORLD_SIZE, …): each node's ranks read the same files every epoch, so a node's
    /// cache holds what its next epoch reads (with --shuffle).
    #[arg(long, value_name = "K/N|env")]
    pub(super) node: Option<String>,
    /// The job this process is a rank of: the latest version is resolved once for the job
    /// (default with --rank-from-env: VOXLAKE_JOB_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID).
    /// Its ranks agree in --job-dir, else in this user's folder on the node when every rank
    /// runs on it, else in `_voxlake/jobs/` beside the table; read-only, they read the latest
    /// version before the job's start (Slurm), else each its latest, with a warning.
    #[arg(long)]
    pub(super) job: Option<String>,
    /// A folder (local path or store URL) every rank of the job may write, where they agree on
    /// its version (default: VOXLAKE_JOB_DIR).
    #[arg(long, value_name = "DIR|URL")]
    pub(super) job_dir: Option<String>,
    /// Memory budget in MiB.
    #[arg(long, default_value_t = 1024)]
    pub(super) memory_budget_mb: u64,
    /// Row groups fetched and decoded at once (default: sized to the store as it runs).
    #[arg(long)]
    pub(super) row_group_prefetch: Option<usize>,
    /// Read a remote table through a disk cache in this folder, shared by every process of
    /// the node that uses it (default: VOXLAKE_CACHE_DIR, if set).
    #[arg(long)]
    pub(super) cache_dir: Option<std::path::PathBuf>,
    /// The cache's cap in MiB (default: half the free space of its filesystem).
    #[arg(long, requires = "cache_dir")]
    pub(super) cache_max_mb: Option<u64>,
    /// Read without the disk cache, whatever VOXLAKE_CACHE_DIR says.
    #[arg(long, conflicts_with = "cache_dir")]
    pub(super) no_cache: bool,
    /// Write a Chrome trace-event file of the first batches here (Perfetto, chrome://tracing):
    /// each wait in next(), each batch's assembly, each row group's fetch and decode, each
    /// store request. `{rank}` is replaced by the rank.
    #[arg(long, value_name = "FILE")]
    pub(super) trace: Option<std::path::PathBuf>,
    /// The batches --trace covers.
    #[arg(long, default_value_t = 200, requires = "trace")]
    pub(super) trace_batches: u64,
    /// Batches assembled ahead of the training loop (default: the loader's, 2; at least 1).
    #[arg(long)]
    pub(super) prefetch: Option<usize>,
    /// Threads that copy each batch's samples at once (default: a quarter of the cores, 1 to 4).
    #[arg(long)]
    pub(super) assembly_threads: Option<usize>,
    /// Drop batches instead of giving their memory back to the loader (`Loader::recycle`).
    #[arg(long)]
    pub(super) no_recycle: bool,
    /// Do not read the batches' values (the loader alone, without its consumer's work: what
    /// `benches/compare` sets the Python package against; the checksums are then 0).
    #[arg(long)]
    pub(super) no_touch: bool,
    /// Move the channel axis first.
    #[arg(long)]
    pub(super) channels_first: bool,
    /// Drop each epoch's short last batch.
    #[arg(long)]
    pub(super) drop_last: bool,
    /// Skip the row checksum verification.
    #[arg(long)]
    pub(super) no_verify: bool,
    /// Read every row group every epoch: none kept in the memory budget between epochs.
    #[arg(long)]
    pub(super) no_keep: bool,
    /// Rows that do not divide evenly over the ranks: `pad` (repeat a few) or `drop`.
    #[arg(long, default_value = "pad")]
    pub(super) uneven: Uneven,
    /// Stop after this many batches (a simulated preemption: see --state-out).
    #[arg(long)]
    pub(super) stop_after: Option<u64>,
    /// Write the loader's state after the last batch delivered (JSON), to resume from.
    #[arg(long)]
    pub(super) state_out: Option<PathBuf>,
    /// Start from a state written by --state-out (--rank and --world-size may differ).
    #[arg(long)]
    pub(super) resume: Option<PathBuf>,
    #[command(flatten)]
    pub(super) version: cli::VersionArgs,
    #[command(flatten)]
    pub(super) storage: cli::StorageArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// Also write the report as one self-contained HTML page with plots (samples/s over
    /// time, time by stage, the steps' waits, bytes and requests, the forecast). `{rank}` is
    /// replaced by the rank; with several ranks and no `{rank}`, each writes FILE.rank<R>.html
    /// (`voxlake report merge DIR` lines them up).
    #[arg(long, value_name = "FILE.html")]
    pub(super) report: Option<PathBuf>,
    /// Write the delivered ids, in order, one per line.
    #[arg(long)]
    pub(super) ids_out: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sample: cli::SampleArgs,
    /// Only the rows this SQL expression keeps, e.g. "label = 1 AND region IN ('a', 'b')".
    #[arg(long)]
    pub(super) filter: Option<String>,
    #[command(flatten)]
    pub(super) sampling: SamplingArgs,
    /// Hand out libtorch tensors on this device (`cpu`, `cuda`, `cuda:N`; feature `tch`).
    #[cfg(feature = "tch")]
    #[arg(long)]
    pub(super) device: Option<String>,
}

/// How each epoch draws its rows (`voxlake_plan::sample`): the Python package's keywords.
#[derive(clap::Args, Clone, Default)]
pub(super) struct SamplingArgs {
    /// `label`: every label value an equal share of each epoch's draws (with replacement).
    #[arg(long, value_name = "label")]
    pub(super) balance: Option<String>,
    /// A relative weight per label value, e.g. `0:1,1:9` (with replacement).
    #[arg(long, value_name = "LABEL:W,...")]
    pub(super) class_weights: Option<String>,
    /// A numeric column whose value is each row's weight (with replacement).
    #[arg(long)]
    pub(super) weight_column: Option<String>,
    /// Draws per epoch over all ranks (default: the rows selected).
    #[arg(long)]
    pub(super) epoch_size: Option<u64>,
    /// A new seeded subset of this share of the rows each epoch, in (0, 1].
    #[arg(long)]
    pub(super) subsample: Option<f64>,
    /// What an unweighted subset takes: `row` (default) or `row_group` (whole row groups: only
    /// those are read).
    #[arg(long, value_name = "row|row_group")]
    pub(super) subset_by: Option<String>,
    /// Read only this split of --splits (a hash of each row's id and --split-salt).
    #[arg(long, requires = "splits")]
    pub(super) split: Option<String>,
    /// The splits' relative shares, e.g. `train:0.8,val:0.1,test:0.1`.
    #[arg(long, requires = "split")]
    pub(super) splits: Option<String>,
    /// Another salt, another assignment of rows to splits.
    #[arg(long, requires = "split")]
    pub(super) split_salt: Option<String>,
    /// Of a mixture, each table's share of each epoch's draws, in the tables' order, e.g.
    /// `0.6,0.3,0.1` (every table has one, or none does).
    #[arg(long, value_name = "P,...")]
    pub(super) proportion: Option<String>,
    /// Of a mixture, draws per row per epoch of each table, e.g. `2,,0.5` (an empty entry: the
    /// table's share is given by another flag).
    #[arg(long, value_name = "R,...")]
    pub(super) repeat: Option<String>,
    /// Of a mixture, draws per epoch of each table, e.g. `,100,` (an empty entry: the table's
    /// share is given by another flag).
    #[arg(long, value_name = "N,...")]
    pub(super) choose: Option<String>,
    /// Patches of Z,Y,X voxels of a bricked table's volumes instead of rows (docs/usage.md,
    /// "How do I read patches of volumes larger than a sample?").
    #[arg(long, value_name = "Z,Y,X")]
    pub(super) patch: Option<String>,
    /// With --patch: patches of each volume an epoch (default 1).
    #[arg(long, requires = "patch")]
    pub(super) patches_per_volume: Option<u64>,
    /// With --patch: the label map whose classes the centres are drawn by.
    #[arg(long, requires_all = ["patch", "label_probabilities"])]
    pub(super) label_field: Option<String>,
    /// With --label-field: each class's relative probability of a centre, e.g. `0:1,1:1`.
    #[arg(long, value_name = "CLASS:P,...", requires = "label_field")]
    pub(super) label_probabilities: Option<String>,
    /// With --patch: a patch past an edge filled with `zero` (default) or `edge` voxels, or
    /// kept inside (`none`).
    #[arg(long, value_name = "zero|edge|none", requires = "patch")]
    pub(super) pad: Option<String>,
    /// With --patch: volumes whose patches mix before batching (default 8).
    #[arg(long, requires = "patch")]
    pub(super) patch_window: Option<usize>,
    /// With --patch: `random` (default) or `grid` (every patch of each volume's grid, in
    /// order).
    #[arg(long, value_name = "random|grid", requires = "patch")]
    pub(super) sampler: Option<String>,
    /// With --sampler grid: voxels neighbouring patches share, Z,Y,X.
    #[arg(long, value_name = "Z,Y,X", requires = "sampler")]
    pub(super) overlap: Option<String>,
}

impl SamplingArgs {
    /// The tables as a mixture's sources with their shares (`None`: one table, no share
    /// flag). A list of another length than the tables, a value that does not parse, or two
    /// shares for one table is an error naming the flag.
    pub(super) fn sources(
        &self,
        tables: &[String],
    ) -> Result<Option<Vec<voxlake_loader::Source>>, String> {
        let flags = [
            ("proportion", &self.proportion),
            ("repeat", &self.repeat),
            ("choose", &self.choose),
        ];
        if tables.len() == 1 && flags.iter().all(|(_, v)| v.is_none()) {
            return Ok(None);
        }
        let mut sources: Vec<(voxlake_loader::Source, Option<&str>)> = tables
            .iter()
            .map(|t| (voxlake_loader::Source::new(t.as_str()), None))
            .collect();
        for (flag, list) in flags {
            let Some(list) = list else { continue };
            let values: Vec<&str> = list.split(',').map(str::trim).collect();
            if values.len() != tables.len() {
                return Err(format!(
                    "--{flag} {list:?}: {} values for {} tables",
                    values.len(),
                    tables.len()
                ));
            }
            for ((source, given), value) in sources.iter_mut().zip(values) {
                if value.is_empty() {
                    continue;
                }
                if let Some(other) = given {
                    return Err(format!(
                        "--{flag} and --{other} both give table {} a share",
                        source.location()
                    ));
                }
                let bad = || format!("--{flag}: {value:?} is not a number");
                let s = std::mem::replace(source, voxlake_loader::Source::new(""));
                *source = match flag {
                    "proportion" => s.with_proportion(value.parse().map_err(|_| bad())?),
                    "repeat" => s.with_repeat(value.parse().map_err(|_| bad())?),
                    _ => s.with_choose(value.parse().map_err(|_| bad())?),
                };
                *given = Some(flag);
            }
        }
        Ok(Some(sources.into_iter().map(|(s, _)| s).collect()))
    }

    /// The spec the flags make, checked (as a state records it: `option=value` pairs).
    pub(super) fn spec(&self) -> Result<voxlake_plan::sample::Sampling, String> {
        let subsample = self.subsample.map(|f| f.to_string());
        let epoch_size = self.epoch_size.map(|n| n.to_string());
        if self.overlap.is_some() && self.sampler.as_deref() != Some("grid") {
            return Err("--overlap goes with --sampler grid".into());
        }
        let per_volume = self.patches_per_volume.map(|n| n.to_string());
        let window = self.patch_window.map(|n| n.to_string());
        let pairs: Vec<(String, String)> = [
            ("balance", &self.balance),
            ("class_weights", &self.class_weights),
            ("weight_column", &self.weight_column),
            ("epoch_size", &epoch_size),
            ("subsample", &subsample),
            ("subset_by", &self.subset_by),
            ("split", &self.split),
            ("splits", &self.splits),
            ("split_salt", &self.split_salt),
            ("patch", &self.patch),
            ("patches_per_volume", &per_volume),
            ("label_field", &self.label_field),
            ("label_probabilities", &self.label_probabilities),
            ("pad", &self.pad),
            ("patch_window", &window),
            ("sampler", &self.sampler.clone().filter(|s| s != "random")),
            ("overlap", &self.overlap),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect();
        voxlake_plan::sample::Sampling::from_options(&pairs)
            .map_err(|e| format!("--{}: {}", e.option().replace('_', "-"), e.message()))
    }
}

/// Tools for the pages `voxlake bench --report` writes.
#[derive(clap::Args)]
pub(super) struct ReportArgs {
    #[command(subcommand)]
    pub(super) command: ReportCommand,
}

/// What `voxlake report` does.
#[derive(clap::Subcommand)]
pub(super) enum ReportCommand {
    /// Line up the ranks' pages of one run (every `.html` of DIR that `voxlake bench --report`
    /// wrote) in one page, and flag a straggler: a rank whose exposed wait (the loop's wait
    /// inside next()) is more than twice the median and more than 1 % of its run.
    Merge(MergeArgs),
}

/// `voxlake report merge`'s arguments.
#[derive(clap::Args)]
pub(super) struct MergeArgs {
    /// The folder of the ranks' pages.
    pub(super) dir: PathBuf,
    /// The merged page (default: DIR/merged.html).
    #[arg(long, short)]
    pub(super) out: Option<PathBuf>,
    /// Print what the merge found as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
}
