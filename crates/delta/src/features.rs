//! The protocol a Delta table requires of its readers, and which of it the snapshot reads. A
//! reader feature changes what the files mean (a deletion vector removes rows, column mapping
//! renames columns): one the snapshot does not handle is refused by name at open, never read
//! as if it were absent.

use serde::Serialize;

/// Reader features a snapshot handles, and how.
///
/// - `deletionVectors`: deleted rows are never read (see `Snapshot`).
/// - `columnMapping`: names are logical; files are read by physical name or field id.
/// - `timestampNtz`: timestamps without time zone are compared as their ISO text, never shifted.
/// - `v2Checkpoint`: checkpoint manifests and sidecars (the Delta kernel reads the log).
/// - `vacuumProtocolCheck`: only constrains writers and VACUUM.
pub const SUPPORTED_READER_FEATURES: &[&str] = &[
    "deletionVectors",
    "columnMapping",
    "timestampNtz",
    "typeWidening",
    "typeWidening-preview",
    "v2Checkpoint",
    "vacuumProtocolCheck",
];

/// The highest `minReaderVersion` read (3: reader features named one by one).
const MAX_READER_VERSION: i32 = 3;

/// A table's protocol action.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    /// The reader protocol version (1: none, 2: column mapping, 3: named features).
    pub min_reader_version: i32,
    /// The writer protocol version.
    pub min_writer_version: i32,
    /// Features a reader must handle (reader version 3).
    #[serde(default)]
    pub reader_features: Vec<String>,
    /// Features a writer must handle (writer version 7).
    #[serde(default)]
    pub writer_features: Vec<String>,
}

impl Protocol {
    /// The protocol of a table's log, as deltalake loaded it.
    pub(crate) fn of(protocol: &deltalake::kernel::Protocol) -> Result<Protocol, String> {
        // The kernel's accessors are crate-private; its serde form is the log's.
        let json = serde_json::to_value(protocol)
            .map_err(|e| format!("the protocol action does not serialize: {e}"))?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            min_reader_version: i32,
            min_writer_version: i32,
            reader_features: Option<Vec<serde_json::Value>>,
            writer_features: Option<Vec<serde_json::Value>>,
        }
        let raw: Raw = serde_json::from_value(json.clone())
            .map_err(|e| format!("the protocol action {json} does not parse: {e}"))?;
        let names = |list: Option<Vec<serde_json::Value>>| -> Vec<String> {
            list.unwrap_or_default()
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect()
        };
        Ok(Protocol {
            min_reader_version: raw.min_reader_version,
            min_writer_version: raw.min_writer_version,
            reader_features: names(raw.reader_features),
            writer_features: names(raw.writer_features),
        })
    }

    /// `Ok` when a snapshot reads everything this protocol requires of readers, else why not,
    /// naming each feature it does not handle.
    pub fn check_readable(&self) -> Result<(), String> {
        if self.min_reader_version > MAX_READER_VERSION {
            return Err(format!(
                "the table requires reader protocol version {}: voxlake reads up to {MAX_READER_VERSION}",
                self.min_reader_version
            ));
        }
        let unknown: Vec<&str> = self
            .reader_features
            .iter()
            .map(String::as_str)
            .filter(|f| !SUPPORTED_READER_FEATURES.contains(f))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the table requires the reader feature{} {}, which voxlake does not read (it reads {}): reading without {} could deliver wrong rows",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            SUPPORTED_READER_FEATURES.join(", "),
            if unknown.len() == 1 { "it" } else { "them" },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol(reader: i32, features: &[&str]) -> Protocol {
        Protocol {
            min_reader_version: reader,
            min_writer_version: 7,
            reader_features: features.iter().map(|f| f.to_string()).collect(),
            writer_features: Vec::new(),
        }
    }

    #[test]
    fn supported_features_read_and_others_are_refused_by_name() {
        assert!(protocol(1, &[]).check_readable().is_ok());
        assert!(
            protocol(2, &[]).check_readable().is_ok(),
            "column mapping, legacy"
        );
        assert!(
            protocol(
                3,
                &[
                    "deletionVectors",
                    "columnMapping",
                    "v2Checkpoint",
                    "typeWidening"
                ]
            )
            .check_readable()
            .is_ok()
        );
        let err = protocol(3, &["deletionVectors", "timestampNanos", "variantType"])
            .check_readable()
            .unwrap_err();
        assert!(err.contains("timestampNanos, variantType"), "{err}");
        assert!(!err.contains("features deletionVectors"), "{err}");
        let err = protocol(4, &[]).check_readable().unwrap_err();
        assert!(err.contains("version 4"), "{err}");
    }

    #[test]
    fn the_kernels_protocol_reads_as_the_log_wrote_it() {
        let kernel: deltalake::kernel::Protocol = serde_json::from_str(
            r#"{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors","appendOnly"]}"#,
        )
        .unwrap();
        let p = Protocol::of(&kernel).unwrap();
        assert_eq!(p.reader_features, ["deletionVectors"]);
        assert_eq!(p.writer_features, ["deletionVectors", "appendOnly"]);
        assert_eq!((p.min_reader_version, p.min_writer_version), (3, 7));
    }
}
