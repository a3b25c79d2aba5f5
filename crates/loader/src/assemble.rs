//! Batches from drawn rows: the decoded row groups the shuffle buffer holds (typed views of
//! their columns, one per field of the sample, checked once), their straggling rows copied out,
//! and each batch's fields copied once from the Arrow buffers into their tensors, on the
//! assembly pool when there is one.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, BinaryViewArray, Int64Array, StringArray};
use voxlake_format::{FieldKind, ID_COLUMN, LABEL_COLUMN, SampleSpec, TensorSpec};
use voxlake_io::panic_message;
use voxlake_stream::{RowGroupBatch, StreamError};
use voxlake_table::hooks::{Hooks, Stage};

use crate::LoaderError;
use crate::batch::{self, Batch, FieldBatch, RowOrigin, Tensors};
use crate::counters::Counters;
use crate::transform::{self, FieldValue, Sample, SampleFn};

mod direct;
mod group;
mod on_device;
mod transforms;

pub(crate) use group::{Group, RowGroups};

/// One row check in this many is timed (`check_s`, scaled up): two clock reads a row cost as
/// much as checking a few hundred bytes, more than a small row's check.
const TIMED_EVERY: usize = 8;

/// One row drawn for a batch: its group and its index in the group's data.
pub(crate) struct Row {
    pub group: Arc<Group>,
    pub index: usize,
}

/// One field's values for a batch, one per row.
enum Values<'a> {
    Tensors(Vec<Cow<'a, [u8]>>),
    Text(Vec<String>),
}

/// Turns the rows the mixer draws into batches: a row group's columns checked and kept as a
/// [`Group`], rows copied into fixed-shape tensors (on the pool's threads), the transforms
/// run, tensors recycled, a CUDA batch staged through the feed.
pub(crate) struct Assembler {
    /// The tables read (one, or a mixture's sources), for the files and locations that
    /// messages name and each row's source.
    pub sources: voxlake_stream::Sources,
    /// The samples handed out (the transform's output, else the table's).
    pub spec: SampleSpec,
    /// The table's samples, as read.
    pub input_spec: SampleSpec,
    pub transforms: crate::transform::Transforms,
    /// The shuffle seed, which the transforms' generators derive from.
    pub seed: u64,
    pub channels: Option<usize>,
    pub counters: Arc<Counters>,
    pub hooks: Hooks,
    pub device: Option<crate::device::Device>,
    /// The staging ring for a CUDA device (set up beside the stream's first reads); read by
    /// the device path alone, which needs `tch`.
    #[cfg_attr(not(feature = "tch"), allow(dead_code))]
    pub feed: Option<Mutex<crate::device::Staging>>,
    pub recycled: Arc<Mutex<Vec<Tensors>>>,
    /// Samples a per-sample transform handed back, for the next ones to be read into.
    pub spare_samples: Mutex<Vec<Tensors>>,
    /// Memory for the first batch, faulted in while its row groups are read.
    pub ahead: Mutex<Option<Tensors>>,
    /// Threads that copy each batch's samples in parallel (`None`: the producer's thread).
    pub pool: Option<Arc<rayon::ThreadPool>>,
}

/// The rows' bytes of a tensor field's values (none for a field not read).
fn bytes<'a>(v: &'a Option<Values<'_>>) -> Vec<&'a [u8]> {
    match v {
        Some(Values::Tensors(b)) => b.iter().map(|c| c.as_ref()).collect(),
        _ => Vec::new(),
    }
}

impl Assembler {
    /// Makes the first batch's memory (`rows` rows, faulted in) while its row groups are read,
    /// sparing that batch the page faults of fresh memory ([`reusable`](Self::reusable) hands it
    /// out). Not for a device's batches (they are libtorch's).
    pub(crate) fn prefault_spare(&self, rows: usize) -> Result<(), LoaderError> {
        if self.device.is_some() {
            return Ok(());
        }
        let first = self.spec.first();
        let shape = self.batch_shape(first, rows, self.channels);
        let spare = batch::prefaulted(first.dtype(), &shape)?;
        if let Ok(mut ahead) = self.ahead.lock() {
            *ahead = Some(spare);
        }
        Ok(())
    }

    /// Memory for the next batch's first field: a batch given back (and so `true`), else the
    /// one faulted in ahead for the first batch.
    pub(crate) fn reusable(&self) -> (Option<Tensors>, bool) {
        match self.recycled.lock().ok().and_then(|mut r| r.pop()) {
            Some(given) => (Some(given), true),
            None => (self.ahead.lock().ok().and_then(|mut a| a.take()), false),
        }
    }

    /// [`assemble`](Self::assemble), with a panic in it reported as an error.
    pub(crate) fn assemble_caught(
        &self,
        rows: &[Row],
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let object = rows
            .first()
            .map_or_else(String::new, |r| r.group.file.to_string());
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.hooks
                .check(Stage::Assemble, &object)
                .map_err(|e| LoaderError::Stream(StreamError::Internal(e)))?;
            let batch = self.assemble(rows, epoch, index)?;
            // Checked by the copy already (a row found whole is a bit read again): a path that
            // copied no tensor field checks here, so no batch leaves unchecked.
            rows.iter().try_for_each(Self::verify)?;
            self.transform_batch(batch, epoch, index)
        }))
        .unwrap_or_else(|panic| {
            Err(LoaderError::Panicked {
                stage: Stage::Assemble.to_string(),
                object: format!("batch {index} of epoch {epoch} (first row from {object})"),
                message: panic_message(panic.as_ref()),
            })
        })
    }

    /// Checks `row` against its checksum (the stream leaves that to the loader; once a row),
    /// one row in [`TIMED_EVERY`] timed for `check_s`.
    fn check_row(&self, row: &Row) -> Result<(), LoaderError> {
        if !row.index.is_multiple_of(TIMED_EVERY) {
            return Self::verify(row);
        }
        let start = std::time::Instant::now();
        let checked = Self::verify(row);
        let ns = start.elapsed().as_nanos() * TIMED_EVERY as u128;
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.counters.check_ns.fetch_add(ns, Ordering::Relaxed);
        checked
    }

    /// `row` against its checksum, untimed.
    fn verify(row: &Row) -> Result<(), LoaderError> {
        row.group
            .data
            .check_row(row.index)
            .map_err(LoaderError::Stream)
    }

    /// [`check_row`](Self::check_row) of sample `i` of `rows`, for the copy of the batch's
    /// first field ([`Check`]), which checks each row just before it
    /// copies it.
    fn row_check(&self, rows: &[Row]) -> impl Fn(usize) -> Result<(), LoaderError> + Sync {
        |i: usize| match rows.get(i) {
            Some(r) => self.check_row(r),
            None => Err(LoaderError::Internal(format!(
                "sample {i} of a batch of {} rows",
                rows.len()
            ))),
        }
    }

    /// Checks every row on the pool's threads: before a copy that does not check each row
    /// itself (a per-sample transform's, a device's staging, a patch's pieces).
    pub(crate) fn check_rows(&self, rows: &[Row]) -> Result<(), LoaderError> {
        match &self.pool {
            Some(pool) if rows.len() > 1 => {
                use rayon::prelude::*;
                pool.install(|| rows.par_iter().try_for_each(|r| self.check_row(r)))
            }
            _ => rows.iter().try_for_each(|r| self.check_row(r)),
        }
    }

    /// Whether the stream reads field `field` (a projection may leave fields out).
    fn reads(&self, rows: &[Row], field: usize) -> bool {
        rows.first()
            .is_some_and(|r| matches!(r.group.fields.get(field), Some(Some(_))))
    }

    fn assemble(&self, rows: &[Row], epoch: u64, index: u64) -> Result<Batch, LoaderError> {
        if let Some(direct) = self.direct(rows) {
            return self.assemble_direct(direct, rows, epoch, index);
        }
        if self.reads(rows, 0)
            && let Some(f) = &self.transforms.sample
        {
            self.check_rows(rows)?;
            let transformed = self.transform_samples(f, rows, epoch)?;
            // Checked readable by `transform_samples`: borrowed, not copied, on little-endian
            // hosts.
            let values = (0..self.spec.fields().len())
                .map(|field| match &self.spec.fields()[field].kind {
                    FieldKind::Tensor(_) => Values::Tensors(
                        transformed
                            .iter()
                            .map(|(fields, _)| match &fields[field] {
                                FieldValue::Tensor(t) => t.le_bytes().unwrap_or_default(),
                                FieldValue::Text(_) => Cow::Borrowed(&[][..]),
                            })
                            .collect(),
                    ),
                    _ => Values::Text(
                        transformed
                            .iter()
                            .map(|(fields, _)| match &fields[field] {
                                FieldValue::Text(t) => t.clone(),
                                FieldValue::Tensor(_) => String::new(),
                            })
                            .collect(),
                    ),
                })
                .map(Some)
                .collect();
            let labels = transformed.iter().map(|(_, l)| *l).collect();
            let batch = self.assemble_fields(rows, values, Some(labels), epoch, index);
            self.keep_spares(transformed);
            return batch;
        }
        let values = (0..self.input_spec.fields().len())
            .map(|field| {
                if !self.reads(rows, field) {
                    return None;
                }
                Some(match &self.input_spec.fields()[field].kind {
                    FieldKind::Tensor(_) => Values::Tensors(
                        rows.iter()
                            .map(|r| Cow::Borrowed(r.group.bytes(field, r.index)))
                            .collect(),
                    ),
                    _ => Values::Text(rows.iter().map(|r| r.group.text(field, r.index)).collect()),
                })
            })
            .collect();
        self.assemble_fields(rows, values, None, epoch, index)
    }

    /// The transformed samples' tensors kept for the next batch's samples to be read into (as
    /// many as a batch takes); those of another shape or type than the table's are never asked
    /// for and go.
    fn keep_spares(&self, transformed: Vec<transforms::Transformed>) {
        let wanted: Vec<(voxlake_format::DType, &[usize])> = self
            .input_spec
            .tensors()
            .map(|(_, s)| (s.dtype(), s.shape()))
            .collect();
        let Ok(mut spares) = self.spare_samples.lock() else {
            return;
        };
        let cap = wanted.len() * transformed.len();
        for (fields, _) in transformed {
            for field in fields {
                if let FieldValue::Tensor(t) = field
                    && spares.len() < cap
                    && wanted.iter().any(|(d, s)| t.is_of(*d, s))
                {
                    spares.push(t);
                }
            }
        }
    }

    /// Copies each field's values (one per row, of the loader's sample; `None` for a field not
    /// read) into a batch, with `labels` instead of the rows' own when a transform changed
    /// them. The first field goes through the device path and the recycled buffers.
    fn assemble_fields(
        &self,
        rows: &[Row],
        values: Vec<Option<Values<'_>>>,
        labels: Option<Vec<Option<i64>>>,
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let fields = self.spec.fields();
        let has_tensors = values.first().is_some_and(Option::is_some);
        if let (Some(device), true) = (self.device, has_tensors) {
            return self.on_device(device, rows, &values, labels, epoch, index);
        }
        let first = self.spec.first();
        // Rows are checked as they are copied (once: a transform's rows, checked before it ran,
        // are not read again).
        let check = self.row_check(rows);
        let tensors = if has_tensors {
            let (reuse, given) = self.reusable();
            let (tensors, recycled) = batch::build_tensors_into(
                first.dtype(),
                &self.batch_shape(first, rows.len(), self.channels),
                &bytes(&values[0]),
                self.channels,
                reuse,
                self.pool.as_deref(),
                Some(&check),
            )?;
            if recycled && given {
                self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            }
            tensors
        } else {
            batch::build_tensors(first.dtype(), &[rows.len(), 0], &[], None)?
        };
        let mut others = Vec::new();
        for (i, field) in fields.iter().enumerate().skip(1) {
            if let (FieldKind::Tensor(spec), Some(_)) = (&field.kind, &values[i]) {
                let shape = self.batch_shape(spec, rows.len(), None);
                let built = batch::build_tensors_into(
                    spec.dtype(),
                    &shape,
                    &bytes(&values[i]),
                    None,
                    None,
                    self.pool.as_deref(),
                    None,
                )?;
                others.push((i, built.0));
            }
        }
        let more = self.more_fields(&values, others.into_iter());
        Ok(self.batch_of(rows, tensors, more, labels, epoch, index))
    }

    /// The batch shape of `rows` samples of `spec`: `[B, …shape]`, or `[B, C, …spatial]`.
    fn batch_shape(&self, spec: &TensorSpec, rows: usize, channels: Option<usize>) -> Vec<usize> {
        let shape = spec.shape();
        let mut batch_shape = vec![rows];
        match channels {
            Some(c) => {
                batch_shape.push(c);
                batch_shape.extend_from_slice(&shape[..shape.len() - 1]);
            }
            None => batch_shape.extend_from_slice(shape),
        }
        batch_shape
    }

    /// The fields after the first, in order: the assembled `tensors` (field index, tensors)
    /// and the text fields of `values`.
    fn more_fields(
        &self,
        values: &[Option<Values<'_>>],
        tensors: impl Iterator<Item = (usize, Tensors)>,
    ) -> Vec<(Arc<str>, FieldBatch)> {
        let mut tensors: Vec<(usize, Tensors)> = tensors.collect();
        let mut out = Vec::new();
        for (i, field) in self.spec.fields().iter().enumerate().skip(1) {
            let name: Arc<str> = field.name.as_str().into();
            match &values[i] {
                Some(Values::Text(text)) => out.push((name, FieldBatch::Text(text.clone()))),
                Some(Values::Tensors(_)) => {
                    if let Some(at) = tensors.iter().position(|(n, _)| *n == i) {
                        out.push((name, FieldBatch::Tensors(tensors.swap_remove(at).1)));
                    }
                }
                None => {}
            }
        }
        out
    }

    /// The rows' own labels.
    fn row_labels(&self, rows: &[Row]) -> Vec<Option<i64>> {
        rows.iter().map(|r| r.group.label(r.index)).collect()
    }

    fn batch_of(
        &self,
        rows: &[Row],
        tensors: Tensors,
        more: Vec<(Arc<str>, FieldBatch)>,
        labels: Option<Vec<Option<i64>>>,
        epoch: u64,
        index: u64,
    ) -> Batch {
        let ids: Vec<String> = rows.iter().map(|r| r.group.id(r.index)).collect();
        Batch {
            tensors,
            first: self.spec.fields()[0].name.as_str().into(),
            more,
            labels: labels.unwrap_or_else(|| self.row_labels(rows)),
            lineage: rows
                .iter()
                .zip(&ids)
                .map(|(r, id)| {
                    let unit = &r.group.data.unit;
                    RowOrigin {
                        file: r.group.file.clone(),
                        row_group: unit.row_group,
                        row: r
                            .group
                            .data
                            .file_row(r.index)
                            .unwrap_or(unit.first_row + r.index as u64),
                        id: id.clone(),
                        pad: unit.pad,
                    }
                })
                .collect(),
            ids,
            sources: match self.sources.len() {
                1 => Vec::new(),
                _ => rows.iter().map(|r| r.group.source).collect(),
            },
            epoch,
            index,
            device_labels: None,
        }
    }
}
