//! 3D segmentation through the loader: a small fully convolutional net learns the voxel masks
//! of the synthetic cubes (`compact generate --with-mask`: each mask marks where a cube's
//! anomaly is), reading both fields of each sample, the cube channels first and its mask, with a
//! random flip applied to the volume and its mask together on the loader's threads. Held-out
//! samples (ids from `--train-count` on, kept apart with the loader's filter) give the Dice
//! score after every epoch.
//!
//! compact generate data --count 1200 --with-mask
//! compact convert data/fields data/table --fields x,mask
//! cargo run --release --features tch --example segment -- --table data/table --epochs 6
//! (libtorch from the PyPI torch wheel: see the README.)

use std::time::Instant;

use clap::Parser;
use voxlake::Loader;
use voxlake::loader::Tensors;
use voxlake::loader::tch::nn::{self, ModuleT, OptimizerConfig};
use voxlake::loader::tch::{self, Device, Kind, Tensor};
use voxlake::loader::transform::Rng;

#[derive(Parser)]
struct Args {
    /// The table of fields `x` (cubes) and `mask` (local path or URL).
    #[arg(long)]
    table: String,
    /// Samples trained on: ids below `cube_{train_count}`; the rest are held out.
    #[arg(long, default_value_t = 1000)]
    train_count: usize,
    /// Epochs.
    #[arg(long, default_value_t = 6)]
    epochs: u64,
    /// Batch size.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Exit with an error when the last held-out Dice is below this.
    #[arg(long)]
    min_dice: Option<f64>,
}

/// Conv3d (3×3×3, same size) → batch norm → ReLU.
fn conv(p: nn::Path, from: i64, to: i64, dilation: i64) -> impl ModuleT {
    let c = nn::conv3d(
        &p / "conv",
        from,
        to,
        3,
        nn::ConvConfig {
            padding: dilation,
            dilation,
            bias: false,
            ..Default::default()
        },
    );
    let b = nn::batch_norm3d(&p / "bn", to, Default::default());
    nn::func_t(move |x, train| x.apply(&c).apply_t(&b, train).relu())
}

/// A few convolutions (the last two dilated, to see the whole anomaly) and a 1×1×1 head: one
/// logit per voxel.
fn model(p: &nn::Path, channels: i64) -> impl ModuleT {
    let width = 16;
    let layers = [
        conv(p / "l1", channels, width, 1),
        conv(p / "l2", width, width, 1),
        conv(p / "l3", width, width, 2),
        conv(p / "l4", width, width, 2),
    ];
    let head = nn::conv3d(p / "head", width, 1, 1, Default::default());
    nn::func_t(move |x, train| {
        let mut y = x.shallow_clone();
        for l in &layers {
            y = y.apply_t(l, train);
        }
        y.apply(&head)
    })
}

/// The batch's field as a float tensor on `device`, shape as handed out.
fn float(t: &Tensors, device: Device) -> Tensor {
    match t {
        Tensors::Tch(t) => t.0.to_device(device).to_kind(Kind::Float),
        _ => unreachable!("with_device gives tch tensors"),
    }
}

/// Intersection and the two sizes, for the Dice score over many batches.
fn dice_parts(logits: &Tensor, masks: &Tensor) -> (f64, f64, f64) {
    let predicted = logits.gt(0.0).to_kind(Kind::Float);
    let both = (&predicted * masks).sum(Kind::Double).double_value(&[]);
    (
        both,
        predicted.sum(Kind::Double).double_value(&[]),
        masks.sum(Kind::Double).double_value(&[]),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tch::manual_seed(7);
    let device = Device::Cpu;
    let split = format!("cube_{:06}.npy", args.train_count);
    // Both fields of every sample; the cube channels first ([B, 10, 30, 30, 10]), the mask as
    // stored ([B, 30, 30, 10]); a flip of a random horizontal axis, the same on both.
    let loader = |filter: String, shuffle: bool, epochs: u64| {
        let builder = Loader::builder(args.table.clone())
            .with_field("x")
            .with_field("mask")
            .with_filter(filter)
            .with_batch_size(args.batch_size)
            .with_epochs(epochs)
            .with_channels_first(true)
            .with_device(device);
        match shuffle {
            false => builder,
            true => builder.with_shuffle(11, 256).with_transform(|sample, rng| {
                if let Some(axis) = [None, Some(0), Some(1)][rng.random_range(0..3)] {
                    let flip = |t: &mut Tensors| match t {
                        Tensors::F32(a) => a.invert_axis(ndarray::Axis(axis)),
                        Tensors::U8(a) => a.invert_axis(ndarray::Axis(axis)),
                        _ => {}
                    };
                    flip(&mut sample.tensor);
                    flip(sample.field_mut("mask").ok_or("no mask field")?);
                }
                Ok(())
            }),
        }
    };
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let net = model(&root, 10);
    let mut opt = nn::Adam::default().build(&vs, args.lr)?;
    let start = Instant::now();
    let train = loader(format!("id < '{split}'"), true, args.epochs).build()?;
    println!(
        "training on {} ({}), held out: ids from {split}",
        args.table,
        train.sample()
    );
    let mut epoch = 0;
    let (mut loss_sum, mut steps) = (0.0, 0);
    let mut last_dice = 0.0;
    let evaluate =
        |epoch: u64, loss: f64, steps: usize| -> Result<f64, Box<dyn std::error::Error>> {
            let (mut both, mut predicted, mut truth) = (0.0, 0.0, 0.0);
            for batch in loader(format!("id >= '{split}'"), false, 1).build()? {
                let batch = batch?;
                let x = float(&batch.tensors, device);
                let masks = float(batch.field("mask").ok_or("no mask")?, device).unsqueeze(1);
                let logits = tch::no_grad(|| x.apply_t(&net, false));
                let (b, p, t) = dice_parts(&logits, &masks);
                (both, predicted, truth) = (both + b, predicted + p, truth + t);
            }
            let dice = 2.0 * both / (predicted + truth).max(1.0);
            println!(
                "epoch {epoch}: loss {:.4}, held-out Dice {dice:.3} ({:.0} s)",
                loss / steps.max(1) as f64,
                start.elapsed().as_secs_f64()
            );
            Ok(dice)
        };
    for batch in train {
        let batch = batch?;
        if batch.epoch != epoch {
            last_dice = evaluate(epoch, loss_sum, steps)?;
            (epoch, loss_sum, steps) = (batch.epoch, 0.0, 0);
        }
        let x = float(&batch.tensors, device);
        let masks = float(batch.field("mask").ok_or("no mask")?, device).unsqueeze(1);
        let logits = x.apply_t(&net, true);
        // Voxels of an anomaly are a few percent of a cube: weighted cross-entropy and a soft
        // Dice term, so the net does not settle on "nothing anywhere".
        let weight = Tensor::from(8.0f32).to_device(device);
        let bce = logits.binary_cross_entropy_with_logits(
            &masks,
            None::<&Tensor>,
            Some(&weight),
            tch::Reduction::Mean,
        );
        let p = logits.sigmoid();
        let soft = 1.0
            - (2.0 * (&p * &masks).sum(Kind::Float) + 1.0)
                / (p.sum(Kind::Float) + masks.sum(Kind::Float) + 1.0);
        let loss = bce + soft;
        opt.backward_step(&loss);
        loss_sum += loss.double_value(&[]);
        steps += 1;
    }
    last_dice = if steps > 0 {
        evaluate(epoch, loss_sum, steps)?
    } else {
        last_dice
    };
    if let Some(min) = args.min_dice
        && last_dice < min
    {
        return Err(format!("held-out Dice {last_dice:.3} is below {min}").into());
    }
    Ok(())
}
