//! `shmpipe-bench`: the suite behind `shmpipe bench`.
//!
//! It compares shmpipe with the kernel's IPC (pipes, Unix sockets, eventfd,
//! futex, signals), with peer crates (feature `peers`) and with the
//! physical limit, one cache line bounced between two cores, in the manner
//! of lmbench: each figure is the median of several runs, the contestants
//! are interleaved so drift hits them alike, every item is checked, and the
//! ratios come from the same run on the same machine.
//!
//! The layers, each using only those above it:
//!
//! - [`job`] names what is measured (contestants, tests, placements);
//!   [`sys`], [`stats`], [`figures`] and [`machine`] are leaves beside it;
//! - [`links`] and the scenarios ([`capi`], [`peers`], [`rpc_null`],
//!   [`reread`], [`serve`], [`tokio_rt`]) move and check the data;
//! - [`registry`], the one module that names them all, says which
//!   contestant takes part in which test and how it runs;
//! - [`harness`] runs and calibrates one job as the registry says, and
//!   [`plan`] chooses and interleaves the jobs;
//! - [`report`] and [`plot`] turn the figures into tables, JSON and charts;
//!   [`probe`] and [`instructions`] count instructions per message.
//!
//! Only [`sys`] and [`capi`] (the C calls) have `unsafe`, apart from the
//! two copies the `shmem-ipc` peer needs into and out of its raw ring
//! (`peers`, behind the `peers` feature).

#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod capi;
mod check;
pub mod figures;
pub mod harness;
pub mod instructions;
pub mod job;
mod link_tests;
pub mod links;
pub mod machine;
pub mod peers;
pub mod permission;
pub mod plan;
pub mod plot;
pub mod probe;
pub mod registry;
pub mod report;
pub mod reread;
pub mod rpc_null;
#[cfg(feature = "peers")]
pub mod rpc_peers;
pub mod serve;
#[cfg(feature = "peers")]
pub mod serve_peers;
pub mod stages;
pub mod stats;
#[allow(unsafe_code)]
pub mod sys;
mod team;
pub mod tokio_rt;
pub mod unmodified;

pub use job::{Job, Mechanism, Placement, Test};
pub use machine::Machine;
pub use plan::Config;
pub use stats::{Results, Summary};
