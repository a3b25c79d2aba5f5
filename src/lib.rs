//! voxlake
pub use voxlake_compact as compact;
pub use voxlake_format as format;
