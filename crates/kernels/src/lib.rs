//! The copy kernels that fill a batch's memory with samples from their stored little-endian
//! bytes: as they are where every bit pattern is a value and the host is little-endian (large
//! samples streamed past the caches), else converted value by value; channels moved first on
//! request; axes reversed with a map applied to each value in one pass ([`fill_flipped`], with
//! an AVX-512 line kernel and AVX2 groups where the CPU has them); a batch's samples on a
//! pool's threads ([`fill_each`]). Pure: no I/O and no loader types, so the kernels are tested
//! and benchmarked on their own (`cargo bench -p voxlake-kernels`); `voxlake-loader` calls them
//! for its ndarray and libtorch batches.
//!
//! ```
//! use std::mem::MaybeUninit;
//! use voxlake_kernels::{Dest, fill_flipped, fill_sample};
//!
//! // A 2×3 sample of f32, stored little-endian.
//! let stored: Vec<u8> = (0..6).flat_map(|v| (v as f32).to_le_bytes()).collect();
//! let mut batch = vec![MaybeUninit::<f32>::uninit(); 6];
//! fill_sample(&mut batch, &stored, None, Dest::Batch);
//! // SAFETY: `fill_sample` writes every element.
//! let values: Vec<f32> = batch.iter().map(|v| unsafe { v.assume_init() }).collect();
//! assert_eq!(values, [0., 1., 2., 3., 4., 5.]);
//!
//! // The last axis reversed and each value doubled, in one pass.
//! fill_flipped(&mut batch, &stored, &[2, 3], &[false, true], |v: f32| 2.0 * v, Dest::Near);
//! // SAFETY: `fill_flipped` writes every element.
//! let values: Vec<f32> = batch.iter().map(|v| unsafe { v.assume_init() }).collect();
//! assert_eq!(values, [4., 2., 0., 10., 8., 6.]);
//! ```

#![warn(missing_docs)]

use std::mem::MaybeUninit;

use half::f16;

mod flipped;

pub use flipped::{fill_flipped, fill_flipped_half};

/// An element type a sample is filled into from little-endian bytes.
pub trait Element: Copy + Send + Sync + 'static {
    /// Whether every bit pattern is a valid value (so bytes may be copied as they are).
    const ANY_BITS: bool;
    /// The value of its little-endian `bytes` (exactly its size).
    fn from_le(bytes: &[u8]) -> Self;
    /// Appends its little-endian bytes to `out`.
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

/// Where a sample is copied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A batch: read next by another thread or a device copy, so written past the caches.
    Batch,
    /// A buffer the same thread reads at once (a sample for a transform): kept in them.
    Near,
}

/// Writes one sample (`src`: little-endian, C order, shape `[…, C]`) into `dst`, moving the
/// last axis first when `channels` is `Some(C)`. Every element of `dst` is written.
///
/// # Panics
/// Where `src` is not `dst`'s size in bytes.
pub fn fill_sample<T: Element>(
    dst: &mut [MaybeUninit<T>],
    src: &[u8],
    channels: Option<usize>,
    to: Dest,
) {
    let size = std::mem::size_of::<T>();
    assert_eq!(src.len(), dst.len() * size, "sample size");
    match channels {
        None if T::ANY_BITS && cfg!(target_endian = "little") => {
            // SAFETY: T accepts any bit pattern and the host is little-endian, so the stored
            // bytes are the values; the lengths are equal (asserted above).
            unsafe { copy_sample(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len(), to) };
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

/// Checks sample `i`'s row (its checksum) just before the sample is copied, on the thread that
/// copies it: the check reads the row's bytes into that core's cache, where the copy finds
/// them, instead of both reading them from memory. `E`: the caller's error.
pub type Check<'a, E> = Option<&'a (dyn Fn(usize) -> Result<(), E> + Sync)>;

/// Has `write(i, chunk)` write every element of sample `i`'s chunk of `dst` (`count` chunks of
/// `numel` elements), `check(i)` first: on `pool`'s threads, a sample each at a time, when
/// there is a pool. A failed check is the error (the batch is not to be used).
///
/// # Panics
/// Where `dst` does not hold `count` chunks of `numel`.
pub fn fill_each<T: Send, E: Send>(
    dst: &mut [MaybeUninit<T>],
    numel: usize,
    count: usize,
    pool: Option<&rayon::ThreadPool>,
    check: Check<'_, E>,
    write: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) -> Result<(), E> {
    assert_eq!(dst.len(), numel * count, "batch size");
    let one = |i: usize, dst: &mut [MaybeUninit<T>]| {
        if let Some(check) = check {
            check(i)?;
        }
        write(i, dst);
        Ok(())
    };
    if numel == 0 {
        return (0..count).try_for_each(|i| one(i, &mut []));
    }
    match pool {
        Some(pool) if count > 1 => {
            use rayon::prelude::*;
            pool.install(|| {
                dst.par_chunks_mut(numel)
                    .enumerate()
                    .try_for_each(|(i, dst)| one(i, dst))
            })
        }
        _ => dst
            .chunks_exact_mut(numel)
            .enumerate()
            .try_for_each(|(i, dst)| one(i, dst)),
    }
}

/// Samples at least this large are copied into a batch with streaming stores.
const STREAMING_MIN: usize = 1 << 16;

/// Copies `len` bytes of one sample. On x86_64, a large sample bound for a batch goes with
/// non-temporal (streaming) stores: a batch is far larger than the caches and is read next by
/// another thread or a device copy, so loading its lines before overwriting them (what plain
/// stores do) only doubles the memory traffic of the copy (docs/benchmarks.md, the local path).
///
/// # Safety
/// `src` and `dst` are valid for `len` bytes and do not overlap.
unsafe fn copy_sample(src: *const u8, dst: *mut u8, len: usize, to: Dest) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = to;
    #[cfg(target_arch = "x86_64")]
    if to == Dest::Batch && len >= STREAMING_MIN {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // SAFETY: the caller's contract bounds every access below to `len` bytes of each; the
        // streamed stores are 16-byte aligned (`head` first), SSE2 is in every x86_64 CPU, and
        // the fence orders them before whatever this thread does next (handing the batch on).
        unsafe {
            let head = dst.align_offset(16).min(len);
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut at = head;
            while at + 64 <= len {
                let from = src.add(at).cast::<__m128i>();
                let to = dst.add(at).cast::<__m128i>();
                let lanes = [
                    _mm_loadu_si128(from),
                    _mm_loadu_si128(from.add(1)),
                    _mm_loadu_si128(from.add(2)),
                    _mm_loadu_si128(from.add(3)),
                ];
                for (k, lane) in lanes.into_iter().enumerate() {
                    _mm_stream_si128(to.add(k), lane);
                }
                at += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at);
            _mm_sfence();
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large samples (streamed into a batch) and small ones, at every alignment of source and
    /// destination, land byte for byte.
    #[test]
    fn samples_land_whole_at_any_alignment() {
        for len in [
            100,
            STREAMING_MIN - 1,
            STREAMING_MIN,
            STREAMING_MIN + 77,
            300_007,
        ] {
            let src: Vec<u8> = (0..len + 16).map(|i| (i * 7 % 251) as u8).collect();
            for (from, to) in [(0, 0), (1, 0), (0, 3), (5, 11), (15, 1)] {
                for dest in [Dest::Batch, Dest::Near] {
                    let mut dst = vec![MaybeUninit::<u8>::uninit(); len + 16];
                    fill_sample(&mut dst[to..to + len], &src[from..from + len], None, dest);
                    // SAFETY: written just above.
                    let got: Vec<u8> = dst[to..to + len]
                        .iter()
                        .map(|b| unsafe { b.assume_init() })
                        .collect();
                    assert!(got == src[from..from + len], "{len} {from} {to} {dest:?}");
                }
            }
        }
    }
}
