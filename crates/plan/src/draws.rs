//! The draws of an epoch, or what is left of them: positions of the epoch's order
//! ([`EpochOrder`](crate::order::EpochOrder)), each as many times as it is drawn, in strata.
//!
//! An epoch without sampling draws every row once, in one stratum: [`Draws::full`]. A weighted
//! epoch draws rows with replacement (a row may come twice); a balanced one keeps each label's
//! draws in a stratum of their own, so that dealing the draws to ranks gives every rank each
//! stratum's share ([`share`](crate::order::share)). A position is in one stratum only (a row has one label).
//!
//! A stratum is kept as runs, sorted and disjoint: a range of positions each drawn the same
//! number of times. Every row of a table once is one run, whatever the table's size.
//!
//! ```
//! use voxlake_plan::draws::Draws;
//!
//! // Positions 2 and 5 drawn twice, 3 once; another stratum holds 8.
//! let draws = Draws::from_strata(vec![vec![5, 2, 3, 2, 5], vec![8]]);
//! assert_eq!((draws.len(), draws.strata_len()), (6, vec![5, 1]));
//! // Delivered draws leave the set one occurrence at a time.
//! assert_eq!(draws.without(&[2, 8, 2]).strata_len(), vec![3, 0]);
//! ```

use std::ops::Range;

/// Positions drawn a number of times each, as sorted disjoint runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Runs {
    /// `(positions, times each is drawn)`, sorted, disjoint, times ≥ 1.
    runs: Vec<(Range<u64>, u32)>,
    pub(crate) len: u64,
}

impl Runs {
    fn full(n: u64) -> Self {
        Runs {
            runs: if n > 0 { vec![(0..n, 1)] } else { Vec::new() },
            len: n,
        }
    }

    /// From positions in any order, duplicates counted.
    fn from_positions(mut positions: Vec<u64>) -> Self {
        positions.sort_unstable();
        let mut out = Runs::default();
        let mut i = 0;
        while i < positions.len() {
            let p = positions[i];
            let mut times = 0u32;
            while i < positions.len() && positions[i] == p {
                times = times.saturating_add(1);
                i += 1;
            }
            out.push(p..p + 1, times);
        }
        out
    }

    /// Appends a run after the last one, merged with it where it continues it.
    fn push(&mut self, range: Range<u64>, times: u32) {
        if range.is_empty() || times == 0 {
            return;
        }
        self.len += (range.end - range.start) * u64::from(times);
        match self.runs.last_mut() {
            Some((last, t)) if last.end == range.start && *t == times => last.end = range.end,
            _ => self.runs.push((range, times)),
        }
    }

    /// The draws with indices `from..to` in sequence order (each position as many times as it
    /// is drawn, positions ascending), as ranges: a run drawn once gives one range, a position
    /// drawn `k` times `k` ranges of one position.
    pub(crate) fn slice(&self, from: u64, to: u64) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut skipped = 0u64;
        for (range, times) in &self.runs {
            if skipped >= to {
                break;
            }
            let t = u64::from(*times);
            let n = (range.end - range.start) * t;
            let (lo, hi) = (from.max(skipped), to.min(skipped + n));
            if lo < hi {
                let (lo, hi) = (lo - skipped, hi - skipped);
                if t == 1 {
                    out.push(range.start + lo..range.start + hi);
                } else {
                    for k in lo..hi {
                        let p = range.start + k / t;
                        out.push(p..p + 1);
                    }
                }
            }
            skipped += n;
        }
        out
    }

    /// The draws less one occurrence of each of `cut` (sorted; duplicates remove as many
    /// occurrences; positions not drawn are ignored).
    fn without(&self, cut: &[u64]) -> Runs {
        let mut out = Runs::default();
        let mut c = 0usize;
        for (range, times) in &self.runs {
            let mut at = range.start;
            while c < cut.len() && cut[c] < range.end {
                let p = cut[c];
                let mut gone = 0u32;
                while c < cut.len() && cut[c] == p {
                    gone = gone.saturating_add(1);
                    c += 1;
                }
                if p < at {
                    continue;
                }
                out.push(at..p, *times);
                out.push(p..p + 1, times.saturating_sub(gone));
                at = p + 1;
            }
            out.push(at..range.end, *times);
        }
        out
    }
}

/// The draws of an epoch (or those left of it): see the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Draws {
    strata: Vec<Runs>,
}

impl Draws {
    /// Every position of `0..n` once, in one stratum: an epoch without sampling.
    pub fn full(n: u64) -> Self {
        Draws {
            strata: vec![Runs::full(n)],
        }
    }

    /// Draws from positions (any order; a position listed `k` times is drawn `k` times), one
    /// list a stratum. A position must not be in two strata.
    pub fn from_strata(strata: Vec<Vec<u64>>) -> Self {
        Draws {
            strata: strata.into_iter().map(Runs::from_positions).collect(),
        }
    }

    /// Number of draws.
    pub fn len(&self) -> u64 {
        self.strata.iter().map(|s| s.len).sum()
    }

    /// Whether there is no draw.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Draws per stratum.
    pub fn strata_len(&self) -> Vec<u64> {
        self.strata.iter().map(|s| s.len).collect()
    }

    /// The draws less one occurrence of each of `positions` (any order; a position listed
    /// `k` times removes `k` occurrences; positions not drawn are ignored).
    pub fn without(&self, positions: &[u64]) -> Draws {
        let mut cut = positions.to_vec();
        cut.sort_unstable();
        Draws {
            strata: self.strata.iter().map(|s| s.without(&cut)).collect(),
        }
    }

    /// The strata.
    pub(crate) fn strata(&self) -> &[Runs] {
        &self.strata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(ranges: &[Range<u64>]) -> Vec<u64> {
        ranges.iter().flat_map(|r| r.clone()).collect()
    }

    #[test]
    fn runs_slice_and_cut_one_occurrence_at_a_time() {
        let d = Draws::from_strata(vec![vec![4, 1, 2, 2, 3, 9, 9, 9]]);
        assert_eq!(d.len(), 8);
        assert_eq!(
            expand(&d.strata[0].slice(0, 8)),
            vec![1, 2, 2, 3, 4, 9, 9, 9]
        );
        assert_eq!(expand(&d.strata[0].slice(2, 6)), vec![2, 3, 4, 9]);
        let left = d.without(&[9, 2, 9, 7]);
        assert_eq!(expand(&left.strata[0].slice(0, 5)), vec![1, 2, 3, 4, 9]);
        assert_eq!(
            Draws::full(5).without(&[0, 4]).strata[0].runs,
            vec![(1..4, 1)]
        );
        assert!(Draws::full(0).is_empty());
    }
}
