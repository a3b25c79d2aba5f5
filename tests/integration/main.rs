//! voxlake's integration tests: one binary, one module per area.

mod cli;
mod compact;
mod conformance;
mod delta;
mod distributed;
mod fields;
mod filter;
mod foreign;
mod jobs;
mod loader;
mod lookup;
mod mixture;
mod sampling;
mod stores;
mod transform;
mod volumes;
