//! voxlake's integration tests: one binary, one module per area.

mod cli;
mod compact;
mod distributed;
mod foreign;
mod loader;
mod stores;
mod transform;
