//! Patches of volumes larger than a sample, as pure geometry: a volume stored as bricks on a
//! regular grid ([`BrickGrid`]), the bricks a patch overlaps and the box each gives it
//! ([`BrickGrid::pieces`]: what a read fetches and a copy places), where a patch sits for a
//! centre and an edge policy ([`Pad`], [`origin_for_centre`]), the overlapping grid of patches
//! that covers a volume for inference ([`grid_origins`]), and a patch's draws as a function of
//! (seed, epoch, volume, k) alone ([`PatchDraws`]), so a resume on any world size draws the
//! same patches; an epoch's draws in order, volumes dealt to ranks ([`PatchOrder`]).
//!
//! ```
//! use voxlake_plan::patch::{BrickGrid, Patch};
//!
//! // A 100³ volume in 32³ bricks (4 a side, the last 4 voxels thick).
//! let grid = BrickGrid::new([100, 100, 100], [32, 32, 32]).unwrap();
//! assert_eq!(grid.counts(), [4, 4, 4]);
//! // A 64³ patch at (20, 0, 90): bricks 0..=2 along x, 0..=1 along y, 2..=3 along z.
//! let pieces = grid.pieces(&Patch { origin: [20, 0, 90], size: [64, 64, 64] });
//! assert_eq!(pieces.len(), 3 * 2 * 2);
//! // Along z only 10 voxels lie in the volume (90..100): the rest is padding.
//! let inside: u64 = pieces.iter().map(|p| p.len.iter().product::<u64>()).sum();
//! assert_eq!(inside, 64 * 64 * 10);
//! ```

use crate::error::SamplingError;
use crate::plan::SeededRng;

mod epoch;
mod sampling;

pub use epoch::{Draw, PatchOrder};
pub use sampling::{DEFAULT_PATCH_WINDOW, PatchSampling};

/// Voxels along the three spatial axes (z, y, x: C order, the last the fastest).
pub type Dims = [u64; 3];

/// How a patch that reaches past a volume's edge is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pad {
    /// Zeros past the edge.
    Zero,
    /// The nearest voxel of the volume (the edge repeated).
    Edge,
    /// No padding: the patch is moved inside the volume (a patch larger than the volume is
    /// an error).
    None,
}

/// A volume's bricks: the grid `brick` cuts `shape` into, the last brick of an axis thinner
/// where the brick does not divide the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrickGrid {
    shape: Dims,
    brick: Dims,
}

/// A patch: its size and where its first voxel sits in the volume's coordinates (below 0 or
/// past the edge where it is padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Patch {
    /// The volume's coordinates of the patch's voxel (0, 0, 0).
    pub origin: [i64; 3],
    /// Voxels along each axis.
    pub size: Dims,
}

/// One brick's part of a patch: the box of `len` voxels at `from` in the brick goes to `to`
/// in the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The brick's position in the grid.
    pub brick: Dims,
    /// The box's first voxel in the brick.
    pub from: Dims,
    /// The box's first voxel in the patch.
    pub to: Dims,
    /// The box's voxels along each axis.
    pub len: Dims,
}

impl BrickGrid {
    /// The grid of `brick`s over a volume of `shape`; an empty axis of either is an error.
    pub fn new(shape: Dims, brick: Dims) -> Result<BrickGrid, SamplingError> {
        if shape.contains(&0) || brick.contains(&0) {
            return Err(SamplingError::new(
                "brick",
                format!("a volume of {shape:?} in bricks of {brick:?}: every axis needs a voxel"),
            ));
        }
        Ok(BrickGrid { shape, brick })
    }

    /// The volume's voxels along each axis.
    pub fn shape(&self) -> Dims {
        self.shape
    }

    /// Bricks along each axis.
    pub fn counts(&self) -> Dims {
        std::array::from_fn(|a| self.shape[a].div_ceil(self.brick[a]))
    }

    /// Bricks in all.
    pub fn len(&self) -> u64 {
        self.counts().iter().product()
    }

    /// Whether the grid has no brick (never: every axis has a voxel).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The brick at `at`'s voxels along each axis (thinner at the far edges).
    pub fn brick_shape(&self, at: Dims) -> Dims {
        std::array::from_fn(|a| {
            let start = at[a] * self.brick[a];
            self.brick[a].min(self.shape[a].saturating_sub(start))
        })
    }

    /// The brick at `at`'s number, in C order (what a table's brick column holds).
    pub fn index(&self, at: Dims) -> u64 {
        let c = self.counts();
        (at[0] * c[1] + at[1]) * c[2] + at[2]
    }

    /// The bricks `patch` overlaps, each once, in C order, with the box each gives: together
    /// they cover the patch's voxels that lie in the volume exactly once; its other voxels are
    /// padding.
    pub fn pieces(&self, patch: &Patch) -> Vec<Piece> {
        // Per axis: the volume's voxels the patch covers, then the bricks over them.
        let mut spans: [Vec<(u64, u64, u64, u64)>; 3] = Default::default();
        for (a, span) in spans.iter_mut().enumerate() {
            let lo = patch.origin[a].max(0) as u64;
            let end = patch.origin[a].saturating_add(patch.size[a] as i64);
            let hi = (end.max(0) as u64).min(self.shape[a]);
            if lo >= hi {
                return Vec::new();
            }
            for b in lo / self.brick[a]..hi.div_ceil(self.brick[a]) {
                let start = (b * self.brick[a]).max(lo);
                let stop = ((b + 1) * self.brick[a]).min(hi);
                let to = (start as i64 - patch.origin[a]) as u64;
                span.push((b, start - b * self.brick[a], to, stop - start));
            }
        }
        let mut pieces = Vec::with_capacity(spans.iter().map(Vec::len).product());
        for z in &spans[0] {
            for y in &spans[1] {
                for x in &spans[2] {
                    pieces.push(Piece {
                        brick: [z.0, y.0, x.0],
                        from: [z.1, y.1, x.1],
                        to: [z.2, y.2, x.2],
                        len: [z.3, y.3, x.3],
                    });
                }
            }
        }
        pieces
    }
}

/// The origin of a patch of `size` centred on voxel `centre` of a volume of `shape`: the
/// centre at the patch's middle (`size / 2`), padded where it reaches past an edge, or, with
/// [`Pad::None`], moved inside the volume (an error where the patch is larger than it).
pub fn origin_for_centre(
    shape: Dims,
    size: Dims,
    centre: Dims,
    pad: Pad,
) -> Result<[i64; 3], SamplingError> {
    let mut origin = [0i64; 3];
    for a in 0..3 {
        let o = centre[a] as i64 - (size[a] / 2) as i64;
        origin[a] = match pad {
            Pad::None if size[a] > shape[a] => {
                return Err(SamplingError::new(
                    "pad",
                    format!(
                        "a patch of {size:?} is larger than the volume of {shape:?}: pad=\"none\" keeps patches inside (pad with \"zero\" or \"edge\")"
                    ),
                ));
            }
            Pad::None => o.clamp(0, (shape[a] - size[a]) as i64),
            Pad::Zero | Pad::Edge => o,
        };
    }
    Ok(origin)
}

/// The origins of the patches of `size`, `overlap` voxels apart from their neighbours, that
/// cover a volume of `shape` (for inference and validation), in C order: along each axis from
/// 0 in steps of `size - overlap`, the last placed at the far edge; a patch larger than the
/// volume along an axis sits at 0 there (padded).
pub fn grid_origins(shape: Dims, size: Dims, overlap: Dims) -> Result<Vec<Dims>, SamplingError> {
    let mut axes: [Vec<u64>; 3] = Default::default();
    for (a, along) in axes.iter_mut().enumerate() {
        if size[a] == 0 || overlap[a] >= size[a] {
            return Err(SamplingError::new(
                "overlap",
                format!(
                    "an overlap of {overlap:?} for patches of {size:?}: each must be below the patch's size"
                ),
            ));
        }
        let step = size[a] - overlap[a];
        let last = shape[a].saturating_sub(size[a]);
        let mut o = 0;
        while o < last {
            along.push(o);
            o += step;
        }
        along.push(last);
    }
    let mut origins = Vec::with_capacity(axes.iter().map(Vec::len).product());
    for &z in &axes[0] {
        for &y in &axes[1] {
            for &x in &axes[2] {
                origins.push([z, y, x]);
            }
        }
    }
    Ok(origins)
}

/// A stream name for patch draws (apart from the plan's others).
const PATCHES: u64 = 0x0070_6174_6368_6573;

/// The draws of patch centres: each a function of (seed, epoch, volume, k) alone, where `k`
/// numbers the volume's patches in an epoch, so a resume (mid-epoch, on another world size)
/// draws the same patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchDraws {
    seed: u64,
}

impl PatchDraws {
    /// Draws seeded by `seed`.
    pub fn new(seed: u64) -> PatchDraws {
        PatchDraws { seed }
    }

    fn rng(&self, epoch: u64, volume: u64, k: u64) -> SeededRng {
        SeededRng::for_stream(&[self.seed, epoch, PATCHES, volume, k])
    }

    /// A centre drawn uniformly from a volume of `shape`.
    pub fn uniform(&self, epoch: u64, volume: u64, k: u64, shape: Dims) -> Dims {
        let mut rng = self.rng(epoch, volume, k);
        std::array::from_fn(|a| rng.next_u64() % shape[a].max(1))
    }

    /// Which of `weights` (a class's probability, relative) the draw takes: `None` where no
    /// weight is positive.
    pub fn class(&self, epoch: u64, volume: u64, k: u64, weights: &[f64]) -> Option<usize> {
        let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
        if !(total > 0.0 && total.is_finite()) {
            return None;
        }
        let mut rng = self.rng(epoch, volume, k);
        // 53 bits of the draw: a uniform double in [0, total).
        let mut at = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut last = None;
        for (i, w) in weights.iter().enumerate().filter(|(_, w)| **w > 0.0) {
            if at < *w {
                return Some(i);
            }
            at -= w;
            last = Some(i);
        }
        last
    }

    /// The centre of patch `k` of a volume of `shape`: uniform over its voxels without
    /// `weights`; else a class drawn by its weight (`weights`: class and relative
    /// probability) among those the volume holds (`classes`: each class and some of its
    /// voxels), then one of that class's voxels. A volume holding none of the weighted
    /// classes is drawn uniformly.
    pub fn centre(
        &self,
        epoch: u64,
        volume: u64,
        k: u64,
        shape: Dims,
        weights: &[(i64, f64)],
        classes: &[(i64, &[Dims])],
    ) -> Dims {
        let of: Vec<f64> = classes
            .iter()
            .map(|(class, voxels)| match voxels.is_empty() {
                true => 0.0,
                false => weights
                    .iter()
                    .find(|(c, _)| c == class)
                    .map_or(0.0, |(_, w)| *w),
            })
            .collect();
        let Some(i) = self.class(epoch, volume, k, &of) else {
            return self.uniform(epoch, volume, k, shape);
        };
        let voxels = classes[i].1;
        match self.pick(epoch, volume, k, voxels.len()) {
            Some(j) => voxels[j],
            None => self.uniform(epoch, volume, k, shape),
        }
    }

    /// Which of `n` things (a class's kept voxel coordinates) the draw takes, independent of
    /// [`class`](Self::class)'s draw: `None` where `n` is 0.
    pub fn pick(&self, epoch: u64, volume: u64, k: u64, n: usize) -> Option<usize> {
        let mut rng = self.rng(epoch, volume, k);
        let _class = rng.next_u64();
        (n > 0).then(|| rng.below(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn centres_follow_the_class_weights_among_the_classes_a_volume_holds() {
        let draws = PatchDraws::new(5);
        let rare: Vec<Dims> = (0..10).map(|i| [i, 0, 0]).collect();
        let common: Vec<Dims> = (0..100).map(|i| [i, 9, 9]).collect();
        let classes = [(0i64, common.as_slice()), (1, rare.as_slice())];
        let weights = [(0i64, 1.0), (1, 1.0)];
        let centres: Vec<Dims> = (0..10_000)
            .map(|k| draws.centre(0, 3, k, [100, 10, 10], &weights, &classes))
            .collect();
        let on_rare = centres.iter().filter(|c| rare.contains(c)).count();
        assert!((4_800..5_200).contains(&on_rare), "{on_rare}");
        assert!(
            centres
                .iter()
                .all(|c| rare.contains(c) || common.contains(c))
        );
        // Only class 1 asked, or a class the volume lacks: uniform for the latter.
        let only = [(1i64, 1.0)];
        assert!((0..50).all(|k| rare.contains(&draws.centre(
            0,
            3,
            k,
            [100, 10, 10],
            &only,
            &classes
        ))));
        let absent = [(7i64, 1.0)];
        let c = draws.centre(0, 3, 1, [100, 10, 10], &absent, &classes);
        assert_eq!(c, draws.uniform(0, 3, 1, [100, 10, 10]));
        // A function of (seed, epoch, volume, k).
        assert_eq!(
            draws.centre(2, 3, 4, [100, 10, 10], &weights, &classes),
            draws.centre(2, 3, 4, [100, 10, 10], &weights, &classes)
        );
    }

    fn dims(max: u64) -> impl Strategy<Value = Dims> {
        [1..=max, 1..=max, 1..=max]
    }

    /// The numpy crop of `volume` (C order, `shape`) at `patch`, padded by `pad`; the value
    /// of voxel `v` is its index + 1 (0 is the zero padding).
    fn crop(shape: Dims, patch: &Patch, pad: Pad) -> Vec<u64> {
        let mut out = Vec::new();
        for z in 0..patch.size[0] {
            for y in 0..patch.size[1] {
                for x in 0..patch.size[2] {
                    let at = [z, y, x];
                    let v: [i64; 3] = std::array::from_fn(|a| patch.origin[a] + at[a] as i64);
                    let inside = (0..3).all(|a| v[a] >= 0 && (v[a] as u64) < shape[a]);
                    let value = match (inside, pad) {
                        (true, _) | (false, Pad::Edge) => {
                            let c: Dims =
                                std::array::from_fn(|a| v[a].clamp(0, shape[a] as i64 - 1) as u64);
                            (c[0] * shape[1] + c[1]) * shape[2] + c[2] + 1
                        }
                        _ => 0,
                    };
                    out.push(value);
                }
            }
        }
        out
    }

    /// The patch assembled from the grid's bricks by its pieces (zeros elsewhere).
    fn from_bricks(grid: &BrickGrid, patch: &Patch) -> Vec<u64> {
        let [pz, py, px] = patch.size;
        let mut out = vec![0; (pz * py * px) as usize];
        let shape = grid.shape();
        for p in grid.pieces(patch) {
            let b = grid.brick_shape(p.brick);
            for z in 0..p.len[0] {
                for y in 0..p.len[1] {
                    for x in 0..p.len[2] {
                        // The brick's voxel, and the volume's value there.
                        let in_brick = [p.from[0] + z, p.from[1] + y, p.from[2] + x];
                        assert!((0..3).all(|a| in_brick[a] < b[a]), "{p:?} past its brick");
                        let v: Dims =
                            std::array::from_fn(|a| p.brick[a] * grid.brick[a] + in_brick[a]);
                        let to = [p.to[0] + z, p.to[1] + y, p.to[2] + x];
                        let i = ((to[0] * py + to[1]) * px + to[2]) as usize;
                        assert_eq!(out[i], 0, "voxel {to:?} of the patch written twice");
                        out[i] = (v[0] * shape[1] + v[1]) * shape[2] + v[2] + 1;
                    }
                }
            }
        }
        out
    }

    proptest! {
        /// A patch made of its pieces equals the crop of the volume at its origin, each voxel
        /// written once, each piece inside its brick; the padding is zeros.
        #[test]
        fn pieces_make_the_crop(
            shape in dims(12),
            brick in dims(5),
            size in dims(9),
            origin in [-6i64..14, -6i64..14, -6i64..14],
        ) {
            let grid = BrickGrid::new(shape, brick).unwrap();
            let patch = Patch { origin, size };
            prop_assert_eq!(from_bricks(&grid, &patch), crop(shape, &patch, Pad::Zero));
            let bricks: Vec<u64> = grid.pieces(&patch).iter().map(|p| grid.index(p.brick)).collect();
            let mut sorted = bricks.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(&sorted, &bricks, "each brick once, in C order");
        }

        /// A centre's patch holds the centre at `size / 2` (padded), or lies inside the volume
        /// (`Pad::None`), the centre still in it.
        #[test]
        fn a_centre_is_in_its_patch(shape in dims(20), size in dims(20), c in [0u64..20, 0u64..20, 0u64..20]) {
            let centre: Dims = std::array::from_fn(|a| c[a] % shape[a]);
            let padded = origin_for_centre(shape, size, centre, Pad::Zero).unwrap();
            for a in 0..3 {
                prop_assert_eq!(padded[a] + (size[a] / 2) as i64, centre[a] as i64);
            }
            match origin_for_centre(shape, size, centre, Pad::None) {
                Ok(inside) => for a in 0..3 {
                    prop_assert!(inside[a] >= 0 && inside[a] as u64 + size[a] <= shape[a]);
                    prop_assert!((inside[a]..inside[a] + size[a] as i64).contains(&(centre[a] as i64)));
                },
                Err(e) => {
                    prop_assert_eq!(e.option(), "pad");
                    prop_assert!((0..3).any(|a| size[a] > shape[a]));
                }
            }
        }

        /// The grid's patches cover every voxel, overlap their neighbours by at least the
        /// overlap asked, and lie inside the volume where they fit.
        #[test]
        fn the_grid_covers_every_voxel(shape in dims(30), size in dims(12), o in [0u64..12, 0u64..12, 0u64..12]) {
            let overlap: Dims = std::array::from_fn(|a| o[a] % size[a]);
            let origins = grid_origins(shape, size, overlap).unwrap();
            for a in 0..3 {
                let mut along: Vec<u64> = origins.iter().map(|o| o[a]).collect();
                along.sort_unstable();
                along.dedup();
                prop_assert_eq!(along[0], 0);
                for w in along.windows(2) {
                    prop_assert!(w[1] - w[0] <= size[a] - overlap[a]);
                }
                let last = *along.last().unwrap();
                prop_assert!(last + size[a] >= shape[a]);
                if size[a] <= shape[a] {
                    prop_assert_eq!(last + size[a], shape[a]);
                }
            }
            prop_assert!(grid_origins(shape, size, size).is_err());
        }

        /// Draws depend on (seed, epoch, volume, k) alone; a class is drawn in proportion to
        /// its weight (checked in aggregate below), never one of weight 0.
        #[test]
        fn draws_are_functions_of_their_key(seed in 0u64..100, e in 0u64..5, v in 0u64..50, k in 0u64..50, shape in dims(64)) {
            let d = PatchDraws::new(seed);
            prop_assert_eq!(d.uniform(e, v, k, shape), d.uniform(e, v, k, shape));
            let c = d.uniform(e, v, k, shape);
            prop_assert!((0..3).all(|a| c[a] < shape[a]));
            prop_assert_eq!(d.class(e, v, k, &[0.0, 2.0, 0.0]), Some(1));
            prop_assert_eq!(d.class(e, v, k, &[0.0, 0.0]), None);
            prop_assert!(d.pick(e, v, k, 7).unwrap() < 7);
        }
    }

    #[test]
    fn edge_padding_repeats_the_border() {
        // What the copy's edge fill must give: the nearest voxel of the volume.
        let patch = Patch {
            origin: [-1, 0, 2],
            size: [2, 1, 2],
        };
        assert_eq!(crop([2, 1, 3], &patch, Pad::Edge), vec![3, 3, 3, 3]);
    }

    #[test]
    fn a_balanced_draw_takes_each_class_half_the_time() {
        // Issue 62's target: 0.50 ± 0.02 of 10⁴ centres on foreground with weights 1:1.
        let d = PatchDraws::new(3);
        let fg = (0..10_000)
            .filter(|&k| d.class(0, 7, k, &[1.0, 1.0]) == Some(1))
            .count();
        assert!((4_800..=5_200).contains(&fg), "{fg}");
    }

    #[test]
    fn empty_axes_are_refused() {
        assert_eq!(
            BrickGrid::new([0, 4, 4], [2, 2, 2]).unwrap_err().option(),
            "brick"
        );
        assert_eq!(
            BrickGrid::new([4, 4, 4], [2, 0, 2]).unwrap_err().option(),
            "brick"
        );
    }
}
