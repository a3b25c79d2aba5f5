//! The rows deletion vectors leave in each row group of a file, learnt once from its footer.

use std::sync::Arc;

use super::Snapshot;
use crate::error::TableError;
use crate::rows::{GroupRows, live_by_group};

impl Snapshot {
    /// For a file with a deletion vector, the rows each of its row groups keeps (`None` where
    /// one keeps them all); `None` without a vector.
    pub(crate) async fn undeleted(
        &self,
        index: usize,
    ) -> Result<Option<Arc<GroupRows>>, TableError> {
        let Some(deleted) = self.file(index)?.deleted() else {
            return Ok(None);
        };
        let meta = self.reader_metadata(index).await?;
        self.footers
            .entry(index)
            .undeleted
            .get_or_try_init(|| async {
                let sizes: Vec<u64> = meta
                    .metadata()
                    .row_groups()
                    .iter()
                    .map(|rg| rg.num_rows().max(0) as u64)
                    .collect();
                let kept =
                    live_by_group(&deleted.rows, &sizes).map_err(|reason| TableError::Corrupt {
                        location: self.location.clone(),
                        file: self.path_of(index).to_string(),
                        reason: format!("its deletion vector {}: {reason}", deleted.id),
                    })?;
                Ok::<_, TableError>(Arc::new(kept))
            })
            .await
            .cloned()
            .map(Some)
    }
}
