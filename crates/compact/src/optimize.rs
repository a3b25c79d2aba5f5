//! Bin-packing small files into files of the target size, with the streaming layout.
//!
//! This is Delta OPTIMIZE (the commit removes and adds files with `dataChange = false`), done
//! with the same writer as conversion so the new files have exactly the row groups and column
//! settings of [`Layout`](voxlake_format::Layout). deltalake's own optimize needs its
//! `datafusion` feature, which would double the build and not keep that layout.

use std::collections::HashMap;
use std::time::Instant;

use deltalake::kernel::{Action, Remove};
use deltalake::protocol::DeltaOperation;
use deltalake::writer::DeltaWriter;
use serde::Serialize;

use crate::Compactor;
use crate::error::CompactError;
use voxlake_io::location;

use crate::table::{Table, writer_for};

/// What an optimize run did.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizeSummary {
    /// Files removed (rewritten).
    pub files_removed: usize,
    /// Files added.
    pub files_added: usize,
    /// Rows rewritten.
    pub rows: usize,
    /// Bytes of the removed files.
    pub bytes_removed: u64,
    /// Bytes of the added files.
    pub bytes_added: u64,
    /// Commits made.
    pub commits: usize,
    /// Table version after the run.
    pub version: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Groups files smaller than `target` into bins of at most `target` bytes (first fit,
/// largest first) and keeps the bins that merge two or more files. Returns indices into
/// `sizes`; pure, so it is unit-tested.
pub fn plan_bins(sizes: &[u64], target: u64) -> Vec<Vec<usize>> {
    let mut small: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] < target).collect();
    small.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), i));
    let mut bins: Vec<(u64, Vec<usize>)> = Vec::new();
    for i in small {
        match bins
            .iter_mut()
            .find(|(total, _)| total + sizes[i] <= target)
        {
            Some((total, members)) => {
                *total += sizes[i];
                members.push(i);
            }
            None => bins.push((sizes[i], vec![i])),
        }
    }
    bins.into_iter()
        .map(|(_, members)| members)
        .filter(|members| members.len() > 1)
        .collect()
}

impl Compactor {
    pub(crate) async fn run_optimize(&self) -> Result<OptimizeSummary, CompactError> {
        let start = Instant::now();
        let options = location::storage_options(&self.storage_options);
        let mut table = self.open_existing(&options).await?;
        // Only voxlake tables: the rewrite uses their schema and layout.
        table.sample()?;
        let scan = table.scan().await?;
        let files = scan.files();
        let sizes: Vec<u64> = files.iter().map(|f| f.size()).collect();
        let target = self.layout.target_file_bytes;
        let bins = plan_bins(&sizes, target);
        let mut summary = OptimizeSummary {
            files_removed: 0,
            files_added: 0,
            rows: 0,
            bytes_removed: 0,
            bytes_added: 0,
            commits: 0,
            version: table.version(),
            seconds: 0.0,
        };
        tracing::info!(files = files.len(), bins = bins.len(), "optimize plan");
        for chunk in bins.chunks(self.files_per_commit.max(1)) {
            let members: Vec<_> = chunk.iter().flatten().map(|&i| files.at(i)).collect();
            // One writer per bin: each bin becomes one file, and first-fit-decreasing bins
            // never fit together, so a second optimize finds nothing to do.
            let mut adds = Vec::new();
            let mut rows = 0;
            for bin in chunk {
                let mut writer = writer_for(&table, &self.layout)?;
                let written: Result<(), CompactError> = async {
                    for &file in bin {
                        let batches = scan
                            .read_file(file, None, self.layout.row_group_rows)
                            .await?;
                        for batch in batches {
                            rows += batch.num_rows();
                            writer.write(batch).await.map_err(|e| table.error(e))?;
                        }
                    }
                    Ok(())
                }
                .await;
                if let Err(e) = written {
                    writer.reset();
                    return Err(e);
                }
                adds.extend(writer.flush().await.map_err(|e| table.error(e))?);
            }
            let now = chrono_millis();
            let mut actions: Vec<Action> = Vec::new();
            for add in &mut adds {
                add.data_change = false;
                summary.bytes_added += add.size as u64;
            }
            summary.files_added += adds.len();
            actions.extend(adds.into_iter().map(Action::Add));
            for file in &members {
                summary.bytes_removed += file.size();
                actions.push(Action::Remove(Remove {
                    path: file.path().to_string(),
                    data_change: false,
                    deletion_timestamp: Some(now),
                    extended_file_metadata: Some(true),
                    partition_values: Some(HashMap::new()),
                    size: Some(file.size() as i64),
                    // The rewrite left its deleted rows out; the remove names the vector the
                    // add had, as the protocol asks.
                    deletion_vector: file.deletion_vector().map(descriptor),
                    ..Default::default()
                }));
            }
            let operation = DeltaOperation::Optimize {
                predicate: None,
                target_size: target as i64,
            };
            summary.version = table.commit(actions, operation, "optimize", false).await?;
            summary.files_removed += members.len();
            summary.rows += rows;
            summary.commits += 1;
        }
        summary.seconds = start.elapsed().as_secs_f64();
        Ok(summary)
    }

    pub(crate) async fn open_existing(
        &self,
        options: &HashMap<String, String>,
    ) -> Result<Table, CompactError> {
        let url = location::to_url(&self.table, true)?;
        let display = crate::table::redact_url(&url);
        Table::open(&url, &display, options)
            .await?
            .ok_or_else(|| CompactError::Incompatible {
                location: display,
                reason: "no Delta table there".into(),
            })
    }
}

fn chrono_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// voxlake-delta's description of a deletion vector as deltalake's action field.
fn descriptor(v: &voxlake_delta::VectorDescriptor) -> deltalake::kernel::DeletionVectorDescriptor {
    use deltalake::kernel::StorageType;
    deltalake::kernel::DeletionVectorDescriptor {
        storage_type: match v.storage_type {
            'i' => StorageType::Inline,
            'p' => StorageType::AbsolutePath,
            _ => StorageType::UuidRelativePath,
        },
        path_or_inline_dv: v.path_or_inline_dv.clone(),
        offset: v.offset,
        size_in_bytes: v.size_in_bytes,
        cardinality: v.cardinality,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_merge_small_files_up_to_the_target() {
        // 100 = target; 100 and 120 are full already.
        let sizes = [100, 120, 60, 30, 30, 10, 50, 45];
        let bins = plan_bins(&sizes, 100);
        let mut seen: Vec<usize> = bins.iter().flatten().copied().collect();
        seen.sort();
        // Every small file is placed once, full ones never.
        for bin in &bins {
            assert!(bin.len() > 1);
            assert!(bin.iter().map(|&i| sizes[i]).sum::<u64>() <= 100);
        }
        assert!(!seen.contains(&0) && !seen.contains(&1));
        // First fit, largest first: {60, 30, 10} and {50, 45}; the second 30 stays alone.
        assert_eq!(seen, vec![2, 3, 5, 6, 7]);
        assert_eq!(bins.len(), 2);
    }

    #[test]
    fn nothing_to_do_when_files_are_full_or_alone() {
        assert!(plan_bins(&[100, 200], 100).is_empty());
        assert!(plan_bins(&[90], 100).is_empty());
        assert!(plan_bins(&[60, 60], 100).is_empty());
        assert!(plan_bins(&[], 100).is_empty());
    }
}
