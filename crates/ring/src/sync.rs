//! The one place the ring takes its atomics from: std's in a normal build,
//! loom's under `cfg(loom)`, so the model checker checks the code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicU32, AtomicU64, Ordering,
};

/// Loom has no compiler fences; light fences are never enabled in models.
#[cfg(loom)]
pub(crate) fn compiler_fence(_: Ordering) {}

/// Gives up the CPU in a spin (`sched_yield`); under loom, lets the model
/// run another thread (a spin loop without it never ends in a model).
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` with loom's API (`with_mut`), so that
/// under loom every access to the cell is checked for a data race.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer for writing the value.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
