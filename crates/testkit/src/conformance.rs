//! The Delta conformance tables committed under `tests/fixtures/conformance/golden`: the
//! delta-kernel-rs golden tables, as its repository ships them (`NAME.tar.zst` holding
//! `NAME/delta`, the table, and `NAME/expected`, its content at the latest version written
//! by Spark).

use std::path::{Path, PathBuf};

/// The committed archives' folder.
pub fn golden_dir() -> PathBuf {
    crate::support::checkout("tests/fixtures/conformance/golden")
}

/// The names of the committed golden tables, sorted.
pub fn golden_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(golden_dir())
        .expect("tests/fixtures/conformance/golden")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".tar.zst")?.to_string())
        })
        .collect();
    names.sort();
    names
}

/// Golden table `name` unpacked into `into`: returns `into/NAME` (with `delta/` and, where
/// the kernel ships one, `expected/`).
pub fn unpack_golden(name: &str, into: &Path) -> std::io::Result<PathBuf> {
    let file = std::fs::File::open(golden_dir().join(format!("{name}.tar.zst")))?;
    let decoder = zstd::stream::read::Decoder::new(file)?;
    tar::Archive::new(decoder).unpack(into)?;
    Ok(into.join(name))
}
