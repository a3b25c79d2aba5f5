use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, ListBuilder, UInt8Builder};
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeListArray, Int32Array, LargeStringArray, RecordBatch,
    StringArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;

use super::*;

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// `n` rows: ids `r0…`, labels `i % 3` (every fifth null), a fixed_shape_tensor [2, 3] of
/// `10 i + k`, and a list of two bytes `[i, i + 1]`.
fn batch(n: usize) -> RecordBatch {
    let mut tensor = FixedSizeListBuilder::new(Float32Builder::new(), 6);
    let mut mask = ListBuilder::new(UInt8Builder::new());
    for i in 0..n {
        tensor
            .values()
            .append_slice(&(0..6).map(|k| (10 * i + k) as f32).collect::<Vec<_>>());
        tensor.append(true);
        mask.values().append_slice(&[i as u8, i as u8 + 1]);
        mask.append(true);
    }
    let tensor = tensor.finish();
    let mask = mask.finish();
    let meta = HashMap::from([
        (
            "ARROW:extension:name".to_string(),
            voxlake_format::sample::FIXED_SHAPE_TENSOR.to_string(),
        ),
        (
            "ARROW:extension:metadata".to_string(),
            r#"{"shape":[2,3]}"#.to_string(),
        ),
    ]);
    let fields = vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("label", DataType::Int32, true),
        Field::new("tensor", tensor.data_type().clone(), false).with_metadata(meta),
        Field::new("mask", mask.data_type().clone(), false),
    ];
    let ids: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
    let labels: Int32Array = (0..n)
        .map(|i| (i % 5 != 0).then_some((i % 3) as i32))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(ids)),
        Arc::new(labels),
        Arc::new(tensor),
        Arc::new(mask),
    ];
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn reason(e: CompactError) -> String {
    e.to_string()
}

#[test]
fn a_tensor_extension_and_a_list_make_the_sample_and_each_rows_bytes() {
    let b = batch(6);
    let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
    assert_eq!(
        samples.sample().to_string(),
        "tensor [2, 3] f32, mask [2] u8"
    );
    let rows = samples.rows(&b).unwrap();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.id, format!("r{i}"));
        assert_eq!(row.label, (i % 5 != 0).then_some((i % 3) as i64));
        assert_eq!(
            row.fields[0].as_ref(),
            f32_bytes((0..6).map(|k| (10 * i + k) as f32))
        );
        assert_eq!(row.fields[1].as_ref(), [i as u8, i as u8 + 1]);
    }
}

proptest! {
    /// A slice of a batch (offsets into every column's buffers) gives exactly those rows.
    #[test]
    fn a_slice_gives_its_own_rows(n in 1usize..40, a in 0usize..40, len in 0usize..40) {
        let b = batch(n);
        let a = a % n;
        let len = len.min(n - a);
        let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
        let all = samples.rows(&b).unwrap();
        prop_assert_eq!(samples.rows(&b.slice(a, len)).unwrap(), all[a..a + len].to_vec());
    }
}

#[test]
fn a_shape_reshapes_a_list_and_a_wrong_one_is_named() {
    let b = batch(3);
    let shapes = HashMap::from([("mask".to_string(), vec![1, 2])]);
    let samples = ArrowSamples::try_new(&b, &shapes).unwrap();
    assert_eq!(
        samples.sample().to_string(),
        "tensor [2, 3] f32, mask [1, 2] u8"
    );
    let wrong = HashMap::from([("mask".to_string(), vec![3])]);
    let e = reason(ArrowSamples::try_new(&b, &wrong).unwrap_err());
    assert!(e.contains("'mask'") && e.contains("2 values a row"), "{e}");
    let unknown = HashMap::from([("masks".to_string(), vec![2])]);
    let e = reason(ArrowSamples::try_new(&b, &unknown).unwrap_err());
    assert!(
        e.contains("'masks'") && e.contains("no tensor column"),
        "{e}"
    );
    let huge = HashMap::from([("tensor".to_string(), vec![usize::MAX, 2, 3])]);
    assert!(ArrowSamples::try_new(&b, &huge).is_err());
}

#[test]
fn rows_of_another_length_nulls_and_labels_out_of_range_are_named() {
    let mut mask = ListBuilder::new(UInt8Builder::new());
    mask.values().append_slice(&[1, 2]);
    mask.append(true);
    mask.values().append_slice(&[3]);
    mask.append(true);
    mask.append(false);
    let b = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef,
        ),
        ("mask", Arc::new(mask.finish()) as ArrayRef),
    ])
    .unwrap();
    let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
    let e = reason(samples.rows(&b).unwrap_err());
    assert!(e.contains("'mask'") && e.contains("row 'c' is null"), "{e}");
    let e = reason(samples.rows(&b.slice(0, 2)).unwrap_err());
    assert!(e.contains("row 'b' has 1 values"), "{e}");

    let ids = StringArray::from(vec![Some("a"), None]);
    let values = Arc::new(arrow_array::Float32Array::from(vec![1., 2.]));
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let tensor = FixedSizeListArray::new(item, 1, values, None);
    let b = RecordBatch::try_from_iter([
        ("id", Arc::new(ids) as ArrayRef),
        ("tensor", Arc::new(tensor.clone()) as ArrayRef),
        (
            "label",
            Arc::new(UInt64Array::from(vec![1, u64::MAX])) as ArrayRef,
        ),
    ])
    .unwrap();
    let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
    assert!(reason(samples.rows(&b).unwrap_err()).contains("null id"));
    let e = reason(samples.rows(&b.slice(1, 1)).unwrap_err());
    assert!(e.contains("null id"), "{e}");
    let ok = b.slice(0, 1);
    assert_eq!(samples.rows(&ok).unwrap()[0].label, Some(1));
    let big = RecordBatch::try_new(
        b.schema(),
        vec![
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(tensor.slice(0, 1)),
            Arc::new(UInt64Array::from(vec![u64::MAX])),
        ],
    )
    .unwrap();
    let e = reason(samples.rows(&big).unwrap_err());
    assert!(
        e.contains("'label'") && e.contains("18446744073709551615"),
        "{e}"
    );
}

#[test]
fn booleans_are_a_byte_each_and_strings_of_any_width_are_text() {
    let values = Arc::new(BooleanArray::from(vec![true, false, false, true]));
    let item = Arc::new(Field::new("item", DataType::Boolean, false));
    let flags = FixedSizeListArray::new(item, 2, values, None);
    let b = RecordBatch::try_from_iter([
        ("flags", Arc::new(flags) as ArrayRef),
        (
            "id",
            Arc::new(LargeStringArray::from(vec!["a", "b"])) as ArrayRef,
        ),
        (
            "note",
            Arc::new(StringArray::from(vec!["x", "yz"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
    assert_eq!(samples.sample().to_string(), "flags [2] bool, note text");
    let rows = samples.rows(&b).unwrap();
    assert_eq!(rows[1].fields[0].as_ref(), [0, 1]);
    assert_eq!(rows[1].fields[1].as_ref(), b"yz");
}

#[test]
fn columns_that_make_no_sample_are_refused_by_name() {
    let b = batch(2);
    let no_id = b.project(&[1, 2]).unwrap();
    assert!(
        reason(ArrowSamples::try_new(&no_id, &HashMap::new()).unwrap_err())
            .contains("no 'id' column")
    );
    let text_label = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        (
            "label",
            Arc::new(StringArray::from(vec!["cat"])) as ArrayRef,
        ),
        ("x", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
    ])
    .unwrap();
    let e = reason(ArrowSamples::try_new(&text_label, &HashMap::new()).unwrap_err());
    assert!(e.contains("'label'") && e.contains("not an integer"), "{e}");
    let numbers = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        ("x", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
    ])
    .unwrap();
    let e = reason(ArrowSamples::try_new(&numbers, &HashMap::new()).unwrap_err());
    assert!(e.contains("'x'") && e.contains("a tensor column is"), "{e}");
    // A permuted fixed_shape_tensor is not in C order.
    let mut fields: Vec<Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let meta = HashMap::from([
        (
            "ARROW:extension:name".to_string(),
            voxlake_format::sample::FIXED_SHAPE_TENSOR.to_string(),
        ),
        (
            "ARROW:extension:metadata".to_string(),
            r#"{"shape":[2,3],"permutation":[1,0]}"#.to_string(),
        ),
    ]);
    fields[2] = fields[2].clone().with_metadata(meta);
    let permuted =
        RecordBatch::try_new(Arc::new(Schema::new(fields)), b.columns().to_vec()).unwrap();
    let e = reason(ArrowSamples::try_new(&permuted, &HashMap::new()).unwrap_err());
    assert!(e.contains("'tensor'") && e.contains("permutation"), "{e}");
    // A later batch of other columns.
    let samples = ArrowSamples::try_new(&b, &HashMap::new()).unwrap();
    let e = reason(samples.rows(&b.project(&[0, 1, 2]).unwrap()).unwrap_err());
    assert!(e.contains("a batch of columns"), "{e}");
}
