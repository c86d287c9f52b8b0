//! Whether a read that waits in the library for a writer (`handover`) may
//! leave its thread's signals unblocked, and the handshake that keeps the
//! answer right when the program installs a handler that interrupts reads.
//!
//! A kernel `read` that a signal's handler interrupts before any byte came
//! fails with `EINTR` if the handler lacks `SA_RESTART`, and goes on as if
//! nothing happened if it has it. While no handler in the process lacks
//! `SA_RESTART`, a handler that runs during a wait in the library is one
//! after which a kernel `read` would have gone on: the wait goes on too,
//! and costs no system call for the signal mask. Once one may exist, every
//! wait blocks signals (three system calls) and asks which arrived.
//!
//! The handshake, one counter and one state word, each side writing one
//! and then reading the other with read-modify-writes (so that of two
//! sides that meet, at least one sees the other, whatever the fences):
//!
//! ```text
//! wait:      unmasked += 1; read state: not RESTART_ONLY -> unmasked -= 1, block signals
//!            at every poll: state not RESTART_ONLY -> block signals, then unmasked -= 1
//!            at the end (never blocked):             unmasked -= 1
//! installer: state = DRAINING; wait until unmasked <= (waits beneath it on its own thread);
//!            state = MASKED; then the real sigaction
//! ```
//!
//! So a signal delivered to a handler without `SA_RESTART` finds every
//! other wait with signals blocked (it stays pending, and that wait ends
//! with `EINTR` as the kernel's would). A wait of the installer's own
//! thread (the installer runs in a handler that interrupted it) cannot
//! block before the handler returns; it does at its next poll, which is
//! where a kernel `read` restarted after that handler would be: a signal
//! that comes between the two is delivered before the restarted call
//! natively too. The state never goes back to `RESTART_ONLY`.
//!
//! No system call in here: `handover` brings the mask, the clock and the
//! thread's own count, `hooks` the installers; the atomics come from
//! `sync`, so the loom model in `signal_gate/loom_models.rs` checks this
//! very code.

use crate::sync::{AtomicU32, Ordering};

#[cfg(all(test, loom))]
mod loom_models;

/// No handler without `SA_RESTART` has been installed: waits may leave
/// signals unblocked.
const RESTART_ONLY: u32 = 0;
/// One is about to be: new waits block signals, running ones switch.
const DRAINING: u32 = 1;
/// Every wait not beneath its installer has blocked signals.
const MASKED: u32 = 2;

/// The process's gate (one per process: a forked child gets a copy,
/// `after_fork` makes it the child's own).
#[derive(Debug)]
pub struct Gate {
    /// `RESTART_ONLY`, `DRAINING` or `MASKED`.
    state: AtomicU32,
    /// Waits running with signals unblocked, in every thread.
    unmasked: AtomicU32,
}

impl Gate {
    /// A gate that lets waits run unblocked.
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Gate {
        Gate {
            state: AtomicU32::new(RESTART_ONLY),
            unmasked: AtomicU32::new(0),
        }
    }

    /// A gate that lets waits run unblocked (loom's atomics have no const
    /// constructor).
    #[cfg(all(test, loom))]
    pub fn new() -> Gate {
        Gate {
            state: AtomicU32::new(RESTART_ONLY),
            unmasked: AtomicU32::new(0),
        }
    }

    /// A wait begins: whether it may run with signals unblocked. If so,
    /// it must call [`Gate::masked`] or [`Gate::end_unmasked`] once.
    pub fn begin_unmasked(&self) -> bool {
        // SYNC POINT (wait): the count first, then the state, each a
        // read-modify-write; pairs with the installer's swap of the state
        // then its reads of the count.
        self.unmasked.fetch_add(1, Ordering::AcqRel);
        if self.state.fetch_add(0, Ordering::AcqRel) == RESTART_ONLY {
            return true;
        }
        self.unmasked.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// At every poll of an unmasked wait: whether it must block signals
    /// now (then [`Gate::end_unmasked`], after blocking). A late answer only
    /// keeps an installer waiting longer.
    pub fn must_mask(&self) -> bool {
        self.state.load(Ordering::Relaxed) != RESTART_ONLY
    }

    /// An unmasked wait ends, or has blocked its thread's signals.
    pub fn end_unmasked(&self) {
        // Release: an installer that reads the lower count installs after
        // the block.
        self.unmasked.fetch_sub(1, Ordering::AcqRel);
    }

    /// Before a handler without `SA_RESTART` is installed: waits may no
    /// longer run unblocked, and this returns once none does but the
    /// `beneath` ones of the caller's own thread (which it interrupted),
    /// or once `give_up` says so (a count left by threads that a raw
    /// `clone` did not copy, which would never drop).
    pub fn before_interrupting_handler(&self, beneath: u32, mut give_up: impl FnMut() -> bool) {
        if self.state.load(Ordering::Acquire) == MASKED {
            return;
        }
        // SYNC POINT (installer): the state first, then the count; pairs
        // with `begin_unmasked`.
        self.state.swap(DRAINING, Ordering::AcqRel);
        while self.unmasked.fetch_add(0, Ordering::AcqRel) > beneath {
            if give_up() {
                break;
            }
        }
        self.state.store(MASKED, Ordering::Release);
    }

    /// In the child of `fork`: only the calling thread is left, with its
    /// `beneath` unmasked waits (a `fork` from a handler that interrupted
    /// one).
    #[cfg_attr(all(test, loom), allow(dead_code))]
    pub fn after_fork(&self, beneath: u32) {
        self.unmasked.store(beneath, Ordering::Relaxed);
    }
}
