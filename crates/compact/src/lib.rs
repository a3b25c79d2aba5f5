//! Converts a prefix of `.npy` objects into one Delta table of large Parquet files laid out
//! for streaming, and keeps such tables compact.
//!
//! [`Compactor`] is the entry point: it names the table and carries the settings; its
//! [`convert`](Compactor::convert), [`optimize`](Compactor::optimize) and
//! [`inspect`](Compactor::inspect) do the work.
//!
//! Conversion is exactly-once across re-runs: it reads the ids already in the table and
//! converts only the rest; each commit is atomic, so a run killed at any point leaves the
//! table at its last good version (files written but not committed are invisible to readers
//! and removed by a later `VACUUM`). `--shard I/N` runs split the keys by a stable hash, so N
//! processes can fill one table at once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use voxlake_compact::{Compactor, synth};
//! use voxlake_format::Layout;
//!
//! let dir = tempfile::tempdir()?;
//! let data = synth::generate(dir.path(), 8, 42)?;
//! let table = dir.path().join("table");
//! let compactor = Compactor::new(table.to_str().unwrap())
//!     .with_labels(data.labels.to_str().unwrap())
//!     .with_layout(Layout { row_group_rows: 4, ..Layout::default() });
//! let summary = compactor.convert(data.cubes.to_str().unwrap()).await?;
//! assert_eq!(summary.rows, 8);
//! let info = compactor.inspect().await?;
//! assert_eq!((info.rows, info.row_groups), (8, 2));
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
// Library code returns errors: a panic would end a training run. Tests may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::collections::HashMap;
use std::sync::Arc;

use voxlake_format::{DType, Layout};

mod commit;
mod convert;
mod error;
mod from_arrow;
mod from_table;
pub mod infer;
mod inspect;
mod inspect_row;
mod labels;
mod optimize;
mod picture;
mod sink;
mod source;
pub mod synth;
mod table;
mod volumes;
mod writer;

pub use error::CompactError;
pub use from_arrow::{ArrowRow, ArrowSamples};
pub use inspect::{FileInfo, TableInfo, VolumeSummary, VolumesInfo};
pub use inspect_row::{FieldValues, RowInfo};
pub use labels::Labels;
pub use optimize::{OptimizeSummary, plan_bins};
pub use picture::Picture;
pub use sink::{ConvertSummary, ConvertTimings, Skipped};
pub use volumes::{Volume, VolumeWriter};
pub use writer::RowWriter;

/// What to do with a source object that cannot be converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnError {
    /// Stop; what was committed before stays, nothing half-written is visible.
    #[default]
    Fail,
    /// Go on; every skipped object is listed in the summary with its reason.
    Skip,
}

/// Progress of a conversion, reported after every object.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Objects to convert in this run.
    pub files_total: usize,
    /// Objects done (converted or skipped).
    pub files_done: usize,
    /// Source bytes read so far.
    pub bytes_read: u64,
    /// Objects skipped so far.
    pub skipped: usize,
    /// The table version last committed.
    pub version: u64,
}

/// A callback that receives [`Progress`].
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Converts, optimizes and inspects one voxlake table.
#[derive(Clone)]
pub struct Compactor {
    table: String,
    storage_options: HashMap<String, String>,
    layout: Layout,
    labels: Option<String>,
    dtype: Option<DType>,
    shape: Option<Vec<usize>>,
    /// The fields of a source with several (a folder per field, `.npz` arrays).
    fields: Option<Vec<String>>,
    hints: voxlake_format::sample::ColumnHints,
    as_of: voxlake_delta::AsOf,
    shard: Option<(u32, u32)>,
    on_error: OnError,
    /// Source objects read at once (`None`: sized to the store as it runs).
    concurrency: Option<usize>,
    files_per_commit: usize,
    progress: Option<ProgressFn>,
    /// Convert volumes into bricks of this many voxels (z, y, x).
    bricks: Option<[u64; 3]>,
    /// The label maps whose classes a bricked conversion counts (`None`: the default).
    class_fields: Option<Vec<String>>,
}

impl std::fmt::Debug for Compactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: list their keys only.
        let mut keys: Vec<&String> = self.storage_options.keys().collect();
        keys.sort();
        f.debug_struct("Compactor")
            .field("table", &voxlake_io::redact(&self.table))
            .field("storage_option_keys", &keys)
            .field("layout", &self.layout)
            .field("labels", &self.labels)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("fields", &self.fields)
            .field("as_of", &self.as_of)
            .field("shard", &self.shard)
            .field("on_error", &self.on_error)
            .field("concurrency", &self.concurrency)
            .field("files_per_commit", &self.files_per_commit)
            .field("bricks", &self.bricks)
            .field("class_fields", &self.class_fields)
            .finish()
    }
}

impl Compactor {
    /// A compactor for the table at `table`: a local path or a URL (`az://`, `abfss://`,
    /// `gs://`, `file://`).
    pub fn new(table: impl Into<String>) -> Self {
        Compactor {
            table: table.into(),
            storage_options: HashMap::new(),
            layout: Layout::default(),
            labels: None,
            dtype: None,
            shape: None,
            fields: None,
            hints: Default::default(),
            as_of: voxlake_delta::AsOf::Latest,
            shard: None,
            on_error: OnError::Fail,
            concurrency: None,
            files_per_commit: 8,
            progress: None,
            bricks: None,
            class_fields: None,
        }
    }

    /// Storage settings (object_store keys such as `azure_storage_account_key`), on top of
    /// the standard environment variables. Used for the source, the labels and the table.
    pub fn with_storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// Converts `.npy` volumes (3-D, or 4-D with channels first; shapes may differ) into a
    /// bricked table of bricks of `brick` voxels (z, y, x) instead of a row a sample
    /// (docs/format.md, "Bricked volumes"); each field of a volume is cut on one grid.
    pub fn with_bricks(mut self, brick: [u64; 3]) -> Self {
        self.bricks = Some(brick);
        self
    }

    /// With [`with_bricks`](Self::with_bricks): the label maps whose classes each volume's
    /// info counts (default: the fields after the first whose values are one byte).
    pub fn with_class_fields(mut self, names: Vec<String>) -> Self {
        self.class_fields = Some(names);
        self
    }

    /// The Parquet layout of new files.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// A CSV with columns `file,label`; every converted object must have a label.
    pub fn with_labels(mut self, location: impl Into<String>) -> Self {
        self.labels = Some(location.into());
        self
    }

    /// The element type of the table; sources are converted to it (narrowing allowed within
    /// a kind, never float → integer). Without it, a new table takes the type the first few
    /// objects agree on, and only lossless conversions are allowed.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// The shape of a new table's tensors. Without it (and without `with_dtype`), a new
    /// table takes the shape and type the first few source objects agree on
    /// ([`infer::settle`]); objects of another shape are bad input.
    pub fn with_shape(mut self, shape: Vec<usize>) -> Self {
        self.shape = Some(shape);
        self
    }

    /// The fields of each sample of a source of several, in order (the first is what
    /// `Batch::tensors` holds): `SRC/<field>/<name>.npy` for every field makes the sample
    /// `<name>` (a name missing a field is an error naming it, or skipped and listed with
    /// `OnError::Skip`); for `.npz` archives, the arrays of each. Each field becomes a column of
    /// the table, its shape and type settled from its arrays and recorded in the table
    /// configuration (`docs/format.md`). Without it, `.npy` objects are one field, `tensor`,
    /// and `.npz` archives their arrays in the first archive's order. For a table source, the
    /// columns to take (a column whose bytes need a shape or type: the
    /// [`FieldHint`](voxlake_format::sample::FieldHint)s of
    /// [`with_sample_columns`](Self::with_sample_columns) instead).
    pub fn with_fields(mut self, fields: Vec<String>) -> Self {
        self.fields = Some(fields);
        self
    }

    /// How [`inspect`](Self::inspect) and [`convert`](Self::convert) read samples from a table
    /// other tools wrote (tensor column, shape and dtype, label and id columns; see
    /// [`voxlake_format::sample`]). `convert` from a table also takes the shape and dtype of
    /// [`with_shape`](Self::with_shape) and [`with_dtype`](Self::with_dtype).
    pub fn with_sample_columns(mut self, hints: voxlake_format::sample::ColumnHints) -> Self {
        self.hints = hints;
        self
    }

    /// The version [`inspect`](Self::inspect) reads: a version, or the one a time names
    /// (default: the latest).
    pub fn with_as_of(mut self, as_of: voxlake_delta::AsOf) -> Self {
        self.as_of = as_of;
        self
    }

    /// Converts only the keys whose stable hash is `index` modulo `count`.
    ///
    /// # Panics
    /// If `index >= count`.
    pub fn with_shard(mut self, index: u32, count: u32) -> Self {
        assert!(
            index < count,
            "shard index {index} must be below the count {count}"
        );
        self.shard = Some((index, count));
        self
    }

    /// What to do with objects that cannot be converted.
    pub fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Source objects read at once, always `concurrency`. Default: sized to the store as the
    /// conversion runs (Little's law over the measured read time and the writer's pace, no
    /// more than the store's bandwidth-delay product, from 16 up to 256; see
    /// `voxlake_io::depth`).
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = Some(concurrency.max(1));
        self
    }

    /// Commit after about this many target-size files (default 8): fewer commits, or less
    /// work lost to a kill.
    pub fn with_files_per_commit(mut self, files: usize) -> Self {
        self.files_per_commit = files.max(1);
        self
    }

    /// A callback for progress reports.
    pub fn with_progress(mut self, progress: ProgressFn) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Converts the `.npy` objects under `source` (a local folder or a URL prefix) that are
    /// not in the table yet, creating the table if needed.
    pub async fn convert(&self, source: &str) -> Result<ConvertSummary, CompactError> {
        self.run_convert(source).await
    }

    /// Rewrites small files into files of the target size (Delta OPTIMIZE, bin-packing).
    pub async fn optimize(&self) -> Result<OptimizeSummary, CompactError> {
        self.run_optimize().await
    }

    /// Describes the table: version, files, rows, bytes, row groups, tensor spec and how the
    /// tensor column is read, labels. Any Delta table or folder of Parquet files voxlake can
    /// stream, not only its own.
    pub async fn inspect(&self) -> Result<TableInfo, CompactError> {
        self.run_inspect().await
    }
}

impl Compactor {
    /// Whether the sample `key` is this compactor's to write (`with_shard`: its stable hash's
    /// share; every key without one).
    pub(crate) fn in_shard(&self, key: &str) -> bool {
        self.shard.is_none_or(|(index, count)| {
            voxlake_io::location::stable_hash(key) % u64::from(count) == u64::from(index)
        })
    }
}
