//! The labels file: CSV with a header naming the columns `file` and `label`.

use std::collections::HashMap;

use crate::error::CompactError;

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
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, header) = lines.next().ok_or_else(|| err("empty file".into()))?;
        let header = split_csv_line(header.trim_start_matches('\u{feff}'));
        let column = |name: &str| {
            header
                .iter()
                .position(|h| h.trim() == name)
                .ok_or_else(|| err(format!("no '{name}' column in the header {header:?}")))
        };
        let (file_col, label_col) = (column("file")?, column("label")?);
        let mut by_key = HashMap::new();
        for (n, line) in lines {
            let fields = split_csv_line(line);
            let field = |i: usize| {
                fields
                    .get(i)
                    .map(|s| s.trim())
                    .ok_or_else(|| err(format!("line {}: too few fields", n + 1)))
            };
            let key = field(file_col)?.to_string();
            let raw = field(label_col)?;
            let label: i64 = raw
                .parse()
                .map_err(|_| err(format!("line {}: label '{raw}' is not an integer", n + 1)))?;
            if let Some(previous) = by_key.insert(key.clone(), label)
                && previous != label
            {
                return Err(err(format!(
                    "line {}: '{key}' has two labels, {previous} and {label}",
                    n + 1
                )));
            }
        }
        Ok(Labels {
            by_key,
            location: location.to_string(),
        })
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

/// Splits one CSV line, honouring double quotes (`""` is a quote inside a quoted field).
fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
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
    }
}
