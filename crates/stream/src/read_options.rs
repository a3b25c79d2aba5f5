//! [`ReadOptions`]: how a stream reads each row group (the columns are its scans':
//! `voxlake_table::ScanOptions`) and how it checks it, held once by
//! every builder that makes a stream (`StreamBuilder`, `voxlake_loader::LoaderBuilder`), and
//! [`read_options_setters`], their shared `with_*` setters.

use voxlake_plan::order::Uneven;
use voxlake_table::hooks::Hooks;

/// How a stream reads each row group (checks, kept row groups, test hooks), and how it deals
/// rows that do not divide evenly.
///
/// ```
/// use voxlake_plan::order::Uneven;
/// use voxlake_stream::{ReadOptions, Verify};
///
/// let read = ReadOptions::default();
/// assert!(read.verify == Verify::OnRead && read.keep);
/// assert_eq!(read.uneven, Uneven::Pad);
/// ```
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// When each row's checksum is verified (where the table has them and whole rows are read).
    pub verify: Verify,
    /// Pad or drop the rows that do not divide evenly over the ranks.
    pub uneven: Uneven,
    /// Keep row groups in the memory budget's free room from one epoch to the next, so a later
    /// epoch takes them back instead of reading them again.
    pub keep: bool,
    /// A test's fault hooks (feature `fault-hooks`; none otherwise).
    pub hooks: Hooks,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            verify: Verify::OnRead,
            uneven: Uneven::Pad,
            keep: true,
            hooks: Hooks::default(),
        }
    }
}

/// When a stream's rows are checked against their checksums (`row_crc32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verify {
    /// Never (the checksum column is not read).
    Off,
    /// As each row group is read, on the decode pool: a row group is handed out only once
    /// every row of it is found whole.
    OnRead,
    /// By the consumer, each row just before it uses it
    /// ([`RowGroupBatch::check_row`](crate::RowGroupBatch::check_row)): the row's bytes come
    /// from memory once, into the cache its copy reads them from, instead of once for the
    /// check and again for the copy. A row group is handed out unchecked, so only for a
    /// consumer that calls `check_row` on every row it uses (the loader does).
    OnUse,
}

/// The `with_*` setters of [`ReadOptions`], for a builder with one in its field `$field`:
/// written once here, so the stream and the loader take them with the same meaning. The crate
/// that expands it depends on `voxlake-plan` and `voxlake-table` itself (the types it names).
#[macro_export]
macro_rules! read_options_setters {
    ($field:ident) => {
        /// Verify each row's checksum (id, label and every field, where the table has the
        /// `row_crc32` column and whole rows are read; default on): a corrupt row is an error
        /// naming file, row group, row and id. Costs a CRC-32 of every row
        /// (docs/benchmarks.md): a stream checks them as it reads each row group, a loader
        /// each row just before its copy into a batch.
        pub fn with_verify_checksums(mut self, verify: bool) -> Self {
            self.$field.verify = match verify {
                true => $crate::Verify::OnRead,
                false => $crate::Verify::Off,
            };
            self
        }

        /// Pad or drop the rows that do not divide evenly over the ranks (default pad: every
        /// rank gets the same number of rows, the last ones wrapping onto the epoch's first).
        pub fn with_uneven(mut self, uneven: ::voxlake_plan::order::Uneven) -> Self {
            self.$field.uneven = uneven;
            self
        }

        /// Keep row groups from one epoch to the next in the memory budget's room (default on):
        /// a row group the epoch is done with keeps its share of the budget, unless a read is
        /// waiting for it, and a later epoch takes it back instead of fetching, decoding and
        /// checking it again; reads let go of the least recently kept when they need the room.
        /// So a table that fits the budget is read once a job, and resident memory stays
        /// within the budget (it fills it). Off: every epoch reads every row group.
        pub fn with_keep_row_groups(mut self, keep: bool) -> Self {
            self.$field.keep = keep;
            self
        }

        /// Calls `hook` at every stage (footer, fetch, decode, and a loader's assemble) so
        /// tests can inject errors and panics (feature `fault-hooks`).
        #[cfg(feature = "fault-hooks")]
        pub fn with_fault_hook(mut self, hook: ::voxlake_table::hooks::FaultHook) -> Self {
            self.$field.hooks = ::voxlake_table::hooks::Hooks::new(hook);
            self
        }
    };
}
