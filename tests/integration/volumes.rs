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

/// A table of volumes of `shapes` (`v0`, `v1`, …, labelled by their number): its folder, its
/// path, and each volume as `volume` made it.
async fn table_of(
    shapes: &[[u64; 3]],
) -> (tempfile::TempDir, String, Vec<(Volume, Vec<f32>, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let made: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, &s)| volume(&format!("v{i}"), s, i as u64))
        .collect();
    write(&table, made.iter().map(|m| m.0.clone()).collect())
        .await
        .unwrap();
    (dir, table, made)
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
    let shapes = [[19u64, 8, 9], [40, 40, 16]];
    let (_dir, table, made) = table_of(&shapes).await;
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

/// A loader of patches of `table`: `per` patches a volume, half the centres on the rare
/// class 2, batches of 4, shuffled, one epoch.
fn patch_loader(
    table: &str,
    per: u64,
    rank: usize,
    world: usize,
) -> voxlake::loader::LoaderBuilder {
    patch_loader_of(table, per, 4, rank, world)
}

/// [`patch_loader`] with batches of `batch`.
fn patch_loader_of(
    table: &str,
    per: u64,
    batch: usize,
    rank: usize,
    world: usize,
) -> voxlake::loader::LoaderBuilder {
    use voxlake::plan::patch::PatchSampling;
    use voxlake::plan::sample::Sampling;
    let patches = PatchSampling::new([6, 5, 7])
        .with_per_volume(per)
        .with_label_probabilities("mask", vec![(0, 1.0), (2, 1.0)])
        .with_window(2);
    Loader::builder(table)
        .with_sampling(Sampling::default().with_patches(patches))
        .with_batch_size(batch)
        .with_shuffle(9, 64)
        .with_epochs(1)
        .with_rank(rank, world)
}

/// Each patch of `batches` as (volume id, origin, image values).
fn patches_of(batches: &[voxlake::loader::Batch]) -> Vec<(String, Vec<i64>, Vec<u8>)> {
    let mut out = Vec::new();
    for b in batches {
        let image = b.field("image").unwrap().as_bytes().unwrap();
        let origins = b.field("origin").unwrap().as_bytes().unwrap();
        let per = image.len() / b.len();
        for k in 0..b.len() {
            let o = origins[k * 24..(k + 1) * 24]
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            out.push((b.ids[k].clone(), o, image[k * per..(k + 1) * per].to_vec()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_of_patches_balances_classes_and_resumes_on_another_world_size() {
    let shapes = [
        [19u64, 8, 9],
        [12, 12, 12],
        [9, 20, 8],
        [16, 8, 8],
        [10, 10, 10],
    ];
    let (_dir, table, made) = table_of(&shapes).await;
    tokio::task::spawn_blocking(move || {
        let by_id = |id: &str| {
            let i: usize = id[1..].parse().unwrap();
            (&made[i], shapes[i])
        };
        // Two ranks, 40 patches a volume: 5 volumes dealt 3 and 2, padded to 30 batches each.
        let ranks: Vec<Vec<voxlake::loader::Batch>> = (0..2)
            .map(|r| {
                let loader = patch_loader(&table, 40, r, 2).build().unwrap();
                assert_eq!(loader.iterations_per_epoch(), 30);
                loader.map(Result::unwrap).collect()
            })
            .collect();
        assert!(ranks.iter().all(|r| r.len() == 30));
        let all: Vec<_> = ranks.iter().flat_map(|r| patches_of(r)).collect();
        let mut on_rare = 0;
        for (id, origin, image) in &all {
            let ((_, want_image, want_mask), shape) = by_id(id);
            let o: [i64; 3] = [origin[0], origin[1], origin[2]];
            let want: Vec<u8> = crop(want_image, 2, shape, o, [6, 5, 7], false)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            assert_eq!(image, &want, "patch of {id} at {origin:?}");
            let c: Vec<u64> = (0..3).map(|a| (o[a] + [3, 2, 3][a]) as u64).collect();
            if want_mask[((c[0] * shape[1] + c[1]) * shape[2] + c[2]) as usize] == 2 {
                on_rare += 1;
            }
        }
        // Class 2 is 3 voxels a volume: about half the 200 draws centre on it.
        let drawn = 200;
        assert!(
            (70..130).contains(&on_rare),
            "{on_rare} of {drawn} centres on the rare class"
        );
        let full: std::collections::BTreeSet<(String, Vec<i64>)> =
            all.iter().map(|(i, o, _)| (i.clone(), o.clone())).collect();

        // Rank 0 stopped after 7 batches: its state, resumed on 3 ranks, then delivers the
        // rest: together every draw of the epoch, each patch as the first run drew it.
        let mut first = patch_loader(&table, 40, 0, 2).build().unwrap();
        let head: Vec<_> = (&mut first).take(7).map(Result::unwrap).collect();
        let state = first.state();
        assert_eq!(patches_of(&head), patches_of(&ranks[0][..7]));
        let mut delivered: std::collections::BTreeSet<(String, Vec<i64>)> = ranks
            .iter()
            .flat_map(|r| patches_of(&r[..7]))
            .map(|(i, o, _)| (i, o))
            .collect();
        let mut rest = 0;
        for r in 0..3 {
            let resumed = patch_loader(&table, 40, r, 3)
                .with_state(state.clone())
                .build()
                .unwrap();
            let batches: Vec<_> = resumed.map(Result::unwrap).collect();
            rest += batches.len();
            for (i, o, image) in patches_of(&batches) {
                let ((_, want_image, _), shape) = by_id(&i);
                let want: Vec<u8> =
                    crop(want_image, 2, shape, [o[0], o[1], o[2]], [6, 5, 7], false)
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect();
                assert_eq!(image, want);
                delivered.insert((i, o));
            }
        }
        assert!(rest > 0);
        assert_eq!(
            delivered, full,
            "the resumed run delivers the epoch's draws"
        );
        // Without pads, exactly: 5 ranks (a volume each, 2 batches of 2) stopped after one
        // batch, resumed on one rank, deliver the uninterrupted epoch's patches once each.
        type Tally = std::collections::BTreeMap<(String, Vec<i64>), i32>;
        let count = |batches: &[voxlake::loader::Batch], into: &mut Tally, by: i32| {
            for (i, o, _) in patches_of(batches) {
                *into.entry((i, o)).or_default() += by;
            }
        };
        let mut tally = Tally::new();
        let mut state = None;
        for r in 0..5 {
            let whole: Vec<_> = patch_loader_of(&table, 4, 2, r, 5)
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(whole.len(), 2);
            count(&whole, &mut tally, 1);
            let mut part = patch_loader_of(&table, 4, 2, r, 5).build().unwrap();
            let one: Vec<_> = (&mut part).take(1).map(Result::unwrap).collect();
            count(&one, &mut tally, -1);
            state = Some(part.state());
        }
        let resumed: Vec<_> = patch_loader_of(&table, 4, 2, 0, 1)
            .with_state(state.unwrap())
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(resumed.len(), 5);
        count(&resumed, &mut tally, -1);
        assert!(tally.values().all(|&n| n == 0), "{tally:?}");
        // Bad options are named before anything is read.
        use voxlake::plan::patch::PatchSampling;
        use voxlake::plan::sample::Sampling;
        let with = |p: PatchSampling| {
            Loader::builder(&table)
                .with_sampling(Sampling::default().with_patches(p))
                .build()
                .unwrap_err()
                .to_string()
        };
        let e =
            with(PatchSampling::new([4, 4, 4]).with_label_probabilities("mask", vec![(5, 1.0)]));
        assert!(
            e.contains("option label_probabilities: class 5 is in no volume's 'mask'"),
            "{e}"
        );
        let e =
            with(PatchSampling::new([4, 4, 4]).with_label_probabilities("image", vec![(0, 1.0)]));
        assert!(
            e.contains("option label_field: 'image' is not a label field"),
            "{e}"
        );
        let e = with(PatchSampling::new([20, 4, 4]).with_pad(voxlake::plan::patch::Pad::None));
        assert!(
            e.contains(
                "option pad: a patch of [20, 4, 4] is larger than volume 'v0' of [19, 8, 9]"
            ),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_brick_is_an_error_naming_its_file_not_a_wrong_patch() {
    use voxlake::plan::patch::Pad;
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t").to_string_lossy().into_owned();
    let (v, _, _) = volume("ct", [16, 16, 8], 0);
    write(&table, vec![v]).await.unwrap();
    // One byte of the image's values flipped in the middle of the data file.
    let file = std::fs::read_dir(&table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    tokio::task::spawn_blocking(move || {
        let rows = Loader::builder(&table).build_lookup().unwrap();
        let e = rows
            .patches([16, 16, 8], Pad::None, &[(0, [0, 0, 0])])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&name) && e.contains("(ct#") && e.contains("its CRC-32 is"),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grid_loader_gives_every_patch_of_every_volume_in_order() {
    use voxlake::plan::patch::{PatchSampling, grid_origins};
    use voxlake::plan::sample::Sampling;
    let shapes = [[19u64, 8, 9], [12, 12, 12], [9, 20, 8]];
    let (_dir, table, _) = table_of(&shapes).await;
    tokio::task::spawn_blocking(move || {
        let size = [6u64, 5, 7];
        let grid = |rank, world| {
            let patches = PatchSampling::new(size).with_grid([2, 1, 3]);
            Loader::builder(&table)
                .with_sampling(Sampling::default().with_patches(patches))
                .with_batch_size(3)
                .with_shuffle(4, 64)
                .with_epochs(1)
                .with_rank(rank, world)
                .build()
                .unwrap()
        };
        let mut got: Vec<(String, Vec<i64>)> = Vec::new();
        for r in 0..2 {
            let batches: Vec<_> = grid(r, 2).map(Result::unwrap).collect();
            let mine: Vec<(String, Vec<i64>)> = patches_of(&batches)
                .into_iter()
                .map(|(i, o, _)| (i, o))
                .collect();
            // A volume's patches come in the grid's order (pads repeat from the start).
            for w in mine.windows(2).filter(|w| w[0].0 == w[1].0) {
                assert!(
                    w[0].1 < w[1].1 || w[1].1 == mine.iter().find(|m| m.0 == w[1].0).unwrap().1
                );
            }
            got.extend(mine);
        }
        let mut want: Vec<(String, Vec<i64>)> = Vec::new();
        for (i, shape) in shapes.iter().enumerate() {
            for o in grid_origins(*shape, size, [2, 1, 3]).unwrap() {
                want.push((format!("v{i}"), o.iter().map(|&v| v as i64).collect()));
            }
        }
        let distinct: std::collections::BTreeSet<_> = got.iter().cloned().collect();
        assert_eq!(
            distinct,
            want.iter().cloned().collect(),
            "every grid patch, none else"
        );
        // Volumes in order, dealt whole (v0 and v2 to rank 0, v1 to rank 1): each rank pads
        // to the longer's whole batches.
        // Rank 1 stopped before its last batch (its pads past the checks' slack of a batch a
        // rank) resumes with that batch.
        let all: Vec<_> = grid(1, 2).map(Result::unwrap).collect();
        let mut part = grid(1, 2);
        let n = all.len() - 1;
        assert_eq!((&mut part).take(n).count(), n);
        let patches = PatchSampling::new(size).with_grid([2, 1, 3]);
        let resumed: Vec<_> = Loader::builder(&table)
            .with_sampling(Sampling::default().with_patches(patches))
            .with_batch_size(3)
            .with_shuffle(4, 64)
            .with_epochs(1)
            .with_rank(1, 2)
            .with_state(part.state())
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(patches_of(&resumed), patches_of(&all[n..]));
        let count = |i: usize| grid_origins(shapes[i], size, [2, 1, 3]).unwrap().len();
        let longest = (count(0) + count(2)).max(count(1));
        assert_eq!(got.len(), 2 * longest.div_ceil(3) * 3);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_of_a_patch_loader_splits_volumes() {
    use voxlake::plan::patch::PatchSampling;
    use voxlake::plan::sample::Sampling;
    use voxlake::plan::split::Split;
    let shapes = [[8u64, 8, 8]; 8];
    let (_dir, table, _) = table_of(&shapes).await;
    tokio::task::spawn_blocking(move || {
        let of = |name: &str| {
            let split = Split::new(name, vec![("train".into(), 0.5), ("val".into(), 0.5)]);
            let sampling = Sampling::default()
                .with_split(split.clone())
                .with_patches(PatchSampling::new([4, 4, 4]).with_per_volume(3));
            let batches: Vec<_> = Loader::builder(&table)
                .with_sampling(sampling)
                .with_batch_size(1)
                .with_epochs(1)
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let ids: std::collections::BTreeSet<String> =
                batches.iter().flat_map(|b| b.ids.clone()).collect();
            assert!(ids.iter().all(|id| split.contains(id)), "{name}: {ids:?}");
            assert_eq!(batches.len(), 3 * ids.len());
            ids
        };
        let (train, val) = (of("train"), of("val"));
        assert!(train.is_disjoint(&val));
        assert_eq!(train.len() + val.len(), 8, "{train:?} {val:?}");
    })
    .await
    .unwrap();
}
