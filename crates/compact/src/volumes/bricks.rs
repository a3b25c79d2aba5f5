//! Cutting a volume's field into bricks: pure copies, every size checked by the caller.

use voxlake_plan::patch::BrickGrid;

/// A field of a volume as given: `channels` (1 without) of `grid.shape()` voxels of `item`
/// bytes, C order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) channels: u64,
    pub(crate) item: u64,
}

/// The brick at `at` of `field` over `grid` of bricks `brick`: `channels × brick` voxels, C
/// order, zeros past the volume's edge (every brick of a table is the same size).
pub(crate) fn cut(field: Field<'_>, grid: &BrickGrid, brick: [u64; 3], at: [u64; 3]) -> Vec<u8> {
    let shape = grid.shape();
    let valid = grid.brick_shape(at);
    let item = field.item as usize;
    let out_len = (field.channels * brick.iter().product::<u64>() * field.item) as usize;
    let mut out = vec![0u8; out_len];
    let row = valid[2] as usize * item;
    for c in 0..field.channels {
        for z in 0..valid[0] {
            for y in 0..valid[1] {
                let (vz, vy) = (at[0] * brick[0] + z, at[1] * brick[1] + y);
                let from = (((c * shape[0] + vz) * shape[1] + vy) * shape[2] + at[2] * brick[2])
                    as usize
                    * item;
                let to = (((c * brick[0] + z) * brick[1] + y) * brick[2]) as usize * item;
                out[to..to + row].copy_from_slice(&field.bytes[from..from + row]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every voxel of the volume is in exactly one brick, at its place; the rest is zeros.
        #[test]
        fn bricks_hold_every_voxel_once(
            shape in prop::array::uniform3(1u64..12),
            brick in prop::array::uniform3(1u64..6),
            channels in 1u64..3,
        ) {
            let grid = BrickGrid::new(shape, brick).unwrap();
            let n = (channels * shape.iter().product::<u64>()) as usize;
            // Values 1.. as u16: 0 is padding.
            let values: Vec<u8> = (1..=n as u16).flat_map(u16::to_le_bytes).collect();
            let field = Field { bytes: &values, channels, item: 2 };
            let mut seen = vec![0u32; n];
            let counts = grid.counts();
            for bz in 0..counts[0] { for by in 0..counts[1] { for bx in 0..counts[2] {
                let at = [bz, by, bx];
                let out = cut(field, &grid, brick, at);
                prop_assert_eq!(out.len() as u64, channels * brick.iter().product::<u64>() * 2);
                for (i, v) in out.chunks_exact(2).enumerate() {
                    let v = u16::from_le_bytes([v[0], v[1]]) as usize;
                    let i = i as u64;
                    let (x, y, z, c) = (i % brick[2], i / brick[2] % brick[1],
                        i / brick[2] / brick[1] % brick[0], i / brick[2] / brick[1] / brick[0]);
                    let p = [at[0] * brick[0] + z, at[1] * brick[1] + y, at[2] * brick[2] + x];
                    if (0..3).all(|a| p[a] < shape[a]) {
                        let want = ((c * shape[0] + p[0]) * shape[1] + p[1]) * shape[2] + p[2];
                        prop_assert_eq!(v, want as usize + 1);
                        seen[want as usize] += 1;
                    } else {
                        prop_assert_eq!(v, 0);
                    }
                }
            }}}
            prop_assert!(seen.iter().all(|&s| s == 1));
        }
    }
}
