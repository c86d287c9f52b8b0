//! Whether new pipes and socket pairs may get rings in this process, and
//! the handshake that lets one thread turn rings off while others are
//! making them (an io_uring is being made: `syscall_hook`), so that no
//! ring is left behind the spill that follows:
//!
//! ```text
//! maker:   note the new ring in the table; fence; still on? no -> spill it
//! stopper: on = false;                    fence; spill every ring the table notes
//! ```
//!
//! Each side stores, then loads what the other stores, with a `SeqCst`
//! fence between: of two such sides at least one sees the other's store.
//! So the stopper's spill sees the maker's ring, or the maker sees the
//! switch off and spills its ring itself (spilling twice is harmless).
//! The loom model in `ring_switch/loom_models.rs` checks this very code.
//!
//! No system call in here; the atomics come from `sync`.

use crate::sync::{fence, AtomicU32, Ordering};

#[cfg(all(test, loom))]
mod loom_models;

/// The switch: 1 while new pipes may get rings.
#[derive(Debug)]
pub struct Switch {
    on: AtomicU32,
}

impl Switch {
    /// A switch that is off.
    #[cfg(not(all(test, loom)))]
    pub const fn off() -> Switch {
        Switch {
            on: AtomicU32::new(0),
        }
    }

    /// A switch that is off (loom's atomics have no const constructor).
    #[cfg(all(test, loom))]
    pub fn off() -> Switch {
        Switch {
            on: AtomicU32::new(0),
        }
    }

    /// Whether new pipes may get rings: the one load a call pays.
    #[inline(always)]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed) != 0
    }

    /// Turns rings on (the constructor, before any other thread runs).
    pub fn turn_on(&self) {
        self.on.store(1, Ordering::Relaxed);
    }

    /// Turns rings off; every ring the table notes after this returns is
    /// the caller's to spill, and a maker that noted one too late for
    /// that sees the switch off ([`Switch::still_on_after_making`]).
    pub fn stop(&self) {
        self.on.store(0, Ordering::Relaxed);
        // SYNC POINT: pairs with the fence in `still_on_after_making`.
        fence(Ordering::SeqCst);
    }

    /// Called by a maker once its new ring is noted in the table: whether
    /// rings are still on; if not, the maker spills its ring.
    pub fn still_on_after_making(&self) -> bool {
        // SYNC POINT: pairs with the fence in `stop`.
        fence(Ordering::SeqCst);
        self.on()
    }
}
