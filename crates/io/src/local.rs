//! Local tables: object_store's `LocalFileSystem`, except that large range reads are views of
//! the page cache.
//!
//! `LocalFileSystem` reads every range into a fresh, zero-filled `Vec`: a `memset`, a page
//! fault per 4 KiB and a copy out of the page cache on every read (most of the loader's page
//! faults and system time; a pool of recycled buffers removes the first two, not the copy).
//! Here a range of at least `MAPPED_MIN`
//! bytes (the tensor chunks, a lookup's tensors) is a view of the file's mapping instead (one per file, kept while
//! the store lives, the range's page table entries filled in one call: `maps`): the `Bytes`
//! handed out are the page cache's pages themselves. Every other call goes to
//! `LocalFileSystem` unchanged.
//!
//! Data files of a Delta table are never rewritten in place, so a mapping sees fixed bytes; a
//! file deleted meanwhile (a vacuum) stays readable through it. A file *truncated* under a
//! running loader would fault on the missing pages (the ranges are checked against the file's
//! size when mapped): no tool of this stack does that. A page that cannot be read in is a
//! `SIGBUS`, not an error: so only files on local disk and memory filesystems are mapped
//! (`mappable`); on network and FUSE mounts (NFS, SMB, blobfuse, s3fs…), where a read can fail
//! for passing reasons, ranges are read, and a failure is an error naming the file. Ranges of
//! at least `MAPPED_MIN` bytes are read there into recycled buffers (`pool`).

mod maps;
pub(crate) mod pool;

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::MmapOptions;
use object_store::Result;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

/// Ranges smaller than this are read into fresh buffers (ids, labels, footers): mapping costs a
/// few system calls, worth it only where a copy costs more. A lookup's single tensors (a
/// reference cube is 352 KiB) are mapped: read, they took 2.5× the time (docs/benchmarks.md).
pub(crate) const MAPPED_MIN: usize = 64 << 10;

/// Reads in the pages of `bytes` that are not in memory now, as a mapped range's are when it is
/// read (`MADV_POPULATE_READ`): memory held across epochs (a kept row group's views of a
/// mapping) whose pages were reclaimed meanwhile is read back here, and a page that cannot be
/// read is this error instead of a `SIGBUS` when it is used. On other memory (the heap) it only
/// walks the page tables. Nothing is done on kernels without the call (before Linux 5.14) and
/// on systems other than Linux.
///
/// ```
/// let data = vec![7u8; 3 << 20];
/// voxlake_io::local::fault_in(&data).unwrap();
/// ```
pub fn fault_in(bytes: &[u8]) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: sysconf reads a constant of the system; no memory is passed.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 => n as usize,
            _ => 4096,
        };
        let start = bytes.as_ptr() as usize & !(page - 1);
        let end = (bytes.as_ptr() as usize + bytes.len()).div_ceil(page) * page;
        // SAFETY: [start, end) are the pages that hold `bytes`, all mapped while `bytes` is
        // borrowed; reading them in changes no byte of them.
        let done = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_READ,
            )
        };
        if done != 0 {
            let e = std::io::Error::last_os_error();
            // EINVAL: a kernel without MADV_POPULATE_READ; the pages fault in when read.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = bytes;
    Ok(())
}

/// `LocalFileSystem` rooted at `/`, with large range reads mapped from the page cache.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> object_store::Result<()> {
/// use object_store::ObjectStore;
/// use object_store::path::Path;
/// use voxlake_io::local::MappedLocalStore;
///
/// let dir = tempfile::tempdir().unwrap();
/// let data: Vec<u8> = (0..3u32 << 20).map(|i| i as u8).collect();
/// std::fs::write(dir.path().join("part.parquet"), &data).unwrap();
/// let store = MappedLocalStore::new();
/// let file = Path::from_filesystem_path(dir.path().join("part.parquet"))?;
/// let chunks = store.get_ranges(&file, &[5..(2 << 20), 10..20]).await?;
/// assert_eq!(chunks[0], &data[5..2 << 20]);
/// assert_eq!(chunks[1], &data[10..20]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MappedLocalStore {
    inner: LocalFileSystem,
    /// Map where the filesystem allows it.
    map: bool,
    /// Buffers for the large ranges that are read (files that are not mapped).
    pool: Arc<pool::BufferPool>,
    /// The files' mappings, kept while the store lives.
    maps: Arc<maps::FileMaps>,
}

impl MappedLocalStore {
    /// The local filesystem, `/` at its root.
    pub fn new() -> Self {
        MappedLocalStore {
            inner: LocalFileSystem::new(),
            map: true,
            pool: Arc::default(),
            maps: Arc::default(),
        }
    }

    /// Map large ranges where the filesystem allows it (default), or read every range, the
    /// large ones into recycled buffers, as on network and FUSE mounts (for a local disk whose
    /// reads you would rather see fail as errors than as `SIGBUS`).
    pub fn with_mapping(mut self, map: bool) -> Self {
        self.map = map;
        self
    }

    /// Read buffers waiting to be read into again, and their bytes.
    pub fn idle_buffers(&self) -> (usize, usize) {
        self.pool.idle()
    }
}

impl Default for MappedLocalStore {
    fn default() -> Self {
        Self::new()
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

/// Whether files on a filesystem of this type (`statfs`'s `f_type`) are mapped: local disk and
/// memory filesystems only, where reading a page in does not fail for passing reasons.
pub(crate) fn mappable(fs_type: i64) -> bool {
    const LOCAL: [i64; 9] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs (containers)
        0x2FC1_2FC1, // zfs
        0xF2F5_2010, // f2fs
        0x3153_464A, // jfs
        0x5265_4973, // reiserfs
    ];
    LOCAL.contains(&fs_type)
}

/// Whether `file` may be mapped (see [`mappable`]); `false` where the type cannot be told.
#[cfg(target_os = "linux")]
pub(crate) fn on_local_filesystem(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid open descriptor and a buffer of the right type for the call to fill.
    if unsafe { libc::fstatfs(file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs returned 0, so it filled `stat`.
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between Linux targets
    mappable(unsafe { stat.assume_init() }.f_type as i64)
}

/// Other systems: read, never mapped (only Linux's filesystem types are known here).
#[cfg(not(target_os = "linux"))]
pub(crate) fn on_local_filesystem(_file: &std::fs::File) -> bool {
    false
}

/// `range` of `file` (of `size` bytes), mapped when `map` and large, else read (into a buffer
/// from `pool` when large).
pub(crate) fn read_range(
    file: &std::fs::File,
    path: &std::path::Path,
    size: u64,
    map: bool,
    pool: &Arc<pool::BufferPool>,
    range: Range<u64>,
) -> Result<Bytes> {
    if range.end > size || range.start > range.end {
        return Err(io_error(
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("range {range:?} is past the end of the file ({size} bytes)"),
            ),
        ));
    }
    use std::os::unix::fs::FileExt;
    let len = (range.end - range.start) as usize;
    let read = |buf: &mut [u8]| {
        file.read_exact_at(buf, range.start)
            .map_err(|e| io_error(path, e))
    };
    if len < MAPPED_MIN {
        let mut buf = vec![0; len];
        read(&mut buf)?;
        return Ok(Bytes::from(buf));
    }
    if !map {
        return pool::BufferPool::read(pool, len, read);
    }
    // SAFETY: the file is an immutable Delta data file (see the module's note on truncation);
    // the mapping is read-only and lives as long as the `Bytes` that view it.
    let map = unsafe { MmapOptions::new().offset(range.start).len(len).map(file) }
        .map_err(|e| io_error(path, e))?;
    // Huge folios for what comes in from disk (see `maps`), then every page read in: a page
    // that cannot be read is this error, not a `SIGBUS` when it is used.
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    fault_in(&map).map_err(|e| io_error(path, e))?;
    Ok(Bytes::from_owner(map))
}

impl MappedLocalStore {
    /// Every data read: see the module's documentation.
    async fn read_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let path = self.inner.path_to_filesystem(location)?;
        let ranges = ranges.to_vec();
        let (pool, map, maps) = (self.pool.clone(), self.map, self.maps.clone());
        tokio::task::spawn_blocking(move || {
            // A loader's trace (`with_trace`): one span a read of a local file's ranges.
            let _span = tracing::trace_span!(target: "voxlake::trace", "read",
                object = %path.display(), ranges = ranges.len())
            .entered();
            let file = std::fs::File::open(&path).map_err(|e| io_error(&path, e))?;
            let metadata = file.metadata().map_err(|e| io_error(&path, e))?;
            let size = metadata.len();
            let map = map && on_local_filesystem(&file);
            ranges
                .into_iter()
                .map(|range| {
                    let large = range.start <= range.end
                        && range.end - range.start >= MAPPED_MIN as u64
                        && range.end <= size;
                    match map && large {
                        true => maps
                            .range(&file, &path, &metadata, range)
                            .map_err(|e| io_error(&path, e)),
                        false => read_range(&file, &path, size, map, &pool, range),
                    }
                })
                .collect()
        })
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(e),
        })?
    }
}

crate::passthrough::reads_ranges_itself!(MappedLocalStore);

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStore, ObjectStoreExt};

    /// The process's mappings of `file` (Linux's `/proc/self/maps`; 0 elsewhere).
    fn mappings_of(file: &std::path::Path) -> usize {
        let name = file.canonicalize().unwrap();
        let name = name.to_str().unwrap();
        std::fs::read_to_string("/proc/self/maps")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with(name))
            .count()
    }

    #[tokio::test]
    async fn large_ranges_are_mapped_small_ones_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &data).unwrap();
        let store = MappedLocalStore::new();
        let location = Path::from_filesystem_path(&file).unwrap();
        // Page-aligned and not, at the file's end, small.
        let ranges = [
            0..2_000_000u64,
            2_500_003..4_700_000,
            3_000_000..5_000_000,
            10..20,
        ];
        let got = store.get_ranges(&location, &ranges).await.unwrap();
        for (bytes, range) in got.iter().zip(&ranges) {
            assert!(
                bytes.as_ref() == &data[range.start as usize..range.end as usize],
                "range {range:?}"
            );
        }
        // The three large ranges are views of the file's one mapping; the small one was read.
        let linux = cfg!(target_os = "linux");
        assert_eq!(mappings_of(&file), usize::from(linux));
        // The mapping is kept for the next reads, and goes with the store and the last view
        // (the decoder's slices of a range outlive the rest of it).
        let view = got[1].slice(100..200);
        drop(got);
        let again = store
            .get_ranges(&location, &[0..2_000_000, 0..1])
            .await
            .unwrap();
        assert!(again[0].as_ref() == &data[..2_000_000]);
        assert_eq!(mappings_of(&file), usize::from(linux));
        drop(store);
        drop(again);
        assert!(view.as_ref() == &data[2_500_103..2_500_203]);
        assert_eq!(mappings_of(&file), usize::from(linux));
        drop(view);
        assert_eq!(mappings_of(&file), 0);
        let store = MappedLocalStore::new();

        // Past the end: an error naming the file, whether mapped or read.
        for range in [4_000_000..5_000_001u64, 4_999_990..5_000_001] {
            let e = store
                .get_ranges(&location, &[0..1, range])
                .await
                .unwrap_err();
            assert!(
                e.to_string().contains("past the end") && e.to_string().contains("data"),
                "{e}"
            );
        }
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

    #[test]
    fn only_local_filesystems_are_mapped() {
        // ext4, xfs, tmpfs: mapped; NFS, FUSE (blobfuse, s3fs), SMB: read.
        for local in [0xEF53, 0x5846_5342, 0x0102_1994] {
            assert!(mappable(local));
        }
        for remote in [0x6969, 0x6573_5546, 0xFE53_4D42, 0xFF53_4D42, 0] {
            assert!(!mappable(remote));
        }
        // The tests' own folder is on a local filesystem: the other tests map.
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        assert_eq!(on_local_filesystem(&file), cfg!(target_os = "linux"));
    }

    #[test]
    fn reads_where_not_mapped_are_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let pool = Arc::default();
        for map in [false, true] {
            let got = read_range(&file, &path, 3_000_000, map, &pool, 7..2_500_000).unwrap();
            assert!(got.as_ref() == &data[7..2_500_000], "map {map}");
            let mapped = map && cfg!(target_os = "linux");
            assert_eq!(mappings_of(&path), usize::from(mapped), "map {map}");
            let e = read_range(&file, &path, 3_000_000, map, &pool, 7..3_000_001).unwrap_err();
            assert!(e.to_string().contains("past the end"), "{e}");
            // A read range goes back to the pool with its last view, and is read into again;
            // a mapped one adds nothing to it.
            let address = got.as_ptr();
            drop(got);
            assert_eq!(pool.idle(), (1, 2_499_993), "map {map}");
            if !map {
                let again = read_range(&file, &path, 3_000_000, map, &pool, 0..1_500_000).unwrap();
                assert!(again.as_ref() == &data[..1_500_000]);
                assert_eq!(again.as_ptr(), address);
            }
        }
        // A read that fails (the file shorter than the log said): an error naming the file,
        // and the buffer back in the pool.
        let e =
            read_range(&file, &path, 4_000_000, false, &pool, 2_000_000..3_500_000).unwrap_err();
        assert!(e.to_string().contains("data"), "{e}");
        assert_eq!(pool.idle(), (1, 2_499_993));
    }

    #[tokio::test]
    async fn a_mapped_range_outlives_the_file_deleted() {
        // A vacuum deleting a data file under a running loader: the mapping still reads it.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 13) as u8).collect();
        std::fs::write(&file, &data).unwrap();
        let location = Path::from_filesystem_path(&file).unwrap();
        let got = MappedLocalStore::new()
            .get_ranges(&location, &[1..2_999_999, 0..1])
            .await
            .unwrap();
        assert_eq!(mappings_of(&file), usize::from(cfg!(target_os = "linux")));
        std::fs::remove_file(&file).unwrap();
        assert!(got[0].as_ref() == &data[1..2_999_999]);
    }

    #[tokio::test]
    async fn a_file_replaced_under_its_name_is_mapped_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        let store = MappedLocalStore::new();
        let mut views = Vec::new();
        for (round, len) in [(1u8, 3_000_000usize), (2, 3_000_000), (3, 2_000_000)] {
            // Written under another name and renamed over it: a new inode (and a new length).
            let data = vec![round; len];
            std::fs::write(dir.path().join("next"), &data).unwrap();
            std::fs::rename(dir.path().join("next"), &file).unwrap();
            let location = Path::from_filesystem_path(&file).unwrap();
            let ranges = [0..len as u64, 0..1];
            let got = store.get_ranges(&location, &ranges).await.unwrap();
            assert!(got[0].as_ref() == &data[..], "round {round}");
            views.push((round, got));
        }
        // Each view still reads the file it was made of.
        for (round, got) in &views {
            assert!(got[0].iter().all(|b| b == round), "round {round}");
        }
        assert_eq!(store.maps.held(), (1, 2_000_000), "one file's mapping kept");
    }
}
