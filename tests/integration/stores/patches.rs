//! Patches of a bricked table on the real stores: without a cache only the bricks a patch
//! overlaps are fetched (by range; object_store joins ranges less than 1 MiB apart); through
//! the node's disk cache their row group's chunks, which a second process of the node then
//! reads from the cache; the patch equals the volume's crop every time.

use voxlake::Loader;
use voxlake::compact::{Compactor, Volume};
use voxlake::format::DType;
use voxlake::format::volume::{BrickSpec, VolumeField};
use voxlake::plan::patch::Pad;
use voxlake_testkit::{FaultPlan, FaultProxy};

use super::{Backend, unique_prefix};

/// Voxel `(z, y, x)` of volume `v` (128×128×64): its index plus `v`.
fn voxel(v: u32, z: u32, y: u32, x: u32) -> f32 {
    ((z * 128 + y) * 64 + x + v) as f32
}

const MIB: u64 = 1 << 20;

async fn patches_are_fetched_by_range_then_from_the_nodes_cache(backend: Backend) {
    let table = backend.url(&format!("{}/table", unique_prefix("patches")));
    // Two volumes of 4·4·2 bricks of 32³ f32 (128 KiB each, a row group a volume): 8 MiB.
    let spec = BrickSpec::new([32, 32, 32], vec![VolumeField::new("image", DType::F32)]).unwrap();
    let compactor = Compactor::new(&table).with_storage_options(backend.options());
    let mut writer = compactor.volume_writer(spec).await.unwrap();
    for v in 0..2u32 {
        let mut values = Vec::with_capacity(128 * 128 * 64 * 4);
        for z in 0..128 {
            for y in 0..128 {
                for x in 0..64 {
                    values.extend(voxel(v, z, y, x).to_le_bytes());
                }
            }
        }
        let volume = Volume::new(format!("v{v}"), [128, 128, 64], vec![values.into()]);
        writer.push(volume).await.unwrap();
    }
    writer.finish().await.unwrap();
    let proxy = FaultProxy::start(backend.addr(), FaultPlan::default())
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    // A lookup of the node reads one 32³ patch of v1 at (16, 16, 16): 8 bricks of 64 (1 MiB).
    let read = |cached: bool| {
        let builder = Loader::builder(table.clone()).with_storage_options(backend.through(&proxy));
        let builder = match cached {
            true => builder.with_cache(cache.path(), 1 << 30),
            false => builder.with_cache_choice(voxlake::io::cache::CacheChoice::Off),
        };
        std::thread::spawn(move || {
            let lookup = builder.build_lookup().unwrap();
            let v1 = lookup.volumes().unwrap().find("v1").unwrap();
            // The ids (a patch's bricks are found by them) are read first.
            lookup.ids().unwrap();
            let before = lookup.stats().stream;
            let batch = lookup
                .patches([32, 32, 32], Pad::Zero, &[(v1, [16, 16, 16])])
                .unwrap();
            let after = lookup.stats().stream;
            let got: Vec<f32> = batch
                .tensors
                .as_bytes()
                .unwrap()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (
                got,
                after.store_bytes - before.store_bytes,
                after.cache.hits - before.cache.hits,
            )
        })
        .join()
        .unwrap()
    };
    let want: Vec<f32> = (16..48)
        .flat_map(|z| (16..48).flat_map(move |y| (16..48).map(move |x| voxel(1, z, y, x))))
        .collect();
    let (got, fetched, _) = read(false);
    assert_eq!(got, want);
    // Bricks 0–3 and 8–11 of v1, joined (512 KiB apart) into one range of 1.5 MiB.
    assert!(
        (MIB..2 * MIB).contains(&fetched),
        "{fetched} bytes fetched without a cache"
    );
    let (got, fetched, _) = read(true);
    assert_eq!(got, want);
    assert!(
        (MIB..6 * MIB).contains(&fetched),
        "{fetched} bytes fetched into the cache: v1's row group, not the table"
    );
    let (got, fetched, hits) = read(true);
    assert_eq!(got, want);
    assert_eq!(fetched, 0, "the node's second process reads the cache");
    assert!(hits > 0);
}

on_every_backend!(patches_are_fetched_by_range_then_from_the_nodes_cache);
