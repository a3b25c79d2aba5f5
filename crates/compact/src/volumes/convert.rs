//! `compact convert --brick`: `.npy` volumes (one field, a folder per field, or `.npz`
//! archives, as a conversion of samples pairs them) written as bricks by the volume writer,
//! one volume at a time with the next one's objects fetched meanwhile.

use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use voxlake_format::npy::NpyArray;
use voxlake_format::volume::{BrickSpec, VolumeField};
use voxlake_format::{Casting, TENSOR_COLUMN};
use voxlake_io::location::Location;

use super::Volume;
use crate::labels::Labels;
use crate::sink::{ConvertSummary, Skipped};
use crate::source::{self, SourceSample};
use crate::{CompactError, Compactor, OnError};

/// A volume's objects fetched: its key and each part's `(key, bytes)`.
type Fetched = (String, Vec<(String, Bytes)>);

impl Compactor {
    /// Converts the `.npy` volumes under `source` into bricks of `brick` (see the module docs).
    pub(crate) async fn run_convert_volumes(
        &self,
        source: &str,
        brick: [u64; 3],
    ) -> Result<ConvertSummary, CompactError> {
        let start = Instant::now();
        let (src, options, labels) = self.open_source(source).await?;
        let objects = crate::convert::list(&src).await?;
        let Some(layout) = self.layout_of(&objects, &src.display)? else {
            return Err(CompactError::Incompatible {
                location: src.display.clone(),
                reason: "--brick converts .npy volumes; this source is a table".into(),
            });
        };
        let (mut samples, incomplete) = source::group(objects, &layout);
        let mut skipped = self.skip_incomplete(incomplete)?;
        samples.retain(|s| self.in_shard(&s.key));
        // A re-run downloads only the volumes the table does not hold whole.
        let (written, version) = self.written_volumes(&options).await?;
        let mut already = 0u64; // bricks, as the writer counts rows it holds
        samples.retain(|s| match written.get(&s.key) {
            Some(bricks) => {
                already += bricks;
                false
            }
            None => true,
        });
        if samples.is_empty() && already == 0 {
            return Err(CompactError::EmptySource {
                location: src.display.clone(),
                detail: String::new(),
            });
        }
        let names: Vec<String> = match layout.fields() {
            Some(f) if !f.is_empty() => f.to_vec(),
            _ => vec![TENSOR_COLUMN.to_string()],
        };
        let casting = match self.dtype {
            Some(_) => Casting::SameKind,
            None => Casting::Safe,
        };
        let fetched = fetch(&src, samples);
        futures::pin_mut!(fetched);
        let mut writer = None;
        let mut spec = None;
        while let Some((key, parts)) = fetched.try_next().await? {
            let arrays =
                source::arrays(&key, &parts, &layout, voxlake_format::npy::NPZ_DEFAULT_CAP)?;
            let layout_spec = match &spec {
                Some(s) => s,
                None => spec.insert(self.brick_spec(brick, &names, &arrays)?),
            };
            let volume = match volume_of(&key, &arrays, layout_spec, casting, labels.as_deref()) {
                Ok(v) => v,
                Err(e) if self.on_error == OnError::Skip => {
                    tracing::warn!(%key, error = %e, "skipping");
                    skipped.push(Skipped {
                        key,
                        reason: e.to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            let writer = match &mut writer {
                Some(w) => w,
                None => writer.insert(self.open_volume_writer(layout_spec.clone()).await?),
            };
            writer.push(volume).await?;
        }
        let mut summary = match writer {
            Some(writer) => writer.finish().await?,
            None if already > 0 => {
                ConvertSummary::starting(version, String::new(), start.elapsed().as_secs_f64())
            }
            None => {
                return Err(CompactError::EmptySource {
                    location: src.display.clone(),
                    detail: " (every volume was skipped)".into(),
                });
            }
        };
        summary.skipped.extend(skipped);
        summary.already_present += already as usize;
        tracing::info!(seconds = start.elapsed().as_secs_f64(), "volumes converted");
        Ok(summary)
    }

    /// The volumes the table holds whole (their info written) and their bricks, where it is a
    /// bricked table, and its version.
    async fn written_volumes(
        &self,
        options: &std::collections::HashMap<String, String>,
    ) -> Result<(std::collections::HashMap<String, u64>, u64), CompactError> {
        let url = voxlake_io::location::table_url(&self.table)?;
        let display = crate::table::redact_url(&url);
        let Some(table) = crate::table::Table::open(&url, &display, options).await? else {
            return Ok(Default::default());
        };
        if table.bricks()?.is_none() {
            // Not bricked: the writer says so, naming the table.
            return Ok(Default::default());
        }
        let volumes = table.scan().await?.volumes().await?;
        let spec = volumes.spec();
        let ids = volumes
            .volumes()
            .iter()
            .map(|v| (v.id.clone(), v.info.bricks(spec)))
            .collect();
        Ok((ids, table.version()))
    }

    /// The layout of the first volume's arrays: each field's type (`--dtype` for the first)
    /// and channels (a 4-D array's first axis).
    fn brick_spec(
        &self,
        brick: [u64; 3],
        names: &[String],
        arrays: &[(String, Bytes)],
    ) -> Result<BrickSpec, CompactError> {
        let mut fields = Vec::with_capacity(names.len());
        for (i, (name, (key, bytes))) in names.iter().zip(arrays).enumerate() {
            let array = parse(key, bytes)?;
            let dtype = match (i, self.dtype) {
                (0, Some(d)) => d,
                _ => array.dtype(),
            };
            let field = VolumeField::new(name, dtype);
            fields.push(match array.shape() {
                [_, _, _] => field,
                [c, _, _, _] => field.with_channels(*c as u64),
                other => return Err(not_a_volume(key, other)),
            });
        }
        let spec = BrickSpec::new(brick, fields);
        let spec = match (&self.class_fields, spec) {
            (Some(names), Ok(s)) => s.with_class_fields(names.clone()),
            (None, s) => s,
            (_, Err(e)) => Err(e),
        };
        spec.map_err(|e| CompactError::Incompatible {
            location: voxlake_io::redact(&self.table),
            reason: e.to_string(),
        })
    }
}

/// Each volume's objects, fetched one volume ahead of the writer.
fn fetch(
    src: &Location,
    samples: Vec<SourceSample>,
) -> impl futures::Stream<Item = Result<Fetched, CompactError>> + '_ {
    futures::stream::iter(samples)
        .map(move |sample| async move {
            let mut parts = Vec::with_capacity(sample.parts.len());
            for part in sample.parts {
                let got = match src.store.get(&part.location).await {
                    Ok(reply) => reply.bytes().await,
                    Err(e) => Err(e),
                };
                let bytes = got.map_err(|e| CompactError::Source {
                    location: format!("{}/{}", src.display, part.key),
                    source: e,
                })?;
                parts.push((part.key, bytes));
            }
            Ok((sample.key, parts))
        })
        .buffered(2)
}

/// Volume `key` of `arrays` (one per field of `spec`), each checked and converted to its
/// field's type (under `casting`), every field over the same voxels.
fn volume_of(
    key: &str,
    arrays: &[(String, Bytes)],
    spec: &BrickSpec,
    casting: Casting,
    labels: Option<&Labels>,
) -> Result<Volume, CompactError> {
    let mut shape: Option<[u64; 3]> = None;
    let mut fields = Vec::with_capacity(arrays.len());
    for ((part, bytes), field) in arrays.iter().zip(spec.fields()) {
        let array = parse(part, bytes)?;
        let (channels, spatial) = match array.shape() {
            [z, y, x] => (None, [*z as u64, *y as u64, *x as u64]),
            [c, z, y, x] => (Some(*c as u64), [*z as u64, *y as u64, *x as u64]),
            other => return Err(not_a_volume(part, other)),
        };
        let bad = |reason: String| CompactError::Incompatible {
            location: part.clone(),
            reason,
        };
        if channels != field.channels {
            return Err(bad(format!(
                "field '{}' has {channels:?} channels, the table's {:?}",
                field.name, field.channels
            )));
        }
        if let Some(first) = shape
            && first != spatial
        {
            return Err(bad(format!(
                "field '{}' covers {spatial:?} voxels, the volume's first field {first:?}",
                field.name
            )));
        }
        shape = Some(spatial);
        if array.is_le_c(field.dtype) {
            // Already as the table stores it: a slice of the download.
            fields.push(bytes.slice(bytes.len() - array.data().len()..));
            continue;
        }
        let mut out = Vec::new();
        array
            .write_le_c(field.dtype, casting, &mut out)
            .map_err(|e| bad(format!("field '{}': {e}", field.name)))?;
        fields.push(Bytes::from(out));
    }
    let label = match labels {
        Some(labels) => Some(labels.get(key).ok_or_else(|| CompactError::MissingLabel {
            key: key.to_string(),
            labels: labels.location().to_string(),
        })?),
        None => None,
    };
    let shape = shape.ok_or_else(|| CompactError::Internal(format!("{key}: no field")))?;
    Ok(Volume::new(key, shape, fields).with_label(label))
}

fn parse<'a>(key: &str, bytes: &'a Bytes) -> Result<NpyArray<'a>, CompactError> {
    NpyArray::parse(bytes).map_err(|source| CompactError::Npy {
        key: key.to_string(),
        source,
    })
}

fn not_a_volume(key: &str, shape: &[usize]) -> CompactError {
    CompactError::Incompatible {
        location: key.to_string(),
        reason: format!("an array of {shape:?} is not a volume: (z, y, x) or (channels, z, y, x)"),
    }
}
