//! The cache's files on a shared node: its own folders (0700, this user's, not a link), its
//! files (0600, opened without following a link or blocking, regular and this user's), and
//! the names it makes (the only ones it deletes).

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::private::euid;

/// Whether `name` in the cache's folder `sub` is one this cache makes: an entry (16 hex
/// digits), its lock (`<entry>.lock`), a temporary entry (`<entry>.<pid>.<nanos>`) or the
/// open's probe (`probe.<pid>`).
pub(super) fn ours(sub: &str, name: &str) -> bool {
    let entry = |n: &str| n.len() == 16 && n.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    match sub {
        "entries" => entry(name),
        "locks" => name.strip_suffix(".lock").is_some_and(entry),
        "tmp" => match name.split('.').collect::<Vec<_>>().as_slice() {
            [e, pid, nanos] => entry(e) && digits(pid) && digits(nanos),
            ["probe", pid] => digits(pid),
            _ => false,
        },
        _ => false,
    }
}

/// Opens `path` without following a symbolic link and without blocking (a FIFO answers at
/// once); `write`: for writing, created 0600 if missing.
pub(super) fn open_private(path: &Path, write: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options
        .read(!write)
        .write(write)
        .create(write)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    options.open(path)
}

/// Creates `path` (it must not exist) 0600, without following a symbolic link.
pub(super) fn create_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Refuses what is not a regular file of this user's (a FIFO, a device, another user's entry).
pub(super) fn owned_regular(meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != euid() {
        return Err(format!(
            "written by user {}, not by this process's user {}: never trusted",
            meta.uid(),
            euid()
        ));
    }
    Ok(())
}
