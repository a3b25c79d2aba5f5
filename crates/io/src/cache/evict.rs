//! Which entries leave the cache when it outgrows its cap (pure): least recently used first.

use std::time::SystemTime;

/// One entry found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its file name.
    pub(crate) name: String,
    /// Its size in bytes.
    pub(crate) bytes: u64,
    /// When it was last written or read (its modification time, touched on every hit).
    pub(crate) used: SystemTime,
}

/// The entries to delete so that the rest fit `low` bytes, once they hold more than `cap`:
/// least recently used first (ties by name, so every process picks the same ones). Nothing
/// while they fit the cap. Returns the names and the bytes left.
pub(crate) fn choose(mut entries: Vec<Found>, cap: u64, low: u64) -> (Vec<String>, u64) {
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    if total <= cap {
        return (Vec::new(), total);
    }
    entries.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.name.cmp(&b.name)));
    let mut gone = Vec::new();
    for e in entries {
        if total <= low {
            break;
        }
        total -= e.bytes;
        gone.push(e.name);
    }
    (gone, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// Over the cap, the oldest go until the rest fit the low mark, and every entry kept is
        /// newer than (or as new as) every entry deleted; under it, nothing goes.
        #[test]
        fn the_least_recently_used_go_until_the_rest_fit(
            sizes in proptest::collection::vec((1u64..1000, 0u64..50), 0..40),
            cap in 0u64..20_000,
            low_share in 0u64..=100,
        ) {
            let low = cap * low_share / 100;
            let entries: Vec<Found> = sizes.iter().enumerate().map(|(i, &(bytes, t))| Found {
                name: format!("{i:04}"),
                bytes,
                used: SystemTime::UNIX_EPOCH + Duration::from_secs(t),
            }).collect();
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            let (gone, left) = choose(entries.clone(), cap, low);
            let kept: Vec<&Found> = entries.iter().filter(|e| !gone.contains(&e.name)).collect();
            prop_assert_eq!(left, kept.iter().map(|e| e.bytes).sum::<u64>());
            if total <= cap {
                prop_assert!(gone.is_empty());
            } else {
                prop_assert!(left <= low);
                // Not one more than needed: without the newest deleted, the rest would not fit.
                if let Some(last) = gone.last() {
                    let last = entries.iter().find(|e| &e.name == last).unwrap();
                    prop_assert!(left + last.bytes > low);
                }
                for g in &gone {
                    let g = entries.iter().find(|e| &e.name == g).unwrap();
                    for k in &kept {
                        prop_assert!((g.used, &g.name) <= (k.used, &k.name));
                    }
                }
            }
        }
    }
}
