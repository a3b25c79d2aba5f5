//! voxlake's integration tests: one binary, one module per area.

mod cli;
mod compact;
mod distributed;
mod loader;
mod stores;
