//! The `.npy` codec: numpy's array file format, versions 1.0, 2.0 and 3.0.
//!
//! [`NpyArray::parse`] reads the header and checks it against the bytes that follow without
//! copying; [`NpyArray::write_le_c`] converts the values to a table element type, little-endian
//! and C order, which is how voxlake stores every tensor. [`encode`] writes `.npy` files
//! (the synthetic data generator and the tests use it).
//!
//! ```
//! use voxlake_format::npy::{encode, EncodeOptions, NpyArray};
//! use voxlake_format::{Casting, DType};
//!
//! let values: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let file = encode(DType::F32, &[2, 2], &values, EncodeOptions::default());
//! let array = NpyArray::parse(&file)?;
//! assert_eq!(array.shape(), &[2, 2]);
//! let mut f64_bytes = Vec::new();
//! array.write_le_c(DType::F64, Casting::Safe, &mut f64_bytes)?;
//! assert_eq!(f64_bytes.len(), 4 * 8);
//! # Ok::<(), voxlake_format::FormatError>(())
//! ```

use half::f16;

use crate::{Casting, DType, FormatError};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

mod header;

use header::{header_err, parse_descr, parse_header_dict};

/// A parsed `.npy` file: its header and a borrowed view of its data.
#[derive(Debug, Clone)]
pub struct NpyArray<'a> {
    dtype: DType,
    big_endian: bool,
    fortran_order: bool,
    shape: Vec<usize>,
    version: (u8, u8),
    data: &'a [u8],
}

impl<'a> NpyArray<'a> {
    /// Parses and validates a whole `.npy` file held in memory.
    ///
    /// Errors name the problem: not an npy file, an unsupported version or dtype, a header
    /// that does not parse, or data whose length differs from what the header declares.
    pub fn parse(file: &'a [u8]) -> Result<Self, FormatError> {
        if file.len() < 10 {
            return Err(FormatError::Npy(format!(
                "truncated: {} bytes, shorter than the npy preamble",
                file.len()
            )));
        }
        if &file[..6] != MAGIC {
            return Err(FormatError::Npy(
                "not an npy file (wrong magic bytes)".into(),
            ));
        }
        let version = (file[6], file[7]);
        let (header_start, header_len) = match version.0 {
            1 => (10, u16::from_le_bytes([file[8], file[9]]) as usize),
            2 | 3 => {
                if file.len() < 12 {
                    return Err(FormatError::Npy("truncated npy preamble".into()));
                }
                (
                    12,
                    u32::from_le_bytes([file[8], file[9], file[10], file[11]]) as usize,
                )
            }
            _ => {
                return Err(FormatError::Npy(format!(
                    "unsupported npy format version {}.{}",
                    version.0, version.1
                )));
            }
        };
        let data_start = header_start + header_len;
        if data_start > file.len() {
            return Err(FormatError::Npy(format!(
                "truncated: the header claims {header_len} bytes but the file has only {}",
                file.len() - header_start
            )));
        }
        let raw = &file[header_start..data_start];
        // Versions 1 and 2 are latin-1, version 3 is UTF-8.
        let header: String = if version.0 == 3 {
            std::str::from_utf8(raw)
                .map_err(|_| FormatError::Npy("header is not valid UTF-8".into()))?
                .to_string()
        } else {
            raw.iter().map(|&b| b as char).collect()
        };
        let dict = parse_header_dict(&header)?;
        let descr = dict.descr.ok_or_else(|| header_err("no 'descr' key"))?;
        let fortran_order = dict
            .fortran_order
            .ok_or_else(|| header_err("no 'fortran_order' key"))?;
        let shape = dict.shape.ok_or_else(|| header_err("no 'shape' key"))?;
        let (dtype, big_endian) = parse_descr(&descr)?;

        let numel = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| header_err("shape overflows"))?;
        let expected = numel
            .checked_mul(dtype.size())
            .ok_or_else(|| header_err("shape overflows"))?;
        let data = &file[data_start..];
        if data.len() != expected {
            return Err(FormatError::Npy(format!(
                "data size mismatch: header declares shape {shape:?} of {descr} = {expected} bytes, \
                 the file holds {} bytes of data",
                data.len()
            )));
        }
        Ok(NpyArray {
            dtype,
            big_endian,
            fortran_order,
            shape,
            version,
            data,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, as in the header.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Whether the values are stored big-endian.
    pub fn is_big_endian(&self) -> bool {
        self.big_endian
    }

    /// Whether the values are stored in Fortran (column-major) order.
    pub fn is_fortran_order(&self) -> bool {
        self.fortran_order
    }

    /// The format version `(major, minor)`.
    pub fn version(&self) -> (u8, u8) {
        self.version
    }

    /// The raw data bytes, exactly as stored.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the stored bytes are already `to`, little-endian, C order: then
    /// [`data`](Self::data) can be used as is, without a copy.
    pub fn is_le_c(&self, to: DType) -> bool {
        self.dtype == to && (!self.big_endian || self.dtype.size() == 1) && !self.fortran_order
    }

    /// Appends the values to `out` as `to`, little-endian, in C order.
    ///
    /// Fails if `casting` does not allow converting this array's type to `to`.
    pub fn write_le_c(
        &self,
        to: DType,
        casting: Casting,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        if !self.dtype.can_cast(to, casting) {
            return Err(FormatError::CannotCast {
                from: self.dtype,
                to,
                casting,
            });
        }
        let n = self.len();
        let size = self.dtype.size();
        out.reserve(n * to.size());
        if self.is_le_c(to) {
            out.extend_from_slice(self.data);
            return Ok(());
        }
        let swap = self.big_endian && size > 1;
        if !self.fortran_order && self.dtype == to {
            // Same type, other byte order: swap each value.
            for chunk in self.data.chunks_exact(size) {
                out.extend(chunk.iter().rev());
            }
            debug_assert!(swap);
            return Ok(());
        }
        let mut index = CIndexToSource::new(&self.shape, self.fortran_order);
        let mut buf = [0u8; 8];
        for _ in 0..n {
            let src = index.next_source();
            let bytes = &self.data[src * size..src * size + size];
            buf[..size].copy_from_slice(bytes);
            if swap {
                buf[..size].reverse();
            }
            let value = read_value(self.dtype, &buf[..size]);
            write_value(to, value, out);
        }
        Ok(())
    }
}

/// Walks an array in C order and yields, for each element, its index in the stored order.
struct CIndexToSource {
    shape: Vec<usize>,
    /// Stride of each axis in the stored order (elements).
    strides: Vec<usize>,
    index: Vec<usize>,
    source: usize,
    started: bool,
}

impl CIndexToSource {
    fn new(shape: &[usize], fortran: bool) -> Self {
        let mut strides = vec![0; shape.len()];
        let mut acc = 1;
        if fortran {
            for (axis, &dim) in shape.iter().enumerate() {
                strides[axis] = acc;
                acc *= dim;
            }
        } else {
            for (axis, &dim) in shape.iter().enumerate().rev() {
                strides[axis] = acc;
                acc *= dim;
            }
        }
        CIndexToSource {
            shape: shape.to_vec(),
            strides,
            index: vec![0; shape.len()],
            source: 0,
            started: false,
        }
    }

    fn next_source(&mut self) -> usize {
        if !self.started {
            self.started = true;
            return 0;
        }
        // Odometer: the last axis moves fastest in C order.
        for axis in (0..self.shape.len()).rev() {
            self.index[axis] += 1;
            self.source += self.strides[axis];
            if self.index[axis] < self.shape[axis] {
                break;
            }
            self.source -= self.strides[axis] * self.index[axis];
            self.index[axis] = 0;
        }
        self.source
    }
}

#[derive(Clone, Copy)]
enum Value {
    Int(i128),
    Float(f64),
}

fn read_value(dtype: DType, b: &[u8]) -> Value {
    match dtype {
        DType::Bool => Value::Int(i128::from(b[0] != 0)),
        DType::I8 => Value::Int(i128::from(b[0] as i8)),
        DType::U8 => Value::Int(i128::from(b[0])),
        DType::I16 => Value::Int(i128::from(i16::from_le_bytes([b[0], b[1]]))),
        DType::U16 => Value::Int(i128::from(u16::from_le_bytes([b[0], b[1]]))),
        DType::I32 => Value::Int(i128::from(i32::from_le_bytes(le(b)))),
        DType::U32 => Value::Int(i128::from(u32::from_le_bytes(le(b)))),
        DType::I64 => Value::Int(i128::from(i64::from_le_bytes(le(b)))),
        DType::U64 => Value::Int(i128::from(u64::from_le_bytes(le(b)))),
        DType::F16 => Value::Float(f16::from_le_bytes([b[0], b[1]]).to_f64()),
        DType::BF16 => Value::Float(half::bf16::from_le_bytes([b[0], b[1]]).to_f64()),
        DType::F32 => Value::Float(f64::from(f32::from_le_bytes(le(b)))),
        DType::F64 => Value::Float(f64::from_le_bytes(le(b))),
    }
}

/// The first `N` bytes of `b` as an array (zeros past its end: callers pass one item).
fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    a
}

/// Writes one value; integer narrowing wraps like numpy's `astype`. The casting rules never
/// send a float to an integer or bool type.
fn write_value(to: DType, value: Value, out: &mut Vec<u8>) {
    let as_f64 = |v: Value| match v {
        Value::Int(i) => i as f64,
        Value::Float(f) => f,
    };
    let as_int = |v: Value| match v {
        Value::Int(i) => i,
        Value::Float(f) => f as i128,
    };
    match to {
        DType::Bool => out.push(u8::from(as_int(value) != 0)),
        DType::I8 => out.push(as_int(value) as i8 as u8),
        DType::U8 => out.push(as_int(value) as u8),
        DType::I16 => out.extend_from_slice(&(as_int(value) as i16).to_le_bytes()),
        DType::U16 => out.extend_from_slice(&(as_int(value) as u16).to_le_bytes()),
        DType::I32 => out.extend_from_slice(&(as_int(value) as i32).to_le_bytes()),
        DType::U32 => out.extend_from_slice(&(as_int(value) as u32).to_le_bytes()),
        DType::I64 => out.extend_from_slice(&(as_int(value) as i64).to_le_bytes()),
        DType::U64 => out.extend_from_slice(&(as_int(value) as u64).to_le_bytes()),
        DType::F16 => out.extend_from_slice(&f16::from_f64(as_f64(value)).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(as_f64(value)).to_le_bytes()),
        DType::F32 => out.extend_from_slice(&(as_f64(value) as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&as_f64(value).to_le_bytes()),
    }
}

/// How [`encode`] lays out a file.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// Format major version: 1, 2 or 3.
    pub version: u8,
    /// Store values big-endian.
    pub big_endian: bool,
    /// Store values in Fortran order.
    pub fortran_order: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            version: 1,
            big_endian: false,
            fortran_order: false,
        }
    }
}

/// The named arrays of an `.npz` archive (`np.savez`, `np.savez_compressed`): each member's
/// name without `.npy` and its `.npy` bytes (inflated), in archive order. An archive that does
/// not open, or a member that does not inflate, is an error naming it.
pub fn read_npz(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, FormatError> {
    read_npz_capped(bytes, NPZ_DEFAULT_CAP)
}

/// What an archive's members may inflate to together when nothing says what they hold
/// ([`read_npz`]): 1 GiB. Where the arrays' spec is known, the cap is their size.
pub const NPZ_DEFAULT_CAP: u64 = 1 << 30;

/// Room for an `.npy` header (at most 64 KiB in versions 2 and 3) beside its data.
pub const NPY_HEADER_ROOM: u64 = 1 << 16;

/// [`read_npz`], the members inflating to at most `cap` bytes together: an archive that
/// inflates past it (a zip bomb, or not the arrays expected) is an error before more memory
/// is taken.
pub fn read_npz_capped(bytes: &[u8], cap: u64) -> Result<Vec<(String, Vec<u8>)>, FormatError> {
    use std::io::Read;
    let npz = |m: String| FormatError::Npy(m);
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| npz(format!("not a readable npz archive: {e}")))?;
    let mut out = Vec::with_capacity(archive.len().min(1 << 10));
    let mut left = cap;
    for index in 0..archive.len() {
        let member = archive
            .by_index(index)
            .map_err(|e| npz(format!("npz member {index} does not open: {e}")))?;
        let name = member.name().to_string();
        // A member's claimed size is read, not trusted: grown as it inflates, up to the cap.
        let mut data = Vec::with_capacity(member.size().min(left).min(1 << 30) as usize);
        member
            .take(left.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| npz(format!("npz member '{name}' does not inflate: {e}")))?;
        left = left.checked_sub(data.len() as u64).ok_or_else(|| {
            npz(format!(
                "npz member '{name}' inflates past {cap} bytes, more than the arrays expected (a zip bomb?)"
            ))
        })?;
        let name = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        out.push((name, data));
    }
    Ok(out)
}

/// Writes an `.npy` file of `dtype` and `shape` from values given little-endian in C order.
///
/// # Panics
/// If `values` is not `shape`'s element count times the item size, the version is not 1–3, or
/// the type is bf16 (numpy has none).
pub fn encode(dtype: DType, shape: &[usize], values: &[u8], options: EncodeOptions) -> Vec<u8> {
    assert!(dtype != DType::BF16, "numpy has no bfloat16 type");
    let size = dtype.size();
    let numel: usize = shape.iter().product();
    assert_eq!(values.len(), numel * size, "values do not match the shape");
    assert!(
        (1..=3).contains(&options.version),
        "npy versions are 1, 2, 3"
    );
    let order = if size == 1 {
        '|'
    } else if options.big_endian {
        '>'
    } else {
        '<'
    };
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_str = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{order}{}{}', 'fortran_order': {}, 'shape': {shape_str}, }}",
        dtype.numpy_kind(),
        size,
        if options.fortran_order {
            "True"
        } else {
            "False"
        },
    );
    let prefix = if options.version == 1 { 10 } else { 12 };
    // numpy pads so that the data starts on a 64-byte boundary.
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    header.extend(std::iter::repeat_n(' ', total - prefix - header.len() - 1));
    header.push('\n');

    let mut out = Vec::with_capacity(total + values.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[options.version, 0]);
    if options.version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());

    let mut index = CIndexToSource::new(shape, options.fortran_order);
    if !options.fortran_order && !options.big_endian {
        out.extend_from_slice(values);
    } else {
        // Scatter C-order values to their stored positions.
        let start = out.len();
        out.resize(start + values.len(), 0);
        for chunk in values.chunks_exact(size) {
            let dst = start + index.next_source() * size;
            let slot = &mut out[dst..dst + size];
            slot.copy_from_slice(chunk);
            if options.big_endian {
                slot.reverse();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values 0..n as `dtype`, little-endian C order (bools alternate).
    fn ramp(dtype: DType, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let v = if dtype == DType::Bool {
                Value::Int((i % 2) as i128)
            } else {
                Value::Int(i as i128)
            };
            write_value(dtype, v, &mut out);
        }
        out
    }

    #[test]
    fn every_dtype_order_endian_and_version_round_trips() {
        let shape = [3, 4, 5];
        // numpy has no bf16 (conversions to it are tested below).
        for dtype in DType::ALL.into_iter().filter(|&d| d != DType::BF16) {
            let values = ramp(dtype, 60);
            for version in 1..=3 {
                for big_endian in [false, true] {
                    for fortran_order in [false, true] {
                        let opts = EncodeOptions {
                            version,
                            big_endian,
                            fortran_order,
                        };
                        let file = encode(dtype, &shape, &values, opts);
                        let a = NpyArray::parse(&file).unwrap();
                        assert_eq!(a.dtype(), dtype);
                        assert_eq!(a.shape(), &shape);
                        assert_eq!(a.version(), (version, 0));
                        assert_eq!(a.is_fortran_order(), fortran_order);
                        let mut out = Vec::new();
                        a.write_le_c(dtype, Casting::Safe, &mut out).unwrap();
                        assert_eq!(out, values, "{dtype} {opts:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn fortran_order_is_transposed_to_c_order() {
        // numpy: np.asfortranarray(np.arange(6, dtype='<i4').reshape(2, 3)) stores 0 3 1 4 2 5.
        let stored: Vec<u8> = [0i32, 3, 1, 4, 2, 5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut file = encode(DType::I32, &[2, 3], &stored, EncodeOptions::default());
        let header_end = file.iter().position(|&b| b == b'\n').unwrap();
        let header = String::from_utf8(file[10..header_end].to_vec()).unwrap();
        let patched = header.replace("'fortran_order': False", "'fortran_order': True ");
        file[10..header_end].copy_from_slice(patched.as_bytes());
        let a = NpyArray::parse(&file).unwrap();
        let mut out = Vec::new();
        a.write_le_c(DType::I32, Casting::Safe, &mut out).unwrap();
        let got: Vec<i32> = out
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn parses_numpy_written_headers() {
        // Exactly what numpy 2.x writes for np.zeros((30,30,10,10), '<f4').
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (30, 30, 10, 10), }";
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<117}\n");
        file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        file.extend_from_slice(padded.as_bytes());
        assert_eq!(file.len() % 64, 0);
        file.resize(file.len() + 360_000, 0);
        let a = NpyArray::parse(&file).unwrap();
        assert_eq!(a.shape(), &[30, 30, 10, 10]);
        assert!(a.is_le_c(DType::F32));
        // Scalars, 1-d shapes, old long-int suffixes and double quotes.
        for (h, shape) in [
            (
                "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                vec![],
            ),
            (
                "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
                vec![1],
            ),
            (
                "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (1L, 1L)}",
                vec![1, 1],
            ),
        ] {
            let mut f = b"\x93NUMPY\x01\x00".to_vec();
            f.extend_from_slice(&(h.len() as u16 + 1).to_le_bytes());
            f.extend_from_slice(h.as_bytes());
            f.push(b'\n');
            f.extend_from_slice(&[0u8; 8]);
            assert_eq!(
                NpyArray::parse(&f).unwrap().shape(),
                shape.as_slice(),
                "{h}"
            );
        }
    }

    fn err(file: &[u8]) -> String {
        NpyArray::parse(file).unwrap_err().to_string()
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let good = encode(DType::F32, &[2, 2], &[0u8; 16], EncodeOptions::default());
        assert!(err(&good[..5]).contains("truncated"));
        let mut magic = good.clone();
        magic[1] = b'X';
        assert!(err(&magic).contains("wrong magic"));
        let mut version = good.clone();
        version[6] = 9;
        assert!(err(&version).contains("version 9.0"));
        // Data shorter or longer than the header declares.
        assert!(err(&good[..good.len() - 1]).contains("data size mismatch"));
        let mut long = good.clone();
        long.push(0);
        assert!(err(&long).contains("data size mismatch"));
        // A header length that points past the end of the file.
        let mut lying = good.clone();
        lying[8..10].copy_from_slice(&60_000u16.to_le_bytes());
        assert!(err(&lying).contains("the header claims 60000 bytes"));
        // Garbage, unsupported dtypes and structured arrays.
        let with_header = |h: &str| {
            let mut f = b"\x93NUMPY\x01\x00".to_vec();
            f.extend_from_slice(&(h.len() as u16).to_le_bytes());
            f.extend_from_slice(h.as_bytes());
            f
        };
        assert!(
            err(&with_header(
                "{'descr': '<c8', 'fortran_order': False, 'shape': (), }"
            ))
            .contains("unsupported dtype '<c8'")
        );
        assert!(
            err(&with_header(
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }"
            ))
            .contains("structured")
        );
        assert!(err(&with_header("{'descr': '<f4', 'shape': (), }")).contains("fortran_order"));
        assert!(
            err(&with_header(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"
            ))
            .contains("shape")
        );
        assert!(err(&with_header("not a dict")).contains("bad header"));
    }

    #[test]
    fn conversions_follow_the_casting_rule() {
        let values: Vec<u8> = [1.5f64, -2.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let file = encode(DType::F64, &[2], &values, EncodeOptions::default());
        let a = NpyArray::parse(&file).unwrap();
        let mut out = Vec::new();
        let e = a
            .write_le_c(DType::F32, Casting::Safe, &mut out)
            .unwrap_err();
        assert!(
            e.to_string().contains("f64 cannot be converted to f32"),
            "{e}"
        );
        a.write_le_c(DType::F32, Casting::SameKind, &mut out)
            .unwrap();
        assert_eq!(
            out,
            [1.5f32, -2.25]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        // To bfloat16 (both values exact in its 8-bit mantissa).
        let mut bf = Vec::new();
        a.write_le_c(DType::BF16, Casting::SameKind, &mut bf)
            .unwrap();
        assert_eq!(
            bf,
            [1.5f32, -2.25]
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect::<Vec<_>>()
        );
        assert!(
            a.write_le_c(DType::I64, Casting::SameKind, &mut out)
                .is_err()
        );

        let ints: Vec<u8> = [-3i16, 300].iter().flat_map(|v| v.to_le_bytes()).collect();
        let file = encode(
            DType::I16,
            &[2],
            &ints,
            EncodeOptions {
                big_endian: true,
                ..Default::default()
            },
        );
        let a = NpyArray::parse(&file).unwrap();
        let mut out = Vec::new();
        a.write_le_c(DType::F16, Casting::Safe, &mut out)
            .unwrap_err();
        a.write_le_c(DType::F32, Casting::Safe, &mut out).unwrap();
        assert_eq!(
            out,
            [-3.0f32, 300.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let mut out = Vec::new();
        a.write_le_c(DType::F16, Casting::SameKind, &mut out)
            .unwrap();
        assert_eq!(
            out,
            [f16::from_f32(-3.0), f16::from_f32(300.0)]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }
}
