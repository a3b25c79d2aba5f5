//! Which cache, and how large: the choice a builder takes, the folder and cap the environment
//! names, the default cap from the filesystem's free space.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::DiskCache;
use crate::error::IoError;

/// Environment variable naming the cache folder (a loader or stream built without
/// `with_cache` uses it).
pub const CACHE_DIR_ENV: &str = "VOXLAKE_CACHE_DIR";
/// Environment variable with the cache's cap in MiB (default: half the free space of the
/// folder's filesystem when the cache is opened).
pub const CACHE_MAX_MB_ENV: &str = "VOXLAKE_CACHE_MAX_MB";

/// Which disk cache a stream or loader reads a remote table through.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum CacheChoice {
    /// The cache [`CACHE_DIR_ENV`] names, if set ([`DiskCache::from_env`]).
    #[default]
    FromEnv,
    /// None, whatever the environment says.
    Off,
    /// The cache in this folder, capped at this many bytes.
    Folder(PathBuf, u64),
    /// An open cache (shared by several streams of a process).
    Shared(Arc<DiskCache>),
}

impl CacheChoice {
    /// The cache chosen, opened.
    pub fn open(&self) -> Result<Option<Arc<DiskCache>>, IoError> {
        match self {
            CacheChoice::FromEnv => DiskCache::from_env(),
            CacheChoice::Off => Ok(None),
            CacheChoice::Folder(dir, max) => DiskCache::open(dir.clone(), *max).map(Some),
            CacheChoice::Shared(cache) => Ok(Some(cache.clone())),
        }
    }
}

impl DiskCache {
    /// The cache [`CACHE_DIR_ENV`] names, capped at [`CACHE_MAX_MB_ENV`] MiB (default: half
    /// the free space of its filesystem); `None` where the variable is unset or empty.
    pub fn from_env() -> Result<Option<Arc<DiskCache>>, IoError> {
        let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) else {
            return Ok(None);
        };
        let dir = PathBuf::from(dir);
        let max = match std::env::var(CACHE_MAX_MB_ENV) {
            Ok(mb) => mb
                .trim()
                .parse::<u64>()
                .map(|mb| mb << 20)
                .map_err(|e| IoError::Cache {
                    dir: dir.display().to_string(),
                    reason: format!("{CACHE_MAX_MB_ENV}={mb:?} is not a number of MiB: {e}"),
                })?,
            Err(_) => DiskCache::default_max_bytes(&dir)?,
        };
        DiskCache::open(dir, max).map(Some)
    }

    /// The cap of a cache in `dir` when none is given: half of what its filesystem has free
    /// now plus what its entries already hold, so that a cache opened again (by the next
    /// epoch's process, or another rank) is not capped below what it holds (the folder is
    /// created if needed).
    pub fn default_max_bytes(dir: &Path) -> Result<u64, IoError> {
        let fail = |reason: String| IoError::Cache {
            dir: dir.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create it: {e}")))?;
        let free = free_bytes(dir).ok_or_else(|| fail("its free space cannot be read".into()))?;
        let held: u64 = std::fs::read_dir(dir.join(super::CACHE_SUBDIR).join("entries"))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        let max = free.saturating_add(held) / 2;
        tracing::info!(dir = %dir.display(), max_mib = max >> 20, "cache capped at half the free space and its entries");
        Ok(max)
    }
}

/// Free bytes of the filesystem holding `dir` (for the unprivileged).
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer of the right type for the call to fill.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the fields' widths differ between targets
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}
