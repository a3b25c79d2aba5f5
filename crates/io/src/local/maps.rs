//! One mapping per local file, kept while the store lives: a large range read is a view of it,
//! its pages' table entries filled for that range in one call (`MADV_POPULATE_READ`) and
//! dropped with the view's last `Bytes` (`MADV_DONTNEED`: the page cache stays, and the
//! process's resident memory holds only the ranges in flight, as the memory budget counts them).
//! A mapping per range cost an `mmap` and an `munmap` (a new address range and its teardown)
//! per row group (docs/benchmarks.md has both, measured).
//!
//! A mapping is kept for a file of one identity (device, inode, length): a file replaced under
//! the same name (a new inode) or of another length is mapped afresh, the old mapping left to
//! the views still holding it. The mapped bytes kept are bounded ([`MAPPED_MAX`]): past it the
//! least recently read file's mapping is let go (unmapped once its last view goes).

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};

/// File bytes whose mappings are kept at most (address space: the pages' table entries go
/// with their views).
pub(crate) const MAPPED_MAX: u64 = 64 << 30;

/// What makes a file the one mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
}

/// A file's mapping and when it was last read (a counter).
#[derive(Debug)]
struct FileMap {
    id: Identity,
    map: Arc<Mmap>,
    used: u64,
}

/// The mappings a store keeps, by path.
#[derive(Debug)]
pub(crate) struct FileMaps {
    kept: Mutex<Table>,
    /// File bytes kept mapped at most.
    max: u64,
}

impl Default for FileMaps {
    fn default() -> Self {
        FileMaps::with_max(MAPPED_MAX)
    }
}

/// [`FileMaps`]' table: the mappings, their bytes, the clock of their last reads.
#[derive(Debug, Default)]
struct Table {
    by_path: HashMap<PathBuf, FileMap>,
    bytes: u64,
    clock: u64,
}

/// A range of a kept mapping, as the bytes of a `Bytes`.
struct View {
    map: Arc<Mmap>,
    range: Range<usize>,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let len = self.range.end - self.range.start;
        // SAFETY: the mapping is a read-only shared mapping of a file: dropping its page table
        // entries leaves the page cache as it is, and a later read of these pages (another
        // view's, at a shared page) faults them in again with the same bytes.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.range.start,
                len,
            )
        };
    }
}

impl FileMaps {
    /// Mappings of at most `max` file bytes kept (one file's, whatever its size).
    pub(crate) fn with_max(max: u64) -> Self {
        FileMaps {
            kept: Mutex::default(),
            max,
        }
    }

    /// `range` of `file` (at `path`, `metadata` its own, the range within its length): a view
    /// of the file's kept mapping, its page table entries filled.
    pub(crate) fn range(
        &self,
        file: &std::fs::File,
        path: &Path,
        metadata: &std::fs::Metadata,
        range: Range<u64>,
    ) -> std::io::Result<Bytes> {
        use std::os::unix::fs::MetadataExt;
        let id = Identity {
            dev: metadata.dev(),
            ino: metadata.ino(),
            len: metadata.len(),
        };
        let map = self.mapping(file, path, id)?;
        let (start, len) = (range.start as usize, (range.end - range.start) as usize);
        let bytes = map.get(start..start + len).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("range {range:?} is past the end of the mapped file"),
            )
        })?;
        // A page that cannot be read in: an error here, not a SIGBUS later.
        super::fault_in(bytes)?;
        Ok(Bytes::from_owner(View {
            map,
            range: start..start + len,
        }))
    }

    /// The kept mapping of `file`, made where there is none of this identity.
    fn mapping(
        &self,
        file: &std::fs::File,
        path: &Path,
        id: Identity,
    ) -> std::io::Result<Arc<Mmap>> {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.clock += 1;
        let now = kept.clock;
        if let Some(k) = kept.by_path.get_mut(path)
            && k.id == id
        {
            k.used = now;
            return Ok(k.map.clone());
        }
        // SAFETY: the file is an immutable Delta data file (see `local`'s note on truncation);
        // the mapping is read-only and lives as long as the `Bytes` that view it and this table.
        let map = unsafe { MmapOptions::new().len(id.len as usize).map(file) }?;
        // Pages read in through this mapping come into the page cache as huge folios, which
        // later reads map with one entry per 2 MiB instead of 512: filling and dropping page
        // table entries was a third of a mapped epoch's CPU (docs/benchmarks.md). Advice only:
        // a kernel or file system without huge folios maps pages as before.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let map = Arc::new(map);
        if let Some(old) = kept.by_path.insert(
            path.to_path_buf(),
            FileMap {
                id,
                map: map.clone(),
                used: now,
            },
        ) {
            kept.bytes -= old.id.len;
        }
        kept.bytes += id.len;
        while kept.bytes > self.max && kept.by_path.len() > 1 {
            let Some(oldest) = kept
                .by_path
                .iter()
                .filter(|(p, _)| p.as_path() != path)
                .min_by_key(|(_, k)| k.used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            if let Some(gone) = kept.by_path.remove(&oldest) {
                kept.bytes -= gone.id.len;
            }
        }
        Ok(map)
    }

    /// Files mapped, and their bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, u64) {
        let kept = self.kept.lock().unwrap();
        (kept.by_path.len(), kept.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of this process's mappings of `file` (`/proc/self/smaps`): `(name, value)`.
    #[cfg(target_os = "linux")]
    fn smaps_fields(file: &Path) -> Vec<(String, String)> {
        let name = file.canonicalize().unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut ours = false;
        let mut fields = Vec::new();
        for line in smaps.lines() {
            // A mapping's header starts with its address range (`7f..-7f..`); its fields follow.
            let first = line.split_whitespace().next().unwrap_or_default();
            if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                ours = line.ends_with(name.to_str().unwrap());
            } else if ours && let Some((key, value)) = line.split_once(':') {
                fields.push((key.to_string(), value.trim().to_string()));
            }
        }
        fields
    }

    /// The resident kilobytes of this process's mappings of `file`.
    #[cfg(target_os = "linux")]
    fn resident_kb(file: &Path) -> u64 {
        smaps_fields(file)
            .iter()
            .filter(|(k, _)| k == "Rss")
            .map(|(_, v)| v.trim_end_matches("kB").trim().parse::<u64>().unwrap())
            .sum()
    }

    /// The `VmFlags` of this process's mappings of `file`.
    #[cfg(target_os = "linux")]
    fn vm_flags(file: &Path) -> Vec<String> {
        smaps_fields(file)
            .iter()
            .filter(|(k, _)| k == "VmFlags")
            .flat_map(|(_, v)| v.split_whitespace().map(String::from).collect::<Vec<_>>())
            .collect()
    }

    /// A file's mapping asks for huge pages (`hg`: `MADV_HUGEPAGE`), so what it reads in comes
    /// as huge folios, mapped 2 MiB an entry by later reads.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_files_mapping_asks_for_huge_pages() {
        if !Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return; // a kernel without transparent huge pages refuses the advice
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![3u8; 4 << 20]).unwrap();
        let maps = FileMaps::default();
        let file = std::fs::File::open(&path).unwrap();
        let view = maps
            .range(&file, &path, &file.metadata().unwrap(), 0..(3 << 20))
            .unwrap();
        assert!(view.iter().all(|&b| b == 3));
        let flags = vm_flags(&path);
        assert!(flags.iter().any(|f| f == "hg"), "{flags:?}");
    }

    /// A view's pages are resident while it lives and not after (the page cache keeps them):
    /// the process's memory holds the ranges in flight only, while the mapping stays.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_views_pages_leave_the_process_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
        let maps = FileMaps::default();
        let file = std::fs::File::open(&path).unwrap();
        let metadata = file.metadata().unwrap();
        let a = maps.range(&file, &path, &metadata, 0..(2 << 20)).unwrap();
        let b = maps
            .range(&file, &path, &metadata, (2 << 20)..(4 << 20))
            .unwrap();
        assert!(resident_kb(&path) >= 4 << 10, "{} kB", resident_kb(&path));
        drop(a);
        let left = resident_kb(&path);
        assert!((2 << 10..4 << 10).contains(&left), "{left} kB");
        assert!(b.iter().all(|&v| v == 7));
        drop(b);
        assert_eq!(resident_kb(&path), 0);
        assert_eq!(maps.held(), (1, 4 << 20), "the mapping itself is kept");
    }

    /// Past its bound, the least recently read file's mapping goes first (its views keep it).
    #[test]
    fn the_least_recently_read_files_are_let_go_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let maps = FileMaps::with_max(5 << 20);
        let read = |name: &str| {
            let path = dir.path().join(name);
            if !path.exists() {
                std::fs::write(&path, vec![name.as_bytes()[0]; 2 << 20]).unwrap();
            }
            let file = std::fs::File::open(&path).unwrap();
            let metadata = file.metadata().unwrap();
            maps.range(&file, &path, &metadata, 10..(1 << 20)).unwrap()
        };
        let a = read("a");
        read("b");
        read("a"); // a is now the most recent
        assert_eq!(maps.held(), (2, 4 << 20));
        read("c"); // 6 MiB > 5: b, the least recent, goes
        assert_eq!(maps.held(), (2, 4 << 20));
        let kept: Vec<PathBuf> = maps.kept.lock().unwrap().by_path.keys().cloned().collect();
        assert!(kept.contains(&dir.path().join("a")) && kept.contains(&dir.path().join("c")));
        assert!(a.iter().all(|&b| b == b'a'));
        // One file larger than the bound is still mapped (alone).
        let big = FileMaps::with_max(1);
        let path = dir.path().join("a");
        let file = std::fs::File::open(&path).unwrap();
        let got = big
            .range(&file, &path, &file.metadata().unwrap(), 0..(2 << 20))
            .unwrap();
        assert_eq!(got.len(), 2 << 20);
        assert_eq!(big.held(), (1, 2 << 20));
    }
}
