//! Generated and mutated inputs for the parsers (proptest; the stable-toolchain stand-in for a
//! fuzzer): the npy header parser and the table metadata never panic, and never allocate what
//! a header claims before checking it against the bytes that are there.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::npy::{EncodeOptions, NpyArray, encode};
use crate::{DType, TensorSpec};

/// A valid small npy file of some type, shape and options.
fn valid_npy() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![
            DType::F32,
            DType::F64,
            DType::I16,
            DType::U8,
            DType::F16,
        ]),
        prop::collection::vec(1usize..4, 0..4),
        1u8..=3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(dtype, shape, version, big_endian, fortran_order)| {
            let n: usize = shape.iter().product();
            let values = vec![7u8; n * dtype.size()];
            encode(
                dtype,
                &shape,
                &values,
                EncodeOptions {
                    version,
                    big_endian,
                    fortran_order,
                },
            )
        })
}

proptest! {
    // More where benches/fuzz.sh asks (PROPTEST_CASES).
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    ))]

    /// Any bytes: an error or an array, never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = NpyArray::parse(&bytes);
    }

    /// Valid files with bytes flipped, cut or inserted: an error or an array whose data length
    /// is what its header declares.
    #[test]
    fn mutated_files_never_panic(
        file in valid_npy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut file = file;
        for (at, byte, kind) in edits {
            if file.is_empty() {
                break;
            }
            let i = at.index(file.len());
            match kind {
                0 => file[i] ^= byte | 1,
                1 => file.truncate(i),
                _ => file.insert(i, byte),
            }
        }
        if let Ok(a) = NpyArray::parse(&file) {
            let n: usize = a.shape().iter().product();
            prop_assert_eq!(a.data().len(), n * a.dtype().size());
        }
    }

    /// A header that claims a huge array over a few bytes of data is an error (no allocation
    /// of the claimed size, no overflow).
    #[test]
    fn huge_claimed_shapes_are_errors(dims in prop::collection::vec(1usize..usize::MAX, 1..5)) {
        let dims_text: Vec<String> = dims.iter().map(usize::to_string).collect();
        let header = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
            dims_text.join(", ")
        );
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<width$}\n", width = (header.len() + 11).div_ceil(64) * 64 - 11);
        file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        file.extend_from_slice(padded.as_bytes());
        file.extend_from_slice(&[0; 16]);
        let n = dims.iter().try_fold(4usize, |a, &d| a.checked_mul(d));
        if n != Some(16) {
            prop_assert!(NpyArray::parse(&file).is_err());
        }
    }

    /// Table metadata of any strings: a spec or an error, never a panic.
    #[test]
    fn table_metadata_never_panics(
        shape in "\\PC{0,20}",
        dtype in "\\PC{0,6}",
        version in "\\PC{0,4}",
        known in any::<bool>(),
    ) {
        let mut config = HashMap::new();
        if known {
            config = TensorSpec::new(vec![3, 4], DType::F32).table_configuration();
        }
        config.insert(crate::SHAPE_KEY.to_string(), shape);
        config.insert(crate::DTYPE_KEY.to_string(), dtype);
        config.insert(crate::FORMAT_VERSION_KEY.to_string(), version);
        let _ = TensorSpec::from_table_configuration(&config);
    }
}

/// A valid archive of one array, deflated (`np.savez_compressed`'s form).
pub(crate) fn npz_of(npy: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options =
        zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("arr_0.npy", options).unwrap();
    zip.write_all(npy).unwrap();
    zip.finish().unwrap();
    drop(zip);
    out.into_inner()
}

proptest! {
    /// Archives with bytes flipped, cut or claiming other sizes: an error or members whose
    /// bytes together stay within the cap, never a panic.
    #[test]
    fn mutated_archives_stay_within_their_cap(
        npy in valid_npy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        cap in 0u64..4096,
    ) {
        let mut archive = npz_of(&npy);
        for (at, value) in flips {
            let i = at.index(archive.len());
            archive[i] = value;
        }
        let keep = cut.index(archive.len() + 1);
        archive.truncate(keep.max(archive.len() / 2));
        if let Ok(members) = crate::npy::read_npz_capped(&archive, cap) {
            let total: u64 = members.iter().map(|(_, m)| m.len() as u64).sum();
            prop_assert!(total <= cap, "{total} > {cap}");
        }
    }
}
