//! Data-parallel training with ranks as OS processes: each rank reads its share of the table
//! (`with_rank_from_env`: the launcher's `RANK` and `WORLD_SIZE`, which this example's own
//! launcher sets as torchrun does; `mpirun` or `srun` work the same), computes gradients on its
//! batches, and the ranks average them every step
//! (an all-reduce), as DDP does. voxlake gives every rank the same number of batches, so no
//! rank waits for a step that never comes; `--stop-after` stops every rank after that many
//! steps and saves each one's loader state, and `--resume` (with the same or another
//! `--world-size`) goes on from there: every row of the epoch once.
//!
//! The all-reduce here goes through files in a shared folder (each rank writes its gradient,
//! reads everybody's and averages): enough to show the lockstep on one machine. A real job uses
//! its framework's collective (NCCL through PyTorch, or MPI); that is the user's part.
//!
//! cargo run --release --features tch --example ddp -- --table demo-data/table --world-size 2
//! (libtorch from the PyPI torch wheel: see the README.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use voxlake::loader::tch::nn::{self, Module, OptimizerConfig};
use voxlake::loader::tch::{self, Device, Kind, Tensor};
use voxlake::loader::{LoaderState, Tensors};
use voxlake::{Loader, Uneven};

#[derive(Parser, Clone)]
struct Args {
    /// The table (local path or URL).
    #[arg(long)]
    table: String,
    /// Ranks (processes).
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    /// This process's rank, with --world-size (leave it out to launch all ranks, or under a
    /// launcher that sets RANK and WORLD_SIZE).
    #[arg(long)]
    rank: Option<usize>,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Batch size per rank.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-2)]
    lr: f64,
    /// Stop every rank after this many steps and save the loader states (a preemption).
    #[arg(long)]
    stop_after: Option<u64>,
    /// Folder for the all-reduce files and the saved states.
    #[arg(long, default_value = "ddp-run")]
    dir: PathBuf,
    /// Resume from the states saved in --dir (any rank's will do: ranks step in lockstep).
    #[arg(long)]
    resume: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    match (args.rank, voxlake::plan::launch::from_env()?) {
        (Some(rank), _) => train(&args, Some(rank)),
        (None, Some(_)) => train(&args, None),
        (None, None) => launch(&args),
    }
}

/// Starts one process per rank, its rank in `RANK` and `WORLD_SIZE` as torchrun sets them, and
/// waits for all of them.
fn launch(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&args.dir)?;
    let me = std::env::current_exe()?;
    let passed: Vec<String> = std::env::args().skip(1).collect();
    let children: Vec<_> = (0..args.world_size)
        .map(|rank| {
            Command::new(&me)
                .args(&passed)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", args.world_size.to_string())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut failed = 0;
    for mut child in children {
        if !child.wait()?.success() {
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(format!("{failed} rank(s) failed").into());
    }
    Ok(())
}

/// Rank `rank` of `--world-size`, or the launcher's when `None`.
fn train(args: &Args, rank: Option<usize>) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Loader::builder(args.table.clone())
        .with_batch_size(args.batch_size)
        .with_epochs(args.epochs)
        .with_shuffle(7, 256)
        .with_uneven(Uneven::Pad)
        .with_drop_last(true)
        .with_device(Device::Cpu);
    builder = match rank {
        Some(rank) => builder.with_rank(rank, args.world_size),
        None => builder.with_rank_from_env(),
    };
    // Step numbers start at 0 in every run: each run has its own all-reduce folder, named by
    // where it starts (the same on every rank).
    let mut grads = args.dir.join("grads-start");
    if args.resume {
        let json = std::fs::read_to_string(args.dir.join("state-0.json"))?;
        let state = LoaderState::from_json(&json)?;
        grads = args.dir.join(format!(
            "grads-{}-{}-{}",
            state.epoch,
            state.closed.len(),
            state.batches
        ));
        builder = builder.with_state(state);
    }
    std::fs::create_dir_all(&grads)?;
    let mut loader = builder.build()?;
    let (rank, world) = loader.rank();

    // The same initial weights on every rank (as DDP broadcasts them): a fixed seed.
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let channels = *loader.spec().shape().last().unwrap_or(&1) as i64;
    let model = nn::seq()
        .add(nn::linear(
            vs.root() / "l1",
            channels,
            32,
            Default::default(),
        ))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs.root() / "l2", 32, 2, Default::default()));
    let mut opt = nn::Adam::default().build(&vs, args.lr)?;
    let dims: Vec<i64> = (1..loader.spec().shape().len() as i64).collect();

    let (mut step, mut correct, mut seen) = (0u64, 0i64, 0i64);
    while args.stop_after.is_none_or(|n| step < n) {
        let Some(batch) = loader.next() else { break };
        let batch = batch?;
        let Tensors::Tch(x) = &batch.tensors else {
            return Err("tch tensors expected".into());
        };
        let y = batch.label_tensor(Device::Cpu).ok_or("unlabelled rows")?;
        // Per-channel means of each cube: [B, C].
        let features = x.0.mean_dim(dims.as_slice(), false, Kind::Float);
        let logits = model.forward(&features);
        let loss = logits.cross_entropy_for_logits(&y);
        opt.zero_grad();
        loss.backward();
        all_reduce(&grads, &vs, rank, world, step)?;
        opt.step();
        correct += logits
            .argmax(-1, false)
            .eq_tensor(&y)
            .sum(Kind::Int64)
            .int64_value(&[]);
        seen += batch.len() as i64;
        step += 1;
    }
    std::fs::write(
        args.dir.join(format!("state-{rank}.json")),
        loader.state().to_json(),
    )?;
    println!(
        "rank {rank}/{world}: {step} steps, train accuracy {:.3}, next: epoch {} batch {}",
        correct as f64 / seen.max(1) as f64,
        loader.state().epoch,
        loader.state().batches
    );
    Ok(())
}

/// Averages the gradients over the ranks: each writes its own for `step`, then reads all.
fn all_reduce(
    dir: &Path,
    vs: &nn::VarStore,
    rank: usize,
    world: usize,
    step: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let vars = vs.trainable_variables();
    let mine: Vec<f32> = vars
        .iter()
        .map(|v| Vec::<f32>::try_from(v.grad().flatten(0, -1)))
        .collect::<Result<Vec<_>, _>>()?
        .concat();
    let file = |r: usize| dir.join(format!("step-{step}-rank-{r}.bin"));
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    // Write then rename: a reader never sees half a file.
    let tmp = dir.join(format!("step-{step}-rank-{rank}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file(rank))?;
    let mut sum = vec![0f32; mine.len()];
    let deadline = Instant::now() + Duration::from_secs(120);
    for r in 0..world {
        let data = loop {
            match std::fs::read(file(r)) {
                Ok(data) => break data,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                // A rank that has no step `step` would hang a real all-reduce: say so.
                Err(e) => return Err(format!("rank {r} never reached step {step}: {e}").into()),
            }
        };
        for (s, c) in sum.iter_mut().zip(data.chunks_exact(4)) {
            *s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
    let mut at = 0;
    tch::no_grad(|| {
        for v in &vars {
            let n = v.numel();
            let avg: Vec<f32> = sum[at..at + n].iter().map(|s| s / world as f32).collect();
            v.grad().copy_(&Tensor::from_slice(&avg).view_as(&v.grad()));
            at += n;
        }
    });
    // The previous step's files are read by everybody by now (this step needed all of them).
    if step > 0 {
        let _ = std::fs::remove_file(dir.join(format!("step-{}-rank-{rank}.bin", step - 1)));
    }
    Ok(())
}
