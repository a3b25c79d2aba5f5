//! Folders of this user's on a node that other local users cannot plant or read: the disk
//! cache's ([`crate::cache`]) and [`user_folder`], where the ranks of a job running on one node
//! agree on its version.

use std::path::{Path, PathBuf};

use crate::error::IoError;

/// The user this process runs as.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This user's folder on the node, `voxlake-<uid>` in `$XDG_RUNTIME_DIR` where it is set (a
/// folder of this user's that the session ends with), else in the temporary folder (`TMPDIR`,
/// else `/tmp`: under Slurm often a folder of the job's), created 0700 and checked as
/// `private_dir` checks: a folder another user made there first, or a link, is refused.
///
/// ```
/// let folder = voxlake_io::private::user_folder().unwrap();
/// assert!(folder.is_dir());
/// ```
pub fn user_folder() -> Result<PathBuf, IoError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute() && dir.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let folder = base.join(format!("voxlake-{}", euid()));
    private_dir(&folder).map_err(|reason| IoError::Folder {
        dir: folder.display().to_string(),
        reason,
    })?;
    Ok(folder)
}

/// Folder `path`, created 0700 if it is not there, and checked: a folder (not a link) this user
/// owns that no one else may write to (one only others may read is made 0700).
pub(crate) fn private_dir(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let shown = path.display();
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {shown}: {e}")),
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_dir() {
        return Err(format!(
            "{shown} is not a folder (a symbolic link or a file): refused"
        ));
    }
    if meta.uid() != euid() {
        return Err(format!(
            "{shown} is owned by user {}, not by this process's user {}: another user's folder is never used",
            meta.uid(),
            euid()
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{shown} may be written by others (mode {mode:o}): refused (make it 0700)"
        ));
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{shown}: cannot make it 0700: {e}"))?;
    }
    Ok(())
}
