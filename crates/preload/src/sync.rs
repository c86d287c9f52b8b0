//! The one place the hand-over's slot protocol (`slot_protocol`) takes its
//! atomics from: core's in the library, loom's in the crate's loom models
//! (`cfg(all(test, loom))`), so that the model checker checks the code
//! that ships.

#[cfg(not(all(test, loom)))]
pub use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
