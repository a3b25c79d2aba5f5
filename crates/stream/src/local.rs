//! Local tables: object_store's `LocalFileSystem`, except that range reads land in recycled
//! buffers.
//!
//! `LocalFileSystem` reads every range into a fresh, zero-filled `Vec`. For row groups of
//! megabytes that is a `memset` and a page fault per 4 KiB on every read: measured on the
//! reference table, 79 % of the loader's page faults and most of its system time. Here a range
//! of at least [`POOLED_MIN`] bytes is read into a buffer from a pool; the `Bytes` handed out own
//! it, and it goes back to the pool when the last of them (the decoded row group's views) is
//! dropped. Every other call goes to `LocalFileSystem` unchanged.

use std::fmt;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Ranges smaller than this are read into fresh buffers (ids, labels, footers).
pub const POOLED_MIN: usize = 1 << 20;

/// Idle buffers the pool keeps, in bytes; beyond that, returned buffers are freed.
const POOL_MAX_BYTES: usize = 1 << 30;

/// `LocalFileSystem` rooted at `/`, with range reads into recycled buffers.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> object_store::Result<()> {
/// use object_store::ObjectStore;
/// use object_store::path::Path;
/// use voxlake_stream::local::PooledLocalStore;
///
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("part.parquet"), vec![7u8; 3 << 20]).unwrap();
/// let store = PooledLocalStore::new();
/// let file = Path::from_filesystem_path(dir.path().join("part.parquet"))?;
/// let chunks = store.get_ranges(&file, &[0..(2 << 20), 10..20]).await?;
/// assert_eq!((chunks[0].len(), chunks[1].len()), (2 << 20, 10));
/// drop(chunks);
/// // The large buffer is back in the pool for the next read; the small one was not pooled.
/// assert_eq!(store.pooled(), (1, 2 << 20));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PooledLocalStore {
    inner: LocalFileSystem,
    pool: Arc<BufferPool>,
}

impl PooledLocalStore {
    /// The local filesystem, `/` at its root.
    pub fn new() -> Self {
        PooledLocalStore {
            inner: LocalFileSystem::new(),
            pool: Arc::new(BufferPool::default()),
        }
    }

    /// Buffers waiting in the pool, and their bytes.
    pub fn pooled(&self) -> (usize, usize) {
        let free = self
            .pool
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (free.len(), free.iter().map(Vec::len).sum())
    }
}

impl Default for PooledLocalStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for PooledLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PooledLocalStore({})", self.inner)
    }
}

/// Initialised buffers, ready to be read into again.
#[derive(Debug, Default)]
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    /// The smallest idle buffer of at least `len` bytes, else the largest grown to `len`, else a
    /// new one. Its first `len` bytes are initialised (zeroed only where never written before).
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let fit = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= len)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            let largest = || {
                free.iter()
                    .enumerate()
                    .max_by_key(|(_, b)| b.len())
                    .map(|(i, _)| i)
            };
            match fit.or_else(largest) {
                Some(i) => free.swap_remove(i),
                None => Vec::new(),
            }
        };
        if buf.len() < len {
            buf.resize(len, 0);
        }
        buf
    }

    fn give(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let held: usize = free.iter().map(Vec::len).sum();
        if held + buf.len() <= POOL_MAX_BYTES {
            free.push(buf);
        }
    }
}

/// A pooled buffer behind `Bytes`: the first `len` bytes are the data; back to the pool on drop.
struct Pooled {
    buf: Vec<u8>,
    len: usize,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

fn io_error(path: &std::path::Path, e: std::io::Error) -> object_store::Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => object_store::Error::NotFound {
            path: path.display().to_string(),
            source: Box::new(e),
        },
        _ => object_store::Error::Generic {
            store: "LocalFileSystem",
            source: format!("reading {}: {e}", path.display()).into(),
        },
    }
}

#[async_trait::async_trait]
impl ObjectStore for PooledLocalStore {
    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let path = self.inner.path_to_filesystem(location)?;
        let ranges = ranges.to_vec();
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path).map_err(|e| io_error(&path, e))?;
            ranges
                .into_iter()
                .map(|range| {
                    let len = (range.end - range.start) as usize;
                    let mut buf = if len >= POOLED_MIN {
                        pool.take(len)
                    } else {
                        vec![0; len]
                    };
                    file.read_exact_at(&mut buf[..len], range.start)
                        .map_err(|e| io_error(&path, e))?;
                    Ok(if len >= POOLED_MIN {
                        Bytes::from_owner(Pooled {
                            buf,
                            len,
                            pool: Arc::downgrade(&pool),
                        })
                    } else {
                        Bytes::from(buf)
                    })
                })
                .collect()
        })
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(e),
        })?
    }

    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::RenameOptions,
    ) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn ranges_are_read_into_recycled_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &data).unwrap();
        let store = PooledLocalStore::new();
        let location = Path::from_filesystem_path(&file).unwrap();
        let ranges = [0..2_000_000u64, 2_500_000..4_700_000, 10..20];
        for round in 0..3 {
            let got = store.get_ranges(&location, &ranges).await.unwrap();
            for (bytes, range) in got.iter().zip(&ranges) {
                assert!(
                    bytes.as_ref() == &data[range.start as usize..range.end as usize],
                    "round {round}, range {range:?}"
                );
            }
            drop(got);
            // The two large buffers are back; the small read was never pooled.
            assert_eq!(store.pooled().0, 2, "round {round}");
        }
        // A buffer is reused for a smaller range: only the requested bytes are handed out.
        let small = store
            .get_ranges(&location, &[100..1_100_100, 0..10])
            .await
            .unwrap();
        assert_eq!(small[0].len(), 1_100_000);
        assert!(small[0].as_ref() == &data[100..1_100_100]);
        assert_eq!(store.pooled().0, 1);

        // Everything else is LocalFileSystem's: a missing file is NotFound.
        let missing = Path::from_filesystem_path(dir.path()).unwrap().join("nope");
        let e = store
            .get_ranges(&missing, &[0..2_000_000, 0..1])
            .await
            .unwrap_err();
        assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
        assert_eq!(
            store.get(&location).await.unwrap().bytes().await.unwrap(),
            data
        );
    }
}
