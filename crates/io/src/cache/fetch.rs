//! Reads through the cache ([`DiskCache::get_or_fetch`], and [`DiskCache::get_or_fetch_log`]
//! for a table's log): an entry read when it is there, else fetched once per node and written
//! in the background.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{DiskCache, EntryKey, PENDING_WRITE_MIB, blocking};

impl DiskCache {
    /// The entry `key` of `object` (for messages): read from disk when it is there and whole,
    /// else fetched with `fetch` (once per node when several ask at once) and written in the
    /// background, off the read's path (the lock held until it is in place, so a reader of the
    /// same entry waits for it rather than fetching it again).
    pub(crate) async fn get_or_fetch<F>(
        self: &Arc<Self>,
        key: EntryKey,
        object: &str,
        fetch: F,
    ) -> object_store::Result<Vec<Bytes>>
    where
        F: std::future::Future<Output = object_store::Result<Vec<Bytes>>>,
    {
        let key = Arc::new(key);
        let object: Arc<str> = object.into();
        let lock = {
            let (c, k, o) = (self.clone(), key.clone(), object.clone());
            match blocking(move || c.lookup_or_lock(&k, &o)).await? {
                Ok(parts) => return Ok(parts),
                Err(lock) => lock,
            }
        };
        let parts = fetch.await?;
        let misses = match key.log {
            true => &self.counters.log_misses,
            false => &self.counters.misses,
        };
        misses.fetch_add(1, Ordering::Relaxed);
        // Writes wait here when the disk is slower than the store: what they hold is bounded.
        let payload: usize = parts.iter().map(Bytes::len).sum();
        let mib = (payload.div_ceil(1 << 20) as u32).clamp(1, PENDING_WRITE_MIB);
        let permit = self.writes.clone().acquire_many_owned(mib).await.ok();
        let (c, p) = (self.clone(), parts.clone());
        tokio::task::spawn_blocking(move || {
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                c.write(&key, &p, &object);
            }));
            if let Some(lock) = lock {
                // Removed before it is unlocked: a waiter on it looks again and finds the entry.
                let _ = std::fs::remove_file(c.lock_path(&key.file_name()));
                drop(lock);
            }
            drop(permit);
            if let Err(panic) = written {
                let message = crate::error::panic_message(panic.as_ref());
                tracing::error!(
                    object = &*object,
                    message,
                    "writing a cache entry panicked (the read was served)"
                );
            }
        });
        Ok(parts)
    }

    /// A piece of a table's log: the bytes of `range` of `object` (`size` bytes, told apart by
    /// `tag`) in store `store`, read from its entry when it is there and whole, else fetched
    /// with `fetch` (once per node when several ask at once) and written in the background;
    /// counted in [`CacheStats::log_hits`](super::CacheStats::log_hits) and [`CacheStats::log_misses`](super::CacheStats::log_misses), apart from the data
    /// reads. Only objects that never change once written may be kept so: the caller decides
    /// which.
    pub async fn get_or_fetch_log<F>(
        self: &Arc<Self>,
        store: &str,
        object: &str,
        size: u64,
        tag: &str,
        range: std::ops::Range<u64>,
        fetch: F,
    ) -> object_store::Result<Bytes>
    where
        F: std::future::Future<Output = object_store::Result<Bytes>>,
    {
        let key = EntryKey::log(store, object, size, tag, range);
        let parts = self
            .get_or_fetch(key, object, async { fetch.await.map(|b| vec![b]) })
            .await?;
        Ok(parts.into_iter().next().unwrap_or_default())
    }
}
