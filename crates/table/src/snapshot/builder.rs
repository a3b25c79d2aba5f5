//! [`SnapshotBuilder`]: opening a snapshot as its [`TableOptions`] say.

use voxlake_delta::AsOf;
use voxlake_delta::agree;
use voxlake_delta::{DeltaLog, Prior};

use std::sync::Arc;

use super::Snapshot;
use crate::error::TableError;
use crate::options::{ScanOptions, TableOptions};
use crate::scan::Scan;

/// Configures and opens a [`Snapshot`]: `Snapshot::builder(location)`, the `with_*` setters
/// of [`table_options_setters`](crate::table_options_setters), then `build()`.
#[derive(Clone)]
pub struct SnapshotBuilder {
    location: String,
    options: TableOptions,
    statistics: bool,
}

impl std::fmt::Debug for SnapshotBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBuilder")
            .field("location", &voxlake_io::redact(&self.location))
            .field("options", &self.options)
            .field("statistics", &self.statistics)
            .finish()
    }
}

impl Snapshot {
    /// The builder of the snapshot of the table at `location` (a local path or URL).
    pub fn builder(location: impl Into<String>) -> SnapshotBuilder {
        SnapshotBuilder {
            location: location.into(),
            options: TableOptions::default(),
            statistics: true,
        }
    }
}

impl SnapshotBuilder {
    crate::table_options_setters!(options);

    /// Every setting at once (replacing those given before).
    pub fn with_options(mut self, options: TableOptions) -> Self {
        self.options = options;
        self
    }

    /// Whether the add actions' statistics (JSON, about 100 bytes a file) are kept in memory,
    /// so that a scan's filter skips files by them unread; without them a filter reads every
    /// file's footer. Default: kept. A stream or loader without a filter opens without them.
    pub fn with_statistics(mut self, keep: bool) -> Self {
        self.statistics = keep;
        self
    }

    /// Opens the table as the settings say: its log at the version (a job's, where a job is
    /// named), the cache its remote reads go through, the row counts of files whose log has
    /// none (from their footers).
    ///
    /// The table may be any Delta table, or a folder (prefix) of Parquet files without a log,
    /// with its tensors in any encoding of [`voxlake_format::sample::TensorEncoding`]; a table
    /// that is not voxlake's is resolved from the first file's footer. A Delta table is read as
    /// its protocol says: deleted rows (deletion vectors) are left out, columns go by their
    /// logical names (column mapping), and a reader feature not handled is an error naming it
    /// ([`SUPPORTED_READER_FEATURES`]).
    ///
    /// [`SUPPORTED_READER_FEATURES`]: voxlake_delta::SUPPORTED_READER_FEATURES
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), voxlake_table::TableError> {
    /// use voxlake_table::Snapshot;
    ///
    /// let snapshot = Snapshot::builder("az://data/cubes").with_version(3).build().await?;
    /// assert_eq!(snapshot.version(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Snapshot, TableError> {
        let (location, options) = (self.location.as_str(), &self.options);
        let stats = self.statistics;
        // The cache is opened first: the log's immutable objects are read through it too.
        let cache = options.cache.open()?;
        let (storage, root) = (&options.storage_options, options.root_store.as_ref());
        let log = DeltaLog::new(location, storage)?;
        // `prior`: what a job's resolution found first. Boxed: a read's future is large, and a
        // job's resolution holds several (a loader builds on a thread of the default stack
        // size).
        let open = |as_of, prior: Prior| {
            let log = DeltaLog::new(location, storage).map(|log| {
                log.with_as_of(as_of)
                    .with_root_store(root.cloned())
                    .with_node_cache(cache.clone())
                    .with_stats(stats)
                    .with_prior(prior)
            });
            Box::pin(async move { log?.read().await })
        };
        // "Latest" is the job's, not this rank's, where a job is named: the version a rank of
        // the job agreed on, else this rank's latest, published for the others.
        let found = match (&options.job, options.as_of) {
            (Some(job), AsOf::Latest) => {
                let job_dir = options.job_dir.as_deref();
                let cache = cache.as_ref();
                agree::open_for_job(location, storage, root, job, job_dir, cache, &open).await?
            }
            (_, as_of) => open(as_of, Prior::default()).await?,
        };
        let hints = &options.hints;
        let snapshot = Snapshot::from_found(found, log.display(), log.identity(), hints).await?;
        let snapshot = match cache {
            Some(cache) => snapshot.with_cache(cache),
            None => snapshot,
        };
        snapshot.load_row_counts().await
    }

    /// Opens the table for one scan and makes it: the snapshot as [`build`](Self::build),
    /// keeping the log's file statistics only where `scan` has a filter to skip files by
    /// (whatever [`with_statistics`](Self::with_statistics) said), then
    /// `snapshot.scan_builder().with_options(scan).build()`. What a stream or a loader opening
    /// a table by its location does.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), voxlake_table::TableError> {
    /// use voxlake_table::{ScanOptions, Snapshot};
    ///
    /// let scan = Snapshot::builder("az://data/cubes").build_scan(ScanOptions::default()).await?;
    /// assert_eq!(scan.columns(), ["id", "label", "tensor"]);
    /// # Ok(()) }
    /// ```
    pub async fn build_scan(self, scan: ScanOptions) -> Result<Scan, TableError> {
        let filters = scan.filter.is_some();
        let snapshot = self.with_statistics(filters).build().await?;
        Arc::new(snapshot)
            .scan_builder()
            .with_options(scan)
            .build()
            .await
    }
}
