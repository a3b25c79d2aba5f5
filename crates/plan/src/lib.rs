//! The pure order of an epoch: which files and row groups, in which order, dealt to which rank,
//! mixed how, and where an epoch stands after some batches. No I/O and no dependency but `std`:
//! the same inputs, seed and epoch give the same order on every run and every machine.
//!
//! - [`plan`]: the order of files and row groups in an epoch; the seeded generator.
//! - [`affinity`]: files kept on their node's ranks from epoch to epoch (opt-in).
//! - [`sample`]: which rows an epoch draws, how often: weights, balance, subsets, a split;
//!   [`split`]: named splits by a hash of each row's id; [`mixture`]: several tables' shares.
//! - [`draws`]: an epoch's draws (a multiset of positions, in strata) and each rank's share.
//! - [`order`]: the epoch's draws dealt to ranks (equal counts, pad or drop), as units of reading.
//! - [`mixer`]: the shuffle buffer as a pure state machine.
//! - [`resume`]: where an epoch stands after some batches, for exact and elastic resume.
//! - [`patch`]: patches of volumes larger than a sample: bricks, pieces, padding, the
//!   inference grid, draws keyed by (seed, epoch, volume, k).
//!
//! ```
//! use voxlake_plan::{Planner, Shard};
//!
//! let shard = Shard::new(1, 4).unwrap();
//! assert_eq!((shard.rank(), shard.world_size()), (1, 4));
//! assert_eq!(Planner::new(3, false).file_order(3, 0), vec![0, 1, 2]);
//! ```
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod affinity;
pub mod draws;
mod error;
pub mod launch;
pub mod mixer;
pub mod mixture;
pub mod order;
pub mod patch;
pub mod plan;
pub mod resume;
pub mod sample;
pub mod sampler;
pub mod split;

pub use affinity::Affinity;
pub use order::Uneven;
pub use plan::{Planner, SeededRng, Shard};
