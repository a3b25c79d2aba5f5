//! Rows pushed into a table as they come ([`Compactor::writer`]): samples a program made (numpy
//! arrays in Python, a generator), written by the same sink as `convert` (row groups sized for
//! streaming, files committed in windows, the sample's spec in the table), resumable by id.

use std::collections::HashSet;
use std::time::Instant;

use bytes::Bytes;
use voxlake_format::volume::BrickSpec;
use voxlake_format::{FieldKind, SampleSpec};

use crate::sink::{ConvertSummary, RowSink};
use crate::source::Row;
use crate::table::Table;
use crate::{CompactError, Compactor};

/// Rows written into a voxlake table one at a time; see [`Compactor::writer`].
pub struct RowWriter<'a> {
    compactor: &'a Compactor,
    table: Table,
    sink: RowSink,
    sample: SampleSpec,
    /// Ids the table held when the writer opened it (skipped: a re-run adds what is missing).
    present: HashSet<String>,
    /// Ids pushed by this writer (a second one is refused: ids key the re-runs).
    seen: HashSet<String>,
    summary: ConvertSummary,
    location: String,
    start: Instant,
}

impl std::fmt::Debug for RowWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowWriter")
            .field("table", &self.location)
            .field("sample", &self.sample.to_string())
            .field("rows", &self.summary.rows)
            .finish()
    }
}

impl Compactor {
    /// A writer of rows of `sample` into this compactor's table, created where missing (an
    /// existing table must hold the same sample). Rows are pushed with
    /// [`RowWriter::push`]; [`RowWriter::finish`] commits the last of them. Rows whose id the
    /// table holds already are skipped, so a writer run again after a failure adds what is
    /// missing; nothing of a window not committed is visible.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), voxlake_compact::CompactError> {
    /// use voxlake_compact::Compactor;
    /// use voxlake_format::{DType, TensorSpec};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let table = dir.path().join("table").to_string_lossy().into_owned();
    /// let sample = TensorSpec::new(vec![2, 2], DType::F32).into();
    /// let compactor = Compactor::new(&table);
    /// let mut writer = compactor.writer(sample).await?;
    /// for i in 0..10u8 {
    ///     let values: Vec<u8> = (0..4).flat_map(|v| (f32::from(i) + v as f32).to_le_bytes()).collect();
    ///     writer.push(&format!("s{i}"), Some(i64::from(i % 2)), [values]).await?;
    /// }
    /// assert_eq!(writer.finish().await?.rows, 10);
    /// # Ok(()) }
    /// ```
    pub async fn writer(&self, sample: SampleSpec) -> Result<RowWriter<'_>, CompactError> {
        self.no_labels_file()?;
        self.writer_of(sample, None).await
    }

    /// Refuses a labels file where rows pushed carry their labels.
    pub(crate) fn no_labels_file(&self) -> Result<(), CompactError> {
        match self.labels {
            Some(_) => Err(CompactError::Incompatible {
                location: voxlake_io::redact(&self.table),
                reason: "rows pushed carry their labels: a labels file is for convert".into(),
            }),
            None => Ok(()),
        }
    }

    /// [`writer`](Self::writer) of a table of `bricks` where given.
    pub(crate) async fn writer_of(
        &self,
        sample: SampleSpec,
        bricks: Option<&BrickSpec>,
    ) -> Result<RowWriter<'_>, CompactError> {
        let start = Instant::now();
        let (table, present, location) = self.destination(&sample, bricks).await?;
        let sink = self.row_sink(&table, &sample)?;
        let summary = ConvertSummary::starting(
            table.version(),
            sample.to_string(),
            start.elapsed().as_secs_f64(),
        );
        Ok(RowWriter {
            compactor: self,
            table,
            sink,
            sample,
            present,
            seen: HashSet::new(),
            summary,
            location,
            start,
        })
    }
}

impl RowWriter<'_> {
    /// Adds the row `id` (its `label`, and each field's little-endian C-order bytes in the
    /// sample's order, a text field's UTF-8); `false` where the table held it already or it is another shard's
    /// ([`with_shard`](Compactor::with_shard)): skipped. A full row group is
    /// written and a full window of files committed on the way. A field of the wrong size, or
    /// an id pushed twice, is an error naming the id: nothing of the open window is committed
    /// once one is returned (call nothing more but drop the writer).
    pub async fn push(
        &mut self,
        id: &str,
        label: Option<i64>,
        fields: impl IntoIterator<Item = impl Into<Bytes>>,
    ) -> Result<bool, CompactError> {
        if !self.compactor.in_shard(id) && !self.present.contains(id) {
            return Ok(false);
        }
        self.push_unsharded(id, label, fields.into_iter().map(Into::into).collect())
            .await
    }

    /// [`push`](Self::push) whatever the shard (the caller shards: a volume's bricks go
    /// together).
    pub(crate) async fn push_unsharded(
        &mut self,
        id: &str,
        label: Option<i64>,
        fields: Vec<Bytes>,
    ) -> Result<bool, CompactError> {
        if self.present.contains(id) {
            self.summary.already_present += 1;
            return Ok(false);
        }
        if fields.len() != self.sample.fields().len() {
            return Err(self.refused(format!(
                "row '{id}' has {} fields, the sample {} has {}",
                fields.len(),
                self.sample,
                self.sample.fields().len()
            )));
        }
        for (bytes, field) in fields.iter().zip(self.sample.fields()) {
            let FieldKind::Tensor(spec) = &field.kind else {
                if let Err(e) = std::str::from_utf8(bytes) {
                    return Err(self.refused(format!(
                        "row '{id}': text field '{}' is not UTF-8: {e}",
                        field.name
                    )));
                }
                continue;
            };
            if bytes.len() != spec.nbytes() {
                return Err(self.refused(format!(
                    "row '{id}': field '{}' has {} bytes, {spec} takes {}",
                    field.name,
                    bytes.len(),
                    spec.nbytes()
                )));
            }
        }
        // Ids key the exactly-once re-runs: a second row of one id would be lost.
        if !self.seen.insert(id.to_string()) {
            return Err(self.refused(format!("id '{id}' pushed twice: ids must be unique")));
        }
        let row = Row::new(id.to_string(), label, fields);
        let compactor = self.compactor;
        compactor
            .sink_row(&mut self.sink, row, &mut self.table, &mut self.summary)
            .await?;
        compactor.report_progress(&self.summary, &self.sink.window, 0);
        Ok(true)
    }

    /// Writes and commits the rows left; the run's summary.
    pub async fn finish(mut self) -> Result<ConvertSummary, CompactError> {
        let compactor = self.compactor;
        compactor
            .finish_sink(self.sink, Ok(()), &mut self.table, &mut self.summary)
            .await?;
        let total = self.summary.files;
        Ok(compactor.summarized(self.summary, &self.table, self.start, total))
    }

    /// The compactor writing.
    pub(crate) fn compactor(&self) -> &Compactor {
        self.compactor
    }

    /// Whether the table held row `id` when the writer opened it.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.present.contains(id)
    }

    /// Counts `rows` the table held as skipped (a volume written whole before).
    pub(crate) fn skipped_present(&mut self, rows: u64) {
        self.summary.already_present += rows as usize;
    }

    pub(crate) fn refused(&self, reason: String) -> CompactError {
        CompactError::Incompatible {
            location: self.location.clone(),
            reason,
        }
    }
}
