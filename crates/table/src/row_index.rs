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

impl RowIndex {
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
