//! A label map's classes, counted once at write time: each class's voxels and a uniform
//! sample of their coordinates (what a label-balanced patch sampler centres on), drawn as a
//! function of the volume's id so a re-run writes the same.

use std::collections::{BTreeMap, HashSet};

use voxlake_format::DType;
use voxlake_format::volume::{ClassVoxels, MAX_CLASSES};
use voxlake_plan::SeededRng;

/// Per class: voxels seen so far, and the ranks (ascending) of those to keep.
#[derive(Default)]
struct Tally {
    count: u64,
    keep: Vec<u64>,
    next: usize,
    coords: Vec<[u64; 3]>,
}

/// The classes of a label map of `shape` voxels (`bytes`: its `dtype` values, C order), each
/// with at most `max_coords` coordinates drawn uniformly without replacement (`seed`: the
/// volume's). An error says why it is not a label map.
pub(crate) fn classes(
    bytes: &[u8],
    dtype: DType,
    shape: [u64; 3],
    max_coords: usize,
    seed: u64,
) -> Result<Vec<ClassVoxels>, String> {
    let mut tallies: BTreeMap<i64, Tally> = BTreeMap::new();
    // Labels of one byte are counted in a table; others in the map.
    let mut small = [0u64; 256];
    let counted = for_each_value(bytes, dtype, |_, v| {
        match u8::try_from(v) {
            Ok(b) => small[b as usize] += 1,
            Err(_) => {
                if tallies.len() > MAX_CLASSES && !tallies.contains_key(&v) {
                    return Err(());
                }
                tallies.entry(v).or_default().count += 1;
            }
        }
        Ok(())
    })?;
    if counted.is_err() {
        return Err(format!("more than {MAX_CLASSES} classes: not a label map"));
    }
    for (b, &count) in small.iter().enumerate() {
        if count > 0 {
            tallies.entry(b as i64).or_default().count = count;
        }
    }
    if tallies.len() > MAX_CLASSES {
        return Err(format!(
            "{} classes, more than {MAX_CLASSES}: not a label map",
            tallies.len()
        ));
    }
    let mut tallies: Vec<(i64, Tally)> = tallies.into_iter().collect();
    for (class, tally) in tallies.iter_mut() {
        tally.keep = ranks(tally.count, max_coords, &[seed, *class as u64]);
        tally.coords.reserve(tally.keep.len());
        tally.count = 0;
    }
    // Each voxel's tally found by a table for one-byte classes (the map's lookup a voxel
    // costs more than the rest of the pass).
    let mut small_slot = [usize::MAX; 256];
    let mut big_slot: BTreeMap<i64, usize> = BTreeMap::new();
    for (slot, (class, _)) in tallies.iter().enumerate() {
        match u8::try_from(*class) {
            Ok(b) => small_slot[b as usize] = slot,
            Err(_) => {
                big_slot.insert(*class, slot);
            }
        }
    }
    let plane = shape[1] * shape[2];
    let Ok(()) = for_each_value(bytes, dtype, |i, v| {
        let slot = match u8::try_from(v) {
            Ok(b) => Some(small_slot[b as usize]).filter(|&s| s != usize::MAX),
            Err(_) => big_slot.get(&v).copied(),
        };
        if let Some((_, t)) = slot.and_then(|s| tallies.get_mut(s)) {
            if t.keep.get(t.next) == Some(&t.count) {
                let i = i as u64;
                t.coords
                    .push([i / plane, i / shape[2] % shape[1], i % shape[2]]);
                t.next += 1;
            }
            t.count += 1;
        }
        Ok::<(), std::convert::Infallible>(())
    })?;
    Ok(tallies
        .into_iter()
        .map(|(class, t)| ClassVoxels {
            class,
            count: t.count,
            coords: t.coords,
        })
        .collect())
}

/// `min(n, k)` distinct ranks of `0..n`, ascending, uniform (Floyd's sampling).
fn ranks(n: u64, k: usize, stream: &[u64]) -> Vec<u64> {
    if n <= k as u64 {
        return (0..n).collect();
    }
    let mut rng = SeededRng::for_stream(stream);
    let mut chosen = HashSet::with_capacity(k);
    for j in n - k as u64..n {
        let t = ((u128::from(rng.next_u64()) * u128::from(j + 1)) >> 64) as u64;
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut ranks: Vec<u64> = chosen.into_iter().collect();
    ranks.sort_unstable();
    ranks
}

/// Calls `f(index, value)` for each value of `bytes` (little-endian `dtype`); a value no
/// `i64` holds (a `u64` above it) or a float type is an error.
fn for_each_value<E>(
    bytes: &[u8],
    dtype: DType,
    mut f: impl FnMut(usize, i64) -> Result<(), E>,
) -> Result<Result<(), E>, String> {
    macro_rules! each {
        ($t:ty) => {{
            const N: usize = std::mem::size_of::<$t>();
            for (i, v) in bytes.chunks_exact(N).enumerate() {
                let mut a = [0u8; N];
                a.copy_from_slice(v);
                let v = i64::try_from(<$t>::from_le_bytes(a))
                    .map_err(|_| format!("voxel {i} holds a class above {}", i64::MAX))?;
                if let Err(e) = f(i, v) {
                    return Ok(Err(e));
                }
            }
        }};
    }
    match dtype {
        DType::Bool | DType::U8 => each!(u8),
        DType::I8 => each!(i8),
        DType::I16 => each!(i16),
        DType::U16 => each!(u16),
        DType::I32 => each!(i32),
        DType::U32 => each!(u32),
        DType::I64 => each!(i64),
        DType::U64 => each!(u64),
        other => return Err(format!("{other} values are not classes")),
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_rare_class_is_counted_and_sampled_uniformly() {
        // 40³ voxels, class 1 on the z = 0 plane (1,600 voxels), class 7 on one voxel.
        let shape = [40u64, 40, 40];
        let mut labels = vec![0u8; 64_000];
        labels[..1600].fill(1);
        labels[63_999] = 7;
        let classes = classes(&labels, DType::U8, shape, 100, 5).unwrap();
        let counts: Vec<(i64, u64, usize)> = classes
            .iter()
            .map(|c| (c.class, c.count, c.coords.len()))
            .collect();
        assert_eq!(counts, [(0, 62_399, 100), (1, 1600, 100), (7, 1, 1)]);
        assert!(classes[1].coords.iter().all(|p| p[0] == 0));
        assert_eq!(classes[2].coords, [[39, 39, 39]]);
        // Spread over the plane, not its first rows: the mean row is near the middle.
        let mean_y = classes[1].coords.iter().map(|p| p[1] as f64).sum::<f64>() / 100.0;
        assert!((12.0..28.0).contains(&mean_y), "{mean_y}");
        // A function of the seed.
        assert_eq!(
            super::classes(&labels, DType::U8, shape, 100, 5).unwrap(),
            classes
        );
        assert_ne!(
            super::classes(&labels, DType::U8, shape, 100, 6).unwrap(),
            classes
        );
    }

    #[test]
    fn what_is_not_a_label_map_is_refused() {
        let values: Vec<u8> = (0..300i16).flat_map(i16::to_le_bytes).collect();
        let e = classes(&values, DType::I16, [1, 1, 300], 10, 0).unwrap_err();
        assert!(
            e.contains("more than 256") && e.contains("not a label map"),
            "{e}"
        );
        let e = classes(&[0; 8], DType::F32, [1, 1, 2], 10, 0).unwrap_err();
        assert!(e.contains("f32 values are not classes"), "{e}");
        let big = u64::MAX.to_le_bytes();
        let e = classes(&big, DType::U64, [1, 1, 1], 10, 0).unwrap_err();
        assert!(e.contains("voxel 0 holds a class above"), "{e}");
        // Negative and wide classes are classes.
        let values: Vec<u8> = [-5i32, 70_000, -5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let got = classes(&values, DType::I32, [1, 1, 3], 10, 0).unwrap();
        assert_eq!(
            got.iter().map(|c| (c.class, c.count)).collect::<Vec<_>>(),
            [(-5, 2), (70_000, 1)]
        );
        assert_eq!(got[0].coords, [[0, 0, 0], [0, 0, 2]]);
    }

    proptest! {
        #[test]
        fn ranks_are_distinct_ascending_and_below_n(n in 0u64..5000, k in 0usize..300, s in any::<u64>()) {
            let r = ranks(n, k, &[s]);
            prop_assert_eq!(r.len() as u64, n.min(k as u64));
            prop_assert!(r.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(r.iter().all(|&x| x < n));
        }
    }
}
