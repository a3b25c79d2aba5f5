//! A sample written with some axes reversed and a map applied to each value, in one pass from
//! its stored bytes (the copy that makes flips, a normalization and a cast: `assemble/direct`).
//!
//! Read with axes reversed, a sample is short runs (the axes after the last reversed one) taken
//! against memory's order. The runs of the last reversed axis lie side by side: they are a loop
//! of their own, and an odometer over the axes before it moves once a row. The sample's bytes
//! are in the core's cache when it runs (its row checked just before, `fill::Check`), so the
//! out-of-order runs cost no trips to memory. (Asking for each run's lines ahead, and staging
//! the output in L1 to stream it into the batch, measured slower: docs/benchmarks.md.)

use std::mem::MaybeUninit;

use super::Element;

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
    let mut walk = Walk::new(shape, reversed);
    let inner = walk.inner;
    // The last walked axis (reversed) is a row of runs `step` apart: a loop of its own, the
    // odometer moved once a row.
    let (count, step) = walk.split_last_axis();
    for (first, row) in walk.zip((0..).step_by(count * inner)) {
        for j in 0..count {
            let at = (first as isize + j as isize * step) as usize;
            let written = row + j * inner;
            map_run(&mut dst[written..written + inner], src, at, f);
        }
    }
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

    /// Takes the last walked axis out of the odometer: its length and signed step (one run of
    /// `inner` values when no axis is reversed), walked by the caller for each offset the
    /// odometer gives.
    fn split_last_axis(&mut self) -> (usize, isize) {
        self.at.pop();
        self.axes.pop().unwrap_or((1, 0))
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
