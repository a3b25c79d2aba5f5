//! Dates, timestamps and decimals as fields: the dtype each is read as and what its numbers
//! mean.

use arrow_schema::DataType;

use crate::DType;

/// The largest decimal precision read as f64: up to 15 significant digits every decimal is
/// told apart by its nearest f64, which prints back to the same digits at its scale.
pub const MAX_EXACT_DECIMAL_PRECISION: u8 = 15;

/// The dtype a date, timestamp or decimal column is read as (see [`unit_of`]).
pub(super) fn temporal_dtype_of(data_type: &DataType) -> Option<DType> {
    match data_type {
        DataType::Date32 => Some(DType::I32),
        DataType::Timestamp(_, _) => Some(DType::I64),
        DataType::Decimal128(p, _) if *p <= MAX_EXACT_DECIMAL_PRECISION => Some(DType::F64),
        _ => None,
    }
}

/// What a date's, timestamp's or decimal's number means, for `inspect` and docs.
pub(super) fn unit_of(data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::Date32 => Some("days since 1970-01-01".into()),
        DataType::Timestamp(_, Some(zone)) => {
            Some(format!("microseconds since 1970-01-01T00:00:00 {zone}"))
        }
        DataType::Timestamp(_, None) => {
            Some("microseconds since 1970-01-01T00:00:00, wall-clock time without a zone".into())
        }
        DataType::Decimal128(p, s) => Some(format!("decimal({p},{s}) as the nearest f64")),
        _ => None,
    }
}
