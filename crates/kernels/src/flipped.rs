//! A sample written with some axes reversed and a map applied to each value, in one pass from
//! its stored bytes (the copy that makes flips, a normalization and a cast: the loader's direct transforms).
//!
//! Read with axes reversed, a sample is short runs (the axes after the last reversed one) taken
//! against memory's order. The runs of the last reversed axis lie side by side: they are a row,
//! a loop of its own, and an odometer over the axes before it moves once a row. The sample's
//! bytes are in the core's cache when it runs (its row checked just before, [`Check`](crate::Check)), so
//! the out-of-order runs' reads cost no trips to memory. Into a batch, the copy's cost is then
//! mostly its stores (each line loaded before it is written); into a cache, its instructions.
//! So each run is a fixed number of vector-wide groups chosen once a sample by the run's length
//! (a loop of two groups and a tail per run measured slower), a run of one value is a row read
//! backwards a group at a time, and on x86_64 with AVX2 the groups are eight lanes wide, so a
//! normalization's divisions take half the instructions (docs/benchmarks.md has the figures).
//! With AVX-512, a batch's sample of 4-byte values is written a whole line at a time past the
//! caches instead (`lines`), whichever axes are reversed.

use std::mem::MaybeUninit;

use std::cell::RefCell;

use half::slice::HalfFloatSliceExt;

use super::{Dest, Element};

#[cfg(target_arch = "x86_64")]
mod lines;

/// Writes one sample (`src`: little-endian `T`s, C order, of `shape`) into `dst` with the
/// `reversed` axes reversed and `f` applied to each value, in one pass: the axes after the last
/// reversed one are read as runs, forward. Every element of `dst` is written; `to` says what
/// `dst` is (a batch's memory may be written past the caches, a thread's own buffer never).
///
/// # Panics
/// Where `src` is not `dst`'s size in `T`s, or `shape` and `reversed` do not describe `dst`.
pub fn fill_flipped<T: Element, U>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    shape: &[usize],
    reversed: &[bool],
    f: impl Fn(T) -> U + Copy,
    to: Dest,
) {
    let size = std::mem::size_of::<T>();
    assert_eq!(src.len(), dst.len() * size, "sample size");
    if dst.is_empty() {
        return;
    }
    let walk = Walk::new(shape, reversed);
    if !(T::ANY_BITS && cfg!(target_endian = "little")) {
        // Converted value by value: no group reads the stored bytes as values.
        let inner = walk.inner;
        return walk.for_each_row(|row, first, count, step| {
            for (written, at) in runs(row, first, count, step, inner) {
                for k in 0..inner {
                    let from = (at + k) * size;
                    dst[written + k].write(f(T::from_le(&src[from..from + size])));
                }
            }
        });
    }
    #[cfg(target_arch = "x86_64")]
    if to == Dest::Batch
        && lines::applies::<T, U>(&walk)
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("bmi2")
    {
        // SAFETY: the CPU has AVX-512 and BMI2 (detected just above).
        return unsafe { lines::lines(dst, src, walk, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (detected just above).
        return unsafe { in_groups_avx2(dst, src, walk, f, to) };
    }
    in_groups::<T, U, 4>(dst, src, walk, f)
}

/// [`fill_flipped`] into `f16`s or `bf16`s (the batch's): the values mapped into an `f32` stage
/// (the thread's, in its cache) and converted into the batch by `half`'s slice conversion
/// (`f16`: eight at a time with F16C where the CPU has it). Converted one value at a time (a
/// call each), the cast was most of the copy's time (docs/benchmarks.md).
pub fn fill_flipped_half<H: Copy + Default>(
    dst: &mut [MaybeUninit<H>],
    src: &[u8],
    shape: &[usize],
    reversed: &[bool],
    f: impl Fn(f32) -> f32 + Copy,
) where
    [H]: HalfFloatSliceExt,
{
    /// Values a thread's stage keeps from one sample to the next at most (a larger sample's
    /// stage is let go after it).
    const KEPT: usize = 4 << 20;
    /// Values converted at a time, through a buffer on the stack (`dst` may be uninitialized).
    const CHUNK: usize = 512;
    thread_local! {
        static STAGE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    STAGE.with_borrow_mut(|stage| {
        stage.clear();
        stage.reserve(dst.len());
        let staged = &mut stage.spare_capacity_mut()[..dst.len()];
        fill_flipped::<f32, f32>(staged, src, shape, reversed, f, Dest::Near);
        // SAFETY: `fill_flipped` wrote every element of `staged`.
        let values = unsafe { &*(staged as *const [MaybeUninit<f32>] as *const [f32]) };
        for (out, values) in dst.chunks_mut(CHUNK).zip(values.chunks(CHUNK)) {
            let mut halves = [H::default(); CHUNK];
            halves[..values.len()].convert_from_f32_slice(values);
            for (d, h) in out.iter_mut().zip(halves) {
                d.write(h);
            }
        }
        if stage.capacity() > KEPT {
            *stage = Vec::new();
        }
    });
}

/// [`in_groups`] eight lanes wide, compiled for AVX2 (the groups' arithmetic and moves in its
/// 256-bit registers).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn in_groups_avx2<T: Element, U>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    walk: Walk,
    f: impl Fn(T) -> U + Copy,
    to: Dest,
) {
    if to == Dest::Batch && walk.axes.is_empty() && std::mem::size_of::<U>() == 4 {
        // SAFETY: the caller's contract.
        return unsafe { streamed(dst, src, f) };
    }
    in_groups::<T, U, 8>(dst, src, walk, f)
}

/// A sample with no axis reversed (one run: a normalization or a cast alone) of 4-byte values,
/// its whole lines written past the caches (streaming stores), as `copy_sample` writes a
/// batch: a batch is read next by another thread, so loading its lines before overwriting them
/// only adds memory traffic. The partial lines at either end take plain stores, a value at a
/// time: a line half streamed and half stored costs far more than either.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn streamed<T: Element, U>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    f: impl Fn(T) -> U + Copy,
) {
    use std::arch::x86_64::{__m256i, _mm_sfence, _mm256_stream_si256};
    const L: usize = 8;
    const LINE: usize = 16;
    assert_eq!(
        std::mem::size_of::<[U; L]>(),
        32,
        "a group fills a 256-bit store"
    );
    let n = dst.len();
    let head = dst.as_ptr().align_offset(64).min(n);
    let lines = (n - head) / LINE;
    let one = |dst: &mut [MaybeUninit<U>], k: usize| {
        dst[k].write(f(read::<T, 1>(src, k)[0]));
    };
    (0..head).for_each(|k| one(dst, k));
    let body = &mut dst[head..head + lines * LINE];
    for (line, out) in body.chunks_exact_mut(LINE).enumerate() {
        let at = head + line * LINE;
        for (half, out) in out.chunks_exact_mut(L).enumerate() {
            let values = read::<T, L>(src, at + half * L).map(f);
            // SAFETY: `out` is `L` values, 32 bytes (asserted above), at a 32-byte boundary
            // (whole lines from the first 64-byte boundary on), and so is `values`; the CPU has
            // AVX2 (the caller's contract).
            unsafe {
                _mm256_stream_si256(
                    out.as_mut_ptr().cast::<__m256i>(),
                    std::mem::transmute_copy::<[U; L], __m256i>(&values),
                );
            }
        }
    }
    (head + lines * LINE..n).for_each(|k| one(dst, k));
    // The streamed stores ordered before whatever this thread does next (handing the batch on).
    _mm_sfence();
}

/// Writes `walk`'s runs `L` values at a time, the groups of a run chosen once for the sample by
/// its length: the last group of a run overlaps the one before (writing the same values again)
/// rather than finishing value by value.
#[inline(always)]
fn in_groups<T: Element, U, const L: usize>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    walk: Walk,
    f: impl Fn(T) -> U + Copy,
) {
    let inner = walk.inner;
    // Each run `at` (elements into `src`) written at `written`, by the groups its length takes.
    macro_rules! each_run {
        (|$written:ident, $at:ident| $body:expr) => {
            walk.for_each_row(|row, first, count, step| {
                for ($written, $at) in runs(row, first, count, step, inner) {
                    $body
                }
            })
        };
    }
    match inner {
        // One value a run: the last axis reversed, each row read backwards a group at a time.
        1 => walk.for_each_row(|row, first, count, step| {
            // `step` is -1 here (the last walked axis is the reversed last axis); anything else
            // is read run by run rather than trusted.
            if count < L || step != -1 {
                for (written, at) in runs(row, first, count, step, 1) {
                    dst[written].write(f(read::<T, 1>(src, at)[0]));
                }
                return;
            }
            let mut j = 0;
            while j + L <= count {
                group::<T, U, L>(dst, src, (row + j, first - j - (L - 1)), true, f);
                j += L;
            }
            if j < count {
                group::<T, U, L>(dst, src, (row + count - L, first + 1 - count), true, f);
            }
        }),
        2 | 3 => each_run!(|written, at| for k in 0..inner {
            dst[written + k].write(f(read::<T, 1>(src, at + k)[0]));
        }),
        n if n < L => each_run!(|written, at| {
            group::<T, U, 4>(dst, src, (written, at), false, f);
            group::<T, U, 4>(dst, src, (written + n - 4, at + n - 4), false, f);
        }),
        n if n <= 2 * L => each_run!(|written, at| {
            group::<T, U, L>(dst, src, (written, at), false, f);
            group::<T, U, L>(dst, src, (written + n - L, at + n - L), false, f);
        }),
        n => each_run!(|written, at| {
            let mut k = 0;
            while k + L <= n {
                group::<T, U, L>(dst, src, (written + k, at + k), false, f);
                k += L;
            }
            if k < n {
                group::<T, U, L>(dst, src, (written + n - L, at + n - L), false, f);
            }
        }),
    }
}

/// The `L` values from element `at` of `src`.
///
/// # Panics
/// Where `src` has not `L` values from `at`, or `T`'s stored bytes are not its values (a check
/// each type's build folds away).
#[inline(always)]
fn read<T: Element, const L: usize>(src: &[u8], at: usize) -> [T; L] {
    let size = std::mem::size_of::<T>();
    let bytes = &src[at * size..(at + L) * size];
    assert!(
        T::ANY_BITS && cfg!(target_endian = "little"),
        "stored bytes read as values"
    );
    // SAFETY: `bytes` holds `L` `T`s (sliced above), stored as the host holds them, any bit
    // pattern of which is a value (asserted above); an unaligned read.
    unsafe { bytes.as_ptr().cast::<[T; L]>().read_unaligned() }
}

/// Writes `L` values from element `at` of `src` (last first where `backwards`), mapped by `f`,
/// at `written` in `dst`.
#[inline(always)]
fn group<T: Element, U, const L: usize>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    (written, at): (usize, usize),
    backwards: bool,
    f: impl Fn(T) -> U + Copy,
) {
    let mut values = read::<T, L>(src, at);
    if backwards {
        values.reverse();
    }
    for (d, v) in dst[written..written + L].iter_mut().zip(values) {
        d.write(f(v));
    }
}

/// A row's runs: where each is written and where it is read (elements), `inner` values each.
#[inline(always)]
fn runs(
    row: usize,
    first: usize,
    count: usize,
    step: isize,
    inner: usize,
) -> impl Iterator<Item = (usize, usize)> {
    (0..count).map(move |j| {
        (
            row + j * inner,
            (first as isize + j as isize * step) as usize,
        )
    })
}

/// The offsets (in elements) of a reversed walk's runs, in the order a C-order walk of the
/// output meets them: an odometer over the axes up to the last reversed one.
#[derive(Debug)]
struct Walk {
    /// Each walked axis's length and signed step (its stride, negated where reversed).
    axes: Vec<(usize, isize)>,
    /// Where the odometer stands on each walked axis.
    at: Vec<usize>,
    /// The next run's offset; `None` once past the last.
    next: Option<usize>,
    /// Elements in a run: the product of the axes not walked.
    inner: usize,
    /// Elements in the sample: the product of every axis.
    elements: usize,
}

impl Walk {
    fn new(shape: &[usize], reversed: &[bool]) -> Walk {
        let k = reversed.iter().rposition(|&r| r).map_or(0, |d| d + 1);
        let inner = shape[k..].iter().product();
        let mut start = 0;
        let axes: Vec<(usize, isize)> = (0..k)
            .map(|d| {
                let stride: usize = shape[d + 1..].iter().product();
                if reversed[d] {
                    start += (shape[d] - 1) * stride;
                    (shape[d], -(stride as isize))
                } else {
                    (shape[d], stride as isize)
                }
            })
            .collect();
        let empty = shape.contains(&0);
        Walk {
            at: vec![0; axes.len()],
            axes,
            next: (!empty).then_some(start),
            inner,
            elements: shape.iter().product(),
        }
    }

    /// Calls `row(written, first, count, step)` for each row: the last walked axis (reversed)
    /// taken out of the odometer, its `count` runs `step` apart from `first` (one run of
    /// `inner` values when no axis is reversed), written from `written` on. The axis before it
    /// is a plain loop too, the odometer moving once a pass of it.
    #[inline(always)]
    fn for_each_row(mut self, mut row: impl FnMut(usize, usize, usize, isize)) {
        self.at.pop();
        let (count, step) = self.axes.pop().unwrap_or((1, 0));
        // (A step of the odometer is a loop over its axes: taken once a pass of this one.)
        self.at.pop();
        let (rows, apart) = self.axes.pop().unwrap_or((1, 0));
        let length = count * self.inner;
        let mut written = 0;
        for start in self {
            let mut first = start as isize;
            for _ in 0..rows {
                row(written, first as usize, count, step);
                first += apart;
                written += length;
            }
        }
    }
}

impl Iterator for Walk {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let now = self.next?;
        let mut offset = now as isize;
        self.next = None;
        for (d, &(len, step)) in self.axes.iter().enumerate().rev() {
            if self.at[d] + 1 < len {
                self.at[d] += 1;
                self.next = Some((offset + step) as usize);
                break;
            }
            // This axis wraps to its start; the one before it moves on.
            offset -= step * (len as isize - 1);
            self.at[d] = 0;
        }
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;

    /// What a walk by index makes of `values` (of `shape`) with the `reversed` axes reversed.
    fn indexed<V: Copy>(values: &[V], shape: &[usize], reversed: &[bool]) -> Vec<V> {
        let n = values.len();
        (0..n)
            .map(|i| {
                // The element `i` reads: its index along each axis, mirrored where reversed.
                let (mut rest, mut from, mut stride) = (i, 0, n);
                for (d, &len) in shape.iter().enumerate() {
                    stride /= len;
                    let j = rest / stride;
                    rest %= stride;
                    from += if reversed[d] { len - 1 - j } else { j } * stride;
                }
                values[from]
            })
            .collect()
    }

    /// [`fill_flipped_half`] of `src` (of `shape`, its `reversed` axes reversed and mapped as
    /// `want` was) into `H`s from element `offset` of a buffer: each value's bits those
    /// `from_f32` makes of `want`'s.
    fn halves_land<H: Copy + Default>(
        (src, shape, reversed, want): (&[u8], &[usize], &[bool], &[f32]),
        offset: usize,
        from_f32: fn(f32) -> H,
        to_bits: fn(H) -> u16,
    ) where
        [H]: HalfFloatSliceExt,
    {
        let mut dst = vec![MaybeUninit::<H>::uninit(); want.len() + offset];
        fill_flipped_half(&mut dst[offset..], src, shape, reversed, |x| x * 2.0 + 1.0);
        // SAFETY: every element written (the function's contract).
        let got: Vec<u16> = dst[offset..]
            .iter()
            .map(|v| to_bits(unsafe { v.assume_init() }))
            .collect();
        let halves: Vec<u16> = want.iter().map(|&x| to_bits(from_f32(x))).collect();
        let kind = std::any::type_name::<H>();
        assert!(got == halves, "{kind} {shape:?} {reversed:?}");
    }

    /// Runs of every length class (one value, two and three, under four, one and two groups
    /// of four and of eight, longer), each with every choice of reversed axes, land as a walk
    /// by index makes them: through the four-lane groups, the eight-lane ones and whatever this
    /// CPU takes (with AVX2, no axis reversed: streamed, from an unaligned start), into a
    /// thread's own buffer (never streamed), mapped (`f32` → `f32`) and cast (→ `f16`, `bf16`,
    /// through a stage), as bytes (`u8`) and converted (`bool`).
    #[test]
    fn flipped_samples_land_as_indexed() {
        let shapes: [&[usize]; 10] = [
            &[30, 17, 9, 11],
            &[3, 4, 5],
            &[5, 9, 1],
            &[4, 6, 2],
            &[6, 3, 3],
            &[2, 7, 7],
            &[3, 5, 8],
            &[3, 3, 13],
            &[2, 4, 17],
            &[1, 3, 40],
        ];
        for shape in shapes {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|v| v as f32 * 0.5 - 7.0).collect();
            let src: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let bytes: Vec<u8> = (0..n).map(|v| (v * 7 % 251) as u8).collect();
            let bools: Vec<u8> = (0..n).map(|v| u8::from(v % 3 == 0)).collect();
            for mask in 0..1u32 << shape.len() {
                let reversed: Vec<bool> = (0..shape.len()).map(|d| mask >> d & 1 == 1).collect();
                let want: Vec<f32> = indexed(&values, shape, &reversed)
                    .iter()
                    .map(|x| x * 2.0 + 1.0)
                    .collect();
                type Fill = fn(&mut [MaybeUninit<f32>], &[u8], &[usize], &[bool]);
                let ways: [(&str, Fill); 4] = [
                    ("dispatched", |d, s, shape, r| {
                        fill_flipped::<f32, f32>(d, s, shape, r, |x| x * 2.0 + 1.0, Dest::Batch)
                    }),
                    ("near", |d, s, shape, r| {
                        fill_flipped::<f32, f32>(d, s, shape, r, |x| x * 2.0 + 1.0, Dest::Near)
                    }),
                    // The lanes' ways read stored bytes as values: little-endian hosts only
                    // (`skip` below).
                    ("4 lanes", |d, s, shape, r| {
                        in_groups::<f32, f32, 4>(d, s, Walk::new(shape, r), |x| x * 2.0 + 1.0)
                    }),
                    ("8 lanes", |d, s, shape, r| {
                        in_groups::<f32, f32, 8>(d, s, Walk::new(shape, r), |x| x * 2.0 + 1.0)
                    }),
                ];
                let skip = if cfg!(target_endian = "little") { 0 } else { 2 };
                for (way, fill) in ways.into_iter().take(4 - skip) {
                    // One element's offset: the stores' alignment differs from the buffer's.
                    let mut dst = vec![MaybeUninit::<f32>::uninit(); n + 1];
                    fill(&mut dst[1..], &src, shape, &reversed);
                    // SAFETY: every element written (the function's contract).
                    let got: Vec<f32> = dst[1..]
                        .iter()
                        .map(|v| unsafe { v.assume_init() })
                        .collect();
                    assert!(got == want, "{way} {shape:?} {reversed:?}");
                }
                // Into `f16`s and `bf16`s: each value `half` makes of the mapped `f32`, bit for
                // bit.
                // (`f16` from an element's offset: the conversion's stores unaligned.)
                let case = (&src[..], shape, &reversed[..], &want[..]);
                halves_land(case, 1, f16::from_f32, f16::to_bits);
                halves_land(case, 0, bf16::from_f32, bf16::to_bits);
                let mut dst = vec![MaybeUninit::<u8>::uninit(); n];
                fill_flipped::<u8, u8>(&mut dst, &bytes, shape, &reversed, |x| x, Dest::Batch);
                // SAFETY: as above.
                let got: Vec<u8> = dst.iter().map(|v| unsafe { v.assume_init() }).collect();
                assert_eq!(
                    got,
                    indexed(&bytes, shape, &reversed),
                    "u8 {shape:?} {reversed:?}"
                );
                let mut dst = vec![MaybeUninit::<bool>::uninit(); n];
                fill_flipped::<bool, bool>(&mut dst, &bools, shape, &reversed, |x| x, Dest::Batch);
                // SAFETY: as above.
                let got: Vec<bool> = dst.iter().map(|v| unsafe { v.assume_init() }).collect();
                let want: Vec<bool> = indexed(&bools, shape, &reversed)
                    .iter()
                    .map(|&b| b != 0)
                    .collect();
                assert_eq!(got, want, "bool {shape:?} {reversed:?}");
            }
        }
    }

    /// Samples whose runs are long enough to be streamed a line at a time (`lines`, where the
    /// CPU has AVX-512) land as a walk by index makes them from every offset to a 64-byte
    /// line (the partial first and last lines, a sample within one line), and nothing around
    /// them is written.
    #[test]
    fn streamed_lines_land_at_every_offset() {
        const GUARD: u32 = 0x7fc0_dead;
        let shapes: [&[usize]; 10] = [
            &[3, 2, 8],
            &[2, 3, 10],
            &[3, 2, 16],
            &[4, 17],
            &[5, 1, 40],
            &[1, 1, 9],
            &[6, 5, 10, 10],
            &[7, 3, 2],
            &[5, 4, 3],
            &[2, 9, 2, 7],
        ];
        let f = |x: f32| x * 2.0 + 1.0;
        for shape in shapes {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|v| v as f32 * 0.5 - 7.0).collect();
            let src: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            // Every choice of reversed axes (with the last: rows read backwards).
            for mask in 1..1u32 << shape.len() {
                let reversed: Vec<bool> = (0..shape.len()).map(|d| mask >> d & 1 == 1).collect();
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx512f") {
                    let walk = Walk::new(shape, &reversed);
                    assert!(lines::applies::<f32, f32>(&walk), "{shape:?} {reversed:?}");
                }
                let want: Vec<u32> = indexed(&values, shape, &reversed)
                    .iter()
                    .map(|&x| f(x).to_bits())
                    .collect();
                for offset in 0..16 {
                    // A line-aligned buffer: 16 guard values, the sample from `offset` on, 32
                    // guards after it.
                    let mut buffer = vec![MaybeUninit::<f32>::uninit(); n + 80];
                    let start = buffer.as_ptr().align_offset(64) + 16;
                    for v in &mut buffer {
                        v.write(f32::from_bits(GUARD));
                    }
                    let at = start + offset;
                    fill_flipped::<f32, f32>(
                        &mut buffer[at..at + n],
                        &src,
                        shape,
                        &reversed,
                        f,
                        Dest::Batch,
                    );
                    // SAFETY: every element written (the guards above, the sample's by
                    // `fill_flipped`).
                    let got: Vec<u32> = buffer
                        .iter()
                        .map(|v| unsafe { v.assume_init() }.to_bits())
                        .collect();
                    let case = format!("{shape:?} {reversed:?} offset {offset}");
                    assert!(got[at..at + n] == want[..], "{case}");
                    assert!(got[..at].iter().all(|&g| g == GUARD), "{case}: before");
                    assert!(got[at + n..].iter().all(|&g| g == GUARD), "{case}: after");
                }
            }
        }
    }

    /// Stored bytes in memory with no access allowed on either side: a read outside them
    /// (a load's lane not masked off where it should be) faults.
    struct Fenced {
        base: *mut libc::c_void,
        total: usize,
        /// The first byte past the front fence, and the bytes up to the back one.
        data: *mut u8,
        room: usize,
    }

    impl Fenced {
        fn new(bytes: usize) -> Fenced {
            let page = 4096;
            let room = bytes.div_ceil(page) * page;
            let total = room + 2 * page;
            // SAFETY: a fresh private mapping; the fences are its first and last pages.
            unsafe {
                let base = libc::mmap(
                    std::ptr::null_mut(),
                    total,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(base, libc::MAP_FAILED, "mmap");
                let data = base.cast::<u8>().add(page);
                assert_eq!(
                    libc::mprotect(base, page, libc::PROT_NONE),
                    0,
                    "front fence"
                );
                let back = data.add(room).cast::<libc::c_void>();
                assert_eq!(libc::mprotect(back, page, libc::PROT_NONE), 0, "back fence");
                Fenced {
                    base,
                    total,
                    data,
                    room,
                }
            }
        }

        /// `bytes` copied in against the front fence (`at_end`: against the back one).
        fn place(&mut self, bytes: &[u8], at_end: bool) -> &[u8] {
            let at = if at_end { self.room - bytes.len() } else { 0 };
            // SAFETY: `at + bytes.len() <= room`, inside the mapping's writable pages.
            unsafe {
                let start = self.data.add(at);
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), start, bytes.len());
                std::slice::from_raw_parts(start, bytes.len())
            }
        }
    }

    impl Drop for Fenced {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.base, self.total) };
        }
    }

    #[test]
    fn reads_stay_within_the_stored_sample() {
        let shapes: [&[usize]; 7] = [
            &[2, 3, 10],
            &[3, 2, 16],
            &[4, 17],
            &[7, 3, 2],
            &[2, 9, 2, 7],
            &[1, 1, 9],
            &[6, 5, 10, 10],
        ];
        let f = |x: f32| x - 3.0;
        for shape in shapes {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|v| v as f32 * 0.25).collect();
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut fenced = Fenced::new(bytes.len());
            for at_end in [false, true] {
                let src = fenced.place(&bytes, at_end);
                for mask in 1..1u32 << shape.len() {
                    let reversed: Vec<bool> =
                        (0..shape.len()).map(|d| mask >> d & 1 == 1).collect();
                    let want: Vec<u32> = indexed(&values, shape, &reversed)
                        .iter()
                        .map(|&x| f(x).to_bits())
                        .collect();
                    for offset in [0, 1, 7, 15] {
                        let mut buffer = vec![MaybeUninit::<f32>::uninit(); n + 32];
                        let at = buffer.as_ptr().align_offset(64) + offset;
                        let dst = &mut buffer[at..at + n];
                        fill_flipped::<f32, f32>(dst, src, shape, &reversed, f, Dest::Batch);
                        // SAFETY: `fill_flipped` wrote every element of `dst`.
                        let got: Vec<u32> = dst
                            .iter()
                            .map(|v| unsafe { v.assume_init() }.to_bits())
                            .collect();
                        assert!(got == want, "{shape:?} {reversed:?} offset {offset}");
                    }
                }
            }
        }
    }
}
