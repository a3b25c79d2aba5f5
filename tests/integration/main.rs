//! voxlake's integration tests: one binary, one module per area.

mod cli;
mod common;
mod compact;
mod distributed;
mod loader;
mod stores;
