//! A Rust training loop on tch that learns the synthetic demo table: a small 3D CNN (Conv3d
//! blocks with batch norm and residual connections, global pooling, a linear head) trained
//! with Adam; a validation split chosen by id hash; loss and accuracy per epoch; and the stall
//! meter's forecast of the whole run, made after the first steps, beside the measured total.
//!
//! cargo run --release --features tch --example train -- --table demo-data/table --epochs 5
//! (libtorch from the PyPI torch wheel: see the README.)

use std::time::Instant;

use clap::Parser;
use voxlake::Loader;
use voxlake::loader::Tensors;
use voxlake::loader::tch::nn::{self, ModuleT, OptimizerConfig};
use voxlake::loader::tch::{self, Device, Kind, Tensor};

#[derive(Parser)]
struct Args {
    /// The table (local path or URL).
    #[arg(long)]
    table: String,
    /// Epochs.
    #[arg(long, default_value_t = 5)]
    epochs: u64,
    /// Batch size.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Steps of the first epoch after which the run is forecast.
    #[arg(long, default_value_t = 20)]
    forecast_after: u64,
    /// Price per hour of the machine, for the cost forecast.
    #[arg(long)]
    price_per_hour: Option<f64>,
}

/// Conv3d → batch norm → ReLU, twice, with a residual connection.
fn block(p: nn::Path, c: i64) -> impl ModuleT {
    let conv = |p: nn::Path| {
        nn::conv3d(
            p,
            c,
            c,
            3,
            nn::ConvConfig {
                padding: 1,
                bias: false,
                ..Default::default()
            },
        )
    };
    let (c1, b1) = (
        conv(&p / "c1"),
        nn::batch_norm3d(&p / "b1", c, Default::default()),
    );
    let (c2, b2) = (
        conv(&p / "c2"),
        nn::batch_norm3d(&p / "b2", c, Default::default()),
    );
    nn::func_t(move |x, train| {
        let y = x
            .apply(&c1)
            .apply_t(&b1, train)
            .relu()
            .apply(&c2)
            .apply_t(&b2, train);
        (y + x).relu()
    })
}

fn model(p: &nn::Path, channels: i64) -> impl ModuleT {
    let width = 16;
    let stem = nn::conv3d(
        p / "stem",
        channels,
        width,
        3,
        nn::ConvConfig {
            padding: 1,
            stride: 2,
            ..Default::default()
        },
    );
    let bn = nn::batch_norm3d(p / "bn", width, Default::default());
    let (r1, r2) = (block(p / "r1", width), block(p / "r2", width));
    let head = nn::linear(p / "head", 2 * width, 2, Default::default());
    nn::func_t(move |x, train| {
        let h = x
            .apply(&stem)
            .apply_t(&bn, train)
            .relu()
            .apply_t(&r1, train)
            .apply_t(&r2, train);
        // Global max and mean pooling: a local anomaly shows in the max.
        let pooled = Tensor::cat(
            &[
                h.amax([2, 3, 4].as_slice(), false),
                h.mean_dim([2, 3, 4].as_slice(), false, Kind::Float),
            ],
            1,
        );
        pooled.apply(&head)
    })
}

/// Validation membership by id hash (FNV-1a): the same split on every run.
fn is_validation(id: &str) -> bool {
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h % 5 == 0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    voxlake_cli::init_tracing();
    let args = Args::parse();
    tch::set_num_threads(2);
    tch::manual_seed(0);
    let device = Device::cuda_if_available();
    let start = Instant::now();
    let mut loader = Loader::builder(args.table.clone())
        .with_batch_size(args.batch_size)
        .with_epochs(args.epochs)
        .with_shuffle(7, 512)
        .with_channels_first(true)
        .with_device(device)
        .build()?;
    let iterations = loader.iterations_per_epoch();
    let channels = *loader.spec().shape().last().ok_or("scalar tensors")? as i64;
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let net = model(&root, channels);
    let mut opt = nn::Adam::default().build(&vs, args.lr)?;

    let mut forecast = None;
    let mut step_in_epoch = 0u64;
    let mut epoch = 0;
    let (mut loss_sum, mut loss_n) = (0.0, 0usize);
    let mut val: Vec<(Tensor, Tensor)> = Vec::new();
    let finish_epoch =
        |epoch: u64, loss: f64, val: &mut Vec<(Tensor, Tensor)>, net: &dyn ModuleT| {
            let (mut correct, mut total) = (0i64, 0i64);
            tch::no_grad(|| {
                for (x, y) in val.iter() {
                    let pred = net.forward_t(x, false).argmax(1, false);
                    correct += pred.eq_tensor(y).sum(Kind::Int64).int64_value(&[]);
                    total += y.size()[0];
                }
            });
            println!(
                "epoch={epoch} loss={loss:.4} val_acc={:.3} val_n={total} elapsed_s={:.1}",
                correct as f64 / total.max(1) as f64,
                start.elapsed().as_secs_f64()
            );
            val.clear();
        };
    while let Some(batch) = loader.next() {
        let batch = batch?;
        if batch.epoch != epoch {
            finish_epoch(epoch, loss_sum / loss_n.max(1) as f64, &mut val, &net);
            (epoch, step_in_epoch, loss_sum, loss_n) = (batch.epoch, 0, 0.0, 0);
        }
        let Tensors::Tch(x) = &batch.tensors else {
            unreachable!("with_device gives tch tensors")
        };
        let y = batch.label_tensor(device).ok_or("a row without a label")?;
        let mask: Vec<bool> = batch.ids.iter().map(|id| is_validation(id)).collect();
        let val_idx: Vec<i64> = (0..mask.len() as i64)
            .filter(|&i| mask[i as usize])
            .collect();
        let train_idx: Vec<i64> = (0..mask.len() as i64)
            .filter(|&i| !mask[i as usize])
            .collect();
        let select =
            |t: &Tensor, idx: &[i64]| t.index_select(0, &Tensor::from_slice(idx).to_device(device));
        if !val_idx.is_empty() {
            val.push((select(&x.0, &val_idx), select(&y, &val_idx)));
        }
        if train_idx.len() > 1 {
            let logits = net.forward_t(&select(&x.0, &train_idx), true);
            let loss = logits.cross_entropy_for_logits(&select(&y, &train_idx));
            opt.backward_step(&loss);
            loss_sum += loss.double_value(&[]);
            loss_n += 1;
        }
        step_in_epoch += 1;
        if epoch == 0 && step_in_epoch == args.forecast_after && forecast.is_none() {
            // Validation is a forward pass over a fifth of the samples: ~1/3 of a training
            // step's cost for a quarter as many samples.
            let meter = loader.stall_meter();
            if let Some(it) = meter.steady_iteration() {
                let val_time = it.mul_f64(0.2 / 0.8 / 3.0 * iterations as f64);
                let f = loader.forecast(iterations, args.epochs, val_time, args.price_per_hour);
                if let Some(f) = f {
                    println!(
                        "forecast after {} steps: input_bound={:.0}% samples_per_s={:.0} epoch_s={:.1} total_s={:.1}{}",
                        step_in_epoch,
                        100.0 * meter.input_bound_fraction(),
                        meter.samples_per_s(args.batch_size),
                        f.epoch.as_secs_f64(),
                        f.total.as_secs_f64(),
                        f.cost.map(|c| format!(" cost={c:.4}")).unwrap_or_default()
                    );
                    forecast = Some(f);
                }
            }
        }
    }
    finish_epoch(epoch, loss_sum / loss_n.max(1) as f64, &mut val, &net);
    let measured = start.elapsed();
    match forecast {
        Some(f) => println!(
            "forecast_s={:.1} measured_s={:.1} error={:+.1}%",
            f.total.as_secs_f64(),
            measured.as_secs_f64(),
            100.0 * (f.total.as_secs_f64() / measured.as_secs_f64() - 1.0)
        ),
        // An epoch shorter than --forecast-after steps: no forecast was made.
        None => println!(
            "measured_s={:.1} (no forecast: the first epoch had fewer than {} steps)",
            measured.as_secs_f64(),
            args.forecast_after
        ),
    }
    Ok(())
}
