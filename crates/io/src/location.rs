//! Turning the locations users type (local paths, `az://`, `abfss://`, `s3://`, `gs://`,
//! `file://` URLs) into URLs, and the store settings they are opened with. Opening the store
//! itself is the table's (`voxlake_delta::stores`): it uses deltalake's store factories.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use crate::error::{IoError, redact};

/// Prefixes of the environment variables object_store and deltalake read their settings from.
const ENV_PREFIXES: [&str; 4] = ["AZURE_", "AWS_", "GOOGLE_", "OBJECT_STORE_"];

/// The schemes of remote stores, there with the `cloud` feature (on by default).
const REMOTE_SCHEMES: [&str; 10] = [
    "az", "azure", "abfs", "abfss", "adl", "s3", "s3a", "gs", "http", "https",
];

/// Storage settings: the standard environment variables, overridden by explicit options.
pub fn storage_options(explicit: &HashMap<String, String>) -> HashMap<String, String> {
    let mut options: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    options.extend(explicit.iter().map(|(k, v)| (k.clone(), v.clone())));
    options
}

/// What tells a store apart from another one reached by the same URL: the URL (without a
/// query) and the account, region and endpoint the settings give (never a secret). Cache
/// entries are keyed by it, so two accounts or endpoints with a bucket of the same name never
/// serve each other's bytes.
pub fn store_identity(url: &Url, options: &HashMap<String, String>) -> String {
    let pick = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| options.get(*k))
            .cloned()
            .unwrap_or_default()
    };
    let (account, endpoint) = match url.scheme() {
        "az" | "azure" | "abfs" | "abfss" | "adl" | "https" | "http" => (
            pick(&[
                "azure_storage_account_name",
                "account_name",
                "azure_storage_account",
            ]),
            pick(&["azure_storage_endpoint", "endpoint", "azure_endpoint"]),
        ),
        "s3" | "s3a" => (
            pick(&["aws_region", "region"]),
            pick(&[
                "aws_endpoint",
                "aws_endpoint_url",
                "endpoint",
                "endpoint_url",
            ]),
        ),
        "gs" => (String::new(), pick(&["google_base_url", "base_url"])),
        _ => (String::new(), String::new()),
    };
    let mut shown = url.clone();
    shown.set_query(None);
    format!("{shown}|account={account}|endpoint={endpoint}")
}

/// Which credential method the settings select, by key names only (never values), for a debug
/// line: the first match in object_store's own order of precedence.
pub fn credential_method(url: &Url, options: &HashMap<String, String>) -> &'static str {
    let has = |keys: &[&str]| keys.iter().any(|k| options.contains_key(*k));
    match url.scheme() {
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            if options
                .get("azure_storage_use_emulator")
                .is_some_and(|v| v == "true")
            {
                "Azure emulator (well-known development account)"
            } else if has(&[
                "azure_storage_account_key",
                "azure_storage_access_key",
                "account_key",
                "access_key",
            ]) {
                "Azure account key"
            } else if has(&[
                "azure_storage_sas_key",
                "azure_storage_sas_token",
                "sas_key",
                "sas_token",
            ]) {
                "Azure SAS token"
            } else if has(&["azure_storage_token", "bearer_token"]) {
                "Azure bearer token"
            } else if has(&["azure_client_secret", "client_secret"]) {
                "Azure service principal (client secret)"
            } else if has(&["azure_federated_token_file", "federated_token_file"]) {
                "Azure workload identity"
            } else {
                "Azure managed identity or Azure CLI (no explicit credential)"
            }
        }
        "s3" | "s3a" => {
            if has(&["aws_access_key_id", "access_key_id"]) {
                "AWS access key"
            } else {
                "AWS default chain (web identity, instance profile, …)"
            }
        }
        "gs" => {
            if has(&[
                "google_service_account",
                "google_service_account_path",
                "google_application_credentials",
                "google_service_account_key",
            ]) {
                "GCS service account"
            } else {
                "GCS application default credentials"
            }
        }
        "file" => "local filesystem (no credentials)",
        _ => "store defaults",
    }
}

/// Parses a location into a URL; a path without a scheme is a local path (made absolute).
pub fn to_url(location: &str, is_dir: bool) -> Result<Url, IoError> {
    let invalid = |reason: String| IoError::InvalidLocation {
        location: redact(location),
        reason,
    };
    if location.contains("://") {
        let url = Url::parse(location).map_err(|e| invalid(e.to_string()))?;
        // A query (a SAS, say) would reach deltalake's logs and every process list: refused,
        // never passed on.
        if url.query().is_some() {
            return Err(invalid(
                "the URL carries a query string (not shown): give credentials as storage options (a SAS as azure_storage_sas_key), from the environment (AZURE_STORAGE_SAS_KEY, AWS_*, GOOGLE_*) or a file (--storage-option-file), not in the URL, which logs and process lists show".into(),
            ));
        }
        return match url.scheme() {
            "file" | "memory" => Ok(url),
            remote if REMOTE_SCHEMES.contains(&remote) => {
                if cfg!(feature = "cloud") {
                    Ok(url)
                } else {
                    Err(invalid(format!(
                        "this build reads no '{remote}' stores: it was built without the \
                         `cloud` feature (on by default; off in `demo.sh --release`)"
                    )))
                }
            }
            other => Err(invalid(format!("unsupported scheme '{other}'"))),
        };
    }
    let path = std::path::absolute(location).map_err(|e| invalid(e.to_string()))?;
    let url = if is_dir {
        Url::from_directory_path(&path)
    } else {
        Url::from_file_path(&path)
    };
    url.map_err(|_| invalid("not an absolute path".into()))
}

/// An object store and the prefix inside it.
pub struct Location {
    /// The store.
    pub store: Arc<dyn ObjectStore>,
    /// The path inside the store.
    pub prefix: Path,
    /// For messages: the location without its query string.
    pub display: String,
}

/// Retries measured in time, not in tries, where the caller did not set them: a store away for
/// a minute or two (a restart, a throttling storm) is ridden out with jittered backoff of at
/// most 5 s between tries; object_store's default of 10 tries spends itself in seconds.
const RETRY_SETTINGS: [(&str, &str); 3] = [
    ("max_retries", "100000"),
    ("retry_timeout", "180s"),
    ("backoff_config.max_backoff", "5s"),
];

/// `options` with `RETRY_SETTINGS` where the caller did not set them: the settings every
/// store of a table or a source is built with (the reachability probe keeps its quick ones).
pub fn with_retry_defaults(options: &HashMap<String, String>) -> HashMap<String, String> {
    let mut out = options.clone();
    for (key, value) in RETRY_SETTINGS {
        out.entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
    out
}

/// Retry settings of the first request to a remote location (unless the caller set them): a
/// few quick attempts, so an endpoint that does not answer is reported within a few seconds.
const PROBE_SETTINGS: [(&str, &str); 4] = [
    // Five tries: a flaky store (half its connections dropped) is not called unreachable.
    ("max_retries", "4"),
    ("retry_timeout", "10s"),
    ("backoff_config.init_backoff", "100ms"),
    ("connect_timeout", "5s"),
];

/// `options` with quick retries for a first request (see [`answers`]), where the caller did
/// not set them.
pub fn probe_options(options: &HashMap<String, String>) -> HashMap<String, String> {
    let mut quick = options.clone();
    for (key, value) in PROBE_SETTINGS {
        quick
            .entry(key.to_string())
            .or_insert_with(|| value.to_string());
    }
    quick
}

/// Checks that a location's endpoint answers, with one `HEAD` of its own key (the cheapest
/// request: a listing of a table of thousands of files is not): an endpoint that refuses,
/// resets, times out or does not resolve is [`IoError::Unreachable`], at once. Any HTTP answer
/// (even 403 or 404) passes: the caller's own request reports those with their context.
pub async fn answers(probe: &Location) -> Result<(), IoError> {
    match probe.store.head(&probe.prefix).await {
        Err(e) if no_answer(&e) => Err(IoError::Unreachable {
            location: probe.display.clone(),
            reason: e.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Whether a store error means no HTTP answer came back at all (object_store's `HttpError`
/// somewhere in the chain; an answer with a status carries none).
#[cfg(feature = "cloud")]
fn no_answer(e: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<object_store::client::HttpError>()
            .is_some()
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Without the `cloud` feature no location gets this far (only local ones are accepted).
#[cfg(not(feature = "cloud"))]
fn no_answer(_: &object_store::Error) -> bool {
    false
}

/// The URL of a Delta table to write to; a local directory is created if missing.
pub fn table_url(location: &str) -> Result<Url, IoError> {
    let url = to_url(location, true)?;
    if url.scheme() == "file"
        && let Ok(path) = url.to_file_path()
    {
        std::fs::create_dir_all(&path).map_err(|e| IoError::InvalidLocation {
            location: redact(location),
            reason: format!("cannot create the table directory: {e}"),
        })?;
    }
    Ok(url)
}

/// FNV-1a: a hash that is the same on every machine and Rust version (`--shard`, planning).
pub fn stable_hash(key: &str) -> u64 {
    let mut hash = StableHasher::default();
    hash.write(key);
    hash.finish()
}

/// [`stable_hash`] of text given in pieces: the same as of the pieces joined, without joining
/// them (a file list's hash, 10⁶ paths).
#[derive(Debug, Clone, Copy)]
pub struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl StableHasher {
    /// Adds `text`'s bytes.
    pub fn write(&mut self, text: &str) {
        self.0 = text.bytes().fold(self.0, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    }

    /// The hash of everything written.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!(to_url("/data/x", true).unwrap().as_str(), "file:///data/x/");
        let remote = to_url("az://cubes/train", true);
        if cfg!(feature = "cloud") {
            assert_eq!(remote.unwrap().as_str(), "az://cubes/train");
        } else {
            let e = remote.unwrap_err().to_string();
            assert!(e.contains("without the `cloud` feature"), "{e}");
        }
        let e = to_url("ftp://host/x", true).unwrap_err().to_string();
        assert!(e.contains("unsupported scheme 'ftp'"), "{e}");
        let e = to_url("az://[bad/x?sig=SECRET", true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("az://[bad/x?<redacted>") && !e.contains("SECRET"),
            "{e}"
        );
        let e = to_url("az://c/t?sv=2024&sig=SECRET", true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("query string")
                && e.contains("azure_storage_sas_key")
                && !e.contains("SECRET"),
            "{e}"
        );
    }

    #[test]
    fn credential_methods_are_named_by_key_only() {
        let az = Url::parse("az://c/p").unwrap();
        let opts = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(
            credential_method(&az, &opts(&[("azure_storage_account_key", "SECRET")])),
            "Azure account key"
        );
        assert_eq!(
            credential_method(&az, &opts(&[("azure_storage_sas_key", "sig=SECRET")])),
            "Azure SAS token"
        );
        assert_eq!(
            credential_method(&az, &opts(&[("azure_storage_use_emulator", "true")]))
                .split(' ')
                .nth(1),
            Some("emulator")
        );
        assert!(credential_method(&az, &opts(&[])).contains("managed identity"));
        assert!(
            !credential_method(&az, &opts(&[("azure_client_secret", "SECRET")])).contains("SECRET")
        );
        let s3 = Url::parse("s3://b/p").unwrap();
        assert_eq!(
            credential_method(&s3, &opts(&[("aws_access_key_id", "AKIA")])),
            "AWS access key"
        );
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        let mut pieces = StableHasher::default();
        pieces.write("ab");
        pieces.write("");
        pieces.write("c");
        assert_eq!(pieces.finish(), stable_hash("abc"));
    }
}
