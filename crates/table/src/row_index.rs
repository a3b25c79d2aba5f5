//! [`RowIndex`]: a scan's ids by position and the position of each id: the ids in one text
//! buffer, where each ends, and a hash table of positions (hashbrown's `HashTable`, keyed by the
//! ids it points at): no allocation per id, 8 bytes a row and the table's ~9 to 18 beside the
//! ids' text. Pure: built from the ids in position order ([`RowIndexBuilder`]), property-tested.

use std::hash::{BuildHasher, Hasher};

/// The ids of a scan's rows by position (`0..len()`, the positions of
/// [`Scan::take`](crate::Scan::take)) and the position of each id. Built once per scan
/// ([`Scan::row_index`](crate::Scan::row_index)); ids are unique in it.
///
/// ```
/// use voxlake_table::RowIndex;
///
/// let mut ids = RowIndex::builder();
/// for id in ["cube-2", "cube-0", "cube-1"] {
///     ids.push(id);
/// }
/// let index = ids.finish().unwrap();
/// assert_eq!(index.position("cube-0"), Some(1));
/// assert_eq!(index.id(2), Some("cube-1"));
/// assert_eq!(index.position("cube-9"), None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RowIndex {
    /// Every id's text, one after another, in position order.
    text: String,
    /// Where the id at each position ends in `text` (it starts where the one before ends).
    ends: Vec<u64>,
    /// Every position, found by its id's hash and text.
    by_id: hashbrown::HashTable<u64>,
}

/// The ids of a [`RowIndex`] in position order, pushed one at a time.
#[derive(Debug, Default)]
pub struct RowIndexBuilder {
    text: String,
    ends: Vec<u64>,
}

/// Two rows of one id: the index needs unique ids.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DuplicateId {
    /// The id.
    pub id: String,
    /// The first position holding it.
    pub first: u64,
    /// A later position holding it.
    pub second: u64,
}

impl RowIndexBuilder {
    /// Appends the id of the next position.
    pub fn push(&mut self, id: &str) {
        self.text.push_str(id);
        self.ends.push(self.text.len() as u64);
    }

    /// Ids pushed so far.
    pub fn len(&self) -> u64 {
        self.ends.len() as u64
    }

    /// Whether no id was pushed.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The index of the ids pushed; the first id two positions share is an error naming both.
    pub fn finish(self) -> Result<RowIndex, DuplicateId> {
        let rows = self.ends.len();
        let mut index = RowIndex {
            text: self.text,
            ends: self.ends,
            by_id: hashbrown::HashTable::new(),
        };
        index.text.shrink_to_fit();
        index.ends.shrink_to_fit();
        let mut by_id = hashbrown::HashTable::with_capacity(rows);
        for position in 0..index.len() {
            let id = index.text_at(position);
            let found = by_id.entry(
                hash(id),
                |&p| index.text_at(p) == id,
                |&p| hash(index.text_at(p)),
            );
            match found {
                hashbrown::hash_table::Entry::Occupied(first) => {
                    return Err(DuplicateId {
                        id: id.to_string(),
                        first: *first.get(),
                        second: position,
                    });
                }
                hashbrown::hash_table::Entry::Vacant(slot) => {
                    slot.insert(position);
                }
            }
        }
        index.by_id = by_id;
        Ok(index)
    }
}

impl RowIndexBuilder {
    /// The ids `encoded` holds ([`RowIndex::encode`]), checked before anything is copied:
    /// `None` where the bytes are not such an encoding (sizes past the bytes given, ends that
    /// go back or cut a character, text that is not UTF-8).
    pub fn decode(encoded: &[u8]) -> Option<RowIndexBuilder> {
        let (count, rest) = encoded.split_first_chunk::<8>()?;
        let count = usize::try_from(u64::from_le_bytes(*count)).ok()?;
        let (ends, text) = rest.split_at_checked(count.checked_mul(8)?)?;
        let text = std::str::from_utf8(text).ok()?;
        let ends: Vec<u64> = ends
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().unwrap_or_default()))
            .collect();
        let mut start = 0;
        for &end in &ends {
            let end_at = usize::try_from(end).ok()?;
            if end < start || end_at > text.len() || !text.is_char_boundary(end_at) {
                return None;
            }
            start = end;
        }
        if start != text.len() as u64 {
            return None;
        }
        Some(RowIndexBuilder {
            text: text.to_string(),
            ends,
        })
    }
}

impl RowIndex {
    /// The ids in position order as bytes ([`RowIndexBuilder::decode`] reads them back): their
    /// count, where each ends (little-endian u64s), their text.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 8 * self.ends.len() + self.text.len());
        out.extend_from_slice(&(self.ends.len() as u64).to_le_bytes());
        for end in &self.ends {
            out.extend_from_slice(&end.to_le_bytes());
        }
        out.extend_from_slice(self.text.as_bytes());
        out
    }

    /// An empty builder.
    pub fn builder() -> RowIndexBuilder {
        RowIndexBuilder::default()
    }

    /// Rows indexed: the scan's.
    pub fn len(&self) -> u64 {
        self.ends.len() as u64
    }

    /// Whether the scan reads no row.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The id of the row at `position`.
    pub fn id(&self, position: u64) -> Option<&str> {
        (position < self.len()).then(|| self.text_at(position))
    }

    /// The position of the row `id`, `None` where the scan reads no row of that id.
    pub fn position(&self, id: &str) -> Option<u64> {
        self.by_id
            .find(hash(id), |&p| self.text_at(p) == id)
            .copied()
    }

    /// Every id, in position order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.ends.len()).map(|p| self.text_at(p as u64))
    }

    /// Bytes the index holds: the ids' text, 8 bytes a row where each ends, the hash table.
    pub fn memory_size(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * std::mem::size_of::<u64>()
            + self.by_id.allocation_size()
    }

    /// The id at `position` (below `len()`).
    fn text_at(&self, position: u64) -> &str {
        let p = position as usize;
        let start = match p {
            0 => 0,
            _ => self.ends[p - 1] as usize,
        };
        &self.text[start..self.ends[p] as usize]
    }
}

/// An id's hash: SipHash with fixed keys (the same in every process; collisions are resolved
/// by comparing the ids).
fn hash(id: &str) -> u64 {
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write(id.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index_of(ids: &[String]) -> Result<RowIndex, DuplicateId> {
        let mut builder = RowIndex::builder();
        for id in ids {
            builder.push(id);
        }
        builder.finish()
    }

    proptest! {
        /// Unique ids: each found at its position, its position's id is it, an id not among
        /// them is found nowhere; ids repeated: the error names an id and two positions of it.
        #[test]
        fn ids_and_positions_agree(ids in prop::collection::vec("[a-c]{0,3}", 0..60), probe in "[a-d]{0,4}") {
            match index_of(&ids) {
                Ok(index) => {
                    prop_assert_eq!(index.len(), ids.len() as u64);
                    for (p, id) in ids.iter().enumerate() {
                        prop_assert_eq!(index.position(id), Some(p as u64));
                        prop_assert_eq!(index.id(p as u64), Some(id.as_str()));
                    }
                    prop_assert_eq!(index.id(ids.len() as u64), None);
                    prop_assert_eq!(index.ids().collect::<Vec<_>>(), ids.iter().map(String::as_str).collect::<Vec<_>>());
                    prop_assert_eq!(index.position(&probe), ids.iter().position(|i| *i == probe).map(|p| p as u64));
                }
                Err(dup) => {
                    prop_assert!(dup.first != dup.second);
                    prop_assert_eq!(&ids[dup.first as usize], &dup.id);
                    prop_assert_eq!(&ids[dup.second as usize], &dup.id);
                }
            }
            let unique = ids.iter().collect::<std::collections::HashSet<_>>().len() == ids.len();
            prop_assert_eq!(index_of(&ids).is_ok(), unique);
        }
    }

    proptest! {
        /// An index's encoding decodes to the same ids; bytes cut or changed decode to ids
        /// that are whole (or to none), never past the bytes given.
        #[test]
        fn encodings_round_trip_and_damage_is_refused(
            ids in prop::collection::vec("[a-cé]{0,4}", 0..40),
            cut in 0usize..400,
            flip in (0usize..400, 1u8..=255),
        ) {
            let mut unique = ids.clone();
            unique.sort();
            unique.dedup();
            let index = index_of(&unique).unwrap();
            let bytes = index.encode();
            let back = RowIndexBuilder::decode(&bytes).unwrap().finish().unwrap();
            prop_assert_eq!(back.ids().collect::<Vec<_>>(), index.ids().collect::<Vec<_>>());
            if cut < bytes.len() {
                prop_assert!(RowIndexBuilder::decode(&bytes[..cut]).is_none());
            }
            let mut changed = bytes.clone();
            if let Some(b) = changed.get_mut(flip.0) {
                *b ^= flip.1;
                if let Some(decoded) = RowIndexBuilder::decode(&changed) {
                    let text: usize = decoded.text.len();
                    prop_assert_eq!(decoded.ends.last().copied().unwrap_or(0), text as u64);
                }
            }
        }
    }

    #[test]
    fn a_huge_count_is_refused_before_memory_is_taken() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        assert!(RowIndexBuilder::decode(&bytes).is_none());
    }

    #[test]
    fn a_row_costs_its_text_and_at_most_32_bytes() {
        let ids: Vec<String> = (0..10_000).map(|i| format!("cube-{i:06}")).collect();
        let index = index_of(&ids).unwrap();
        let text: usize = ids.iter().map(String::len).sum();
        // 8 bytes where each id ends; the hash table's 9 a bucket, 8/7 to 2 buckets a row.
        let size = index.memory_size();
        assert!(
            (text + 18 * ids.len()..=text + 32 * ids.len()).contains(&size),
            "{size}"
        );
        assert_eq!(index.position("cube-004321"), Some(4321));
    }
}
