//! Opening, creating, reading and committing to the Delta table.

use std::collections::HashMap;

use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{StructType, engine::arrow_conversion::TryIntoKernel};
use deltalake::operations::create::CreateBuilder;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;
use voxlake_delta::stores;
use voxlake_format::volume::BrickSpec;
use voxlake_format::{Layout, SampleSpec};
use voxlake_io::cache::CacheChoice;
use voxlake_io::redact;
use voxlake_table::{Scan, ScanOptions, Snapshot};

use crate::error::CompactError;

/// Delta's own settings voxlake puts on every table it creates: statistics only for the
/// small columns (min/max of tensor bytes would be useless and large); each run's `txn` (see
/// [`Table::commit`]) forgotten a week after its last commit (it is needed for seconds, and
/// checkpoints would otherwise carry one per run for ever).
const DELTA_CONFIGURATION: [(&str, &str); 2] = [
    ("delta.dataSkippingStatsColumns", "id,label"),
    ("delta.setTransactionRetentionDuration", "interval 7 days"),
];

/// A table handle and the location used in messages.
pub(crate) struct Table {
    pub table: DeltaTable,
    pub display: String,
    /// This handle's Delta application id: each of its commits carries a `txn` action with it
    /// and the commit's number, so a commit whose reply was lost is found in the log.
    pub(crate) app_id: String,
    /// Commits made through this handle.
    pub(crate) commits: i64,
    /// The newest version this handle committed or saw: blind appends go to the log without
    /// moving `table`'s file list (see `commit.rs`), so `table` may be older.
    pub(crate) head: u64,
    /// Where the table is and the storage options it was opened with: a scan opens its
    /// version through them.
    url: Url,
    options: HashMap<String, String>,
}

impl Table {
    fn handle(
        table: DeltaTable,
        url: &Url,
        display: &str,
        options: &HashMap<String, String>,
    ) -> Table {
        use std::hash::{BuildHasher, Hasher};
        // Unique per handle: the process, the time and std's per-process random keys.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        Table {
            head: table.version().unwrap_or(0),
            table,
            display: display.to_string(),
            app_id: format!("voxlake-{:016x}", h.finish()),
            commits: 0,
            url: url.clone(),
            options: options.clone(),
        }
    }

    pub(crate) fn error(&self, source: DeltaTableError) -> CompactError {
        CompactError::Table {
            location: self.display.clone(),
            source: Box::new(source),
        }
    }

    /// Opens the table at `url`; `Ok(None)` if there is no Delta table there yet.
    pub(crate) async fn open(
        url: &Url,
        display: &str,
        options: &HashMap<String, String>,
    ) -> Result<Option<Table>, CompactError> {
        stores::register_handlers();
        stores::ensure_reachable(url.as_str(), options).await?;
        let err = |source| CompactError::Table {
            location: display.to_string(),
            source: Box::new(source),
        };
        let mut table = builder(url, options)?.build().map_err(err)?;
        // Ask first: loading a missing table makes the kernel log an error.
        if !table.verify_deltatable_existence().await.map_err(err)? {
            return Ok(None);
        }
        match table.load().await {
            Ok(()) => Ok(Some(Table::handle(table, url, display, options))),
            Err(DeltaTableError::NotATable(_)) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Creates the table for samples of `spec` (version 0; of `bricks` where it holds bricked
    /// volumes); if another writer created it first, opens theirs and checks it holds the same
    /// fields.
    pub(crate) async fn create(
        url: &Url,
        display: &str,
        options: &HashMap<String, String>,
        spec: &SampleSpec,
        bricks: Option<&BrickSpec>,
    ) -> Result<Table, CompactError> {
        stores::register_handlers();
        let err = |source| CompactError::Table {
            location: display.to_string(),
            source: Box::new(source),
        };
        let schema: StructType = spec
            .arrow_schema_with(true)
            .as_ref()
            .try_into_kernel()
            .map_err(|e: arrow_schema::ArrowError| err(e.into()))?;
        let incompatible = |e: voxlake_format::FormatError| CompactError::Incompatible {
            location: display.to_string(),
            reason: e.to_string(),
        };
        let stored = match bricks {
            Some(bricks) => bricks.table_configuration(),
            None => spec.table_configuration(),
        };
        let mut configuration: HashMap<String, Option<String>> = stored
            .map_err(incompatible)?
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect();
        for (k, v) in DELTA_CONFIGURATION {
            configuration.insert(k.to_string(), Some(v.to_string()));
        }
        let create = if matches!(url.scheme(), "file" | "memory") {
            // deltalake makes a local table's folder.
            CreateBuilder::new()
                .with_location(url.as_str())
                .with_storage_options(options.clone())
        } else {
            CreateBuilder::new()
                .with_log_store(builder(url, options)?.build().map_err(err)?.log_store())
        };
        let created = create
            .with_columns(schema.fields().cloned())
            .with_configuration(configuration)
            // The voxlake.* keys are not Delta properties; readers ignore them.
            .with_raise_if_key_not_exists(false)
            // A lost race must fail, not re-commit the metadata as the next version.
            .with_commit_properties(commit_properties("create").with_max_retries(0))
            .await;
        match created {
            Ok(table) => Ok(Table::handle(table, url, display, options)),
            Err(e) => {
                // A concurrent `--shard` run may have created it: use theirs if it fits.
                match Table::open(url, display, options).await? {
                    Some(table)
                        if table.sample()? == *spec && table.bricks()?.as_ref() == bricks =>
                    {
                        Ok(table)
                    }
                    Some(table) => Err(CompactError::Incompatible {
                        location: display.to_string(),
                        reason: format!(
                            "created concurrently with tensors {}, this run has {spec}",
                            table.sample()?
                        ),
                    }),
                    None => Err(err(e)),
                }
            }
        }
    }

    /// The sample's fields recorded in the table configuration.
    pub(crate) fn sample(&self) -> Result<SampleSpec, CompactError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        SampleSpec::from_table_configuration(snapshot.metadata().configuration()).map_err(|e| {
            CompactError::Incompatible {
                location: self.display.clone(),
                reason: e.to_string(),
            }
        })
    }

    /// A bricked table's layout recorded in the table configuration.
    pub(crate) fn bricks(&self) -> Result<Option<BrickSpec>, CompactError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        BrickSpec::from_table_configuration(snapshot.metadata().configuration()).map_err(|e| {
            CompactError::Incompatible {
                location: self.display.clone(),
                reason: e.to_string(),
            }
        })
    }

    /// Whether the table has the checksum column (tables written before it have none).
    pub(crate) fn has_checksums(&self) -> Result<bool, CompactError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        Ok(snapshot
            .schema()
            .fields()
            .any(|f| f.name() == voxlake_format::CHECKSUM_COLUMN))
    }

    /// The newest version this handle committed or loaded.
    pub(crate) fn version(&self) -> u64 {
        self.head
    }

    /// A scan of every row of the handle's version, opened as a reader opens it (its log at
    /// that version; no disk cache: the rows are read once).
    pub(crate) async fn scan(&self) -> Result<Scan, CompactError> {
        let scan = Snapshot::builder(self.url.as_str())
            .with_storage_options(self.options.clone())
            .with_version(self.head)
            .with_cache_choice(CacheChoice::Off)
            .build_scan(ScanOptions::default())
            .await?;
        Ok(scan)
    }

    /// Moves `table` to the handle's version where blind appends left it behind.
    pub(crate) async fn catch_up(&mut self) -> Result<(), CompactError> {
        if self.table.version().unwrap_or(0) < self.head {
            self.table
                .update_incremental(Some(self.head))
                .await
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }
}

/// How the table at `url` is opened: deltalake's builder with voxlake's retry defaults and,
/// for a remote table, the store `stores::open_store` makes (answers that break asked again).
fn builder(
    url: &Url,
    options: &HashMap<String, String>,
) -> Result<DeltaTableBuilder, CompactError> {
    let display = redact(url.as_str());
    let mut builder = DeltaTableBuilder::from_url(url.clone())
        .map_err(|source| CompactError::Table {
            location: display.clone(),
            source: Box::new(source),
        })?
        .with_storage_options(voxlake_io::location::with_retry_defaults(options));
    if !matches!(url.scheme(), "file" | "memory") {
        let store = stores::open_store(url.as_str(), true, options)?.store;
        builder = builder.with_storage_backend(store, url.clone());
    }
    Ok(builder)
}

/// Commit properties that record which voxlake operation wrote a version.
pub(crate) fn commit_properties(operation: &str) -> CommitProperties {
    CommitProperties::default().with_metadata(commit_metadata(operation))
}

/// The `commitInfo` entries that record which voxlake operation wrote a version.
pub(crate) fn commit_metadata(operation: &str) -> HashMap<String, serde_json::Value> {
    HashMap::from([
        (
            "voxlake.operation".to_string(),
            serde_json::json!(operation),
        ),
        (
            "voxlake.version".to_string(),
            serde_json::json!(env!("CARGO_PKG_VERSION")),
        ),
    ])
}

/// Writer properties and target size for new files.
pub(crate) fn writer_for(
    table: &Table,
    layout: &Layout,
) -> Result<deltalake::writer::RecordBatchWriter, CompactError> {
    let sample = table.sample()?;
    let tensors: Vec<&str> = sample.tensors().map(|(name, _)| name).collect();
    Ok(
        deltalake::writer::RecordBatchWriter::for_table(&table.table)
            .map_err(|e| table.error(e))?
            .with_writer_properties(layout.writer_properties_for(&tensors))
            .with_target_file_size(layout.target_file_bytes),
    )
}

/// `Path`s are shown relative to the table in messages.
pub(crate) fn redact_url(url: &Url) -> String {
    redact(url.as_str())
}
