//! One sample's tensors as the per-sample transforms see them: made from a row's stored
//! bytes (into a recycled sample's memory where one fits), and written back out as bytes.

use std::mem::MaybeUninit;
use std::sync::Mutex;

use ndarray::ArrayD;
use voxlake_format::DType;

use super::Tensors;
use crate::LoaderError;
use voxlake_kernels::{Dest, Element, fill_sample};

impl Tensors {
    /// One sample of `shape` from its little-endian C-order `bytes` (checked by the caller),
    /// without a batch axis.
    pub(crate) fn sample_from_le(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Tensors, LoaderError> {
        // Read at once by the transform: written into the caches, not past them.
        let batch_shape: Vec<usize> = std::iter::once(1).chain(shape.iter().copied()).collect();
        macro_rules! one {
            ($variant:ident) => {
                Tensors::$variant(
                    super::build_with(&batch_shape, None, None, None, |_, dst| {
                        fill_sample(dst, bytes, None, Dest::Near)
                    })?
                    .0,
                )
            };
        }
        let batch = super::by_dtype!(dtype, one);
        Ok(map_tensor!(batch, a => a.index_axis_move(ndarray::Axis(0), 0)))
    }

    /// [`sample_from_le`](Self::sample_from_le) into the memory of one of `spares` of this
    /// type and shape (samples a transform handed back), taken out of it; a new one where none
    /// fits (a sample's buffer made anew each time costs its page faults and zeroing).
    pub(crate) fn sample_from_le_into(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
        spares: &Mutex<Vec<Tensors>>,
    ) -> Result<Tensors, LoaderError> {
        fn refill<T: Element>(a: &mut ArrayD<T>, bytes: &[u8]) -> bool {
            let Some(values) = a.as_slice_mut() else {
                return false;
            };
            // SAFETY: MaybeUninit<T> has T's layout, and `fill_sample` writes every element
            // with a valid value (the lengths are checked by it).
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    values.as_mut_ptr().cast::<MaybeUninit<T>>(),
                    values.len(),
                )
            };
            fill_sample(dst, bytes, None, Dest::Near);
            true
        }
        let spare = spares.lock().ok().and_then(|mut spares| {
            let at = spares.iter().position(|t| t.is_of(dtype, shape))?;
            Some(spares.swap_remove(at))
        });
        if let Some(mut t) = spare
            && each_tensor!(&mut t, a => refill(a, bytes), _ => false)
        {
            return Ok(t);
        }
        Tensors::sample_from_le(dtype, shape, bytes)
    }

    /// Whether these are `dtype` values of `shape` (without a copy of the shape).
    pub(crate) fn is_of(&self, dtype: DType, shape: &[usize]) -> bool {
        self.dtype() == dtype && each_tensor!(self, a => a.shape() == shape, _ => false)
    }

    /// The same values in standard (C-contiguous) layout: a copy only of a flipped or
    /// transposed view a transform handed back.
    pub(crate) fn into_standard_layout(self) -> Tensors {
        map_tensor!(self, a => if a.is_standard_layout() {
            a
        } else {
            a.as_standard_layout().into_owned()
        })
    }

    /// The values as little-endian bytes in C order: borrowed on a little-endian host when
    /// they are contiguous, else written out; `None` for a libtorch tensor not on the CPU.
    pub(crate) fn le_bytes(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        fn le<T: Element>(a: &ArrayD<T>) -> Vec<u8> {
            let mut out = Vec::with_capacity(a.len() * std::mem::size_of::<T>());
            for v in a.iter() {
                v.write_le(&mut out);
            }
            out
        }
        if cfg!(target_endian = "little")
            && let Some(bytes) = self.as_bytes()
        {
            return Some(std::borrow::Cow::Borrowed(bytes));
        }
        if let Tensors::Tch(_) = self {
            return None;
        }
        Some(std::borrow::Cow::Owned(
            each_tensor!(self, a => le(a), _ => unreachable!("handled before")),
        ))
    }
}
