//! A patch put together from its bricks: each piece's box copied from its brick to its place
//! in the patch ([`place`]), then the voxels past the volume's edge filled with the edge's
//! ([`pad_edges`]) where the patch is edge-padded. Pure copies of little-endian bytes; every
//! size is checked by the caller.

use voxlake_plan::patch::{Dims, Piece};

/// The voxels of one field's patch or brick: its channels, its three axes, its values' bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Boxed {
    pub channels: u64,
    pub dims: Dims,
    pub item: usize,
}

impl Boxed {
    /// Bytes of it in all.
    pub(crate) fn len(&self) -> usize {
        (self.channels * self.dims.iter().product::<u64>()) as usize * self.item
    }

    /// The byte offset of voxel `at` of channel `c`.
    fn offset(&self, c: u64, at: Dims) -> usize {
        let d = self.dims;
        ((((c * d[0] + at[0]) * d[1] + at[1]) * d[2] + at[2]) as usize) * self.item
    }
}

/// Copies `piece`'s box from `brick` (laid out as `from`) into `patch` (laid out as `to`).
pub(crate) fn place(patch: &mut [u8], to: Boxed, brick: &[u8], from: Boxed, piece: &Piece) {
    let row = piece.len[2] as usize * to.item;
    for c in 0..to.channels {
        for z in 0..piece.len[0] {
            for y in 0..piece.len[1] {
                let src = from.offset(c, [piece.from[0] + z, piece.from[1] + y, piece.from[2]]);
                let dst = to.offset(c, [piece.to[0] + z, piece.to[1] + y, piece.to[2]]);
                patch[dst..dst + row].copy_from_slice(&brick[src..src + row]);
            }
        }
    }
}

/// Fills the voxels of `patch` outside `inside` (per axis, the patch's voxels `lo..hi` that
/// lie in the volume, none empty) with the nearest voxel inside, axis after axis: the volume's
/// edge repeated.
pub(crate) fn pad_edges(patch: &mut [u8], layout: Boxed, inside: [(u64, u64); 3]) {
    let d = layout.dims;
    let item = layout.item;
    for c in 0..layout.channels {
        // Along z: whole planes (y, x) copied.
        let plane = (d[1] * d[2]) as usize * item;
        for z in 0..d[0] {
            let near = z.clamp(inside[0].0, inside[0].1 - 1);
            if near != z {
                let (src, dst) = (layout.offset(c, [near, 0, 0]), layout.offset(c, [z, 0, 0]));
                patch.copy_within(src..src + plane, dst);
            }
        }
        // Along y: rows of x, in every plane.
        let row = d[2] as usize * item;
        for z in 0..d[0] {
            for y in 0..d[1] {
                let near = y.clamp(inside[1].0, inside[1].1 - 1);
                if near != y {
                    let (src, dst) = (layout.offset(c, [z, near, 0]), layout.offset(c, [z, y, 0]));
                    patch.copy_within(src..src + row, dst);
                }
            }
        }
        // Along x: single voxels.
        for z in 0..d[0] {
            for y in 0..d[1] {
                for x in 0..d[2] {
                    let near = x.clamp(inside[2].0, inside[2].1 - 1);
                    if near != x {
                        let src = layout.offset(c, [z, y, near]);
                        let dst = layout.offset(c, [z, y, x]);
                        patch.copy_within(src..src + item, dst);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use voxlake_plan::patch::{BrickGrid, Patch};

    /// The volume's voxel nearest `p` (edge), or `None` outside (zero).
    fn at(shape: Dims, p: [i64; 3], edge: bool) -> Option<[u64; 3]> {
        let inside = (0..3).all(|a| p[a] >= 0 && (p[a] as u64) < shape[a]);
        match (inside, edge) {
            (true, _) | (false, true) => Some(std::array::from_fn(|a| {
                p[a].clamp(0, shape[a] as i64 - 1) as u64
            })),
            (false, false) => None,
        }
    }

    proptest! {
        /// A patch put together from padded bricks equals numpy's crop of the volume, zero- or
        /// edge-padded, in every channel.
        #[test]
        fn a_patch_equals_the_crop_of_the_volume(
            shape in prop::array::uniform3(1u64..10),
            brick in prop::array::uniform3(1u64..5),
            size in prop::array::uniform3(1u64..9),
            origin in prop::array::uniform3(-6i64..12),
            channels in 1u64..3,
            edge in any::<bool>(),
        ) {
            let grid = BrickGrid::new(shape, brick).unwrap();
            let value = |c: u64, p: [u64; 3]| (((c * shape[0] + p[0]) * shape[1] + p[1]) * shape[2] + p[2] + 1) as u16;
            // Each brick as the writer stores it: channels × brick, zeros past the edge.
            let from = Boxed { channels, dims: brick, item: 2 };
            let brick_bytes = |at: Dims| -> Vec<u8> {
                let mut out = vec![0u8; from.len()];
                for c in 0..channels { for z in 0..brick[0] { for y in 0..brick[1] { for x in 0..brick[2] {
                    let p = [at[0] * brick[0] + z, at[1] * brick[1] + y, at[2] * brick[2] + x];
                    if (0..3).all(|a| p[a] < shape[a]) {
                        let o = from.offset(c, [z, y, x]);
                        out[o..o + 2].copy_from_slice(&value(c, p).to_le_bytes());
                    }
                }}}}
                out
            };
            let patch = Patch { origin, size };
            let to = Boxed { channels, dims: size, item: 2 };
            let mut out = vec![0u8; to.len()];
            let pieces = grid.pieces(&patch);
            for piece in &pieces {
                place(&mut out, to, &brick_bytes(piece.brick), from, piece);
            }
            let inside: [(u64, u64); 3] = std::array::from_fn(|a| {
                let lo = (-origin[a]).clamp(0, size[a] as i64) as u64;
                let hi = (shape[a] as i64 - origin[a]).clamp(0, size[a] as i64) as u64;
                (lo, hi)
            });
            let overlaps = inside.iter().all(|(lo, hi)| lo < hi);
            if edge && overlaps {
                pad_edges(&mut out, to, inside);
            }
            for c in 0..channels { for z in 0..size[0] { for y in 0..size[1] { for x in 0..size[2] {
                let p = [origin[0] + z as i64, origin[1] + y as i64, origin[2] + x as i64];
                let want = match at(shape, p, edge && overlaps) { Some(v) => value(c, v), None => 0 };
                let o = to.offset(c, [z, y, x]);
                prop_assert_eq!(u16::from_le_bytes([out[o], out[o + 1]]), want, "voxel {:?} channel {}", p, c);
            }}}}
        }
    }
}
