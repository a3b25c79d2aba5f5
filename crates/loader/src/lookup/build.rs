//! `LoaderBuilder::build_lookup`: the table opened at the builder's version, its stream (one
//! shard: every row) and the assembler made as `build()` makes them.

use std::sync::Arc;

use voxlake_plan::plan::Shard;
use voxlake_plan::resume::OrderSettings;

use super::Lookup;
use crate::counters::Counters;
use crate::{LoaderBuilder, LoaderError};

impl LoaderBuilder {
    /// The table's rows by position or id ([`Lookup`]) instead of streamed: what a map-style
    /// dataset reads, any sampler choosing the rows. It takes the table's settings (version,
    /// store, columns, filter, cache, checks), the memory budget, the channel layout and the
    /// transforms (seeded by the shuffle seed, where one is set); the stream's order settings
    /// (shuffle buffer, batch size, epochs, rank) are not used: the sampler decides which rows
    /// each rank reads. A split (`Sampling::with_split`) is read as its rows alone, numbered
    /// `0..len()` in the version's order; a mixture, a state, weighted draws, an epoch size, a
    /// subset, a CUDA device or a metrics endpoint is refused.
    pub fn build_lookup(mut self) -> Result<Lookup, LoaderError> {
        let refused = |what: &str| {
            Err(LoaderError::Config(format!(
                "a lookup reads one table's rows as asked: {what} is the streaming loader's"
            )))
        };
        if self.sources.is_some() {
            return refused("a mixture of sources");
        }
        if self.state.is_some() {
            return refused("a state to resume");
        }
        // A split is a fixed subset of the rows; draws are a sampler's.
        let split = self.sampling.split().cloned();
        let split_only = split.as_ref().map(|s| {
            voxlake_plan::sample::Sampling::default().with_split(s.clone()) == self.sampling
        });
        if !self.sampling.is_plain() && split_only != Some(true) {
            return refused(
                "weighted draws, an epoch size or a subset (draw the rows with a sampler)",
            );
        }
        if self.device.is_some() {
            return refused("a device for the batches");
        }
        if self.metrics_port.is_some() {
            return refused("a metrics endpoint (of a training loop's steps)");
        }
        if self.trace.is_some() {
            return refused("a trace (of a training loop's steps)");
        }
        crate::fork::check()?;
        let _live = crate::fork::Live::new();
        let versions = self.versions_to_read()?;
        let runtime = crate::fork::tokio_runtime(self.runtime_threads, "voxlake-lookup")
            .map_err(|e| LoaderError::Internal(format!("tokio runtime: {e}")))?;
        let mut settings = OrderSettings {
            seed: self.shuffle.map_or(0, |s| s.0),
            batch_size: self.batch_size,
            ..OrderSettings::plain()
        };
        self.shuffle = None;
        let whole = Shard::new(0, 1)
            .ok_or_else(|| LoaderError::Internal("the shard of one rank".into()))?;
        let opened = self.open_stream(&runtime, versions, whole, &mut settings)?;
        let counters = Arc::new(Counters::default());
        let assembler = self.assembler(&opened, &settings, &counters, &Arc::default(), None)?;
        let mut lookup = Lookup::new(
            opened.stream,
            assembler,
            opened.sample_bytes,
            counters,
            runtime,
        );
        if let Some(split) = split {
            lookup.keep_split(&split)?;
        }
        Ok(lookup)
    }
}
