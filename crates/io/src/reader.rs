//! An [`AsyncFileReader`] over [`object_store`] for files whose size is known.
//!
//! The Delta log records every data file's size, so the footer is read with one bounded range
//! request: no HEAD and no suffix range (Azure Blob has no suffix ranges). Column chunks are
//! fetched with [`ObjectStore::get_ranges`], which coalesces nearby ranges.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::ObjectStore;
use object_store::path::Path;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Bytes fetched from the end of a file to read its footer in one request: a voxlake footer
/// with hundreds of row groups fits.
const FOOTER_PREFETCH: usize = 256 * 1024;

/// Reads one Parquet file from an object store.
#[derive(Clone)]
pub struct ObjectFileReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    size: u64,
    metadata: Option<Arc<ParquetMetaData>>,
}

impl ObjectFileReader {
    /// A reader for `path` of `size` bytes (as the Delta log records it).
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, size: u64) -> Self {
        ObjectFileReader {
            store,
            path,
            size,
            metadata: None,
        }
    }

    /// Uses an already read footer instead of fetching it again.
    pub fn with_metadata(mut self, metadata: Arc<ParquetMetaData>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The object's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The store is left out: a store's own `Debug` may print its credentials.
impl std::fmt::Debug for ObjectFileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectFileReader")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("has_metadata", &self.metadata.is_some())
            .finish_non_exhaustive()
    }
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for ObjectFileReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        // Through `get_ranges`, like the column chunks: stores that wrap reads (a cache) see
        // every read in one place.
        async move {
            let mut got = self
                .store
                .get_ranges(&self.path, std::slice::from_ref(&range))
                .await
                .map_err(external)?;
            got.pop().ok_or_else(|| {
                ParquetError::General(format!("{}: no bytes for range {range:?}", self.path))
            })
        }
        .boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.path, &ranges)
                .await
                .map_err(external)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        async move {
            if let Some(metadata) = &self.metadata {
                return Ok(metadata.clone());
            }
            let size = self.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .load_and_finish(&mut *self, size)
                .await?;
            let metadata = Arc::new(metadata);
            self.metadata = Some(metadata.clone());
            Ok(metadata)
        }
        .boxed()
    }
}
