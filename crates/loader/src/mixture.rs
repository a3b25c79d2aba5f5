//! A mixture's sources ([`Source`]): several tables read in one run, each with its own
//! version, filter and store settings, and its share of each epoch's draws
//! ([`voxlake_plan::mixture`]). Every batch says which source each sample came from
//! (`Batch::sources`).

use std::collections::HashMap;

use voxlake_delta::AsOf;
use voxlake_plan::mixture::Share;
use voxlake_table::{ScanOptions, TableOptions};

/// One table of a mixture ([`Loader::mixture`](crate::Loader::mixture)): its location, its own
/// version, filter and store settings, and its share of each epoch's draws
/// ([`voxlake_plan::mixture`]). Settings it does not name (cache, job, sample columns, …) are
/// the loader builder's; each batch says which source each sample came from
/// (`Batch::sources`).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let mut tables = Vec::new();
/// # for (name, n) in [("curated", 8), ("noisy", 24)] {
/// #     let data = voxlake_compact::synth::generate(&dir.path().join(name), n, 1)?;
/// #     let table = dir.path().join(name).join("table").to_string_lossy().into_owned();
/// #     tokio::runtime::Runtime::new()?.block_on(
/// #         voxlake_compact::Compactor::new(&table).convert(&data.cubes.to_string_lossy()))?;
/// #     tables.push(table);
/// # }
/// use voxlake_loader::{Loader, Source};
///
/// // Three quarters of each epoch's 16 draws from the curated table, a quarter from the other.
/// let loader = Loader::mixture(vec![
///     Source::new(&tables[0]).with_proportion(0.75),
///     Source::new(&tables[1]).with_proportion(0.25),
/// ])
/// .with_sampling(voxlake_plan::sample::Sampling::default().with_epoch_size(16))
/// .with_batch_size(4)
/// .build()?;
/// let mut per_source = [0; 2];
/// for batch in loader {
///     for s in batch?.sources {
///         per_source[s as usize] += 1;
///     }
/// }
/// assert_eq!(per_source, [12, 4]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Source {
    location: String,
    as_of: Option<AsOf>,
    filter: Option<String>,
    storage_options: Option<HashMap<String, String>>,
    share: Share,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only.
        f.debug_struct("Source")
            .field("location", &voxlake_io::redact(&self.location))
            .field("as_of", &self.as_of)
            .field("filter", &self.filter)
            .field(
                "storage_option_keys",
                &self
                    .storage_options
                    .as_ref()
                    .map(|o| o.keys().collect::<Vec<_>>()),
            )
            .field("share", &self.share)
            .finish()
    }
}

impl Source {
    /// The table at `location` (a local path or URL), every row drawn once an epoch.
    pub fn new(location: impl Into<String>) -> Self {
        Source {
            location: location.into(),
            as_of: None,
            filter: None,
            storage_options: None,
            share: Share::default(),
        }
    }

    /// A share of each epoch's draws, relative to the other sources' (every source of a
    /// mixture has one, or none does).
    pub fn with_proportion(mut self, proportion: f64) -> Self {
        self.share = Share::Proportion(proportion);
        self
    }

    /// Draws per row per epoch (`0.5`: half its rows, another half each epoch).
    pub fn with_repeat(mut self, repeat: f64) -> Self {
        self.share = Share::Repeat(repeat);
        self
    }

    /// Draws per epoch.
    pub fn with_choose(mut self, draws: u64) -> Self {
        self.share = Share::Choose(draws);
        self
    }

    /// This source's version, as the builder's `with_version` / `with_timestamp` say it for a
    /// table (default: the builder's).
    pub fn with_as_of(mut self, as_of: AsOf) -> Self {
        self.as_of = Some(as_of);
        self
    }

    /// This source's rows: an SQL boolean expression (default: the builder's filter).
    pub fn with_filter(mut self, filter: impl Into<String>) -> Self {
        self.filter = Some(filter.into());
        self
    }

    /// This source's storage settings (default: the builder's).
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = Some(options);
        self
    }

    /// Its location.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Its share of each epoch's draws.
    pub fn share(&self) -> Share {
        self.share
    }

    /// The version asked of it (`None`: the builder's).
    pub(crate) fn as_of(&self) -> Option<AsOf> {
        self.as_of
    }

    /// How it opens: the builder's `base` settings with its own, at `as_of`.
    pub(crate) fn options(&self, base: &TableOptions, as_of: AsOf) -> TableOptions {
        TableOptions {
            as_of,
            storage_options: self
                .storage_options
                .clone()
                .unwrap_or_else(|| base.storage_options.clone()),
            ..base.clone()
        }
    }

    /// What is read of it: the builder's `base` settings with its own.
    pub(crate) fn scan_options(&self, base: &ScanOptions) -> ScanOptions {
        let mut options = base.clone();
        if let Some(filter) = &self.filter {
            options.filter = Some(filter.clone());
        }
        options
    }
}
