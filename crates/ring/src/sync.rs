//! The one place the ring takes its atomics from: std's in a normal build,
//! loom's under `cfg(loom)`, so the model checker checks the code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU64, Ordering};

/// Loom has no compiler fences; light fences are never enabled in models.
#[cfg(loom)]
pub(crate) fn compiler_fence(_: Ordering) {}
