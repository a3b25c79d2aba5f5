//! Committing to the Delta log: every commit names its handle's `txn`, so one whose reply was
//! lost is found in the log; appends go to the log at a cost that does not grow with the table.
//!
//! deltalake moves a table's file list to the new version after each commit (`PostCommit` →
//! `EagerSnapshot::update`, O(files)) and lists `_delta_log` to clean it (O(commits)), so a run
//! of many small commits cost O(commits × files) (docs/benchmarks.md). An append of new files conflicts with nothing but a change of the table's
//! metadata or protocol, so [`Table::commit`] writes appends itself: the version after the
//! handle's head, on the condition that it does not exist yet (the log store's own put-if-absent
//! or rename), the versions other writers took in between read to see that they change neither.
//! The file list is brought up to date only for a checkpoint, which follows the table's
//! `delta.checkpointInterval` (default 100) as deltalake's commits do.

use deltalake::kernel::transaction::{
    CommitBuilder, CommitData, PROTOCOL, TableReference, TransactionError,
};
use deltalake::kernel::{Action, Transaction};
use deltalake::logstore::CommitOrBytes;
use deltalake::protocol::DeltaOperation;
use deltalake::table::config::TablePropertiesExt;
use deltalake::{DeltaTableError, Path};
use object_store::ObjectStoreExt;

use crate::error::CompactError;
use crate::table::{Table, commit_metadata, commit_properties};

/// How many versions other writers may take, one after another, before an append gives up.
const APPEND_TRIES: usize = 100;

/// What the versions other writers took before an append's version mean to it.
enum Between {
    /// The append itself is one of them (its reply was lost): its version.
    Ours(u64),
    /// Appends and other changes of files only: the append goes after them.
    Files,
    /// A change of metadata or protocol: the append is checked against the new table.
    Table,
}

impl Table {
    /// Commits `actions` as one new version (all or nothing) and returns it.
    ///
    /// With `blind_append` (the actions only add new files), the commit goes straight to the
    /// log after the handle's head (see the module); where another writer changed the table's
    /// metadata (another `--shard` run creating it), it is retried through deltalake on the new
    /// table once the spec is checked unchanged. Other commits (optimize) go through deltalake
    /// and are never retried that way, since their removes were planned on the old snapshot.
    ///
    /// A commit that fails may have been written all the same (its reply lost on the way
    /// back, or a retry of it answered "already exists"): before any failure is reported or
    /// retried, the log after the version it was built on is searched for its `txn`, and where
    /// found that version is the commit's.
    pub(crate) async fn commit(
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
        if blind_append {
            match self
                .append(&actions, &operation, voxlake_operation, &txn)
                .await
                .map_err(|e| self.error(e))?
            {
                Some(version) => {
                    self.checkpoint_after(version).await;
                    return Ok(version);
                }
                None => {
                    tracing::debug!(table = %self.display, "the table's metadata changed; appending on the new table");
                    self.refresh(&spec).await?;
                }
            }
        }
        self.catch_up().await?;
        let mut attempts = 0;
        loop {
            let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
            let base = self.head;
            let result = CommitBuilder::from(
                commit_properties(voxlake_operation).with_application_transaction(txn.clone()),
            )
            .with_actions(actions.clone())
            .build(Some(snapshot), self.table.log_store(), operation.clone())
            .await;
            let e = match result {
                Ok(finalized) => {
                    self.table.state = Some(finalized.snapshot());
                    self.head = finalized.version();
                    return Ok(finalized.version());
                }
                Err(e) => e,
            };
            if let Some(version) = self.landed(base, &txn).await {
                return Ok(version);
            }
            match e {
                DeltaTableError::Transaction {
                    source: TransactionError::CommitConflict(conflict),
                } if blind_append && attempts < 5 => {
                    attempts += 1;
                    tracing::debug!(%conflict, attempts, "append conflicted, retrying on a fresh snapshot");
                    self.refresh(&spec).await?;
                }
                e => return Err(self.error(e)),
            }
        }
    }

    /// Writes an append as the version after the head, or after the versions other writers
    /// took first. `Ok(None)`: one of those changed the table's metadata or protocol.
    async fn append(
        &mut self,
        actions: &[Action],
        operation: &DeltaOperation,
        voxlake_operation: &str,
        txn: &Transaction,
    ) -> Result<Option<u64>, DeltaTableError> {
        // Checked against the metadata and protocol of the head: any change of them since
        // the file list was loaded sends the append back (below).
        let snapshot = self.table.snapshot()?;
        PROTOCOL.can_commit(snapshot as &dyn TableReference, actions, operation)?;
        let data = CommitData::new(
            actions.to_vec(),
            operation.clone(),
            commit_metadata(voxlake_operation),
            vec![txn.clone()],
        );
        let bytes = data.get_bytes()?;
        let log = self.table.log_store();
        let operation_id = uuid::Uuid::new_v4();
        // As deltalake does: stores with a conditional put take the bytes, the others a
        // temporary object they rename if the version is still free.
        let entry = if ["DefaultLogStore", "LakeFSLogStore"].contains(&log.name().as_str()) {
            CommitOrBytes::LogBytes(bytes)
        } else {
            let tmp = Path::from_iter(["_delta_log", &format!("_commit_{operation_id}.json.tmp")]);
            log.object_store(Some(operation_id))
                .put(&tmp, bytes.into())
                .await?;
            CommitOrBytes::TmpCommit(tmp)
        };
        let base = self.head;
        let mut version = base + 1;
        for _ in 0..APPEND_TRIES {
            let written = log
                .write_commit_entry(version, entry.clone(), operation_id)
                .await;
            let taken = match written {
                Ok(()) => {
                    self.head = version;
                    return Ok(Some(version));
                }
                Err(TransactionError::VersionAlreadyExists(_)) => {
                    log.get_latest_version(version).await?
                }
                Err(e) => {
                    if let Some(version) = self.landed(base, txn).await {
                        return Ok(Some(version));
                    }
                    // Best effort: the error to report is the commit's.
                    let _ = log.abort_commit_entry(version, entry, operation_id).await;
                    return Err(e.into());
                }
            };
            match self.between(version, taken, txn).await? {
                Between::Ours(found) => {
                    tracing::warn!(table = %self.display, version = found, "the commit's reply was lost, but the commit is in the log");
                    self.head = taken;
                    let _ = log.abort_commit_entry(found, entry, operation_id).await;
                    return Ok(Some(found));
                }
                Between::Files => version = taken + 1,
                Between::Table => {
                    let _ = log.abort_commit_entry(version, entry, operation_id).await;
                    return Ok(None);
                }
            }
        }
        let _ = log.abort_commit_entry(version, entry, operation_id).await;
        Err(TransactionError::MaxCommitAttempts(APPEND_TRIES as i32).into())
    }

    /// Reads the versions `from..=to` other writers took (or this handle, its reply lost).
    async fn between(
        &self,
        from: u64,
        to: u64,
        txn: &Transaction,
    ) -> Result<Between, DeltaTableError> {
        let log = self.table.log_store();
        let mut changed = false;
        for version in from..=to {
            let commit = log.read_commit_entry(version).await?.ok_or_else(|| {
                DeltaTableError::Generic(format!(
                    "version {version} was taken but its commit file cannot be read"
                ))
            })?;
            let mut actions = commit
                .split(|b| *b == b'\n')
                .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok());
            if actions.any(|action| {
                changed |= action.get("metaData").is_some() || action.get("protocol").is_some();
                holds_txn(&action, txn)
            }) {
                return Ok(Between::Ours(version));
            }
        }
        Ok(if changed {
            Between::Table
        } else {
            Between::Files
        })
    }

    /// Loads the newest version and checks the sample's spec is still `spec`.
    async fn refresh(&mut self, spec: &voxlake_format::SampleSpec) -> Result<(), CompactError> {
        self.table.update_state().await.map_err(|e| self.error(e))?;
        self.head = self.head.max(self.table.version().unwrap_or(0));
        if self.sample()? != *spec {
            return Err(CompactError::Incompatible {
                location: self.display.clone(),
                reason: "the tensor spec changed during the run".into(),
            });
        }
        Ok(())
    }

    /// Writes a checkpoint of `version` where the table's `delta.checkpointInterval` says one
    /// is due (and expired log entries cleaned after it, where the table asks for that). The
    /// commit stands either way: a failed checkpoint is a warning, readers then replay from an
    /// older one.
    async fn checkpoint_after(&mut self, version: u64) {
        let Ok(state) = self.table.snapshot() else {
            return;
        };
        let config = state.table_config();
        if !(version + 1).is_multiple_of(config.checkpoint_interval().get()) {
            return;
        }
        let cleanup = config.enable_expired_log_cleanup();
        let result = async {
            self.table.update_incremental(Some(version)).await?;
            deltalake::checkpoints::create_checkpoint(&self.table, None).await?;
            if cleanup {
                deltalake::checkpoints::cleanup_metadata(&self.table, None).await?;
            }
            Ok::<_, DeltaTableError>(())
        }
        .await;
        match result {
            Ok(()) => tracing::debug!(table = %self.display, version, "checkpoint written"),
            Err(error) => tracing::warn!(
                table = %self.display,
                version,
                %error,
                "the checkpoint failed; the commit stands and readers replay the log from an older one"
            ),
        }
    }

    /// The version after `base` whose commit holds `txn`, if one does; the handle's head then
    /// moves to the latest version. `None` where the log cannot be read (the commit's own
    /// error is the one to report then).
    async fn landed(&mut self, base: u64, txn: &Transaction) -> Option<u64> {
        let log = self.table.log_store();
        let latest = log.get_latest_version(base).await.ok()?;
        match self.between(base + 1, latest, txn).await.ok()? {
            Between::Ours(version) => {
                tracing::warn!(table = %self.display, version, "the commit's reply was lost, but the commit is in the log");
                self.head = self.head.max(latest);
                Some(version)
            }
            Between::Files | Between::Table => None,
        }
    }
}

/// Whether a log action is `txn` (its application id and number).
fn holds_txn(action: &serde_json::Value, txn: &Transaction) -> bool {
    let t = &action["txn"];
    t["appId"].as_str() == Some(txn.app_id.as_str()) && t["version"].as_i64() == Some(txn.version)
}
