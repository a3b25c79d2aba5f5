//! The labels file: CSV with a header naming the columns `file` and `label`.

use std::collections::HashMap;

use crate::error::CompactError;
use object_store::ObjectStoreExt;
use voxlake_delta::stores;

/// Labels by source key.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    by_key: HashMap<String, i64>,
    location: String,
}

impl Labels {
    /// Parses CSV text whose header has the columns `file` and `label` (others are ignored).
    /// `file` is the object key relative to the source prefix; `label` an integer.
    pub fn parse(text: &str, location: &str) -> Result<Self, CompactError> {
        let err = |reason: String| CompactError::Labels {
            location: location.to_string(),
            reason,
        };
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .flexible(true)
            .from_reader(text.trim_start_matches('\u{feff}').as_bytes());
        let header = reader
            .headers()
            .map_err(|e| err(format!("header: {e}")))?
            .clone();
        if header.is_empty() || header.iter().all(str::is_empty) {
            return Err(err("empty file".into()));
        }
        let column = |name: &str| {
            header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| err(format!("no '{name}' column in the header {header:?}")))
        };
        let (file_col, label_col) = (column("file")?, column("label")?);
        let mut by_key = HashMap::new();
        for record in reader.records() {
            let record = record.map_err(|e| err(e.to_string()))?;
            let line = record.position().map_or(0, csv::Position::line);
            if record.iter().all(str::is_empty) {
                continue;
            }
            let field = |i: usize| {
                record
                    .get(i)
                    .ok_or_else(|| err(format!("line {line}: too few fields")))
            };
            let key = field(file_col)?.to_string();
            let raw = field(label_col)?;
            let label: i64 = raw
                .parse()
                .map_err(|_| err(format!("line {line}: label '{raw}' is not an integer")))?;
            if let Some(previous) = by_key.insert(key.clone(), label)
                && previous != label
            {
                return Err(err(format!(
                    "line {line}: '{key}' has two labels, {previous} and {label}"
                )));
            }
        }
        Ok(Labels {
            by_key,
            location: location.to_string(),
        })
    }

    /// Labelled keys that are not in `keys` (labels for objects the source does not hold).
    pub fn unmatched<'a>(&'a self, keys: &std::collections::HashSet<&str>) -> Vec<&'a str> {
        let mut out: Vec<&str> = self
            .by_key
            .keys()
            .map(String::as_str)
            .filter(|k| !keys.contains(k))
            .collect();
        out.sort_unstable();
        out
    }

    /// The label of `key`.
    pub fn get(&self, key: &str) -> Option<i64> {
        self.by_key.get(key).copied()
    }

    /// Number of labelled keys.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is labelled.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Where the labels came from, for messages.
    pub fn location(&self) -> &str {
        &self.location
    }
}

impl Labels {
    /// The labels file at `location` (a local path or a URL), read whole and parsed.
    pub(crate) async fn read(
        location: &str,
        options: &HashMap<String, String>,
    ) -> Result<Labels, CompactError> {
        let err = |reason: String| CompactError::Labels {
            location: voxlake_io::redact(location),
            reason,
        };
        let bytes = if location.contains("://") {
            let loc = stores::open_store(location, false, options)?;
            loc.store
                .get(&loc.prefix)
                .await
                .map_err(|e| err(e.to_string()))?
                .bytes()
                .await
                .map_err(|e| err(e.to_string()))?
                .to_vec()
        } else {
            std::fs::read(location).map_err(|e| err(e.to_string()))?
        };
        let text = String::from_utf8(bytes).map_err(|_| err("not UTF-8 text".into()))?;
        Labels::parse(&text, &voxlake_io::redact(location))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quoted_csv_with_extra_columns() {
        let csv = "label,file,note\r\n1,a.npy,x\n0,\"dir/b,c.npy\",\"say \"\"hi\"\"\"\n\n";
        let labels = Labels::parse(csv, "labels.csv").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels.get("a.npy"), Some(1));
        assert_eq!(labels.get("dir/b,c.npy"), Some(0));
        assert_eq!(labels.get("c.npy"), None);
    }

    #[test]
    fn bad_label_files_are_reported() {
        let e = Labels::parse("name,label\n", "l.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no 'file' column"), "{e}");
        let e = Labels::parse("file,label\na.npy,cat\n", "l.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: label 'cat' is not an integer"), "{e}");
        let e = Labels::parse("file,label\na.npy,1\na.npy,0\n", "l.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("two labels"), "{e}");
        assert!(Labels::parse("", "l.csv").is_err());
        let e = Labels::parse("file,label\na.npy\n", "l.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2: too few fields"), "{e}");
        let e = Labels::parse("file,label\n\"a.npy,1\n", "l.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("l.csv"), "{e}");
    }

    #[test]
    fn a_bom_and_unmatched_keys() {
        let labels = Labels::parse("\u{feff}file,label\na.npy,1\nb.npy,0\n", "l.csv").unwrap();
        let keys: std::collections::HashSet<&str> = ["a.npy", "c.npy"].into();
        assert_eq!(labels.unmatched(&keys), vec!["b.npy"]);
    }

    proptest::proptest! {
        /// Any text, and valid files with characters changed: labels or an error naming the
        /// file, never a panic.
        #[test]
        fn any_text_parses_or_errs(text in "\\PC{0,200}", edits in proptest::collection::vec((0usize..64, proptest::char::any()), 0..4)) {
            let _ = Labels::parse(&text, "l.csv");
            let mut valid: Vec<char> = "file,label\na.npy,1\n\"b,c.npy\",-3\n".chars().collect();
            for (at, c) in edits {
                let i = at % valid.len();
                valid[i] = c;
            }
            let valid: String = valid.into_iter().collect();
            if let Err(e) = Labels::parse(&valid, "l.csv") {
                proptest::prop_assert!(e.to_string().contains("l.csv"));
            }
        }
    }
}
