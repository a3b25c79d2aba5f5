//! [`TableOptions`]: how a table is opened (store settings, version, sample columns, cache,
//! job), held once by every builder that opens one ([`SnapshotBuilder`](crate::SnapshotBuilder),
//! the stream's and the loader's); [`ScanOptions`]: what is read of it (a filter), held by
//! every builder that scans one; and [`table_options_setters`](crate::table_options_setters)
//! and [`scan_options_setters`](crate::scan_options_setters), the `with_*` setters each of
//! those builders gets from them: a setting is declared and documented here, not again in
//! each builder.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use voxlake_format::sample::ColumnHints;
use voxlake_io::cache::CacheChoice;

use voxlake_delta::AsOf;

/// How a table is opened: everything [`SnapshotBuilder`](crate::SnapshotBuilder) takes besides
/// the location.
///
/// ```
/// use voxlake_delta::AsOf;
/// use voxlake_table::TableOptions;
///
/// let options = TableOptions {
///     as_of: AsOf::Version(3),
///     ..TableOptions::default()
/// };
/// assert_eq!(options.as_of, AsOf::Version(3));
/// ```
#[derive(Clone, Default)]
pub struct TableOptions {
    /// Storage settings on top of the standard environment variables.
    pub storage_options: HashMap<String, String>,
    /// The version to open (default: the latest).
    pub as_of: AsOf,
    /// A store of the caller's, with `/` at the root of the store the location names.
    pub root_store: Option<Arc<dyn ObjectStore>>,
    /// How samples are read from the table's columns.
    pub hints: ColumnHints,
    /// The disk cache remote reads go through.
    pub cache: CacheChoice,
    /// The job this process is a rank of: with one, "the latest version" is resolved once for
    /// the whole job (see [`voxlake_delta::agree`]).
    pub job: Option<voxlake_delta::agree::Job>,
    /// Where the job's ranks agree on its version: a local folder or a store URL they may all
    /// write (default: [`voxlake_delta::agree::JOB_DIR_ENV`]'s, else the node's or the table's; see
    /// [`voxlake_delta::agree`]).
    pub job_dir: Option<String>,
}

impl std::fmt::Debug for TableOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Storage options may hold secrets: their keys only.
        let mut d = f.debug_struct("TableOptions");
        d.field(
            "storage_option_keys",
            &self.storage_options.keys().collect::<Vec<_>>(),
        )
        .field("as_of", &self.as_of)
        .field("custom_store", &self.root_store.is_some())
        .field("sample_columns", &self.hints)
        .field("job", &self.job)
        .field("job_dir", &self.job_dir.as_deref().map(voxlake_io::redact));
        d.field("cache", &self.cache);
        d.finish()
    }
}

/// What a scan reads of a snapshot: everything [`ScanBuilder`](crate::ScanBuilder) takes besides the snapshot.
///
/// ```
/// use voxlake_table::ScanOptions;
///
/// let mut options = ScanOptions::default();
/// options.filter = Some("label = 1".into());
/// assert_eq!(options.filter.as_deref(), Some("label = 1"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanOptions {
    /// The rows to read: an SQL boolean expression (see [`crate::filter`]).
    pub filter: Option<String>,
    /// The columns to read (`None`: id, label and every field of the sample).
    pub columns: Option<Vec<String>>,
}

/// The `with_*` setters of [`TableOptions`], for a builder with one at the field path `$field`
/// ([`SnapshotBuilder`](crate::SnapshotBuilder), `voxlake_stream::StreamBuilder`, `voxlake_loader::LoaderBuilder`): written once here,
/// so every builder that opens a table takes the same settings with the same meaning. Each
/// type is named by its own crate's path: the crate that expands it depends on
/// `voxlake-delta`, `voxlake-format`, `voxlake-io` and `object_store` itself.
#[macro_export]
macro_rules! table_options_setters {
    ($($field:ident).+) => {
        /// Storage settings on top of the standard environment variables (`AZURE_*`,
        /// `AWS_*`, `GOOGLE_*`, `OBJECT_STORE_*`).
        pub fn with_storage_options(
            mut self,
            options: ::std::collections::HashMap<String, String>,
        ) -> Self {
            self.$($field).+.storage_options = options;
            self
        }

        /// Reads through this store (with `/` at the root of the store the table's location
        /// names) instead of one built from the location and options: custom clients, object
        /// store's `ThrottledStore` for latency experiments, …
        pub fn with_object_store(
            mut self,
            store: ::std::sync::Arc<dyn ::object_store::ObjectStore>,
        ) -> Self {
            self.$($field).+.root_store = Some(store);
            self
        }

        /// Reads a remote table through a disk cache in `dir` holding at most `max_bytes`: the
        /// first epoch fills it, later epochs (and every other process of the node using the
        /// same folder: one per rank) read from local disk. Entries are checksummed, shared
        /// without a daemon, evicted least recently used first; the memory budget does not
        /// change (see `voxlake_io::cache`). Default: the cache `VOXLAKE_CACHE_DIR` names
        /// (capped at `VOXLAKE_CACHE_MAX_MB`), if set. Local tables are never cached.
        pub fn with_cache(mut self, dir: impl Into<::std::path::PathBuf>, max_bytes: u64) -> Self {
            self.$($field).+.cache = ::voxlake_io::cache::CacheChoice::Folder(dir.into(), max_bytes);
            self
        }

        /// Which disk cache to read through: one already open (shared by the loaders of a
        /// process), none whatever the environment says, or as `with_cache`.
        pub fn with_cache_choice(mut self, cache: ::voxlake_io::cache::CacheChoice) -> Self {
            self.$($field).+.cache = cache;
            self
        }

        /// The job this process is a rank of (any id its ranks share: a Slurm job id,
        /// torchrun's run id; or a `voxlake_delta::agree::Job` saying more): the latest version
        /// is then resolved once for the whole job — the first rank to open writes it to the
        /// job's marker, the others read that version — so ranks never mix versions while a
        /// writer commits. The marker goes to the job folder (`with_job_dir`), else this user's
        /// folder on the node where every rank runs on it, else `_voxlake/jobs/` beside the
        /// table; where none can be written (read-only data, ranks on several nodes), the ranks
        /// read the latest version committed before the job started where the launcher says
        /// when, else each its latest, with a warning (see `voxlake_delta::agree`).
        /// `voxlake_loader::LoaderBuilder` takes the job from `VOXLAKE_JOB_ID`,
        /// `TORCHELASTIC_RUN_ID` or `SLURM_JOB_ID` when its rank comes from the launcher. A
        /// loader of one rank writes nothing; a fixed version (`with_version`) needs no marker.
        pub fn with_job(mut self, job: impl Into<::voxlake_delta::agree::Job>) -> Self {
            self.$($field).+.job = Some(job.into());
            self
        }

        /// Where the ranks of the job (`with_job`) agree on its version: a local folder or a
        /// store URL every rank may write (a shared scratch folder, a bucket of the job's),
        /// instead of the node's folder or the table's; its markers are kept apart by table.
        /// Default: `VOXLAKE_JOB_DIR`, if set. A marker that cannot be written there is an
        /// error.
        pub fn with_job_dir(mut self, dir: impl Into<String>) -> Self {
            self.$($field).+.job_dir = Some(dir.into());
            self
        }

        /// Reads this table version (default: the latest at open, or a resumed state's). A
        /// version the log does not have is an error saying which is the latest.
        pub fn with_version(mut self, version: u64) -> Self {
            self.$($field).+.as_of = ::voxlake_delta::AsOf::Version(version);
            self
        }

        /// Reads the table as it was at `at`: the latest version committed at or before it (by
        /// the commits' in-commit timestamps where the table records them, else by their log
        /// files' modification times). A time before the first commit is an error saying when
        /// the table starts. `AsOf::parse_timestamp` reads RFC 3339 text.
        pub fn with_timestamp(mut self, at: ::std::time::SystemTime) -> Self {
            self.$($field).+.as_of = ::voxlake_delta::AsOf::Timestamp(at);
            self
        }

        /// The version to read, as `with_version` or `with_timestamp` say it.
        pub fn with_as_of(mut self, as_of: ::voxlake_delta::AsOf) -> Self {
            self.$($field).+.as_of = as_of;
            self
        }

        /// How samples are read from a table other tools wrote, all at once (the same settings
        /// as the `with_tensor_*`, `with_field*`, `with_label_column` and `with_id_column`
        /// methods; see `voxlake_format::sample`).
        pub fn with_sample_columns(mut self, hints: ::voxlake_format::sample::ColumnHints) -> Self {
            self.$($field).+.hints = hints;
            self
        }

        /// The column holding the tensors, for tables other tools wrote (default: `tensor`,
        /// else the only BINARY, LIST or FIXED_SIZE_LIST column of numbers). The table may be
        /// any Delta table or a folder of Parquet files; see `voxlake_format::sample` for the
        /// encodings read (Spark `array<float>`, Arrow fixed-size lists and
        /// `arrow.fixed_shape_tensor`, Petastorm's `np.save`/`np.savez_compressed` bytes, raw
        /// bytes).
        pub fn with_tensor_column(mut self, name: impl Into<String>) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_tensor_column(name);
            self
        }

        /// The shape (C order) and element type of one sample: needed for LIST and raw BINARY
        /// columns, checked against what the table records otherwise.
        pub fn with_tensor_shape(
            mut self,
            shape: Vec<usize>,
            dtype: ::voxlake_format::DType,
        ) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_tensor_shape(shape, dtype);
            self
        }

        /// The shape (C order) of one sample, its element type taken from the column: for LIST
        /// and FIXED_SIZE_LIST columns, whose schema says it (raw bytes need
        /// `with_tensor_shape`).
        pub fn with_tensor_dims(mut self, shape: Vec<usize>) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_shape(shape);
            self
        }

        /// A field of the sample (repeatable, in order; the first a tensor): column `name` (its
        /// logical name), found from the table: a tensor of any encoding read, a number or
        /// bool column (a `[B]` tensor), a string column or partition value (text). When fields
        /// are named, the sample is them (with the label and id).
        pub fn with_field(mut self, name: impl Into<String>) -> Self {
            let hints = std::mem::take(&mut self.$($field).+.hints);
            self.$($field).+.hints = hints.with_field(::voxlake_format::sample::FieldHint::new(name));
            self
        }

        /// `with_field` for a column whose bytes need a shape or an element type (raw BINARY,
        /// LIST): checked against what the table records otherwise.
        pub fn with_field_spec(
            mut self,
            name: impl Into<String>,
            shape: Vec<usize>,
            dtype: ::voxlake_format::DType,
        ) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_field(::voxlake_format::sample::FieldHint {
                shape: Some(shape),
                dtype: Some(dtype),
                ..::voxlake_format::sample::FieldHint::new(name)
            });
            self
        }

        /// What nulls of field `name` become: an error naming the column, file and row (the
        /// default), a fill value, or zeros and a validity field `<name>_valid`
        /// ([`NullPolicy`](voxlake_format::sample::NullPolicy)).
        pub fn with_null(
            mut self,
            name: impl Into<String>,
            policy: voxlake_format::sample::NullPolicy,
        ) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_null(name, policy);
            self
        }

        /// The label column: integers, bools or integral floats, handed out as `i64` (default:
        /// `label` where the table has one, else no labels).
        pub fn with_label_column(mut self, name: impl Into<String>) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_label_column(name);
            self
        }

        /// The id column, strings or integers (default: `id` where the table has one, else each
        /// row is named `<file>#<row in file>`).
        pub fn with_id_column(mut self, name: impl Into<String>) -> Self {
            self.$($field).+.hints = self.$($field).+.hints.with_id_column(name);
            self
        }
    };
}

/// The `with_*` setters of [`ScanOptions`], for a builder with one at the field path `$field`
/// ([`ScanBuilder`](crate::ScanBuilder), `voxlake_stream::StreamBuilder`, `voxlake_loader::LoaderBuilder`):
/// written once here, so every builder that scans a table takes the same settings with the
/// same meaning.
#[macro_export]
macro_rules! scan_options_setters {
    ($($field:ident).+) => {
        /// Reads only the rows `filter` keeps: one SQL boolean expression over the table's
        /// columns (as the files name them) and partition values, e.g.
        /// `label = 1 AND region IN ('a', 'b') AND depth >= 100`. It is applied when the scan
        /// is made, where it is cheapest: files and row groups that cannot match are skipped
        /// unread (partition values, Delta and Parquet statistics), the filter's columns of the
        /// rest read and decided row by row; ranks then share the kept rows in equal batch
        /// counts as without a filter, and a state resumes only under the same filter.
        pub fn with_filter(mut self, filter: impl Into<String>) -> Self {
            self.$($field).+.filter = Some(filter.into());
            self
        }

        /// Columns to read (default `id`, `label` and every field of the sample: `tensor` for
        /// a one-tensor table): only their byte ranges are fetched. Without the first field
        /// a loader's tensors are empty; without `id` or `label` its ids are empty strings and
        /// its labels `None`.
        pub fn with_columns(mut self, columns: Vec<String>) -> Self {
            self.$($field).+.columns = Some(columns);
            self
        }
    };
}
