//! The active data files of a snapshot, held column by column: a table of 10⁵ files took
//! ~450 bytes a file as one struct each (paths twice, a tag and the statistics as `String`s);
//! held as Arrow arrays it takes ~80 (its statistics kept only where a filter reads them), and
//! one array per column is what the node's cache writes and maps whole (see `cache`).
//!
//! [`FileList`] is built once by [`FileListBuilder`] (in the log's order, then sorted), then
//! changed only by whole-list steps: row counts learnt, files a filter drops. A file is seen
//! through [`DataFile`], a view of one index.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use arrow_array::{Array, StringArray, UInt64Array};
use object_store::path::Path;

pub use crate::deletes::Deleted;

mod build;
pub(crate) mod cache;
mod listing;
pub(crate) use build::{Entry, FileListBuilder};
pub(crate) use listing::listed;

/// A row count not known yet (the add action recorded none; the footer says).
const UNKNOWN: u64 = u64::MAX;

/// The active data files of a snapshot, column by column (Arrow arrays): ~80 bytes a file.
#[derive(Debug, Clone)]
pub struct FileList {
    /// Paths relative to the table root, as the add actions (or the listing) give them.
    paths: StringArray,
    /// The path in the table's object store, null where it is the same as `paths`'.
    object_paths: StringArray,
    /// Sizes in bytes.
    sizes: UInt64Array,
    /// Rows each file holds as its add action counts them before deletions (null: no stats).
    records: UInt64Array,
    /// Live rows (less deleted, or those a filter selects); `UNKNOWN` until learnt.
    rows: Vec<u64>,
    /// What tells a file's bytes from another's under the same path and size (cache keys).
    tags: StringArray,
    /// The add actions' statistics (JSON), where kept (for filters).
    stats: Option<StringArray>,
    /// Partition values by column (logical names, sorted), null where null or not given.
    partitions: Vec<(String, StringArray)>,
    /// The deleted rows of files with a deletion vector, by index.
    deleted: HashMap<usize, Deleted>,
}

/// One file of a [`FileList`], as the Delta log records it (or as listed).
#[derive(Debug, Clone, Copy)]
pub struct DataFile<'a> {
    list: &'a FileList,
    index: usize,
}

impl<'a> DataFile<'a> {
    /// Path relative to the table root (the add action's path).
    pub fn path(&self) -> &'a str {
        self.list.paths.value(self.index)
    }

    /// The path in the table's object store.
    pub fn object_path(&self) -> Path {
        let raw = match self.list.object_paths.is_null(self.index) {
            true => self.path(),
            false => self.list.object_paths.value(self.index),
        };
        Path::parse(raw).unwrap_or_else(|_| Path::from(raw))
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.list.sizes.value(self.index)
    }

    /// Live rows: the add action's row count (`None` if the writer recorded none) less those
    /// its deletion vector deletes; under a filter, the rows it selects.
    pub fn rows(&self) -> Option<u64> {
        let rows = self.list.rows[self.index];
        (rows != UNKNOWN).then_some(rows)
    }

    /// Rows the file holds, as its add action counts them before any deletion (`None` without
    /// statistics): its footer must say the same.
    pub fn records(&self) -> Option<u64> {
        let records = &self.list.records;
        records
            .is_valid(self.index)
            .then(|| records.value(self.index))
    }

    /// Partition values (`None`: null), by column name.
    pub fn partitions(&self) -> impl Iterator<Item = (&'a str, Option<&'a str>)> + 'a {
        let index = self.index;
        self.list
            .partitions
            .iter()
            .map(move |(name, values)| (name.as_str(), value(values, index)))
    }

    /// The value of partition column `name`: `None` where the table has no such partition,
    /// `Some(None)` where the value is null.
    pub fn partition(&self, name: &str) -> Option<Option<&'a str>> {
        let (_, values) = self.list.partitions.iter().find(|(n, _)| n == name)?;
        Some(value(values, self.index))
    }

    /// The add action's statistics (JSON), where the snapshot kept them (for a filter).
    pub fn delta_stats(&self) -> Option<&'a str> {
        self.list.stats.as_ref().and_then(|s| value(s, self.index))
    }

    /// The rows its deletion vector deletes.
    pub fn deleted(&self) -> Option<&'a Deleted> {
        self.list.deleted.get(&self.index)
    }

    /// Rows of the file its deletion vector deletes (0 without one).
    pub fn deleted_rows(&self) -> u64 {
        self.deleted().map_or(0, |d| d.rows.len() as u64)
    }

    /// Whether the file has a deletion vector.
    pub fn has_deletion_vector(&self) -> bool {
        self.deleted().is_some()
    }

    /// The file's deletion vector as its add action describes it (a commit that removes the
    /// file must name it too).
    pub fn deletion_vector(&self) -> Option<&'a crate::VectorDescriptor> {
        self.deleted().map(|d| &d.descriptor)
    }
}

/// The values of `a` at `indices`, in their order (buffers of their exact size).
fn pick_strings(a: &StringArray, indices: &[usize]) -> StringArray {
    let bytes = indices
        .iter()
        .filter_map(|&i| value(a, i))
        .map(str::len)
        .sum();
    let mut out = arrow_array::builder::StringBuilder::with_capacity(indices.len(), bytes);
    for &i in indices {
        out.append_option(value(a, i));
    }
    out.finish()
}

/// The values of `a` at `indices`, in their order.
fn pick_numbers(a: &UInt64Array, indices: &[usize]) -> UInt64Array {
    indices
        .iter()
        .map(|&i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

fn value(values: &StringArray, index: usize) -> Option<&str> {
    values.is_valid(index).then(|| values.value(index))
}

impl FileList {
    /// Files in the list.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the list has no file.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// File `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<DataFile<'_>> {
        (index < self.len()).then_some(DataFile { list: self, index })
    }

    /// File `index`.
    ///
    /// # Panics
    /// Past the end: indices come from the list (see [`get`](Self::get) otherwise).
    pub fn at(&self, index: usize) -> DataFile<'_> {
        assert!(index < self.len(), "no file {index} of {}", self.len());
        DataFile { list: self, index }
    }

    /// The files in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = DataFile<'_>> + '_ {
        (0..self.len()).map(|index| DataFile { list: self, index })
    }

    /// The partition columns the files have values for (sorted).
    pub fn partition_columns(&self) -> impl Iterator<Item = &str> {
        self.partitions.iter().map(|(n, _)| n.as_str())
    }

    /// Bytes of memory the list holds (its arrays, row counts and deleted rows).
    pub fn memory_size(&self) -> usize {
        let arrays = [
            self.paths.get_array_memory_size(),
            self.object_paths.get_array_memory_size(),
            self.sizes.get_array_memory_size(),
            self.records.get_array_memory_size(),
            self.tags.get_array_memory_size(),
            self.stats.as_ref().map_or(0, |s| s.get_array_memory_size()),
        ];
        let partitions: usize = self
            .partitions
            .iter()
            .map(|(n, v)| n.len() + v.get_array_memory_size())
            .sum();
        let deleted: usize = self.deleted.values().map(|d| d.rows.len() * 8).sum();
        arrays.iter().sum::<usize>() + partitions + self.rows.capacity() * 8 + deleted
    }

    /// What a remote table's store looks its files up by: the list's paths, sizes and tags
    /// (the arrays shared, not copied) and an index by object path made on first lookup.
    pub fn identities(&self) -> Identities {
        Identities {
            paths: self.paths.clone(),
            object_paths: self.object_paths.clone(),
            sizes: self.sizes.clone(),
            tags: self.tags.clone(),
            by_object_path: OnceLock::new(),
        }
    }

    /// Sets file `index`'s live rows.
    pub fn set_rows(&mut self, index: usize, rows: u64) {
        self.rows[index] = rows;
    }

    /// Attaches a deletion vector's rows to file `index`.
    pub(crate) fn set_deleted(&mut self, index: usize, deleted: Deleted) {
        self.deleted.insert(index, deleted);
    }

    /// The list of the files `keep` says, in order, with `rows` their live rows.
    pub fn keep(&self, keep: &[bool], rows: &[u64]) -> FileList {
        let kept: Vec<usize> = (0..self.len()).filter(|&i| keep[i]).collect();
        let deleted = kept
            .iter()
            .enumerate()
            .filter_map(|(new, old)| Some((new, self.deleted.get(old)?.clone())))
            .collect();
        let strings = |a: &StringArray| pick_strings(a, &kept);
        let numbers = |a: &UInt64Array| pick_numbers(a, &kept);
        FileList {
            paths: strings(&self.paths),
            object_paths: strings(&self.object_paths),
            sizes: numbers(&self.sizes),
            records: numbers(&self.records),
            rows: kept.iter().map(|&i| rows[i]).collect(),
            tags: strings(&self.tags),
            stats: self.stats.as_ref().map(strings),
            partitions: self
                .partitions
                .iter()
                .map(|(n, v)| (n.clone(), strings(v)))
                .collect(),
            deleted,
        }
    }
}

/// A [`FileList`]'s columns as Arrow arrays (the node's cache writes and reads them).
pub(crate) struct Columns {
    pub paths: StringArray,
    pub object_paths: StringArray,
    pub sizes: UInt64Array,
    pub records: UInt64Array,
    pub tags: StringArray,
    pub stats: Option<StringArray>,
    pub partitions: Vec<(String, StringArray)>,
}

impl FileList {
    /// The list's columns (its arrays shared, not copied); row counts and deletion vectors are
    /// not among them: they are learnt after the log.
    pub(crate) fn columns(&self) -> Columns {
        Columns {
            paths: self.paths.clone(),
            object_paths: self.object_paths.clone(),
            sizes: self.sizes.clone(),
            records: self.records.clone(),
            tags: self.tags.clone(),
            stats: self.stats.clone(),
            partitions: self.partitions.clone(),
        }
    }

    /// The list of `columns`, each file's live rows its record count; an error where they are
    /// not of one length.
    pub(crate) fn from_columns(columns: Columns) -> Result<FileList, String> {
        let Columns {
            paths,
            object_paths,
            sizes,
            records,
            tags,
            stats,
            partitions,
        } = columns;
        let n = paths.len();
        let mut lens = vec![
            ("object_path", object_paths.len()),
            ("size", sizes.len()),
            ("records", records.len()),
            ("tag", tags.len()),
        ];
        lens.extend(stats.as_ref().map(|s| ("stats", s.len())));
        lens.extend(partitions.iter().map(|(name, v)| (name.as_str(), v.len())));
        if let Some((name, len)) = lens.into_iter().find(|(_, len)| *len != n) {
            return Err(format!("column {name} has {len} values for {n} paths"));
        }
        if paths.null_count() + sizes.null_count() + tags.null_count() > 0 {
            return Err("a path, size or tag is null".into());
        }
        let rows = (0..n)
            .map(|i| match records.is_valid(i) {
                true => records.value(i),
                false => UNKNOWN,
            })
            .collect();
        Ok(FileList {
            paths,
            object_paths,
            sizes,
            records,
            rows,
            tags,
            stats,
            partitions,
            deleted: HashMap::new(),
        })
    }

    /// Writes what tells this file set from another into `hash`: each file's path and size
    /// (and deletion vector), in plan order.
    pub fn hash_into(&self, hash: &mut voxlake_io::location::StableHasher) {
        for f in self.iter() {
            match f.deleted() {
                None => hash.write(&format!("{}\0{}\n", f.path(), f.size())),
                Some(d) => hash.write(&format!("{}\0{}\0{}\n", f.path(), f.size(), d.id)),
            }
        }
    }

    /// `fnv1a64:` and 16 hex digits over [`hash_into`](Self::hash_into): two lists with the
    /// same hash hold the same files.
    pub fn file_set_hash(&self) -> String {
        let mut hash = voxlake_io::location::StableHasher::default();
        self.hash_into(&mut hash);
        format!("fnv1a64:{:016x}", hash.finish())
    }

    /// The list without the files' statistics (a snapshot without a filter does not read them).
    pub(crate) fn without_stats(mut self) -> FileList {
        self.stats = None;
        self
    }
}

/// A file list's identities, by object path (see [`FileList::identities`]).
pub struct Identities {
    paths: StringArray,
    object_paths: StringArray,
    sizes: UInt64Array,
    tags: StringArray,
    /// Indices in the order of their object paths: 4 bytes a file.
    by_object_path: OnceLock<Vec<u32>>,
}

impl Identities {
    /// The index of the file at `path` in the table's object store.
    fn position(&self, path: &Path) -> Option<usize> {
        let order = self.by_object_path.get_or_init(|| {
            let mut order: Vec<u32> = (0..self.paths.len() as u32).collect();
            order.sort_unstable_by(|&a, &b| self.raw_object_path(a).cmp(self.raw_object_path(b)));
            order
        });
        let wanted = path.as_ref();
        let at = order
            .binary_search_by(|&i| self.raw_object_path(i).cmp(wanted))
            .ok()?;
        Some(order[at] as usize)
    }

    fn raw_object_path(&self, index: u32) -> &str {
        let index = index as usize;
        value(&self.object_paths, index).unwrap_or_else(|| self.paths.value(index))
    }
}

/// The object store lookups of a remote table's reads (size and tag by path, for cache keys).
impl voxlake_io::remote::FileIdentities for Identities {
    fn identity(&self, path: &Path) -> Option<(u64, Cow<'_, str>)> {
        let index = self.position(path)?;
        Some((
            self.sizes.value(index),
            Cow::Borrowed(self.tags.value(index)),
        ))
    }

    fn count(&self) -> usize {
        self.paths.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(path: &'a str, order: i64, records: Option<u64>) -> Entry<'a> {
        Entry {
            path,
            object_path: None,
            size: path.len() as u64,
            records,
            tag: "t",
            stats: Some("{}"),
            order,
        }
    }

    #[test]
    fn files_are_sorted_by_write_time_then_path_and_keep_their_values() {
        let mut b = FileListBuilder::new(false);
        let p = |k: &'static str, v: Option<&'static str>| (Cow::Borrowed(k), v.map(Cow::Borrowed));
        b.push(entry("c", 2, Some(3)), [p("k", Some("x"))]);
        b.push(entry("b", 1, None), [p("k", None), p("j", Some("1"))]);
        b.push(entry("a", 2, Some(5)), []);
        let (list, places) = b.finish(&[0, 1, 2]);
        let paths: Vec<&str> = list.iter().map(|f| f.path()).collect();
        assert_eq!(paths, ["b", "a", "c"]);
        assert_eq!(places, [2, 0, 1]);
        assert_eq!(list.at(0).rows(), None);
        assert_eq!(list.at(2).rows(), Some(3));
        assert_eq!(list.at(2).partition("k"), Some(Some("x")));
        assert_eq!(list.at(0).partition("k"), Some(None));
        assert_eq!(list.at(1).partition("k"), Some(None), "not given: null");
        assert_eq!(list.at(0).partition("j"), Some(Some("1")));
        assert_eq!(
            list.at(2).partition("j"),
            Some(None),
            "given after it: null"
        );
        assert_eq!(list.at(0).partition("none"), None);
        assert_eq!(list.at(1).delta_stats(), None, "statistics not kept");
        assert_eq!(list.partition_columns().collect::<Vec<_>>(), ["j", "k"]);
    }

    #[test]
    fn object_paths_are_found_and_kept_files_keep_their_rows() {
        let mut b = FileListBuilder::new(true);
        for (i, path) in ["x/b", "x/a", "x/c%20d"].iter().enumerate() {
            let object = (i == 2).then_some("x/c d");
            b.push(
                Entry {
                    object_path: object,
                    ..entry(path, i as i64, Some(i as u64))
                },
                [],
            );
        }
        let (mut list, _) = b.finish(&[]);
        assert_eq!(list.identities().position(&Path::from("x/a")), Some(1));
        assert_eq!(list.at(2).object_path().as_ref(), "x/c d");
        assert_eq!(
            list.identities().position(&Path::parse("x/c d").unwrap()),
            Some(2)
        );
        assert_eq!(list.identities().position(&Path::from("x/z")), None);
        assert_eq!(list.at(0).delta_stats(), Some("{}"));
        list.set_rows(0, 7);
        let kept = list.keep(&[true, false, true], &[7, 1, 9]);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.at(0).rows(), Some(7));
        assert_eq!(kept.at(1).rows(), Some(9));
        assert_eq!(kept.at(1).path(), "x/c%20d");
        assert_eq!(kept.identities().position(&Path::from("x/b")), Some(0));
    }

    #[test]
    fn a_file_takes_far_less_than_a_struct_of_strings() {
        let mut b = FileListBuilder::new(false);
        for i in 0..10_000 {
            let path = format!("part-{i:07}.parquet");
            b.push(entry(&path, i, Some(1)), []);
        }
        let (list, _) = b.finish(&[]);
        let per_file = list.memory_size() / list.len();
        // 22 bytes of path + offsets, size, records, rows, a tag: ~60–70 bytes.
        assert!(per_file <= 80, "{per_file} bytes a file");
    }
}
