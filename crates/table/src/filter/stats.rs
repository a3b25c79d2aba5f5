//! Statistics a filter can skip by, as its values: a Parquet footer's per row group, a Delta
//! add action's per file; and column values as a filter compares them.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;

use super::{Stats, Value};

/// The value of `array` at `i` as a filter sees it (`None`: null or a type filters cannot
/// compare, which the check at open rules out).
pub(crate) fn value_at(array: &ArrayRef, i: usize) -> Option<Value> {
    if array.is_null(i) {
        return None;
    }
    macro_rules! int {
        ($t:ty) => {
            Value::Int(array.as_primitive::<$t>().value(i) as i64)
        };
    }
    Some(match array.data_type() {
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => {
            let v = array.as_primitive::<UInt64Type>().value(i);
            i64::try_from(v).map_or(Value::Float(v as f64), Value::Int)
        }
        DataType::Float16 => Value::Float(
            array
                .as_primitive::<arrow_array::types::Float16Type>()
                .value(i)
                .to_f64(),
        ),
        DataType::Float32 => Value::Float(f64::from(array.as_primitive::<Float32Type>().value(i))),
        DataType::Float64 => Value::Float(array.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => Value::Bool(array.as_boolean().value(i)),
        DataType::Utf8 => Value::Str(array.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Value::Str(array.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Value::Str(array.as_string_view().value(i).to_string()),
        _ => return None,
    })
}

/// The kind of values a column of `data_type` holds, as filter literals name them.
pub(crate) fn kind_of(data_type: &DataType) -> Option<&'static str> {
    match data_type {
        t if t.is_integer() || t.is_floating() => Some("number"),
        DataType::Boolean => Some("bool"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some("string"),
        // Dates and timestamps are written as text ('2024-01-05', '2024-01-05T10:00:00Z'):
        // the literals are turned into the numbers the values compare as (`temporal_literal`).
        t if is_temporal(t) => Some("string"),
        _ => None,
    }
}

pub(crate) fn is_temporal(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
    )
}

/// A date column as days since 1970-01-01 and a timestamp column as microseconds since
/// 1970-01-01 (UTC, or its wall clock without a zone), the numbers the filter's literals of
/// those columns were turned into ([`temporal_literal`]); other columns as they are.
pub(crate) fn comparable(array: &ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError> {
    match array.data_type() {
        DataType::Date32 => arrow_cast::cast(array, &DataType::Int32),
        DataType::Date64 => arrow_cast::cast(
            &arrow_cast::cast(array, &DataType::Date32)?,
            &DataType::Int32,
        ),
        DataType::Timestamp(_, zone) => arrow_cast::cast(
            &arrow_cast::cast(
                array,
                &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, zone.clone()),
            )?,
            &DataType::Int64,
        ),
        _ => Ok(array.clone()),
    }
}

/// A filter's text literal for a date or timestamp column of `data_type`, as the number the
/// column's values compare as (see [`comparable`]): `'2026-01-01'` or `DATE '2026-01-01'` for a
/// date, `'2026-01-01T00:00:00Z'`, `'2026-01-01 00:00:00'` (UTC where the column has a zone)
/// for a timestamp.
pub(crate) fn temporal_literal(text: &str, data_type: &DataType) -> Result<Value, String> {
    let target = match data_type {
        DataType::Date32 | DataType::Date64 => DataType::Date32,
        DataType::Timestamp(_, zone) => {
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, zone.clone())
        }
        other => return Err(format!("{other} is not a date or timestamp")),
    };
    // A year or a month alone is its first instant ('2020' is 2020-01-01T00:00:00), as its
    // text sorts before every later time of it.
    let padded = match text.len() {
        4 if text.bytes().all(|b| b.is_ascii_digit()) => format!("{text}-01-01"),
        7 if text.as_bytes()[4] == b'-' => format!("{text}-01"),
        _ => text.to_string(),
    };
    let one: ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from(vec![padded]));
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let parsed = arrow_cast::cast_with_options(&one, &target, &options)
        .and_then(|a| comparable(&a))
        .map_err(|_| {
            let kind = match target {
                DataType::Date32 => "a date ('2026-01-01')",
                _ => "a timestamp ('2026-01-01T00:00:00Z')",
            };
            format!("'{text}' is not {kind}")
        })?;
    value_at(&parsed, 0).ok_or_else(|| format!("'{text}' is not a date or timestamp"))
}

/// A footer statistic of leaf column `leaf` as a filter value.
pub(crate) fn stats_of(rg: &RowGroupMetaData, leaf: usize) -> Option<Stats> {
    let chunk = rg.columns().get(leaf)?;
    let s = chunk.statistics()?;
    let pair = |min: Option<Value>, max: Option<Value>| (min, max);
    let logical = chunk.column_descr().logical_type_ref();
    let is_date = matches!(logical, Some(parquet::basic::LogicalType::Date));
    let is_timestamp = matches!(logical, Some(parquet::basic::LogicalType::Timestamp { .. }))
        || chunk.column_type() == parquet::basic::Type::INT96;
    let (min, max) = match s {
        Statistics::Boolean(v) => pair(
            v.min_opt().map(|&b| Value::Bool(b)),
            v.max_opt().map(|&b| Value::Bool(b)),
        ),
        // Days since 1970-01-01, as the rows compare.
        Statistics::Int32(v) if is_date => pair(
            v.min_opt().map(|&x| Value::Int(i64::from(x))),
            v.max_opt().map(|&x| Value::Int(i64::from(x))),
        ),
        Statistics::Int32(v) => pair(
            v.min_opt().map(|&x| Value::Int(i64::from(x))),
            v.max_opt().map(|&x| Value::Int(i64::from(x))),
        ),
        // Timestamps compare as microseconds: footers in another unit (and INT96's, whose
        // statistics are not to be trusted) skip nothing, the rows decide.
        Statistics::Int64(v) if is_timestamp => match logical {
            Some(parquet::basic::LogicalType::Timestamp(t))
                if t.unit == parquet::basic::TimeUnit::MICROS =>
            {
                pair(
                    v.min_opt().map(|&x| Value::Int(x)),
                    v.max_opt().map(|&x| Value::Int(x)),
                )
            }
            _ => (None, None),
        },
        Statistics::Int64(v) => pair(
            v.min_opt().map(|&x| Value::Int(x)),
            v.max_opt().map(|&x| Value::Int(x)),
        ),
        Statistics::Float(v) => pair(
            v.min_opt().map(|&x| Value::Float(f64::from(x))),
            v.max_opt().map(|&x| Value::Float(f64::from(x))),
        ),
        Statistics::Double(v) => pair(
            v.min_opt().map(|&x| Value::Float(x)),
            v.max_opt().map(|&x| Value::Float(x)),
        ),
        Statistics::ByteArray(v) => {
            // Strings only when exact (a truncated max would rule out rows that match).
            let text = |b: Option<&parquet::data_type::ByteArray>| {
                b.and_then(|b| std::str::from_utf8(b.data()).ok())
                    .map(|s| Value::Str(s.to_string()))
            };
            (
                text(v.min_opt()).filter(|_| v.min_is_exact()),
                text(v.max_opt()).filter(|_| v.max_is_exact()),
            )
        }
        _ => (None, None),
    };
    // Unsigned columns are stored as signed Parquet integers: their statistics' bits read as
    // signed would misorder large values.
    let unsigned = chunk
        .column_descr()
        .logical_type_ref()
        .is_some_and(|t| matches!(t, parquet::basic::LogicalType::Integer(i) if !i.is_signed));
    let (min, max) = if unsigned { (None, None) } else { (min, max) };
    Some(Stats {
        min,
        max,
        nulls: s.null_count_opt(),
        rows: Some(rg.num_rows().max(0) as u64),
    })
}

/// A Delta add action's statistics for `column`.
pub(crate) fn delta_stats(
    json: &serde_json::Value,
    column: &str,
    like: Option<&Value>,
) -> Option<Stats> {
    let value = |v: &serde_json::Value| -> Option<Value> {
        match v {
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(Value::Int)
                .or_else(|| n.as_f64().map(Value::Float)),
            serde_json::Value::String(s) => match like {
                // Delta writes dates and timestamps as strings: only strings compare to strings.
                Some(Value::Str(_)) => Some(Value::Str(s.clone())),
                _ => None,
            },
            serde_json::Value::Bool(b) => Some(Value::Bool(*b)),
            _ => None,
        }
    };
    let get = |key: &str| json.get(key).and_then(|m| m.get(column));
    let stats = Stats {
        min: get("minValues").and_then(value),
        max: get("maxValues").and_then(value),
        nulls: get("nullCount").and_then(serde_json::Value::as_u64),
        rows: json.get("numRecords").and_then(serde_json::Value::as_u64),
    };
    (stats != Stats::default()).then_some(stats)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn column_values_as_filters_see_them() {
        use arrow_array::{BooleanArray, Float16Array, StringArray, UInt64Array};
        let halves: ArrayRef = Arc::new(Float16Array::from(vec![
            Some(half::f16::from_f32(1.5)),
            None,
        ]));
        assert_eq!(value_at(&halves, 0), Some(Value::Float(1.5)));
        assert_eq!(value_at(&halves, 1), None);
        let big: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX, 7]));
        assert_eq!(value_at(&big, 0), Some(Value::Float(u64::MAX as f64)));
        assert_eq!(value_at(&big, 1), Some(Value::Int(7)));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        assert_eq!(value_at(&text, 0), Some(Value::Str("a".into())));
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true]));
        assert_eq!(value_at(&flags, 0), Some(Value::Bool(true)));
        assert_eq!(kind_of(&DataType::Float16), Some("number"));
        assert_eq!(kind_of(&DataType::Binary), None);
    }

    #[test]
    fn delta_statistics_become_ranges() {
        let json: serde_json::Value = serde_json::from_str(
            r#"{"numRecords":12,"minValues":{"depth":100,"sample":"cube-002","t":"2024-01-01"},"maxValues":{"depth":330,"sample":"cube-023"},"nullCount":{"depth":0}}"#,
        )
        .unwrap();
        let s = delta_stats(&json, "depth", Some(&Value::Int(1))).unwrap();
        assert_eq!(
            s,
            Stats {
                min: Some(Value::Int(100)),
                max: Some(Value::Int(330)),
                nulls: Some(0),
                rows: Some(12)
            }
        );
        // A string statistic compares only with string literals.
        let s = delta_stats(&json, "t", Some(&Value::Int(1))).unwrap();
        assert_eq!((s.min, s.rows), (None, Some(12)));
        assert!(
            delta_stats(&json, "sample", Some(&Value::Str(String::new())))
                .unwrap()
                .max
                .is_some()
        );
    }
}
