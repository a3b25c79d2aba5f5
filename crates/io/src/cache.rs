//! A node-local disk cache of remote reads: the second epoch of a remote table reads from local
//! disk, and the ranks and processes of a node share what one of them fetched.
//!
//! An entry holds the bytes of one read (a row group's column chunks, a footer) of one data
//! file, keyed by what makes them immutable: the table, the file's path, size and tag (its
//! e-tag where the listing gives one, else its modification time from the Delta log) and the
//! ranges. A file rewritten under the same path has another size or tag, so its old entries
//! are never read again (they age out).
//!
//! Shared without a daemon: an entry is written to `tmp/` and renamed into `entries/`, so a
//! reader sees it whole or not at all, and a process killed at any point leaves only a
//! temporary file that is never read (deleted after an hour). A miss takes an exclusive lock
//! on `locks/<entry>` (`flock`, released by the kernel if its holder dies) and looks again
//! before fetching: ranks that ask for the same entry at once download it once. Every entry
//! carries a CRC-32 over its key and bytes, checked when read (on local disk once a process:
//! its later hits read the same file): a corrupt entry is deleted and fetched again with a
//! warning, never handed out. Hits touch the entry's modification
//! time; when the entries outgrow the cap, the least recently used go until they fit 90 % of
//! it (each process counts its own writes and recounts the folder after every 1/16 of the cap
//! it wrote, so processes sharing a folder keep it near the cap). The cache lives on disk: the
//! memory budget does not change (entries are mapped like local tables' chunks).
//!
//! A write that fails (a full disk) is logged and the read goes on uncached; a cache that
//! cannot be opened is an error at `build()`.
//!
//! Safe on a shared node: the cache lives in a folder of its own, [`CACHE_SUBDIR`], inside the
//! one it is given (so pointing it at `$HOME` or `/tmp` touches nothing else there), created
//! 0700 and refused when another user owns it or others may write to it; entries and locks are
//! files 0600, opened without following a symbolic link and without blocking (a FIFO planted
//! as an entry is refused, not waited on), and used only when this user owns them. Only names
//! of its own format are ever deleted, and a wait for another process's lock ends after
//! `LOCK_WAIT` (the read goes on and fetches itself).
//!
//! Entries are mapped, like a local table's chunks, where the cache lies on local disk: a hit
//! costs what a local read costs, the page cache's pages handed out without a copy. A mapping
//! faults (`SIGBUS`) if its file is cut short under it; an entry never is. It is written whole
//! under another name and renamed into place, then only ever unlinked (evicted, or deleted as
//! corrupt), and an unlinked file stays readable through a mapping of it; a rename over it (the
//! same entry written again) leaves the mapped file as it was. No other user can reach it (the
//! folder is 0700 and this user's, an entry is used only when this user owns it), so only a
//! process of this user that truncates an entry in place, or a failing disk, could fault one:
//! as for local tables. On network and FUSE mounts, where a read can fail for passing reasons,
//! entries are read into recycled buffers, and a failed read is an error.

mod choice;
mod entry;
mod evict;
mod fetch;
mod made;
mod private;
mod verified;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::private::private_dir;
pub use choice::{CACHE_DIR_ENV, CACHE_MAX_MB_ENV, CacheChoice};
pub(crate) use entry::EntryKey;
use private::{create_private, open_private, ours, owned_regular};

use crate::error::IoError;
use crate::local::pool::BufferPool;

/// Temporary files and lock files older than this belong to dead processes.
const STALE: Duration = Duration::from_secs(3600);
/// The folder a cache keeps inside the one it is given: the only one it creates files in or
/// deletes from.
pub const CACHE_SUBDIR: &str = "voxlake-cache-v1";
/// How long a miss waits for another process fetching the same entry before fetching too.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(60);
/// MiB of entries being written in the background at most.
const PENDING_WRITE_MIB: u32 = 256;

/// What a cache did (counted since it was opened, by this process).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads fetched from the store and written to the cache.
    pub misses: u64,
    /// Bytes of data reads served from the cache (the log's not counted).
    pub bytes_read: u64,
    /// Bytes written to the cache (log entries too: they count against the cap).
    pub bytes_written: u64,
    /// Entries found corrupt (deleted and fetched again).
    pub corrupt: u64,
    /// Entries this process evicted.
    pub evicted: u64,
    /// Reads of a table's log served from the cache (not in `hits`: see
    /// [`DiskCache::get_or_fetch_log`]).
    pub log_hits: u64,
    /// Reads of a table's log fetched from the store and written to the cache.
    pub log_misses: u64,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    log_hits: AtomicU64,
    log_misses: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    corrupt: AtomicU64,
    evicted: AtomicU64,
}

/// A disk cache of remote reads in a local folder, shared by every process that opens the
/// same folder. See the [module](self) documentation.
///
/// ```
/// # fn main() -> Result<(), voxlake_io::IoError> {
/// let dir = tempfile::tempdir().unwrap();
/// let cache = voxlake_io::cache::DiskCache::open(dir.path(), 8 << 30)?;
/// assert_eq!(cache.stats().hits, 0);
/// assert_eq!(cache.max_bytes(), 8 << 30);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes of entries as last counted, plus this process's writes since.
    used: AtomicU64,
    /// Bytes this process wrote since it last counted the folder.
    since_scan: AtomicU64,
    counters: Counters,
    /// Whether entries are mapped (the folder is on local disk) or read.
    map: bool,
    /// Buffers for entries read (not mapped) from network filesystems.
    pool: Arc<BufferPool>,
    /// Entries on local disk whose checksum this process checked.
    verified: verified::Verified,
    /// A failed write was logged (once is enough).
    write_warned: AtomicBool,
    /// MiB of entries being written in the background.
    writes: Arc<tokio::sync::Semaphore>,
}

impl DiskCache {
    /// Opens (creating it if needed) the cache in `dir`, holding at most `max_bytes` of
    /// entries; entries past the cap are evicted now.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<Arc<DiskCache>, IoError> {
        let given = dir.into();
        let shown = given.display().to_string();
        let fail = |reason: String| IoError::Cache {
            dir: shown.clone(),
            reason,
        };
        if max_bytes == 0 {
            return Err(fail("a cap of 0 bytes caches nothing".into()));
        }
        std::fs::create_dir_all(&given).map_err(|e| fail(format!("cannot create it: {e}")))?;
        let dir = given.join(CACHE_SUBDIR);
        for folder in [
            dir.clone(),
            dir.join("entries"),
            dir.join("tmp"),
            dir.join("locks"),
        ] {
            private_dir(&folder).map_err(&fail)?;
        }
        // Writable: a cache that cannot take entries would only cost requests.
        let probe = dir
            .join("tmp")
            .join(format!("probe.{}", std::process::id()));
        create_private(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| fail(format!("not writable: {e}")))?;
        let map = File::open(dir.join("entries"))
            .map_err(|e| fail(format!("cannot open entries/: {e}")))
            .map(|d| crate::local::on_local_filesystem(&d))?;
        let cache = DiskCache {
            dir,
            max_bytes,
            used: AtomicU64::new(0),
            since_scan: AtomicU64::new(0),
            counters: Counters::default(),
            map,
            pool: Arc::default(),
            verified: Default::default(),
            write_warned: AtomicBool::new(false),
            writes: Arc::new(tokio::sync::Semaphore::new(PENDING_WRITE_MIB as usize)),
        };
        cache
            .recount()
            .map_err(|e| fail(format!("cannot list entries/: {e}")))?;
        Ok(Arc::new(cache))
    }

    /// The cache's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cap on the entries' bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of entries as this process last counted them, plus its writes since.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// What this cache did so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            hits: n(&c.hits),
            misses: n(&c.misses),
            bytes_read: n(&c.bytes_read),
            bytes_written: n(&c.bytes_written),
            corrupt: n(&c.corrupt),
            evicted: n(&c.evicted),
            log_hits: n(&c.log_hits),
            log_misses: n(&c.log_misses),
        }
    }

    /// Waits until the entries being written are in place.
    pub async fn flush(&self) {
        let _all = self.writes.acquire_many(PENDING_WRITE_MIB).await;
    }

    /// The entry's ranges if it is there; else the entry's lock, taken (`None` where it could
    /// not be), after looking again: another task or process may have written it meanwhile.
    fn lookup_or_lock(&self, key: &EntryKey, object: &str) -> Result<Vec<Bytes>, Option<File>> {
        if let Some(parts) = self.lookup(key, object) {
            return Ok(parts);
        }
        let lock = self.lock(&key.file_name());
        if lock.is_some()
            && let Some(parts) = self.lookup(key, object)
        {
            return Ok(parts);
        }
        Err(lock)
    }

    fn entry_path(&self, name: &str) -> PathBuf {
        self.dir.join("entries").join(name)
    }

    fn lock_path(&self, name: &str) -> PathBuf {
        self.dir.join("locks").join(format!("{name}.lock"))
    }

    /// The entry's ranges, if it is on disk and whole; a corrupt one is deleted.
    fn lookup(&self, key: &EntryKey, object: &str) -> Option<Vec<Bytes>> {
        let path = self.entry_path(&key.file_name());
        let file = match open_private(&path, false) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(entry = %path.display(), object, error = %e, "cache entry unreadable (a symbolic link?): deleted, fetched from the store");
                let _ = std::fs::remove_file(&path);
                return None;
            }
        };
        let name = key.file_name();
        let mut checked = None;
        let read = file.metadata().map_err(|e| e.to_string()).and_then(|meta| {
            owned_regular(&meta)?;
            if key.whole {
                // A made entry is decoded once and let go: its buffer is not kept for reads.
                let mut bytes = Vec::new();
                let mut file = std::io::Read::take(&file, meta.len());
                std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| e.to_string())?;
                return Ok(Bytes::from(bytes));
            }
            // A file on local disk checked before holds the same bytes: checked once a process.
            checked = verified::FileId::of(&meta).filter(|_| self.map);
            crate::local::read_range(
                &file,
                &path,
                meta.len(),
                self.map,
                &self.pool,
                0..meta.len(),
            )
            .map_err(|e| e.to_string())
        });
        let known = checked.is_some_and(|id| self.verified.contains(&name, id));
        match read.and_then(|bytes| entry::parts(&bytes, key, !known)) {
            Ok(parts) => {
                if let Some(id) = checked.filter(|_| !known) {
                    self.verified.insert(name, id);
                }
                // The modification time is the entry's last use, for eviction.
                let _ = file.set_modified(SystemTime::now());
                let c = &self.counters;
                if key.log {
                    c.log_hits.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.hits.fetch_add(1, Ordering::Relaxed);
                    c.bytes_read
                        .fetch_add(key.payload_len() as u64, Ordering::Relaxed);
                }
                Some(parts)
            }
            Err(reason) => {
                tracing::warn!(entry = %path.display(), object, reason, "corrupt cache entry deleted: fetched from the store again");
                self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                self.verified.remove(&name);
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// An exclusive lock on entry `name`'s lock file (waiting for it); `None` where it cannot
    /// be taken (the read goes on, perhaps fetching what another process fetches too).
    fn lock(&self, name: &str) -> Option<File> {
        let path = self.lock_path(name);
        let file = match open_private(&path, true).and_then(|f| {
            owned_regular(&f.metadata()?).map_err(std::io::Error::other)?;
            Ok(f)
        }) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(lock = %path.display(), error = %e, "cache lock not taken");
                return None;
            }
        };
        // Bounded: a holder that hangs (a stalled fetch) must not hold every reader of it.
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Some(file),
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    tracing::warn!(lock = %path.display(), waited_s = LOCK_WAIT.as_secs(), "cache lock held too long by another reader: fetched here too");
                    return None;
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::warn!(lock = %path.display(), error = %e, "cache lock not taken");
                    return None;
                }
            }
        }
    }

    /// Writes entry `key` (through `tmp/`, renamed into place), then evicts if the cache
    /// outgrew its cap. A failure is logged; the read it serves goes on.
    fn write(&self, key: &EntryKey, parts: &[Bytes], object: &str) {
        let name = key.file_name();
        let header = entry::header(key, parts);
        let payload: usize = parts.iter().map(Bytes::len).sum();
        let bytes = (header.len() + payload) as u64;
        if bytes > self.max_bytes {
            tracing::debug!(
                object,
                bytes,
                "read larger than the cache's cap: not cached"
            );
            return;
        }
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let tmp = self
            .dir
            .join("tmp")
            .join(format!("{name}.{}.{nanos}", std::process::id()));
        let written = create_private(&tmp)
            .and_then(|mut f| {
                f.write_all(&header)?;
                for p in parts {
                    f.write_all(p)?;
                }
                Ok(())
            })
            .and_then(|()| std::fs::rename(&tmp, self.entry_path(&name)));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            // Once: a full disk would log every read.
            if !self.write_warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %self.dir.display(), object, error = %e, "cache entry not written (reads go on from the store)");
            }
            return;
        }
        self.counters
            .bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let since = self.since_scan.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if (used > self.max_bytes || since > self.max_bytes / 16)
            && let Err(e) = self.recount()
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cache not recounted");
        }
    }

    /// Counts the entries on disk, deletes stale temporary and lock files, and evicts the
    /// least recently used entries while they hold more than the cap.
    fn recount(&self) -> std::io::Result<()> {
        let now = SystemTime::now();
        let stale = |meta: &std::fs::Metadata| {
            meta.modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > STALE)
        };
        // Only names this cache makes are deleted (a DirEntry's metadata is the name's own,
        // never a link's target).
        for sub in ["tmp", "locks"] {
            for e in std::fs::read_dir(self.dir.join(sub))?.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if ours(sub, &name) && e.metadata().is_ok_and(|m| stale(&m)) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let mut found = Vec::new();
        for e in std::fs::read_dir(self.dir.join("entries"))?.flatten() {
            // An entry evicted by another process meanwhile is simply not counted.
            let Ok(meta) = e.metadata() else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if !ours("entries", &name) || !meta.is_file() {
                continue;
            }
            found.push(evict::Found {
                name: e.file_name().to_string_lossy().into_owned(),
                bytes: meta.len(),
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        let (gone, left) = evict::choose(found, self.max_bytes, self.max_bytes / 10 * 9);
        for name in &gone {
            match std::fs::remove_file(self.entry_path(name)) {
                Ok(()) => {
                    self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if !gone.is_empty() {
            tracing::debug!(dir = %self.dir.display(), evicted = gone.len(), left, "cache evicted");
        }
        self.used.store(left, Ordering::Relaxed);
        self.since_scan.store(0, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs `f` on the blocking pool; a panic in it is an error naming the cache.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> object_store::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "DiskCache",
            source: format!(
                "the disk cache's task failed: {}",
                match e.try_into_panic() {
                    Ok(p) => crate::error::panic_message(p.as_ref()),
                    Err(e) => e.to_string(),
                }
            )
            .into(),
        })
}

#[cfg(test)]
// One range is a list of ranges to object_store.
#[allow(clippy::single_range_in_vec_init)]
mod tests;
