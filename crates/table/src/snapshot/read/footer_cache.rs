//! The footers a snapshot keeps: the most recently used, up to [`FOOTER_CACHE_BYTES`].
//!
//! Every footer read used to stay for the snapshot's life (~10 KB a file: an epoch over 10⁵
//! files grew the process by ~1 GB, outside the memory budget). A footer is needed while its
//! file's row groups are read; a file whose footer was let go and is read again costs one more
//! request (served by the node's disk cache where there is one). Entries are shared (`Arc`), so
//! one in use is never taken from its reader, and loading one is done once however many ask.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use tokio::sync::OnceCell;

use crate::rows::GroupRows;

/// Bytes of footers (as `ParquetMetaData::memory_size` counts them) a snapshot keeps.
pub const FOOTER_CACHE_BYTES: usize = 64 << 20;

/// What a snapshot keeps of one file's footer.
#[derive(Default)]
pub(crate) struct Footer {
    /// As the file's schema says.
    pub plain: OnceCell<ArrowReaderMetadata>,
    /// Binary columns read as `BinaryView` (see `Snapshot::view_metadata`).
    pub view: OnceCell<ArrowReaderMetadata>,
    /// For a file with a deletion vector: the rows each row group keeps.
    pub undeleted: OnceCell<Arc<GroupRows>>,
    /// Bytes counted for it (0 until its plain footer is loaded).
    bytes: AtomicUsize,
}

/// The footers kept (see the [module](self)).
pub(crate) struct FooterCache {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Entries by file index, with when each was last used.
    entries: HashMap<usize, (Arc<Footer>, u64)>,
    /// File indices by last use, oldest first.
    by_use: BTreeMap<u64, usize>,
    clock: u64,
    bytes: usize,
}

impl Default for FooterCache {
    fn default() -> Self {
        FooterCache::new(FOOTER_CACHE_BYTES)
    }
}

impl FooterCache {
    /// A cache of up to `cap` bytes of footers.
    pub(crate) fn new(cap: usize) -> FooterCache {
        FooterCache {
            cap,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing panics while holding it; a poisoned map is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// File `index`'s entry (made empty if there is none), marked as just used.
    pub(crate) fn entry(&self, index: usize) -> Arc<Footer> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let Inner {
            entries, by_use, ..
        } = &mut *inner;
        let (footer, used) = entries.entry(index).or_default();
        by_use.remove(used);
        *used = now;
        by_use.insert(now, index);
        footer.clone()
    }

    /// File `index`'s entry if it is kept (its use not marked).
    pub(crate) fn peek(&self, index: usize) -> Option<Arc<Footer>> {
        self.lock().entries.get(&index).map(|(f, _)| f.clone())
    }

    /// Counts `bytes` for the footer just loaded into `footer` (file `index`'s entry, if it is
    /// still kept), then lets the least recently used go while the footers kept are over the
    /// cap (the last one used always stays).
    pub(crate) fn loaded(&self, index: usize, footer: &Arc<Footer>, bytes: usize) {
        let mut inner = self.lock();
        let kept = inner
            .entries
            .get(&index)
            .is_some_and(|(f, _)| Arc::ptr_eq(f, footer));
        if !kept {
            return;
        }
        footer.bytes.store(bytes, Ordering::Relaxed);
        inner.bytes += bytes;
        while inner.bytes > self.cap && inner.entries.len() > 1 {
            let Some((_, index)) = inner.by_use.pop_first() else {
                break;
            };
            if let Some((gone, _)) = inner.entries.remove(&index) {
                inner.bytes = inner
                    .bytes
                    .saturating_sub(gone.bytes.load(Ordering::Relaxed));
            }
        }
    }

    /// Bytes of the footers kept.
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Footers kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_footers_go_past_the_cap() {
        let cache = FooterCache::new(250);
        for index in 0..3 {
            let e = cache.entry(index);
            cache.loaded(index, &e, 100);
        }
        // 300 > 250: file 0, used least recently, went.
        assert_eq!(cache.len(), 2);
        assert!(cache.peek(0).is_none());
        assert_eq!(cache.bytes(), 200);
        // Using file 1 makes file 2 the oldest.
        let one = cache.entry(1);
        let e = cache.entry(3);
        cache.loaded(3, &e, 100);
        assert!(cache.peek(2).is_none());
        assert!(cache.peek(1).is_some() && cache.peek(3).is_some());
        // An entry in use stays whole for its holder after it went.
        let big = cache.entry(4);
        cache.loaded(4, &big, 1000);
        // A footer loaded after its entry went is not counted.
        cache.loaded(1, &one, 100);
        assert_eq!(cache.len(), 1, "only the last one used stays past the cap");
        assert!(Arc::strong_count(&one) >= 1);
        assert_eq!(cache.bytes(), 1000);
    }
}
