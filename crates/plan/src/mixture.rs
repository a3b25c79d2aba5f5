//! Mixtures: several tables (sources) drawn in one epoch, each its [`Share`] of the draws.
//!
//! The sources' files are numbered one after the other (source 0's, then source 1's, …), so an
//! epoch's order, its deal to ranks and its resume are those of one table of all the files.
//! What the mixture changes is how many draws each source makes an epoch
//! ([`quotas`]); within a source, rows are drawn as the rest of the [`Sampling`](crate::sample::Sampling)
//! spec says (uniformly, balanced by label, by a weight column). Each source's draws are a
//! stratum of their own, so every rank gets each source's share within one draw.
//!
//! - `proportion`: a share of each epoch's draws, relative to the others' (`epoch_size` or
//!   `subsample` set the epoch's size; default: the rows of all sources). Every source of a
//!   mixture has one, or none does.
//! - `repeat`: draws per row per epoch (`0.5`: half its rows, a new half each epoch; `2`: every
//!   row twice); the count is rounded to the nearest draw.
//! - `choose`: draws per epoch.
//!
//! ```
//! use voxlake_plan::mixture::{Share, quotas};
//!
//! let shares = [Share::Proportion(0.6), Share::Proportion(0.3), Share::Proportion(0.1)];
//! assert_eq!(quotas(&shares, &[10, 1_000, 50], 1_000)?, vec![600, 300, 100]);
//! let shares = [Share::Repeat(2.0), Share::Choose(7), Share::Repeat(0.5)];
//! assert_eq!(quotas(&shares, &[10, 1_000, 5], 0)?, vec![20, 7, 3]);
//! # Ok::<(), voxlake_plan::sample::SamplingError>(())
//! ```

use crate::error::{SamplingError, check_weight};

/// A source's share of each epoch's draws: see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Share {
    /// A share of the epoch's draws, relative to the other sources' proportions.
    Proportion(f64),
    /// Draws per row per epoch (fractional allowed).
    Repeat(f64),
    /// Draws per epoch.
    Choose(u64),
}

impl Default for Share {
    /// Every row once an epoch.
    fn default() -> Self {
        Share::Repeat(1.0)
    }
}

impl Share {
    /// The share as `kind:value`, as a state records it.
    pub fn to_text(self) -> String {
        match self {
            Share::Proportion(p) => format!("proportion:{p}"),
            Share::Repeat(r) => format!("repeat:{r}"),
            Share::Choose(c) => format!("choose:{c}"),
        }
    }

    /// A share back from [`to_text`](Self::to_text).
    pub fn from_text(text: &str) -> Option<Share> {
        let (kind, value) = text.split_once(':')?;
        match kind {
            "proportion" => value.parse().ok().map(Share::Proportion),
            "repeat" => value.parse().ok().map(Share::Repeat),
            "choose" => value.parse().ok().map(Share::Choose),
            _ => None,
        }
    }

    fn is_proportion(self) -> bool {
        matches!(self, Share::Proportion(_))
    }
}

/// Checks a mixture's shares alone; `sized` says whether `epoch_size` or `subsample` is set
/// (only proportions take an epoch size). An error names the source and the value.
pub(crate) fn check(shares: &[Share], sized: bool) -> Result<(), SamplingError> {
    let proportions = shares.iter().filter(|s| s.is_proportion()).count();
    if proportions > 0 && proportions < shares.len() {
        return Err(SamplingError::new(
            "sources",
            "give every source a proportion or none: proportions cut the epoch's draws, repeat and choose add to them",
        ));
    }
    if proportions == 0 && sized {
        return Err(SamplingError::new(
            "sources",
            "epoch_size and subsample set the size that proportions cut; with repeat and choose the sources set the epoch's size",
        ));
    }
    for (i, share) in shares.iter().enumerate() {
        match *share {
            Share::Proportion(w) => check_weight("proportion", &format!("source {i}"), w)?,
            Share::Repeat(w) => check_weight("repeat", &format!("source {i}"), w)?,
            Share::Choose(_) => {}
        }
    }
    if proportions > 0 {
        let total: f64 = shares
            .iter()
            .map(|s| match s {
                Share::Proportion(p) => *p,
                _ => 0.0,
            })
            .sum();
        if total <= 0.0 {
            return Err(SamplingError::new(
                "proportion",
                format!("the sources' proportions sum to {total}: they must sum to more than 0"),
            ));
        }
    }
    Ok(())
}

/// Each source's draws an epoch, for sources of `rows` rows each (those selected: a split's);
/// `size` is the epoch's size that proportions cut (exact counts by largest remainders).
/// A mixture that draws nothing at all is an error.
pub fn quotas(shares: &[Share], rows: &[u64], size: u64) -> Result<Vec<u64>, SamplingError> {
    if shares.len() != rows.len() {
        return Err(SamplingError::new(
            "sources",
            format!("{} shares for {} sources", shares.len(), rows.len()),
        ));
    }
    check(shares, false)?;
    let out = if shares.iter().all(|s| s.is_proportion()) {
        let mass: Vec<f64> = shares
            .iter()
            .map(|s| match s {
                Share::Proportion(p) => *p,
                _ => 0.0,
            })
            .collect();
        largest_remainders(&mass, size)
    } else {
        shares
            .iter()
            .zip(rows)
            .map(|(share, &n)| match *share {
                Share::Repeat(r) => (r * n as f64).round() as u64,
                Share::Choose(c) => c,
                Share::Proportion(_) => 0,
            })
            .collect()
    };
    if let Some(i) = (0..out.len()).find(|&i| out[i] > 0 && rows[i] == 0) {
        return Err(SamplingError::new(
            "sources",
            format!("source {i} has no row to draw its {} draws from", out[i]),
        ));
    }
    if out.iter().all(|&q| q == 0) {
        return Err(SamplingError::new(
            "sources",
            "the mixture draws nothing an epoch",
        ));
    }
    Ok(out)
}

/// `size` cut in proportion to `mass` (which sums to more than 0): the counts sum to `size`,
/// each within one of its exact share; ties go to the earlier.
pub(crate) fn largest_remainders(mass: &[f64], size: u64) -> Vec<u64> {
    let total: f64 = mass.iter().sum();
    let exact: Vec<f64> = mass.iter().map(|m| m / total * size as f64).collect();
    let mut out: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
    let given: u64 = out.iter().sum();
    let mut order: Vec<usize> = (0..mass.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &s in order
        .iter()
        .cycle()
        .take(size.saturating_sub(given) as usize)
    {
        out[s] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_mixtures_are_named() {
        let cases: Vec<(Vec<Share>, bool, &str, &str)> = vec![
            (
                vec![Share::Proportion(0.5), Share::Repeat(1.0)],
                false,
                "sources",
                "proportion or none",
            ),
            (vec![Share::Repeat(1.0)], true, "sources", "epoch_size"),
            (vec![Share::Proportion(-1.0)], false, "proportion", "-1"),
            (
                vec![Share::Proportion(f64::NAN)],
                false,
                "proportion",
                "NaN",
            ),
            (
                vec![Share::Proportion(0.0), Share::Proportion(0.0)],
                false,
                "proportion",
                "sum to 0",
            ),
            (
                vec![Share::Repeat(f64::INFINITY)],
                false,
                "repeat",
                "source 0",
            ),
        ];
        for (shares, sized, option, says) in cases {
            let e = check(&shares, sized).unwrap_err();
            assert_eq!(e.option(), option, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = quotas(&[Share::Choose(0), Share::Repeat(0.0)], &[3, 4], 0).unwrap_err();
        assert!(e.to_string().contains("nothing"), "{e}");
        let e = quotas(&[Share::Choose(2)], &[0], 0).unwrap_err();
        assert!(e.to_string().contains("source 0 has no row"), "{e}");
    }

    #[test]
    fn shares_round_trip_as_text() {
        for s in [
            Share::Proportion(0.25),
            Share::Repeat(1.5),
            Share::Choose(9),
        ] {
            assert_eq!(Share::from_text(&s.to_text()), Some(s));
        }
        assert_eq!(Share::from_text("often:2"), None);
    }

    proptest! {
        #[test]
        fn proportions_are_exact_within_one(
            mass in prop::collection::vec(0.0f64..10.0, 1..6),
            size in 0u64..100_000,
        ) {
            prop_assume!(mass.iter().sum::<f64>() > 0.0);
            let shares: Vec<Share> = mass.iter().map(|&p| Share::Proportion(p)).collect();
            let rows = vec![1u64; mass.len()];
            let q = match quotas(&shares, &rows, size) {
                Ok(q) => q,
                Err(_) => { prop_assert_eq!(size, 0); return Ok(()); }
            };
            prop_assert_eq!(q.iter().sum::<u64>(), size);
            let total: f64 = mass.iter().sum();
            for (m, n) in mass.iter().zip(&q) {
                prop_assert!((m / total * size as f64 - *n as f64).abs() < 1.0 + 1e-6);
            }
        }
    }
}
