//! [`Sources`]: the scans a stream reads — one table's, or a mixture's sources' — with
//! their files numbered one after the other (source 0's files, then source 1's, …), so that
//! the plan orders, deals and resumes them as the files of one table.

use std::sync::Arc;

use voxlake_table::{Scan, Snapshot, TableError};

use crate::error::StreamError;

/// The scans a stream reads, in order: one table's, or a mixture's sources', their files
/// numbered one after the other (source 0's, then source 1's, …) so that the plan orders,
/// deals and resumes them as the files of one table.
///
/// Every source delivers the same fields (names, shapes, dtypes, in order), and all have a
/// label column or none: a batch mixes their rows.
#[derive(Debug, Clone)]
pub struct Sources {
    scans: Vec<Arc<Scan>>,
    /// `first[s]`: the number of source `s`'s first file; one more entry at the end.
    first: Vec<usize>,
}

impl From<Arc<Scan>> for Sources {
    fn from(scan: Arc<Scan>) -> Self {
        let files = scan.files().len();
        Sources {
            scans: vec![scan],
            first: vec![0, files],
        }
    }
}

impl Sources {
    /// The sources of a mixture, in order: at least one, each delivering the fields the first
    /// does (a field that differs is an error naming the source, the field and both specs,
    /// before any data is read).
    pub fn new(scans: Vec<Arc<Scan>>) -> Result<Sources, StreamError> {
        let Some(head) = scans.first().map(|s| s.snapshot().as_ref()) else {
            return Err(StreamError::Internal("a mixture of no source".into()));
        };
        let want = head.sample();
        for (s, scan) in scans.iter().enumerate().skip(1) {
            let snapshot = scan.snapshot().as_ref();
            let got = snapshot.sample();
            let names = |spec: &voxlake_format::SampleSpec| {
                spec.fields()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect::<Vec<_>>()
            };
            let has_label = |s: &Snapshot| s.columns().label.is_some();
            let reason = if has_label(head) != has_label(snapshot) {
                Some(format!(
                    "it has {} label column, source 0 ({}) {}: a batch's labels would be lost",
                    if has_label(snapshot) { "a" } else { "no" },
                    voxlake_io::redact(head.location()),
                    if has_label(head) {
                        "has one"
                    } else {
                        "has none"
                    }
                ))
            } else if names(want) != names(got) {
                Some(format!(
                    "its fields are {:?}, source 0's ({}) {:?}",
                    names(got),
                    voxlake_io::redact(head.location()),
                    names(want)
                ))
            } else {
                want.fields()
                    .iter()
                    .zip(got.fields())
                    .find(|(a, b)| a.kind != b.kind)
                    .map(|(a, b)| {
                        format!(
                            "field '{}' is {}, in source 0 ({}) {}",
                            a.name,
                            b.kind,
                            voxlake_io::redact(head.location()),
                            a.kind
                        )
                    })
            };
            if let Some(reason) = reason {
                return Err(StreamError::from(TableError::Incompatible {
                    location: snapshot.location().to_string(),
                    reason: format!("source {s} of the mixture: {reason}"),
                }));
            }
        }
        let mut first = Vec::with_capacity(scans.len() + 1);
        let mut at = 0;
        for scan in &scans {
            first.push(at);
            at += scan.files().len();
        }
        first.push(at);
        Ok(Sources { scans, first })
    }

    /// How many sources (1: one table).
    pub fn len(&self) -> usize {
        self.scans.len()
    }

    /// Whether there is no source (never: a `Sources` has at least one).
    pub fn is_empty(&self) -> bool {
        self.scans.is_empty()
    }

    /// The scans, in order.
    pub fn scans(&self) -> &[Arc<Scan>] {
        &self.scans
    }

    /// What the sources' filters skipped and kept, summed (`None` where no source has one).
    pub fn filter_stats(&self) -> Option<voxlake_table::FilterStats> {
        let mut each = self.scans.iter().filter_map(|s| s.filter_stats());
        let mut sum = each.next()?.clone();
        for stats in each {
            sum += stats;
        }
        Some(sum)
    }

    /// The number of files of all sources.
    pub fn file_count(&self) -> usize {
        self.first.last().copied().unwrap_or(0)
    }

    /// Files of each source, in order.
    pub fn files_per_source(&self) -> Vec<usize> {
        self.first.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The source of file `file` (numbered over all sources).
    pub fn source_of(&self, file: usize) -> usize {
        (self.first.partition_point(|&f| f <= file) - 1).min(self.scans.len() - 1)
    }

    /// File `file`'s source, its scan and its number in that scan.
    pub fn locate(&self, file: usize) -> (usize, &Arc<Scan>, usize) {
        let s = self.source_of(file);
        (s, &self.scans[s], file - self.first[s])
    }
}
