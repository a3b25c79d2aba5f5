//! Reading a snapshot: row groups (fetched, decoded, verified, normalized), files and columns.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_select::concat::concat_batches;
use parquet::DecodeResult;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::push_decoder::{ParquetPushDecoder, ParquetPushDecoderBuilder};
use parquet::errors::ParquetError;
use tracing::Instrument;
use voxlake_format::CHECKSUM_COLUMN;

use crate::error::TableError;
use crate::snapshot::Snapshot;

/// Rows decoded at once at most (a footer's row count never sizes a buffer beyond it).
const MAX_BATCH_ROWS: usize = 1 << 16;

/// Values decoded at once from a LIST tensor column (see `read_whole_row_group`).
const LIST_DECODE_BYTES: usize = 1 << 20;

/// One row group's read: file `index` of the snapshot, the rows `kept` of row group
/// `row_group` (`None`: all), the columns `projection` says, checked with `verify`.
pub(crate) struct RowGroupRead {
    pub index: usize,
    pub row_group: usize,
    pub kept: Option<Arc<[u32]>>,
    pub projection: ProjectionMask,
    pub verify: bool,
}

impl Snapshot {
    /// A projection of `columns` for file `index`'s schema; unknown columns are an error, except
    /// the checksum column, which files written before it lack.
    pub fn projection(
        &self,
        metadata: &ArrowReaderMetadata,
        columns: &[String],
    ) -> Result<ProjectionMask, TableError> {
        let schema = self.logical_schema(metadata);
        let mut roots = Vec::with_capacity(columns.len());
        for name in columns {
            // The checksum column is read where the file has one (older tables have none).
            if name == CHECKSUM_COLUMN && schema.index_of(name).is_err() {
                continue;
            }
            // voxlake's names map to the table's columns; an id the table lacks is made, and
            // partition columns come from the file's path or add action.
            let Some(name) = self.columns.source_of(name) else {
                continue;
            };
            // A struct's leaf (`meta.depth`) is read with its struct.
            let name = crate::snapshot::root_of(&self.schema, name);
            // Partition columns come from the add action; a column of the table this file
            // lacks (written before it was added) reads as null (`conform`).
            if schema.index_of(name).is_err() && self.schema.index_of(name).is_ok() {
                continue;
            }
            let index = schema
                .index_of(name)
                .map_err(|_| TableError::Incompatible {
                    location: self.location.clone(),
                    reason: format!(
                        "no column '{name}' (the table has {:?})",
                        self.schema
                            .fields()
                            .iter()
                            .map(|f| f.name())
                            .collect::<Vec<_>>()
                    ),
                })?;
            roots.push(index);
        }
        Ok(ProjectionMask::roots(
            metadata.metadata().file_metadata().schema_descr(),
            roots,
        ))
    }

    /// Reads `read`'s rows of one row group (see [`Scan::read_row_group_hooked`]).
    ///
    /// [`Scan::read_row_group_hooked`]: crate::Scan::read_row_group_hooked
    pub(crate) async fn read_rows(
        &self,
        read: RowGroupRead,
        hooks: &crate::hooks::Hooks,
    ) -> Result<(RecordBatch, ReadTimings), TableError> {
        let RowGroupRead {
            index,
            row_group,
            kept,
            projection,
            verify,
        } = read;
        let metadata = self.view_metadata(index).await?;
        let (batches, timings) = self
            .read_whole_row_group(index, row_group, &metadata, projection, hooks)
            .await?;
        if !self.columns.native {
            let batch = self
                .normalize(index, row_group, &metadata, batches, kept)
                .await?;
            return Ok((batch, timings));
        }
        let batch = self.concat(index, batches)?;
        let batch = match kept {
            None => batch,
            Some(rows) => tokio::task::spawn_blocking(move || {
                let indices: Vec<u64> = rows.iter().map(|&r| u64::from(r)).collect();
                crate::rows::take_rows(&batch, &indices)
            })
            .await
            .map_err(|e| self.task_error("decode", index, e))?
            .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))?,
        };
        if !verify || batch.column_by_name(CHECKSUM_COLUMN).is_none() {
            return Ok((batch, timings));
        }
        let Some(checks) = self.row_checks(index, row_group, &batch)? else {
            return Ok((batch, timings));
        };
        tokio::task::spawn_blocking(move || checks.check_all())
            .await
            .map_err(|e| self.task_error("verify", index, e))??;
        Ok((batch, timings))
    }

    /// Every row of one row group, decoded, as the file holds it (logical names): selected,
    /// then normalized or verified, by [`read_rows`](Self::read_rows).
    async fn read_whole_row_group(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        projection: ProjectionMask,
        hooks: &crate::hooks::Hooks,
    ) -> Result<(Vec<RecordBatch>, ReadTimings), TableError> {
        // A LIST tensor column straight from its pages (`list_chunk`), unless it holds a null:
        // then the Arrow path below names the row.
        if let Some(list) = self.list_leaf(metadata, &projection)
            && let Some(read) = self
                .read_list_row_group(index, row_group, metadata, &projection, list, hooks)
                .await?
        {
            return Ok(read);
        }
        // Decoded in batches of at most MAX_BATCH_ROWS: the decoder sizes its buffers by them.
        let rows = (metadata.metadata().row_group(row_group).num_rows().max(1) as usize)
            .min(MAX_BATCH_ROWS);
        // LIST columns decode a repetition and a definition level per value: in batches of
        // about 1 MiB of values the levels stay in cache (decode time halved on the reference
        // cubes, docs/benchmarks.md); the batches are normalized to views and joined without
        // copying the values.
        let batch_rows = if self.columns.fields.iter().any(|f| {
            matches!(
                f.encoding,
                voxlake_format::sample::TensorEncoding::List
                    | voxlake_format::sample::TensorEncoding::FixedSizeList
            )
        }) {
            (LIST_DECODE_BYTES / self.sample().tensor_bytes().max(1)).clamp(1, rows)
        } else {
            rows
        };
        let mut timings = ReadTimings::default();
        let decoder = self.push_decoder(index, row_group, metadata, projection, batch_rows)?;
        let batches = self
            .decode_projected(index, decoder, hooks, &mut timings, Ahead::default())
            .await?;
        if batches.is_empty() {
            return Err(TableError::Internal(format!(
                "file {}: row group {row_group} decoded to nothing",
                self.path_of(index)
            )));
        }
        Ok((batches, timings))
    }

    /// parquet's push decoder for row group `row_group` of file `index`: the columns of
    /// `projection`, in batches of `batch_rows`.
    pub(in crate::snapshot) fn push_decoder(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        projection: ProjectionMask,
        batch_rows: usize,
    ) -> Result<ParquetPushDecoder, TableError> {
        ParquetPushDecoderBuilder::new_with_metadata(metadata.clone())
            .with_row_groups(vec![row_group])
            .with_projection(projection)
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| self.file_error(index, e))
    }

    /// Everything `decoder` decodes (on the blocking pool), fetching what it asks for beyond
    /// the data pushed into it already and the chunks fetched `ahead`.
    pub(crate) async fn decode_projected(
        &self,
        index: usize,
        mut decoder: ParquetPushDecoder,
        hooks: &crate::hooks::Hooks,
        timings: &mut ReadTimings,
        mut ahead: Ahead,
    ) -> Result<Vec<RecordBatch>, TableError> {
        let mut batches = Vec::new();
        let path = self.path_of(index).to_string();
        loop {
            let hooks = hooks.clone();
            let object = path.clone();
            let (back, step) = tokio::task::spawn_blocking(move || {
                let _span =
                    tracing::trace_span!(target: "voxlake::trace", "decode", file = %object)
                        .entered();
                let start = Instant::now();
                if let Err(e) = hooks.check(crate::hooks::Stage::Decode, &object) {
                    return (decoder, Err(TableError::Internal(e)));
                }
                let step = decode_until_data_needed(&mut decoder);
                (decoder, Ok(step.map(|s| (s, start.elapsed()))))
            })
            .await
            .map_err(|e| self.task_error("decode", index, e))?;
            decoder = back;
            let ((decoded, needs), took) = step?.map_err(|e| self.file_error(index, e))?;
            timings.decode += took;
            batches.extend(decoded.into_iter().map(|b| self.logical_batch(b)));
            let Some(ranges) = needs else { break };
            let (ranges, data) = match ahead.window(&ranges) {
                Some(window) => window,
                None => {
                    let data = self.fetch(index, ranges.clone(), timings).await?;
                    (ranges, data)
                }
            };
            decoder
                .push_ranges(ranges, data)
                .map_err(|e| self.file_error(index, e))?;
        }
        Ok(batches)
    }

    /// `ranges` of file `index`, one buffer each (object_store coalesces them), timed and
    /// counted in `timings`.
    pub(crate) async fn fetch(
        &self,
        index: usize,
        ranges: Vec<Range<u64>>,
        timings: &mut ReadTimings,
    ) -> Result<Vec<bytes::Bytes>, TableError> {
        let asked = ranges.len();
        let start = Instant::now();
        let span = tracing::trace_span!(target: "voxlake::trace", "fetch",
            file = %self.path_of(index), ranges = asked);
        let data = async {
            match self.reads_whole(index) {
                true => self.small_ranges(index, &ranges).await,
                false => self
                    .reader(index)
                    .get_byte_ranges(ranges)
                    .await
                    .map_err(|e| self.file_error(index, e)),
            }
        }
        .instrument(span)
        .await?;
        timings.fetch += start.elapsed();
        timings.bytes += data.iter().map(|d| d.len() as u64).sum::<u64>();
        // object_store's contract; a store that breaks it must not become a panic here.
        if data.len() != asked {
            return Err(TableError::Internal(format!(
                "file {}: {} ranges read for {asked} asked",
                self.path_of(index),
                data.len(),
            )));
        }
        Ok(data)
    }

    /// The decoded batches of one row group as one.
    pub(in crate::snapshot) fn concat(
        &self,
        index: usize,
        batches: Vec<RecordBatch>,
    ) -> Result<RecordBatch, TableError> {
        match batches.as_slice() {
            [only] => Ok(only.clone()),
            [first, ..] => concat_batches(&first.schema(), &batches)
                .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string()))),
            [] => Ok(RecordBatch::new_empty(Arc::new(
                arrow_schema::Schema::empty(),
            ))),
        }
    }

    /// The decoded batches of a row group of a table that is not voxlake's, in voxlake's
    /// layout, as one (on the blocking pool: views are joined, values not copied); a row that
    /// does not decode is named by file, row group and row.
    pub(in crate::snapshot) async fn normalize(
        &self,
        index: usize,
        row_group: usize,
        metadata: &ArrowReaderMetadata,
        batches: Vec<RecordBatch>,
        kept: Option<Arc<[u32]>>,
    ) -> Result<RecordBatch, TableError> {
        let first_row: u64 = metadata.metadata().row_groups()[..row_group]
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .sum();
        let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let copies = kept
            .as_deref()
            .is_some_and(|rows| crate::rows::copies_selected_rows(rows.len(), total));
        let columns = self.columns.clone();
        let path = self.path_of(index).to_string();
        let wanted: Vec<&String> = [&columns.label, &columns.id]
            .into_iter()
            .flatten()
            .chain(columns.fields.iter().map(|f| &f.column))
            .collect();
        let named = path.clone();
        let batches = batches
            .into_iter()
            .map(|b| self.conform(index, b, &wanted))
            .collect::<Result<Vec<_>, _>>()?;
        let normalized = tokio::task::spawn_blocking(move || {
            // Row r of the row group is row r - start of the batch that holds it.
            let mut start = 0usize;
            let mut next = 0usize;
            let mut out = Vec::with_capacity(batches.len());
            for batch in &batches {
                let end = start + batch.num_rows();
                let local: Option<Vec<u32>> = kept.as_deref().map(|rows| {
                    let from = next;
                    while next < rows.len() && (rows[next] as usize) < end {
                        next += 1;
                    }
                    rows[from..next].iter().map(|&r| r - start as u32).collect()
                });
                let at = first_row + start as u64;
                let one = columns
                    .normalize_rows(batch, local.as_deref(), |row| {
                        format!("{named}#{}", at + row as u64)
                    })
                    .map_err(|e| (at + e.row as u64, e.reason))?;
                start = end;
                out.push(one);
            }
            Ok::<_, (u64, String)>(out)
        })
        .await
        .map_err(|e| self.task_error("decode", index, e))?;
        let normalized = normalized.map_err(|(row, reason)| TableError::BadRow {
            location: self.location.clone(),
            file: path,
            row_group,
            row,
            reason,
        })?;
        let batch = self.concat(index, normalized)?;
        // Few rows kept: copied out, so that the row group's pages are not held for them.
        if !copies {
            return Ok(batch);
        }
        // The rows are taken already: only their views' bytes are copied out of the pages.
        crate::rows::gc_views(&batch)
            .map_err(|e| self.file_error(index, ParquetError::ArrowError(e.to_string())))
    }
}

/// Where the time of one row-group read went.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadTimings {
    /// Waiting for the store.
    pub fetch: Duration,
    /// Decoding on the blocking pool.
    pub decode: Duration,
    /// Bytes fetched.
    pub bytes: u64,
}

/// Chunks fetched ahead of a decode, in the order it asks for them, pushed to the decoder a
/// window at a time: the decoder searches what it holds for each range it needs, so a file's
/// thousands of small chunks pushed at once make every search long (a million ids: 15 s).
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    chunks: Vec<(Range<u64>, bytes::Bytes)>,
    next: usize,
}

/// Chunks pushed to a decoder at a time from those fetched ahead.
const AHEAD_WINDOW: usize = 256;

impl Ahead {
    /// `data[i]` holds `ranges[i]`, in the order the decoder will ask for them.
    pub(crate) fn new(ranges: Vec<Range<u64>>, data: Vec<bytes::Bytes>) -> Ahead {
        Ahead {
            chunks: ranges.into_iter().zip(data).collect(),
            next: 0,
        }
    }

    /// The chunks `asked` and the window after them, where they are the next ones held;
    /// `None` (fetch them) otherwise.
    fn window(&mut self, asked: &[Range<u64>]) -> Option<(Vec<Range<u64>>, Vec<bytes::Bytes>)> {
        let held = self.chunks.get(self.next..self.next + asked.len())?;
        if held.iter().zip(asked).any(|((r, _), a)| r != a) {
            return None;
        }
        let end = (self.next + asked.len().max(AHEAD_WINDOW)).min(self.chunks.len());
        let window = &self.chunks[self.next..end];
        self.next = end;
        Some(window.iter().cloned().unzip())
    }
}

type Decoded = (Vec<RecordBatch>, Option<Vec<Range<u64>>>);

/// Decodes what the pushed data allows; returns the batches and the ranges still needed.
fn decode_until_data_needed(decoder: &mut ParquetPushDecoder) -> Result<Decoded, ParquetError> {
    let mut batches = Vec::new();
    loop {
        match decoder.try_decode()? {
            DecodeResult::Data(batch) => batches.push(batch),
            DecodeResult::NeedsData(ranges) => return Ok((batches, Some(ranges))),
            DecodeResult::Finished => return Ok((batches, None)),
        }
    }
}

#[cfg(test)]
// A chunk asked is a range; a list of one is what the decoder asks for a one-column read.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn ahead(n: u64) -> Ahead {
        let ranges: Vec<Range<u64>> = (0..n).map(|i| i * 10..i * 10 + 5).collect();
        let data = ranges
            .iter()
            .map(|r| bytes::Bytes::from(vec![r.start as u8; 5]))
            .collect();
        Ahead::new(ranges, data)
    }

    #[test]
    fn chunks_fetched_ahead_are_pushed_a_window_at_a_time_in_order() {
        let mut a = ahead(600);
        // The first chunk asked: it and the window after it.
        let (ranges, data) = a.window(&[0..5]).unwrap();
        assert_eq!(ranges.len(), AHEAD_WINDOW);
        assert_eq!(ranges[1], 10..15);
        assert_eq!(data[1][0], 10);
        // The decoder then asks past the window: the next window.
        let next = AHEAD_WINDOW as u64 * 10;
        let (ranges, _) = a.window(&[next..next + 5, next + 10..next + 15]).unwrap();
        assert_eq!(ranges[0], next..next + 5);
        // The last window is short; nothing is held after it.
        let next = 2 * AHEAD_WINDOW as u64 * 10;
        let (ranges, _) = a.window(&[next..next + 5]).unwrap();
        assert_eq!(ranges.len(), 600 - 2 * AHEAD_WINDOW);
        assert!(a.window(&[6000..6005]).is_none());
    }

    #[test]
    fn a_chunk_asked_out_of_order_or_unknown_is_fetched() {
        let mut a = ahead(4);
        assert!(a.window(&[10..15]).is_none(), "not the next chunk");
        assert!(a.window(&[0..6]).is_none(), "another range");
        assert!(Ahead::default().window(&[0..5]).is_none());
        assert_eq!(a.window(&[0..5, 10..15]).unwrap().0.len(), 4);
    }
}
