//! A batch whose named transforms the copy makes ([`Direct`]): each row's flips drawn from its
//! generator, its stored bytes read with those axes reversed and written, normalized and cast,
//! straight into the batch's memory; the fields that move with the first flipped the same way,
//! the others copied as they are.

use voxlake_format::DType;

use super::*;
use voxlake_kernels::{Dest, Element, fill_flipped, fill_flipped_half};

use crate::Check;
use crate::transform::Direct;

impl Assembler {
    /// The copy's plan, where this batch can take it: ndarray batches (no device), no channels
    /// moved first, the first field read.
    pub(super) fn direct(&self, rows: &[Row]) -> Option<&Direct> {
        if self.device.is_some() {
            return None;
        }
        let direct = self.transforms.direct.as_deref()?;
        (self.channels.is_none() && self.reads(rows, 0)).then_some(direct)
    }

    /// The batch of `rows`, the named transforms made by the copy into it.
    pub(super) fn assemble_direct(
        &self,
        direct: &Direct,
        rows: &[Row],
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let shape = self.input_spec.first().shape();
        let reversed: Vec<Vec<bool>> = rows
            .iter()
            .map(|r| {
                let mut rng = transform::sample_rng(self.seed, epoch, &r.group.id(r.index));
                direct.reversed(&mut rng, shape.len())
            })
            .collect();
        let pool = self.pool.as_deref();
        let bytes = |field: usize| -> Vec<&[u8]> {
            rows.iter().map(|r| r.group.bytes(field, r.index)).collect()
        };
        let first_bytes = bytes(0);
        let batch_shape = self.batch_shape(self.spec.first(), rows.len(), None);
        let (reuse, given) = self.reusable();
        let check = self.row_check(rows);
        let (first, recycled) = first_field(
            direct,
            &batch_shape,
            &first_bytes,
            &reversed,
            reuse,
            pool,
            Some(&check),
        )?;
        if recycled && given {
            self.counters.recycled.fetch_add(1, Ordering::Relaxed);
        }
        let mut values = vec![None];
        let mut tensors = Vec::new();
        for (i, field) in self.input_spec.fields().iter().enumerate().skip(1) {
            if !self.reads(rows, i) {
                values.push(None);
                continue;
            }
            let FieldKind::Tensor(spec) = &field.kind else {
                let text = rows.iter().map(|r| r.group.text(i, r.index)).collect();
                values.push(Some(Values::Text(text)));
                continue;
            };
            let samples = bytes(i);
            let batch_shape = self.batch_shape(spec, rows.len(), None);
            let built = match direct.moved.contains(&i) {
                true => flipped(spec.dtype(), &batch_shape, &samples, &reversed, pool)?,
                false => {
                    batch::build_tensors_into(
                        spec.dtype(),
                        &batch_shape,
                        &samples,
                        None,
                        None,
                        pool,
                        None,
                    )?
                    .0
                }
            };
            values.push(Some(Values::Tensors(Vec::new())));
            tensors.push((i, built));
        }
        let more = self.more_fields(&values, tensors.into_iter());
        Ok(self.batch_of(rows, first, more, None, epoch, index))
    }
}

/// The first field's batch (`shape`: `[B, …]`) of `samples` (stored `f32`s), each with its
/// `reversed` axes reversed, normalized and cast as `direct` says, into `reuse`'s memory where
/// it fits (and whether it did).
fn first_field(
    direct: &Direct,
    shape: &[usize],
    samples: &[&[u8]],
    reversed: &[Vec<bool>],
    reuse: Option<Tensors>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
) -> Result<(Tensors, bool), LoaderError> {
    let sample = &shape[1..];
    macro_rules! first_as {
        ($variant:ident, $fill:ident, $value:expr) => {{
            let reuse = match reuse {
                Some(Tensors::$variant(a)) => Some(a),
                _ => None,
            };
            let (a, recycled) = batch::build_with(shape, reuse, pool, check, |i, dst| {
                $fill(dst, samples[i], sample, &reversed[i], $value)
            })?;
            (Tensors::$variant(a), recycled)
        }};
        ($variant:ident, $value:expr) => {
            first_as!($variant, into_batch, $value)
        };
    }
    // Each arm a loop of its own, the normalization's scalars in registers; the arithmetic of
    // `Augment::Normalize` on an `f32` tensor, then `Augment::Cast`'s (`f16`, `bf16`: converted
    // by the slice, as `half` converts one value).
    Ok(match (direct.output, direct.normalization()) {
        (DType::F16, Some((m, s))) => first_as!(F16, fill_flipped_half, move |x| (x - m) / s),
        (DType::F16, None) => first_as!(F16, fill_flipped_half, |x| x),
        (DType::BF16, Some((m, s))) => first_as!(BF16, fill_flipped_half, move |x| (x - m) / s),
        (DType::BF16, None) => first_as!(BF16, fill_flipped_half, |x| x),
        (_, Some((m, s))) => first_as!(F32, move |x| (x - m) / s),
        (_, None) => first_as!(F32, |x| x),
    })
}

/// [`fill_flipped`] of stored `f32`s into a batch.
fn into_batch<U>(
    dst: &mut [std::mem::MaybeUninit<U>],
    bytes: &[u8],
    sample: &[usize],
    reversed: &[bool],
    f: impl Fn(f32) -> U + Copy,
) {
    fill_flipped::<f32, U>(dst, bytes, sample, reversed, f, Dest::Batch)
}

/// A batch (`shape`: `[B, …]`) of `samples` of `dtype`, each with its `reversed` axes reversed.
fn flipped(
    dtype: DType,
    shape: &[usize],
    samples: &[&[u8]],
    reversed: &[Vec<bool>],
    pool: Option<&rayon::ThreadPool>,
) -> Result<Tensors, LoaderError> {
    fn build<T: Element>(
        shape: &[usize],
        samples: &[&[u8]],
        reversed: &[Vec<bool>],
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<ndarray::ArrayD<T>, LoaderError> {
        let sample = &shape[1..];
        let built = batch::build_with(shape, None, pool, None, |i, dst| {
            fill_flipped::<T, T>(dst, samples[i], sample, &reversed[i], |x| x, Dest::Batch)
        })?;
        Ok(built.0)
    }
    macro_rules! one {
        ($variant:ident) => {
            Tensors::$variant(build(shape, samples, reversed, pool)?)
        };
    }
    Ok(batch::by_dtype!(dtype, one))
}

#[cfg(test)]
mod tests {
    use ndarray::ArrayD;
    use proptest::prelude::*;
    use rand::SeedableRng;

    use super::*;
    use crate::transform::{Augment, FieldValue, Sample, TransformRng, Transforms};

    proptest! {
        /// The copy's values are the per-sample transform's, bit for bit, for the volume and
        /// the mask that moves with it, whatever the shape, the flips, the seed and the cast.
        #[test]
        fn the_copy_makes_what_the_per_sample_transform_makes(
            shape in proptest::collection::vec(1usize..5, 1..5),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 0.0f64..=1.0), 0..4),
            normalize in any::<bool>(),
            cast in 0usize..4,
            seed in any::<u64>(),
        ) {
            let mut augments: Vec<Augment> = flips
                .iter()
                .map(|(axis, p)| Augment::Flip { axes: vec![axis.index(shape.len())], p: *p })
                .collect();
            if normalize {
                augments.insert(augments.len() / 2, Augment::Normalize { mean: 0.3, std: 1.7 });
            }
            if let Some(&to) = [DType::F16, DType::BF16, DType::F32].get(cast) {
                augments.push(Augment::Cast(to));
            }
            prop_assume!(!augments.is_empty());
            let spec = crate::transform::direct_tests::input(&shape);
            let resolved = Transforms { named: augments, ..Transforms::default() }
                .resolved(&spec)
                .unwrap();
            let (f, direct) = (resolved.sample.unwrap(), resolved.direct.unwrap());
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|v| v as f32 * 1.37 - 2.0).collect();
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mask: Vec<u8> = (0..n).map(|v| v as u8).collect();

            let mut sample = Sample {
                tensor: Tensors::F32(ArrayD::from_shape_vec(shape.clone(), values).unwrap()),
                label: None,
                id: "row",
                first: "x".into(),
                more: vec![("mask".into(), FieldValue::Tensor(Tensors::U8(
                    ArrayD::from_shape_vec(shape.clone(), mask.clone()).unwrap(),
                )))],
            };
            f(&mut sample, &mut TransformRng::seed_from_u64(seed)).unwrap();
            let Some((_, FieldValue::Tensor(want_mask))) = sample.more.pop() else { panic!() };

            let reversed = vec![direct.reversed(&mut TransformRng::seed_from_u64(seed), shape.len())];
            let batch: Vec<usize> = std::iter::once(1).chain(shape.iter().copied()).collect();
            let (got, _) = first_field(&direct, &batch, &[&bytes], &reversed, None, None, None).unwrap();
            let want = sample.tensor.le_bytes().map(|b| b.into_owned());
            prop_assert_eq!(got.as_bytes(), want.as_deref());
            let got_mask = flipped(DType::U8, &batch, &[&mask], &reversed, None).unwrap();
            let want_mask = want_mask.le_bytes().map(|b| b.into_owned());
            prop_assert_eq!(got_mask.as_bytes(), want_mask.as_deref());
        }
    }
}
