//! Samples copied element by element from their stored little-endian bytes into a batch's
//! memory: as they are where every bit pattern is a value and the host is little-endian, else
//! converted; channels moved first on request; a batch's samples on a pool's threads. Shared by
//! the ndarray batches (`batch`) and libtorch's (`torch`), so neither imports the other.

use std::mem::MaybeUninit;

use half::f16;

/// An element type the loader can fill from little-endian bytes.
pub(crate) trait Element: Copy + Send + Sync + 'static {
    /// Whether every bit pattern is a valid value (so bytes may be copied as they are).
    const ANY_BITS: bool;
    fn from_le(bytes: &[u8]) -> Self;
    fn write_le(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const ANY_BITS: bool = true;
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("item size"))
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
element!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

impl Element for f16 {
    const ANY_BITS: bool = true;
    fn from_le(bytes: &[u8]) -> Self {
        f16::from_le_bytes([bytes[0], bytes[1]])
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Element for half::bf16 {
    const ANY_BITS: bool = true;
    fn from_le(bytes: &[u8]) -> Self {
        half::bf16::from_le_bytes([bytes[0], bytes[1]])
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Element for bool {
    // Only 0 and 1 are valid bools: convert, never copy.
    const ANY_BITS: bool = false;
    fn from_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
}

/// Writes one sample (`src`: little-endian, C order, shape `[…, C]`) into `dst`, moving the
/// last axis first when `channels` is `Some(C)`. Every element of `dst` is written.
pub(crate) fn fill_sample<T: Element>(
    dst: &mut [MaybeUninit<T>],
    src: &[u8],
    channels: Option<usize>,
) {
    let size = std::mem::size_of::<T>();
    assert_eq!(src.len(), dst.len() * size, "sample size");
    match channels {
        None if T::ANY_BITS && cfg!(target_endian = "little") => {
            // SAFETY: T accepts any bit pattern and the host is little-endian, so the stored
            // bytes are the values; the lengths are equal (asserted above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    dst.as_mut_ptr().cast::<u8>(),
                    src.len(),
                );
            }
        }
        None => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(size)) {
                d.write(T::from_le(s));
            }
        }
        Some(c) => {
            // [spatial, C] → [C, spatial]
            let spatial = dst.len() / c;
            for (s, chunk) in src.chunks_exact(size * c).enumerate() {
                for (ch, value) in chunk.chunks_exact(size).enumerate() {
                    dst[ch * spatial + s].write(T::from_le(value));
                }
            }
        }
    }
}

/// Writes `samples` (each one sample of `numel` elements) into `dst`, one after the other:
/// on `pool`'s threads, a sample each at a time, when there is a pool. Every element is written
/// with the same value either way.
pub(crate) fn fill_batch<T: Element>(
    dst: &mut [MaybeUninit<T>],
    numel: usize,
    samples: &[&[u8]],
    channels: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
) {
    assert_eq!(dst.len(), numel * samples.len(), "batch size");
    if numel == 0 {
        return;
    }
    match pool {
        Some(pool) if samples.len() > 1 => {
            use rayon::prelude::*;
            pool.install(|| {
                dst.par_chunks_mut(numel)
                    .zip(samples.par_iter())
                    .for_each(|(dst, src)| fill_sample(dst, src, channels));
            });
        }
        _ => {
            for (dst, src) in dst.chunks_exact_mut(numel).zip(samples) {
                fill_sample(dst, src, channels);
            }
        }
    }
}
