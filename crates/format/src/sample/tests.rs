//! Unit tests of resolving and normalizing sample columns.

use super::*;
use crate::npy::{EncodeOptions, encode};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_array::{
    BinaryArray, BooleanArray, FixedSizeListArray, Float32Array, Float64Array, Int32Array,
    ListArray,
};
use arrow_buffer::OffsetBuffer;
use std::sync::Arc;

fn le(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap()
}

/// `first` as the first value of every column (what the snapshot reads for BINARY ones).
fn firsts(b: &RecordBatch, first: Option<&[u8]>) -> HashMap<String, Vec<u8>> {
    let Some(first) = first else {
        return HashMap::new();
    };
    b.schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), first.to_vec()))
        .collect()
}

fn try_resolve(
    b: &RecordBatch,
    hints: &ColumnHints,
    first: Option<&[u8]>,
) -> Result<SampleColumns, FormatError> {
    SampleColumns::resolve(&b.schema(), &HashMap::new(), hints, &firsts(b, first))
}

fn resolve(b: &RecordBatch, hints: &ColumnHints, first: Option<&[u8]>) -> SampleColumns {
    try_resolve(b, hints, first).unwrap()
}

fn tensors(out: &RecordBatch) -> Vec<Vec<u8>> {
    let t = out.column_by_name(TENSOR_COLUMN).unwrap().as_binary_view();
    t.iter().map(|v| v.unwrap().to_vec()).collect()
}

fn fsl(values: Vec<f32>, size: i32) -> FixedSizeListArray {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    FixedSizeListArray::new(item, size, Arc::new(Float32Array::from(values)), None)
}

#[test]
fn fixed_shape_tensors_are_viewed_in_place_with_their_recorded_shape() {
    let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
    // A slice: row 0 of the sliced array is row 1 of the values.
    let array = fsl(values.clone(), 4).slice(1, 2);
    let values_at = array.values().to_data().buffers()[0].as_ptr();
    let field =
        Field::new("volume", array.data_type().clone(), false).with_metadata(HashMap::from([
            (EXTENSION_NAME_KEY.into(), FIXED_SHAPE_TENSOR.into()),
            (EXTENSION_METADATA_KEY.into(), r#"{"shape":[2,2]}"#.into()),
        ]));
    let schema = Arc::new(Schema::new(vec![field]));
    let b = RecordBatch::try_new(schema, vec![Arc::new(array)]).unwrap();
    let columns = resolve(&b, &ColumnHints::default(), None);
    assert_eq!(
        *columns.sample.first(),
        TensorSpec::new(vec![2, 2], DType::F32)
    );
    assert!(!columns.native);
    let out = columns.normalize(&b, |r| format!("f#{r}")).unwrap();
    assert_eq!(tensors(&out), vec![le(&values[4..8]), le(&values[8..12])]);
    let ids = out.column_by_name(ID_COLUMN).unwrap().as_string::<i32>();
    assert_eq!(ids.value(1), "f#1");
    // In place: the view's data is the values' buffer.
    let view = out.column_by_name(TENSOR_COLUMN).unwrap().as_binary_view();
    assert_eq!(view.data_buffers().len(), 1);
    assert_eq!(view.data_buffers()[0].as_ptr(), values_at);
    // A shape the metadata contradicts is refused.
    let hints = ColumnHints::default().with_tensor_shape(vec![4], DType::F32);
    let e = try_resolve(&b, &hints, None).unwrap_err();
    assert!(e.to_string().contains("shape [2, 2]"), "{e}");
}

#[test]
fn boolean_lists_are_unpacked_to_a_byte_each() {
    // Masks: bits in Arrow, one byte (0 or 1) per value in a tensor. A slice starting inside
    // a byte of the bitmap, as a fixed-size list and as a list.
    let bits: Vec<bool> = (0..18).map(|i| i % 3 == 0 || i == 7).collect();
    let bools = || Arc::new(BooleanArray::from(bits.clone())) as ArrayRef;
    let item = Arc::new(Field::new("item", DataType::Boolean, false));
    let fixed = FixedSizeListArray::new(item.clone(), 6, bools(), None).slice(1, 2);
    let list = ListArray::new(item, OffsetBuffer::from_lengths([6, 6, 6]), bools(), None);
    let bytes =
        |from: usize| -> Vec<u8> { bits[from..from + 6].iter().map(|&b| u8::from(b)).collect() };
    for (array, shape) in [
        (Arc::new(fixed) as ArrayRef, None),
        (Arc::new(list.slice(1, 2)) as ArrayRef, Some(vec![2, 3])),
    ] {
        let b = batch(vec![("mask", array)]);
        let hints = ColumnHints {
            shape,
            ..ColumnHints::default()
        };
        let columns = resolve(&b, &hints, None);
        assert_eq!(columns.sample.first().dtype(), DType::Bool);
        let out = columns.normalize(&b, |r| r.to_string()).unwrap();
        assert_eq!(tensors(&out), vec![bytes(6), bytes(12)]);
    }
    // A null inside is an error naming the row.
    let mut with_null: Vec<Option<bool>> = bits.iter().map(|&b| Some(b)).collect();
    with_null[9] = None;
    let item = Arc::new(Field::new("item", DataType::Boolean, true));
    let values = Arc::new(BooleanArray::from(with_null));
    let b = batch(vec![(
        "mask",
        Arc::new(ListArray::new(
            item,
            OffsetBuffer::from_lengths([6, 6, 6]),
            values,
            None,
        )) as ArrayRef,
    )]);
    let hints = ColumnHints::default().with_tensor_shape(vec![6], DType::Bool);
    let e = resolve(&b, &hints, None)
        .normalize(&b, |r| r.to_string())
        .unwrap_err();
    assert_eq!(e.row, 1);
    assert!(e.reason.contains("null"), "{e}");
}

#[test]
fn lists_are_checked_row_by_row() {
    let offsets = OffsetBuffer::new(vec![0, 3, 6, 8].into());
    let values = Float64Array::from(vec![1., 2., 3., 4., 5., 6., 7., 8.]);
    let item = Arc::new(Field::new("element", DataType::Float64, false));
    let list = ListArray::new(item, offsets, Arc::new(values), None);
    let b = batch(vec![
        ("volume", Arc::new(list) as ArrayRef),
        (
            "target",
            Arc::new(BooleanArray::from(vec![true, false, true])),
        ),
    ]);
    let e = try_resolve(&b, &ColumnHints::default(), None).unwrap_err();
    assert!(e.to_string().contains("give the shape"), "{e}");
    let hints = ColumnHints {
        shape: Some(vec![3]),
        label: Some("target".into()),
        ..ColumnHints::default()
    };
    let columns = resolve(&b, &hints, None);
    assert_eq!(columns.sample.first().dtype(), DType::F64);
    let e = columns
        .normalize(&b.slice(0, 3), |r| r.to_string())
        .unwrap_err();
    assert_eq!(e.row, 2);
    assert!(e.reason.contains("a list of 2 values"), "{e}");
    let out = columns
        .normalize(&b.slice(1, 1), |r| r.to_string())
        .unwrap();
    assert_eq!(
        tensors(&out)[0],
        [4.0f64, 5., 6.].map(f64::to_le_bytes).concat()
    );
    let labels = out
        .column_by_name(LABEL_COLUMN)
        .unwrap()
        .as_primitive::<Int64Type>();
    assert_eq!(labels.value(0), 0);
}

#[test]
fn raw_bytes_need_a_shape_and_the_right_length() {
    let rows = [le(&[1., 2.]), le(&[3., 4.]), le(&[5.])];
    let b = batch(vec![
        (
            "x",
            Arc::new(BinaryArray::from_iter_values(rows.iter())) as ArrayRef,
        ),
        ("n", Arc::new(Int32Array::from(vec![7, 8, 9]))),
    ]);
    let e = SampleColumns::resolve(
        &b.schema(),
        &HashMap::new(),
        &ColumnHints::default(),
        &firsts(&b, Some(&rows[0])),
    )
    .unwrap_err();
    assert!(e.to_string().contains("raw bytes"), "{e}");
    let hints = ColumnHints::default()
        .with_tensor_shape(vec![2], DType::F32)
        .with_id_column("n");
    let columns = resolve(&b, &hints, Some(&rows[0]));
    assert_eq!(columns.first().encoding, TensorEncoding::Raw);
    let out = columns
        .normalize(&b.slice(0, 2), |_| unreachable!())
        .unwrap();
    assert_eq!(tensors(&out), rows[..2].to_vec());
    let ids = out.column_by_name(ID_COLUMN).unwrap().as_string::<i32>();
    assert_eq!((ids.value(0), ids.value(1)), ("7", "8"));
    let e = columns.normalize(&b, |r| r.to_string()).unwrap_err();
    assert_eq!((e.row, e.reason.contains("4 bytes")), (2, true), "{e}");
}

use crate::fuzz::npz_of as npz;

#[test]
fn an_npz_row_that_inflates_past_its_array_is_refused_before_it_is_held() {
    // 64 MiB of zeros deflate to ~64 KiB: as a cell of a table of [2, 3] f32 tensors it may
    // inflate to 24 bytes and a header, no more.
    let bomb = npz(&vec![0u8; 64 << 20]);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let e = crate::npy::read_npz_capped(&bomb, 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("inflates past 1048576 bytes"), "{e}");
    let rows = BinaryArray::from_iter_values([bomb.as_slice()]);
    let b = batch(vec![("x", Arc::new(rows) as ArrayRef)]);
    let hints = ColumnHints::default().with_tensor_shape(vec![2, 3], DType::F32);
    let plain = encode(DType::F32, &[2, 3], &[0u8; 24], EncodeOptions::default());
    let columns = resolve(&b, &hints, Some(&npz(&plain)));
    let e = columns.normalize(&b, |r| r.to_string()).unwrap_err();
    assert!(e.reason.contains("inflates past"), "{e}");
}

#[test]
fn npy_and_npz_rows_decode_whatever_their_byte_order_and_layout() {
    let values: Vec<f32> = (0..6).map(|v| v as f32 * 0.5).collect();
    let c_order = le(&values);
    let plain = encode(DType::F32, &[2, 3], &c_order, EncodeOptions::default());
    let other = encode(
        DType::F32,
        &[2, 3],
        &c_order,
        EncodeOptions {
            big_endian: true,
            fortran_order: true,
            ..EncodeOptions::default()
        },
    );
    for (encoding, rows) in [
        (TensorEncoding::Npy, vec![plain.clone(), other.clone()]),
        (TensorEncoding::Npz, vec![npz(&plain), npz(&other)]),
    ] {
        let b = batch(vec![(
            "volume",
            Arc::new(BinaryArray::from_iter_values(rows.iter())) as ArrayRef,
        )]);
        let columns = resolve(&b, &ColumnHints::default(), Some(&rows[0]));
        assert_eq!(columns.first().encoding, encoding);
        assert_eq!(
            *columns.sample.first(),
            TensorSpec::new(vec![2, 3], DType::F32)
        );
        let out = columns.normalize(&b, |r| r.to_string()).unwrap();
        assert_eq!(
            tensors(&out),
            vec![c_order.clone(), c_order.clone()],
            "{encoding:?}"
        );
    }
    // A row of another shape is named.
    let wrong = encode(DType::F32, &[3, 2], &c_order, EncodeOptions::default());
    let b = batch(vec![(
        "volume",
        Arc::new(BinaryArray::from_iter_values([&plain, &wrong])) as ArrayRef,
    )]);
    let columns = resolve(&b, &ColumnHints::default(), Some(&plain));
    let e = columns.normalize(&b, |r| r.to_string()).unwrap_err();
    assert_eq!(e.row, 1);
    assert!(e.reason.contains("[3, 2]"), "{e}");
    let bad = batch(vec![(
        "volume",
        Arc::new(BinaryArray::from_iter_values([
            &npz(&plain),
            &plain[..20].to_vec(),
        ])) as ArrayRef,
    )]);
    let columns = resolve(&bad, &ColumnHints::default(), Some(&npz(&plain)));
    let e = columns.normalize(&bad, |r| r.to_string()).unwrap_err();
    assert_eq!(e.row, 1, "{e}");
}

#[test]
fn labels_ids_and_column_choice_are_checked() {
    let b = batch(vec![
        ("a", Arc::new(fsl(vec![0.; 4], 2)) as ArrayRef),
        ("b", Arc::new(fsl(vec![0.; 4], 2))),
        ("score", Arc::new(Float64Array::from(vec![1.0, 2.5]))),
    ]);
    let e = try_resolve(&b, &ColumnHints::default(), None).unwrap_err();
    assert!(e.to_string().contains("several columns"), "{e}");
    let hints = ColumnHints::default()
        .with_tensor_column("b")
        .with_label_column("score");
    let columns = resolve(&b, &hints, None);
    let e = columns.normalize(&b, |r| r.to_string()).unwrap_err();
    assert_eq!(e.row, 1);
    assert!(e.reason.contains("not an integer"), "{e}");
    let e = SampleColumns::resolve(
        &b.schema(),
        &HashMap::new(),
        &ColumnHints::default().with_tensor_column("c"),
        &HashMap::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no column 'c'"), "{e}");
    // voxlake's own table: native, used as decoded.
    let spec = TensorSpec::new(vec![2], DType::F32);
    let native = RecordBatch::new_empty(spec.arrow_schema());
    let columns = SampleColumns::resolve(
        &native.schema(),
        &spec.table_configuration(),
        &ColumnHints::default(),
        &HashMap::new(),
    )
    .unwrap();
    assert!(columns.native);
    assert_eq!(*columns.sample.first(), spec);
}

#[test]
fn several_fields_resolve_and_normalize_each_under_its_name() {
    // A volume (fixed-size list), its mask (a list of u8), a scalar and a string per row.
    let item = Arc::new(arrow_schema::Field::new("item", DataType::Float32, true));
    let x = FixedSizeListArray::new(
        item,
        2,
        Arc::new(Float32Array::from(vec![1.0, 2.0, 3.0, 4.0])),
        None,
    );
    let mask_item = Arc::new(arrow_schema::Field::new("item", DataType::UInt8, true));
    let mask = ListArray::new(
        mask_item,
        OffsetBuffer::from_lengths([2, 2]),
        Arc::new(arrow_array::UInt8Array::from(vec![0u8, 1, 1, 0])),
        None,
    );
    let b = batch(vec![
        ("x", Arc::new(x) as ArrayRef),
        ("mask", Arc::new(mask)),
        ("porosity", Arc::new(Float64Array::from(vec![0.25, 0.5]))),
        (
            "well",
            Arc::new(arrow_array::StringArray::from(vec!["A-1", "B-7"])),
        ),
        ("n", Arc::new(Int32Array::from(vec![7, 8]))),
    ]);
    let hints = ColumnHints::default()
        .with_field(FieldHint::new("x"))
        .with_field(FieldHint {
            shape: Some(vec![2]),
            ..FieldHint::new("mask")
        })
        .with_field(FieldHint::new("porosity"))
        .with_field(FieldHint::new("well"))
        .with_id_column("n");
    let columns = resolve(&b, &hints, None);
    assert_eq!(
        columns.sample.to_string(),
        "x [2] f32, mask [2] u8, porosity [] f64, well text"
    );
    let encodings: Vec<TensorEncoding> = columns.fields.iter().map(|f| f.encoding).collect();
    assert_eq!(
        encodings,
        [
            TensorEncoding::FixedSizeList,
            TensorEncoding::List,
            TensorEncoding::Scalar,
            TensorEncoding::Text
        ]
    );
    assert!(!columns.native);
    let out = columns.normalize(&b, |r| r.to_string()).unwrap();
    let views = |name: &str| -> Vec<Vec<u8>> {
        let v = out.column_by_name(name).unwrap().as_binary_view();
        v.iter().map(|v| v.unwrap().to_vec()).collect()
    };
    assert_eq!(views("x")[1], le(&[3.0, 4.0]));
    assert_eq!(views("mask"), [vec![0u8, 1], vec![1, 0]]);
    assert_eq!(views("porosity")[1], 0.5f64.to_le_bytes());
    let well = out.column_by_name("well").unwrap().as_string::<i32>();
    assert_eq!(well.value(1), "B-7");
    assert_eq!(
        out.column_by_name("id")
            .unwrap()
            .as_string::<i32>()
            .value(0),
        "7"
    );
    // A list of the wrong length names the field's column and the row.
    let short = batch(vec![
        ("x", b.column(0).clone()),
        ("mask", b.column(1).clone()),
    ]);
    let wrong = ColumnHints::default()
        .with_field(FieldHint::new("x"))
        .with_field(FieldHint {
            shape: Some(vec![3]),
            ..FieldHint::new("mask")
        });
    let e = resolve(&short, &wrong, None)
        .normalize(&short, |r| r.to_string())
        .unwrap_err();
    assert_eq!(e.row, 0);
    assert!(
        e.reason.contains("column 'mask': a list of 2 values"),
        "{e}"
    );
}

#[test]
fn fields_are_refused_where_they_cannot_be() {
    let b = batch(vec![
        (
            "well",
            Arc::new(arrow_array::StringArray::from(vec!["A"])) as ArrayRef,
        ),
        ("x", Arc::new(BinaryArray::from_iter_values([[0u8; 4]]))),
    ]);
    let e = |hints: ColumnHints| try_resolve(&b, &hints, None).unwrap_err().to_string();
    let text_first = ColumnHints::default().with_field(FieldHint::new("well"));
    assert!(e(text_first).contains("first field is a tensor"));
    let both = ColumnHints::default()
        .with_tensor_column("x")
        .with_field(FieldHint::new("x"));
    assert!(e(both).contains("not both"));
    let shaped_text = ColumnHints::default()
        .with_field(FieldHint {
            shape: Some(vec![4]),
            dtype: Some(DType::U8),
            ..FieldHint::new("x")
        })
        .with_field(FieldHint {
            shape: Some(vec![1]),
            ..FieldHint::new("well")
        });
    assert!(e(shaped_text).contains("a text field takes no shape"));
    // Without named fields a string column is no tensor.
    assert!(e(ColumnHints::default().with_tensor_column("well")).contains("tensors are read from"));
    // A voxlake table of two fields is native whole, and not when one field is renamed away.
    let sample = SampleSpec::new(vec![
        (
            "x".into(),
            FieldKind::Tensor(TensorSpec::new(vec![2], DType::F32)),
        ),
        (
            "mask".into(),
            FieldKind::Tensor(TensorSpec::new(vec![2], DType::U8)),
        ),
    ])
    .unwrap();
    let native = RecordBatch::new_empty(sample.arrow_schema_with(true));
    let config = sample.table_configuration().unwrap();
    let columns = SampleColumns::resolve(
        &native.schema(),
        &config,
        &ColumnHints::default()
            .with_field(FieldHint::new("x"))
            .with_field(FieldHint::new("mask")),
        &HashMap::new(),
    )
    .unwrap();
    assert!(columns.native);
    assert_eq!(columns.sample, sample);
    let only_mask = SampleColumns::resolve(
        &native.schema(),
        &config,
        &ColumnHints::default().with_field(FieldHint::new("mask")),
        &HashMap::new(),
    )
    .unwrap();
    assert!(
        only_mask.native,
        "a subset of a voxlake table's fields is read as decoded"
    );
    assert_eq!(
        only_mask.sample.first(),
        &TensorSpec::new(vec![2], DType::U8)
    );
}
