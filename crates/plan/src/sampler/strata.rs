//! The sampler's parts: a stratum and how it draws, the rows of each part (a mixture's
//! sources), uniform draws by selection sampling, label and weight-column strata.

use std::ops::Range;

use crate::error::{SamplingError, check_weight};
use crate::plan::SeededRng;
use crate::sample::{Sampling, Weights};
use crate::split::unit_interval;

/// Rows of one stratum and how they are drawn.
#[derive(Debug, Clone)]
pub(super) struct Stratum {
    /// Rows (table order).
    pub(super) rows: Vec<u64>,
    /// Cumulative weights of `rows` (`None`: uniform).
    pub(super) cumulative: Option<Vec<f64>>,
    /// Its draws an epoch.
    pub(super) quota: u64,
}

/// `size` uniform draws of `n` rows (row `i` is `at(i)`), placed by `place`: every row
/// `⌊size/n⌋` times, then a subset: whole row groups of `groups` in a seeded order (of the
/// `chosen` rows), else rows by selection sampling.
pub(super) fn uniform(
    rng: &mut SeededRng,
    n: u64,
    size: u64,
    at: impl Fn(u64) -> u64,
    groups: Option<&[Range<u64>]>,
    chosen: Option<&[u64]>,
    place: &impl Fn(u64) -> u64,
) -> Vec<u64> {
    let mut positions = Vec::with_capacity(size as usize);
    for _ in 0..size / n {
        positions.extend((0..n).map(|i| place(at(i))));
    }
    let mut want = size % n;
    if let Some(groups) = groups {
        // Whole row groups in a seeded order, their chosen rows, until `want`.
        let mut order: Vec<usize> = (0..groups.len()).collect();
        rng.shuffle(&mut order);
        let chosen = |r: &u64| chosen.is_none_or(|c| c.binary_search(r).is_ok());
        for g in order {
            for r in groups[g].clone().filter(chosen) {
                if want == 0 {
                    break;
                }
                positions.push(place(r));
                want -= 1;
            }
        }
    }
    for i in 0..n {
        if want == 0 {
            break;
        }
        // Algorithm S: take row i with probability want / (rows left).
        if unit_interval(rng.next_u64()) * ((n - i) as f64) < want as f64 {
            positions.push(place(at(i)));
            want -= 1;
        }
    }
    positions
}

/// Each part's rows: the whole table, or each source's files' rows (`sources`: files per
/// source, in order) for a spec with as many shares.
pub(super) fn source_spans(
    spec: &Sampling,
    sources: Option<&[usize]>,
    starts: &[u64],
) -> Result<Vec<Range<u64>>, SamplingError> {
    let files = starts.len() - 1;
    let total = starts[files];
    let shares = spec.shares().len();
    let sources = match sources {
        None | Some([_]) if shares <= 1 => return Ok(std::iter::once(0..total).collect()),
        None => {
            return Err(SamplingError::new(
                "sources",
                format!("{shares} shares and no sources to draw them from"),
            ));
        }
        Some(s) => s,
    };
    if sources.len() != shares {
        return Err(SamplingError::new(
            "sources",
            format!("{shares} shares for {} sources", sources.len()),
        ));
    }
    if sources.iter().sum::<usize>() != files {
        return Err(SamplingError::new(
            "sources",
            format!(
                "the sources hold {} files, the table {files}",
                sources.iter().sum::<usize>()
            ),
        ));
    }
    let mut at = 0;
    Ok(sources
        .iter()
        .map(|&n| {
            let span = starts[at]..starts[at + n];
            at += n;
            span
        })
        .collect())
}

/// One stratum drawing `quota` rows of `chosen` in proportion to their weight in `column`.
pub(super) fn column_stratum(
    column: &str,
    weights: &[f64],
    chosen: impl Iterator<Item = u64>,
    quota: u64,
) -> Result<Stratum, SamplingError> {
    let mut cumulative = Vec::new();
    let mut members = Vec::new();
    let mut sum = 0.0;
    for r in chosen {
        let w = weights[r as usize];
        check_weight("weight_column", &format!("row {r} of column '{column}'"), w)?;
        sum += w;
        members.push(r);
        cumulative.push(sum);
    }
    if sum <= 0.0 {
        return Err(SamplingError::new(
            "weight_column",
            format!("every row's weight in column '{column}' is 0"),
        ));
    }
    Ok(Stratum {
        rows: members,
        cumulative: Some(cumulative),
        quota,
    })
}

/// Each row group's rows in table order, from the rows of each file's row groups (which must
/// add up to the file's rows).
pub(super) fn group_ranges(
    row_groups: Option<&[Vec<u64>]>,
    rows_per_file: &[u64],
) -> Result<Vec<Range<u64>>, SamplingError> {
    let groups = row_groups
        .ok_or_else(|| SamplingError::new("subset_by", "the files' row groups were not read"))?;
    if groups.len() != rows_per_file.len() {
        return Err(SamplingError::new(
            "subset_by",
            format!(
                "row groups of {} files for {}",
                groups.len(),
                rows_per_file.len()
            ),
        ));
    }
    let mut out = Vec::new();
    let mut at = 0u64;
    for (f, (file, &rows)) in groups.iter().zip(rows_per_file).enumerate() {
        if file.iter().sum::<u64>() != rows {
            return Err(SamplingError::new(
                "subset_by",
                format!(
                    "file {f}'s row groups hold {} rows, the file {rows}",
                    file.iter().sum::<u64>()
                ),
            ));
        }
        for &n in file {
            out.push(at..at + n);
            at += n;
        }
    }
    Ok(out)
}

impl Stratum {
    /// One draw: an index into `rows`.
    pub(super) fn pick(&self, rng: &mut SeededRng) -> usize {
        match &self.cumulative {
            None => ((u128::from(rng.next_u64()) * self.rows.len() as u128) >> 64) as usize,
            Some(c) => {
                let total = c.last().copied().unwrap_or(0.0);
                let u = unit_interval(rng.next_u64()) * total;
                // The first row whose cumulative weight passes u (a row of weight 0 never).
                c.partition_point(|&x| x <= u).min(c.len() - 1)
            }
        }
    }
}

/// One stratum per label value of the chosen rows, with its share of `size` draws.
pub(super) fn label_strata(
    weights: &Weights,
    option: &'static str,
    labels: &[Option<i64>],
    chosen: impl Iterator<Item = u64>,
    size: u64,
) -> Result<Vec<Stratum>, SamplingError> {
    let mut by_label: std::collections::BTreeMap<i64, Vec<u64>> = Default::default();
    for r in chosen {
        let label = labels[r as usize].ok_or_else(|| {
            SamplingError::new(
                option,
                format!("row {r} has no label (null): it cannot be weighted by label"),
            )
        })?;
        by_label.entry(label).or_default().push(r);
    }
    let mut strata = Vec::with_capacity(by_label.len());
    let mut mass = Vec::with_capacity(by_label.len());
    for (label, rows) in by_label {
        let m = match weights {
            Weights::Classes(classes) => {
                let w = classes
                    .iter()
                    .find(|c| c.0 == label)
                    .map(|c| c.1)
                    .ok_or_else(|| {
                        SamplingError::new(
                            option,
                            format!(
                                "label {label} has no weight (it has {:?})",
                                classes.iter().map(|c| c.0).collect::<Vec<_>>()
                            ),
                        )
                    })?;
                w * rows.len() as f64
            }
            _ => 1.0,
        };
        mass.push(m);
        strata.push(Stratum {
            rows,
            cumulative: None,
            quota: 0,
        });
    }
    let total: f64 = mass.iter().sum();
    if total <= 0.0 {
        return Err(SamplingError::new(
            option,
            "every row of the table weighs 0",
        ));
    }
    // Largest remainders: the quotas sum to `size`, each within one draw of its share.
    for (s, q) in strata
        .iter_mut()
        .zip(crate::mixture::largest_remainders(&mass, size))
    {
        s.quota = q;
    }
    strata.retain(|s| s.quota > 0);
    Ok(strata)
}
