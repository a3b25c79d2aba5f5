//! The entries on local disk whose checksum this process has checked: a later hit on the same
//! file reads (maps) the same bytes of an immutable file, so it is not checked again (a
//! multi-epoch run checks each entry once, not once an epoch).
//!
//! A file is known by its device, inode, length and birth time: an entry written again is
//! another file (renamed into place), and an inode number reused after an eviction has another
//! birth time. Where the filesystem does not give a birth time, every hit is checked.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// Entries remembered at most; past it the memo starts again (hits are checked again).
const MAX_ENTRIES: usize = 1 << 20;

/// Which file an entry's name named when it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    born: SystemTime,
}

impl FileId {
    /// The file's identity; `None` where its birth time is unknown.
    pub(super) fn of(meta: &std::fs::Metadata) -> Option<FileId> {
        Some(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            born: meta.created().ok()?,
        })
    }
}

/// Entry names and the file each named when its checksum was found right.
#[derive(Debug, Default)]
pub(super) struct Verified {
    seen: Mutex<HashMap<String, FileId>>,
}

impl Verified {
    /// Whether `name` was checked as the file `id`.
    pub(super) fn contains(&self, name: &str, id: FileId) -> bool {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(name) == Some(&id)
    }

    /// Remembers that `name`, as the file `id`, was checked.
    pub(super) fn insert(&self, name: String, id: FileId) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_ENTRIES {
            seen.clear();
        }
        seen.insert(name, id);
    }

    /// Forgets `name` (deleted as corrupt).
    pub(super) fn remove(&self, name: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}
