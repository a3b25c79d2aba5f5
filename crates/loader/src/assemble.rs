//! Batches from drawn rows: the decoded row groups the shuffle buffer holds (typed views of
//! their columns, checked once), their straggling rows copied out, and each batch copied once
//! from the Arrow buffers into its tensor, on the assembly pool when there is one.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{Array, BinaryViewArray, Int64Array, StringArray};
use voxlake_format::{ID_COLUMN, LABEL_COLUMN, TENSOR_COLUMN};
use voxlake_stream::hooks::Stage;
use voxlake_stream::{RowGroupBatch, StreamError, panic_message};

use crate::LoaderError;
use crate::batch::{self, Batch, RowOrigin, Tensors};
use crate::producer::Producer;
use crate::transform::{self, Sample, SampleFn};

/// A decoded row group and typed views of its columns.
pub(crate) struct Group {
    pub data: RowGroupBatch,
    file: Arc<str>,
    ids: Option<StringArray>,
    labels: Option<Int64Array>,
    tensors: Option<BinaryViewArray>,
}

impl Group {
    /// The index in `data` of the unit's `kept`-th kept row.
    pub fn index_of(&self, kept: u64) -> Option<usize> {
        self.data.index_of_row(self.data.unit.kept_row(kept)?)
    }
}

/// A sample after the per-sample transform (the loader's spec, standard layout), and its label.
type Transformed = (Tensors, Option<i64>);

/// One row drawn for a batch: its group and its index in the group's data.
pub(crate) struct Row {
    pub group: Arc<Group>,
    pub index: usize,
}

impl Producer {
    pub(crate) fn group(&self, data: RowGroupBatch) -> Result<Group, LoaderError> {
        let column = |name: &str| data.batch.column_by_name(name).cloned();
        let ids = column(ID_COLUMN).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let labels =
            column(LABEL_COLUMN).and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
        let tensors = column(TENSOR_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<BinaryViewArray>().cloned());
        let snapshot = self.stream.snapshot();
        let file: Arc<str> = snapshot.files()[data.file()].path.as_str().into();
        if let Some(tensors) = &tensors {
            let expected = self.input_spec.nbytes();
            for i in 0..tensors.len() {
                let found = tensors.value(i).len();
                if found != expected || tensors.is_null(i) {
                    return Err(LoaderError::BadRow {
                        location: snapshot.location().to_string(),
                        file: file.to_string(),
                        id: ids
                            .as_ref()
                            .map_or_else(|| format!("#{i}"), |ids| ids.value(i).to_string()),
                        found,
                        expected,
                        spec: self.input_spec.to_string(),
                    });
                }
            }
        }
        Ok(Group {
            file,
            ids,
            labels,
            tensors,
            data,
        })
    }

    /// Keeps only the rows `kept` (the unit's kept-row numbers the mixer still has to draw)
    /// of a buffered group, copied out so the rest of its row group and budget are freed.
    pub(crate) fn loosen(
        &self,
        group: Arc<Group>,
        kept: &[u64],
    ) -> Result<Arc<Group>, LoaderError> {
        let indices = kept
            .iter()
            .map(|&k| group.index_of(k).map(|i| i as u64))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                LoaderError::Internal(format!(
                    "a row to keep is not in the buffered group of {}",
                    group.file
                ))
            })?;
        let data = match Arc::try_unwrap(group) {
            Ok(group) => group.data,
            Err(shared) => shared.data.clone(),
        };
        let loose = self.group(data.take(&indices)?)?;
        self.counters
            .loosened_rows
            .fetch_add(kept.len() as u64, Ordering::Relaxed);
        Ok(Arc::new(loose))
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

    fn assemble(&self, rows: &[Row], epoch: u64, index: u64) -> Result<Batch, LoaderError> {
        let shape = self.spec.shape();
        let mut batch_shape = vec![rows.len()];
        match self.channels {
            Some(c) => {
                batch_shape.push(c);
                batch_shape.extend_from_slice(&shape[..shape.len() - 1]);
            }
            None => batch_shape.extend_from_slice(shape),
        }
        let samples: Vec<&[u8]> = rows
            .iter()
            .map(|r| {
                r.group
                    .tensors
                    .as_ref()
                    .map_or(&[][..], |t| t.value(r.index))
            })
            .collect();
        let has_tensors = rows.first().is_some_and(|r| r.group.tensors.is_some());
        if has_tensors && let Some(f) = &self.transforms.sample {
            let transformed = self.transform_samples(f, rows, &samples, epoch)?;
            // Checked readable by `transform_samples`: borrowed, not copied, on little-endian
            // hosts.
            let bytes: Vec<std::borrow::Cow<'_, [u8]>> = transformed
                .iter()
                .map(|(t, _)| t.le_bytes().unwrap_or_default())
                .collect();
            let samples: Vec<&[u8]> = bytes.iter().map(|b| b.as_ref()).collect();
            let labels = transformed.iter().map(|(_, l)| *l).collect();
            return self.assemble_samples(rows, &samples, Some(labels), batch_shape, epoch, index);
        }
        self.assemble_samples(rows, &samples, None, batch_shape, epoch, index)
    }

    /// Copies `samples` (one per row, of the loader's spec) into a batch, with `labels`
    /// instead of the rows' own when a transform changed them.
    fn assemble_samples(
        &self,
        rows: &[Row],
        samples: &[&[u8]],
        labels: Option<Vec<Option<i64>>>,
        mut batch_shape: Vec<usize>,
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let has_tensors = rows.first().is_some_and(|r| r.group.tensors.is_some());
        #[cfg(feature = "tch")]
        if let (Some(device), true) = (self.device, has_tensors) {
            let labels = labels.unwrap_or_else(|| self.row_labels(rows));
            let Some(feed) = &self.feed else {
                let tensors = crate::torch::assemble_cpu(
                    self.spec.dtype(),
                    self.spec.shape(),
                    samples,
                    self.channels,
                    self.pool.as_deref(),
                )?;
                return Ok(self.batch_of(rows, tensors, Some(labels), epoch, index));
            };
            let failed = |message: String| LoaderError::Device {
                device: format!("{device:?}"),
                object: format!("batch {index} of epoch {epoch}"),
                message,
            };
            let mut feed = feed
                .lock()
                .map_err(|_| failed("the staging ring was poisoned by an earlier panic".into()))?;
            let sent = feed
                .send(
                    self.spec.dtype(),
                    self.spec.shape(),
                    samples,
                    &labels,
                    self.pool.as_deref(),
                )
                .map_err(failed)?;
            self.counters
                .staging_waits
                .store(feed.waits(), Ordering::Relaxed);
            drop(feed);
            let tensors =
                crate::torch::channels_first(sent.tensors, self.channels).map_err(failed)?;
            let tensors = Tensors::Tch(crate::torch::TchTensor(tensors));
            let mut batch = self.batch_of(rows, tensors, Some(labels), epoch, index);
            // Copied with the batch: `label_tensor` never blocks on them.
            batch.device_labels = sent.labels.map(crate::torch::TchTensor);
            return Ok(batch);
        }
        let tensors = if has_tensors {
            let reuse = self.recycled.lock().ok().and_then(|mut r| r.pop());
            let (tensors, recycled) = batch::build_tensors_into(
                self.spec.dtype(),
                &batch_shape,
                samples,
                self.channels,
                reuse,
                self.pool.as_deref(),
            )?;
            if recycled {
                self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            }
            tensors
        } else {
            batch_shape.truncate(1);
            batch_shape.push(0);
            batch::build_tensors(self.spec.dtype(), &batch_shape, &[], None)?
        };
        Ok(self.batch_of(rows, tensors, labels, epoch, index))
    }

    /// Each row's sample through the per-sample transform (on the assembly pool): its tensor
    /// in the loader's spec and its label, or an error naming the row.
    fn transform_samples(
        &self,
        f: &Arc<SampleFn>,
        rows: &[Row],
        samples: &[&[u8]],
        epoch: u64,
    ) -> Result<Vec<Transformed>, LoaderError> {
        let (input, output, seed) = (&self.input_spec, &self.spec, self.settings.seed);
        let one = |(row, bytes): (&Row, &&[u8])| {
            let group = &row.group;
            let id = group
                .ids
                .as_ref()
                .map_or_else(String::new, |ids| ids.value(row.index).to_string());
            let fail = |message: String| LoaderError::Transform {
                object: format!("row {id} of {}", group.file),
                message,
            };
            let label = group
                .labels
                .as_ref()
                .and_then(|l| (!l.is_null(row.index)).then(|| l.value(row.index)));
            let tensor = Tensors::sample_from_le(input.dtype(), input.shape(), bytes)?;
            let mut sample = Sample {
                tensor,
                label,
                id: &id,
            };
            let mut rng = transform::sample_rng(seed, epoch, &id);
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut sample, &mut rng))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(fail(e.to_string())),
                Err(panic) => {
                    return Err(fail(format!("panicked: {}", panic_message(panic.as_ref()))));
                }
            }
            let (shape, dtype) = (sample.tensor.shape(), sample.tensor.dtype());
            if shape != output.shape() || dtype != output.dtype() {
                return Err(fail(format!(
                    "it returned a tensor of {shape:?} {dtype}, the loader hands out {output} (with_transform_to sets that)"
                )));
            }
            let tensor = sample.tensor.into_standard_layout();
            if tensor.le_bytes().is_none() {
                return Err(fail(
                    "it returned a libtorch tensor not on the CPU: per-sample transforms return ndarray tensors"
                        .into(),
                ));
            }
            Ok((tensor, sample.label))
        };
        match self.pool.as_deref() {
            Some(pool) if rows.len() > 1 => {
                use rayon::prelude::*;
                pool.install(|| rows.par_iter().zip(samples.par_iter()).map(one).collect())
            }
            _ => rows.iter().zip(samples).map(one).collect(),
        }
    }

    /// The batch through the per-batch transform, if there is one.
    fn transform_batch(
        &self,
        mut batch: Batch,
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let Some(f) = &self.transforms.batch else {
            return Ok(batch);
        };
        let fail = |message: String| LoaderError::Transform {
            object: format!("batch {index} of epoch {epoch}"),
            message,
        };
        let mut rng = transform::batch_rng(self.settings.seed, epoch, index);
        #[cfg(feature = "tch")]
        let labels = batch.device_labels.is_some().then(|| batch.labels.clone());
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut batch, &mut rng))) {
            Ok(Ok(())) => {
                // Labels the transform changed are no longer the ones copied with the batch.
                #[cfg(feature = "tch")]
                if labels.is_some_and(|l| l != batch.labels) {
                    batch.device_labels = None;
                }
                Ok(batch)
            }
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(panic) => Err(fail(format!("panicked: {}", panic_message(panic.as_ref())))),
        }
    }

    /// The rows' own labels.
    fn row_labels(&self, rows: &[Row]) -> Vec<Option<i64>> {
        rows.iter()
            .map(|r| {
                r.group
                    .labels
                    .as_ref()
                    .and_then(|l| (!l.is_null(r.index)).then(|| l.value(r.index)))
            })
            .collect()
    }

    fn batch_of(
        &self,
        rows: &[Row],
        tensors: Tensors,
        labels: Option<Vec<Option<i64>>>,
        epoch: u64,
        index: u64,
    ) -> Batch {
        let ids: Vec<String> = rows
            .iter()
            .map(|r| {
                r.group
                    .ids
                    .as_ref()
                    .map_or_else(String::new, |ids| ids.value(r.index).to_string())
            })
            .collect();
        Batch {
            tensors,
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
            epoch,
            index,
            #[cfg(feature = "tch")]
            device_labels: None,
        }
    }
}
