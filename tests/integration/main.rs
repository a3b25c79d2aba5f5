//! voxlake's integration tests: one binary, one module per area.

mod cli;
mod common;
mod compact;
mod loader;
mod stores;
