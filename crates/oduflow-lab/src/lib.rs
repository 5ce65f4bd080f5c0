//! The laboratory: `oduflow campaign` (randomized fault schedules across
//! worker processes, checked against the protocol's invariants) and
//! `oduflow bench` (figures for BENCHMARKS.md), with the database tooling
//! they need (the store's test kit: fresh databases, snapshots, drops).
//!
//! Not part of the product: the `oduflow` binary links it through its default
//! `lab` feature, so `cargo run -- campaign` and `cargo run -- bench` work in
//! a checkout, and the build an operator deploys
//! (`cargo build --release -p oduflow --no-default-features`) carries
//! neither it nor the test kit. Both spawn `oduflow worker` processes from the
//! executable they run in.

pub mod bench;
mod bench_bulk;
mod bench_dns;
pub mod campaign;

/// An argument the laboratory refuses: exit code 2, as for any bad input.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);
