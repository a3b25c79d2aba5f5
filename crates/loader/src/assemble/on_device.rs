//! A batch's tensors on the loader's libtorch device (feature `tch`): on CPU one copy into
//! the tensor's memory; for CUDA through the staging ring (`feed`), the labels copied with
//! the batch. Without the feature the device type is empty and this path cannot be taken.

#[cfg(feature = "tch")]
use std::sync::atomic::Ordering;

#[cfg(feature = "tch")]
use voxlake_format::TensorSpec;

#[cfg(feature = "tch")]
use super::bytes;
use super::{Assembler, Row, Values};
use crate::LoaderError;
use crate::batch::Batch;
#[cfg(feature = "tch")]
use crate::batch::Tensors;
use crate::device::Device;

impl Assembler {
    /// `values` (one per field, `None` for a field not read) as a batch of tensors on `device`.
    #[cfg(feature = "tch")]
    pub(super) fn on_device(
        &self,
        device: Device,
        rows: &[Row],
        values: &[Option<Values<'_>>],
        labels: Option<Vec<Option<i64>>>,
        epoch: u64,
        index: u64,
    ) -> Result<Batch, LoaderError> {
        let fields = self.spec.fields();
        let labels = labels.unwrap_or_else(|| self.row_labels(rows));
        let tensor_fields: Vec<(usize, &TensorSpec)> = fields
            .iter()
            .enumerate()
            .filter(|(i, _)| values[*i].is_some())
            .filter_map(|(i, f)| f.kind.tensor().map(|s| (i, s)))
            .collect();
        let samples: Vec<Vec<&[u8]>> = tensor_fields
            .iter()
            .map(|(i, _)| bytes(&values[*i]))
            .collect();
        let check = self.row_check(rows);
        let mut tensors: Vec<Tensors> = match &self.feed {
            None => tensor_fields
                .iter()
                .zip(&samples)
                .enumerate()
                .map(|(n, ((i, spec), samples))| {
                    let channels = if *i == 0 { self.channels } else { None };
                    crate::torch::assemble_cpu(
                        spec.dtype(),
                        spec.shape(),
                        samples,
                        channels,
                        self.pool.as_deref(),
                        // The first tensor field's copy checks the rows.
                        (n == 0).then_some(&check as _),
                    )
                    .map(Tensors::Tch)
                })
                .collect::<Result<_, _>>()?,
            Some(feed) => {
                self.check_rows(rows)?;
                let failed = |message: String| LoaderError::Device {
                    device: format!("{device:?}"),
                    object: format!("batch {index} of epoch {epoch}"),
                    message,
                };
                let staged: Vec<crate::feed::Staged<'_>> = tensor_fields
                    .iter()
                    .zip(&samples)
                    .map(|((_, spec), samples)| crate::feed::Staged {
                        dtype: spec.dtype(),
                        shape: spec.shape(),
                        samples,
                    })
                    .collect();
                let mut setup = feed.lock().map_err(|_| {
                    failed("the staging ring was poisoned by an earlier panic".into())
                })?;
                let feed = setup.ready().map_err(failed)?;
                let copy = std::time::Instant::now();
                let sent = feed
                    .send(&staged, &labels, self.pool.as_deref())
                    .map_err(failed)?;
                let ns = u64::try_from(copy.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.counters
                    .device_copy_ns
                    .fetch_add(ns, Ordering::Relaxed);
                self.counters
                    .staging_waits
                    .store(feed.waits(), Ordering::Relaxed);
                drop(setup);
                let mut on_device = Vec::with_capacity(sent.tensors.len());
                for (n, t) in sent.tensors.into_iter().enumerate() {
                    let channels = if tensor_fields[n].0 == 0 {
                        self.channels
                    } else {
                        None
                    };
                    let t = crate::torch::channels_first(t, channels).map_err(failed)?;
                    on_device.push(Tensors::Tch(crate::TchTensor(t)));
                }
                let mut batch = self.batch_of(
                    rows,
                    on_device.remove(0),
                    self.more_fields(
                        values,
                        tensor_fields[1..].iter().map(|f| f.0).zip(on_device),
                    ),
                    Some(labels),
                    epoch,
                    index,
                );
                // Copied with the batch: `label_tensor` never blocks on them.
                batch.device_labels = sent.labels.map(crate::TchTensor);
                return Ok(batch);
            }
        };
        let first = tensors.remove(0);
        let more = self.more_fields(values, tensor_fields[1..].iter().map(|f| f.0).zip(tensors));
        Ok(self.batch_of(rows, first, more, Some(labels), epoch, index))
    }

    /// No device without the `tch` feature.
    #[cfg(not(feature = "tch"))]
    pub(super) fn on_device(
        &self,
        device: Device,
        _: &[Row],
        _: &[Option<Values<'_>>],
        _: Option<Vec<Option<i64>>>,
        _: u64,
        _: u64,
    ) -> Result<Batch, LoaderError> {
        match device {}
    }
}
