//! A conversion's reads: the source listed, and each sample's objects fetched in a read slot
//! sized to the store and decoded into its row (on a blocking thread where its arrays need
//! converting), ahead of the writer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt};
use voxlake_format::{Casting, SampleSpec};
use voxlake_io::depth::Depth;
use voxlake_io::inflight::{Metered, Slots};
use voxlake_io::location::Location;

use crate::error::CompactError;
use crate::labels::Labels;
use crate::source::{self, Row, SourceLayout, SourceObject, SourceSample};

/// Source reads in flight at the start of a conversion, and at most (objects of a few hundred
/// KB: 256 hold ~100 MB).
const START_READS: usize = 16;
const MAX_READS: usize = 256;
/// Decoded rows waiting for the writer at most.
const MAX_AHEAD: usize = 64;

/// What the reads give the writer: each sample's key and its row (or why it does not decode).
pub(super) type Rows =
    BoxStream<'static, Result<(String, Result<Row, CompactError>), CompactError>>;

/// The source's objects under its prefix, each keyed by its path below it.
pub(crate) async fn list(src: &Location) -> Result<Vec<SourceObject>, CompactError> {
    src.store
        .list(Some(&src.prefix))
        .map_ok(|meta| {
            let key = meta
                .location
                .prefix_match(&src.prefix)
                .map(|parts| {
                    parts
                        .map(|p| p.as_ref().to_string())
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .unwrap_or_else(|| meta.location.to_string());
            SourceObject {
                key,
                location: meta.location,
                size: meta.size,
                fetched: None,
            }
        })
        .try_collect()
        .await
        .map_err(|e| CompactError::Source {
            location: src.display.clone(),
            source: e,
        })
}

/// What every sample's read shares.
pub(super) struct Reader {
    /// Read permits, sized to the store as it answers.
    pub(super) slots: Arc<Slots>,
    pub(super) store: Arc<dyn ObjectStore>,
    /// The table's samples.
    pub(super) spec: Arc<SampleSpec>,
    pub(super) layout: Arc<SourceLayout>,
    pub(super) labels: Option<Arc<Labels>>,
    /// The source, for messages.
    pub(super) src_display: Arc<str>,
    pub(super) casting: Casting,
    /// Time spent reading and decoding, over all samples.
    pub(super) read_ns: Arc<AtomicU64>,
    pub(super) decode_ns: Arc<AtomicU64>,
}

impl Reader {
    /// Sample `sample` read and decoded: its key, and its row or why there is none.
    pub(super) async fn read(
        self: Arc<Self>,
        sample: SourceSample,
    ) -> (String, Result<Row, CompactError>) {
        let key = sample.key.clone();
        let size = sample.size();
        let slot = match self.slots.acquire().await {
            Ok(slot) => slot,
            Err(e) => return (key, Err(CompactError::Internal(e.to_string()))),
        };
        let reading = Instant::now();
        let mut parts = Vec::with_capacity(sample.parts.len());
        for mut object in sample.parts {
            let bytes = match object.fetched.take() {
                Some(bytes) => Ok(bytes),
                None => match self.store.get(&object.location).await {
                    Ok(r) => r.bytes().await,
                    Err(e) => Err(e),
                },
            }
            .map_err(|e| CompactError::Source {
                location: format!("{}/{}", self.src_display, object.key),
                source: e,
            });
            match bytes {
                Ok(b) => parts.push((object.key, b)),
                Err(e) => return (key, Err(e)),
            }
        }
        slot.done();
        let elapsed = reading.elapsed().as_nanos() as u64;
        self.read_ns.fetch_add(elapsed, Ordering::Relaxed);
        // Nothing to convert: slices of the downloads, decoded here.
        let ready = !matches!(*self.layout, SourceLayout::Npz(_))
            && parts
                .iter()
                .zip(self.spec.tensors())
                .all(|((_, b), (_, s))| source::ready(b, s));
        let named = key.clone();
        let reader = self.clone();
        let run = move || {
            let decoding = Instant::now();
            // An archive holds the sample's arrays (and perhaps a few others): it inflates to
            // twice their size at most, never to what a bomb claims.
            let cap = (reader.spec.tensor_bytes() as u64)
                .saturating_mul(2)
                .saturating_add(voxlake_format::npy::NPY_HEADER_ROOM * 16);
            let arrays = source::arrays(&key, &parts, &reader.layout, cap)?;
            let labels = reader.labels.as_deref();
            let row = source::decode(key, arrays, size, &reader.spec, reader.casting, labels);
            let elapsed = decoding.elapsed().as_nanos() as u64;
            reader.decode_ns.fetch_add(elapsed, Ordering::Relaxed);
            row
        };
        let decoded = if ready {
            run()
        } else {
            // Conversion (and inflating archives) is CPU work: keep it off the I/O threads.
            tokio::task::spawn_blocking(run)
                .await
                .unwrap_or_else(|e| Err(CompactError::Internal(e.to_string())))
        };
        (named, decoded)
    }
}

/// `samples` read from `src` and decoded as `sample` says, in a task of their own so that
/// they go on while the writer waits on the store, in order; reads in flight sized to the
/// store (Little's law over the measured GET time and the writer's pace) unless
/// `concurrency` fixes them. `cast`: the dtype was given (same-kind casts, not only safe
/// ones). The reader is kept for its counters.
pub(super) fn start(
    src: &Location,
    sample: &SampleSpec,
    layout: SourceLayout,
    labels: Option<Arc<Labels>>,
    samples: Vec<SourceSample>,
    cast: bool,
    concurrency: Option<usize>,
) -> (Metered<Rows>, Arc<Reader>) {
    let (depth, most) = match concurrency {
        Some(n) => (Depth::fixed(n), n),
        None => (Depth::new(START_READS, MAX_READS), MAX_READS),
    };
    let reader = Arc::new(Reader {
        slots: Slots::new(depth),
        store: src.store.clone(),
        spec: Arc::new(sample.clone()),
        layout: Arc::new(layout),
        labels,
        src_display: src.display.trim_end_matches('/').into(),
        casting: if cast {
            Casting::SameKind
        } else {
            Casting::Safe
        },
        read_ns: Arc::new(AtomicU64::new(0)),
        decode_ns: Arc::new(AtomicU64::new(0)),
    });
    let paced = reader.slots.clone();
    let reads = futures::stream::iter(samples)
        .map({
            let reader = reader.clone();
            move |sample| reader.clone().read(sample)
        })
        .buffered(most);
    let rows = voxlake_io::spawn_ahead(
        reads.map(Ok::<_, CompactError>).boxed(),
        most.min(MAX_AHEAD),
        |panic| CompactError::Internal(format!("reading the source panicked: {panic}")),
    );
    (Metered::new(rows, paced), reader)
}
