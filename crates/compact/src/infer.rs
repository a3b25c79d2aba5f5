//! The tensor spec of a new table, settled before anything is written: from `--shape` and
//! `--dtype` when given, otherwise from what the first few source objects agree on. Pure.
//!
//! One object never decides alone: an odd file that sorts first would otherwise become the
//! table's shape and make every good file fail, on every re-run.
//!
//! ```
//! use voxlake_compact::infer::{settle, Sample};
//! use voxlake_format::DType;
//!
//! let good = |k: &str| Sample { key: k.into(), shape: vec![30, 30, 10, 10], dtype: DType::F32 };
//! let mut samples: Vec<Sample> = (0..7).map(|i| good(&format!("cube_{i}.npy"))).collect();
//! samples.insert(0, Sample { key: "aaa.npy".into(), shape: vec![2, 2], dtype: DType::F32 });
//! // With `--on-error skip` the majority wins and the odd object is skipped later.
//! let spec = settle(&samples, None, None, true).unwrap();
//! assert_eq!(spec.shape(), &[30, 30, 10, 10]);
//! // Otherwise the disagreement is an error naming the odd object.
//! let e = settle(&samples, None, None, false).unwrap_err();
//! assert!(e.contains("aaa.npy"));
//! ```

use voxlake_format::{Casting, DType, TensorSpec};

/// Source objects read to settle the spec of a new table.
pub(crate) const SAMPLES: usize = 8;

/// One decodable source object's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The object's key.
    pub key: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type.
    pub dtype: DType,
}

/// The spec of a new table from `samples` (the first decodable objects in key order) and the
/// user's `shape` and `dtype`. Without them the samples must agree; with `majority` (objects
/// that do not fit are skipped anyway) a strict majority is enough. The error names the odd
/// objects.
pub fn settle(
    samples: &[Sample],
    shape: Option<&[usize]>,
    dtype: Option<DType>,
    majority: bool,
) -> Result<TensorSpec, String> {
    if let (Some(shape), Some(dtype)) = (shape, dtype) {
        return Ok(TensorSpec::new(shape.to_vec(), dtype));
    }
    if samples.is_empty() {
        return Err("no source object decodes".into());
    }
    // What each sample says for the parts the user left open.
    let key_of = |s: &Sample| {
        (
            shape.map_or_else(|| s.shape.clone(), <[usize]>::to_vec),
            dtype.unwrap_or(s.dtype),
        )
    };
    // A sample agrees with a candidate spec if it has its shape and converts to its type
    // without loss (numpy's `safe`), as the conversion itself will require.
    let agrees = |s: &Sample, (want_shape, want_dtype): &(Vec<usize>, DType)| {
        let (shape, dtype) = key_of(s);
        shape == *want_shape && (dtype == *want_dtype || dtype.can_cast(*want_dtype, Casting::Safe))
    };
    // The most common spec wins (ties go to the earlier one: deterministic); samples that
    // convert into it count as agreeing.
    let mut votes: Vec<((Vec<usize>, DType), usize)> = Vec::new();
    for s in samples {
        let k = key_of(s);
        match votes.iter_mut().find(|(v, _)| *v == k) {
            Some((_, n)) => *n += 1,
            None => votes.push((k, 1)),
        }
    }
    let mut best = 0;
    for (i, (_, n)) in votes.iter().enumerate() {
        if *n > votes[best].1 {
            best = i;
        }
    }
    let winner = votes.swap_remove(best).0;
    let count = samples.iter().filter(|s| agrees(s, &winner)).count();
    let odd: Vec<String> = samples
        .iter()
        .filter(|s| !agrees(s, &winner))
        .map(|s| format!("{} ({:?} {})", s.key, s.shape, s.dtype))
        .collect();
    let agreed = odd.is_empty() || (majority && count * 2 > samples.len());
    if agreed {
        return Ok(TensorSpec::new(winner.0, winner.1));
    }
    Err(format!(
        "the first {} source objects disagree on the tensor spec: {count} hold {:?} {}, the odd ones are {}; give --shape and --dtype{}",
        samples.len(),
        winner.0,
        winner.1,
        odd.join(", "),
        if majority {
            ""
        } else {
            " (or --on-error skip to skip the odd ones when most agree)"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(key: &str, shape: &[usize], dtype: DType) -> Sample {
        Sample {
            key: key.into(),
            shape: shape.to_vec(),
            dtype,
        }
    }

    #[test]
    fn agreement_user_values_and_ties() {
        let all = vec![s("a", &[2, 3], DType::F32), s("b", &[2, 3], DType::F32)];
        assert_eq!(settle(&all, None, None, false).unwrap().shape(), &[2, 3]);
        // The user's dtype overrides what the objects hold (they are converted).
        let spec = settle(&all, None, Some(DType::F16), false).unwrap();
        assert_eq!(spec.dtype(), DType::F16);
        // Shape and dtype given: no object is needed.
        assert!(settle(&[], Some(&[4]), Some(DType::U8), false).is_ok());
        assert!(settle(&[], None, None, true).is_err());
        // A tie is no majority.
        let tie = vec![s("a", &[2], DType::F32), s("b", &[3], DType::F32)];
        let e = settle(&tie, None, None, true).unwrap_err();
        assert!(e.contains("odd ones"), "{e}");
        // The user's shape settles a disagreement on shape alone.
        let spec = settle(&tie, Some(&[5]), None, false).unwrap();
        assert_eq!((spec.shape(), spec.dtype()), (&[5][..], DType::F32));
        // Dtypes that disagree are named too.
        let mixed = vec![
            s("a", &[2], DType::F32),
            s("b", &[2], DType::F64),
            s("c", &[2], DType::F32),
        ];
        let e = settle(&mixed, None, None, false).unwrap_err();
        assert!(e.contains("b ([2] f64)"), "{e}");
        assert_eq!(
            settle(&mixed, None, None, true).unwrap().dtype(),
            DType::F32
        );
    }
}
