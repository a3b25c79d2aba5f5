//! The sampling keywords of `voxlake.Loader` (and of `voxlake.torch`'s `Dataset` and
//! `DataLoader`, which pass them on): gathered into the one `Sampling` spec the Rust builder
//! takes, and checked when the loader is made, before anything is read (an error names the
//! option and the value).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voxlake::plan::patch::PatchSampling;
use voxlake::plan::sample::Sampling;
use voxlake::plan::split::Split;

use crate::errors::{config, option};
use crate::extract::value;

/// One sampling keyword: its name, its Python type (for the stub), what it does, and where
/// it is kept until the spec is made.
pub(crate) struct SamplingOption {
    pub name: &'static str,
    pub kind: &'static str,
    pub doc: &'static str,
    pub apply: fn(&mut SamplingOptions, &Bound<'_, PyAny>) -> PyResult<()>,
}

/// The sampling keywords as given, before they make one spec.
#[derive(Default)]
pub(crate) struct SamplingOptions {
    balance: Option<String>,
    class_weights: Option<Vec<(i64, f64)>>,
    weight_column: Option<String>,
    epoch_size: Option<u64>,
    subsample: Option<f64>,
    subset_by: Option<String>,
    split: Option<String>,
    splits: Option<Vec<(String, f64)>>,
    split_salt: Option<String>,
    patch: Option<[u64; 3]>,
    patches_per_volume: Option<u64>,
    label_field: Option<String>,
    label_probabilities: Option<Vec<(i64, f64)>>,
    pad: Option<String>,
    patch_window: Option<usize>,
    sampler: Option<String>,
    overlap: Option<[u64; 3]>,
}

/// A dict's items in its order, keys and values typed, or an error naming `name`.
fn items<'py, K: FromPyObjectOwned<'py>>(
    name: &str,
    v: &Bound<'py, PyAny>,
    kind: &str,
) -> PyResult<Vec<(K, f64)>> {
    let Ok(dict) = v.cast::<PyDict>() else {
        return Err(option(format!("option {name}: expected {kind}")));
    };
    dict.iter()
        .map(|(k, w)| Ok((value(name, &k, kind)?, value(name, &w, kind)?)))
        .collect()
}

/// Every sampling keyword, in the order `help()` shows them (after the others).
pub(crate) const OPTIONS: &[SamplingOption] = &[
    SamplingOption {
        name: "balance",
        kind: "str",
        doc: "\"label\": every label value an equal share of each epoch's draws (with replacement), on every rank.",
        apply: |o, v| {
            o.balance = Some(value("balance", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "class_weights",
        kind: "dict[int, float]",
        doc: "A relative weight per label value, every label of the table given one: {0: 1.0, 1: 9.0} (with replacement).",
        apply: |o, v| {
            o.class_weights = Some(items("class_weights", v, "a dict of int to float")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "weight_column",
        kind: "str",
        doc: "A numeric column whose value is each row's weight (draws with replacement).",
        apply: |o, v| {
            o.weight_column = Some(value("weight_column", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "epoch_size",
        kind: "int",
        doc: "Draws per epoch over all ranks (default: the rows selected); unweighted, fewer than the rows is a new subset of distinct rows each epoch.",
        apply: |o, v| {
            o.epoch_size = Some(value("epoch_size", v, "an int")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "subsample",
        kind: "float",
        doc: "A new seeded subset of this share of the rows each epoch, in (0, 1].",
        apply: |o, v| {
            o.subsample = Some(value("subsample", v, "a float")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "subset_by",
        kind: "str",
        doc: "What an unweighted subset (subsample, epoch_size) takes: \"row\" (default: rows alike, nearly every row group read) or \"row_group\" (whole row groups: only those read, their rows together).",
        apply: |o, v| {
            o.subset_by = Some(value("subset_by", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "split",
        kind: "str",
        doc: "Read only this split of `splits`: a row's split is a hash of its id and split_salt alone, so appended rows never move one.",
        apply: |o, v| {
            o.split = Some(value("split", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "splits",
        kind: "dict[str, float]",
        doc: "The splits' relative shares by name: {\"train\": 0.8, \"val\": 0.1, \"test\": 0.1}.",
        apply: |o, v| {
            o.splits = Some(items("splits", v, "a dict of str to float")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "split_salt",
        kind: "str",
        doc: "Another salt, another (equally stable) assignment of rows to splits (default \"\").",
        apply: |o, v| {
            o.split_salt = Some(value("split_salt", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "patch",
        kind: "tuple[int, int, int]",
        doc: "Patches of this many voxels (z, y, x) of a bricked table's volumes (voxlake.write_volumes) instead of rows: each batch holds every volume field as [B, C?, z, y, x], origin (int64 [B, 3]) and the volumes' ids.",
        apply: |o, v| {
            o.patch = Some(value("patch", v, "three ints")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "patches_per_volume",
        kind: "int",
        doc: "With patch: patches drawn of each volume an epoch (default 1).",
        apply: |o, v| {
            o.patches_per_volume = Some(value("patches_per_volume", v, "an int")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "label_field",
        kind: "str",
        doc: "With patch and label_probabilities: the label map whose classes the centres are drawn by (a class field of the table).",
        apply: |o, v| {
            o.label_field = Some(value("label_field", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "label_probabilities",
        kind: "dict[int, float]",
        doc: "With patch: each class's relative probability of a patch's centre voxel in label_field: {0: 1, 1: 1} centres half the patches on class 1.",
        apply: |o, v| {
            o.label_probabilities =
                Some(items("label_probabilities", v, "a dict of int to float")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "pad",
        kind: "str",
        doc: "With patch: a patch past a volume's edge is filled with \"zero\" (default) or the \"edge\" voxels, or kept inside (\"none\").",
        apply: |o, v| {
            o.pad = Some(value("pad", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "patch_window",
        kind: "int",
        doc: "With patch: volumes whose patches are mixed together before batching (default 8).",
        apply: |o, v| {
            o.patch_window = Some(value("patch_window", v, "an int")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "sampler",
        kind: "str",
        doc: "With patch: \"random\" (default: patches_per_volume drawn of each volume) or \"grid\" (every patch of each volume's grid, overlap apart, in order: validation and inference, with voxlake.torch.GridAggregator).",
        apply: |o, v| {
            o.sampler = Some(value("sampler", v, "a str")?);
            Ok(())
        },
    },
    SamplingOption {
        name: "overlap",
        kind: "tuple[int, int, int]",
        doc: "With sampler=\"grid\": voxels the grid's neighbouring patches share (z, y, x; default 0).",
        apply: |o, v| {
            o.overlap = Some(value("overlap", v, "three ints")?);
            Ok(())
        },
    },
];

/// The patch sampler the keywords make (`None` without `patch`; its other keywords alone
/// are an error naming them).
fn patches(o: &mut SamplingOptions) -> PyResult<Option<PatchSampling>> {
    let Some(size) = o.patch else {
        let given: Vec<&str> = [
            ("patches_per_volume", o.patches_per_volume.is_some()),
            ("label_field", o.label_field.is_some()),
            ("label_probabilities", o.label_probabilities.is_some()),
            ("pad", o.pad.is_some()),
            ("patch_window", o.patch_window.is_some()),
            ("sampler", o.sampler.is_some()),
            ("overlap", o.overlap.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if given.is_empty() {
            return Ok(None);
        }
        return Err(config(format!(
            "options {}: they go with patch",
            given.join(", ")
        )));
    };
    let mut p = PatchSampling::new(size);
    if let Some(n) = o.patches_per_volume {
        p = p.with_per_volume(n);
    }
    if let Some(pad) = o.pad.take() {
        p = p.with_pad(pad.parse().map_err(|e| config(format!("option {e}")))?);
    }
    if let Some(n) = o.patch_window {
        p = p.with_window(n);
    }
    match (o.sampler.as_deref(), o.overlap) {
        (None | Some("random"), None) => {}
        (Some("grid"), overlap) => p = p.with_grid(overlap.unwrap_or_default()),
        (None | Some("random"), Some(_)) => {
            return Err(config("option overlap: it goes with sampler=\"grid\""));
        }
        (Some(other), _) => {
            return Err(config(format!(
                "option sampler: {other:?} is not \"random\" or \"grid\""
            )));
        }
    }
    match (o.label_field.take(), o.label_probabilities.take()) {
        (Some(field), Some(probabilities)) => {
            p = p.with_label_probabilities(field, probabilities);
        }
        (None, None) => {}
        _ => {
            return Err(config(
                "options label_field and label_probabilities go together: the label map, and each class's probability",
            ));
        }
    }
    Ok(Some(p))
}

/// The spec the keywords make, checked.
pub(crate) fn spec(mut o: SamplingOptions) -> PyResult<Sampling> {
    let mut spec = Sampling::default();
    if let Some(p) = patches(&mut o)? {
        spec = spec.with_patches(p);
    }
    match o.balance.as_deref() {
        None => {}
        Some("label") => spec = spec.with_balance_labels(),
        Some(other) => {
            return Err(config(format!(
                "option balance: {other:?} is not a way to balance (\"label\")"
            )));
        }
    }
    let weighted = [
        o.balance.is_some(),
        o.class_weights.is_some(),
        o.weight_column.is_some(),
    ];
    if weighted.iter().filter(|&&w| w).count() > 1 {
        return Err(config(
            "options balance, class_weights and weight_column: give one, each sets the weights",
        ));
    }
    if let Some(classes) = o.class_weights {
        spec = spec.with_class_weights(classes);
    }
    if let Some(column) = o.weight_column {
        spec = spec.with_weight_column(column);
    }
    if let Some(n) = o.epoch_size {
        spec = spec.with_epoch_size(n);
    }
    if let Some(f) = o.subsample {
        spec = spec.with_subsample(f);
    }
    if let Some(by) = o.subset_by {
        let by = by.parse().map_err(|e| config(format!("option {e}")))?;
        spec = spec.with_subset_by(by);
    }
    match (o.split, o.splits) {
        (Some(name), Some(shares)) => {
            let split = Split::new(name, shares).with_salt(o.split_salt.unwrap_or_default());
            spec = spec.with_split(split);
        }
        (None, None) if o.split_salt.is_none() => {}
        _ => {
            return Err(config(
                "options split and splits go together (split_salt with them): the split read, and every split's share",
            ));
        }
    }
    spec.check().map_err(|e| config(format!("option {e}")))?;
    Ok(spec)
}
