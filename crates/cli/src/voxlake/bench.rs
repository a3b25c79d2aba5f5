//! `voxlake bench`: the loader run over a table, every value touched, its throughput reported.

use std::io::Write;
use std::time::Instant;

use voxlake_loader::{Loader, LoaderState, Tensors};

use super::args::BenchArgs;
use super::report;
use super::series::{Point, Series};

/// A failed run: the table, the store, the arguments or the report's output.
pub(super) type Error = Box<dyn std::error::Error>;

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

/// The signal that stopped the run, if one did.
pub(super) fn stopped_by() -> Option<i32> {
    match STOPPED_BY.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// How often a wait (the table's open, a batch) looks for a stop signal.
const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// `builder` built on a thread of its own, so that a stop signal ends the wait at once: an
/// open against a store that never answers would otherwise hold it for the store's timeouts
/// (the thread is left behind; the process is ending).
fn build_unless_stopped(builder: voxlake_loader::LoaderBuilder) -> Result<Loader, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("voxlake-open".into())
        .spawn(move || {
            let _sent = tx.send(builder.build());
        })?;
    loop {
        match rx.recv_timeout(STOP_CHECK) {
            Ok(built) => return Ok(built?),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(signal) = stopped_by() {
                    return Err(format!(
                        "stopped by signal {signal} while the table opened: no batch was delivered"
                    )
                    .into());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the thread that opened the table stopped without an answer".into());
            }
        }
    }
}

/// The loader `args` describe: its table (or a mixture of tables), settings and sampling.
fn builder(args: &BenchArgs) -> Result<voxlake_loader::LoaderBuilder, Error> {
    let builder = match args.sampling.sources(&args.tables)? {
        None => Loader::builder(args.tables[0].clone()),
        Some(sources) => Loader::mixture(sources),
    };
    let mut builder = builder
        .with_storage_options(args.storage.clone().options()?)
        .with_batch_size(args.batch_size)
        .with_epochs(args.epochs)
        .with_rank(args.rank, args.world_size)
        .with_memory_budget(args.memory_budget_mb << 20)
        .with_channels_first(args.channels_first)
        .with_drop_last(args.drop_last)
        .with_uneven(args.uneven)
        .with_verify_checksums(!args.no_verify)
        .with_keep_row_groups(!args.no_keep);
    if args.shuffle {
        builder = builder.with_shuffle(args.seed, args.shuffle_buffer);
    }
    if let Some(n) = args.row_group_prefetch {
        builder = builder.with_row_group_prefetch(n);
    }
    if let Some(dir) = &args.cache_dir {
        let max = match args.cache_max_mb {
            Some(mb) => mb << 20,
            None => voxlake_io::cache::DiskCache::default_max_bytes(dir)?,
        };
        builder = builder.with_cache(dir, max);
    }
    if args.no_cache {
        builder = builder.with_cache_choice(voxlake_io::cache::CacheChoice::Off);
    }
    if args.rank_from_env {
        builder = builder.with_rank_from_env();
    }
    if let Some(job) = &args.job {
        builder = builder.with_job(job.as_str());
    }
    if let Some(dir) = &args.job_dir {
        builder = builder.with_job_dir(dir);
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
    if let Some(path) = &args.trace {
        builder = builder
            .with_trace(path)
            .with_trace_batches(args.trace_batches);
    }
    if let Some(n) = args.assembly_threads {
        builder = builder.with_assembly_threads(n);
    }
    builder = builder.with_as_of(args.version.as_of()?);
    builder = builder.with_sample_columns(args.sample.clone().hints());
    if let Some(filter) = &args.filter {
        builder = builder.with_filter(filter);
    }
    builder = builder.with_sampling(args.sampling.spec()?);
    if let Some(path) = &args.resume {
        let json = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the state {}: {e}", path.display()))?;
        builder = builder.with_state(LoaderState::from_json(&json)?);
    }
    #[cfg(feature = "tch")]
    if let Some(device) = &args.device {
        use voxlake_loader::tch::Device;
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
    Ok(builder)
}

/// Runs the loader as `args` say until it ends, `--stop-after` or a stop signal; writes the ids
/// and state asked for, then the report to `out`.
pub(super) fn run(args: &BenchArgs, out: &mut impl Write) -> Result<(), Error> {
    // From the start: a stop while the table opens ends the run before its first batch, with
    // its (empty) ids and state written.
    stop_on_signals();
    let start = Instant::now();
    let loader = build_unless_stopped(builder(args)?)?;
    // A page that cannot be written fails now, not after the run.
    if let Some(path) = report::page_path(args, &loader) {
        std::fs::File::create(&path).map_err(|e| format!("the report {}: {e}", path.display()))?;
    }
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
    let mut series = Series::default();
    series.push(Instant::now(), Point::of(&loader, start));
    while args.stop_after.is_none_or(|n| delivered < n) && stopped_by().is_none() {
        // A batch that does not come (a store that stops answering) does not keep a stop
        // waiting: the run ends with what was delivered.
        let batch = match loader.poll_next(STOP_CHECK) {
            std::task::Poll::Pending => continue,
            std::task::Poll::Ready(None) => break,
            std::task::Poll::Ready(Some(batch)) => batch?,
        };
        delivered += 1;
        first_batch_s.get_or_insert_with(|| start.elapsed().as_secs_f64());
        for (i, (name, field)) in batch.fields().into_iter().enumerate() {
            let sum = match field {
                _ if args.no_touch => 0.0,
                voxlake_loader::FieldRef::Tensors(t) => touch(t),
                voxlake_loader::FieldRef::Text(t) => {
                    t.iter().filter(|s| !s.is_empty()).count() as f64
                }
                _ => {
                    return Err(
                        format!("field {name} is of a kind this bench does not read").into(),
                    );
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
        let now = Instant::now();
        if series.due(now) {
            series.push(now, Point::of(&loader, start));
        }
    }
    series.finish(Instant::now(), Point::of(&loader, start));
    if let Some(mut out) = ids_out {
        out.flush()?;
    }
    let state = loader.state();
    if let Some(path) = &args.state_out {
        std::fs::write(path, state.to_json())
            .map_err(|e| format!("writing the state {}: {e}", path.display()))?;
    }
    let run = report::Run {
        start,
        checksum,
        field_sums,
        first_batch_s,
        stopped_by: stopped_by(),
        state,
        series,
    };
    report::write(out, args, &loader, &run)
}

/// Reads every value, so nothing can be skipped; returns a checksum.
fn touch(tensors: &Tensors) -> f64 {
    match tensors {
        // CPU float tensors: the same summing loop as the ndarray path, for a fair comparison.
        #[cfg(feature = "tch")]
        Tensors::Tch(t)
            if t.0.device() == voxlake_loader::tch::Device::Cpu
                && t.0.kind() == voxlake_loader::tch::Kind::Float =>
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
        Tensors::Tch(t) => t.0.sum(voxlake_loader::tch::Kind::Double).double_value(&[]),
        Tensors::F32(a) => match a.as_slice() {
            Some(values) => sum_f32(values),
            None => a.iter().map(|&v| f64::from(v)).sum(),
        },
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
