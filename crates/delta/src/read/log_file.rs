//! The names of a Delta log's files, parsed in one place for the commit reader and the log's
//! checks.

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
        let (digits, rest) = name.split_at_checked(20)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let version = digits.parse::<u64>().ok()?;
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
}
