//! Batches of patches of a bricked table's volumes: the bricks a list of patches overlaps,
//! each once ([`Needs`]), and, once those rows are read and checked, each patch of each field
//! put together from them ([`Needs::assemble`]): `[B, C?, pz, py, px]` a field, channels first
//! where the field has them, plus the patches' origins (`origin`, int64 `[B, 3]`), the volumes'
//! ids and labels.

use std::collections::HashMap;
use std::sync::Arc;

use voxlake_format::volume::{BrickSpec, ORIGIN_FIELD, brick_id};
use voxlake_plan::patch::{BrickGrid, Dims, Pad, Patch, Piece};
use voxlake_table::Volumes;

use crate::LoaderError;
use crate::assemble::Row;
use crate::batch::{Batch, FieldBatch, Tensors};

pub(crate) mod place;
mod run;

use place::Boxed;

/// One patch asked for: the volume (its number in [`Volumes`]) and where the patch sits.
struct Asked {
    volume: usize,
    patch: Patch,
    /// The bricks it overlaps: the piece and the brick's slot in [`Needs::ids`].
    pieces: Vec<(Piece, usize)>,
    /// Per axis, the patch's voxels that lie in the volume.
    inside: [(u64, u64); 3],
}

/// The bricks a list of patches needs, each once, and how each patch is put together.
pub(crate) struct Needs {
    /// The bricks' ids, each once, in the order first needed.
    pub ids: Vec<String>,
    asked: Vec<Asked>,
    size: Dims,
    pad: Pad,
}

impl Needs {
    /// The bricks of `at` (volume number, origin) for patches of `size` padded as `pad`: a
    /// volume the table lacks, a patch that overlaps no voxel of its volume, or (with
    /// [`Pad::None`]) one that reaches past the volume's edge is an error naming the volume.
    pub(crate) fn of(
        volumes: &Volumes,
        size: Dims,
        pad: Pad,
        at: &[(usize, [i64; 3])],
    ) -> Result<Needs, LoaderError> {
        let config = |m: String| Err(LoaderError::Config(m));
        if size.contains(&0) {
            return config(format!("a patch of {size:?} voxels: every axis needs one"));
        }
        let mut slots: HashMap<String, usize> = HashMap::new();
        let mut ids = Vec::new();
        let mut asked = Vec::with_capacity(at.len());
        for &(number, origin) in at {
            let Some(volume) = volumes.volumes().get(number) else {
                return config(format!(
                    "no volume #{number}: the table has {}",
                    volumes.volumes().len()
                ));
            };
            let shape = volume.info.shape;
            let grid = BrickGrid::new(shape, volumes.spec().brick())
                .map_err(|e| LoaderError::Config(format!("volume '{}': {e}", volume.id)))?;
            let inside: [(u64, u64); 3] = std::array::from_fn(|a| {
                let lo = (-origin[a]).clamp(0, size[a] as i64) as u64;
                let hi = (shape[a] as i64)
                    .saturating_sub(origin[a])
                    .clamp(0, size[a] as i64);
                (lo, hi as u64)
            });
            if inside.iter().any(|(lo, hi)| lo >= hi) {
                return config(format!(
                    "a patch of {size:?} at {origin:?} overlaps no voxel of volume '{}' of {shape:?}",
                    volume.id
                ));
            }
            if pad == Pad::None && inside.iter().zip(size).any(|(&(lo, hi), s)| hi - lo < s) {
                return config(format!(
                    "a patch of {size:?} at {origin:?} reaches past the edge of volume '{}' of {shape:?} (pad=\"none\")",
                    volume.id
                ));
            }
            let patch = Patch { origin, size };
            let pieces = grid
                .pieces(&patch)
                .into_iter()
                .map(|piece| {
                    let id = brick_id(&volume.id, grid.index(piece.brick));
                    let slot = *slots.entry(id.clone()).or_insert_with(|| {
                        ids.push(id);
                        ids.len() - 1
                    });
                    (piece, slot)
                })
                .collect();
            asked.push(Asked {
                volume: number,
                patch,
                pieces,
                inside,
            });
        }
        Ok(Needs {
            ids,
            asked,
            size,
            pad,
        })
    }

    /// The batch of the patches, from `rows` (the rows of [`ids`](Self::ids), in order) and
    /// the read fields' numbers in the rows (`fields`: of each field of the layout, its number
    /// in the read sample, `None` where it is not read).
    pub(crate) fn assemble(
        &self,
        volumes: &Volumes,
        rows: &[Row],
        fields: &[Option<usize>],
    ) -> Result<Batch, LoaderError> {
        let spec: &BrickSpec = volumes.spec();
        let mut made: Vec<(Arc<str>, FieldBatch)> = Vec::new();
        for (field, read) in spec.fields().iter().zip(fields) {
            let Some(read) = *read else { continue };
            let channels = field.channels.unwrap_or(1);
            let item = field.dtype.size();
            let from = Boxed {
                channels,
                dims: spec.brick(),
                item,
            };
            let to = Boxed {
                channels,
                dims: self.size,
                item,
            };
            let mut patches = Vec::with_capacity(self.asked.len());
            for asked in &self.asked {
                let mut out = vec![0u8; to.len()];
                for (piece, slot) in &asked.pieces {
                    let row = &rows[*slot];
                    let brick = row.group.bytes(read, row.index);
                    if brick.len() != from.len() {
                        return Err(LoaderError::Internal(format!(
                            "brick '{}' of field '{}' has {} bytes, not {}",
                            self.ids[*slot],
                            field.name,
                            brick.len(),
                            from.len()
                        )));
                    }
                    place::place(&mut out, to, brick, from, piece);
                }
                if self.pad == Pad::Edge {
                    place::pad_edges(&mut out, to, asked.inside);
                }
                patches.push(out);
            }
            let mut shape = vec![self.asked.len()];
            shape.extend(field.shape(self.size).iter().map(|&d| d as usize));
            let slices: Vec<&[u8]> = patches.iter().map(Vec::as_slice).collect();
            let tensors = crate::batch::build_tensors(field.dtype, &shape, &slices, None)?;
            made.push((field.name.as_str().into(), FieldBatch::Tensors(tensors)));
        }
        if made.is_empty() {
            return Err(LoaderError::Config(
                "patches of no field: the lookup reads none of the volumes' fields".into(),
            ));
        }
        let origins: Vec<i64> = self.asked.iter().flat_map(|a| a.patch.origin).collect();
        let origins = ndarray::ArrayD::from_shape_vec(vec![self.asked.len(), 3], origins)
            .map_err(|e| LoaderError::Internal(format!("the patches' origins: {e}")))?;
        made.push((
            ORIGIN_FIELD.into(),
            FieldBatch::Tensors(Tensors::I64(origins)),
        ));
        let (first, FieldBatch::Tensors(tensors)) = made.remove(0) else {
            return Err(LoaderError::Internal(
                "a patch field is not a tensor".into(),
            ));
        };
        let of = |a: &Asked| &volumes.volumes()[a.volume];
        Ok(Batch {
            tensors,
            first,
            more: made,
            labels: self.asked.iter().map(|a| of(a).label).collect(),
            ids: self.asked.iter().map(|a| of(a).id.clone()).collect(),
            sources: Vec::new(),
            lineage: Vec::new(),
            epoch: 0,
            index: 0,
            device_labels: None,
        })
    }
}
