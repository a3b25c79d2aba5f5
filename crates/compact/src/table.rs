//! Opening, creating, reading and committing to the Delta table.

use std::collections::HashMap;

use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, Transaction};
use deltalake::kernel::{StructType, engine::arrow_conversion::TryIntoKernel};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::DeltaOperation;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;
use voxlake_format::{Layout, SampleSpec};
use voxlake_io::redact;
use voxlake_table::{Snapshot, stores};

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
    app_id: String,
    /// Commits made through this handle.
    commits: i64,
}

impl Table {
    fn handle(table: DeltaTable, display: &str) -> Table {
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
            table,
            display: display.to_string(),
            app_id: format!("voxlake-{:016x}", h.finish()),
            commits: 0,
        }
    }

    pub fn error(&self, source: DeltaTableError) -> CompactError {
        CompactError::Table {
            location: self.display.clone(),
            source: Box::new(source),
        }
    }

    /// Opens the table at `url`; `Ok(None)` if there is no Delta table there yet.
    pub async fn open(
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
            Ok(()) => Ok(Some(Table::handle(table, display))),
            Err(DeltaTableError::NotATable(_)) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Creates the table for samples of `spec` (version 0); if another writer created it
    /// first, opens theirs and checks it holds the same fields.
    pub async fn create(
        url: &Url,
        display: &str,
        options: &HashMap<String, String>,
        spec: &SampleSpec,
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
        let mut configuration: HashMap<String, Option<String>> = spec
            .table_configuration()
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
            Ok(table) => Ok(Table::handle(table, display)),
            Err(e) => {
                // A concurrent `--shard` run may have created it: use theirs if it fits.
                match Table::open(url, display, options).await? {
                    Some(table) if table.sample()? == *spec => Ok(table),
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
    pub fn sample(&self) -> Result<SampleSpec, CompactError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        SampleSpec::from_table_configuration(snapshot.metadata().configuration()).map_err(|e| {
            CompactError::Incompatible {
                location: self.display.clone(),
                reason: e.to_string(),
            }
        })
    }

    /// Whether the table has the checksum column (tables written before it have none).
    pub fn has_checksums(&self) -> Result<bool, CompactError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        Ok(snapshot
            .schema()
            .fields()
            .any(|f| f.name() == voxlake_format::CHECKSUM_COLUMN))
    }

    pub fn version(&self) -> u64 {
        self.table.version().unwrap_or(0)
    }

    /// The loaded version as a read-only snapshot: files from the log, cached footers, reads.
    pub async fn snapshot(&self) -> Result<Snapshot, CompactError> {
        Ok(Snapshot::from_table(&self.table, self.display.clone()).await?)
    }
}

impl Table {
    /// Commits `actions` as one new version (all or nothing) and moves the handle to it.
    ///
    /// With `blind_append`, a conflict with a concurrent metadata commit (another `--shard`
    /// run creating the table) is retried on the new snapshot once the spec is checked
    /// unchanged: appended files cannot clash with anything. Other commits (optimize) are
    /// never retried that way, since their removes were planned on the old snapshot.
    ///
    /// A commit that fails may have been written all the same (its reply lost on the way
    /// back, or a retry of it answered "already exists"): before any failure is reported or
    /// retried, the log after the version it was built on is searched for its `txn`, and where
    /// found that version is the commit's.
    pub async fn commit(
        &mut self,
        actions: Vec<Action>,
        operation: DeltaOperation,
        voxlake_operation: &str,
        blind_append: bool,
    ) -> Result<u64, CompactError> {
        let spec = self.sample()?;
        self.commits += 1;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        // `last_updated`: what the table's txn retention expires it by.
        let txn = Transaction::new_with_last_update(&self.app_id, self.commits, Some(now_ms));
        let mut attempts = 0;
        loop {
            let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
            let base = self.version();
            let result = CommitBuilder::from(
                commit_properties(voxlake_operation).with_application_transaction(txn.clone()),
            )
            .with_actions(actions.clone())
            .build(Some(snapshot), self.table.log_store(), operation.clone())
            .await;
            let e = match result {
                Ok(finalized) => {
                    self.table.state = Some(finalized.snapshot());
                    return Ok(finalized.version());
                }
                Err(e) => e,
            };
            if let Some(version) = self.landed(base, &txn).await {
                tracing::warn!(
                    table = %self.display,
                    version,
                    error = %e,
                    "the commit's reply was lost, but the commit is in the log"
                );
                return Ok(version);
            }
            match e {
                DeltaTableError::Transaction {
                    source: TransactionError::CommitConflict(conflict),
                } if blind_append && attempts < 5 => {
                    attempts += 1;
                    tracing::debug!(%conflict, attempts, "append conflicted, retrying on a fresh snapshot");
                    self.table.update_state().await.map_err(|e| self.error(e))?;
                    if self.sample()? != spec {
                        return Err(CompactError::Incompatible {
                            location: self.display.clone(),
                            reason: "the tensor spec changed during the run".into(),
                        });
                    }
                }
                e => return Err(self.error(e)),
            }
        }
    }

    /// The version after `base` whose commit holds `txn`, if one does; the handle then moves
    /// to the latest version. `None` where the log cannot be read (the commit's own error is
    /// the one to report then).
    async fn landed(&mut self, base: u64, txn: &Transaction) -> Option<u64> {
        let log = self.table.log_store();
        let latest = log.get_latest_version(base).await.ok()?;
        for version in base + 1..=latest {
            let commit = log.read_commit_entry(version).await.ok()??;
            if holds_txn(&commit, txn) {
                self.table.update_state().await.ok()?;
                return Some(version);
            }
        }
        None
    }
}

/// Whether a commit's JSON lines hold `txn` (its application id and number).
fn holds_txn(commit: &[u8], txn: &Transaction) -> bool {
    commit
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .any(|action| {
            let t = &action["txn"];
            t["appId"].as_str() == Some(txn.app_id.as_str())
                && t["version"].as_i64() == Some(txn.version)
        })
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
    CommitProperties::default().with_metadata([
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
