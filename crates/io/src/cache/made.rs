//! Entries made from a table rather than read from it (a version's replayed file list, a job's
//! version): what a rank of the node made, the others read.

use std::sync::Arc;

use bytes::Bytes;

use super::{DiskCache, EntryKey};

impl DiskCache {
    /// The entry named `name` of the table in store `store` (see `location::store_identity`)
    /// that is made rather than read, such as a version's replayed file list: read from disk
    /// when it is there and whole (checked like every entry), else made by `make` — once per
    /// node when several processes ask at once: the others wait for it and read it — and
    /// written. Counted as the log's hits and misses.
    pub async fn get_or_make<F>(
        self: &Arc<Self>,
        store: &str,
        name: &str,
        make: F,
    ) -> object_store::Result<Bytes>
    where
        F: std::future::Future<Output = object_store::Result<Bytes>>,
    {
        let key = EntryKey::made(store, name);
        let parts = self
            .get_or_fetch(key, name, async { Ok(vec![make.await?]) })
            .await?;
        Ok(parts.into_iter().next().unwrap_or_default())
    }

    /// Whether the entry named `name` of store `store` is on disk (looked for, not read nor
    /// checked): a process that could make it learns that another already did.
    pub fn has_made(&self, store: &str, name: &str) -> bool {
        self.entry_path(&EntryKey::made(store, name).file_name())
            .exists()
    }
}
