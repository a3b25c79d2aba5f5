//! User transforms, run on the loader's threads instead of the training thread: one per sample
//! (on the assembly pool, before the sample is copied into its batch) and one per batch (on the
//! loader thread, after assembly). Each call gets a random generator seeded from the loader's
//! seed, the epoch and the row's id (or the batch's index): augmentation is the same on every
//! run and after a resume, whatever the rank count, the thread count or the order rows arrive in.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let data = voxlake_compact::synth::generate(dir.path(), 6, 1)?;
//! # let table = dir.path().join("table").to_string_lossy().into_owned();
//! # tokio::runtime::Runtime::new()?.block_on(
//! #     voxlake_compact::Compactor::new(&table).convert(&data.cubes.to_string_lossy()))?;
//! use voxlake_format::{DType, TensorSpec};
//! use voxlake_loader::{Loader, Tensors};
//! use voxlake_loader::transform::{Rng, Sample};
//!
//! // Normalise, flip the first axis at random, and hand out f16.
//! let out = TensorSpec::new(vec![30, 30, 10, 10], DType::F16);
//! let loader = Loader::builder(&table)
//!     .with_batch_size(3)
//!     .with_transform_to(out, |sample: &mut Sample<'_>, rng| {
//!         let x = sample.tensor.as_f32().ok_or("f32 tensors expected")?;
//!         let mut y = x.mapv(|v| half::f16::from_f32((v - 0.5) * 2.0));
//!         if rng.random_bool(0.5) {
//!             y.invert_axis(ndarray::Axis(0));
//!         }
//!         sample.tensor = Tensors::F16(y);
//!         Ok(())
//!     })
//!     .build()?;
//! for batch in loader {
//!     assert_eq!(batch?.tensors.dtype(), DType::F16);
//! }
//! # Ok(())
//! # }
//! ```

mod direct;
mod named;

use std::sync::Arc;

use rand::SeedableRng;
use voxlake_format::SampleSpec;

use crate::batch::{Batch, Tensors};

pub(crate) use direct::Direct;
#[cfg(test)]
pub(crate) use direct::tests as direct_tests;
pub use named::Augment;
pub use rand::Rng;

/// The random generator a transform gets: ChaCha8, whose stream is fixed for a given seed.
pub type TransformRng = rand_chacha::ChaCha8Rng;

/// What a transform returns when it cannot do its work; the loader reports it naming the row.
pub type TransformError = Box<dyn std::error::Error + Send + Sync>;

/// One sample handed to a per-sample transform, which may replace its fields' values (another
/// shape or element type, as the loader was told with `with_transform_to`) and its label. A
/// transform sees every field: a random flip flips the volume and its mask together.
#[derive(Debug)]
pub struct Sample<'a> {
    /// The sample's first field (its one tensor in a one-tensor table), without a batch axis.
    pub tensor: Tensors,
    /// Its label.
    pub label: Option<i64>,
    /// Its id (read only: lineage and the generator's seed follow it).
    pub id: &'a str,
    /// The first field's name.
    pub(crate) first: Arc<str>,
    /// The other fields, in order.
    pub(crate) more: Vec<(Arc<str>, FieldValue)>,
}

/// One field of a sample other than the first.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FieldValue {
    Tensor(Tensors),
    Text(String),
}

impl Sample<'_> {
    /// The tensor field `name` (the first field's name gives [`tensor`](Self::tensor)).
    pub fn field(&self, name: &str) -> Option<&Tensors> {
        if *self.first == *name {
            return Some(&self.tensor);
        }
        self.more.iter().find_map(|(n, v)| match v {
            FieldValue::Tensor(t) if **n == *name => Some(t),
            _ => None,
        })
    }

    /// The tensor field `name`, to replace or change.
    pub fn field_mut(&mut self, name: &str) -> Option<&mut Tensors> {
        if *self.first == *name {
            return Some(&mut self.tensor);
        }
        self.more.iter_mut().find_map(|(n, v)| match v {
            FieldValue::Tensor(t) if **n == *name => Some(t),
            _ => None,
        })
    }

    /// The text field `name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.more.iter().find_map(|(n, v)| match v {
            FieldValue::Text(t) if **n == *name => Some(t.as_str()),
            _ => None,
        })
    }

    /// The names of the sample's fields, in order.
    pub fn field_names(&self) -> Vec<&str> {
        std::iter::once(&*self.first)
            .chain(self.more.iter().map(|(n, _)| &**n))
            .collect()
    }
}

/// A per-sample transform.
pub(crate) type SampleFn =
    dyn Fn(&mut Sample<'_>, &mut TransformRng) -> Result<(), TransformError> + Send + Sync;
/// A per-batch transform.
pub(crate) type BatchFn =
    dyn Fn(&mut Batch, &mut TransformRng) -> Result<(), TransformError> + Send + Sync;

/// The transforms of a loader and what they hand out.
#[derive(Clone, Default)]
pub(crate) struct Transforms {
    pub sample: Option<Arc<SampleFn>>,
    /// The fields the per-sample transform returns (`None`: the table's).
    pub output: Option<SampleSpec>,
    pub batch: Option<Arc<BatchFn>>,
    /// Transforms chosen by name, made into `sample` once the table's sample is known.
    pub named: Vec<Augment>,
    /// The named transforms as the copy into the batch makes them, where it can (`sample`
    /// makes the same values where the copy cannot: a device, channels first).
    pub direct: Option<Arc<Direct>>,
}

impl Transforms {
    /// These transforms for samples of `input`: the named ones made into the per-sample
    /// transform (an error where they do not fit `input`, or where a closure is set too).
    pub(crate) fn resolved(&self, input: &SampleSpec) -> Result<Transforms, String> {
        if self.named.is_empty() {
            return Ok(self.clone());
        }
        if self.sample.is_some() {
            return Err(
                "both a per-sample transform and transforms by name: give one (a closure can call the others itself)"
                    .into(),
            );
        }
        let (sample, output) = named::resolve(&self.named, input)?;
        Ok(Transforms {
            sample: Some(sample),
            output: Some(output),
            batch: self.batch.clone(),
            named: Vec::new(),
            direct: Direct::of(&self.named, input).map(Arc::new),
        })
    }
}

/// What a per-sample transform returns, given the table's sample `input`: `output`, or where
/// `output` is one field named `tensor` (a `TensorSpec`) and the table's sample has more, the
/// table's sample with its first field's spec replaced.
pub(crate) fn output_of(input: &SampleSpec, output: &SampleSpec) -> SampleSpec {
    if !output.is_single() || input.fields().len() == 1 {
        return output.clone();
    }
    let fields = input
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let kind = match i {
                0 => voxlake_format::FieldKind::Tensor(output.first().clone()),
                _ => f.kind.clone(),
            };
            (f.name.clone(), kind)
        })
        .collect();
    // The input's names and kinds were a valid sample; only the first tensor's spec changed.
    SampleSpec::new(fields).unwrap_or_else(|_| output.clone())
}

impl std::fmt::Debug for Transforms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transforms")
            .field("sample", &self.sample.is_some())
            .field("output", &self.output)
            .field("batch", &self.batch.is_some())
            .field("named", &self.named)
            .field("direct", &self.direct)
            .finish()
    }
}

/// FNV-1a over the parts, each followed by a 0 byte: stable across runs, builds and platforms.
fn seed_of(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The generator for row `id` in `epoch`.
pub(crate) fn sample_rng(seed: u64, epoch: u64, id: &str) -> TransformRng {
    TransformRng::seed_from_u64(seed_of(&[
        b"sample",
        &seed.to_le_bytes(),
        &epoch.to_le_bytes(),
        id.as_bytes(),
    ]))
}

/// The generator for batch `index` of `epoch`.
pub(crate) fn batch_rng(seed: u64, epoch: u64, index: u64) -> TransformRng {
    TransformRng::seed_from_u64(seed_of(&[
        b"batch",
        &seed.to_le_bytes(),
        &epoch.to_le_bytes(),
        &index.to_le_bytes(),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_follow_seed_epoch_and_id_only() {
        let draw = |mut r: TransformRng| (0..4).map(|_| r.random::<u32>()).collect::<Vec<_>>();
        let a = draw(sample_rng(7, 1, "cube-001"));
        assert_eq!(a, draw(sample_rng(7, 1, "cube-001")), "reproducible");
        for other in [
            sample_rng(8, 1, "cube-001"),
            sample_rng(7, 2, "cube-001"),
            sample_rng(7, 1, "cube-002"),
            batch_rng(7, 1, 1),
        ] {
            assert_ne!(a, draw(other));
        }
        // Parts are delimited: ("ab", "c") and ("a", "bc") differ.
        assert_ne!(seed_of(&[b"ab", b"c"]), seed_of(&[b"a", b"bc"]));
    }
}
