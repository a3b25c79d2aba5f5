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

/// numpy's sources of `count` samples in `dir` (see tests/python/fields_source.py).
fn numpy_sources(dir: &std::path::Path, count: usize) {
    voxlake_testkit::python_script(
        "fields_source.py",
        &["make", dir.to_str().unwrap(), &count.to_string()],
    );
}

fn npy_bytes(path: std::path::PathBuf) -> Vec<u8> {
    let file = std::fs::read(path).unwrap();
    NpyArray::parse(&file).unwrap().data().to_vec()
}

#[tokio::test]
async fn compact_converts_a_folder_per_field_and_npz_archives() {
    use voxlake::compact::{Compactor, OnError};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    numpy_sources(&src, 30);
    // A name with no mask: an error naming it, or skipped and listed.
    std::fs::copy(src.join("x/s000.npy"), src.join("x/lonely.npy")).unwrap();
    let table = dir.path().join("table");
    let compactor = || {
        Compactor::new(table.to_str().unwrap())
            .with_fields(vec!["x".into(), "mask".into()])
            .with_layout(voxlake::format::Layout {
                row_group_rows: 8,
                ..Default::default()
            })
    };
    let e = compactor()
        .convert(src.to_str().unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lonely.npy: no 'mask' field (mask/lonely.npy"),
        "{e}"
    );
    let s = compactor()
        .with_on_error(OnError::Skip)
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!((s.rows, s.skipped.len()), (30, 1));
    assert_eq!(s.tensor, "x [4, 4, 2, 3] f32, mask [4, 4, 2] u8");
    // Exactly once on a re-run.
    let again = compactor()
        .with_on_error(OnError::Skip)
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!((again.rows, again.already_present), (0, 30));
    // numpy agrees, through deltalake-python and pyarrow.
    let checked = voxlake_testkit::python_script(
        "fields_source.py",
        &["check", table.to_str().unwrap(), src.to_str().unwrap()],
    );
    assert_eq!(checked, "30");
    // The loader reads both fields (checksums over both verified), value for value.
    let batches = collect(Loader::builder(table.to_str().unwrap()).with_batch_size(7));
    let mut n = 0;
    for b in &batches {
        assert_eq!(b.tensors.shape(), [b.len(), 4, 4, 2, 3]);
        let (x, mask) = (
            b.tensors.as_bytes().unwrap(),
            b.field("mask").unwrap().as_bytes().unwrap(),
        );
        for (i, id) in b.ids.iter().enumerate() {
            assert_eq!(
                x[i * 384..(i + 1) * 384],
                npy_bytes(src.join("x").join(id))[..]
            );
            assert_eq!(
                mask[i * 32..(i + 1) * 32],
                npy_bytes(src.join("mask").join(id))[..]
            );
            n += 1;
        }
    }
    assert_eq!(n, 30);
    // An .npz source: a field per array, a scalar among them.
    let npz_table = dir.path().join("npz_table");
    let s = Compactor::new(npz_table.to_str().unwrap())
        .convert(src.join("npz").to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        s.tensor,
        "x [4, 4, 2, 3] f32, mask [4, 4, 2] u8, porosity [] f64"
    );
    let batches = collect(Loader::builder(npz_table.to_str().unwrap()).with_batch_size(30));
    let b = &batches[0];
    let porosity = b.field("porosity").unwrap().as_f64().unwrap();
    for (i, id) in b.ids.iter().enumerate() {
        let k: f64 = id
            .trim_start_matches('s')
            .trim_end_matches(".npz")
            .parse()
            .unwrap();
        assert_eq!(porosity[i], k / 10.0);
        let name = id.replace(".npz", ".npy");
        assert_eq!(
            b.field("mask").unwrap().as_bytes().unwrap()[i * 32..(i + 1) * 32],
            npy_bytes(src.join("mask").join(&name))[..]
        );
    }
}

#[tokio::test]
async fn reading_some_fields_reads_only_their_chunks_and_checksums_cover_every_field() {
    use voxlake::compact::Compactor;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    numpy_sources(&src, 16);
    let table = dir.path().join("table");
    Compactor::new(table.to_str().unwrap())
        .with_fields(vec!["x".into(), "mask".into()])
        .convert(src.to_str().unwrap())
        .await
        .unwrap();
    let fetched = |builder: LoaderBuilder| {
        std::thread::spawn(move || {
            let mut loader = builder.with_batch_size(16).build().unwrap();
            let batch = loader.next().unwrap().unwrap();
            let names: Vec<String> = batch.fields().iter().map(|(n, _)| n.to_string()).collect();
            assert!(loader.next().is_none());
            (names, loader.stats().stream.bytes)
        })
        .join()
        .unwrap()
    };
    let path = table.to_str().unwrap().to_string();
    let (all, all_bytes) = fetched(Loader::builder(&path));
    let (mask, mask_bytes) = fetched(Loader::builder(&path).with_field("mask"));
    assert_eq!(
        (all, mask),
        (vec!["x".into(), "mask".into()], vec!["mask".to_string()])
    );
    // x is 12x the mask's bytes: reading the mask alone fetches a small part of the file.
    assert!(mask_bytes * 5 < all_bytes, "{mask_bytes} of {all_bytes}");
    // A byte flipped in the mask's chunk is caught by the row checksum, named by row and id.
    let file = voxlake_testkit::data_files(&table).remove(0);
    voxlake_testkit::flip_in_chunk(&file, "mask", |start, len| start + len - 40, 0x01);
    let e = first_error(Loader::builder(&path), "a flipped mask byte");
    assert!(e.contains("CRC-32") && e.contains("corrupt"), "{e}");
}

#[test]
fn voxlake_bench_reads_named_fields_and_reports_each() {
    let report = voxlake_testkit::json_output(
        std::process::Command::new(voxlake_testkit::voxlake_bin())
            .args([
                "bench",
                &fixture("pyarrow_fields"),
                "--json",
                "--id-column",
                "sample",
            ])
            .args([
                "--field",
                "volume",
                "--field",
                "mask=3,4,2:u8",
                "--field",
                "well",
            ]),
    );
    assert_eq!(report["samples"], 24);
    let fields = &report["fields"];
    assert_eq!(fields["mask"]["shape"], serde_json::json!([3, 4, 2]));
    assert_eq!(fields["mask"]["dtype"], "u8");
    let ones: usize = masks().iter().flatten().map(|&m| usize::from(m)).sum();
    assert_eq!(fields["mask"]["checksum"], ones as f64);
    assert_eq!(fields["well"]["checksum"], 24.0, "non-empty strings");
    let volume: f64 = expected(DType::F32)
        .iter()
        .flat_map(|c| {
            c.chunks(4)
                .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
        })
        .sum();
    let got = fields["volume"]["checksum"].as_f64().unwrap();
    assert!((got - volume).abs() < 1e-3, "{got} vs {volume}");
    assert_eq!(
        report["checksum"], fields["volume"]["checksum"],
        "the first field's"
    );
}

#[tokio::test]
async fn compact_converts_a_table_of_several_fields() {
    use voxlake::compact::Compactor;
    let dir = tempfile::tempdir().unwrap();
    // The command line: a LIST field needs its shape (`--field`), the text field is left out.
    let table = dir.path().join("cli");
    let summary = voxlake_testkit::json_output(
        std::process::Command::new(voxlake_testkit::compact_bin())
            .args([
                "convert",
                &fixture("pyarrow_fields"),
                table.to_str().unwrap(),
            ])
            .args([
                "--id-column",
                "sample",
                "--label-column",
                "target",
                "--json",
            ])
            .args([
                "--field",
                "volume",
                "--field",
                "mask=3,4,2",
                "--field",
                "porosity",
            ]),
    );
    assert_eq!(summary["rows"], 24);
    let batches = collect(Loader::builder(table.to_str().unwrap()).with_batch_size(24));
    let b = &batches[0];
    let names: Vec<&str> = b.fields().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["volume", "mask", "porosity"]);
    let (volumes, masks) = (expected(DType::F32), masks());
    let mask = b.field("mask").unwrap().as_bytes().unwrap();
    let porosity = b.field("porosity").unwrap().as_f64().unwrap();
    for (i, id) in b.ids.iter().enumerate() {
        let n = cube(id);
        let volume = &b.tensors.as_bytes().unwrap()[i * 192..(i + 1) * 192];
        assert_eq!(volume, &volumes[n][..], "volume of {id}");
        assert_eq!(mask[i * 24..(i + 1) * 24], masks[n][..], "mask of {id}");
        assert!((porosity[i] - (0.1 + n as f64 / 100.0)).abs() < 1e-12);
        assert_eq!(b.labels[i], Some(n as i64 % 2));
    }
    // The library: `with_fields` names a table's columns (no shapes needed here); a text
    // field is stored as text, read back row for row and covered by the rows' checksums.
    let compactor = |name: &str, fields: &[&str]| {
        Compactor::new(dir.path().join(name).to_str().unwrap())
            .with_sample_columns(voxlake::format::sample::ColumnHints {
                id: Some("sample".into()),
                ..Default::default()
            })
            .with_fields(fields.iter().map(|f| f.to_string()).collect())
    };
    let s = compactor("text", &["volume", "well"])
        .convert(&fixture("pyarrow_fields"))
        .await
        .unwrap();
    assert_eq!(s.tensor, "volume [3, 4, 2, 2] f32, well text");
    let text = dir.path().join("text");
    let batches = collect(
        Loader::builder(text.to_str().unwrap())
            .with_batch_size(24)
            .with_verify_checksums(true),
    );
    let b = &batches[0];
    let well = b.text("well").unwrap();
    for (i, id) in b.ids.iter().enumerate() {
        assert_eq!(well[i], format!("W-{}", cube(id) % 4), "well of {id}");
    }
    // A text changed on disk (the same length: the file stays valid) is caught by the rows'
    // checksums.
    let mut changed = 0;
    for entry in std::fs::read_dir(&text).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let mut bytes = std::fs::read(&path).unwrap();
            for at in 0..bytes.len().saturating_sub(3) {
                if &bytes[at..at + 3] == b"W-1" {
                    bytes[at + 2] = b'9';
                    changed += 1;
                }
            }
            std::fs::write(&path, bytes).unwrap();
        }
    }
    assert!(changed > 0);
    let e = first_error(
        Loader::builder(text.to_str().unwrap()).with_batch_size(24),
        "a table whose text was changed",
    );
    assert!(e.contains("CRC-32"), "{e}");
    let s = compactor("lib", &["volume", "porosity"])
        .convert(&fixture("pyarrow_fields"))
        .await
        .unwrap();
    assert_eq!(s.tensor, "volume [3, 4, 2, 2] f32, porosity [] f64");
    let e = compactor("lib", &["volume"])
        .with_sample_columns(voxlake::format::sample::ColumnHints {
            fields: vec![voxlake::format::sample::FieldHint::new("volume")],
            ..Default::default()
        })
        .convert(&fixture("pyarrow_fields"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("give a table source's fields once"), "{e}");
}

/// A zip bomb among `.npz` sources (`x.npy`'s header says 384 bytes, its data inflates to
/// 600 MB): `compact convert` into a table that knows its arrays' sizes refuses it by name as
/// soon as it inflates past them, and the process's peak memory stays far below what the member
/// inflates to.
#[tokio::test]
async fn a_zip_bomb_is_refused_before_it_inflates() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    numpy_sources(&src, 4);
    let table = dir.path().join("table");
    voxlake::compact::Compactor::new(table.to_str().unwrap())
        .convert(src.join("npz").to_str().unwrap())
        .await
        .unwrap();
    let bomb = src.join("npz/s999.npz");
    let size: u64 = voxlake_testkit::python_script(
        "fields_source.py",
        &["bomb", bomb.to_str().unwrap(), "600"],
    )
    .parse()
    .unwrap();
    assert!(size < 2 << 20, "a {size}-byte archive");
    // Through a small Python parent: a child spawned by this (large) test process would carry
    // the test's own RSS into its `ru_maxrss` (Linux records the old memory's high-water mark
    // at `exec`); the parent's `RUSAGE_CHILDREN` is the converter's alone.
    const MEASURE: &str = "import resource, subprocess, sys\n\
        code = subprocess.run(sys.argv[1:]).returncode\n\
        print('maxrss_kb=%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n\
        sys.exit(code)";
    let out = std::process::Command::new(voxlake_testkit::python())
        .args(["-c", MEASURE])
        .arg(voxlake_testkit::compact_bin())
        .args(["convert", src.join("npz").to_str().unwrap()])
        .arg(&table)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("s999.npz") && stderr.contains("zip bomb"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let kb: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("maxrss_kb="))
        .unwrap()
        .parse()
        .unwrap();
    let peak_mb = kb / 1024;
    assert!(peak_mb < 300, "peak RSS {peak_mb} MB for a 600 MB member");
}
