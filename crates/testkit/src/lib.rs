//! Test and bench tooling for voxlake, kept out of the published crates: the fault and latency
//! injecting proxy ([`fault`]) that the object store suite, the benches and the Azure example
//! put in front of Azurite and moto's S3 server, the integration tests' helpers
//! ([`support`]), and Delta logs as Databricks writes them ([`delta`]: deletion vectors,
//! in-commit timestamps).
#![warn(missing_docs)]

pub mod conformance;
pub mod delta;
pub mod fault;
pub mod support;

pub use fault::{FaultPlan, FaultProxy, RandomFaults, Request};
pub use support::*;
