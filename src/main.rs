//! `voxlake`: tools around the loader. `voxlake bench TABLE` measures it.
// serde_json's `json!` recurses once per field of the report.
#![recursion_limit = "256"]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use voxlake::compact::cli;
use voxlake::{Loader, LoaderState, Tensors, Uneven};

#[derive(Parser)]
#[command(
    name = "voxlake",
    version,
    about = "Stream a voxlake Delta table into training loops"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the loader over TABLE, touch every value of every batch, and report throughput.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Table: a local path or a URL.
    table: String,
    /// Samples per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Shuffle files, row groups and rows.
    #[arg(long)]
    shuffle: bool,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Shuffle buffer in rows.
    #[arg(long, default_value_t = voxlake::loader::DEFAULT_SHUFFLE_BUFFER)]
    shuffle_buffer: usize,
    /// This process's rank.
    #[arg(long, default_value_t = 0)]
    rank: usize,
    /// Number of ranks.
    #[arg(long, default_value_t = 1)]
    world_size: usize,
    /// Take the rank and world size from the launcher's variables (torchrun's RANK and
    /// WORLD_SIZE, Open MPI's, MPICH's PMI_RANK and PMI_SIZE, a Slurm step's).
    #[arg(long, conflicts_with_all = ["rank", "world_size"])]
    rank_from_env: bool,
    /// Node affinity: this process runs on node K of N (`K/N`, ranks numbered in blocks per
    /// node), or `env` for the launcher's variables (torchrun's GROUP_RANK and
    /// LOCAL_WORLD_SIZE, …): each node's ranks read the same files every epoch, so a node's
    /// cache holds what its next epoch reads (with --shuffle).
    #[arg(long, value_name = "K/N|env")]
    node: Option<String>,
    /// The job this process is a rank of: the latest version is resolved once for the job, in
    /// `_voxlake/jobs/JOB.json` beside the table (default with --rank-from-env: VOXLAKE_JOB_ID,
    /// TORCHELASTIC_RUN_ID or SLURM_JOB_ID).
    #[arg(long)]
    job: Option<String>,
    /// Memory budget in MiB.
    #[arg(long, default_value_t = 1024)]
    memory_budget_mb: u64,
    /// Row groups fetched and decoded at once (default: sized to the store as it runs).
    #[arg(long)]
    row_group_prefetch: Option<usize>,
    /// Read a remote table through a disk cache in this folder, shared by every process of
    /// the node that uses it (default: VOXLAKE_CACHE_DIR, if set).
    #[arg(long)]
    cache_dir: Option<std::path::PathBuf>,
    /// The cache's cap in MiB (default: half the free space of its filesystem).
    #[arg(long, requires = "cache_dir")]
    cache_max_mb: Option<u64>,
    /// Read without the disk cache, whatever VOXLAKE_CACHE_DIR says.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
    /// Batches assembled ahead of the training loop (default: the loader's, 2; at least 1).
    #[arg(long)]
    prefetch: Option<usize>,
    /// Threads that copy each batch's samples at once (default: a quarter of the cores, 1 to 4).
    #[arg(long)]
    assembly_threads: Option<usize>,
    /// Drop batches instead of giving their memory back to the loader (`Loader::recycle`).
    #[arg(long)]
    no_recycle: bool,
    /// Do not read the batches' values (the loader alone, without its consumer's work: what
    /// `benches/compare` sets the Python package against; the checksums are then 0).
    #[arg(long)]
    no_touch: bool,
    /// Move the channel axis first.
    #[arg(long)]
    channels_first: bool,
    /// Drop each epoch's short last batch.
    #[arg(long)]
    drop_last: bool,
    /// Skip the row checksum verification.
    #[arg(long)]
    no_verify: bool,
    /// Rows that do not divide evenly over the ranks: `pad` (repeat a few) or `drop`.
    #[arg(long, default_value = "pad")]
    uneven: Uneven,
    /// Stop after this many batches (a simulated preemption: see --state-out).
    #[arg(long)]
    stop_after: Option<u64>,
    /// Write the loader's state after the last batch delivered (JSON), to resume from.
    #[arg(long)]
    state_out: Option<PathBuf>,
    /// Start from a state written by --state-out (--rank and --world-size may differ).
    #[arg(long)]
    resume: Option<PathBuf>,
    #[command(flatten)]
    version: cli::VersionArgs,
    #[command(flatten)]
    storage: cli::StorageArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the delivered ids, in order, one per line.
    #[arg(long)]
    ids_out: Option<PathBuf>,
    #[command(flatten)]
    sample: cli::SampleArgs,
    /// Only the rows this SQL expression keeps, e.g. "label = 1 AND region IN ('a', 'b')".
    #[arg(long)]
    filter: Option<String>,
    /// Hand out libtorch tensors on this device (`cpu`, `cuda`, `cuda:N`; feature `tch`).
    #[cfg(feature = "tch")]
    #[arg(long)]
    device: Option<String>,
}

/// Peak resident set size of this process (Linux: VmHWM), in bytes.
/// User and system CPU time of this process so far, in seconds (all its threads).
fn cpu_seconds() -> Option<(f64, f64)> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which is valid and
    // large enough; it is read only when the call succeeded.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((secs(usage.ru_utime), secs(usage.ru_stime)))
}

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads every value, so nothing can be skipped; returns a checksum.
fn touch(tensors: &Tensors) -> f64 {
    match tensors {
        // CPU float tensors: the same summing loop as the ndarray path, for a fair comparison.
        #[cfg(feature = "tch")]
        Tensors::Tch(t)
            if t.0.device() == voxlake::loader::tch::Device::Cpu
                && t.0.kind() == voxlake::loader::tch::Kind::Float =>
        {
            // SAFETY: the bytes of a float tensor are f32 values; align_to leaves out nothing
            // here (asserted), as tensor memory is aligned.
            let bytes = tensors.as_bytes().unwrap_or_default();
            let (head, floats, tail) = unsafe { bytes.align_to::<f32>() };
            assert!(
                head.is_empty() && tail.is_empty(),
                "tensor memory is aligned"
            );
            sum_f32(floats)
        }
        #[cfg(feature = "tch")]
        Tensors::Tch(t) => {
            t.0.sum(voxlake::loader::tch::Kind::Double)
                .double_value(&[])
        }
        Tensors::F32(a) => sum_f32(a.as_slice().expect("batches are contiguous")),
        Tensors::F64(a) => a.iter().sum(),
        // Integer, bool and half-precision tensors: the sum of their bytes, added as integers
        // (exact, and it vectorizes: a float sum a byte at a time was a sixth of a u8 run).
        other => other
            .as_bytes()
            .unwrap_or_default()
            .iter()
            .map(|&b| u64::from(b))
            .sum::<u64>() as f64,
    }
}

/// Sums in eight lanes so the compiler vectorizes it (like numpy's pairwise sum).
fn sum_f32(values: &[f32]) -> f64 {
    let mut lanes = [0f32; 8];
    let chunks = values.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + f64::from(tail)
}

/// The signal that asked `bench` to stop (SIGINT or SIGTERM), 0 while none did.
static STOPPED_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    // Async-signal-safe: one atomic store; the loop checks it between batches.
    STOPPED_BY.store(signal, std::sync::atomic::Ordering::SeqCst);
}

/// SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop) end the run after the batch in hand: the
/// state and the ids delivered are written as at the end of a run.
fn stop_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_stop_signal as *const () as libc::sighandler_t);
        }
    }
}

fn bench(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    // From the start: a stop while the table opens ends the run before its first batch, with
    // its (empty) ids and state written.
    stop_on_signals();
    let start = Instant::now();
    let mut builder = Loader::builder(args.table.clone())
        .with_storage_options(args.storage.options()?)
        .with_batch_size(args.batch_size)
        .with_epochs(args.epochs)
        .with_rank(args.rank, args.world_size)
        .with_memory_budget(args.memory_budget_mb << 20)
        .with_channels_first(args.channels_first)
        .with_drop_last(args.drop_last)
        .with_uneven(args.uneven)
        .with_verify_checksums(!args.no_verify);
    if args.shuffle {
        builder = builder.with_shuffle(args.seed, args.shuffle_buffer);
    }
    if let Some(n) = args.row_group_prefetch {
        builder = builder.with_row_group_prefetch(n);
    }
    if let Some(dir) = &args.cache_dir {
        let max = match args.cache_max_mb {
            Some(mb) => mb << 20,
            None => voxlake::stream::cache::DiskCache::default_max_bytes(dir)?,
        };
        builder = builder.with_cache(dir, max);
    }
    if args.no_cache {
        builder = builder.with_cache_choice(voxlake::stream::cache::CacheChoice::Off);
    }
    if args.rank_from_env {
        builder = builder.with_rank_from_env();
    }
    if let Some(job) = &args.job {
        builder = builder.with_job(job);
    }
    match args.node.as_deref() {
        None => {}
        Some("env") => builder = builder.with_node_affinity_from_env(),
        Some(k_of_n) => {
            let parsed = k_of_n
                .split_once('/')
                .and_then(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)));
            let Some((node, nodes)) = parsed else {
                return Err(
                    format!("--node {k_of_n:?}: give K/N (node K of N, from 0) or env").into(),
                );
            };
            builder = builder.with_node_affinity(node, nodes);
        }
    }
    if let Some(n) = args.prefetch {
        builder = builder.with_prefetch(n);
    }
    if let Some(n) = args.assembly_threads {
        builder = builder.with_assembly_threads(n);
    }
    builder = builder.with_as_of(args.version.as_of()?);
    builder = builder.with_sample_columns(args.sample.hints());
    if let Some(filter) = &args.filter {
        builder = builder.with_filter(filter);
    }
    if let Some(path) = &args.resume {
        let json = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the state {}: {e}", path.display()))?;
        builder = builder.with_state(LoaderState::from_json(&json)?);
    }
    #[cfg(feature = "tch")]
    if let Some(device) = &args.device {
        use voxlake::loader::tch::Device;
        let device = match device.as_str() {
            "cpu" => Device::Cpu,
            "cuda" => Device::Cuda(0),
            other => match other.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
                Some(n) => Device::Cuda(n),
                None => return Err(format!("unknown device '{other}' (cpu, cuda, cuda:N)").into()),
            },
        };
        builder = builder.with_device(device);
    }
    let loader = builder.build()?;
    let mut ids_out = match &args.ids_out {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    let mut checksum = 0.0;
    // Per field: the sum of its values (text: the count of non-empty strings).
    let mut field_sums: Vec<(String, f64)> = Vec::new();
    let mut first_batch_s = None;
    let mut loader = loader;
    let mut delivered = 0u64;
    let stopped = || STOPPED_BY.load(std::sync::atomic::Ordering::SeqCst) != 0;
    while args.stop_after.is_none_or(|n| delivered < n) && !stopped() {
        let Some(batch) = loader.next() else { break };
        let batch = batch?;
        delivered += 1;
        first_batch_s.get_or_insert_with(|| start.elapsed().as_secs_f64());
        for (i, (name, field)) in batch.fields().into_iter().enumerate() {
            let sum = match field {
                _ if args.no_touch => 0.0,
                voxlake::loader::FieldRef::Tensors(t) => touch(t),
                voxlake::loader::FieldRef::Text(t) => {
                    t.iter().filter(|s| !s.is_empty()).count() as f64
                }
            };
            if i == 0 {
                checksum += sum;
            }
            match field_sums.iter_mut().find(|(n, _)| n == name) {
                Some((_, total)) => *total += sum,
                None => field_sums.push((name.to_string(), sum)),
            }
        }
        if let Some(out) = &mut ids_out {
            for id in &batch.ids {
                writeln!(out, "{id}")?;
            }
        }
        if !args.no_recycle {
            loader.recycle(batch);
        }
    }
    if let Some(mut out) = ids_out {
        out.flush()?;
    }
    let state = loader.state();
    if let Some(path) = &args.state_out {
        std::fs::write(path, state.to_json())
            .map_err(|e| format!("writing the state {}: {e}", path.display()))?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let (cpu_user_s, cpu_system_s) = cpu_seconds().unwrap_or((0.0, 0.0));
    let stats = loader.stats();
    let samples = stats.samples;
    let mb = stats.tensor_bytes as f64 / 1e6;
    let filtered = loader.filter_stats().unwrap_or_default();
    let fields: serde_json::Map<String, serde_json::Value> = loader
        .sample()
        .fields()
        .iter()
        .map(|f| {
            let sum = field_sums
                .iter()
                .find(|(n, _)| *n == f.name)
                .map_or(0.0, |(_, s)| *s);
            let kind = match &f.kind {
                voxlake::format::FieldKind::Tensor(spec) => serde_json::json!({
                    "checksum": sum,
                    "shape": spec.shape(),
                    "dtype": spec.dtype().name(),
                }),
                _ => serde_json::json!({"checksum": sum, "dtype": "text"}),
            };
            (f.name.clone(), kind)
        })
        .collect();
    let signal = STOPPED_BY.load(std::sync::atomic::Ordering::SeqCst);
    let report = serde_json::json!({
        "stopped_by_signal": (signal != 0).then_some(signal),
        "table": voxlake::stream::redact(&args.table),
        "version": loader.version(),
        "samples": samples,
        "batches": stats.batches,
        "epochs": args.epochs,
        "seconds": seconds,
        "cpu_user_s": cpu_user_s,
        "cpu_system_s": cpu_system_s,
        "cpu_cores": (cpu_user_s + cpu_system_s) / seconds,
        "samples_per_s": samples as f64 / seconds,
        "mb_per_s": mb / seconds,
        "first_batch_s": first_batch_s.unwrap_or(0.0),
        "peak_rss_bytes": peak_rss_bytes(),
        "memory_budget_bytes": args.memory_budget_mb << 20,
        "shuffle": args.shuffle,
        "consumer_wait_s": stats.consumer_wait.as_secs_f64(),
        "assemble_s": stats.assemble.as_secs_f64(),
        "producer_wait_s": stats.producer_wait.as_secs_f64(),
        "fetch_s": stats.stream.fetch.as_secs_f64(),
        "decode_s": stats.stream.decode.as_secs_f64(),
        "budget_wait_s": stats.stream.budget_wait.as_secs_f64(),
        "reads_in_flight": stats.stream.in_flight,
        "read_latency_s": stats.stream.read_latency.as_secs_f64(),
        "input_bound_fraction": loader.stall_meter().input_bound_fraction(),
        "bytes_fetched": stats.stream.bytes,
        "store_bytes_fetched": stats.stream.store_bytes,
        "store_reads_reasked": stats.stream.reasked,
        "cache_hits": stats.stream.cache.hits,
        "cache_misses": stats.stream.cache.misses,
        "cache_log_hits": stats.stream.cache.log_hits,
        "cache_log_misses": stats.stream.cache.log_misses,
        "cache_bytes_read": stats.stream.cache.bytes_read,
        "cache_corrupt": stats.stream.cache.corrupt,
        "row_groups": stats.stream.row_groups,
        "recycled_batches": stats.recycled,
        "staging_waits": stats.staging_waits,
        "loosened_rows": stats.loosened_rows,
        "iterations_per_epoch": loader.iterations_per_epoch(),
        "rank": loader.rank().0,
        "world_size": loader.rank().1,
        "next_epoch": state.epoch,
        "next_batch_in_segment": state.batches,
        "checksum": checksum,
        "fields": fields,
        "filter": args.filter,
        "filter_files_skipped": filtered.files_skipped,
        "filter_row_groups_skipped": filtered.row_groups_skipped,
        "filter_rows_decided": filtered.rows_decided,
        "filter_rows_selected": filtered.rows_selected,
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "{samples} samples in {seconds:.2} s: {:.0} samples/s, {:.0} MB/s of tensors; CPU {cpu_user_s:.2} s user + {cpu_system_s:.2} s system ({:.1} cores); first batch after {:.3} s; peak RSS {:.0} MB (budget {} MiB)",
            samples as f64 / seconds,
            mb / seconds,
            (cpu_user_s + cpu_system_s) / seconds,
            first_batch_s.unwrap_or(0.0),
            peak_rss_bytes().unwrap_or(0) as f64 / 1e6,
            args.memory_budget_mb,
        );
        println!(
            "stages (summed over threads): fetch {:.2} s, decode {:.2} s, assemble {:.2} s; waits: assembler on stream {:.2} s, consumer on loader {:.2} s, budget {:.2} s",
            stats.stream.fetch.as_secs_f64(),
            stats.stream.decode.as_secs_f64(),
            stats.assemble.as_secs_f64(),
            stats.producer_wait.as_secs_f64(),
            stats.consumer_wait.as_secs_f64(),
            stats.stream.budget_wait.as_secs_f64(),
        );
        if let Some(f) = loader.filter_stats() {
            println!(
                "filter: {} of {} rows kept; {} files and {} row groups skipped unread, {} rows decided one by one",
                f.rows_selected,
                f.rows_before,
                f.files_skipped,
                f.row_groups_skipped,
                f.rows_decided
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    cli::init_tracing();
    let result = match Cli::parse().command {
        Command::Bench(args) => bench(args),
    };
    match result {
        // Stopped by a signal, with its state and ids written: the shell's 128 + signal.
        Ok(()) => match STOPPED_BY.load(std::sync::atomic::Ordering::SeqCst) {
            0 => ExitCode::SUCCESS,
            signal => {
                eprintln!(
                    "stopped by signal {signal}: the state and ids of every batch delivered are written"
                );
                ExitCode::from(128 + signal as u8)
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
