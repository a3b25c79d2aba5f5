//! Each epoch's draws from a [`Sampling`] spec and the rows' labels, weights and split: pure,
//! a function of (seed, epoch, spec, rows) alone.
//!
//! Rows are numbered in table order (file by file, each file's rows read in file order); an
//! epoch's draws are then placed in the epoch's order ([`EpochOrder`]) for the deal. How the
//! draws are made:
//!
//! - **Uniform** (no weights): every chosen row once; `k < N` draws are `k` distinct rows by
//!   selection sampling (Knuth's algorithm S), `k > N` every row `⌊k/N⌋` times and a subset of
//!   `k mod N`; a subset by row group takes whole row groups in a seeded order until it has its
//!   rows (the last one cut short).
//! - **Labels** (balance, class weights): each label value a stratum; the epoch's draws are
//!   cut between strata by their weight (largest remainders, so the counts are exact), and each
//!   stratum's rows drawn uniformly with replacement.
//! - **Column**: one stratum, rows drawn with replacement in proportion to their weight (a
//!   binary search of the cumulative weights a draw).
//! - **Mixtures** ([`crate::mixture`]): each source's files a part of its own, drawing its quota
//!   as above; every part's strata are strata of the epoch's draws, so each rank gets each
//!   source's (and each label's) share.
//!
//! ```
//! use voxlake_plan::order::EpochOrder;
//! use voxlake_plan::plan::Planner;
//! use voxlake_plan::sample::Sampling;
//! use voxlake_plan::sampler::{RowsOf, Sampler};
//!
//! let labels: Vec<Option<i64>> = (0..100).map(|i| Some(i64::from(i % 10 == 0))).collect();
//! let spec = Sampling::default().with_balance_labels();
//! let rows = RowsOf { labels: Some(&labels), ..RowsOf::default() };
//! let sampler = Sampler::new(&spec, 7, &[60, 40], rows)?;
//! assert_eq!(sampler.draws_per_epoch(), 100);
//! let order = EpochOrder::new(&Planner::new(7, true), &[60, 40], 0);
//! let draws = sampler.draws(&order, 0);
//! assert_eq!(draws.strata_len(), vec![50, 50]); // label 0, label 1: half each
//! # Ok::<(), voxlake_plan::sample::SamplingError>(())
//! ```

use crate::draws::Draws;
use crate::order::EpochOrder;
use crate::plan::SeededRng;
use std::ops::Range;

use crate::sample::{Sampling, SamplingError, SubsetBy, Weights};

mod strata;

use strata::{Stratum, column_stratum, group_ranges, label_strata, source_spans, uniform};

/// A salt keeping the sampler's random streams apart from the planner's and the mixer's.
const SAMPLE: u64 = 4;
/// A salt keeping a mixture's sources' streams apart from the table's.
const MIXTURE: u64 = 5;

/// What the sampler needs of each row (in table order), as the spec asks: labels for balance
/// and class weights, weights for a weight column, whether it is in the split read.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowsOf<'a> {
    /// Each row's label (`None`: null).
    pub labels: Option<&'a [Option<i64>]>,
    /// Each row's weight (from the weight column).
    pub weights: Option<&'a [f64]>,
    /// Whether each row is in the split read.
    pub in_split: Option<&'a [bool]>,
    /// Per file, the rows of each of its row groups (subsets by row group).
    pub row_groups: Option<&'a [Vec<u64>]>,
    /// A mixture's files per source, in order (their files numbered one after the other).
    pub sources: Option<&'a [usize]>,
}

/// How one part (the table, or one source of a mixture) draws.
#[derive(Debug, Clone)]
enum Kind {
    /// Every chosen row once, or `size` of them (see the module docs). `span`: the part's rows;
    /// `rows`: the chosen ones (`None`: all of `span`). `groups`: each row group's rows, where
    /// subsets take row groups.
    Uniform {
        span: Range<u64>,
        rows: Option<Vec<u64>>,
        size: u64,
        groups: Option<Vec<Range<u64>>>,
    },
    /// With replacement, strata each drawing its quota.
    Weighted { strata: Vec<Stratum> },
}

/// Makes each epoch's draws: see the [module documentation](self).
#[derive(Debug, Clone)]
pub struct Sampler {
    seed: u64,
    /// `starts[f]`: the first row of file `f` in table order; one more entry at the end.
    starts: Vec<u64>,
    /// The table's part, or each source's of a mixture, in order.
    parts: Vec<Kind>,
}

impl Sampler {
    /// A sampler over files of `rows_per_file` rows for `spec` (checked), seeded by `seed`;
    /// `rows` holds what the spec needs of every row. Rows whose weight is bad, a label
    /// missing from the class weights, no row chosen or no weight left: an error naming the
    /// option.
    pub fn new(
        spec: &Sampling,
        seed: u64,
        rows_per_file: &[u64],
        rows: RowsOf<'_>,
    ) -> Result<Sampler, SamplingError> {
        spec.check()?;
        let mut starts = Vec::with_capacity(rows_per_file.len() + 1);
        let mut total = 0u64;
        for &n in rows_per_file {
            starts.push(total);
            total += n;
        }
        starts.push(total);
        let count = |what: &'static str, len: usize| {
            if len as u64 == total {
                Ok(())
            } else {
                Err(SamplingError::new(
                    what,
                    format!("{len} values for a table of {total} rows"),
                ))
            }
        };
        let chosen: Option<Vec<u64>> = match (spec.split(), rows.in_split) {
            (Some(split), Some(mask)) => {
                count("split", mask.len())?;
                let chosen: Vec<u64> = (0..total).filter(|&r| mask[r as usize]).collect();
                if chosen.is_empty() {
                    return Err(SamplingError::new(
                        "split",
                        format!("no row of the {total} is in split '{}'", split.name()),
                    ));
                }
                Some(chosen)
            }
            (Some(_), None) => {
                return Err(SamplingError::new("split", "the rows' ids were not read"));
            }
            (None, _) => None,
        };
        let spans = source_spans(spec, rows.sources, &starts)?;
        // The chosen rows of each part (`None`: all of its span).
        let chosen_in: Vec<Option<Vec<u64>>> = spans
            .iter()
            .map(|span| {
                chosen.as_ref().map(|c| {
                    let (a, b) = (
                        c.partition_point(|&r| r < span.start),
                        c.partition_point(|&r| r < span.end),
                    );
                    c[a..b].to_vec()
                })
            })
            .collect();
        let selected: Vec<u64> = spans
            .iter()
            .zip(&chosen_in)
            .map(|(span, c)| c.as_ref().map_or(span.end - span.start, |c| c.len() as u64))
            .collect();
        let all: u64 = selected.iter().sum();
        let size = match (spec.epoch_size(), spec.subsample()) {
            (Some(n), _) => n,
            (None, Some(f)) => ((f * all as f64).round() as u64).max(1),
            (None, None) => all,
        };
        let quotas = match spec.shares() {
            [] => vec![size],
            shares => crate::mixture::quotas(shares, &selected, size)?,
        };
        let mut parts = Vec::with_capacity(spans.len());
        for ((span, chosen), quota) in spans.into_iter().zip(chosen_in).zip(quotas) {
            let rows_chosen = || -> Box<dyn Iterator<Item = u64> + '_> {
                match &chosen {
                    Some(c) => Box::new(c.iter().copied()),
                    None => Box::new(span.clone()),
                }
            };
            let kind = match spec.weights() {
                Weights::Uniform => Kind::Uniform {
                    groups: match spec.subset_by() {
                        SubsetBy::Row => None,
                        _ => Some(group_ranges(rows.row_groups, rows_per_file)?),
                    },
                    span: span.clone(),
                    rows: chosen.clone(),
                    size: quota,
                },
                _ if quota == 0 => Kind::Weighted { strata: Vec::new() },
                Weights::BalanceLabels | Weights::Classes(_) => {
                    let option = match spec.weights() {
                        Weights::BalanceLabels => "balance",
                        _ => "class_weights",
                    };
                    let labels = rows.labels.ok_or_else(|| {
                        SamplingError::new(option, "the rows' labels were not read")
                    })?;
                    count(option, labels.len())?;
                    let strata =
                        label_strata(spec.weights(), option, labels, rows_chosen(), quota)?;
                    Kind::Weighted { strata }
                }
                Weights::Column(column) => {
                    let weights = rows.weights.ok_or_else(|| {
                        SamplingError::new(
                            "weight_column",
                            format!("column '{column}' was not read"),
                        )
                    })?;
                    count("weight_column", weights.len())?;
                    Kind::Weighted {
                        strata: vec![column_stratum(column, weights, rows_chosen(), quota)?],
                    }
                }
            };
            parts.push(kind);
        }
        Ok(Sampler {
            seed,
            starts,
            parts,
        })
    }

    /// Draws an epoch makes over all ranks.
    pub fn draws_per_epoch(&self) -> u64 {
        self.parts
            .iter()
            .map(|kind| match kind {
                Kind::Uniform { size, .. } => *size,
                Kind::Weighted { strata } => strata.iter().map(|s| s.quota).sum(),
            })
            .sum()
    }

    /// Whether every row of the table is drawn once an epoch (no sampling at all).
    pub fn is_plain(&self) -> bool {
        matches!(self.parts.as_slice(),
            [Kind::Uniform { rows: None, size, span, .. }] if *size == self.rows() && span.start == 0)
    }

    fn rows(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The random stream of a part's stratum (`None`: of its uniform draws); the table's part
    /// (0) keeps the streams it had before mixtures.
    fn rng(&self, epoch: u64, part: usize, stratum: Option<usize>) -> SeededRng {
        let s = stratum.map_or(0, |s| s as u64 + 1);
        match (part, stratum) {
            (0, None) => SeededRng::for_stream(&[self.seed, epoch, SAMPLE]),
            (0, Some(_)) => SeededRng::for_stream(&[self.seed, epoch, SAMPLE, s]),
            (p, _) => SeededRng::for_stream(&[self.seed, epoch, SAMPLE, MIXTURE, p as u64, s]),
        }
    }

    /// Epoch `epoch`'s draws, as positions of `order` (the epoch's order of the same files).
    pub fn draws(&self, order: &EpochOrder, epoch: u64) -> Draws {
        if self.is_plain() {
            return Draws::full(order.total());
        }
        let place = |row: u64| {
            let f = self.starts.partition_point(|&s| s <= row) - 1;
            order.position(f, row - self.starts[f])
        };
        let mut strata = Vec::new();
        for (p, kind) in self.parts.iter().enumerate() {
            match kind {
                Kind::Uniform {
                    span,
                    rows,
                    size,
                    groups,
                } => {
                    let n = rows
                        .as_ref()
                        .map_or(span.end - span.start, |r| r.len() as u64);
                    if n == 0 {
                        continue;
                    }
                    let at = |i: u64| rows.as_ref().map_or(span.start + i, |r| r[i as usize]);
                    let mut rng = self.rng(epoch, p, None);
                    strata.push(uniform(
                        &mut rng,
                        n,
                        *size,
                        at,
                        groups.as_deref(),
                        rows.as_deref(),
                        &place,
                    ));
                }
                Kind::Weighted { strata: parts } => {
                    for (s, stratum) in parts.iter().enumerate() {
                        let mut rng = self.rng(epoch, p, Some(s));
                        strata.push(
                            (0..stratum.quota)
                                .map(|_| place(stratum.rows[stratum.pick(&mut rng)]))
                                .collect(),
                        );
                    }
                }
            }
        }
        Draws::from_strata(strata)
    }
}

#[cfg(test)]
mod tests;
