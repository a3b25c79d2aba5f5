//! Bricked volumes (`Compactor::volume_writer`): volumes of several fields and shapes cut
//! into bricks, read back through a lookup by brick id and put together voxel for voxel; each
//! volume's info (shape, spacing, class counts and coordinates) checked against the voxels;
//! re-runs, shards and bad input.

use voxlake::compact::{CompactError, Compactor, Volume};
use voxlake::format::volume::{BrickSpec, VolumeField, VolumeInfo, brick_id};
use voxlake::format::{DType, Layout};
use voxlake::loader::Loader;
use voxlake::plan::plan::SeededRng;

const BRICK: [u64; 3] = [8, 8, 4];

fn spec() -> BrickSpec {
    BrickSpec::new(
        BRICK,
        vec![
            VolumeField::new("image", DType::F32).with_channels(2),
            VolumeField::new("mask", DType::U8),
        ],
    )
    .unwrap()
}

/// A volume of `shape`: the image's voxels numbered (channel 1 negated), the mask 0 but for a
/// rare class 2 near one corner and a few voxels of class 1.
fn volume(id: &str, shape: [u64; 3], seed: u64) -> (Volume, Vec<f32>, Vec<u8>) {
    let n = shape.iter().product::<u64>() as usize;
    let image: Vec<f32> = (0..2 * n)
        .map(|i| {
            if i < n {
                i as f32
            } else {
                -((i - n) as f32) - 0.5
            }
        })
        .collect();
    let mut rng = SeededRng::new(seed);
    let mut mask = vec![0u8; n];
    for _ in 0..n / 10 {
        mask[rng.below(n)] = 1;
    }
    mask[n - 3..].fill(2);
    let bytes: Vec<u8> = image.iter().flat_map(|v| v.to_le_bytes()).collect();
    let v = Volume::new(id, shape, vec![bytes.into(), mask.clone().into()])
        .with_label(Some(seed as i64))
        .with_spacing(Some([2.0, 0.5, 0.5]));
    (v, image, mask)
}

fn layout() -> Layout {
    Layout {
        row_group_rows: 5,
        target_file_bytes: 60_000,
        ..Layout::default()
    }
}

async fn write(table: &str, volumes: Vec<Volume>) -> Result<usize, CompactError> {
    let compactor = Compactor::new(table).with_layout(layout());
    let mut writer = compactor.volume_writer(spec()).await?;
    for v in volumes {
        writer.push(v).await?;
    }
    Ok(writer.finish().await?.rows)
}

/// Volume `id` put together from its bricks, read by id: (image, mask, info).
fn read_volume(table: &str, id: &str) -> (Vec<f32>, Vec<u8>, VolumeInfo) {
    let rows = Loader::builder(table).build_lookup().unwrap();
    // The info is in the last brick: find it from the bricks the table holds.
    let index = rows.ids().unwrap();
    let bricks = index
        .ids()
        .filter(|b| b.starts_with(&format!("{id}#")))
        .count() as u64;
    let ids: Vec<String> = (0..bricks).map(|b| brick_id(id, b)).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let batch = rows.take_ids(&refs).unwrap();
    let texts = batch.text("volume_info").unwrap();
    assert!(texts[..texts.len() - 1].iter().all(String::is_empty));
    let info = VolumeInfo::from_json(texts.last().unwrap(), &spec()).unwrap();
    assert!(batch.text("volume").unwrap().iter().all(|v| v == id));
    let shape = info.shape;
    let counts: Vec<u64> = (0..3).map(|a| shape[a].div_ceil(BRICK[a])).collect();
    assert_eq!(counts.iter().product::<u64>(), bricks);
    let n = shape.iter().product::<u64>() as usize;
    let (mut image, mut mask) = (vec![f32::NAN; 2 * n], vec![255u8; n]);
    let image_bytes = batch.field("image").unwrap().as_bytes().unwrap();
    let mask_bytes = batch.field("mask").unwrap().as_bytes().unwrap();
    let per = BRICK.iter().product::<u64>() as usize;
    for b in 0..bricks as usize {
        let at = [
            b as u64 / (counts[1] * counts[2]),
            b as u64 / counts[2] % counts[1],
            b as u64 % counts[2],
        ];
        for i in 0..per {
            let i64_ = i as u64;
            let p = [
                at[0] * BRICK[0] + i64_ / (BRICK[1] * BRICK[2]),
                at[1] * BRICK[1] + i64_ / BRICK[2] % BRICK[1],
                at[2] * BRICK[2] + i64_ % BRICK[2],
            ];
            let m = mask_bytes[b * per + i];
            let inside = (0..3).all(|a| p[a] < shape[a]);
            let v = ((p[0] * shape[1] + p[1]) * shape[2] + p[2]) as usize;
            match inside {
                true => mask[v] = m,
                false => assert_eq!(m, 0, "padding of brick {b}"),
            }
            for c in 0..2 {
                let at_bytes = ((b * 2 + c) * per + i) * 4;
                let f = f32::from_le_bytes(image_bytes[at_bytes..at_bytes + 4].try_into().unwrap());
                match inside {
                    true => image[c * n + v] = f,
                    false => assert_eq!(f, 0.0),
                }
            }
        }
    }
    (image, mask, info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_come_back_voxel_for_voxel_with_their_classes() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let (a, image_a, mask_a) = volume("ct_a.npy", [19, 8, 9], 1);
    let (b, image_b, mask_b) = volume("ct_b.npy", [8, 20, 4], 2);
    // 3×1×3 and 1×3×1 bricks.
    assert_eq!(write(&table, vec![a, b]).await.unwrap(), 9 + 3);
    let t = table.clone();
    let (got_a, got_b) = tokio::task::spawn_blocking(move || {
        (read_volume(&t, "ct_a.npy"), read_volume(&t, "ct_b.npy"))
    })
    .await
    .unwrap();
    for ((image, mask, info), (want_image, want_mask, shape)) in [
        (got_a, (image_a, mask_a, [19, 8, 9])),
        (got_b, (image_b, mask_b, [8, 20, 4])),
    ] {
        assert_eq!(info.shape, shape);
        assert_eq!(info.spacing, Some([2.0, 0.5, 0.5]));
        assert_eq!(image, want_image);
        assert_eq!(mask, want_mask);
        let classes = &info.classes["mask"];
        for c in classes {
            let count = mask.iter().filter(|&&m| i64::from(m) == c.class).count() as u64;
            assert_eq!(c.count, count, "class {}", c.class);
            assert_eq!(c.coords.len() as u64, count.min(1024));
            for p in &c.coords {
                let v = ((p[0] * shape[1] + p[1]) * shape[2] + p[2]) as usize;
                assert_eq!(i64::from(mask[v]), c.class);
            }
        }
        assert_eq!(
            classes.iter().map(|c| c.class).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_skips_written_volumes_and_shards_split_volumes() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let volumes = |n: u64| {
        (0..n)
            .map(|i| volume(&format!("v{i}"), [9, 9, 5], i).0)
            .collect::<Vec<_>>()
    };
    assert_eq!(write(&table, volumes(2)).await.unwrap(), 2 * 8);
    // Again, with two more: only those are written.
    assert_eq!(write(&table, volumes(4)).await.unwrap(), 2 * 8);
    // Two shards of six volumes into another table: each volume whole, in one shard.
    let sharded = dir.path().join("s").to_string_lossy().into_owned();
    let mut rows = 0;
    for shard in 0..2 {
        let compactor = Compactor::new(&sharded)
            .with_layout(layout())
            .with_shard(shard, 2);
        let mut writer = compactor.volume_writer(spec()).await.unwrap();
        for v in volumes(6) {
            writer.push(v).await.unwrap();
        }
        let written = writer.finish().await.unwrap().rows;
        assert!(written % 8 == 0 && written < 6 * 8, "{written}");
        rows += written;
    }
    assert_eq!(rows, 6 * 8);
    let ids = tokio::task::spawn_blocking(move || {
        let rows = Loader::builder(&sharded).build_lookup().unwrap();
        let mut ids: Vec<String> = rows.ids().unwrap().ids().map(str::to_string).collect();
        ids.sort();
        ids
    })
    .await
    .unwrap();
    let mut want: Vec<String> = (0..6)
        .flat_map(|v| (0..8).map(move |b| brick_id(&format!("v{v}"), b)))
        .collect();
    want.sort();
    assert_eq!(ids, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_volumes_and_mismatched_tables_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let (v, _, _) = volume("short", [4, 4, 4], 0);
    let mut fields = v.fields.clone();
    fields[1] = fields[1].slice(1..);
    let e = write(&table, vec![Volume::new("short", [4, 4, 4], fields)])
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("volume 'short': field 'mask' has 63 bytes, u8 [4, 4, 4] takes 64"),
        "{e}"
    );
    let e = write(
        &table,
        vec![Volume::new("flat", [4, 0, 4], v.fields.clone())],
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("volume 'flat'")
            && e.to_string().contains("every axis needs a voxel"),
        "{e}"
    );
    // A class field that is no label map: 512 classes.
    let wide = BrickSpec::new(
        BRICK,
        vec![
            VolumeField::new("image", DType::F32),
            VolumeField::new("seg", DType::U16),
        ],
    )
    .unwrap()
    .with_class_fields(vec!["seg".into()])
    .unwrap();
    let other = dir.path().join("wide").to_string_lossy().into_owned();
    let compactor = Compactor::new(&other);
    let mut writer = compactor.volume_writer(wide).await.unwrap();
    let image = vec![0u8; 512 * 4];
    let labels: Vec<u8> = (0..512u16).flat_map(u16::to_le_bytes).collect();
    let e = writer
        .push(Volume::new(
            "seg_1",
            [8, 8, 8],
            vec![image.into(), labels.into()],
        ))
        .await
        .unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("volume 'seg_1': class field 'seg': ") && e.contains("not a label map"),
        "{e}"
    );
    // Nothing was committed by the failures above; a good volume goes in, then a plain writer
    // and a layout of other bricks are refused.
    assert_eq!(write(&table, vec![v]).await.unwrap(), 1);
    let plain = Compactor::new(&table)
        .writer(spec().sample().unwrap())
        .await
        .unwrap_err();
    assert!(
        plain
            .to_string()
            .contains("holds volumes in bricks of [8, 8, 4]"),
        "{plain}"
    );
    let other_bricks = BrickSpec::new([4, 4, 4], spec().fields().to_vec()).unwrap();
    let e = Compactor::new(&table)
        .volume_writer(other_bricks)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("holds image [2, 8, 8, 4] f32"),
        "{e}"
    );
    let no_classes = spec().with_class_fields(Vec::new()).unwrap();
    let e = Compactor::new(&table)
        .volume_writer(no_classes)
        .await
        .unwrap_err();
    let e = e.to_string();
    assert!(e.contains(r#"holds volumes in bricks of [8, 8, 4], classes of ["mask"], the source volumes in bricks of [8, 8, 4], classes of []"#), "{e}");
}

/// numpy's crop of channel-first `values` (`channels` × `shape`) at `origin`, zero- or
/// edge-padded.
fn crop<T: Copy + Default>(
    values: &[T],
    channels: u64,
    shape: [u64; 3],
    origin: [i64; 3],
    size: [u64; 3],
    edge: bool,
) -> Vec<T> {
    let mut out = Vec::new();
    for c in 0..channels {
        for z in 0..size[0] {
            for y in 0..size[1] {
                for x in 0..size[2] {
                    let p = [
                        origin[0] + z as i64,
                        origin[1] + y as i64,
                        origin[2] + x as i64,
                    ];
                    let inside = (0..3).all(|a| p[a] >= 0 && p[a] < shape[a] as i64);
                    if !inside && !edge {
                        out.push(T::default());
                        continue;
                    }
                    let q: Vec<u64> = (0..3)
                        .map(|a| p[a].clamp(0, shape[a] as i64 - 1) as u64)
                        .collect();
                    out.push(
                        values[(((c * shape[0] + q[0]) * shape[1] + q[1]) * shape[2] + q[2])
                            as usize],
                    );
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_equal_the_crops_of_their_volumes_and_read_only_their_bricks() {
    use voxlake::plan::patch::Pad;
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let shapes = [[19u64, 8, 9], [40, 40, 16]];
    let made: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, &s)| volume(&format!("v{i}"), s, i as u64))
        .collect();
    write(&table, made.iter().map(|m| m.0.clone()).collect())
        .await
        .unwrap();
    tokio::task::spawn_blocking(move || {
        let rows = Loader::builder(&table).build_lookup().unwrap();
        let volumes = rows.volumes().unwrap();
        assert_eq!(
            volumes
                .volumes()
                .iter()
                .map(|v| v.id.as_str())
                .collect::<Vec<_>>(),
            ["v0", "v1"]
        );
        let mut rng = SeededRng::new(7);
        let size = [6u64, 5, 7];
        for pad in [Pad::Zero, Pad::Edge, Pad::None] {
            let at: Vec<(usize, [i64; 3])> = (0..12)
                .map(|k| {
                    let v = k % 2;
                    let shape = shapes[v];
                    let origin = std::array::from_fn(|a| match pad {
                        Pad::None => rng.below((shape[a] - size[a] + 1) as usize) as i64,
                        // Overlapping the volume by at least a voxel.
                        _ => {
                            rng.below((shape[a] + size[a] - 1) as usize) as i64
                                - (size[a] as i64 - 1)
                        }
                    });
                    (v, origin)
                })
                .collect();
            let batch = rows.patches(size, pad, &at).unwrap();
            assert_eq!(batch.tensors.shape(), [12, 2, 6, 5, 7]);
            let image = batch.field("image").unwrap().as_bytes().unwrap();
            let mask = batch.field("mask").unwrap().as_bytes().unwrap();
            let origins = batch.field("origin").unwrap().as_bytes().unwrap();
            let per = 6 * 5 * 7;
            for (k, &(v, origin)) in at.iter().enumerate() {
                let (_, want_image, want_mask) = &made[v];
                let edge = pad == Pad::Edge;
                let got: Vec<f32> = image[k * 2 * per * 4..(k + 1) * 2 * per * 4]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(
                    got,
                    crop(want_image, 2, shapes[v], origin, size, edge),
                    "{pad:?} patch {k}"
                );
                assert_eq!(
                    mask[k * per..(k + 1) * per],
                    crop(want_mask, 1, shapes[v], origin, size, edge)[..]
                );
                let o: Vec<i64> = origins[k * 24..(k + 1) * 24]
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(o, origin);
                assert_eq!(batch.ids[k], format!("v{v}"));
                assert_eq!(batch.labels[k], Some(v as i64));
            }
        }
        // One patch inside one brick of the 40×40×16 volume (100 bricks) reads one brick row.
        let fresh = Loader::builder(&table).build_lookup().unwrap();
        let v1 = fresh.volumes().unwrap().find("v1").unwrap();
        let before = fresh.stats().stream.bytes;
        fresh
            .patches([8, 8, 4], Pad::None, &[(v1, [16, 8, 4])])
            .unwrap();
        let read = fresh.stats().stream.bytes - before;
        let brick = 8 * 8 * 4 * (2 * 4 + 1);
        let whole = 40 * 40 * 16 * (2 * 4 + 1);
        assert!(
            read >= brick as u64 && read < 2 * brick as u64,
            "{read} bytes for a brick of {brick} (the volume is {whole})"
        );
        // Bad asks, by name.
        let e = rows
            .patches([8, 8, 8], Pad::None, &[(0, [15, 0, 0])])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reaches past the edge of volume 'v0' of [19, 8, 9] (pad=\"none\")"),
            "{e}"
        );
        let e = rows
            .patches([8, 8, 8], Pad::Zero, &[(2, [0, 0, 0])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no volume #2: the table has 2"), "{e}");
        let e = rows
            .patches([2, 2, 2], Pad::Edge, &[(0, [-2, 0, 0])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps no voxel of volume 'v0'"), "{e}");
    })
    .await
    .unwrap();
}
