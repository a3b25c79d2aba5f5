//! Transforms by name that the copy into the batch makes itself ([`Direct`]): random flips, a
//! normalization and a cast of an `f32` volume (and flips of the fields that move with it).
//! The copy reads each sample's stored bytes with the drawn axes reversed and writes
//! `(x - mean) / std` in the output type straight into the batch: one pass, where the per-sample
//! transform copies the sample out, transforms it and copies it into the batch. The draws and
//! the arithmetic are those of the per-sample transform ([`super::named`]), which the loader
//! runs where the copy cannot (a CUDA device, channels first): the same values either way.

use voxlake_format::{DType, SampleSpec};

use super::{Augment, Rng, TransformRng};

/// Named transforms made by the copy into the batch; see the module.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Direct {
    /// Each flip's axis and chance, in the order they are drawn.
    flips: Vec<(usize, f64)>,
    /// `(mean, std)` in `f32`, as the per-sample transform computes an `f32` tensor's.
    normalize: Option<(f32, f32)>,
    /// The first field's element type handed out: `f32`, `f16` or `bf16`.
    pub output: DType,
    /// The other fields that move with the first (tensors of its shape), by index.
    pub moved: Vec<usize>,
}

impl Direct {
    /// The copy's plan for `augments` over samples of `input`, where it can make them: an
    /// `f32` first field, flips, at most one normalization and at most one cast, last, to a
    /// float type (a normalization after a cast computes in the cast's type; a crop pads).
    pub(crate) fn of(augments: &[Augment], input: &SampleSpec) -> Option<Direct> {
        let first = input.first();
        if first.dtype() != DType::F32 {
            return None;
        }
        let mut direct = Direct {
            flips: Vec::new(),
            normalize: None,
            output: DType::F32,
            moved: input
                .fields()
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, f)| f.kind.tensor().is_some_and(|s| s.shape() == first.shape()))
                .map(|(i, _)| i)
                .collect(),
        };
        let mut cast = false;
        for augment in augments {
            match augment {
                Augment::Flip { axes, p } if !cast => {
                    direct.flips.extend(axes.iter().map(|&a| (a, *p)));
                }
                Augment::Normalize { mean, std } if !cast && direct.normalize.is_none() => {
                    direct.normalize = Some((*mean as f32, *std as f32));
                }
                Augment::Cast(to @ (DType::F16 | DType::BF16 | DType::F32)) if !cast => {
                    direct.output = *to;
                    cast = true;
                }
                _ => return None,
            }
        }
        Some(direct)
    }

    /// The axes a sample of `ndim` axes has reversed, drawn from `rng` (seeded by the row) in
    /// the per-sample transform's order.
    pub(crate) fn reversed(&self, rng: &mut TransformRng, ndim: usize) -> Vec<bool> {
        let mut reversed = vec![false; ndim];
        for &(axis, p) in &self.flips {
            if rng.random_bool(p) {
                reversed[axis] ^= true;
            }
        }
        reversed
    }

    /// `(mean, std)` of the normalization, if any: a value `x` of the first field is handed
    /// out as `(x - mean) / std` in `f32`, then cast to [`output`](Self::output).
    pub(crate) fn normalization(&self) -> Option<(f32, f32)> {
        self.normalize
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use voxlake_format::{FieldKind, TensorSpec};

    use super::*;

    pub(crate) fn input(shape: &[usize]) -> SampleSpec {
        let tensor = |d| FieldKind::Tensor(TensorSpec::new(shape.to_vec(), d));
        SampleSpec::new(vec![
            ("x".into(), tensor(DType::F32)),
            ("mask".into(), tensor(DType::U8)),
        ])
        .unwrap()
    }

    #[test]
    fn the_copy_takes_flips_a_normalization_and_a_last_cast_of_f32_only() {
        let spec = input(&[4, 3]);
        let flip = Augment::Flip {
            axes: vec![0],
            p: 0.5,
        };
        let norm = Augment::Normalize {
            mean: 1.0,
            std: 2.0,
        };
        let direct = Direct::of(
            &[flip.clone(), norm.clone(), Augment::Cast(DType::BF16)],
            &spec,
        );
        assert_eq!(
            direct.as_ref().map(|d| (d.output, d.moved.clone())),
            Some((DType::BF16, vec![1]))
        );
        for no in [
            vec![Augment::Crop { shape: vec![2, 3] }],
            vec![Augment::Cast(DType::F16), norm.clone()],
            vec![norm.clone(), norm.clone()],
            vec![Augment::Cast(DType::F16), flip.clone()],
        ] {
            assert_eq!(Direct::of(&no, &spec), None, "{no:?}");
        }
        let f64s = SampleSpec::from(TensorSpec::new(vec![4, 3], DType::F64));
        assert_eq!(Direct::of(&[flip], &f64s), None);
    }
}
