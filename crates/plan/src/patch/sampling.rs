//! The patch sampler's settings ([`PatchSampling`]): what a loader of a bricked table draws
//! instead of rows, as the sampling spec holds them (`Sampling::with_patches`), recorded in a
//! state as `option=value` pairs and read back from them.

use crate::error::SamplingError;

use super::{Dims, Pad};

/// Volumes whose patches are mixed together unless told otherwise.
pub const DEFAULT_PATCH_WINDOW: usize = 8;

/// Patches of `size` voxels drawn from each volume of a bricked table an epoch: how many,
/// where their centres fall (uniformly, or by the class of the centre voxel in a label
/// field), how a patch past an edge is filled, and how many volumes' patches mix; or, for
/// validation and inference, every patch of each volume's grid ([`with_grid`](Self::with_grid)).
#[derive(Debug, Clone, PartialEq)]
pub struct PatchSampling {
    size: Dims,
    per_volume: u64,
    pad: Pad,
    label_field: Option<String>,
    label_probabilities: Vec<(i64, f64)>,
    window: usize,
    grid: Option<Dims>,
}

impl PatchSampling {
    /// Patches of `size` voxels (z, y, x): one a volume an epoch, centres uniform,
    /// zero-padded, [`DEFAULT_PATCH_WINDOW`] volumes mixed.
    pub fn new(size: Dims) -> PatchSampling {
        PatchSampling {
            size,
            per_volume: 1,
            pad: Pad::Zero,
            label_field: None,
            label_probabilities: Vec::new(),
            window: DEFAULT_PATCH_WINDOW,
            grid: None,
        }
    }

    /// Every patch of each volume's grid, `overlap` voxels apart, in order (volumes in
    /// order too), instead of drawn ones (`voxlake_plan::patch::grid_origins`).
    pub fn with_grid(mut self, overlap: Dims) -> Self {
        self.grid = Some(overlap);
        self
    }

    /// Patches drawn of each volume an epoch.
    pub fn with_per_volume(mut self, n: u64) -> Self {
        self.per_volume = n;
        self
    }

    /// How a patch past a volume's edge is filled.
    pub fn with_pad(mut self, pad: Pad) -> Self {
        self.pad = pad;
        self
    }

    /// Centres drawn by the class of their voxel in this label field (a class field of the
    /// table), each class's relative probability given (`{0: 1, 1: 1}`: half the centres on
    /// class 1).
    pub fn with_label_probabilities(
        mut self,
        field: impl Into<String>,
        probabilities: Vec<(i64, f64)>,
    ) -> Self {
        self.label_field = Some(field.into());
        self.label_probabilities = probabilities;
        self
    }

    /// Volumes whose patches are mixed together (the reach of the shuffle, in volumes).
    pub fn with_window(mut self, volumes: usize) -> Self {
        self.window = volumes;
        self
    }

    /// Voxels of a patch along z, y, x.
    pub fn size(&self) -> Dims {
        self.size
    }

    /// Patches of each volume an epoch.
    pub fn per_volume(&self) -> u64 {
        self.per_volume
    }

    /// How a patch past an edge is filled.
    pub fn pad(&self) -> Pad {
        self.pad
    }

    /// The label field centres are drawn by, if any.
    pub fn label_field(&self) -> Option<&str> {
        self.label_field.as_deref()
    }

    /// Each class's relative probability of a centre (empty: uniform centres).
    pub fn label_probabilities(&self) -> &[(i64, f64)] {
        &self.label_probabilities
    }

    /// Volumes whose patches mix.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The grid's overlap, where the patches are each volume's grid.
    pub fn grid(&self) -> Option<Dims> {
        self.grid
    }

    /// Checks the settings alone (the volumes are checked by the loader): an error names the
    /// option.
    pub fn check(&self) -> Result<(), SamplingError> {
        if self.size.contains(&0) {
            return Err(SamplingError::new(
                "patch",
                format!("{:?}: every axis needs a voxel", self.size),
            ));
        }
        if self.per_volume == 0 {
            return Err(SamplingError::new(
                "patches_per_volume",
                "0 patches a volume",
            ));
        }
        if self.window == 0 {
            return Err(SamplingError::new("patch_window", "a window of 0 volumes"));
        }
        if let Some(overlap) = self.grid {
            if (0..3).any(|a| overlap[a] >= self.size[a]) {
                return Err(SamplingError::new(
                    "overlap",
                    format!(
                        "{overlap:?} for patches of {:?}: each below the patch's size",
                        self.size
                    ),
                ));
            }
            if self.label_field.is_some() {
                return Err(SamplingError::new(
                    "sampler",
                    "a grid takes every patch: label_probabilities draws centres",
                ));
            }
        }
        if self.label_field.is_some() {
            let p = &self.label_probabilities;
            if p.is_empty() {
                return Err(SamplingError::new(
                    "label_probabilities",
                    "no class is given a probability",
                ));
            }
            if let Some((c, w)) = p.iter().find(|(_, w)| !(w.is_finite() && *w >= 0.0)) {
                return Err(SamplingError::new(
                    "label_probabilities",
                    format!("class {c}: {w} is not a probability"),
                ));
            }
            if p.iter().all(|(_, w)| *w == 0.0) {
                return Err(SamplingError::new(
                    "label_probabilities",
                    "every probability is 0",
                ));
            }
            let mut classes: Vec<i64> = p.iter().map(|(c, _)| *c).collect();
            classes.sort_unstable();
            if let Some(w) = classes.windows(2).find(|w| w[0] == w[1]) {
                return Err(SamplingError::new(
                    "label_probabilities",
                    format!("class {} is given two probabilities", w[0]),
                ));
            }
        }
        Ok(())
    }

    /// The settings as `option=value` pairs (the Python keywords' names and values).
    pub(crate) fn options(&self, out: &mut Vec<(&'static str, String)>) {
        let [z, y, x] = self.size;
        out.push(("patch", format!("{z},{y},{x}")));
        out.push(("patches_per_volume", self.per_volume.to_string()));
        out.push(("pad", self.pad.as_str().to_string()));
        if let Some(field) = &self.label_field {
            out.push(("label_field", field.clone()));
            let text: Vec<String> = self
                .label_probabilities
                .iter()
                .map(|(c, w)| format!("{c}:{w}"))
                .collect();
            out.push(("label_probabilities", text.join(",")));
        }
        out.push(("patch_window", self.window.to_string()));
        if let Some([z, y, x]) = self.grid {
            out.push(("sampler", "grid".to_string()));
            out.push(("overlap", format!("{z},{y},{x}")));
        }
    }

    /// Sets option `key` from a state's `value`; `false` for a key that is not a patch
    /// option.
    pub(crate) fn set(
        this: &mut Option<PatchSampling>,
        key: &str,
        value: &str,
    ) -> Result<bool, SamplingError> {
        let bad =
            |option: &'static str| SamplingError::new(option, format!("'{value}' does not parse"));
        let patch = || {
            this.clone()
                .unwrap_or_else(|| PatchSampling::new([1, 1, 1]))
        };
        let set = match key {
            "patch" => {
                let size: Vec<u64> = value
                    .split(',')
                    .map(|v| v.parse().map_err(|_| bad("patch")))
                    .collect::<Result<_, _>>()?;
                let size: Dims = size.try_into().map_err(|_| bad("patch"))?;
                PatchSampling { size, ..patch() }
            }
            "patches_per_volume" => {
                patch().with_per_volume(value.parse().map_err(|_| bad("patches_per_volume"))?)
            }
            "pad" => patch().with_pad(value.parse()?),
            "label_field" => PatchSampling {
                label_field: Some(value.to_string()),
                ..patch()
            },
            "label_probabilities" => {
                let pairs: Option<Vec<(i64, f64)>> = value
                    .split(',')
                    .map(|pair| {
                        let (c, w) = pair.rsplit_once(':')?;
                        Some((c.parse().ok()?, w.parse().ok()?))
                    })
                    .collect();
                PatchSampling {
                    label_probabilities: pairs.ok_or_else(|| bad("label_probabilities"))?,
                    ..patch()
                }
            }
            "patch_window" => patch().with_window(value.parse().map_err(|_| bad("patch_window"))?),
            "sampler" if value == "grid" => {
                let p = patch();
                PatchSampling {
                    grid: Some(p.grid.unwrap_or_default()),
                    ..p
                }
            }
            "sampler" => return Err(bad("sampler")),
            "overlap" => {
                let o: Vec<u64> = value
                    .split(',')
                    .map(|v| v.parse().map_err(|_| bad("overlap")))
                    .collect::<Result<_, _>>()?;
                PatchSampling {
                    grid: Some(o.try_into().map_err(|_| bad("overlap"))?),
                    ..patch()
                }
            }
            _ => return Ok(false),
        };
        *this = Some(set);
        Ok(true)
    }
}

impl Pad {
    /// The policy's name: `zero`, `edge` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pad::Zero => "zero",
            Pad::Edge => "edge",
            Pad::None => "none",
        }
    }
}

impl std::str::FromStr for Pad {
    type Err = SamplingError;

    fn from_str(s: &str) -> Result<Pad, SamplingError> {
        match s {
            "zero" => Ok(Pad::Zero),
            "edge" => Ok(Pad::Edge),
            "none" => Ok(Pad::None),
            other => Err(SamplingError::new(
                "pad",
                format!("{other:?} is not one of \"zero\", \"edge\", \"none\""),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sampling;

    #[test]
    fn patch_settings_round_trip_through_a_states_pairs() {
        let patches = PatchSampling::new([64, 32, 16])
            .with_per_volume(4)
            .with_pad(Pad::Edge)
            .with_label_probabilities("mask", vec![(0, 1.0), (2, 0.5)])
            .with_window(3);
        let spec = Sampling::default().with_patches(patches.clone());
        spec.check().unwrap();
        let pairs = spec.options();
        assert_eq!(pairs[0], ("patch".to_string(), "64,32,16".to_string()));
        let back = Sampling::from_options(&pairs).unwrap();
        assert_eq!(back.patches(), Some(&patches));
        let plain = Sampling::default().with_patches(PatchSampling::new([8, 8, 8]));
        assert_eq!(Sampling::from_options(&plain.options()).unwrap(), plain);
        let grid =
            Sampling::default().with_patches(PatchSampling::new([8, 8, 8]).with_grid([2, 0, 4]));
        assert_eq!(Sampling::from_options(&grid.options()).unwrap(), grid);
        let e = PatchSampling::new([8, 8, 8])
            .with_grid([8, 0, 0])
            .check()
            .unwrap_err();
        assert_eq!(e.option(), "overlap");
    }

    #[test]
    fn bad_patch_settings_are_named() {
        let cases: Vec<(PatchSampling, &str, &str)> = vec![
            (PatchSampling::new([0, 8, 8]), "patch", "every axis"),
            (
                PatchSampling::new([8, 8, 8]).with_per_volume(0),
                "patches_per_volume",
                "0 patches",
            ),
            (
                PatchSampling::new([8, 8, 8]).with_window(0),
                "patch_window",
                "0 volumes",
            ),
            (
                PatchSampling::new([8, 8, 8]).with_label_probabilities("mask", vec![]),
                "label_probabilities",
                "no class",
            ),
            (
                PatchSampling::new([8, 8, 8]).with_label_probabilities("mask", vec![(1, -1.0)]),
                "label_probabilities",
                "class 1: -1",
            ),
            (
                PatchSampling::new([8, 8, 8])
                    .with_label_probabilities("mask", vec![(1, 1.0), (1, 2.0)]),
                "label_probabilities",
                "two probabilities",
            ),
        ];
        for (patches, option, says) in cases {
            let e = patches.check().unwrap_err();
            assert_eq!(e.option(), option);
            assert!(e.to_string().contains(says), "{e}");
        }
        let split =
            crate::split::Split::new("train", vec![("train".into(), 0.8), ("val".into(), 0.2)]);
        let by_volume = Sampling::default()
            .with_split(split)
            .with_patches(PatchSampling::new([8, 8, 8]));
        by_volume.check().unwrap();
        assert_eq!(
            Sampling::from_options(&by_volume.options()).unwrap(),
            by_volume
        );
        let e = Sampling::default()
            .with_balance_labels()
            .with_patches(PatchSampling::new([8, 8, 8]))
            .check()
            .unwrap_err();
        assert_eq!(e.option(), "patch");
        assert!(e.to_string().contains("balance draw rows"), "{e}");
        assert_eq!("mirror".parse::<Pad>().unwrap_err().option(), "pad");
    }
}
