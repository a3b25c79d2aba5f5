//! Samples of several fields (tests/fixtures/foreign/pyarrow_fields, written by pyarrow): the
//! volume as a `fixed_shape_tensor`, its voxel mask as a LIST of u8, a scalar and a string per
//! row, each read value for value against numpy's, over ranks and a resume; transforms see
//! every field; a field of the wrong grid is named.

use std::collections::HashMap;

use voxlake::format::npy::NpyArray;
use voxlake::format::{DType, FieldKind, SampleSpec, TensorSpec};
use voxlake::loader::FieldRef;
use voxlake::{Batch, Loader, LoaderBuilder, LoaderState, Tensors};

use crate::distributed::take;
use crate::foreign::{expected, fixture};
use crate::loader::{collect, first_error};

/// numpy's voxel masks of the fixture's cubes, as bytes.
fn masks() -> Vec<Vec<u8>> {
    let file = std::fs::read(fixture("expected_mask.npy")).unwrap();
    let npy = NpyArray::parse(&file).unwrap();
    assert_eq!(npy.shape()[1..], [3, 4, 2]);
    npy.data().chunks(24).map(<[u8]>::to_vec).collect()
}

fn cube(id: &str) -> usize {
    id.strip_prefix("cube-").unwrap().parse().unwrap()
}

/// The fixture read as four fields, with its ids and labels.
fn fields() -> LoaderBuilder {
    Loader::builder(fixture("pyarrow_fields"))
        .with_field("volume")
        .with_field_spec("mask", vec![3, 4, 2], DType::U8)
        .with_field("porosity")
        .with_field("well")
        .with_id_column("sample")
        .with_label_column("target")
        .with_batch_size(5)
}

/// Checks every field of every row against numpy's values; returns the cube numbers.
fn check(batches: &[Batch]) -> Vec<usize> {
    let (volumes, masks) = (expected(DType::F32), masks());
    let mut seen = Vec::new();
    for b in batches {
        let names: Vec<&str> = b.fields().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["volume", "mask", "porosity", "well"]);
        let volume = b.tensors.as_bytes().unwrap();
        let mask = b.field("mask").unwrap();
        assert_eq!(mask.shape(), [b.len(), 3, 4, 2]);
        assert_eq!(mask.dtype(), DType::U8);
        let mask = mask.as_bytes().unwrap();
        let porosity = b.field("porosity").unwrap().as_f64().unwrap();
        assert_eq!(porosity.shape(), [b.len()]);
        let well = b.text("well").unwrap();
        for (i, id) in b.ids.iter().enumerate() {
            let n = cube(id);
            assert_eq!(
                volume[i * 192..(i + 1) * 192],
                volumes[n][..],
                "volume of {id}"
            );
            assert_eq!(mask[i * 24..(i + 1) * 24], masks[n][..], "mask of {id}");
            assert!(
                (porosity[i] - (0.1 + n as f64 / 100.0)).abs() < 1e-12,
                "{id}"
            );
            assert_eq!(well[i], format!("W-{}", n % 4));
            assert_eq!(b.labels[i], Some(n as i64 % 2));
            seen.push(n);
        }
    }
    seen
}

#[test]
fn several_fields_read_value_for_value_over_ranks_and_a_resume() {
    let loader = std::thread::spawn(|| fields().build().unwrap())
        .join()
        .unwrap();
    let sample = loader.sample().to_string();
    assert_eq!(
        sample,
        "volume [3, 4, 2, 2] f32, mask [3, 4, 2] u8, porosity [] f64, well text"
    );
    drop(loader);
    let mut all = check(&collect(fields()));
    all.sort_unstable();
    assert_eq!(
        all,
        (0..24).collect::<Vec<_>>(),
        "table order: every row once"
    );
    // Shuffled over two ranks, two epochs: each epoch covers the table once.
    let mut seen: HashMap<(u64, usize), u32> = HashMap::new();
    for rank in 0..2 {
        let batches = collect(
            fields()
                .with_shuffle(3, 8)
                .with_rank(rank, 2)
                .with_epochs(2),
        );
        check(&batches);
        for b in &batches {
            for origin in b.lineage().iter().filter(|o| !o.pad) {
                *seen.entry((b.epoch, cube(&origin.id))).or_default() += 1;
            }
        }
    }
    assert_eq!(seen.len(), 48);
    assert!(seen.values().all(|&n| n == 1));
    // A resume gives what the uninterrupted run gave, every field.
    let base = || fields().with_shuffle(5, 8).with_rank(1, 2);
    let whole = collect(base());
    let (first, state) = take(base(), 1);
    let rest = collect(base().with_state(LoaderState::from_json(&state.to_json()).unwrap()));
    let again: Vec<&Batch> = first.iter().chain(&rest).collect();
    assert_eq!(again.len(), whole.len());
    for (a, b) in again.iter().zip(&whole) {
        assert_eq!(a.ids, b.ids);
        assert_eq!(a.field("mask"), b.field("mask"));
        assert_eq!(a.text("well"), b.text("well"));
    }
}

#[test]
fn transforms_see_and_change_every_field_together() {
    // A random flip of the first axis, the same on the volume and its mask; the mask handed
    // out as f32 (declared with with_transform_to).
    let output = SampleSpec::new(vec![
        (
            "volume".into(),
            FieldKind::Tensor(TensorSpec::new(vec![3, 4, 2, 2], DType::F32)),
        ),
        (
            "mask".into(),
            FieldKind::Tensor(TensorSpec::new(vec![3, 4, 2], DType::F32)),
        ),
        ("well".into(), FieldKind::Text),
    ])
    .unwrap();
    let builder = Loader::builder(fixture("pyarrow_fields"))
        .with_field("volume")
        .with_field_spec("mask", vec![3, 4, 2], DType::U8)
        .with_field("well")
        .with_id_column("sample")
        .with_batch_size(4)
        .with_shuffle(9, 8)
        .with_transform_to(output, |sample, rng| {
            use voxlake::loader::transform::Rng;
            let flip = rng.random_bool(0.5);
            assert_eq!(sample.field_names(), ["volume", "mask", "well"]);
            assert!(sample.text("well").unwrap().starts_with("W-"));
            let Some(Tensors::U8(mask)) = sample.field("mask") else {
                return Err("a u8 mask".into());
            };
            let mut mask = mask.mapv(f32::from);
            let Tensors::F32(volume) = &mut sample.tensor else {
                return Err("an f32 volume".into());
            };
            if flip {
                volume.invert_axis(ndarray::Axis(0));
                mask.invert_axis(ndarray::Axis(0));
            }
            *sample.field_mut("mask").unwrap() = Tensors::F32(mask);
            Ok(())
        });
    let batches = collect(builder.clone());
    let mut flipped = 0;
    for b in &batches {
        let volume = b.tensors.as_f32().unwrap();
        let mask = b.field("mask").unwrap().as_f32().unwrap();
        for i in 0..b.len() {
            // Flipped or not, the mask still is the volume's first channel > 0.
            let v = volume.index_axis(ndarray::Axis(0), i);
            let m = mask.index_axis(ndarray::Axis(0), i);
            let want = v
                .index_axis(ndarray::Axis(3), 0)
                .mapv(|x| f32::from(u8::from(x > 0.0)));
            assert_eq!(m, want, "{}: the mask moved with its volume", b.ids[i]);
            let original = &expected(DType::F32)[cube(&b.ids[i])];
            let first: Vec<u8> = v.iter().take(4).flat_map(|x| x.to_le_bytes()).collect();
            flipped += usize::from(first != original[..16]);
        }
    }
    assert!(flipped > 3 && flipped < 21, "about half flipped: {flipped}");
    // Reproducible: the same flips on every run.
    let again = collect(builder);
    for (a, b) in batches.iter().zip(&again) {
        assert_eq!(a.field("mask"), b.field("mask"));
    }
    // A field returned in another shape than declared is named.
    let e = first_error(
        Loader::builder(fixture("pyarrow_fields"))
            .with_field("volume")
            .with_field_spec("mask", vec![3, 4, 2], DType::U8)
            .with_id_column("sample")
            .with_transform(|sample, _| {
                *sample.field_mut("mask").unwrap() =
                    Tensors::U8(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 2])));
                Ok(())
            }),
        "a mask of another shape",
    );
    assert!(e.contains("field 'mask'") && e.contains("[2, 2]"), "{e}");
}

#[test]
fn a_field_of_the_wrong_grid_or_kind_is_named() {
    // The mask read as a grid of another size: the first row names field, file and row.
    let e = first_error(
        Loader::builder(fixture("pyarrow_fields"))
            .with_field("volume")
            .with_field_spec("mask", vec![3, 4, 1], DType::U8)
            .with_batch_size(4),
        "a mask of another grid",
    );
    assert!(
        e.contains("part-00000.parquet, row group 0, row 0")
            && e.contains("column 'mask': a list of 24 values"),
        "{e}"
    );
    // A mask of u8 read as f32 is refused at build (no silent conversion).
    let e = first_error(
        Loader::builder(fixture("pyarrow_fields"))
            .with_field("volume")
            .with_field_spec("mask", vec![3, 4, 2], DType::F32),
        "a mask of another type",
    );
    assert!(e.contains("elements of type u8"), "{e}");
    // The first field must be a tensor; a column that is not there is named.
    let e = first_error(
        Loader::builder(fixture("pyarrow_fields")).with_field("well"),
        "text first",
    );
    assert!(e.contains("first field is a tensor"), "{e}");
    let e = first_error(
        Loader::builder(fixture("pyarrow_fields"))
            .with_field("volume")
            .with_field("seismic"),
        "a missing column",
    );
    assert!(e.contains("no column 'seismic'"), "{e}");
}

#[test]
fn partition_values_and_numbers_are_fields_too() {
    // The hive fixture's region (a partition folder) as text, depth as a scalar.
    let batches = collect(
        Loader::builder(crate::foreign::fixture("pyarrow_raw_hive"))
            .with_field_spec("volume", vec![3, 4, 2, 2], DType::F32)
            .with_field("depth")
            .with_field("region")
            .with_id_column("sample")
            .with_batch_size(24),
    );
    let b = &batches[0];
    let depth = b.field("depth").unwrap();
    assert_eq!(depth.dtype(), DType::I32);
    let depth = match depth {
        Tensors::I32(a) => a.clone(),
        other => panic!("{other:?}"),
    };
    let regions = b.text("region").unwrap();
    for (i, id) in b.ids.iter().enumerate() {
        let n = cube(id);
        assert_eq!(depth[i], 100 + 10 * n as i32);
        assert_eq!(regions[i], ["a", "b", "c"][n % 3]);
    }
    assert!(matches!(b.fields()[2].1, FieldRef::Text(_)));
}

#[cfg(feature = "tch")]
#[test]
fn the_tch_path_hands_out_every_field_as_the_ndarray_path() {
    use voxlake::loader::tch::Device;
    let nd = collect(fields());
    let on_cpu = collect(fields().with_device(Device::Cpu));
    for (a, b) in nd.iter().zip(&on_cpu) {
        assert!(matches!(b.tensors, Tensors::Tch(_)));
        for name in ["volume", "mask", "porosity"] {
            let (x, y) = (a.field(name).unwrap(), b.field(name).unwrap());
            assert_eq!(x.as_bytes(), y.as_bytes(), "{name}");
            assert_eq!((x.shape(), x.dtype()), (y.shape(), y.dtype()), "{name}");
        }
        assert_eq!(a.text("well"), b.text("well"));
    }
}
