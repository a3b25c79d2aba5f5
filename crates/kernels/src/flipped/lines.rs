//! A flipped sample of 4-byte values written into a batch a whole line at a time past the
//! caches (one 64-byte streaming store a line), as the plain copy writes a batch, with AVX-512.
//!
//! Read with some axes reversed but not the last, a sample is runs: pieces of its output that
//! are contiguous, forward, in its stored bytes. The runs are taken in output order into a
//! line's register by masked loads, each filling the lanes the run gives (a masked-off lane is
//! never read, so a load may start before the stored values or end past them); a full line is
//! mapped and streamed. The sample's partial lines at either end take masked plain stores.
//! Written a group at a time with plain stores instead (`in_groups`), a run of ten values
//! takes two overlapping groups and each batch line is loaded before it is overwritten.
//!
//! A run no longer than a line spreads its instructions over few values, so it takes one
//! merging load, and one more where it completes a line, with no branch on where it starts in
//! the line (`short`); a longer run's first and last values take the same path, its whole
//! lines between loaded and streamed as they are (`run`). With the last axis reversed, the
//! runs are single values and each row is read backwards instead (`backward`): up to a line
//! of it by one load, its lanes turned around and rotated into place by one permutation.

use std::arch::x86_64::{
    __m512, __m512i, _mm_sfence, _mm512_add_epi32, _mm512_castps_si512, _mm512_castsi512_ps,
    _mm512_loadu_epi32, _mm512_mask_loadu_epi32, _mm512_mask_mov_epi32, _mm512_mask_storeu_epi32,
    _mm512_maskz_loadu_epi32, _mm512_maskz_mov_epi32, _mm512_permutexvar_epi32, _mm512_set1_epi32,
    _mm512_setr_epi32, _mm512_setzero_si512, _mm512_stream_si512,
};
use std::mem::MaybeUninit;

use super::{Element, Walk};

/// Values in a line.
const LINE: usize = 16;

/// Whether [`lines`] writes a sample of `T`s into `U`s with `walk`: 4-byte values, read as
/// stored, and some axis reversed (forward runs of 2 to 3,000 values and rows read backwards
/// of 4 to 90,000 were measured against `in_groups`, docs/benchmarks.md).
pub(super) fn applies<T: Element, U>(walk: &Walk) -> bool {
    std::mem::size_of::<T>() == 4
        && std::mem::size_of::<U>() == 4
        && T::ANY_BITS
        && cfg!(target_endian = "little")
        && !walk.axes.is_empty()
}

/// The lanes of a line from `from` up to `to` (`from <= to < 32`; lanes past the line's
/// last left out).
#[inline(always)]
fn lanes(from: usize, to: usize) -> u16 {
    (((1u32 << to) - 1) & !((1u32 << from) - 1)) as u16
}

/// The line being gathered and where it goes.
struct Line<'a, T, U, F> {
    src: &'a [u8],
    f: F,
    /// Its values so far, in lanes `low..filled`.
    values: __m512i,
    filled: usize,
    /// The first lane that is the sample's: above 0 in a first line that starts before it.
    low: usize,
    /// Where its lane 0 goes.
    to: *mut U,
    _types: std::marker::PhantomData<fn(T) -> U>,
}

impl<T: Element, U, F: Fn(T) -> U> Line<'_, T, U, F> {
    /// `values` as `f32` lanes mapped by `f` (`T` and `U` are 4 bytes, any bits a `T`: their
    /// bits pass through as `f32`s unchanged, and the lanes stay in a register).
    ///
    /// # Safety
    /// The CPU has AVX-512 (F); [`applies`].
    #[inline(always)]
    unsafe fn mapped(&self, values: __m512i) -> __m512i {
        // SAFETY: 64 bytes each way.
        let mut lanes: [f32; LINE] = unsafe { std::mem::transmute(_mm512_castsi512_ps(values)) };
        // (A loop, not `array::map`: that is a call here, not inlined across target features.)
        for x in &mut lanes {
            // SAFETY: `T` and `U` are 4 bytes, any bits a `T` (the caller's contract).
            *x = unsafe {
                std::mem::transmute_copy::<U, f32>(&(self.f)(std::mem::transmute_copy::<f32, T>(x)))
            };
        }
        // SAFETY: 64 bytes each way.
        unsafe { _mm512_castps_si512(std::mem::transmute::<[f32; LINE], __m512>(lanes)) }
    }

    /// Writes a whole line of `values` and moves to the next.
    ///
    /// # Safety
    /// As [`mapped`](Self::mapped); `to` is valid for the line's lanes from `low` on and, where
    /// `low` is 0, 64-byte aligned.
    #[inline(always)]
    unsafe fn emit(&mut self, values: __m512i) {
        // SAFETY: the caller's contract.
        unsafe {
            let mapped = self.mapped(values);
            if self.low == 0 {
                _mm512_stream_si512(self.to.cast::<__m512i>(), mapped);
            } else {
                let mask = lanes(self.low, LINE);
                _mm512_mask_storeu_epi32(self.to.cast::<i32>(), mask, mapped);
                self.low = 0;
            }
        }
        self.to = self.to.wrapping_add(LINE);
    }

    /// Takes the run of `len` values (at most a line) from stored value `at` into the lines:
    /// one merging load, and where the run completes the line, one more for the next.
    ///
    /// # Safety
    /// As [`emit`](Self::emit), for every line the run reaches; the run is stored; `len` is
    /// at most [`LINE`].
    #[inline(always)]
    unsafe fn short(&mut self, at: usize, len: usize) {
        debug_assert!(len <= LINE && self.filled < LINE, "a short run");
        // Lane `i` of a load from `from` is stored value `at - filled + i`: the run's first
        // value lands in lane `filled`.
        let from = self.stored(at).wrapping_sub(self.filled);
        let to = self.filled + len;
        let mask = lanes(self.filled, to);
        // SAFETY: each masked load reads only lanes of the run (stored, the caller's
        // contract), wherever its start points; the CPU has AVX-512.
        unsafe {
            self.values = _mm512_mask_loadu_epi32(self.values, mask, from);
            if self.completes(to) {
                let rest = lanes(0, self.filled);
                self.values = _mm512_maskz_loadu_epi32(rest, from.wrapping_add(LINE));
            }
        }
    }

    /// Takes `len` values (at most a line) stored backwards from stored value `last` (`last`,
    /// `last - 1`, …) into the lines: one load of the line of stored values that ends at
    /// `last`, permuted so that `last` lands in lane `filled` and the values before it in the
    /// lanes after (the lanes past the line's end, into the next line's first lanes).
    ///
    /// # Safety
    /// As [`emit`](Self::emit), for every line the values reach; they are stored; `len` is at
    /// most [`LINE`].
    #[inline(always)]
    unsafe fn backward(&mut self, last: usize, len: usize) {
        debug_assert!(len <= LINE && self.filled < LINE, "a short row");
        // Lane `j` of the load is stored value `last - (LINE - 1) + j`: `last` in lane 15, the
        // values wanted in lanes `LINE - len..LINE`.
        let from = self.stored(last).wrapping_sub(LINE - 1);
        let to = self.filled + len;
        let mask = lanes(self.filled, to);
        // SAFETY: the masked load reads only the values wanted (stored, the caller's
        // contract), wherever its start points; the CPU has AVX-512.
        unsafe {
            let window = _mm512_maskz_loadu_epi32(lanes(LINE - len, LINE), from);
            // Output lane `i` (`i - LINE` of the next line) takes stored value
            // `last - (i - filled)`, the load's lane `LINE - 1 + filled - i`; the permutation
            // reads an index's low four bits, so one index serves both lines.
            let reversed = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            let index = _mm512_add_epi32(reversed, _mm512_set1_epi32(self.filled as i32));
            let turned = _mm512_permutexvar_epi32(index, window);
            self.values = _mm512_mask_mov_epi32(self.values, mask, turned);
            if self.completes(to) {
                self.values = _mm512_maskz_mov_epi32(lanes(0, self.filled), turned);
            }
        }
    }

    /// Where stored value `at` is (wrapping: the loads from it are masked).
    #[inline(always)]
    fn stored(&self, at: usize) -> *const i32 {
        self.src.as_ptr().cast::<i32>().wrapping_add(at)
    }

    /// Whether lanes up to `to` complete the line: then it is written and `filled` is what
    /// spills into the next (its lanes to be set by the caller, the lanes above them zero, as
    /// a masked load leaves them), else `filled` is `to`.
    ///
    /// # Safety
    /// As [`emit`](Self::emit).
    #[inline(always)]
    unsafe fn completes(&mut self, to: usize) -> bool {
        if to < LINE {
            self.filled = to;
            return false;
        }
        // SAFETY: the caller's contract.
        unsafe { self.emit(self.values) };
        self.filled = to - LINE;
        true
    }

    /// Takes the run of `len` values (more than a line) from stored value `at` into the
    /// lines: the line begun completed by its first values, whole lines loaded and written as
    /// they are, its last values begun as the next line.
    ///
    /// # Safety
    /// As [`emit`](Self::emit), for every line the run reaches; the run is stored; `len` is
    /// more than [`LINE`].
    #[inline(always)]
    unsafe fn run(&mut self, at: usize, len: usize) {
        debug_assert!(len > LINE, "a long run");
        let mut k = 0;
        // SAFETY: each piece is the run's (stored, the caller's contract), `short` ones at most
        // a line; the CPU has AVX-512.
        unsafe {
            if self.filled > 0 {
                k = LINE - self.filled;
                self.short(at, k);
            }
            while len - k >= LINE {
                self.emit(_mm512_loadu_epi32(self.stored(at + k)));
                k += LINE;
            }
            if k < len {
                self.short(at + k, len - k);
            }
        }
    }
}

/// Writes `walk`'s runs of `src` into `dst` (a batch's sample), mapped by `f`.
///
/// # Panics
/// Where [`applies`] does not hold.
///
/// # Safety
/// The CPU has AVX-512 (F) and BMI2.
#[target_feature(enable = "avx512f,bmi2")]
pub(super) unsafe fn lines<T: Element, U>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    walk: Walk,
    f: impl Fn(T) -> U + Copy,
) {
    assert!(applies::<T, U>(&walk), "4-byte values, some axis reversed");
    assert!(
        src.len() == dst.len() * 4 && walk.elements == dst.len(),
        "sample size"
    );
    let inner = walk.inner;
    // The first line starts at the last 64-byte boundary at or before the sample.
    let address = dst.as_ptr() as usize;
    assert_eq!(address % 4, 0, "4-byte values aligned");
    let before = address % 64 / 4;
    let mut line = Line {
        src,
        f,
        values: _mm512_setzero_si512(),
        filled: before,
        low: before,
        to: dst.as_mut_ptr().cast::<U>().wrapping_sub(before),
        _types: std::marker::PhantomData,
    };
    if inner == 1 {
        // The last axis reversed: each row read backwards, a line of it at a time.
        walk.for_each_row(|_, first, count, step| {
            assert_eq!(step, -1, "a row of single values read backwards");
            let mut k = 0;
            while k < count {
                let len = (count - k).min(LINE);
                // SAFETY: the row's values are stored (`first - count + 1..=first`, within the
                // sample, as below); as below for the lines and the CPU.
                unsafe { line.backward(first - k, len) };
                k += len;
            }
        });
    } else {
        walk.for_each_row(|_, first, count, step| {
            for j in 0..count {
                let at = (first as isize + j as isize * step) as usize;
                // SAFETY: the run is stored (the walk's offsets are within its sample, of
                // `dst.len()` values, stored, asserted above); the lines it reaches are `dst`'s
                // (from the first line's lane `before` on) and aligned (from the boundary before
                // the sample); the CPU has AVX-512 (the caller's contract); `short` takes runs of
                // at most a line.
                unsafe {
                    if inner <= LINE {
                        line.short(at, inner)
                    } else {
                        line.run(at, inner)
                    }
                };
            }
        });
    }
    if line.filled > line.low {
        // The last line, partial: its lanes `low..filled`, with a plain store.
        // SAFETY: as above.
        unsafe {
            let mapped = line.mapped(line.values);
            let mask = lanes(line.low, line.filled);
            _mm512_mask_storeu_epi32(line.to.cast::<i32>(), mask, mapped);
        }
    }
    // The streamed stores ordered before whatever this thread does next (handing the batch on).
    _mm_sfence();
}
