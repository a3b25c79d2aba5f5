//! Stores opened with deltalake's own store factories, so a compact source and a table get the
//! same settings: retry and backoff options, client timeouts, S3's credential chain. The URL
//! handling is `voxlake_io::location`'s; only what needs deltalake is here.

use std::collections::HashMap;
use std::sync::{Arc, Once};

use object_store::ObjectStore;

use deltalake::logstore::{StorageConfig, object_store_factories};
use url::Url;
use voxlake_io::location::{self, Location, credential_method, to_url};
use voxlake_io::{IoError, redact};

/// Registers deltalake's Azure, GCS and S3 handlers once, so `az://`, `abfss://`, `gs://` and
/// `s3://` tables open. S3 commits use conditional writes (`If-None-Match`), which AWS S3 and
/// most S3-compatible stores support: no locking provider is needed.
/// Without the `cloud` feature there are none to register.
pub fn register_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "cloud")]
        {
            deltalake::azure::register_handlers(None);
            deltalake::gcp::register_handlers(None);
            deltalake::aws::register_handlers(None);
        }
    });
}

/// Opens the object store behind a source prefix or a single object.
pub fn open_store(
    location: &str,
    is_dir: bool,
    options: &HashMap<String, String>,
) -> Result<Location, IoError> {
    let url = to_url(location, is_dir)?;
    let display = redact(location);
    // Retries measured in time unless the caller (or the quick probe) set them.
    let options = &voxlake_io::location::with_retry_defaults(options);
    if url.scheme() == "file" {
        let path = url.to_file_path().map_err(|_| IoError::InvalidLocation {
            location: display.clone(),
            reason: "not a local path".into(),
        })?;
        let meta = std::fs::metadata(&path).map_err(|e| IoError::InvalidLocation {
            location: display.clone(),
            reason: e.to_string(),
        })?;
        if is_dir && !meta.is_dir() {
            return Err(IoError::InvalidLocation {
                location: display,
                reason: "not a directory".into(),
            });
        }
    }
    let shown: &str = &display;
    tracing::debug!(
        location = shown,
        credentials = credential_method(&url, options),
        "opening store"
    );
    // deltalake's store factories, so sources get exactly the settings tables get: its retry
    // (`max_retries`, `retry_timeout`, `backoff_config.*`) and client options, and for S3 its
    // credential chain. Other schemes (http, memory) go straight to object_store.
    let invalid = |reason: String| IoError::InvalidLocation {
        location: display.clone(),
        reason,
    };
    register_handlers();
    let config = StorageConfig::parse_options(options.iter())
        .map_err(|e| invalid(format!("bad storage option: {e}")))?;
    let scheme = Url::parse(&format!("{}://", url.scheme())).map_err(|e| invalid(e.to_string()))?;
    let factory = object_store_factories()
        .get(&scheme)
        .map(|f| f.value().clone());
    let (store, prefix) = match factory {
        Some(factory) => factory
            .parse_url_opts(&url, &config)
            .map_err(|e| invalid(e.to_string()))?,
        None => {
            let (store, prefix) = object_store::parse_url_opts(&url, options.iter())
                .map_err(|e| invalid(e.to_string()))?;
            (Arc::from(store), prefix)
        }
    };
    // Answers that break where object_store does not ask again (listings, error bodies):
    // asked again, for every remote store (`voxlake_io::RetryBroken`).
    let store = if matches!(url.scheme(), "file" | "memory") {
        store
    } else {
        Arc::new(voxlake_io::RetryBroken::new(store)) as Arc<dyn object_store::ObjectStore>
    };
    Ok(Location {
        store,
        prefix,
        display,
    })
}

/// Checks that a remote location's endpoint answers, with one `HEAD` of the location's own key
/// (the cheapest request: a listing of a table of thousands of files is not): an endpoint
/// that refuses, resets, times out or does not resolve is [`IoError::Unreachable`], at
/// once. Any HTTP answer (even 403 or 404) passes: the caller's own request reports those with
/// their context. Local and in-memory locations pass without a request.
pub async fn ensure_reachable(
    location: &str,
    options: &HashMap<String, String>,
) -> Result<(), IoError> {
    let url = to_url(location, true)?;
    if matches!(url.scheme(), "file" | "memory") {
        return Ok(());
    }
    let probe = open_store(location, true, &location::probe_options(options))?;
    location::answers(&probe).await
}

/// The node's disk cache, where the log's immutable objects may be read through it.
pub(crate) type LogCacheRef = Arc<voxlake_io::cache::DiskCache>;

/// `store`, its immutable log objects read through `cache` where there is one.
pub(crate) fn through_log_cache(
    store: Arc<dyn ObjectStore>,
    cache: Option<&LogCacheRef>,
    identity: &str,
) -> Arc<dyn ObjectStore> {
    match cache {
        Some(cache) => Arc::new(crate::log_cache::LogCache::new(
            store,
            cache.clone(),
            identity,
        )),
        None => store,
    }
}
