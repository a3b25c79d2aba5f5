//! Transforms chosen by name, with parameters ([`Augment`]): the common volumetric
//! augmentations, for callers that cannot hand the loader a Rust closure (the Python package's
//! `transforms=`). They run as one per-sample transform on the assembly threads, seeded like
//! any other (the loader's seed, the epoch, the row's id), so a resume reproduces them.
//!
//! The geometric ones ([`Augment::Flip`], [`Augment::Crop`]) move every tensor field of the
//! first field's shape with it, by the same draw (a volume and its mask together); the value
//! ones ([`Augment::Normalize`], [`Augment::Cast`]) change the first field only.

use std::ops::Range;
use std::sync::Arc;

use half::{bf16, f16};
use ndarray::ArrayD;
use voxlake_format::{DType, FieldKind, SampleSpec, TensorSpec};

use super::{FieldValue, Rng, Sample, SampleFn, TransformError, TransformRng};
use crate::Tensors;
use crate::batch::map_tensor;

/// A transform chosen by name, with parameters, for
/// [`LoaderBuilder::with_augment`](crate::LoaderBuilder::with_augment): run on the assembly
/// threads, seeded by (seed, epoch, row id) so a resume repeats it. Flips and crops move every
/// tensor field of the first field's shape with it, by the same draw (a volume and its mask);
/// normalize and cast change the first field only.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Augment {
    /// Reverses each of `axes` (of the sample, without the batch axis) with probability `p`,
    /// each axis drawn apart.
    Flip {
        /// The axes that may be flipped.
        axes: Vec<usize>,
        /// The chance of each flip, in `[0, 1]`.
        p: f64,
    },
    /// A random window of `shape`: each axis longer than asked is cut at a random offset, each
    /// shorter one placed at a random offset in zeros.
    Crop {
        /// The shape handed out.
        shape: Vec<usize>,
    },
    /// `(x - mean) / std`, for a float tensor (cast an integer one first).
    Normalize {
        /// Subtracted.
        mean: f64,
        /// Divided by; positive.
        std: f64,
    },
    /// The values as another float type: `f16`, `bf16` or `f32` (from any numeric type).
    Cast(DType),
}

impl Augment {
    /// The spec of the first field after this transform, given the one before; an error
    /// naming the transform where the parameters do not fit it.
    fn output(&self, spec: &TensorSpec) -> Result<TensorSpec, String> {
        let (shape, dtype) = (spec.shape(), spec.dtype());
        match self {
            Augment::Flip { axes, p } => {
                if !(0.0..=1.0).contains(p) {
                    return Err(format!("flip: p must be in [0, 1], got {p}"));
                }
                if let Some(a) = axes.iter().find(|&&a| a >= shape.len()) {
                    return Err(format!("flip: axis {a} of a sample of shape {shape:?}"));
                }
                Ok(spec.clone())
            }
            Augment::Crop { shape: to } => {
                if to.len() != shape.len() || to.contains(&0) {
                    return Err(format!(
                        "crop: shape {to:?} for a sample of shape {shape:?} (the same number of axes, none 0)"
                    ));
                }
                Ok(TensorSpec::new(to.clone(), dtype))
            }
            Augment::Normalize { mean, std } => {
                if !(std.is_finite() && *std > 0.0 && mean.is_finite()) {
                    return Err(format!(
                        "normalize: mean {mean} and std {std} (finite, std > 0)"
                    ));
                }
                if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
                    return Err(format!(
                        "normalize: the tensor is {dtype}: cast it to a float type first"
                    ));
                }
                Ok(spec.clone())
            }
            Augment::Cast(to) => {
                if !matches!(to, DType::F16 | DType::BF16 | DType::F32) {
                    return Err(format!("cast: to {to}: only f16, bf16 or f32"));
                }
                if dtype == DType::Bool {
                    return Err("cast: a bool tensor".into());
                }
                Ok(TensorSpec::new(shape.to_vec(), *to))
            }
        }
    }
}

/// The per-sample transform running `augments` in order over samples of `input`, and the
/// sample it hands out; an error naming the first transform that does not fit.
pub(crate) fn resolve(
    augments: &[Augment],
    input: &SampleSpec,
) -> Result<(Arc<SampleFn>, SampleSpec), String> {
    let first = input.first().clone();
    // The fields that move with the first: tensors of its shape.
    let moved: Vec<String> = input
        .fields()
        .iter()
        .skip(1)
        .filter(|f| f.kind.tensor().is_some_and(|s| s.shape() == first.shape()))
        .map(|f| f.name.clone())
        .collect();
    let mut spec = first.clone();
    for (i, a) in augments.iter().enumerate() {
        spec = a.output(&spec).map_err(|e| format!("transform {i}, {e}"))?;
    }
    let fields = input
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let kind = match (&f.kind, i) {
                (_, 0) => FieldKind::Tensor(spec.clone()),
                (FieldKind::Tensor(s), _) if moved.contains(&f.name) => {
                    FieldKind::Tensor(TensorSpec::new(spec.shape().to_vec(), s.dtype()))
                }
                (kind, _) => kind.clone(),
            };
            (f.name.clone(), kind)
        })
        .collect();
    let output = SampleSpec::new(fields).map_err(|e| e.to_string())?;
    let augments = augments.to_vec();
    let run = move |sample: &mut Sample<'_>, rng: &mut TransformRng| {
        let mut i = 0;
        while i < augments.len() {
            if !matches!(augments[i], Augment::Flip { .. }) {
                apply(&augments[i], sample, &moved, rng)?;
                i += 1;
                continue;
            }
            // Flips in a row are drawn in order as one set of reversed axes, and made with a
            // normalization right after them in one pass over the sample.
            let mut reversed = vec![false; sample.tensor.shape().len()];
            while let Some(Augment::Flip { axes, p }) = augments.get(i) {
                for &axis in axes {
                    if rng.random_bool(*p) {
                        reversed[axis] ^= true;
                    }
                }
                i += 1;
            }
            let normalize = match augments.get(i) {
                Some(Augment::Normalize { mean, std })
                    if matches!(sample.tensor, Tensors::F32(_) | Tensors::F64(_)) =>
                {
                    i += 1;
                    Some((*mean, *std))
                }
                _ => None,
            };
            flips(sample, &moved, &reversed, normalize);
        }
        Ok(())
    };
    Ok((Arc::new(run), output))
}

/// The `reversed` axes of the first field and the `moved` ones reversed, in one pass each, the
/// first field normalized on the way where `normalize` is given (an `f32` or `f64` tensor).
fn flips(
    sample: &mut Sample<'_>,
    moved: &[String],
    reversed: &[bool],
    normalize: Option<(f64, f64)>,
) {
    if !reversed.contains(&true) {
        if let Some((mean, std)) = normalize {
            normalize_in_place(&mut sample.tensor, mean, std);
        }
        return;
    }
    sample.tensor = match (
        std::mem::replace(&mut sample.tensor, placeholder()),
        normalize,
    ) {
        // As `(x - mean) / std` in the tensor's own type, like `Augment::Normalize`.
        (Tensors::F32(a), Some((mean, std))) => {
            let (mean, std) = (mean as f32, std as f32);
            Tensors::F32(flip_map(a, reversed, |v| (v - mean) / std))
        }
        (Tensors::F64(a), Some((mean, std))) => {
            Tensors::F64(flip_map(a, reversed, |v| (v - mean) / std))
        }
        (t, _) => map_tensor!(t, a => flip_map(a, reversed, |v| v)),
    };
    for (name, value) in &mut sample.more {
        if let FieldValue::Tensor(t) = value
            && moved.iter().any(|m| **m == **name)
        {
            let t = std::mem::replace(t, placeholder());
            *value = FieldValue::Tensor(map_tensor!(t, a => flip_map(a, reversed, |v| v)));
        }
    }
}

/// `(x - mean) / std` on a float tensor, in place and in its own type.
fn normalize_in_place(t: &mut Tensors, mean: f64, std: f64) -> bool {
    match t {
        Tensors::F32(a) => {
            let (mean, std) = (mean as f32, std as f32);
            a.mapv_inplace(|v| (v - mean) / std);
        }
        Tensors::F64(a) => a.mapv_inplace(|v| (v - mean) / std),
        Tensors::F16(a) => a.mapv_inplace(|v| f16::from_f64((v.to_f64() - mean) / std)),
        Tensors::BF16(a) => a.mapv_inplace(|v| bf16::from_f64((v.to_f64() - mean) / std)),
        _ => return false,
    }
    true
}

/// Runs `augment` on `sample`, the geometric ones on the first field and the `moved` ones.
fn apply(
    augment: &Augment,
    sample: &mut Sample<'_>,
    moved: &[String],
    rng: &mut TransformRng,
) -> Result<(), TransformError> {
    match augment {
        Augment::Flip { axes, p } => {
            let mut reversed = vec![false; sample.tensor.shape().len()];
            for &axis in axes {
                if rng.random_bool(*p) {
                    reversed[axis] ^= true;
                }
            }
            flips(sample, moved, &reversed, None);
        }
        Augment::Crop { shape } => {
            let from = sample.tensor.shape();
            // One draw per axis: every moved field takes the same window.
            let windows: Vec<(Range<usize>, Range<usize>)> = from
                .iter()
                .zip(shape)
                .map(|(&n, &m)| {
                    let at = rng.random_range(0..=n.abs_diff(m));
                    match n >= m {
                        true => (at..at + m, 0..m),
                        false => (0..n, at..at + n),
                    }
                })
                .collect();
            each_moved(
                sample,
                moved,
                &mut |t| map_tensor!(t, a => window(&a, &windows, shape)),
            );
        }
        // In the tensor's own type, as `(x - mean) / std` in numpy or torch computes it.
        Augment::Normalize { mean, std } => {
            if !normalize_in_place(&mut sample.tensor, *mean, *std) {
                return Err(format!("normalize: a {} tensor", sample.tensor.dtype()).into());
            }
        }
        Augment::Cast(to) if sample.tensor.dtype() == *to => {}
        Augment::Cast(to) => {
            let values = as_f32(&sample.tensor)
                .ok_or_else(|| format!("cast: a {} tensor", sample.tensor.dtype()))?;
            sample.tensor = match to {
                DType::F16 => Tensors::F16(values.mapv(f16::from_f32)),
                DType::BF16 => Tensors::BF16(values.mapv(bf16::from_f32)),
                _ => Tensors::F32(values),
            };
        }
    }
    Ok(())
}

/// Replaces the first field and each `moved` one with `f` of it.
fn each_moved(sample: &mut Sample<'_>, moved: &[String], f: &mut dyn FnMut(Tensors) -> Tensors) {
    sample.tensor = f(std::mem::replace(&mut sample.tensor, placeholder()));
    for (name, value) in &mut sample.more {
        if let FieldValue::Tensor(t) = value
            && moved.iter().any(|m| **m == **name)
        {
            *t = f(std::mem::replace(t, placeholder()));
        }
    }
}

/// An empty tensor, held by a field while its value is being replaced.
fn placeholder() -> Tensors {
    Tensors::Bool(ArrayD::default(vec![0]))
}

/// `a` with the `reversed` axes reversed and `f` applied to each value, in one pass and in
/// place, in C order (an ndarray view with negative strides would make every later pass walk it
/// element by element). The axes after the last reversed one move as runs; each run is swapped
/// with its mirror image (or mapped alone where it is its own).
fn flip_map<T: Copy>(a: ArrayD<T>, reversed: &[bool], f: impl Fn(T) -> T) -> ArrayD<T> {
    let mut a = match a.is_standard_layout() {
        true => a,
        false => a.as_standard_layout().into_owned(),
    };
    let shape = a.shape().to_vec();
    let k = reversed.iter().rposition(|&r| r).map_or(0, |d| d + 1);
    let inner: usize = shape[k..].iter().product();
    let dims: Vec<(usize, usize, bool)> = (0..k)
        .map(|d| (shape[d], shape[d + 1..].iter().product(), reversed[d]))
        .collect();
    if let Some(values) = a.as_slice_mut().filter(|v| !v.is_empty()) {
        mirror_runs(values, &dims, 0, 0, inner, &f);
    }
    a
}

/// The runs of `inner` values at offset `at` (and below, over `dims`: each axis's length,
/// stride and whether it is reversed) swapped with their mirror images at `mirror`, `f`
/// applied to every value once.
fn mirror_runs<T: Copy>(
    values: &mut [T],
    dims: &[(usize, usize, bool)],
    at: usize,
    mirror: usize,
    inner: usize,
    f: &impl Fn(T) -> T,
) {
    let Some((&(n, stride, reversed), rest)) = dims.split_first() else {
        if at < mirror {
            let (low, high) = values.split_at_mut(mirror);
            for (x, y) in low[at..at + inner].iter_mut().zip(&mut high[..inner]) {
                (*x, *y) = (f(*y), f(*x));
            }
        } else if at == mirror {
            values[at..at + inner].iter_mut().for_each(|x| *x = f(*x));
        }
        // at > mirror: swapped when its mirror image was visited.
        return;
    };
    for i in 0..n {
        let j = if reversed { n - 1 - i } else { i };
        mirror_runs(values, rest, at + i * stride, mirror + j * stride, inner, f);
    }
}

/// `a`'s `windows` (per axis: the range read, the range written, of one length) in zeros of
/// `shape`, copied as runs: the innermost cut axis with the whole axes after it.
fn window<T: Clone + Default>(
    a: &ArrayD<T>,
    windows: &[(Range<usize>, Range<usize>)],
    shape: &[usize],
) -> ArrayD<T> {
    let a = a.as_standard_layout();
    let from = a.shape();
    let src = a.as_slice().unwrap_or_default();
    let mut out = vec![T::default(); shape.iter().product()];
    // Axes `k..` are taken whole; a run is axis `k - 1`'s window of them.
    let mut k = from.len();
    while k > 0 && from[k - 1] == shape[k - 1] {
        k -= 1;
    }
    if k == 0 {
        out.clone_from_slice(src);
        return ArrayD::from_shape_vec(shape.to_vec(), out).unwrap_or_else(|_| unreachable!());
    }
    let inner: usize = from[k..].iter().product();
    let run = windows[k - 1].0.len() * inner;
    let stride = |dims: &[usize], d: usize| dims[d + 1..].iter().product::<usize>();
    let mut at = vec![0; k - 1];
    loop {
        let offset = |dims: &[usize], pick: fn(&(Range<usize>, Range<usize>)) -> usize| {
            (0..k - 1)
                .map(|d| (pick(&windows[d]) + at[d]) * stride(dims, d))
                .sum::<usize>()
                + pick(&windows[k - 1]) * inner
        };
        let (read, write) = (offset(from, |w| w.0.start), offset(shape, |w| w.1.start));
        out[write..write + run].clone_from_slice(&src[read..read + run]);
        // The next index of the outer axes, the last fastest.
        let mut d = k - 1;
        loop {
            if d == 0 {
                return ArrayD::from_shape_vec(shape.to_vec(), out)
                    .unwrap_or_else(|_| unreachable!("the shape's own length"));
            }
            d -= 1;
            at[d] += 1;
            if at[d] < windows[d].0.len() {
                break;
            }
            at[d] = 0;
        }
    }
}

/// The values as `f32`, from any numeric element type.
fn as_f32(t: &Tensors) -> Option<ArrayD<f32>> {
    Some(match t {
        Tensors::I8(a) => a.mapv(f32::from),
        Tensors::I16(a) => a.mapv(f32::from),
        Tensors::I32(a) => a.mapv(|v| v as f32),
        Tensors::I64(a) => a.mapv(|v| v as f32),
        Tensors::U8(a) => a.mapv(f32::from),
        Tensors::U16(a) => a.mapv(f32::from),
        Tensors::U32(a) => a.mapv(|v| v as f32),
        Tensors::U64(a) => a.mapv(|v| v as f32),
        Tensors::F16(a) => a.mapv(f32::from),
        Tensors::BF16(a) => a.mapv(f32::from),
        Tensors::F32(a) => a.clone(),
        Tensors::F64(a) => a.mapv(|v| v as f32),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn spec(fields: &[(&str, &[usize], DType)]) -> SampleSpec {
        SampleSpec::new(
            fields
                .iter()
                .map(|(n, s, d)| {
                    (
                        n.to_string(),
                        FieldKind::Tensor(TensorSpec::new(s.to_vec(), *d)),
                    )
                })
                .collect(),
        )
        .unwrap()
    }

    /// A volume of `shape` numbered 1, 2, 3… and its mask (the same numbers as u8).
    fn sample(shape: &[usize]) -> (Tensors, Tensors) {
        let n: usize = shape.iter().product();
        let values = ArrayD::from_shape_vec(shape.to_vec(), (1..=n).map(|v| v as f32).collect());
        let values = values.unwrap();
        let mask = values.mapv(|v| v as u8);
        (Tensors::F32(values), Tensors::U8(mask))
    }

    fn run(augments: &[Augment], shape: &[usize], seed: u64) -> (SampleSpec, Tensors, Tensors) {
        let input = spec(&[("tensor", shape, DType::F32), ("mask", shape, DType::U8)]);
        let (f, output) = resolve(augments, &input).unwrap();
        let (tensor, mask) = sample(shape);
        let mut s = Sample {
            tensor,
            label: None,
            id: "row",
            first: "tensor".into(),
            more: vec![("mask".into(), FieldValue::Tensor(mask))],
        };
        f(&mut s, &mut TransformRng::seed_from_u64(seed)).unwrap();
        let Some((_, FieldValue::Tensor(mask))) = s.more.pop() else {
            panic!("the mask")
        };
        (output, s.tensor, mask)
    }

    #[test]
    fn a_flip_reverses_the_volume_and_its_mask_together() {
        let (out, t, m) = run(
            &[Augment::Flip {
                axes: vec![1],
                p: 1.0,
            }],
            &[2, 3],
            1,
        );
        assert_eq!(
            out,
            spec(&[
                ("tensor", &[2, 3], DType::F32),
                ("mask", &[2, 3], DType::U8)
            ])
        );
        let want = [3.0, 2.0, 1.0, 6.0, 5.0, 4.0];
        assert_eq!(
            t.as_f32().unwrap().iter().copied().collect::<Vec<_>>(),
            want
        );
        let Tensors::U8(m) = m else { panic!() };
        assert_eq!(m.iter().map(|&v| f32::from(v)).collect::<Vec<_>>(), want);
        let (_, t, _) = run(
            &[Augment::Flip {
                axes: vec![0, 1],
                p: 0.0,
            }],
            &[2, 3],
            1,
        );
        assert_eq!(
            t.as_f32().unwrap().as_slice().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
    }

    #[test]
    fn a_crop_takes_one_window_for_every_field_and_pads_with_zeros() {
        for seed in 0..20 {
            // Axis 0 cut from 6 to 4, axis 1 padded from 3 to 5.
            let (out, t, m) = run(&[Augment::Crop { shape: vec![4, 5] }], &[6, 3], seed);
            assert_eq!(out.first().shape(), &[4, 5]);
            assert_eq!(out.fields()[1].kind.tensor().unwrap().shape(), &[4, 5]);
            let t = t.as_f32().unwrap().clone();
            let Tensors::U8(m) = m else { panic!() };
            assert_eq!(t, m.mapv(f32::from), "the same window");
            // The source's columns are a run of 3 at some offset (zeros beside it), its rows 4
            // consecutive rows of the 6.
            let at = (0..5).find(|&c| t[[0, c]] != 0.0).unwrap();
            let row0 = (t[[0, at]] as usize - 1) / 3;
            assert!(at <= 2 && row0 <= 2, "seed {seed}: offsets {row0}, {at}");
            for (r, c) in (0..4usize).flat_map(|r| (0..5usize).map(move |c| (r, c))) {
                let want = match c.checked_sub(at).filter(|&k| k < 3) {
                    Some(k) => (1 + (row0 + r) * 3 + k) as f32,
                    None => 0.0,
                };
                assert_eq!(t[[r, c]], want, "seed {seed}, at {r}, {c}");
            }
        }
    }

    #[test]
    fn normalize_then_cast_hand_out_the_values_in_the_new_type() {
        let augments = [
            Augment::Normalize {
                mean: 1.0,
                std: 2.0,
            },
            Augment::Cast(DType::F16),
        ];
        let (out, t, m) = run(&augments, &[2, 2], 3);
        assert_eq!(out.first(), &TensorSpec::new(vec![2, 2], DType::F16));
        assert_eq!(
            out.fields()[1].kind.tensor().unwrap().dtype(),
            DType::U8,
            "the mask kept"
        );
        let Tensors::F16(t) = t else { panic!("f16") };
        let got: Vec<f32> = t.iter().map(|v| v.to_f32()).collect();
        assert_eq!(got, [0.0, 0.5, 1.0, 1.5]);
        assert!(matches!(m, Tensors::U8(_)));
    }

    #[test]
    fn parameters_that_do_not_fit_are_refused_naming_the_transform() {
        let input = spec(&[("tensor", &[4, 4], DType::U8)]);
        let refused = |a: Augment| {
            resolve(
                &[
                    Augment::Flip {
                        axes: vec![0],
                        p: 0.5,
                    },
                    a,
                ],
                &input,
            )
            .err()
            .unwrap()
        };
        assert!(
            refused(Augment::Flip {
                axes: vec![2],
                p: 0.5
            })
            .contains("transform 1, flip: axis 2")
        );
        assert!(
            refused(Augment::Flip {
                axes: vec![0],
                p: 1.5
            })
            .contains("p must be in [0, 1]")
        );
        assert!(refused(Augment::Crop { shape: vec![4] }).contains("crop: shape [4]"));
        assert!(
            refused(Augment::Normalize {
                mean: 0.0,
                std: 0.0
            })
            .contains("std > 0")
        );
        assert!(
            refused(Augment::Normalize {
                mean: 0.0,
                std: 1.0
            })
            .contains("cast it to a float type first")
        );
        assert!(refused(Augment::Cast(DType::I32)).contains("only f16, bf16 or f32"));
        // A cast first makes a normalize fit.
        let casted = [
            Augment::Cast(DType::F32),
            Augment::Normalize {
                mean: 0.0,
                std: 1.0,
            },
        ];
        assert!(resolve(&casted, &input).is_ok());
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `flip_map` and `window` in C order give what ndarray's views give, for any shape,
        /// reversed axes and window.
        #[test]
        fn flips_and_windows_match_ndarrays_views(
            shape in proptest::collection::vec(1usize..5, 1..5),
            axis in any::<prop::sample::Index>(),
            to in proptest::collection::vec(1usize..6, 4),
            at in proptest::collection::vec(any::<prop::sample::Index>(), 4),
        ) {
            let n: usize = shape.iter().product();
            let a = ArrayD::from_shape_vec(shape.clone(), (0..n as u32).collect()).unwrap();
            let axis = axis.index(shape.len());
            let mut view = a.clone();
            view.invert_axis(ndarray::Axis(axis));
            let mut reversed = vec![false; shape.len()];
            reversed[axis] = true;
            let flipped = flip_map(a.clone(), &reversed, |v| v);
            prop_assert!(flipped.is_standard_layout());
            prop_assert_eq!(&flipped, &view);
            // Every other axis too, each value doubled on the way.
            let mut view = a.mapv(|v| 2 * v);
            for (d, r) in reversed.iter_mut().enumerate() {
                *r = d % 2 == 0 || d == axis;
                if *r {
                    view.invert_axis(ndarray::Axis(d));
                }
            }
            prop_assert_eq!(flip_map(a.clone(), &reversed, |v| 2 * v), view);
            let to = &to[..shape.len()];
            let windows: Vec<_> = shape.iter().zip(to).zip(&at).map(|((&n, &m), at)| {
                let o = at.index(n.abs_diff(m) + 1);
                if n >= m { (o..o + m, 0..m) } else { (0..n, o..o + n) }
            }).collect();
            let got = window(&a, &windows, to);
            let mut want = ArrayD::<u32>::zeros(to.to_vec());
            want.slice_each_axis_mut(|d| ndarray::Slice::from(windows[d.axis.0].1.clone()))
                .assign(&a.slice_each_axis(|d| ndarray::Slice::from(windows[d.axis.0].0.clone())));
            prop_assert_eq!(got, want);
        }
    }
}
