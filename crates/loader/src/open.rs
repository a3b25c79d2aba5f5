//! What `build()` opens: the version of the table, or of each source of a mixture (a state's,
//! else the one asked for), the mixture's shares put into the sampling spec, the snapshots
//! opened at once, and a state's sources checked against them.

use std::sync::Arc;

use voxlake_delta::AsOf;
use voxlake_stream::{Sources, StreamError, TableStream};
use voxlake_table::{ScanOptions, Snapshot, TableOptions};

use crate::state::{LoaderState, sources_of};
use crate::{LoaderBuilder, LoaderError};

impl LoaderBuilder {
    /// The version of each table to open (one, or a mixture's sources in order): a state's
    /// (it must be the one fixed, if any), else the one asked for; ranks of no job each
    /// resolving "latest" are warned of.
    pub(crate) fn versions_to_read(&self) -> Result<Vec<AsOf>, LoaderError> {
        let asked: Vec<AsOf> = match &self.sources {
            None => vec![self.options.as_of],
            Some(sources) => sources
                .iter()
                .map(|s| s.as_of().unwrap_or(self.options.as_of))
                .collect(),
        };
        let fixed: Vec<u64> = match &self.state {
            None => Vec::new(),
            Some(s) if s.sources.is_empty() => vec![s.version],
            Some(s) => s.sources.iter().map(|p| p.version).collect(),
        };
        if self.state.is_some() && fixed.len() != asked.len() {
            return Err(LoaderError::State(format!(
                "the state is of {} table(s), this loader reads {}",
                fixed.len(),
                asked.len()
            )));
        }
        let mut versions = Vec::with_capacity(asked.len());
        for (i, as_of) in asked.into_iter().enumerate() {
            versions.push(match (fixed.get(i), as_of) {
                (Some(&s), AsOf::Version(v)) if s != v => {
                    return Err(LoaderError::State(format!(
                        "the state is of version {s}{}, the builder fixes version {v}",
                        match self.sources {
                            None => String::new(),
                            Some(_) => format!(" of source {i}"),
                        }
                    )));
                }
                // A state fixes the version it was read at, whatever time named it.
                (Some(&s), _) => AsOf::Version(s),
                (None, as_of) => as_of,
            });
        }
        if self.world_size > 1 && self.options.job.is_none() && versions.contains(&AsOf::Latest) {
            tracing::warn!(
                caution = true,
                rank = self.rank,
                world_size = self.world_size,
                "each rank resolves the latest version by itself: while the table takes commits, ranks may read different versions. Name the job (with_job, VOXLAKE_JOB_ID) or fix a version"
            );
        }
        Ok(versions)
    }

    /// A mixture's shares into the sampling spec (which must not name its own), its sources
    /// checked.
    pub(crate) fn mix_sampling(&mut self) -> Result<(), LoaderError> {
        let Some(sources) = &self.sources else {
            return Ok(());
        };
        if sources.is_empty() {
            return Err(LoaderError::Config("a mixture of no source".into()));
        }
        if !self.sampling.shares().is_empty() {
            return Err(LoaderError::Config(
                "a mixture's shares are its sources' (Source::with_proportion, with_repeat, with_choose), not the sampling spec's".into(),
            ));
        }
        if sources.len() > 1 && self.options.root_store.is_some() {
            return Err(LoaderError::Config(
                "a store of the caller's (with_object_store) serves one table, not a mixture's sources".into(),
            ));
        }
        let shares = sources.iter().map(|s| s.share()).collect();
        self.sampling = self.sampling.clone().with_shares(shares);
        Ok(())
    }

    /// Opens the table, or each source of a mixture, at `versions` (one each, in order), at
    /// once; sources whose fields differ are refused before any data is read.
    pub(crate) async fn open_sources(&self, versions: Vec<AsOf>) -> Result<Sources, LoaderError> {
        let opens: Vec<(String, TableOptions, ScanOptions)> = match &self.sources {
            None => vec![(
                self.table.clone(),
                TableOptions {
                    as_of: versions.first().copied().unwrap_or_default(),
                    ..self.options.clone()
                },
                self.scan.clone(),
            )],
            Some(sources) => sources
                .iter()
                .zip(versions)
                .map(|(s, v)| {
                    let options = s.options(&self.options, v);
                    (
                        s.location().to_string(),
                        options,
                        s.scan_options(&self.scan),
                    )
                })
                .collect(),
        };
        if opens.is_empty() {
            return Err(LoaderError::Config("a mixture of no source".into()));
        }
        let scans = futures::future::try_join_all(opens.into_iter().map(|(at, options, scan)| {
            Snapshot::builder(at).with_options(options).build_scan(scan)
        }))
        .await
        .map_err(StreamError::from)?;
        Ok(Sources::new(scans.into_iter().map(Arc::new).collect())?)
    }

    /// A state of a mixture was taken over these sources at these versions: else an error
    /// naming the source that differs.
    pub(crate) fn check_sources(
        &self,
        state: &LoaderState,
        stream: &TableStream,
    ) -> Result<(), LoaderError> {
        let ours = sources_of(self.sources.as_deref().unwrap_or_default(), stream);
        if state.sources == ours {
            return Ok(());
        }
        if state.sources.len() != ours.len() {
            return Err(LoaderError::State(format!(
                "the state is of {} source(s), this loader mixes {}",
                state.sources.len().max(1),
                ours.len().max(1)
            )));
        }
        let (i, (theirs, ours)) = state
            .sources
            .iter()
            .zip(&ours)
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .ok_or_else(|| LoaderError::Internal("sources differ but none does".into()))?;
        Err(LoaderError::State(format!(
            "source {i} of the state is {} at version {} ({}, {} files), this loader's is {} at version {} ({}, {} files)",
            theirs.table,
            theirs.version,
            theirs.files,
            theirs.file_count,
            ours.table,
            ours.version,
            ours.files,
            ours.file_count
        )))
    }
}

/// [`Loader::label_column`](crate::Loader::label_column) of `stream`'s table (or mixture).
pub(crate) fn label_column(stream: &voxlake_stream::TableStream) -> Option<(&str, bool)> {
    let name = stream.scan().snapshot().columns().label.as_deref()?;
    let nullable = stream.sources().scans().iter().any(|s| {
        let s = s.snapshot();
        s.columns().label.as_deref().is_none_or(|label| {
            s.schema()
                .field_with_name(label)
                .map_or(true, |f| f.is_nullable())
        })
    });
    Some((name, nullable))
}
