//! The transforms of an assembled batch: each row's sample through the per-sample transform
//! (on the assembly pool), the batch through the batch transform, each seeded from the run's
//! seed, epoch and row or batch, an error or panic in one naming what it was working on.

use super::*;

/// A sample after the per-sample transform: its fields (the loader's output sample, standard
/// layout) and its label.
pub(super) type Transformed = (Vec<FieldValue>, Option<i64>);

impl Assembler {
    /// Each row's sample through the per-sample transform (on the assembly pool): its fields
    /// in the loader's sample and its label, or an error naming the row.
    pub(super) fn transform_samples(
        &self,
        f: &Arc<SampleFn>,
        rows: &[Row],
        epoch: u64,
    ) -> Result<Vec<Transformed>, LoaderError> {
        let (input, output, seed) = (&self.input_spec, &self.spec, self.seed);
        let first: Arc<str> = input.fields()[0].name.as_str().into();
        let names: Vec<Arc<str>> = input
            .fields()
            .iter()
            .map(|f| Arc::from(f.name.as_str()))
            .collect();
        let one = |row: &Row| {
            let group = &row.group;
            let id = group.id(row.index);
            let fail = |message: String| LoaderError::Transform {
                object: format!("row {id} of {}", group.file),
                message,
            };
            let mut fields = Vec::with_capacity(input.fields().len());
            for (i, field) in input.fields().iter().enumerate() {
                fields.push(match &field.kind {
                    FieldKind::Tensor(spec) => FieldValue::Tensor(Tensors::sample_from_le_into(
                        spec.dtype(),
                        spec.shape(),
                        group.bytes(i, row.index),
                        &self.spare_samples,
                    )?),
                    _ => FieldValue::Text(group.text(i, row.index)),
                });
            }
            let mut fields = fields.into_iter();
            let tensor = match fields.next() {
                Some(FieldValue::Tensor(t)) => t,
                _ => return Err(fail("the sample's first field is not a tensor".into())),
            };
            let mut sample = Sample {
                tensor,
                label: group.label(row.index),
                id: &id,
                first: first.clone(),
                more: names[1..].iter().cloned().zip(fields).collect(),
            };
            let mut rng = transform::sample_rng(seed, epoch, &id);
            match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut sample, &mut rng))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(fail(e.to_string())),
                Err(panic) => {
                    return Err(fail(format!("panicked: {}", panic_message(panic.as_ref()))));
                }
            }
            let label = sample.label;
            let mut out = Vec::with_capacity(output.fields().len());
            let mut given = std::iter::once((first.clone(), FieldValue::Tensor(sample.tensor)))
                .chain(sample.more)
                .collect::<Vec<_>>();
            for field in output.fields() {
                let at = given.iter().position(|(n, _)| **n == *field.name);
                let value = at.map(|at| given.swap_remove(at).1);
                out.push(match (&field.kind, value) {
                    (FieldKind::Tensor(spec), Some(FieldValue::Tensor(t))) => {
                        let (shape, dtype) = (t.shape(), t.dtype());
                        if shape != spec.shape() || dtype != spec.dtype() {
                            return Err(fail(format!(
                                "it returned a tensor of {shape:?} {dtype} for field '{}', the loader hands out {spec} (with_transform_to sets that)",
                                field.name
                            )));
                        }
                        let t = t.into_standard_layout();
                        if t.le_bytes().is_none() {
                            return Err(fail(
                                "it returned a libtorch tensor not on the CPU: per-sample transforms return ndarray tensors"
                                    .into(),
                            ));
                        }
                        FieldValue::Tensor(t)
                    }
                    (FieldKind::Text, Some(FieldValue::Text(t))) => FieldValue::Text(t),
                    (kind, _) => {
                        return Err(fail(format!(
                            "it returned no {kind} for field '{}' (with_transform_to sets the fields it hands out)",
                            field.name
                        )));
                    }
                });
            }
            Ok((out, label))
        };
        match self.pool.as_deref() {
            Some(pool) if rows.len() > 1 => {
                use rayon::prelude::*;
                pool.install(|| rows.par_iter().map(one).collect())
            }
            _ => rows.iter().map(one).collect(),
        }
    }

    /// The batch through the per-batch transform, if there is one.
    pub(super) fn transform_batch(
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
        let mut rng = transform::batch_rng(self.seed, epoch, index);
        let labels = batch.device_labels.is_some().then(|| batch.labels.clone());
        let start = std::time::Instant::now();
        let done = std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut batch, &mut rng)));
        self.counters
            .batch_transform_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match done {
            Ok(Ok(())) => {
                // Labels the transform changed are no longer the ones copied with the batch.
                if labels.is_some_and(|l| l != batch.labels) {
                    batch.device_labels = None;
                }
                Ok(batch)
            }
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(panic) => Err(fail(format!("panicked: {}", panic_message(panic.as_ref())))),
        }
    }
}
