//! Named splits of a table's rows that never move: a row's split is a hash of its id and a
//! salt alone, so rows appended later never move an existing row to another split, the splits
//! are disjoint and cover the table, and the order their shares are listed in changes nothing.
//!
//! ```
//! use voxlake_plan::split::Split;
//!
//! let shares = vec![("train".to_string(), 0.9), ("val".to_string(), 0.1)];
//! let val = Split::new("val", shares).with_salt("2026");
//! let held_out = (0..1000).filter(|i| val.contains(&format!("cube_{i:06}.npy"))).count();
//! assert!((70..130).contains(&held_out));
//! ```

use crate::error::SamplingError;
use crate::plan::SeededRng;

/// A named split of the rows: see the [module documentation](self).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    name: String,
    shares: Vec<(String, f64)>,
    salt: String,
}

impl Split {
    /// The rows of split `name` of `shares` (relative shares by name; the order they are
    /// listed in changes nothing), with an empty salt.
    pub fn new(name: impl Into<String>, mut shares: Vec<(String, f64)>) -> Self {
        // Sorted by name: a split is the same whichever order a caller's dict lists them in.
        shares.sort_by(|a, b| a.0.cmp(&b.0));
        Split {
            name: name.into(),
            shares,
            salt: String::new(),
        }
    }

    /// Another salt: another, equally stable, assignment of rows to splits.
    pub fn with_salt(mut self, salt: impl Into<String>) -> Self {
        self.salt = salt.into();
        self
    }

    /// The split read.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The splits and their shares, by name.
    pub fn shares(&self) -> &[(String, f64)] {
        &self.shares
    }

    /// The salt.
    pub fn salt(&self) -> &str {
        &self.salt
    }

    /// Index in [`shares`](Self::shares) of the split the row with id `id` belongs to.
    pub fn split_of(&self, id: &str) -> usize {
        let total: f64 = self.shares.iter().map(|s| s.1).sum();
        let u = unit_interval(id_hash(id, &self.salt)) * total;
        let mut upto = 0.0;
        for (i, (_, share)) in self.shares.iter().enumerate() {
            upto += share;
            if u < upto {
                return i;
            }
        }
        self.shares.len().saturating_sub(1)
    }

    /// Whether the row with id `id` is in the split read.
    pub fn contains(&self, id: &str) -> bool {
        self.shares
            .get(self.split_of(id))
            .is_some_and(|(name, _)| *name == self.name)
    }

    /// The split is one of the shares, which are positive, finite and named once.
    pub(crate) fn check(&self) -> Result<(), SamplingError> {
        if self.shares.is_empty() {
            return Err(SamplingError::new("splits", "no split is named"));
        }
        for (name, share) in &self.shares {
            if !(share.is_finite() && *share > 0.0) {
                return Err(SamplingError::new(
                    "splits",
                    format!("split '{name}' has share {share}: shares must be positive and finite"),
                ));
            }
        }
        let names: Vec<&str> = self.shares.iter().map(|s| s.0.as_str()).collect();
        if let Some(twice) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return Err(SamplingError::new(
                "splits",
                format!("split '{}' is named twice", twice.1),
            ));
        }
        if !names.contains(&self.name.as_str()) {
            return Err(SamplingError::new(
                "split",
                format!("'{}' is not one of the splits {names:?}", self.name),
            ));
        }
        Ok(())
    }
}

/// A row id's hash under `salt`: FNV-1a over the salt, a 0 byte and the id, then SplitMix64's
/// finalizer (FNV alone leaves the high bits of similar ids close). Fixed forever: a split
/// must not move when voxlake is upgraded (a test pins values).
pub fn id_hash(id: &str, salt: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in salt.bytes().chain([0]).chain(id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    SeededRng::new(h).next_u64()
}

/// 53 bits of `bits` as a number in [0, 1).
pub(crate) fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn three() -> Vec<(String, f64)> {
        vec![
            ("train".into(), 0.8),
            ("val".into(), 0.1),
            ("test".into(), 0.1),
        ]
    }

    #[test]
    fn id_hash_is_pinned() {
        // A split must never move across releases or platforms.
        assert_eq!(id_hash("a", ""), 0x754f_d174_2dee_fa1d);
        let split = Split::new("val", three());
        // Shares by name whatever the order given: test, train, val.
        let reversed: Vec<(String, f64)> = three().into_iter().rev().collect();
        assert_eq!(Split::new("val", reversed), split);
        let ids: Vec<usize> = (0..24)
            .map(|i| split.split_of(&format!("cube_{i:06}.npy")))
            .collect();
        assert_eq!(
            ids,
            [
                1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 2, 0, 1, 1, 2, 0, 1, 1, 1, 2, 1, 1, 1
            ]
        );
    }

    /// Splits over 10^6 ids: disjoint and covering by construction (one index per id), shares
    /// within ± 0.1 points; 10 % more ids move none of the first.
    #[test]
    fn a_million_ids_split_to_their_shares_and_a_salt_moves_them() {
        // (That appended rows move none is a table's test: tests/integration/sampling.rs.)
        let split = Split::new("train", three()).with_salt("2026");
        let resalted = split.clone().with_salt("2027");
        let n = 1_000_000;
        let (mut counts, mut moved) = ([0u64; 3], 0u64);
        for i in 0..n {
            let id = format!("site{}/cube_{i:07}.npy", i % 7);
            let s = split.split_of(&id);
            counts[s] += 1;
            moved += u64::from(resalted.split_of(&id) != s);
        }
        for (c, (_, share)) in counts.iter().zip(split.shares()) {
            let got = *c as f64 / n as f64;
            assert!((got - share).abs() < 0.001, "{got} against {share}");
        }
        // Another salt, an independent assignment: 1 − Σ share² of the rows move.
        let expected = 1.0 - split.shares().iter().map(|s| s.1 * s.1).sum::<f64>();
        assert!(
            (moved as f64 / n as f64 - expected).abs() < 0.003,
            "{moved}"
        );
    }

    proptest! {
        /// Any shares: every id in exactly one split, which `contains` agrees with.
        #[test]
        fn every_id_in_one_split(shares in prop::collection::vec(0.01f64..10.0, 1..5), ids in prop::collection::vec(".{0,12}", 1..50)) {
            let named: Vec<(String, f64)> = shares.iter().enumerate().map(|(i, s)| (format!("s{i}"), *s)).collect();
            for id in &ids {
                let homes: Vec<usize> = (0..named.len())
                    .filter(|&i| Split::new(format!("s{i}"), named.clone()).contains(id))
                    .collect();
                prop_assert_eq!(homes.len(), 1);
            }
        }
    }
}
