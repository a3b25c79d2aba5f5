//! The table argument of `voxlake.Loader`: a location, or a mixture as a list of
//! `voxlake.Source`s (`python/voxlake/_source.py`, a dataclass that pickles into workers),
//! read here by their attributes into the Rust [`Source`](voxlake_loader::Source)s.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use voxlake::AsOf;
use voxlake_loader::{Loader, LoaderBuilder, Source};

use crate::errors::option;
use crate::extract::{type_name, value};

/// What `voxlake.Loader` reads.
#[derive(Clone)]
pub(crate) enum Table {
    /// One table at this location.
    One(String),
    /// A mixture's sources, in order.
    Mixture(Vec<Source>),
}

impl Table {
    /// A `str` or a list of `voxlake.Source`.
    pub(crate) fn extract(v: &Bound<'_, PyAny>) -> PyResult<Table> {
        if let Ok(location) = v.extract::<String>() {
            return Ok(Table::One(location));
        }
        if !(v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()) {
            return Err(option(format!(
                "table: expected a str or a list of voxlake.Source, got {}",
                type_name(v)
            )));
        }
        let class = v.py().import("voxlake._source")?.getattr("Source")?;
        let mut sources = Vec::new();
        for (i, item) in v.try_iter()?.enumerate() {
            let item = item?;
            if !item.is_instance(&class)? {
                return Err(option(format!(
                    "table: item {i} of the list is {}, not a voxlake.Source",
                    type_name(&item)
                )));
            }
            sources.push(source(&item)?);
        }
        Ok(Table::Mixture(sources))
    }

    /// A builder for it.
    pub(crate) fn builder(&self) -> LoaderBuilder {
        match self {
            Table::One(location) => Loader::builder(location.clone()),
            Table::Mixture(sources) => Loader::mixture(sources.clone()),
        }
    }

    /// Its shares of the draws (none for one table).
    pub(crate) fn shares(&self) -> Vec<voxlake::plan::mixture::Share> {
        match self {
            Table::One(_) => Vec::new(),
            Table::Mixture(sources) => sources.iter().map(Source::share).collect(),
        }
    }

    /// As `repr` shows it (no secrets: locations without their query strings).
    pub(crate) fn describe(&self) -> String {
        match self {
            Table::One(location) => format!("{:?}", voxlake::io::redact(location)),
            Table::Mixture(sources) => {
                let names: Vec<String> = sources
                    .iter()
                    .map(|s| format!("{:?}", voxlake::io::redact(s.location())))
                    .collect();
                format!("[{}]", names.join(", "))
            }
        }
    }
}

/// One `voxlake.Source`'s attributes as a Rust source.
fn source(item: &Bound<'_, PyAny>) -> PyResult<Source> {
    let attr = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let v = item.getattr(name)?;
        Ok((!v.is_none()).then_some(v))
    };
    let table: String = value("Source.table", &item.getattr("table")?, "a str")?;
    let mut source = Source::new(table);
    if let Some(v) = attr("proportion")? {
        source = source.with_proportion(value("Source.proportion", &v, "a float")?);
    }
    if let Some(v) = attr("repeat")? {
        source = source.with_repeat(value("Source.repeat", &v, "a float")?);
    }
    if let Some(v) = attr("choose")? {
        source = source.with_choose(value("Source.choose", &v, "an int >= 0")?);
    }
    if let Some(v) = attr("filter")? {
        source = source.with_filter(value::<String>("Source.filter", &v, "a str")?);
    }
    if let Some(v) = attr("version")? {
        source = source.with_as_of(AsOf::Version(value("Source.version", &v, "an int")?));
    }
    if let Some(v) = attr("timestamp")? {
        source = source.with_as_of(crate::extract::timestamp(&v)?);
    }
    if let Some(v) = attr("storage_options")? {
        let map: HashMap<String, String> =
            value("Source.storage_options", &v, "a dict of str to str")?;
        source = source.with_storage_options(map);
    }
    Ok(source)
}
