//! Element types of the tensors voxlake stores, and the casts between them.

use std::fmt;
use std::str::FromStr;

use crate::FormatError;

/// The element type of a tensor.
///
/// Values are always stored little-endian in the table; the names are numpy's short codes
/// (`f32` is numpy's `<f4`). Not `#[non_exhaustive]` on purpose: the loader's kernels match
/// every type, and a type added here must fail their build until each handles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`, one byte per value (0 or 1).
    Bool,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `uint8`.
    U8,
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
    /// `uint64`.
    U64,
    /// `float16` (IEEE half).
    F16,
    /// `bfloat16` (brain float: f32's exponent, 8 bits of mantissa). numpy has no such type:
    /// no `.npy` file holds it, but a table may (`compact convert --dtype bf16`) and a
    /// transform may hand it out.
    BF16,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

/// How far a conversion between element types may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Casting {
    /// Only casts that keep every value exactly (numpy's `safe`): `f16 → f32`, `u8 → i16`, …
    Safe,
    /// Also narrowing within a kind or towards floats (numpy's `same_kind`): `f64 → f32`,
    /// `i64 → f32`, `i32 → i16`. Never float → integer.
    SameKind,
}

/// The kind of a type, in numpy's order `b < u < i < f` (a cast may only go up or stay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Bool,
    Unsigned,
    Signed,
    Float,
}

impl DType {
    /// The element type of an Arrow number type (`Boolean` a byte each); `None` for any
    /// other type.
    pub fn of_arrow(data_type: &arrow_schema::DataType) -> Option<DType> {
        use arrow_schema::DataType as A;
        Some(match data_type {
            A::Boolean => DType::Bool,
            A::Int8 => DType::I8,
            A::Int16 => DType::I16,
            A::Int32 => DType::I32,
            A::Int64 => DType::I64,
            A::UInt8 => DType::U8,
            A::UInt16 => DType::U16,
            A::UInt32 => DType::U32,
            A::UInt64 => DType::U64,
            A::Float16 => DType::F16,
            A::Float32 => DType::F32,
            A::Float64 => DType::F64,
            _ => return None,
        })
    }

    /// Every element type, in a stable order.
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one value in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The short name used in table metadata and on the command line (`f32`, `u8`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// numpy's type character (`f`, `i`, `u`, `b`).
    pub(crate) fn numpy_kind(self) -> char {
        match self.kind() {
            Kind::Bool => 'b',
            Kind::Unsigned => 'u',
            Kind::Signed => 'i',
            Kind::Float => 'f',
        }
    }

    /// The type for a numpy kind character and item size, if voxlake supports it.
    pub(crate) fn from_numpy(kind: char, size: usize) -> Option<DType> {
        Some(match (kind, size) {
            ('b', 1) => DType::Bool,
            ('i', 1) => DType::I8,
            ('i', 2) => DType::I16,
            ('i', 4) => DType::I32,
            ('i', 8) => DType::I64,
            ('u', 1) => DType::U8,
            ('u', 2) => DType::U16,
            ('u', 4) => DType::U32,
            ('u', 8) => DType::U64,
            ('f', 2) => DType::F16,
            ('f', 4) => DType::F32,
            ('f', 8) => DType::F64,
            _ => return None,
        })
    }

    fn kind(self) -> Kind {
        match self {
            DType::Bool => Kind::Bool,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Kind::Unsigned,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Kind::Signed,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => Kind::Float,
        }
    }

    /// Whether values of `self` may be converted to `to` under `casting` (numpy's rules).
    pub fn can_cast(self, to: DType, casting: Casting) -> bool {
        if self == to {
            return true;
        }
        let (from_kind, to_kind) = (self.kind(), to.kind());
        match casting {
            Casting::SameKind => from_kind <= to_kind,
            Casting::Safe => match (from_kind, to_kind) {
                (Kind::Bool, _) => true,
                (a, b) if a == b => to.size() > self.size(),
                // u → i needs one more bit.
                (Kind::Unsigned, Kind::Signed) => to.size() > self.size(),
                // Integers fit a float whose mantissa holds every value.
                (Kind::Unsigned | Kind::Signed, Kind::Float) => {
                    let bits = self.size() * 8 - usize::from(from_kind == Kind::Signed);
                    let mantissa = match to {
                        DType::BF16 => 8,
                        DType::F16 => 11,
                        DType::F32 => 24,
                        _ => 53,
                    };
                    bits <= mantissa
                }
                _ => false,
            },
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = FormatError;

    /// Accepts the short names (`f32`), numpy names (`float32`) and numpy codes (`<f4`, `f4`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let by_name = DType::ALL.iter().copied().find(|d| {
            d.name() == t
                || match d {
                    DType::Bool => t == "bool_",
                    DType::I8 => t == "int8",
                    DType::I16 => t == "int16",
                    DType::I32 => t == "int32",
                    DType::I64 => t == "int64",
                    DType::U8 => t == "uint8",
                    DType::U16 => t == "uint16",
                    DType::U32 => t == "uint32",
                    DType::U64 => t == "uint64",
                    DType::F16 => t == "float16",
                    DType::BF16 => t == "bfloat16",
                    DType::F32 => t == "float32",
                    DType::F64 => t == "float64",
                }
        });
        if let Some(d) = by_name {
            return Ok(d);
        }
        let code = t.trim_start_matches(['<', '>', '|', '=']);
        let mut chars = code.chars();
        if let (Some(kind), Ok(size)) = (chars.next(), chars.as_str().parse::<usize>())
            && let Some(d) = DType::from_numpy(kind, size)
        {
            return Ok(d);
        }
        Err(FormatError::UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
            // numpy has no bf16: its code is f16's.
            let code = format!("<{}{}", d.numpy_kind(), d.size());
            let numpy = if d == DType::BF16 { DType::F16 } else { d };
            assert_eq!(code.parse::<DType>().unwrap(), numpy);
        }
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::BF16);
        assert_eq!("float32".parse::<DType>().unwrap(), DType::F32);
        assert!("complex64".parse::<DType>().is_err());
        assert!("f3".parse::<DType>().is_err());
    }

    #[test]
    fn casting_rules_follow_numpy() {
        use DType::*;
        // bf16: f32's range, 8 bits of mantissa.
        assert!(BF16.can_cast(F32, Casting::Safe) && U8.can_cast(BF16, Casting::Safe));
        assert!(!F16.can_cast(BF16, Casting::Safe) && !I16.can_cast(BF16, Casting::Safe));
        assert!(F32.can_cast(BF16, Casting::SameKind) && !BF16.can_cast(F16, Casting::Safe));
        assert!(F16.can_cast(F32, Casting::Safe));
        assert!(!F64.can_cast(F32, Casting::Safe));
        assert!(F64.can_cast(F32, Casting::SameKind));
        assert!(U8.can_cast(I16, Casting::Safe));
        assert!(!U8.can_cast(I8, Casting::Safe));
        assert!(I16.can_cast(F32, Casting::Safe));
        assert!(!I32.can_cast(F32, Casting::Safe));
        assert!(I32.can_cast(F64, Casting::Safe));
        assert!(I64.can_cast(F32, Casting::SameKind));
        assert!(!F32.can_cast(I64, Casting::SameKind));
        assert!(!I8.can_cast(U8, Casting::SameKind));
        assert!(Bool.can_cast(F16, Casting::Safe));
        assert!(!F32.can_cast(Bool, Casting::SameKind));
    }
}
