//! Deletion vectors: the rows of a data file that later commits deleted without rewriting it
//! (Databricks and Delta Spark write them for `DELETE`, `UPDATE` and `MERGE` once the table has
//! the `deletionVectors` feature). Read when a snapshot opens, they become the file's kept rows,
//! as a filter's are: the planner, the deal over ranks, resume and lineage see only live rows.
//!
//! Each vector is fetched with the table's object store (a ranged GET of exactly its bytes, with
//! the store's retries) and decoded by the Delta kernel (`DeletionVectorDescriptor::read`: the
//! format's version byte, size, magic, CRC-32 and the roaring bitmap), not by code of ours.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use delta_kernel::actions::deletion_vector::DeletionVectorDescriptor as KernelDescriptor;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path;
use url::Url;

use crate::error::{DeltaError, kernel_message};
use voxlake_io::store_error_is_transient;

/// Vectors at least this large are decoded on the blocking pool.
/// Deletion vector files read at once.
const READS: usize = 16;

const DECODE_INLINE_BYTES: i32 = 64 << 10;

/// The deleted rows of one data file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Deleted {
    /// Rows of the file (0-based, ascending) that are deleted.
    pub rows: Arc<[u64]>,
    /// What identifies the vector (storage type, path or inline bytes, offset): two
    /// snapshots with the same files and vectors plan the same rows.
    pub id: String,
    /// The add action's descriptor (a commit that removes the file names it too).
    pub descriptor: VectorDescriptor,
}

/// A deletion vector as a data file's add action describes it (the Delta protocol's
/// `deletionVector` field), in voxlake's own type: a commit that removes the file names it too.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VectorDescriptor {
    /// How the vector is stored: `u` (a file beside the table named by a UUID), `i` (inline
    /// in the log) or `p` (a file at an absolute path).
    pub storage_type: char,
    /// The UUID (with its optional prefix), the inline bytes (Z85) or the absolute path.
    pub path_or_inline_dv: String,
    /// Where the vector starts in its file (`None` inline).
    pub offset: Option<i32>,
    /// The vector's bytes.
    pub size_in_bytes: i32,
    /// The rows it deletes.
    pub cardinality: i64,
}

impl From<&deltalake::kernel::DeletionVectorDescriptor> for VectorDescriptor {
    fn from(d: &deltalake::kernel::DeletionVectorDescriptor) -> VectorDescriptor {
        use deltalake::kernel::StorageType;
        VectorDescriptor {
            storage_type: match d.storage_type {
                StorageType::UuidRelativePath => 'u',
                StorageType::Inline => 'i',
                StorageType::AbsolutePath => 'p',
            },
            path_or_inline_dv: d.path_or_inline_dv.clone(),
            offset: d.offset,
            size_in_bytes: d.size_in_bytes,
            cardinality: d.cardinality,
        }
    }
}

/// One file's vector, as its add action describes it.
pub(crate) struct Wanted {
    /// The file's index in the snapshot.
    pub index: usize,
    /// The file's path, for messages.
    pub file: String,
    /// The file's rows as its add action counts them (`None` without statistics).
    pub rows: Option<u64>,
    pub descriptor: deltalake::kernel::DeletionVectorDescriptor,
}

/// Reads every vector of `wanted` from `store`, rooted at `table` (the table's URL): the
/// vectors stored in one file (Delta Spark writes one file per task, holding the vectors of
/// many data files) with one `get_ranges`, which object_store coalesces, a few files at a
/// time. A vector that cannot be read, or that deletes another number of rows than its
/// descriptor says, is an error naming the data file and the vector.
pub(crate) async fn read_all(
    store: &Arc<dyn ObjectStore>,
    table: &Url,
    location: &str,
    wanted: Vec<Wanted>,
) -> Result<Vec<(usize, Deleted)>, DeltaError> {
    let mut inline = Vec::new();
    let mut stored: HashMap<Path, Vec<Vector>> = HashMap::new();
    for w in wanted {
        let vector = Vector::new(w, table, location)?;
        match &vector.source {
            Source::Inline => inline.push(vector),
            Source::Stored { path, .. } => stored.entry(path.clone()).or_default().push(vector),
        }
    }
    let mut out = Vec::with_capacity(inline.len() + stored.len());
    for vector in inline {
        let index = vector.index;
        out.push((index, vector.decode(Bytes::new()).await?));
    }
    let files: Vec<Vec<(usize, Deleted)>> = futures::stream::iter(stored)
        .map(|(path, vectors)| async move { read_file(store, &path, vectors).await })
        .buffer_unordered(READS)
        .try_collect()
        .await?;
    out.extend(files.into_iter().flatten());
    Ok(out)
}

/// Where a vector's bytes are.
enum Source {
    /// In the log.
    Inline,
    /// In a file under the table: `len` bytes at `start`.
    Stored { path: Path, start: u64, len: u64 },
}

/// One data file's vector, resolved.
struct Vector {
    index: usize,
    file: String,
    location: String,
    /// The file's rows, as its add action counts them.
    rows: Option<u64>,
    original: deltalake::kernel::DeletionVectorDescriptor,
    descriptor: KernelDescriptor,
    source: Source,
    /// The vector as messages name it.
    shown: String,
    table: Url,
}

impl Vector {
    fn new(wanted: Wanted, table: &Url, location: &str) -> Result<Vector, DeltaError> {
        let Wanted {
            index,
            file,
            rows,
            descriptor,
        } = wanted;
        let error = |vector: &str, reason: String| DeltaError::DeletionVector {
            location: location.to_string(),
            file: file.clone(),
            vector: vector.to_string(),
            reason,
            transient: false,
        };
        let original = descriptor.clone();
        // Sizes the log states are checked before anything is read or decoded: a vector
        // deletes at most the file's rows, and its bytes are bounded by them.
        if original.cardinality < 0
            || rows.is_some_and(|r| original.cardinality as u64 > r)
            || original.size_in_bytes < 0
            || rows.is_some_and(|r| original.size_in_bytes as u64 > max_vector_bytes(r))
        {
            return Err(error(
                "(descriptor)",
                format!(
                    "a vector of {} bytes deleting {} rows, for a file of {} rows",
                    original.size_in_bytes,
                    original.cardinality,
                    rows.map_or("unknown".into(), |r| r.to_string())
                ),
            ));
        }
        let descriptor = caught(|| KernelDescriptor::try_from(descriptor))
            .and_then(|r| r.map_err(|e| kernel_message(&e)))
            .map_err(|reason| error("(descriptor)", reason))?;
        let absolute = descriptor
            .absolute_path(table)
            .map_err(|e| error(&descriptor.unique_id(), kernel_message(&e)))?;
        let (source, shown) = match absolute {
            // The magic alone is 4 bytes, 5 characters of Z85 (the kernel indexes them
            // unchecked).
            None if descriptor.path_or_inline_dv.len() < 5 => {
                return Err(error(
                    "(inline)",
                    format!(
                        "an inline vector of {} characters holds no bitmap",
                        descriptor.path_or_inline_dv.len()
                    ),
                ));
            }
            None => (Source::Inline, "(inline)".to_string()),
            Some(url) => {
                let path = under_table(table, &url).ok_or_else(|| {
                    error(
                        url.as_str(),
                        "the deletion vector is outside the table's folder: only vectors under the table root are read".into(),
                    )
                })?;
                let shown = path.to_string();
                let (start, len) = span(&descriptor).map_err(|reason| error(&shown, reason))?;
                (Source::Stored { path, start, len }, shown)
            }
        };
        Ok(Vector {
            index,
            file,
            location: location.to_string(),
            rows,
            original,
            descriptor,
            source,
            shown,
            table: table.clone(),
        })
    }

    fn error(&self, reason: String, transient: bool) -> DeltaError {
        DeltaError::DeletionVector {
            location: self.location.clone(),
            file: self.file.clone(),
            vector: self.shown.clone(),
            reason,
            transient,
        }
    }

    /// The deleted rows, decoded by the kernel from `fetched` (the file's version byte and
    /// this vector's bytes; nothing for an inline vector).
    async fn decode(self, fetched: Bytes) -> Result<Deleted, DeltaError> {
        let cardinality = self.original.cardinality;
        let id = self.descriptor.unique_id();
        // The kernel reads a whole vector file and seeks to the offset: hand it the version
        // byte followed by this vector, at offset 1.
        let decode = match self.source {
            Source::Inline => self.descriptor.clone(),
            Source::Stored { .. } => KernelDescriptor::try_new(
                self.descriptor.storage_type,
                self.descriptor.path_or_inline_dv.clone(),
                Some(1),
                self.descriptor.size_in_bytes,
                self.descriptor.cardinality,
            )
            .map_err(|e| self.error(kernel_message(&e), false))?,
        };
        let large = decode.size_in_bytes >= DECODE_INLINE_BYTES;
        let table = self.table.clone();
        let file_rows = self.rows;
        let run = move || -> Result<Vec<u64>, String> {
            let handler: Arc<dyn delta_kernel::StorageHandler> = Arc::new(Fetched(fetched));
            let bitmap =
                caught(|| decode.read(handler, &table))?.map_err(|e| kernel_message(&e))?;
            // Counted before a row is expanded: a few bytes of runs can stand for billions.
            let deleted = bitmap.len();
            if deleted != cardinality as u64 {
                return Err(format!(
                    "it deletes {deleted} rows, its descriptor says {cardinality}"
                ));
            }
            if let (Some(last), Some(rows)) = (bitmap.max(), file_rows)
                && last >= rows
            {
                return Err(format!("it deletes row {last}, the file has {rows} rows"));
            }
            Ok(bitmap.into_iter().collect())
        };
        let rows = if large {
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| self.error(format!("decoding stopped: {e}"), false))?
        } else {
            run()
        }
        .map_err(|reason| self.error(reason, false))?;
        Ok(Deleted {
            rows: rows.into(),
            id: format!("{id}#{cardinality}"),
            descriptor: VectorDescriptor::from(&self.original),
        })
    }
}

/// The most bytes a vector deleting rows of a file of `rows` rows takes: 2 bytes a row in
/// array containers, plus each container's header (at most one per row) and the format's own.
fn max_vector_bytes(rows: u64) -> u64 {
    rows.saturating_mul(12).saturating_add(1 << 10)
}

/// `f`, with a panic inside it (the kernel's, on a crafted vector) as an error.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        format!(
            "the Delta kernel failed on it: {}",
            voxlake_io::panic_message(p.as_ref())
        )
    })
}

/// The vectors stored in the file at `path`: its version byte and each vector's bytes in one
/// `get_ranges`, then each decoded.
async fn read_file(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    vectors: Vec<Vector>,
) -> Result<Vec<(usize, Deleted)>, DeltaError> {
    // The version byte, then each vector.
    let ranges: Vec<Range<u64>> = std::iter::once(0..1)
        .chain(vectors.iter().filter_map(|v| match v.source {
            Source::Stored { start, len, .. } => Some(start..start + len),
            Source::Inline => None,
        }))
        .collect();
    let parts = match store.get_ranges(path, &ranges).await {
        Ok(parts) => parts,
        Err(e) => {
            let transient = store_error_is_transient(&e);
            let reason = match &e {
                object_store::Error::NotFound { .. } => {
                    "missing from the store (deleted or vacuumed?)".to_string()
                }
                _ => e.to_string(),
            };
            // Named by the first data file that needs it.
            return Err(vectors[0].error(reason, transient));
        }
    };
    // object_store's contract; a store that breaks it must not drop a vector silently.
    if parts.len() != ranges.len() {
        return Err(vectors[0].error(
            format!("{} ranges read for {} asked", parts.len(), ranges.len()),
            false,
        ));
    }
    let mut out = Vec::with_capacity(vectors.len());
    for (v, (range, bytes)) in vectors.into_iter().zip(ranges.iter().zip(&parts).skip(1)) {
        if parts[0].len() != 1 || bytes.len() as u64 != range.end - range.start {
            return Err(v.error(
                format!(
                    "the file is shorter than the vector's offset {} and size {} say",
                    range.start,
                    range.end - range.start
                ),
                false,
            ));
        }
        let mut joined = Vec::with_capacity(1 + bytes.len());
        joined.extend_from_slice(&parts[0]);
        joined.extend_from_slice(bytes);
        let index = v.index;
        out.push((index, v.decode(Bytes::from(joined)).await?));
    }
    Ok(out)
}

/// The byte range of a stored vector: its 4-byte size, the bitmap with its magic, the CRC.
fn span(descriptor: &KernelDescriptor) -> Result<(u64, u64), String> {
    let offset = descriptor.offset.unwrap_or(1);
    if offset < 1 || descriptor.size_in_bytes < 0 {
        return Err(format!(
            "offset {offset} and size {} do not describe a stored vector",
            descriptor.size_in_bytes
        ));
    }
    Ok((offset as u64, 4 + descriptor.size_in_bytes as u64 + 4))
}

/// `url`'s path relative to the table root `table`, if it is under it.
fn under_table(table: &Url, url: &Url) -> Option<Path> {
    let root = table.as_str().trim_end_matches('/');
    let rest = url.as_str().strip_prefix(root)?.strip_prefix('/')?;
    Path::from_url_path(rest).ok()
}

/// A kernel storage handler that hands out the one vector fetched for it: the kernel decodes,
/// object_store reads (async, with its retries).
struct Fetched(Bytes);

impl delta_kernel::StorageHandler for Fetched {
    fn list_from(
        &self,
        path: &Url,
    ) -> delta_kernel::DeltaResult<
        Box<dyn Iterator<Item = delta_kernel::DeltaResult<delta_kernel::FileMeta>>>,
    > {
        Err(unsupported("list", path))
    }

    fn read_files(
        &self,
        files: Vec<delta_kernel::FileSlice>,
    ) -> delta_kernel::DeltaResult<Box<dyn Iterator<Item = delta_kernel::DeltaResult<Bytes>>>> {
        if files.len() != 1 || files[0].1.is_some() {
            return Err(delta_kernel::Error::generic(format!(
                "a deletion vector read asked for {} ranges (one whole vector was fetched)",
                files.len()
            )));
        }
        Ok(Box::new(std::iter::once(Ok(self.0.clone()))))
    }

    fn copy_atomic(&self, src: &Url, _dest: &Url) -> delta_kernel::DeltaResult<()> {
        Err(unsupported("copy", src))
    }

    fn put(&self, path: &Url, _data: Bytes, _overwrite: bool) -> delta_kernel::DeltaResult<()> {
        Err(unsupported("write", path))
    }

    fn head(&self, path: &Url) -> delta_kernel::DeltaResult<delta_kernel::FileMeta> {
        Err(unsupported("head", path))
    }

    fn delete(&self, path: &Url) -> delta_kernel::DeltaResult<()> {
        Err(unsupported("delete", path))
    }
}

fn unsupported(what: &str, path: &Url) -> delta_kernel::Error {
    delta_kernel::Error::generic(format!(
        "{what} {path}: a deletion vector is decoded from the bytes fetched for it only"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_paths_are_read_under_the_table_root_only() {
        let table = Url::parse("s3://bucket/tables/cubes/").unwrap();
        let inside = Url::parse("s3://bucket/tables/cubes/ab/deletion_vector_x.bin").unwrap();
        assert_eq!(
            under_table(&table, &inside).unwrap().as_ref(),
            "ab/deletion_vector_x.bin"
        );
        let outside = Url::parse("s3://bucket/tables/other/deletion_vector_x.bin").unwrap();
        assert!(under_table(&table, &outside).is_none());
        let sibling = Url::parse("s3://bucket/tables/cubes2/deletion_vector_x.bin").unwrap();
        assert!(
            under_table(&table, &sibling).is_none(),
            "a prefix is not a folder"
        );
    }

    /// An inline vector's descriptor for `deleted` rows, as Delta writers encode it (magic,
    /// the portable roaring bitmap, Z85 over 4-byte words), its bytes handed to `mutate` first.
    fn inline(deleted: &[u64], mutate: impl FnOnce(&mut Vec<u8>)) -> (Vec<u8>, i32, i64) {
        use delta_kernel::actions::deletion_vector_writer::{DeletionVector, KernelDeletionVector};
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(deleted.iter().copied());
        let cardinality = dv.cardinality() as i64;
        let mut bytes = 1681511377u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&dv.serialize().unwrap());
        mutate(&mut bytes);
        let size = bytes.len() as i32;
        (bytes, size, cardinality)
    }

    /// What voxlake makes of an inline vector: the rows, or the error's text.
    fn decoded(bytes: &[u8], size: i32, cardinality: i64, rows: u64) -> Result<Vec<u64>, String> {
        let mut padded = bytes.to_vec();
        padded.resize(padded.len().div_ceil(4) * 4, 0);
        let descriptor = deltalake::kernel::DeletionVectorDescriptor {
            storage_type: deltalake::kernel::StorageType::Inline,
            path_or_inline_dv: z85::encode(&padded),
            offset: None,
            size_in_bytes: size,
            cardinality,
        };
        let wanted = Wanted {
            index: 0,
            file: "part-0.parquet".into(),
            rows: Some(rows),
            descriptor,
        };
        let table = Url::parse("s3://bucket/t/").unwrap();
        let run = async {
            let vector = Vector::new(wanted, &table, "s3://bucket/t").map_err(|e| e.to_string())?;
            vector.decode(Bytes::new()).await.map_err(|e| e.to_string())
        };
        let deleted = futures::executor::block_on(run)?;
        Ok(deleted.rows.to_vec())
    }

    proptest::proptest! {
        /// Crafted inline vectors (a valid one with a byte changed, cut short, or lying about
        /// its cardinality or size): decoded exactly, or refused with an error naming the
        /// file, never a panic, never a row the file does not have.
        #[test]
        fn crafted_inline_vectors_are_decoded_exactly_or_refused(
            rows in 1u64..5000,
            picks in proptest::collection::vec(0u64..5000, 0..300),
            edit in 0u8..5,
            at in 0usize..4096,
            value in proptest::prelude::any::<u8>(),
            delta in -3i64..4,
        ) {
            let mut deleted: Vec<u64> = picks.into_iter().filter(|r| *r < rows).collect();
            deleted.sort_unstable();
            deleted.dedup();
            let (bytes, size, cardinality) = inline(&deleted, |b| match edit {
                1 => { let n = b.len(); b[at % n] ^= value | 1; }
                2 => b.truncate(at % b.len()),
                _ => {}
            });
            let (size, cardinality) = match edit {
                3 => (size, cardinality + delta),
                4 => (size + delta as i32, cardinality),
                _ => (size, cardinality),
            };
            let unchanged = edit == 0
                || (edit == 3 && delta == 0)
                || (edit == 4 && delta == 0);
            match decoded(&bytes, size, cardinality, rows) {
                Ok(got) => {
                    proptest::prop_assert_eq!(got.len() as i64, cardinality);
                    proptest::prop_assert!(got.iter().all(|r| *r < rows));
                    if unchanged {
                        proptest::prop_assert_eq!(got, deleted);
                    }
                }
                Err(e) => {
                    proptest::prop_assert!(!unchanged, "a valid vector refused: {}", e);
                    proptest::prop_assert!(e.contains("part-0.parquet"), "{}", e);
                }
            }
        }
    }
}
