//! The `transforms` option of `voxlake.Loader`: `[(name, {parameter: value}), …]` made into the
//! Rust loader's transforms by name (`LoaderBuilder::with_augment`), each name and parameter
//! checked here, each value by the loader against the table's sample.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voxlake_loader::LoaderBuilder;

use crate::errors::option;
use crate::extract::{dtype, value};

/// `transforms`: `[(name, {parameter: value}), …]`, run in order on the assembly threads
/// (`LoaderBuilder::with_augment`).
pub(crate) fn apply(b: LoaderBuilder, v: &Bound<'_, PyAny>) -> PyResult<LoaderBuilder> {
    use voxlake_loader::transform::Augment;
    let kind = "a list of (name, dict of parameters)";
    let list: Vec<(String, Bound<'_, PyDict>)> = value("transforms", v, kind)?;
    let mut augments = Vec::with_capacity(list.len());
    for (i, (name, params)) in list.iter().enumerate() {
        let at = format!("transforms[{i}] ({name})");
        let known: &[&str] = match name.as_str() {
            "flip" => &["axes", "p"],
            "crop" => &["shape"],
            "normalize" => &["mean", "std"],
            "cast" => &["dtype"],
            _ => {
                return Err(option(format!(
                    "option {at}: no such transform (flip, crop, normalize, cast)"
                )));
            }
        };
        for key in params.keys() {
            let key: String = value(&at, &key, "str keys")?;
            if !known.contains(&key.as_str()) {
                return Err(option(format!(
                    "option {at}: no parameter '{key}' (it takes {})",
                    known.join(", ")
                )));
            }
        }
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            params
                .get_item(key)?
                .ok_or_else(|| option(format!("option {at}: '{key}' is required")))
        };
        let param = |key: &str| format!("{at} {key}");
        augments.push(match name.as_str() {
            "flip" => Augment::Flip {
                axes: value(&param("axes"), &get("axes")?, "a list of axes")?,
                p: match params.get_item("p")? {
                    Some(p) => value(&param("p"), &p, "a float")?,
                    None => 0.5,
                },
            },
            "crop" => Augment::Crop {
                shape: value(&param("shape"), &get("shape")?, "a list of ints")?,
            },
            "normalize" => Augment::Normalize {
                mean: value(&param("mean"), &get("mean")?, "a float")?,
                std: value(&param("std"), &get("std")?, "a float")?,
            },
            _ => {
                let name: String = value(&param("dtype"), &get("dtype")?, "a str")?;
                Augment::Cast(dtype(&at, &name)?)
            }
        });
    }
    Ok(b.with_augment(augments))
}
