//! A cache entry as it lies on disk (pure: no I/O): a header, then the payload.
//!
//! ```text
//! 0..8    magic "VXLCACH1"
//! 8..12   header length H (u32 LE): where the payload starts, a multiple of 64
//! 12..16  CRC-32 (IEEE) of the key's bytes and the payload
//! 16..24  payload length (u64 LE)
//! 24..    the key (UTF-8), then zeros up to H
//! H..     the payload: the bytes of the entry's ranges, one after another
//! ```
//!
//! The key is stored whole, so two keys whose names collide are told apart, and the checksum
//! covers it, so a flipped bit anywhere is caught before a byte is handed out.

use bytes::Bytes;

/// The first bytes of every entry.
pub(crate) const MAGIC: &[u8; 8] = b"VXLCACH1";
/// Bytes of the header before the key.
const FIXED: usize = 24;

/// What a cache entry holds, and what names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryKey {
    /// Everything that makes the bytes immutable: the table, the file's path, size and tag
    /// (e-tag or modification time), and the ranges.
    pub(crate) text: String,
    /// The length of each range, in order: the payload is their bytes one after another.
    pub(crate) lens: Vec<usize>,
    /// Whether the entry holds a piece of a table's log (counted apart from data reads).
    pub(crate) log: bool,
    /// Whether the payload is one part of any length (an entry made, not read: `lens` unused).
    pub(crate) whole: bool,
}

impl EntryKey {
    /// The key of `ranges` of the object `path` (of `size` bytes and `tag`) in store `store`.
    pub(crate) fn new(
        store: &str,
        path: &str,
        size: u64,
        tag: &str,
        ranges: &[std::ops::Range<u64>],
    ) -> EntryKey {
        use std::fmt::Write;
        let mut text = format!("{store}\n{path}\nsize={size}\n{tag}\n");
        for r in ranges {
            let _ = write!(text, "{}-{},", r.start, r.end);
        }
        EntryKey {
            text,
            lens: ranges
                .iter()
                .map(|r| r.end.saturating_sub(r.start) as usize)
                .collect(),
            log: false,
            whole: false,
        }
    }

    /// [`new`](Self::new) for a piece of a table's log.
    pub(crate) fn log(
        store: &str,
        path: &str,
        size: u64,
        tag: &str,
        range: std::ops::Range<u64>,
    ) -> EntryKey {
        EntryKey {
            log: true,
            ..EntryKey::new(store, path, size, tag, &[range])
        }
    }

    /// The key of an entry made from a table rather than read from it (a version's replayed
    /// file list), named `name` in store `store`: one part, its length the header's.
    pub(crate) fn made(store: &str, name: &str) -> EntryKey {
        EntryKey {
            text: format!("{store}\nmade\n{name}\n"),
            lens: Vec::new(),
            log: true,
            whole: true,
        }
    }

    /// The entry's file name: 16 hex digits of the key's FNV-1a hash.
    pub(crate) fn file_name(&self) -> String {
        format!("{:016x}", crate::location::stable_hash(&self.text))
    }

    /// Bytes of the payload.
    pub(crate) fn payload_len(&self) -> usize {
        self.lens.iter().sum()
    }
}

/// The header for `key` over `parts` (the payload, in pieces).
pub(crate) fn header(key: &EntryKey, parts: &[Bytes]) -> Vec<u8> {
    let len = header_len(key.text.len());
    let payload: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut crc = crc32fast::Hasher::new();
    crc.update(key.text.as_bytes());
    for p in parts {
        crc.update(p);
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&payload.to_le_bytes());
    out.extend_from_slice(key.text.as_bytes());
    out.resize(len, 0);
    out
}

/// A header's length for a key of `key_len` bytes.
fn header_len(key_len: usize) -> usize {
    (FIXED + key_len).div_ceil(64) * 64
}

/// The payload of `entry` (a whole entry file) split into `key`'s ranges, after checking that
/// it is an entry of `key`, whole and (where `check`: its checksum computed) unaltered; else what
/// is wrong with it.
pub(crate) fn parts(entry: &Bytes, key: &EntryKey, check: bool) -> Result<Vec<Bytes>, String> {
    let field = |at: usize, n: usize| entry.get(at..at + n);
    if field(0, 8) != Some(&MAGIC[..]) {
        return Err("not a cache entry (no magic)".into());
    }
    let (Some(len), Some(crc), Some(payload)) = (field(8, 4), field(12, 4), field(16, 8)) else {
        return Err(format!("cut short ({} bytes)", entry.len()));
    };
    let len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
    let crc = u32::from_le_bytes(crc.try_into().unwrap_or_default());
    let payload = u64::from_le_bytes(payload.try_into().unwrap_or_default());
    if len != header_len(key.text.len())
        || field(FIXED, key.text.len()) != Some(key.text.as_bytes())
    {
        return Err("holds another key".into());
    }
    let want = match key.whole {
        true => payload,
        false => key.payload_len() as u64,
    };
    let have = entry.len().saturating_sub(len) as u64;
    if payload != want || entry.len() < len || have != want {
        return Err(format!(
            "{have} payload bytes for {want} expected (header says {payload})"
        ));
    }
    if check {
        let mut sum = crc32fast::Hasher::new();
        sum.update(key.text.as_bytes());
        sum.update(&entry[len..]);
        let got = sum.finalize();
        if got != crc {
            return Err(format!(
                "its CRC-32 is {got:08x}, its header says {crc:08x} (corrupt)"
            ));
        }
    }
    if key.whole {
        return Ok(vec![entry.slice(len..)]);
    }
    let mut at = len;
    Ok(key
        .lens
        .iter()
        .map(|&n| {
            let part = entry.slice(at..at + n);
            at += n;
            part
        })
        .collect())
}

#[cfg(test)]
// One range is a list of ranges to object_store.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(key: &EntryKey, parts: &[Bytes]) -> Bytes {
        let mut out = header(key, parts);
        for p in parts {
            out.extend_from_slice(p);
        }
        Bytes::from(out)
    }

    fn key(ranges: &[std::ops::Range<u64>]) -> EntryKey {
        EntryKey::new("s3://b/t", "part-0.parquet", 1000, "etag=\"x\"", ranges)
    }

    #[test]
    fn keys_differ_by_every_part_of_the_identity() {
        let base = key(&[0..10]);
        let others = [
            EntryKey::new("s3://b/u", "part-0.parquet", 1000, "etag=\"x\"", &[0..10]),
            EntryKey::new("s3://b/t", "part-1.parquet", 1000, "etag=\"x\"", &[0..10]),
            EntryKey::new("s3://b/t", "part-0.parquet", 1001, "etag=\"x\"", &[0..10]),
            EntryKey::new("s3://b/t", "part-0.parquet", 1000, "etag=\"y\"", &[0..10]),
            key(&[0..11]),
            key(&[0..5, 5..10]),
        ];
        for other in others {
            assert_ne!(base.file_name(), other.file_name(), "{other:?}");
        }
    }

    proptest! {
        /// An entry reads back as written; any flipped bit, cut or other key is refused.
        #[test]
        fn entries_round_trip_and_every_alteration_is_caught(
            lens in proptest::collection::vec(0usize..300, 1..5),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
            cut in any::<prop::sample::Index>(),
        ) {
            let mut at = 0u64;
            let ranges: Vec<_> = lens.iter().map(|&n| { let r = at..at + n as u64; at += n as u64 + 7; r }).collect();
            let key = key(&ranges);
            let parts: Vec<Bytes> = lens.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8 + 1; n])).collect();
            let whole = entry(&key, &parts);
            prop_assert_eq!(super::parts(&whole, &key, true).unwrap(), parts.clone());
            let mut flipped = whole.to_vec();
            let i = flip.index(flipped.len());
            flipped[i] ^= 1 << bit;
            // A flip in the header's zero padding changes nothing that is read.
            let padding = (FIXED + key.text.len())..header_len(key.text.len());
            if !padding.contains(&i) {
                prop_assert!(super::parts(&Bytes::from(flipped), &key, true).is_err());
            }
            let short = whole.slice(..cut.index(whole.len()));
            prop_assert!(super::parts(&short, &key, true).is_err());
            let other = EntryKey { text: format!("{}x", key.text), lens: key.lens.clone(), log: false, whole: false };
            prop_assert!(super::parts(&whole, &other, true).is_err());
        }
    }
}
