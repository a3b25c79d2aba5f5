//! A deterministic synthetic dataset of the reference shape, for the demo, tests and benches.
//!
//! Each cube (x, y, z, channel) is a sum of a few smooth separable waves whose channels are
//! correlated, plus noise. Label 1 cubes also carry a localized Gaussian anomaly of random
//! position, strongest in the first channels: a 3D CNN can learn to find it, a per-cube mean
//! cannot tell it from the background waves reliably. With masks ([`generate_with`]), each cube
//! comes with its voxel mask: the voxels where the anomaly's envelope is at least half its peak
//! (none in label 0 cubes), a segmentation target that follows from the values. The same seed
//! gives the same bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use voxlake_format::DType;
use voxlake_format::npy::{EncodeOptions, encode};
use voxlake_plan::SeededRng as Rng;

/// The reference cube shape: 30 × 30 × 10 voxels × 10 channels.
pub const REFERENCE_SHAPE: [usize; 4] = [30, 30, 10, 10];

/// The voxel grid of a cube's mask: the reference shape without its channels.
pub const MASK_SHAPE: [usize; 3] = [30, 30, 10];

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct SynthDataset {
    /// The folder holding the `.npy` files (the source prefix for conversion): the cubes, or
    /// with masks the folders `x/` (cubes) and `mask/` (their masks).
    pub cubes: PathBuf,
    /// The labels CSV (`file,label`).
    pub labels: PathBuf,
    /// Number of cubes.
    pub count: usize,
    /// Number of label-1 cubes.
    pub positives: usize,
}

/// Approximately standard normal (sum of four uniforms: cheap and smooth enough for noise).
fn normal(rng: &mut Rng) -> f32 {
    let s: f32 = (0..4).map(|_| rng.uniform()).sum();
    (s - 2.0) * 1.732_050_8
}

/// The label and values (C order, f32) of cube `index` of the dataset `seed`, shape
/// [`REFERENCE_SHAPE`].
pub fn cube(seed: u64, index: u64) -> (i64, Vec<f32>) {
    let (label, values, _) = cube_and_mask(seed, index);
    (label, values)
}

/// [`cube`] and its voxel mask (shape [`MASK_SHAPE`], C order, 0 or 1): the voxels where the
/// anomaly's envelope is at least half its peak.
pub fn cube_and_mask(seed: u64, index: u64) -> (i64, Vec<f32>, Vec<u8>) {
    let [nx, ny, nz, nc] = REFERENCE_SHAPE;
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93));
    let wave = |rng: &mut Rng, n: usize| -> Vec<f32> {
        let cycles = 0.3 + 1.5 * rng.uniform();
        let phase = std::f32::consts::TAU * rng.uniform();
        (0..n)
            .map(|i| (std::f32::consts::TAU * cycles * i as f32 / n as f32 + phase).sin())
            .collect()
    };
    let mut values = vec![0f32; nx * ny * nz * nc];
    for _ in 0..3 {
        let amplitude = normal(&mut rng);
        let (u, v, w) = (wave(&mut rng, nx), wave(&mut rng, ny), wave(&mut rng, nz));
        let mix: Vec<f32> = (0..nc)
            .map(|_| amplitude * (0.6 + 0.4 * normal(&mut rng)))
            .collect();
        add_separable(&mut values, &u, &v, &w, &mix);
    }
    let label = i64::from(rng.uniform() < 0.5);
    let mut mask = vec![0u8; nx * ny * nz];
    if label == 1 {
        let bump = |rng: &mut Rng, n: usize, sigma: f32| -> Vec<f32> {
            let centre = 3.0 + rng.uniform() * (n as f32 - 6.0);
            (0..n)
                .map(|i| (-(i as f32 - centre).powi(2) / (2.0 * sigma * sigma)).exp())
                .collect()
        };
        let (u, v, w) = (
            bump(&mut rng, nx, 2.5),
            bump(&mut rng, ny, 2.5),
            bump(&mut rng, nz, 1.5),
        );
        let sign = if rng.uniform() < 0.5 { -1.0 } else { 1.0 };
        let mix: Vec<f32> = (0..nc)
            .map(|c| sign * 2.5 * (1.0 - c as f32 / nc as f32))
            .collect();
        add_separable(&mut values, &u, &v, &w, &mix);
        let mut i = 0;
        for &ux in &u {
            for &vy in &v {
                for &wz in &w {
                    mask[i] = u8::from(ux * vy * wz >= 0.5);
                    i += 1;
                }
            }
        }
    }
    for v in &mut values {
        *v += 0.3 * normal(&mut rng);
    }
    (label, values, mask)
}

fn add_separable(values: &mut [f32], u: &[f32], v: &[f32], w: &[f32], mix: &[f32]) {
    let mut i = 0;
    for &ux in u {
        for &vy in v {
            let uv = ux * vy;
            for &wz in w {
                let uvw = uv * wz;
                for &m in mix {
                    values[i] += uvw * m;
                    i += 1;
                }
            }
        }
    }
}

/// The file name of cube `index`.
pub fn cube_name(index: usize) -> String {
    format!("cube_{index:06}.npy")
}

/// Writes `count` cubes as `.npy` files (float32, reference shape) to `dir/cubes/` and their
/// labels to `dir/labels.csv`, using all cores. Existing files are overwritten.
pub fn generate(dir: &Path, count: usize, seed: u64) -> std::io::Result<SynthDataset> {
    generate_with(dir, count, seed, false)
}

/// [`generate`], with `masks` each cube's voxel mask too (u8, [`MASK_SHAPE`]): the cubes go to
/// `dir/fields/x/`, their masks to `dir/fields/mask/`, under the same names, a source of two
/// fields (`compact convert dir/fields TABLE --fields x,mask`).
pub fn generate_with(
    dir: &Path,
    count: usize,
    seed: u64,
    masks: bool,
) -> std::io::Result<SynthDataset> {
    let (cubes, x_dir, mask_dir) = if masks {
        let fields = dir.join("fields");
        (fields.clone(), fields.join("x"), Some(fields.join("mask")))
    } else {
        let cubes = dir.join("cubes");
        (cubes.clone(), cubes, None)
    };
    std::fs::create_dir_all(&x_dir)?;
    if let Some(m) = &mask_dir {
        std::fs::create_dir_all(m)?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut labels = vec![0i64; count];
    std::thread::scope(|scope| -> std::io::Result<()> {
        let chunk = count.div_ceil(threads).max(1);
        let handles: Vec<_> = labels
            .chunks_mut(chunk)
            .enumerate()
            .map(|(t, out)| {
                let (x_dir, mask_dir) = (&x_dir, &mask_dir);
                scope.spawn(move || -> std::io::Result<()> {
                    for (j, label) in out.iter_mut().enumerate() {
                        let index = t * chunk + j;
                        let (l, values, mask) = cube_and_mask(seed, index as u64);
                        *label = l;
                        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                        let file = encode(
                            DType::F32,
                            &REFERENCE_SHAPE,
                            &bytes,
                            EncodeOptions::default(),
                        );
                        std::fs::write(x_dir.join(cube_name(index)), file)?;
                        if let Some(mask_dir) = mask_dir {
                            let file =
                                encode(DType::U8, &MASK_SHAPE, &mask, EncodeOptions::default());
                            std::fs::write(mask_dir.join(cube_name(index)), file)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| std::io::Error::other("a generator thread panicked"))??;
        }
        Ok(())
    })?;
    let labels_path = dir.join("labels.csv");
    let mut csv = std::io::BufWriter::new(std::fs::File::create(&labels_path)?);
    writeln!(csv, "file,label")?;
    for (i, l) in labels.iter().enumerate() {
        writeln!(csv, "{},{l}", cube_name(i))?;
    }
    csv.flush()?;
    Ok(SynthDataset {
        cubes,
        labels: labels_path,
        count,
        positives: labels.iter().filter(|&&l| l == 1).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubes_are_deterministic_smooth_and_labelled() {
        let (l1, a) = cube(7, 3);
        let (l2, b) = cube(7, 3);
        assert_eq!((l1, &a), (l2, &b));
        assert_ne!(cube(7, 4).1, a);
        // Spatially correlated: neighbours along x are far closer than random pairs.
        let [_, ny, nz, nc] = REFERENCE_SHAPE;
        let stride = ny * nz * nc;
        let n = a.len() - stride;
        let neighbour: f32 = (0..n).map(|i| (a[i] - a[i + stride]).powi(2)).sum::<f32>() / n as f32;
        let variance = {
            let mean = a.iter().sum::<f32>() / a.len() as f32;
            a.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / a.len() as f32
        };
        assert!(neighbour < variance, "{neighbour} vs {variance}");
        let positives = (0..200).filter(|&i| cube(1, i).0 == 1).count();
        assert!((60..140).contains(&positives), "{positives}");
    }

    #[test]
    fn masks_mark_the_anomaly_of_label_one_cubes() {
        let mut sizes = Vec::new();
        for i in 0..40 {
            let (label, values, mask) = cube_and_mask(5, i);
            assert_eq!(mask.len(), MASK_SHAPE.iter().product::<usize>());
            let inside = mask.iter().filter(|&&m| m == 1).count();
            if label == 0 {
                assert_eq!(inside, 0, "no anomaly, no mask");
                continue;
            }
            assert!(inside > 10, "cube {i}: {inside} voxels");
            sizes.push(inside);
            // The anomaly shows in the first channel: its voxels stand out from the rest.
            let mean = |inside: bool| {
                let picked: Vec<f32> = (0..mask.len())
                    .filter(|&v| (mask[v] == 1) == inside)
                    .map(|v| values[v * 10].abs())
                    .collect();
                picked.iter().sum::<f32>() / picked.len() as f32
            };
            assert!(mean(true) > mean(false), "cube {i}");
        }
        assert!(!sizes.is_empty());
        assert_eq!(
            cube_and_mask(5, 3).1,
            cube(5, 3).1,
            "the same cube with or without"
        );
    }
}
