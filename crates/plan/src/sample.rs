//! How an epoch draws its rows: the one sampling spec every layer shares (the loader's
//! builder, the Python options, `voxlake bench`, a state), checked before any read.
//!
//! - **Splits** ([`Split`], in [`crate::split`]): a row belongs to one named split by a hash of
//!   its id and a salt alone, so rows appended later never move an existing row to another split.
//! - **Weights** ([`Weights`]): every label an equal share of the draws, a weight per label
//!   value, or a weight per row from a numeric column. Weighted epochs draw with replacement;
//!   a label's draws are a stratum of their own, dealt evenly to ranks.
//! - **Epoch size and subsets**: `epoch_size` draws per epoch over all ranks (default: the rows
//!   selected); without weights, an epoch of `k ≤ N` draws is a seeded subset of `k` distinct
//!   rows, a new one each epoch (`subsample = f` is `k = round(f·N)`), and more than `N` draws
//!   repeat every row `⌊k/N⌋` times plus a subset. Subsets by row group ([`SubsetBy::RowGroup`])
//!   take whole row groups instead (the last one cut to the count): a clustered sample, whose
//!   epoch reads only the row groups it delivers.
//!
//! - **Mixtures** ([`Share`], in [`crate::mixture`]): several tables in one epoch, each a
//!   proportion of the draws, draws per row, or draws per epoch.
//!
//! [`Sampler`](crate::sampler::Sampler) turns a spec and the rows' labels, weights and ids into
//! each epoch's draws.
//!
//! ```
//! use voxlake_plan::sample::Sampling;
//! use voxlake_plan::split::Split;
//!
//! let spec = Sampling::default()
//!     .with_balance_labels()
//!     .with_epoch_size(10_000)
//!     .with_split(Split::new("train", vec![("train".into(), 0.8), ("val".into(), 0.2)]));
//! spec.check()?;
//! assert!(spec.needs_labels() && spec.needs_ids());
//! let bad = Sampling::default().with_subsample(1.5).check().unwrap_err();
//! assert_eq!(bad.option(), "subsample");
//! # Ok::<(), voxlake_plan::sample::SamplingError>(())
//! ```

pub use crate::error::SamplingError;
use crate::error::check_weight;
use crate::mixture::Share;
use crate::split::Split;

/// Where a row's weight comes from.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub enum Weights {
    /// Every row the same: each row once an epoch (or a subset, see the module docs).
    #[default]
    Uniform,
    /// Every label value an equal share of the draws (`balance="label"`).
    BalanceLabels,
    /// A relative weight per label value (`class_weights`); every label in the table needs one.
    Classes(Vec<(i64, f64)>),
    /// A row's weight is its value in this numeric column (`weight_column`).
    Column(String),
}

/// What an unweighted subset draws (`subsample`, or an `epoch_size` below the rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubsetBy {
    /// Rows, each as likely as any other: nearly every row group holds one, so nearly the
    /// whole table is read (voxlake writes a tensor chunk as one page).
    #[default]
    Row,
    /// Whole row groups in a seeded order: only those are read; rows of a row group come
    /// together (a clustered sample, as Mosaic's `sampling_granularity`).
    RowGroup,
}

impl SubsetBy {
    /// `row` or `row_group`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubsetBy::Row => "row",
            SubsetBy::RowGroup => "row_group",
        }
    }
}

impl std::str::FromStr for SubsetBy {
    type Err = SamplingError;
    fn from_str(s: &str) -> Result<Self, SamplingError> {
        match s {
            "row" => Ok(SubsetBy::Row),
            "row_group" => Ok(SubsetBy::RowGroup),
            other => Err(SamplingError::new(
                "subset_by",
                format!("'{other}' is not row or row_group"),
            )),
        }
    }
}

/// How an epoch draws its rows: see the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sampling {
    weights: Weights,
    epoch_size: Option<u64>,
    subsample: Option<f64>,
    subset_by: SubsetBy,
    split: Option<Split>,
    shares: Vec<Share>,
    patches: Option<crate::patch::PatchSampling>,
}

impl Sampling {
    /// Patches of a bricked table's volumes instead of rows ([`crate::patch`]).
    pub fn with_patches(mut self, patches: crate::patch::PatchSampling) -> Self {
        self.patches = Some(patches);
        self
    }

    /// The patch sampler's settings, where the epochs draw patches.
    pub fn patches(&self) -> Option<&crate::patch::PatchSampling> {
        self.patches.as_ref()
    }

    /// Every label value an equal share of the draws.
    pub fn with_balance_labels(mut self) -> Self {
        self.weights = Weights::BalanceLabels;
        self
    }

    /// A relative weight per label value.
    pub fn with_class_weights(mut self, weights: Vec<(i64, f64)>) -> Self {
        self.weights = Weights::Classes(weights);
        self
    }

    /// Each row's weight from a numeric column.
    pub fn with_weight_column(mut self, column: impl Into<String>) -> Self {
        self.weights = Weights::Column(column.into());
        self
    }

    /// Draws per epoch over all ranks.
    pub fn with_epoch_size(mut self, draws: u64) -> Self {
        self.epoch_size = Some(draws);
        self
    }

    /// A seeded subset of this share of the rows each epoch, another each epoch.
    pub fn with_subsample(mut self, fraction: f64) -> Self {
        self.subsample = Some(fraction);
        self
    }

    /// What an unweighted subset takes: rows (default) or whole row groups.
    pub fn with_subset_by(mut self, by: SubsetBy) -> Self {
        self.subset_by = by;
        self
    }

    /// Only the rows of this split.
    pub fn with_split(mut self, split: Split) -> Self {
        self.split = Some(split);
        self
    }

    /// A mixture: each source's share, in the order of the sources (which the loader is
    /// given beside it); within a source rows are drawn as the rest of the spec says.
    pub fn with_shares(mut self, shares: Vec<Share>) -> Self {
        self.shares = shares;
        self
    }

    /// The sources' shares (empty: one table, no mixture).
    pub fn shares(&self) -> &[Share] {
        &self.shares
    }

    /// Where weights come from.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Draws per epoch asked for.
    pub fn epoch_size(&self) -> Option<u64> {
        self.epoch_size
    }

    /// The share of rows each epoch draws.
    pub fn subsample(&self) -> Option<f64> {
        self.subsample
    }

    /// What an unweighted subset takes.
    pub fn subset_by(&self) -> SubsetBy {
        self.subset_by
    }

    /// The split read.
    pub fn split(&self) -> Option<&Split> {
        self.split.as_ref()
    }

    /// Whether every row is drawn once an epoch, as without a spec.
    pub fn is_plain(&self) -> bool {
        *self == Sampling::default()
    }

    /// Whether the rows' labels are needed (balance, class weights).
    pub fn needs_labels(&self) -> bool {
        matches!(self.weights, Weights::BalanceLabels | Weights::Classes(_))
    }

    /// Whether the rows' ids are needed (a split).
    pub fn needs_ids(&self) -> bool {
        self.split.is_some()
    }

    /// The weight column, if weights come from one.
    pub fn weight_column(&self) -> Option<&str> {
        match &self.weights {
            Weights::Column(c) => Some(c),
            _ => None,
        }
    }

    /// Checks the spec alone (the table's rows are checked by the sampler): an error names the
    /// option and the value.
    pub fn check(&self) -> Result<(), SamplingError> {
        if let Some(patches) = &self.patches {
            patches.check()?;
            // A split splits volumes (by their ids); the rest draws rows.
            let rows = Sampling {
                patches: None,
                split: None,
                ..self.clone()
            };
            if !rows.is_plain() {
                let names: Vec<String> = rows.options().into_iter().map(|(k, _)| k).collect();
                return Err(SamplingError::new(
                    "patch",
                    format!(
                        "patches are drawn per volume: {} draw rows (not with patch)",
                        names.join(", ")
                    ),
                ));
            }
        }
        if let Weights::Classes(classes) = &self.weights {
            if classes.is_empty() {
                return Err(SamplingError::new(
                    "class_weights",
                    "no label is given a weight",
                ));
            }
            for (label, w) in classes {
                check_weight("class_weights", &format!("label {label}"), *w)?;
            }
            if classes.iter().all(|c| c.1 == 0.0) {
                return Err(SamplingError::new("class_weights", "every weight is 0"));
            }
            let mut labels: Vec<i64> = classes.iter().map(|c| c.0).collect();
            labels.sort_unstable();
            if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
                return Err(SamplingError::new(
                    "class_weights",
                    format!("label {} is given two weights", w[0]),
                ));
            }
        }
        if let Weights::Column(c) = &self.weights
            && c.is_empty()
        {
            return Err(SamplingError::new("weight_column", "an empty column name"));
        }
        if self.epoch_size == Some(0) {
            return Err(SamplingError::new("epoch_size", "0 draws an epoch"));
        }
        if let Some(f) = self.subsample {
            if !(f > 0.0 && f <= 1.0) {
                return Err(SamplingError::new(
                    "subsample",
                    format!("{f} is not a share in (0, 1]"),
                ));
            }
            if self.epoch_size.is_some() {
                return Err(SamplingError::new(
                    "subsample",
                    "give subsample or epoch_size, not both: each sets the draws of an epoch",
                ));
            }
            if self.weights != Weights::Uniform {
                return Err(SamplingError::new(
                    "subsample",
                    "weighted epochs draw with replacement: set their size with epoch_size",
                ));
            }
        }
        if self.subset_by == SubsetBy::RowGroup {
            if self.weights != Weights::Uniform {
                return Err(SamplingError::new(
                    "subset_by",
                    "row groups are drawn by unweighted subsets (subsample, epoch_size); weighted epochs draw rows",
                ));
            }
            if self.subsample.is_none() && self.epoch_size.is_none() {
                return Err(SamplingError::new(
                    "subset_by",
                    "row_group needs a subset: subsample or epoch_size",
                ));
            }
        }
        if let Some(split) = &self.split {
            split.check()?;
        }
        if !self.shares.is_empty() {
            if self.subset_by == SubsetBy::RowGroup {
                return Err(SamplingError::new(
                    "subset_by",
                    "row_group subsets are drawn from one table, not a mixture",
                ));
            }
            let sized = self.epoch_size.is_some() || self.subsample.is_some();
            crate::mixture::check(&self.shares, sized)?;
        }
        Ok(())
    }

    /// The spec as `option=value` pairs, in a fixed order, values as the Python keywords take
    /// them: what a state records, and what a state with another spec names when refused.
    pub fn options(&self) -> Vec<(String, String)> {
        let mut out: Vec<(&str, String)> = Vec::new();
        match &self.weights {
            Weights::Uniform => {}
            Weights::BalanceLabels => out.push(("balance", "label".to_string())),
            Weights::Classes(c) => {
                let text: Vec<String> = c.iter().map(|(l, w)| format!("{l}:{w}")).collect();
                out.push(("class_weights", text.join(",")));
            }
            Weights::Column(c) => out.push(("weight_column", c.clone())),
        }
        if let Some(n) = self.epoch_size {
            out.push(("epoch_size", n.to_string()));
        }
        if let Some(f) = self.subsample {
            out.push(("subsample", f.to_string()));
        }
        if self.subset_by != SubsetBy::Row {
            out.push(("subset_by", self.subset_by.as_str().to_string()));
        }
        if let Some(s) = &self.split {
            out.push(("split", s.name().to_string()));
            let text: Vec<String> = s.shares().iter().map(|(n, w)| format!("{n}:{w}")).collect();
            out.push(("splits", text.join(",")));
            out.push(("split_salt", s.salt().to_string()));
        }
        if !self.shares.is_empty() {
            let text: Vec<String> = self.shares.iter().map(|s| s.to_text()).collect();
            out.push(("sources", text.join(",")));
        }
        if let Some(patches) = &self.patches {
            patches.options(&mut out);
        }
        out.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// The spec back from [`options`](Self::options)' pairs (a state's record), checked.
    pub fn from_options(pairs: &[(String, String)]) -> Result<Sampling, SamplingError> {
        let mut spec = Sampling::default();
        let mut split: Option<String> = None;
        let (mut shares, mut salt) = (None, String::new());
        for (key, value) in pairs {
            let bad = |option: &'static str| {
                SamplingError::new(option, format!("'{value}' does not parse"))
            };
            match key.as_str() {
                "balance" if value == "label" => spec = spec.with_balance_labels(),
                "balance" => return Err(bad("balance")),
                "class_weights" => {
                    let classes = pairs_of(value, |l| l.parse::<i64>().ok())
                        .ok_or_else(|| bad("class_weights"))?;
                    spec = spec.with_class_weights(classes);
                }
                "weight_column" => spec = spec.with_weight_column(value.clone()),
                "epoch_size" => {
                    spec = spec.with_epoch_size(value.parse().map_err(|_| bad("epoch_size"))?)
                }
                "subsample" => {
                    spec = spec.with_subsample(value.parse().map_err(|_| bad("subsample"))?)
                }
                "subset_by" => spec = spec.with_subset_by(value.parse()?),
                "split" => split = Some(value.clone()),
                "splits" => {
                    shares = Some(
                        pairs_of(value, |n| Some(n.to_string())).ok_or_else(|| bad("splits"))?,
                    )
                }
                "split_salt" => salt = value.clone(),
                "sources" => {
                    let shares: Option<Vec<Share>> =
                        value.split(',').map(Share::from_text).collect();
                    spec = spec.with_shares(shares.ok_or_else(|| bad("sources"))?);
                }
                _ if crate::patch::PatchSampling::set(&mut spec.patches, key, value)? => {}
                _ => {
                    return Err(SamplingError::new(
                        "sampling",
                        format!("unknown option '{key}'"),
                    ));
                }
            }
        }
        if let Some(name) = split {
            let shares = shares.ok_or_else(|| SamplingError::new("splits", "missing"))?;
            spec = spec.with_split(Split::new(name, shares).with_salt(salt));
        }
        spec.check()?;
        Ok(spec)
    }
}

/// `k:v,k:v` pairs with numeric values.
fn pairs_of<K>(text: &str, key: impl Fn(&str) -> Option<K>) -> Option<Vec<(K, f64)>> {
    text.split(',')
        .map(|pair| {
            let (k, v) = pair.rsplit_once(':')?;
            Some((key(k)?, v.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::tests::three;

    #[test]
    fn bad_options_are_named() {
        let cases: Vec<(Sampling, &str, &str)> = vec![
            (
                Sampling::default().with_class_weights(vec![(0, -1.0)]),
                "class_weights",
                "-1",
            ),
            (
                Sampling::default().with_class_weights(vec![(0, f64::NAN)]),
                "class_weights",
                "NaN",
            ),
            (
                Sampling::default().with_class_weights(vec![(0, f64::INFINITY)]),
                "class_weights",
                "inf",
            ),
            (
                Sampling::default().with_class_weights(vec![(0, 0.0), (1, 0.0)]),
                "class_weights",
                "every weight is 0",
            ),
            (
                Sampling::default().with_class_weights(vec![(1, 1.0), (1, 2.0)]),
                "class_weights",
                "two weights",
            ),
            (
                Sampling::default().with_subsample(0.0),
                "subsample",
                "(0, 1]",
            ),
            (
                Sampling::default().with_subsample(1.01),
                "subsample",
                "1.01",
            ),
            (
                Sampling::default().with_subsample(f64::NAN),
                "subsample",
                "NaN",
            ),
            (
                Sampling::default().with_subsample(0.5).with_epoch_size(3),
                "subsample",
                "not both",
            ),
            (
                Sampling::default()
                    .with_subsample(0.5)
                    .with_balance_labels(),
                "subsample",
                "epoch_size",
            ),
            (
                Sampling::default().with_epoch_size(0),
                "epoch_size",
                "0 draws",
            ),
            (
                Sampling::default().with_split(Split::new("dev", three())),
                "split",
                "'dev'",
            ),
            (
                Sampling::default().with_split(Split::new("val", vec![("val".into(), 0.0)])),
                "splits",
                "share 0",
            ),
            (
                Sampling::default().with_split(Split::new("val", vec![("val".into(), -0.5)])),
                "splits",
                "-0.5",
            ),
            (
                Sampling::default().with_split(Split::new(
                    "val",
                    vec![("val".into(), 1.0), ("val".into(), 1.0)],
                )),
                "splits",
                "twice",
            ),
            (
                Sampling::default().with_weight_column(""),
                "weight_column",
                "empty",
            ),
            (
                Sampling::default().with_subset_by(SubsetBy::RowGroup),
                "subset_by",
                "needs a subset",
            ),
            (
                Sampling::default()
                    .with_balance_labels()
                    .with_epoch_size(9)
                    .with_subset_by(SubsetBy::RowGroup),
                "subset_by",
                "weighted epochs draw rows",
            ),
            (
                Sampling::default()
                    .with_subsample(0.5)
                    .with_subset_by(SubsetBy::RowGroup)
                    .with_shares(vec![Share::Proportion(1.0)]),
                "subset_by",
                "not a mixture",
            ),
            (
                Sampling::default().with_shares(vec![Share::Proportion(1.0), Share::Choose(2)]),
                "sources",
                "proportion or none",
            ),
        ];
        for (spec, option, says) in cases {
            let e = spec.check().unwrap_err();
            assert_eq!(e.option(), option, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn options_round_trip() {
        let spec = Sampling::default()
            .with_class_weights(vec![(0, 1.0), (1, 9.5)])
            .with_epoch_size(100)
            .with_split(Split::new("val", three()).with_salt("s:1"));
        assert_eq!(Sampling::from_options(&spec.options()).unwrap(), spec);
        let spec = Sampling::default()
            .with_subsample(0.25)
            .with_weight_column("w");
        assert!(spec.check().is_err());
        let spec = Sampling::default()
            .with_subsample(0.25)
            .with_subset_by(SubsetBy::RowGroup);
        assert_eq!(Sampling::from_options(&spec.options()).unwrap(), spec);
        assert!(Sampling::default().options().is_empty());
        let spec = Sampling::default()
            .with_balance_labels()
            .with_epoch_size(10)
            .with_shares(vec![Share::Proportion(0.75), Share::Proportion(0.25)]);
        assert_eq!(Sampling::from_options(&spec.options()).unwrap(), spec);
        let spec = Sampling::default().with_shares(vec![Share::Repeat(0.5), Share::Choose(3)]);
        assert_eq!(Sampling::from_options(&spec.options()).unwrap(), spec);
    }
}
