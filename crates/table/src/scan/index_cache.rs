//! A scan's row index kept in the node's disk cache: the first process of a node to ask a
//! version's rows by id reads the id column and writes the index as one entry; the node's
//! other processes (each `DataLoader` worker, each rank) and later lookups read the entry
//! instead of the column (`DiskCache::get_or_make`: processes asking at once wait for the
//! first).
//!
//! The rows a scan reads are fixed by its files and filter (`Scan::file_set_hash`), so the
//! entry is keyed by them, the id column and this format. The cache checks every entry's
//! CRC-32 before a byte is used; an entry that is whole but does not decode
//! (`RowIndexBuilder::decode` checks it before copying) or holds an id twice is not trusted:
//! the index is read from the table.

use std::sync::{Arc, Mutex};

use super::Scan;
use crate::error::TableError;
use crate::row_index::{RowIndex, RowIndexBuilder};

/// Names the entries of this format (a new format is another entry, never misread).
const FORMAT: &str = "voxlake-row-index-1";

impl Scan {
    /// The row index through `cache` (the table's store named by `identity` in its keys).
    pub(super) async fn row_index_through(
        &self,
        cache: &Arc<voxlake_io::cache::DiskCache>,
        identity: &str,
    ) -> Result<RowIndex, TableError> {
        let column = self.snapshot.columns().id.clone();
        let name = format!(
            "{FORMAT}/{}@{}/{}/{}",
            self.snapshot.location(),
            self.snapshot.version(),
            self.file_set_hash(),
            column
                .as_deref()
                .map_or("#made".to_string(), |c| format!("id:{c}")),
        );
        // What the read gave, handed out as it is (no decoding of what was just encoded).
        let made: Mutex<Option<Result<RowIndex, TableError>>> = Mutex::new(None);
        let got = cache
            .get_or_make(identity, &name, async {
                let index = self.read_row_index().await;
                let encoded = match &index {
                    Ok(index) => Ok(bytes::Bytes::from(index.encode())),
                    Err(_) => Err(object_store::Error::Generic {
                        store: "voxlake row index",
                        source: "the ids could not be read: nothing kept".into(),
                    }),
                };
                *made.lock().unwrap_or_else(|e| e.into_inner()) = Some(index);
                encoded
            })
            .await;
        if let Some(index) = made.into_inner().unwrap_or_else(|e| e.into_inner()) {
            if let (Err(e), Ok(_)) = (&got, &index) {
                tracing::warn!(location = self.snapshot.location(), error = %e, "row index not kept in the node's cache");
            }
            return index;
        }
        let decoded = match &got {
            Ok(bytes) => RowIndexBuilder::decode(bytes).and_then(|b| b.finish().ok()),
            Err(_) => None,
        };
        match decoded {
            Some(index) => Ok(index),
            None => {
                let why = got
                    .err()
                    .map_or("it does not decode".to_string(), |e| e.to_string());
                tracing::warn!(
                    location = self.snapshot.location(),
                    entry = name.as_str(),
                    error = why.as_str(),
                    "the node's cached row index is not usable: reading the ids from the table"
                );
                self.read_row_index().await
            }
        }
    }
}
