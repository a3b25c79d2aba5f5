//! Building a [`FileList`] file by file, in the log's order, then sorted.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use arrow_array::builder::{ArrayBuilder, StringBuilder, UInt64Builder};
use arrow_array::{Array, StringArray, UInt64Array};

use super::{FileList, UNKNOWN, pick_numbers, pick_strings};

/// One file as the log (or listing) gives it, for [`FileListBuilder::push`].
pub(crate) struct Entry<'a> {
    pub path: &'a str,
    /// The path in the object store, where it is not `path`.
    pub object_path: Option<&'a str>,
    pub size: u64,
    pub records: Option<u64>,
    pub tag: &'a str,
    pub stats: Option<&'a str>,
    /// What orders files: the write time (Delta), or nothing (a listing: by path).
    pub order: i64,
}

/// Builds a [`FileList`] file by file, then sorts it (see [`finish`](Self::finish)).
pub(crate) struct FileListBuilder {
    paths: StringBuilder,
    object_paths: StringBuilder,
    sizes: UInt64Builder,
    records: UInt64Builder,
    tags: StringBuilder,
    stats: Option<StringBuilder>,
    partitions: BTreeMap<String, StringBuilder>,
    order: Vec<i64>,
}

impl FileListBuilder {
    /// A builder that keeps the files' statistics if `stats`.
    pub(crate) fn new(stats: bool) -> FileListBuilder {
        FileListBuilder {
            paths: StringBuilder::new(),
            object_paths: StringBuilder::new(),
            sizes: UInt64Builder::new(),
            records: UInt64Builder::new(),
            tags: StringBuilder::new(),
            stats: stats.then(StringBuilder::new),
            partitions: BTreeMap::new(),
            order: Vec::new(),
        }
    }

    /// Files pushed so far.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Adds one file with its partition values (a column missing here is null for it).
    pub(crate) fn push<'p>(
        &mut self,
        entry: Entry<'_>,
        partitions: impl IntoIterator<Item = (Cow<'p, str>, Option<Cow<'p, str>>)>,
    ) {
        let at = self.len();
        self.paths.append_value(entry.path);
        self.object_paths
            .append_option(entry.object_path.filter(|p| *p != entry.path));
        self.sizes.append_value(entry.size);
        self.records.append_option(entry.records);
        self.tags.append_value(entry.tag);
        if let Some(stats) = &mut self.stats {
            stats.append_option(entry.stats);
        }
        self.order.push(entry.order);
        for (name, value) in partitions {
            let column = self.partitions.entry(name.into_owned()).or_insert_with(|| {
                let mut b = StringBuilder::new();
                b.append_nulls(at);
                b
            });
            if column.len() == at {
                column.append_option(value);
            }
        }
        for column in self.partitions.values_mut() {
            if column.len() == at {
                column.append_null();
            }
        }
    }

    /// The list, sorted by `order` then path (the log's order is not stable across
    /// checkpoints: plans must not depend on it), and for each index given in `log_order`
    /// (an index in the order files were pushed) its index in the list.
    pub(crate) fn finish(mut self, log_order: &[usize]) -> (FileList, Vec<usize>) {
        let paths = self.paths.finish();
        let mut sorted: Vec<u32> = (0..paths.len() as u32).collect();
        sorted.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            self.order[a]
                .cmp(&self.order[b])
                .then_with(|| paths.value(a).cmp(paths.value(b)))
        });
        let order: Vec<usize> = sorted.iter().map(|&i| i as usize).collect();
        let strings = |a: &StringArray| pick_strings(a, &order);
        let numbers = |a: &UInt64Array| pick_numbers(a, &order);
        let records = numbers(&self.records.finish());
        let rows = (0..records.len())
            .map(|i| match records.is_valid(i) {
                true => records.value(i),
                false => UNKNOWN,
            })
            .collect();
        let mut place = vec![0usize; sorted.len()];
        for (new, &old) in sorted.iter().enumerate() {
            place[old as usize] = new;
        }
        let list = FileList {
            paths: strings(&paths),
            object_paths: strings(&self.object_paths.finish()),
            sizes: numbers(&self.sizes.finish()),
            records,
            rows,
            tags: strings(&self.tags.finish()),
            stats: self.stats.as_mut().map(|s| strings(&s.finish())),
            partitions: std::mem::take(&mut self.partitions)
                .into_iter()
                .map(|(n, mut v)| (n, strings(&v.finish())))
                .collect(),
            deleted: HashMap::new(),
        };
        (list, log_order.iter().map(|&i| place[i]).collect())
    }
}
