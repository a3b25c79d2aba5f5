//! The names of a Delta log's files, parsed in one place: for the commit reader and the log's
//! checks ([`LogFile`]), and for the stores that keep the log's objects ([`is_immutable`]).

use object_store::path::Path;

/// A file right under `_delta_log/` that holds a version, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFile {
    /// A commit: `00000000000000000003.json`.
    Commit(u64),
    /// A checkpoint: classic (`…10.checkpoint.parquet`), multi-part
    /// (`…10.checkpoint.0000000001.0000000002.parquet`) or v2 (`…10.checkpoint.<uuid>.json`).
    Checkpoint(u64),
}

impl LogFile {
    /// The file `name` is; `None` for anything else (`_last_checkpoint`, `.crc` files,
    /// compacted logs, names not led by 20 digits).
    pub(crate) fn parse(name: &str) -> Option<LogFile> {
        let (version, rest) = versioned(name)?;
        match rest {
            ".json" => Some(LogFile::Commit(version)),
            r if r.starts_with(".checkpoint.") => Some(LogFile::Checkpoint(version)),
            _ => None,
        }
    }

    /// The version the file is of.
    pub(crate) fn version(self) -> u64 {
        match self {
            LogFile::Commit(v) | LogFile::Checkpoint(v) => v,
        }
    }
}

/// The version a log file's name starts with (20 digits, then a dot), and the rest from the
/// dot on: commits, checkpoints, compacted logs and checksum files are named so.
fn versioned(name: &str) -> Option<(u64, &str)> {
    let (digits, rest) = name.split_at_checked(20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !rest.starts_with('.') {
        return None;
    }
    Some((digits.parse::<u64>().ok()?, rest))
}

/// Whether `path` names a log object that never changes once written: a commit, a checkpoint
/// (classic, multi-part, v2), a compacted log file, a checksum file (all named from a 20-digit
/// version) or a v2 checkpoint's sidecar.
pub(crate) fn is_immutable(path: &Path) -> bool {
    let mut parts: Vec<&str> = path.as_ref().rsplit('/').take(3).collect();
    parts.reverse();
    let (name, parents) = match parts.split_last() {
        Some((name, parents)) => (*name, parents),
        None => return false,
    };
    match parents {
        [.., "_delta_log", "_sidecars"] => name.ends_with(".parquet"),
        [.., "_delta_log"] => versioned(name).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_file_names_parse() {
        let parse = LogFile::parse;
        assert_eq!(parse("00000000000000000003.json"), Some(LogFile::Commit(3)));
        for checkpoint in [
            "00000000000000000010.checkpoint.parquet",
            "00000000000000000010.checkpoint.0000000001.0000000002.parquet",
            "00000000000000000010.checkpoint.f5ee283b-64c2-4a3e.json",
        ] {
            assert_eq!(
                parse(checkpoint),
                Some(LogFile::Checkpoint(10)),
                "{checkpoint}"
            );
        }
        for other in [
            "00000000000000000003.crc",
            "00000000000000000001.00000000000000000004.compacted.json",
            "_last_checkpoint",
            "+0000000000000000003.json",
            "0000000000000000003.json",
            "00000000000000000003.json.tmp",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
        assert_eq!(
            parse("00000000000000000007.json").map(LogFile::version),
            Some(7)
        );
    }

    #[test]
    fn only_versioned_log_objects_are_immutable() {
        for (path, immutable) in [
            ("t/_delta_log/00000000000000000012.json", true),
            ("t/_delta_log/00000000000000000010.checkpoint.parquet", true),
            (
                "t/_delta_log/00000000000000000010.checkpoint.0000000001.0000000002.parquet",
                true,
            ),
            (
                "_delta_log/00000000000000000003.00000000000000000005.compacted.json",
                true,
            ),
            (
                "t/_delta_log/_sidecars/3a0d65cd-4056-49b8-937b-95f9e3ee90e5.parquet",
                true,
            ),
            ("t/_delta_log/_last_checkpoint", false),
            ("t/_delta_log/0000000000000000012.json", false),
            ("t/_delta_log/_commit_5d3a.json.tmp", false),
            ("t/part-00000.parquet", false),
            ("t/00000000000000000012.json", false),
        ] {
            assert_eq!(is_immutable(&Path::from(path)), immutable, "{path}");
        }
    }
}
