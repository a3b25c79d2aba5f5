//! Transforms on the loader's threads: values, reproducible generators (the same draws for a
//! row whatever the ranks, the order or a resume), errors and panics named by row or batch.

use std::collections::HashMap;

use half::f16;
use ndarray::Axis;
use voxlake::LoaderBuilder;
use voxlake::format::{DType, TensorSpec};
use voxlake::loader::transform::{Augment, Rng, Sample};
use voxlake::loader::{Loader, Tensors};

use crate::foreign::{expected, fixture};
use crate::loader::first_error;

const SHAPE: [usize; 4] = [3, 4, 2, 2];

/// Doubles each value, casts to f16, flips the first axis when the generator says so, and
/// adds 10 to the label.
fn augmented(builder: LoaderBuilder) -> LoaderBuilder {
    builder
        .with_id_column("sample")
        .with_label_column("target")
        .with_transform_to(
            TensorSpec::new(SHAPE.to_vec(), DType::F16),
            |s: &mut Sample<'_>, rng| {
                let x = s.tensor.as_f32().ok_or("f32 expected")?;
                let mut y = x.mapv(|v| f16::from_f32(v * 2.0));
                if rng.random_bool(0.5) {
                    y.invert_axis(Axis(0));
                }
                s.tensor = Tensors::F16(y);
                s.label = s.label.map(|l| l + 10);
                Ok(())
            },
        )
}

/// (epoch, id) → (label, f16 values) of every row delivered.
fn run(builder: LoaderBuilder) -> HashMap<(u64, String), (Option<i64>, Vec<f16>)> {
    std::thread::spawn(move || {
        let loader = builder.build().unwrap();
        assert_eq!(loader.spec().dtype(), DType::F16);
        let mut out = HashMap::new();
        for batch in loader {
            let batch = batch.unwrap();
            let Tensors::F16(t) = &batch.tensors else {
                panic!("f16 batches expected")
            };
            for (i, id) in batch.ids.iter().enumerate() {
                let values = t.index_axis(Axis(0), i).iter().copied().collect();
                let old = out.insert((batch.epoch, id.clone()), (batch.labels[i], values));
                assert!(old.is_none(), "{id} twice in epoch {}", batch.epoch);
            }
        }
        out
    })
    .join()
    .unwrap()
}

#[test]
fn sample_transforms_are_exact_and_reproducible_across_ranks() {
    let numpy = expected(DType::F32);
    let table = fixture("pyarrow_tensor");
    let base = || {
        augmented(Loader::builder(table.clone()))
            .with_batch_size(5)
            .with_epochs(2)
            .with_shuffle(11, 8)
    };
    let one = run(base());
    assert_eq!(one.len(), 48);
    let mut flips = HashMap::new();
    for ((epoch, id), (label, values)) in &one {
        let n: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
        assert_eq!(*label, Some(10 + n as i64 % 2));
        let x = ndarray::ArrayD::from_shape_vec(
            SHAPE.to_vec(),
            numpy[n]
                .chunks(4)
                .map(|b| f16::from_f32(2.0 * f32::from_le_bytes(b.try_into().unwrap())))
                .collect(),
        )
        .unwrap();
        let mut flipped = x.clone();
        flipped.invert_axis(Axis(0));
        let flip = if *values == x.iter().copied().collect::<Vec<_>>() {
            false
        } else {
            assert_eq!(*values, flipped.iter().copied().collect::<Vec<_>>(), "{id}");
            true
        };
        flips.insert((*epoch, id.clone()), flip);
    }
    let count = flips.values().filter(|&&f| f).count();
    assert!(
        count > 8 && count < 40,
        "the generator decides: {count} of 48 flipped"
    );
    assert!(
        (0..24).any(|n| {
            let id = format!("cube-{n:03}");
            flips[&(0, id.clone())] != flips[&(1, id)]
        }),
        "epochs draw anew"
    );
    // Over three ranks, with one assembly thread: the same draws for every row.
    let mut ranks = HashMap::new();
    for rank in 0..3 {
        ranks.extend(run(base().with_rank(rank, 3).with_assembly_threads(1)));
    }
    assert_eq!(ranks, one, "the draws follow (seed, epoch, id) only");
    // Resumed after 3 batches: the rest as in the uninterrupted run.
    let (first, state) = std::thread::spawn({
        let b = base();
        move || {
            let mut loader = b.build().unwrap();
            let first: Vec<_> = (0..3).map(|_| loader.next().unwrap().unwrap()).collect();
            (first.len(), loader.state())
        }
    })
    .join()
    .unwrap();
    assert_eq!(first, 3);
    let rest = run(base().with_state(state));
    assert!(!rest.is_empty());
    for (key, value) in &rest {
        assert_eq!(one.get(key), Some(value), "{key:?} after the resume");
    }
}

/// Transforms chosen by name (what Python's `transforms=` makes): values exact against numpy's,
/// the crop's random offset drawn per (seed, epoch, id), so three ranks and a resume mid-epoch
/// hand out the same values as one uninterrupted run.
#[test]
fn named_transforms_are_exact_and_reproduce_across_ranks_and_a_resume() {
    let numpy = expected(DType::F32);
    let table = fixture("pyarrow_tensor");
    let base = || {
        Loader::builder(table.clone())
            .with_id_column("sample")
            .with_label_column("target")
            .with_augment(vec![
                Augment::Flip {
                    axes: vec![0],
                    p: 1.0,
                },
                Augment::Normalize {
                    mean: 1.0,
                    std: 2.0,
                },
                Augment::Crop {
                    shape: vec![2, 4, 2, 2],
                },
                Augment::Cast(DType::F16),
            ])
            .with_batch_size(5)
            .with_epochs(2)
            .with_shuffle(11, 8)
    };
    let one = run(base());
    assert_eq!(one.len(), 48);
    let mut offsets = [0; 2];
    for ((_, id), (_, values)) in &one {
        let n: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
        let mut x = ndarray::ArrayD::from_shape_vec(
            SHAPE.to_vec(),
            numpy[n]
                .chunks(4)
                .map(|b| (f32::from_le_bytes(b.try_into().unwrap()) - 1.0) / 2.0)
                .collect(),
        )
        .unwrap();
        x.invert_axis(Axis(0));
        let window = |o: usize| -> Vec<f16> {
            x.slice_axis(Axis(0), ndarray::Slice::from(o..o + 2))
                .iter()
                .map(|&v| f16::from_f32(v))
                .collect()
        };
        let o = (0..2).find(|&o| *values == window(o));
        offsets
            [o.unwrap_or_else(|| panic!("{id}: not a window of the flipped, normalized cube"))] +=
            1;
    }
    assert!(
        offsets[0] > 4 && offsets[1] > 4,
        "the crop draws its offset: {offsets:?}"
    );
    let mut ranks = HashMap::new();
    for rank in 0..3 {
        ranks.extend(run(base().with_rank(rank, 3).with_assembly_threads(1)));
    }
    assert_eq!(ranks, one, "the draws follow (seed, epoch, id) only");
    let state = std::thread::spawn({
        let b = base();
        move || {
            let mut loader = b.build().unwrap();
            for _ in 0..3 {
                loader.next().unwrap().unwrap();
            }
            loader.state()
        }
    })
    .join()
    .unwrap();
    let rest = run(base().with_state(state));
    assert!(!rest.is_empty());
    for (key, value) in &rest {
        assert_eq!(one.get(key), Some(value), "{key:?} after the resume");
    }
    // With a closure too: refused at build, naming both.
    let both =
        augmented(Loader::builder(table.clone())).with_augment(vec![Augment::Cast(DType::F16)]);
    let e = std::thread::spawn(move || both.build().err().unwrap().to_string())
        .join()
        .unwrap();
    assert!(e.contains("transforms by name"), "{e}");
}

/// Flips, a normalization and a cast made by the copy into the batch (the CPU path) give
/// what the per-sample transform gives where the copy cannot make them (channels first; a
/// libtorch batch), value for value; and the flips are drawn (not all the same).
#[test]
fn named_transforms_made_by_the_copy_match_the_per_sample_path() {
    let base = || {
        Loader::builder(fixture("pyarrow_tensor"))
            .with_id_column("sample")
            .with_augment(vec![
                Augment::Flip {
                    axes: vec![0, 1, 2],
                    p: 0.5,
                },
                Augment::Normalize {
                    mean: 0.25,
                    std: 3.0,
                },
                Augment::Cast(DType::F16),
            ])
            .with_batch_size(6)
            .with_shuffle(3, 8)
    };
    let by_id = |builder: LoaderBuilder, channels_first: bool| {
        let mut out = HashMap::new();
        for b in crate::loader::collect(builder) {
            let Tensors::F16(t) = &b.tensors else {
                panic!("f16 batches expected")
            };
            let t = match channels_first {
                true => t.view().permuted_axes(vec![0, 2, 3, 4, 1]),
                false => t.view(),
            };
            for (i, id) in b.ids.iter().enumerate() {
                let values: Vec<u16> = t
                    .index_axis(Axis(0), i)
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                out.insert(id.clone(), values);
            }
        }
        out
    };
    let direct = by_id(base(), false);
    assert_eq!(direct.len(), 24);
    assert_eq!(by_id(base().with_channels_first(true), true), direct);
    #[cfg(feature = "tch")]
    {
        let on_tch = crate::loader::collect(base().with_device(voxlake::loader::tch::Device::Cpu));
        let mut n = 0;
        for b in &on_tch {
            let bytes = b.tensors.as_bytes().unwrap();
            let per = bytes.len() / b.len();
            for (i, id) in b.ids.iter().enumerate() {
                let want: Vec<u8> = direct[id].iter().flat_map(|v| v.to_le_bytes()).collect();
                assert!(bytes[i * per..(i + 1) * per] == want[..], "{id}");
                n += 1;
            }
        }
        assert_eq!(n, 24);
    }
    let numpy = expected(DType::F32);
    let plain = |n: usize| -> Vec<u16> {
        numpy[n]
            .chunks(4)
            .map(|c| {
                f16::from_f32((f32::from_le_bytes(c.try_into().unwrap()) - 0.25) / 3.0).to_bits()
            })
            .collect()
    };
    let unflipped = direct
        .iter()
        .filter(|(id, v)| **v == plain(id.strip_prefix("cube-").unwrap().parse().unwrap()))
        .count();
    assert!(
        (1..24).contains(&unflipped),
        "{unflipped} of 24 drew no flip"
    );
}

#[test]
fn transform_failures_name_the_row_or_batch() {
    let table = fixture("pyarrow_tensor");
    let base = || {
        Loader::builder(table.clone())
            .with_id_column("sample")
            .with_batch_size(4)
    };
    let e = first_error(
        base().with_transform(|s: &mut Sample<'_>, _| {
            if s.id == "cube-013" {
                return Err("no cube 13 today".into());
            }
            Ok(())
        }),
        "an error in a transform",
    );
    assert!(
        e.contains("row cube-013 of part-00001.parquet") && e.contains("no cube 13 today"),
        "{e}"
    );
    let e = first_error(
        base().with_transform(|s: &mut Sample<'_>, _| {
            assert_ne!(s.id, "cube-002", "a bad cube");
            Ok(())
        }),
        "a panic in a transform",
    );
    assert!(
        e.contains("row cube-002") && e.contains("panicked") && e.contains("a bad cube"),
        "{e}"
    );
    let e = first_error(
        base().with_transform(|s: &mut Sample<'_>, _| {
            s.tensor = Tensors::F32(ndarray::ArrayD::zeros(vec![2]));
            Ok(())
        }),
        "a transform that changes the shape unannounced",
    );
    assert!(
        e.contains("[2] f32") && e.contains("with_transform_to"),
        "{e}"
    );
    let e = first_error(
        base().with_batch_transform(|b, _| {
            if b.index == 2 {
                return Err("batch two".into());
            }
            Ok(())
        }),
        "an error in a batch transform",
    );
    assert!(
        e.contains("batch 2 of epoch 0") && e.contains("batch two"),
        "{e}"
    );
}

#[test]
fn batch_transforms_run_on_every_batch_with_their_own_generator() {
    let draws = |seed: u64| {
        std::thread::spawn(move || {
            Loader::builder(fixture("pyarrow_tensor"))
                .with_batch_size(6)
                .with_shuffle(seed, 8)
                .with_batch_transform(|b, rng| {
                    let draw = rng.random_range(0..1000);
                    b.labels = vec![Some(draw); b.len()];
                    Ok(())
                })
                .build()
                .unwrap()
                .map(|b| b.unwrap().labels[0].unwrap())
                .collect::<Vec<i64>>()
        })
        .join()
        .unwrap()
    };
    let a = draws(5);
    assert_eq!(a.len(), 4, "every batch");
    assert_eq!(a, draws(5), "reproducible");
    assert_ne!(a, draws(6), "seeded");
}

#[test]
fn transforms_cast_to_bfloat16_on_every_path() {
    let numpy = expected(DType::F32);
    let bf16 = TensorSpec::new(SHAPE.to_vec(), DType::BF16);
    let cast = move |b: LoaderBuilder| {
        b.with_id_column("sample")
            .with_batch_size(5)
            .with_transform_to(bf16.clone(), |s: &mut Sample<'_>, _| {
                let x = s.tensor.as_f32().ok_or("f32 expected")?;
                s.tensor = Tensors::BF16(x.mapv(half::bf16::from_f32));
                Ok(())
            })
    };
    #[cfg_attr(not(feature = "tch"), allow(unused_mut))]
    let mut paths = vec![cast(Loader::builder(fixture("pyarrow_tensor")))];
    #[cfg(feature = "tch")]
    paths.push(
        cast(Loader::builder(fixture("pyarrow_tensor")))
            .with_device(voxlake::loader::tch::Device::Cpu),
    );
    for builder in paths {
        let batches = crate::loader::collect(builder);
        let mut n = 0;
        for b in &batches {
            assert_eq!(b.tensors.dtype(), DType::BF16);
            let bytes = b.tensors.as_bytes().unwrap();
            let per = bytes.len() / b.len();
            for (i, id) in b.ids.iter().enumerate() {
                let k: usize = id.strip_prefix("cube-").unwrap().parse().unwrap();
                let want: Vec<u8> = numpy[k]
                    .chunks(4)
                    .flat_map(|c| {
                        half::bf16::from_f32(f32::from_le_bytes(c.try_into().unwrap()))
                            .to_le_bytes()
                    })
                    .collect();
                assert!(bytes[i * per..(i + 1) * per] == want[..], "{id}");
                n += 1;
            }
        }
        assert_eq!(n, 24);
    }
}
