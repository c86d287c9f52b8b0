//! The one place the ring takes its atomics from: std's in a normal build,
//! loom's under `cfg(loom)`, so the model checker checks the code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
