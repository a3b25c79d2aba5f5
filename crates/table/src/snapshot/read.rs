//! Reads of a version's data files: footers (checked against the log, the most recently used
//! kept), row groups fetched with one ranged request and decoded (`row_group`; LIST tensor
//! columns from their pages, `list_chunk` with `list_decode` and `pages`), small files read
//! whole, and whole files' columns.

mod files;
mod footer;
mod footer_cache;
mod list_chunk;
mod list_decode;
mod pages;
mod row_group;
mod small;

pub(super) use footer::check_footer;
pub use footer_cache::FOOTER_CACHE_BYTES;
pub(super) use footer_cache::FooterCache;
pub(super) use pages::first_binary_value;
pub use row_group::ReadTimings;
pub(crate) use row_group::{Ahead, RowGroupRead};
pub(super) use small::SmallFiles;
