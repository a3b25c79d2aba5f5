//! Batches as the training loop sees them: `ndarray` tensors of the table's element type.

use std::mem::MaybeUninit;
use std::sync::Arc;

use half::f16;
use ndarray::{ArrayD, IxDyn};
use voxlake_format::DType;

use crate::LoaderError;
use voxlake_kernels::{Dest, fill_each, fill_sample};

use crate::Check;

/// A batch of samples.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The tensors of the sample's first field (the one tensor of a one-tensor table), shape
    /// `[B, …shape]` (or `[B, C, …spatial]` with channels first).
    pub tensors: Tensors,
    /// The first field's name.
    pub(crate) first: Arc<str>,
    /// The sample's other fields, in order.
    pub(crate) more: Vec<(Arc<str>, FieldBatch)>,
    /// The labels (`None` where the table has none).
    pub labels: Vec<Option<i64>>,
    /// The ids (source keys) of the samples, in batch order.
    pub ids: Vec<String>,
    /// Of a mixture, each sample's source (its index in the list of
    /// [`Source`](crate::Source)s), in batch order; empty when the loader reads one table.
    pub sources: Vec<u32>,
    /// Where each sample came from, in batch order.
    pub lineage: Vec<RowOrigin>,
    /// The epoch the batch belongs to.
    pub epoch: u64,
    /// The batch's index inside its epoch (the same on every rank).
    pub index: u64,
    /// The labels already on their way to the batch's CUDA device (feature `tch`).
    pub(crate) device_labels: Option<crate::TchTensor>,
}

/// Where one sample of a batch came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowOrigin {
    /// The Delta data file (path relative to the table).
    pub file: Arc<str>,
    /// The row group in the file.
    pub row_group: usize,
    /// The row in the file (counted over all its row groups).
    pub row: u64,
    /// The sample's id (its source `.npy` key).
    pub id: String,
    /// Whether the sample repeats a row of the epoch to give every rank the same number of
    /// rows (`Uneven::Pad`).
    pub pad: bool,
}

/// One field of a batch other than the first: its values for every sample
/// ([`Batch::take_more_fields`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FieldBatch {
    /// A tensor field: `[B, …shape]`.
    Tensors(Tensors),
    /// A text field: a string per sample (a null as its field's null policy says: an error, the
    /// fill, or empty text with a mask).
    Text(Vec<String>),
}

/// One field of a batch, as [`Batch::fields`] lists them.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum FieldRef<'a> {
    /// A tensor field: `[B, …shape]`.
    Tensors(&'a Tensors),
    /// A text field: a string per sample (a null as its field's null policy says: an error, the
    /// fill, or empty text with a mask).
    Text(&'a [String]),
}

impl Batch {
    /// The tensor field `name` (the first field's name gives [`tensors`](Self::tensors)).
    pub fn field(&self, name: &str) -> Option<&Tensors> {
        if *self.first == *name {
            return Some(&self.tensors);
        }
        self.more.iter().find_map(|(n, f)| match f {
            FieldBatch::Tensors(t) if **n == *name => Some(t),
            _ => None,
        })
    }

    /// The tensor field `name`, to change (a batch transform).
    pub fn field_mut(&mut self, name: &str) -> Option<&mut Tensors> {
        if *self.first == *name {
            return Some(&mut self.tensors);
        }
        self.more.iter_mut().find_map(|(n, f)| match f {
            FieldBatch::Tensors(t) if **n == *name => Some(t),
            _ => None,
        })
    }

    /// The text field `name`: a string per sample.
    pub fn text(&self, name: &str) -> Option<&[String]> {
        self.more.iter().find_map(|(n, f)| match f {
            FieldBatch::Text(t) if **n == *name => Some(t.as_slice()),
            _ => None,
        })
    }

    /// Every field of the batch, in the sample's order, the first being
    /// [`tensors`](Self::tensors).
    pub fn fields(&self) -> Vec<(&str, FieldRef<'_>)> {
        std::iter::once((&*self.first, FieldRef::Tensors(&self.tensors)))
            .chain(self.more.iter().map(|(n, f)| {
                let f = match f {
                    FieldBatch::Tensors(t) => FieldRef::Tensors(t),
                    FieldBatch::Text(t) => FieldRef::Text(t),
                };
                (&**n, f)
            }))
            .collect()
    }

    /// Bytes of every tensor field.
    pub(crate) fn tensor_bytes(&self) -> usize {
        self.fields()
            .iter()
            .map(|(_, f)| match f {
                FieldRef::Tensors(t) => t.nbytes(),
                FieldRef::Text(_) => 0,
            })
            .sum()
    }

    /// The first field's name (the field [`tensors`](Self::tensors) holds).
    pub fn first_name(&self) -> &str {
        &self.first
    }

    /// The fields after the first, in order, taken out of the batch whole (no copy: for a
    /// caller that hands them on, such as the Python binding).
    pub fn take_more_fields(&mut self) -> Vec<(Arc<str>, FieldBatch)> {
        std::mem::take(&mut self.more)
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// For each sample, where it came from: Delta file, row group, row in the file, id.
    pub fn lineage(&self) -> &[RowOrigin] {
        &self.lineage
    }

    /// Whether the batch is empty (never true for a batch the loader hands out).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The labels as one array, if every sample has one.
    pub fn label_array(&self) -> Option<ndarray::Array1<i64>> {
        self.labels
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()
            .map(ndarray::Array1::from)
    }
}

/// The tensor batch, in the table's element type.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum Tensors {
    Bool(ArrayD<bool>),
    I8(ArrayD<i8>),
    I16(ArrayD<i16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<half::bf16>),
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    /// A libtorch tensor on the loader's device (feature `tch`; without it no value of this
    /// variant exists).
    Tch(crate::TchTensor),
}

/// Evaluates `$body` with `$a` bound to the `ndarray` array that a [`Tensors`] holds, whatever
/// its element type; `$other` where it holds libtorch tensors (feature `tch`), which are not
/// `ndarray` arrays. For code that hands batches on by element type (the Python package
/// gives each to numpy), so that the list of types is written once.
///
/// ```
/// use voxlake_loader::{Tensors, each_tensor};
/// let t = Tensors::F32(ndarray::ArrayD::zeros(vec![2, 3]));
/// assert_eq!(each_tensor!(&t, a => a.len(), _ => 0), 6);
/// ```
#[macro_export]
macro_rules! each_tensor {
    ($value:expr, $a:ident => $body:expr, _ => $other:expr) => {
        match $value {
            $crate::Tensors::Bool($a) => $body,
            $crate::Tensors::I8($a) => $body,
            $crate::Tensors::I16($a) => $body,
            $crate::Tensors::I32($a) => $body,
            $crate::Tensors::I64($a) => $body,
            $crate::Tensors::U8($a) => $body,
            $crate::Tensors::U16($a) => $body,
            $crate::Tensors::U32($a) => $body,
            $crate::Tensors::U64($a) => $body,
            $crate::Tensors::F16($a) => $body,
            $crate::Tensors::BF16($a) => $body,
            $crate::Tensors::F32($a) => $body,
            $crate::Tensors::F64($a) => $body,
            // libtorch tensors, where the crate was built with `tch`.
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

impl Tensors {
    /// The shape `[B, …]`.
    pub fn shape(&self) -> Vec<usize> {
        if let Tensors::Tch(t) = self {
            return t.shape();
        }
        each_tensor!(self, a => a.shape().to_vec(), _ => unreachable!("handled before"))
    }

    /// Bytes of tensor data.
    pub fn nbytes(&self) -> usize {
        self.shape().iter().product::<usize>() * self.dtype().size()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Tensors::Tch(t) => t.dtype(),
            Tensors::Bool(_) => DType::Bool,
            Tensors::I8(_) => DType::I8,
            Tensors::I16(_) => DType::I16,
            Tensors::I32(_) => DType::I32,
            Tensors::I64(_) => DType::I64,
            Tensors::U8(_) => DType::U8,
            Tensors::U16(_) => DType::U16,
            Tensors::U32(_) => DType::U32,
            Tensors::U64(_) => DType::U64,
            Tensors::F16(_) => DType::F16,
            Tensors::BF16(_) => DType::BF16,
            Tensors::F32(_) => DType::F32,
            Tensors::F64(_) => DType::F64,
        }
    }

    /// The values as `f32`, if that is the element type.
    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            Tensors::F32(a) => Some(a),
            _ => None,
        }
    }

    /// The values as `f64`, if that is the element type.
    pub fn as_f64(&self) -> Option<&ArrayD<f64>> {
        match self {
            Tensors::F64(a) => Some(a),
            _ => None,
        }
    }

    /// The raw values, native byte order, C order (as a training framework copies them);
    /// `None` for a libtorch tensor that is not a contiguous CPU tensor (copy it to the CPU
    /// first).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        if let Tensors::Tch(t) = self {
            return t.cpu_bytes();
        }
        fn bytes<T>(a: &ArrayD<T>) -> Option<&[u8]> {
            let s = a.as_slice()?;
            // SAFETY: any initialized value is readable as bytes; the length is exact.
            Some(unsafe {
                std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s))
            })
        }
        each_tensor!(self, a => bytes(a), _ => unreachable!("handled before"))
    }
}

macro_rules! map_tensor {
    ($value:expr, $a:ident => $body:expr) => {
        match $value {
            Tensors::Bool($a) => Tensors::Bool($body),
            Tensors::I8($a) => Tensors::I8($body),
            Tensors::I16($a) => Tensors::I16($body),
            Tensors::I32($a) => Tensors::I32($body),
            Tensors::I64($a) => Tensors::I64($body),
            Tensors::U8($a) => Tensors::U8($body),
            Tensors::U16($a) => Tensors::U16($body),
            Tensors::U32($a) => Tensors::U32($body),
            Tensors::U64($a) => Tensors::U64($body),
            Tensors::F16($a) => Tensors::F16($body),
            Tensors::BF16($a) => Tensors::BF16($body),
            Tensors::F32($a) => Tensors::F32($body),
            Tensors::F64($a) => Tensors::F64($body),
            Tensors::Tch(t) => Tensors::Tch(t),
        }
    };
}
pub(crate) use map_tensor;

/// `$each!(Variant)` with the [`Tensors`] variant of element type `$dtype`: the one list of the
/// element types, for code that builds tensors of a type known only at run time.
macro_rules! by_dtype {
    ($dtype:expr, $each:ident) => {
        match $dtype {
            voxlake_format::DType::Bool => $each!(Bool),
            voxlake_format::DType::I8 => $each!(I8),
            voxlake_format::DType::I16 => $each!(I16),
            voxlake_format::DType::I32 => $each!(I32),
            voxlake_format::DType::I64 => $each!(I64),
            voxlake_format::DType::U8 => $each!(U8),
            voxlake_format::DType::U16 => $each!(U16),
            voxlake_format::DType::U32 => $each!(U32),
            voxlake_format::DType::U64 => $each!(U64),
            voxlake_format::DType::F16 => $each!(F16),
            voxlake_format::DType::BF16 => $each!(BF16),
            voxlake_format::DType::F32 => $each!(F32),
            voxlake_format::DType::F64 => $each!(F64),
        }
    };
}
pub(crate) use by_dtype;

mod sample;

/// Builds the tensor batch of `samples.len()` samples of shape `shape[1..]` from per-sample
/// byte slices (each exactly one sample; checked by the caller), into `reuse`'s memory when it
/// is an array of the same type and shape (a batch given back with `Loader::recycle`). Also
/// says whether it did.
pub(crate) fn build_tensors_into(
    dtype: DType,
    shape: &[usize],
    samples: &[&[u8]],
    channels: Option<usize>,
    reuse: Option<Tensors>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
) -> Result<(Tensors, bool), LoaderError> {
    macro_rules! build_as {
        ($variant:ident) => {{
            let reuse = match reuse {
                Some(Tensors::$variant(a)) => Some(a),
                _ => None,
            };
            let (array, recycled) = build_with(shape, reuse, pool, check, |i, dst| {
                fill_sample(dst, samples[i], channels, Dest::Batch)
            })?;
            Ok((Tensors::$variant(array), recycled))
        }};
    }
    let numel: usize = shape.iter().skip(1).product();
    if numel > 0 && shape.first() != Some(&samples.len()) {
        return Err(LoaderError::Internal(format!(
            "a batch of shape {shape:?} from {} samples",
            samples.len()
        )));
    }
    by_dtype!(dtype, build_as)
}

/// A batch of shape `shape` (`[B, …]`), each sample's chunk written by `write(i, chunk)`
/// (every element of it), into `reuse`'s memory when it is an array of that shape (a batch
/// given back with `Loader::recycle`); also says whether it was.
pub(crate) fn build_with<T: Copy + Send>(
    shape: &[usize],
    reuse: Option<ArrayD<T>>,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_>,
    write: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) -> Result<(ArrayD<T>, bool), LoaderError> {
    let count = shape.first().copied().unwrap_or(0);
    let numel: usize = shape.iter().skip(1).product();
    let total = numel * count;
    let reused = reuse
        .filter(|a| a.shape() == shape && a.is_standard_layout())
        .map(ArrayD::into_raw_vec_and_offset)
        .and_then(|(v, offset)| (offset.unwrap_or(0) == 0 && v.len() == total).then_some(v));
    let recycled = reused.is_some();
    let values = match reused {
        Some(mut values) => {
            // SAFETY: MaybeUninit<T> has T's layout, and the memory is initialised already;
            // `write` overwrites every element with a valid value (T is Copy: nothing to drop).
            let dst = unsafe { &mut *(values.as_mut_slice() as *mut [T] as *mut [MaybeUninit<T>]) };
            fill_each(dst, numel, count, pool, check, write)?;
            values
        }
        None => {
            // No zero fill: every element is written below (fresh memory is the costly part).
            let mut values: Vec<T> = Vec::with_capacity(total);
            fill_each(
                &mut values.spare_capacity_mut()[..total],
                numel,
                count,
                pool,
                check,
                write,
            )?;
            // SAFETY: `write` wrote all `numel` elements of each sample's chunk.
            unsafe { values.set_len(total) };
            values
        }
    };
    let array = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| LoaderError::Internal(format!("a batch of shape {shape:?}: {e}")))?;
    Ok((array, recycled))
}

/// A batch of zeros of `dtype` and `shape`, its pages faulted in now (one write a page): memory
/// that the first batches are then assembled into without the kernel zeroing it under them.
pub(crate) fn prefaulted(dtype: DType, shape: &[usize]) -> Result<Tensors, LoaderError> {
    fn one<T: Copy + Default>(shape: &[usize]) -> Result<ArrayD<T>, LoaderError> {
        let total = shape.iter().product();
        let mut values = vec![T::default(); total];
        let step = (4096 / std::mem::size_of::<T>().max(1)).max(1);
        for value in values.iter_mut().step_by(step) {
            // SAFETY: a valid, aligned element of `values`. Volatile: a plain store of a zero
            // into zeroed memory may be left out, and the page with it.
            unsafe { std::ptr::write_volatile(value, T::default()) };
        }
        ArrayD::from_shape_vec(IxDyn(shape), values)
            .map_err(|e| LoaderError::Internal(format!("a batch of shape {shape:?}: {e}")))
    }
    macro_rules! one {
        ($variant:ident) => {
            Tensors::$variant(one(shape)?)
        };
    }
    Ok(by_dtype!(dtype, one))
}

/// [`build_tensors_into`] fresh memory.
pub(crate) fn build_tensors(
    dtype: DType,
    shape: &[usize],
    samples: &[&[u8]],
    channels: Option<usize>,
) -> Result<Tensors, LoaderError> {
    Ok(build_tensors_into(dtype, shape, samples, channels, None, None, None)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_first_moves_the_last_axis() {
        // One sample of shape [2, 3] (spatial 2, channels 3): values 0..6.
        let src: Vec<u8> = (0..6).flat_map(|v: i32| v.to_le_bytes()).collect();
        let t = build_tensors(DType::I32, &[1, 3, 2], &[&src], Some(3)).unwrap();
        let Tensors::I32(a) = t else { panic!() };
        assert_eq!(a.as_slice().unwrap(), &[0, 3, 1, 4, 2, 5]);
        let t = build_tensors(DType::I32, &[1, 2, 3], &[&src], None).unwrap();
        assert_eq!(t.as_bytes().unwrap(), src.as_slice());
    }

    #[test]
    fn a_pool_fills_the_same_bytes_as_one_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let samples: Vec<Vec<u8>> = (0..7u8)
            .map(|s| (0..48u8).map(|i| s.wrapping_mul(31) ^ i).collect())
            .collect();
        let refs: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
        for (dtype, shape, channels) in [
            (DType::F32, vec![7, 2, 2, 3], None),
            (DType::F32, vec![7, 3, 2, 2], Some(3)),
            (DType::F16, vec![7, 4, 6], None),
            (DType::Bool, vec![7, 48], None),
            (DType::I64, vec![7, 2, 3], Some(3)),
        ] {
            let serial = build_tensors(dtype, &shape, &refs, channels).unwrap();
            let (parallel, _) =
                build_tensors_into(dtype, &shape, &refs, channels, None, Some(&pool), None)
                    .unwrap();
            assert_eq!(
                serial.as_bytes(),
                parallel.as_bytes(),
                "{dtype} {channels:?}"
            );
        }
    }

    /// Memory faulted in ahead is a batch of zeros of the type and shape asked for, which a
    /// batch of that shape is then built into.
    #[test]
    fn a_prefaulted_batch_is_zeros_of_its_type_and_takes_a_batch() {
        let spare = prefaulted(DType::F16, &[2, 3000]).unwrap();
        let Tensors::F16(a) = &spare else {
            panic!("{spare:?}")
        };
        assert_eq!(a.shape(), &[2, 3000]);
        assert!(a.iter().all(|v| v.to_f32() == 0.0));
        let bytes = vec![0x3cu8; 3000 * 2];
        let samples = [&bytes[..], &bytes[..]];
        let (built, reused) = build_tensors_into(
            DType::F16,
            &[2, 3000],
            &samples,
            None,
            Some(spare),
            None,
            None,
        )
        .unwrap();
        assert!(reused);
        assert_eq!(built.as_bytes().unwrap(), [&bytes[..], &bytes[..]].concat());
        let Tensors::U8(a) = prefaulted(DType::U8, &[1, 5]).unwrap() else {
            panic!("u8")
        };
        assert_eq!(a.shape(), &[1, 5]);
    }

    #[test]
    fn a_recycled_batch_is_refilled_in_place() {
        let a: Vec<u8> = (0..6).flat_map(|v: i32| v.to_le_bytes()).collect();
        let b: Vec<u8> = (10..16).flat_map(|v: i32| v.to_le_bytes()).collect();
        let first = build_tensors(DType::I32, &[1, 2, 3], &[&a], None).unwrap();
        let memory = first.as_bytes().unwrap().as_ptr();
        let (second, recycled) =
            build_tensors_into(DType::I32, &[1, 2, 3], &[&b], None, Some(first), None, None)
                .unwrap();
        assert!(recycled);
        assert_eq!(second.as_bytes().unwrap(), b.as_slice());
        assert_eq!(
            second.as_bytes().unwrap().as_ptr(),
            memory,
            "the same memory"
        );
        // Another shape or type: fresh memory, right values.
        let (third, recycled) = build_tensors_into(
            DType::I32,
            &[1, 3, 2],
            &[&a],
            None,
            Some(second),
            None,
            None,
        )
        .unwrap();
        assert!(!recycled);
        assert_eq!(third.as_bytes().unwrap(), a.as_slice());
        let Tensors::I32(t) = &third else { panic!() };
        assert_eq!(t.shape(), &[1, 3, 2]);
        let (floats, recycled) =
            build_tensors_into(DType::F32, &[1, 2, 3], &[&a], None, Some(third), None, None)
                .unwrap();
        assert!(!recycled);
        assert_eq!(floats.dtype(), DType::F32);
    }

    #[test]
    fn every_dtype_fills_from_little_endian() {
        let bools = build_tensors(DType::Bool, &[2, 2], &[&[0, 1], &[2, 0]], None).unwrap();
        assert_eq!(
            bools,
            Tensors::Bool(
                ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![false, true, true, false]).unwrap()
            )
        );
        let halfs: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect();
        let Tensors::F16(a) = build_tensors(DType::F16, &[1, 2], &[&halfs], None).unwrap() else {
            panic!()
        };
        assert_eq!(a[[0, 1]], f16::from_f32(-2.0));
        let f64s: Vec<u8> = [0.25f64].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = build_tensors(DType::F64, &[1, 1], &[&f64s], None).unwrap();
        assert_eq!(t.as_f64().unwrap()[[0, 0]], 0.25);
        assert_eq!(t.dtype(), DType::F64);
    }
}
