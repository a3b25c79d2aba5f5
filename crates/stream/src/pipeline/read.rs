//! One unit's read, as every stream of the pipeline does it: its row group taken back where it
//! was kept or is in use (`kept`), else its share of the memory budget reserved, a read slot
//! taken (reads in flight sized to the store), the row group fetched and decoded with a panic
//! in any stage an error naming the file, and only its kept rows handed on.

use super::*;
use tracing::Instrument;

use crate::Verify;
use crate::kept::{KeptGroup, Share};

/// What a unit's read starts from: its row group as already read, or its budget share to read
/// it with.
pub(super) enum Obtained {
    Reused(Reused),
    Reserved(Reserved),
}

/// A unit's row group that is not read again: kept since an earlier epoch, or as a read still
/// in use holds it.
pub(super) enum Reused {
    Kept(KeptGroup),
    Shared(Arc<Share>),
}

/// A row group's budget share, taken before it is read.
pub(super) struct Reserved {
    permit: OwnedSemaphorePermit,
    projection: ProjectionMask,
    /// Bytes it holds once decoded (what it keeps of the share).
    held: u64,
}

impl Inner {
    /// Runs `work` on file `file`; a panic in it is an error naming the stage and the file.
    pub(super) async fn caught<T, E: Into<StreamError>>(
        &self,
        stage: Stage,
        file: usize,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, StreamError> {
        AssertUnwindSafe(work)
            .catch_unwind()
            .await
            .map(|r| r.map_err(Into::into))
            .unwrap_or_else(|panic| {
                let (_, scan, file) = self.sources.locate(file);
                Err(StreamError::from(TableError::Panicked {
                    location: scan.snapshot().location().to_string(),
                    stage: stage.to_string(),
                    object: scan.files().at(file).path().to_string(),
                    message: panic_message(panic.as_ref()),
                }))
            })
    }

    /// One sample's tensor bytes: of the fields the stream reads (every source delivers the
    /// same fields).
    pub(super) fn sample_bytes(&self) -> u64 {
        self.sources.scans()[0]
            .snapshot()
            .sample()
            .tensors()
            .filter(|(name, _)| self.columns[0].iter().any(|c| c == name))
            .map(|(_, spec)| spec.nbytes() as u64)
            .sum()
    }

    /// Row counts of a file's row groups (the rows read of them: not deleted, selected by a
    /// filter), from its footer, checked against the log.
    pub(super) async fn row_group_rows(&self, global: usize) -> Result<Vec<u64>, StreamError> {
        let (_, scan, file) = self.sources.locate(global);
        let path = scan.file(file)?.path();
        self.hooks
            .check(Stage::Footer, path)
            .map_err(StreamError::Internal)?;
        let meta = scan.reader_metadata(file).await?;
        let mut rows = Vec::with_capacity(meta.metadata().num_row_groups());
        for (g, rg) in meta.metadata().row_groups().iter().enumerate() {
            rows.push(match scan.selected_rows(file, g).await? {
                Some(kept) => kept.len() as u64,
                None => rg.num_rows().max(0) as u64,
            });
        }
        let total: u64 = rows.iter().sum();
        if total != self.rows_per_file[global] {
            return Err(StreamError::from(TableError::Corrupt {
                location: scan.snapshot().location().to_string(),
                file: path.to_string(),
                reason: format!(
                    "the footer counts {total} rows, the Delta log {}",
                    self.rows_per_file[global]
                ),
            }));
        }
        Ok(rows)
    }

    /// Fetches and decodes a reserved unit, then gives back what the decoded group does not
    /// hold of its budget share.
    pub(super) async fn finish_read(
        &self,
        unit: Arc<Unit>,
        position: u64,
        reserved: Reserved,
    ) -> Result<RowGroupBatch, StreamError> {
        let Reserved {
            mut permit,
            projection,
            held,
        } = reserved;
        let batch = self.read(&unit, projection).await?;
        // The fetched pages and the decode's transients (a LIST's levels) are gone once
        // decoded: keep the share of what the group holds, as `build()` counted it.
        let mut keep = (held.div_ceil(1024) as usize).clamp(1, permit.num_permits().max(1));
        let mut group = None;
        let (_, scan, file) = self.sources.locate(unit.file);
        if scan.selects_rows() {
            // Units count the rows read (not deleted, selected by a filter): lineage needs
            // the rows in the file, and only those rows were kept (copied out), with their
            // share.
            let selected = scan.selected_rows(file, unit.row_group).await?;
            let meta = scan.reader_metadata(file).await?;
            let groups = meta.metadata().row_groups();
            if let Some(rows) = &selected {
                // Copied out, the kept rows hold their share of the pages; as views, all.
                let physical = groups[unit.row_group].num_rows().max(1) as usize;
                if voxlake_table::rows::copies_selected_rows(rows.len(), physical) {
                    keep = (keep * rows.len()).div_ceil(physical).max(1);
                }
            }
            let first_row: u64 = groups[..unit.row_group]
                .iter()
                .map(|rg| rg.num_rows().max(0) as u64)
                .sum();
            group = Some((first_row, selected));
        }
        drop(permit.split(permit.num_permits() - keep));
        let checks = match self.verify {
            Verify::OnUse => scan.row_checks(file, unit.row_group, &batch)?.map(Arc::new),
            _ => None,
        };
        let batch = RowGroupBatch::new(batch, unit, position, permit).with_checks(checks);
        let batch = match group {
            Some((first_row, selected)) => batch.with_file_rows(first_row, selected),
            None => batch,
        };
        Ok(batch.kept_in(&self.kept))
    }

    /// The unit's row group as a read in use holds it, or as kept since an earlier epoch
    /// (its rows checked once, on read or at their first use; its pages read in again where
    /// they were let go meanwhile: an error here, not a fault later).
    pub(super) async fn reuse(
        &self,
        reused: Reused,
        unit: Arc<Unit>,
        position: u64,
    ) -> Result<RowGroupBatch, StreamError> {
        let group = match reused {
            Reused::Kept(group) => group,
            Reused::Shared(share) => {
                let batch = RowGroupBatch::sharing(share, unit, position).ok_or_else(|| {
                    StreamError::Internal("a shared row group that is not whole".into())
                })?;
                self.count_reuse(batch.batch.num_rows());
                return Ok(batch);
            }
        };
        let batch = group.whole.batch.clone();
        let faulted = tokio::task::spawn_blocking(move || crate::kept::fault_in(&batch))
            .await
            .map_err(|e| StreamError::Internal(format!("reading a kept row group in: {e}")))?;
        if let Err(e) = faulted {
            let reason = format!(
                "row group {}, kept in memory since an earlier epoch: its pages could not be read in again: {e}",
                unit.row_group
            );
            let (_, scan, file) = self.sources.locate(unit.file);
            return Err(StreamError::from(TableError::Parquet {
                location: scan.snapshot().location().to_string(),
                file: scan.files().at(file).path().to_string(),
                source: parquet::errors::ParquetError::External(reason.into()),
            }));
        }
        self.count_reuse(group.whole.batch.num_rows());
        Ok(RowGroupBatch::from_kept(group, unit, position, &self.kept))
    }

    /// Counts a read of `rows` rows that took `timings`.
    fn count_read(&self, timings: &voxlake_table::ReadTimings, rows: usize) {
        let c = &self.counters;
        c.fetch_ns
            .fetch_add(timings.fetch.as_nanos() as u64, Ordering::Relaxed);
        c.decode_ns
            .fetch_add(timings.decode.as_nanos() as u64, Ordering::Relaxed);
        c.bytes.fetch_add(timings.bytes, Ordering::Relaxed);
        c.row_groups.fetch_add(1, Ordering::Relaxed);
        c.rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts a row group of `rows` delivered without a read of its own.
    fn count_reuse(&self, rows: usize) {
        let c = &self.counters;
        c.reserved_units.fetch_add(1, Ordering::SeqCst);
        c.kept_hits.fetch_add(1, Ordering::Relaxed);
        c.row_groups.fetch_add(1, Ordering::Relaxed);
        c.rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Takes this row group's share of the budget: its projected chunks as fetched plus as
    /// decoded (a group larger than the whole budget is an error naming it), letting go of
    /// kept row groups to make room. Returns the permit, the projection (the read reuses it)
    /// and what the group holds once decoded; or the row group itself where it was kept.
    pub(super) async fn reserve(&self, unit: &Unit) -> Result<Obtained, StreamError> {
        let key = crate::kept::keep_key(unit);
        if let Some(group) = self.kept.take(key) {
            return Ok(Obtained::Reused(Reused::Kept(group)));
        }
        if let Some(share) = self.kept.live(key) {
            return Ok(Obtained::Reused(Reused::Shared(share)));
        }
        let (source, scan, file) = self.sources.locate(unit.file);
        let meta = scan.reader_metadata(file).await?;
        let projection = scan.snapshot().projection(&meta, &self.columns[source])?;
        let GroupBudget { peak, held, .. } = group_budget(
            meta.metadata().row_group(unit.row_group),
            &projection,
            self.sample_bytes(),
        );
        // A row group larger than the whole budget is refused, not read over it: the budget
        // check at build reads the first file's footers, a later file may hold larger groups.
        if peak > self.budget_bytes {
            return Err(StreamError::from(TableError::Incompatible {
                location: scan.snapshot().location().to_string(),
                reason: format!(
                    "file {}, row group {}: reading it takes {peak} bytes, more than the stream's memory budget of {} bytes; raise the memory budget (--memory-budget-mb) by at least {} MiB",
                    scan.files().at(file).path(),
                    unit.row_group,
                    self.budget_bytes,
                    (peak - self.budget_bytes).div_ceil(1 << 20)
                ),
            }));
        }
        Ok(Obtained::Reserved(Reserved {
            permit: self.acquire(peak).await?,
            projection,
            held,
        }))
    }

    /// `bytes` of the budget (at most all of it), letting go of kept row groups to make room.
    async fn acquire(&self, bytes: u64) -> Result<OwnedSemaphorePermit, StreamError> {
        let kib = bytes.div_ceil(1024).max(1);
        let kib = kib.min(self.budget_bytes / 1024).max(1) as u32;
        let start = Instant::now();
        let c = &self.counters;
        c.waiting_kib.store(u64::from(kib), Ordering::SeqCst);
        let waiting = self.kept.waiting();
        self.kept.make_room(&waiting, &self.budget, kib as usize);
        let permit = self.budget.clone().acquire_many_owned(kib).await;
        drop(waiting);
        // Counted before the wait is cleared: a check in between sees a unit on its way, not
        // a stall (the loader's stall check).
        if permit.is_ok() {
            c.reserved_units.fetch_add(1, Ordering::SeqCst);
        }
        c.waiting_kib.store(0, Ordering::SeqCst);
        let permit = permit.map_err(|e| StreamError::Internal(e.to_string()))?;
        c.budget_wait_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(permit)
    }

    /// Rows `rows` of `unit`'s row group with only their tensors fetched, within their
    /// share of the budget (fetched and copied out); `None` where the file's layout does not
    /// allow it ([`Scan::read_rows_hooked`](voxlake_table::Scan::read_rows_hooked)).
    pub(super) async fn read_rows(
        &self,
        unit: Unit,
        rows: &[u64],
        position: u64,
    ) -> Result<Option<RowGroupBatch>, StreamError> {
        let (source, scan, file) = self.sources.locate(unit.file);
        let bytes = 2 * rows.len() as u64 * self.sample_bytes().max(1);
        if bytes > self.budget_bytes {
            return Ok(None);
        }
        self.hooks
            .check(Stage::Fetch, scan.files().at(file).path())
            .map_err(StreamError::Internal)?;
        let meta = scan.reader_metadata(file).await?;
        let projection = scan.snapshot().projection(&meta, &self.columns[source])?;
        let permit = self.acquire(bytes).await?;
        let read = scan.read_rows_hooked(file, unit.row_group, rows, &projection, &self.hooks);
        let Some((batch, timings)) = read.await? else {
            return Ok(None);
        };
        self.count_read(&timings, batch.num_rows());
        let file_rows = match scan.selects_rows() {
            true => {
                let first_row: u64 = meta.metadata().row_groups()[..unit.row_group]
                    .iter()
                    .map(|rg| rg.num_rows().max(0) as u64)
                    .sum();
                Some((first_row, scan.selected_rows(file, unit.row_group).await?))
            }
            false => None,
        };
        let batch = RowGroupBatch::of_rows(batch, Arc::new(unit), position, permit, rows.into());
        Ok(Some(match file_rows {
            Some((first, selected)) => batch.with_file_rows(first, selected),
            None => batch,
        }))
    }

    /// Fetches and decodes a row group.
    pub(super) async fn read(
        &self,
        unit: &Unit,
        projection: ProjectionMask,
    ) -> Result<RecordBatch, StreamError> {
        let (_, scan, file) = self.sources.locate(unit.file);
        self.hooks
            .check(Stage::Fetch, scan.files().at(file).path())
            .map_err(StreamError::Internal)?;
        // A loader's trace (`with_trace`): the row group named as the batches name it.
        let span = tracing::trace_span!(target: "voxlake::trace", "row_group",
            file = %scan.files().at(file).path(), row_group = unit.row_group);
        let (batch, timings) = scan
            .read_row_group_hooked(
                file,
                unit.row_group,
                projection,
                self.verify == Verify::OnRead,
                &self.hooks,
            )
            .instrument(span)
            .await?;
        self.count_read(&timings, batch.num_rows());
        Ok(batch)
    }
}
