//! Partition values as the Delta protocol serializes them, parsed as their column's type.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, StringArray};
use arrow_cast::CastOptions;
use arrow_schema::DataType;

/// The Delta partition value of an absent partition (Hive's spelling).
pub const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// One partition value as a column of `rows` rows of `data_type`, parsed as the Delta protocol
/// serializes partition values (strings as they are, numbers and bools as text, dates
/// `YYYY-MM-DD`, timestamps `YYYY-MM-DD HH:MM:SS[.ffffff]` or ISO 8601, decimals as text);
/// `None` or [`HIVE_NULL`] is null.
pub fn partition_column(
    value: Option<&str>,
    data_type: &DataType,
    rows: usize,
) -> Result<ArrayRef, String> {
    let value = value.filter(|v| *v != HIVE_NULL);
    let text: ArrayRef = Arc::new(StringArray::from(vec![value; 1]));
    let one = match data_type {
        DataType::Utf8 => text,
        // A timestamp without a zone (Delta's `timestamp_ntz`) may still be written with one.
        _ => arrow_cast::cast_with_options(
            &text,
            data_type,
            &CastOptions {
                safe: false,
                ..Default::default()
            },
        )
        .map_err(|e| format!("partition value {value:?} is not a {data_type}: {e}"))?,
    };
    if value.is_some() && one.is_null(0) {
        return Err(format!("partition value {value:?} is not a {data_type}"));
    }
    let indices = arrow_array::UInt32Array::from(vec![0u32; rows]);
    arrow_select::take::take(&one, &indices, None).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_schema::TimeUnit;

    #[test]
    fn partition_values_parse_as_their_delta_type() {
        let text = partition_column(Some("007"), &DataType::Utf8, 2).unwrap();
        assert_eq!(text.as_string::<i32>().value(1), "007");
        let int = partition_column(Some("007"), &DataType::Int32, 1).unwrap();
        assert_eq!(
            int.as_primitive::<arrow_array::types::Int32Type>().value(0),
            7
        );
        let null = partition_column(Some(HIVE_NULL), &DataType::Int64, 3).unwrap();
        assert_eq!(null.null_count(), 3);
        assert_eq!(
            partition_column(None, &DataType::Utf8, 1)
                .unwrap()
                .null_count(),
            1
        );
        let date = partition_column(Some("2021-01-02"), &DataType::Date32, 1).unwrap();
        assert_eq!(
            date.as_primitive::<arrow_array::types::Date32Type>()
                .value(0),
            18629
        );
        let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        for spelled in ["2021-01-02 03:04:05.000006", "2021-01-02T03:04:05.000006Z"] {
            let ts = partition_column(Some(spelled), &utc, 1).unwrap();
            let micros = ts.as_primitive::<arrow_array::types::TimestampMicrosecondType>();
            assert_eq!(micros.value(0), 1_609_556_645_000_006, "{spelled}");
        }
        let dec = partition_column(Some("-1.25"), &DataType::Decimal128(5, 2), 1).unwrap();
        assert_eq!(
            dec.as_primitive::<arrow_array::types::Decimal128Type>()
                .value(0),
            -125
        );
        assert!(partition_column(Some("x7"), &DataType::Int64, 1).is_err());
        assert!(partition_column(Some("2021-13-40"), &DataType::Date32, 1).is_err());
    }
}
