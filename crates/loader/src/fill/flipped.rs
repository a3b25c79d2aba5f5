//! A sample written with some axes reversed and a map applied to each value, in one pass from
//! its stored bytes (the copy that makes flips, a normalization and a cast: `assemble/direct`).
//!
//! Read with axes reversed, a sample is short runs (the axes after the last reversed one) taken
//! against memory's order, which the hardware's prefetching does not follow: the walk asks for
//! each run's lines some runs ahead. (Staging the output in L1 and streaming it into the batch,
//! as `copy_sample` streams a plain copy, measured slower: docs/benchmarks.md.)

use std::mem::MaybeUninit;

use super::Element;

/// How far ahead of the run being read its successors' lines are asked for, in bytes.
const AHEAD_BYTES: usize = 2 << 10;

/// Lines of a run asked for ahead at most (a longer run is read forward: the hardware follows).
const AHEAD_LINES: usize = 8;

/// Values mapped at a time: SSE2's four lanes of `f32`.
const LANES: usize = 4;

/// Writes one sample (`src`: little-endian `T`s, C order, of `shape`) into `dst` with the
/// `reversed` axes reversed and `f` applied to each value, in one pass: the axes after the last
/// reversed one are read as runs, forward. Every element of `dst` is written.
pub(crate) fn fill_flipped<T: Element, U>(
    dst: &mut [MaybeUninit<U>],
    src: &[u8],
    shape: &[usize],
    reversed: &[bool],
    f: impl Fn(T) -> U + Copy,
) {
    let size = std::mem::size_of::<T>();
    assert_eq!(src.len(), dst.len() * size, "sample size");
    if dst.is_empty() {
        return;
    }
    let walk = Walk::new(shape, reversed);
    let inner = walk.inner;
    let run_bytes = inner * size;
    let ahead_runs = (AHEAD_BYTES / run_bytes.max(1)).max(1);
    let ahead_lines = run_bytes.div_ceil(64).min(AHEAD_LINES);
    let mut ahead = walk.clone().skip(ahead_runs);
    for (written, at) in (0..).step_by(inner).zip(walk) {
        if let Some(next) = ahead.next() {
            prefetch(&src[next * size..], ahead_lines);
        }
        map_run(&mut dst[written..written + inner], src, at, f);
    }
}

/// The offsets (in elements) of a reversed walk's runs, in the order a C-order walk of the
/// output meets them: an odometer over the axes up to the last reversed one.
#[derive(Debug, Clone)]
struct Walk {
    /// Each walked axis's length and signed step (its stride, negated where reversed).
    axes: Vec<(usize, isize)>,
    /// Where the odometer stands on each walked axis.
    at: Vec<usize>,
    /// The next run's offset; `None` once past the last.
    next: Option<usize>,
    /// Elements in a run: the product of the axes not walked.
    inner: usize,
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

/// Asks memory for the first `lines` cache lines of `bytes` (those it has).
#[inline(always)]
fn prefetch(bytes: &[u8], lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes.len()).step_by(64).take(lines) {
        // SAFETY: a prefetch reads nothing and cannot fault; the address is within `bytes`.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(line).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, lines);
}

/// Writes `out.len()` values from element `at` of `src` (little-endian `T`s), mapped by `f`,
/// [`LANES`] at a time: a run's last lanes overlap the ones before (writing the same values
/// again) rather than finishing one value at a time.
#[inline(always)]
fn map_run<T: Element, U>(
    out: &mut [MaybeUninit<U>],
    src: &[u8],
    at: usize,
    f: impl Fn(T) -> U + Copy,
) {
    let size = std::mem::size_of::<T>();
    let n = out.len();
    let run = &src[at * size..(at + n) * size];
    let read = |j: usize| -> T {
        if T::ANY_BITS && cfg!(target_endian = "little") {
            // SAFETY: `j < n` and `run` holds `n` `T`s (sliced above), any bit pattern of which
            // is a value, stored in the host's byte order; unaligned reads.
            unsafe { run.as_ptr().cast::<T>().add(j).read_unaligned() }
        } else {
            T::from_le(&run[j * size..(j + 1) * size])
        }
    };
    if n < LANES {
        for (j, d) in out.iter_mut().enumerate() {
            d.write(f(read(j)));
        }
        return;
    }
    let lanes = |j: usize, out: &mut [MaybeUninit<U>]| {
        let values: [T; LANES] = std::array::from_fn(|l| read(j + l));
        for (d, v) in out[j..j + LANES].iter_mut().zip(values) {
            d.write(f(v));
        }
    };
    let mut j = 0;
    while j + LANES <= n {
        lanes(j, out);
        j += LANES;
    }
    if j < n {
        lanes(n - LANES, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large sample and a small one, each with every choice of reversed axes and a value
    /// map, land as a walk by index makes them.
    #[test]
    fn flipped_samples_land_as_indexed() {
        for shape in [vec![30usize, 17, 9, 11], vec![3, 4, 5]] {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|v| v as f32 * 0.5 - 7.0).collect();
            let src: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            for mask in 0..1u32 << shape.len() {
                let reversed: Vec<bool> = (0..shape.len()).map(|d| mask >> d & 1 == 1).collect();
                let mut want = vec![0.0f32; n];
                for (i, w) in want.iter_mut().enumerate() {
                    // The element `i` reads: its index along each axis, mirrored where reversed.
                    let (mut rest, mut from, mut stride) = (i, 0, n);
                    for (d, &len) in shape.iter().enumerate() {
                        stride /= len;
                        let j = rest / stride;
                        rest %= stride;
                        from += if reversed[d] { len - 1 - j } else { j } * stride;
                    }
                    *w = values[from] * 2.0 + 1.0;
                }
                // One element's offset: the stores' alignment differs from the buffer's.
                let mut dst = vec![MaybeUninit::<f32>::uninit(); n + 1];
                fill_flipped::<f32, f32>(&mut dst[1..], &src, &shape, &reversed, |x| x * 2.0 + 1.0);
                // SAFETY: every element written (the function's contract).
                let got: Vec<f32> = dst[1..]
                    .iter()
                    .map(|v| unsafe { v.assume_init() })
                    .collect();
                assert!(got == want, "{shape:?} {reversed:?}");
            }
        }
    }
}
