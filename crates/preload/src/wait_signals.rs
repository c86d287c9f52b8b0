//! The signal mask of a read that waits in the library (`handover`), so
//! that a signal arriving then has the effect it has on a kernel `read`:
//! a handler with `SA_RESTART` runs and the read goes on, one without it
//! ends a read that got no byte with `EINTR`.
//!
//! While the process has no handler without `SA_RESTART` but counted ones
//! (`counted_handlers`, which `sigaction` installs; `signal_gate` says so,
//! and this module asks the kernel once, at the first wait, for those
//! installed before the library could see them), a wait leaves the mask
//! alone: a handler with `SA_RESTART` may run in it, and it goes on, as
//! the kernel's `read` would; a counted one ends it. Otherwise it blocks
//! every signal for the wait and looks at what became pending at its end:
//! three system calls. lmbench's harness installs its handlers with
//! `signal`, which gives `SA_RESTART`.
//!
//! A write that waits for room in a ring ([`RoomWait`]) holds every signal
//! from its first wait to its end instead, and ends with the count so far
//! when one comes, as a kernel `write` that waits for room does (pipe(7)):
//! with `SA_RESTART` too, which only restarts a write that wrote nothing
//! (one that lacks it fails such a write with `EINTR`).
//!
//! `hooks` calls [`before_interrupting_handler`] from its wrappers of the
//! calls that can install a handler without `SA_RESTART` that is not
//! counted (`sigset`, `sysv_signal`, `siginterrupt`), and [`after_fork`]
//! in a forked child.

use core::cell::Cell;
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::counted_handlers;
use crate::signal_gate::Gate;
use crate::sys;
use crate::sys::{disposition, now_ns};

/// The process's gate.
static GATE: Gate = Gate::new();
/// Whether the dispositions that were there before the library could see
/// them have been read.
static SCANNED: AtomicBool = AtomicBool::new(false);
/// Whether this process has started a thread (`pthread_create`) since it
/// began or forked.
static THREADS: AtomicBool = AtomicBool::new(false);
/// How long an installer waits for other threads' waits to block their
/// signals before it gives up (ns): far longer than any wait
/// (`handover::MAX_WAIT_NS`) and its scheduling; only a count that cannot
/// drop (threads that a raw `clone` did not copy) waits this long, once.
const INSTALLER_WAIT_NS: i64 = 1_000_000_000;

std::thread_local! {
    /// This thread's waits with signals unblocked: more than one where a
    /// handler that interrupted one reads again.
    static UNBLOCKED_HERE: Cell<u32> = const { Cell::new(0) };
}

/// The mask of one wait.
pub struct WaitMask {
    /// The thread's own mask, once every signal is blocked for the wait.
    own: Option<sys::SigSet>,
    /// The wait with signals left alone, counted in the gate.
    unmasked: Option<Unmasked>,
    /// Whether a counted handler (one without `SA_RESTART`) ran in the
    /// wait while it was unmasked.
    interrupted: bool,
}

impl WaitMask {
    /// A wait begins: with signals left alone if the gate allows, else
    /// with every signal blocked.
    pub fn begin() -> WaitMask {
        if let Some(unmasked) = Unmasked::begin() {
            return WaitMask {
                own: None,
                unmasked: Some(unmasked),
                interrupted: false,
            };
        }
        WaitMask {
            own: Some(sys::block_all_signals()),
            unmasked: None,
            interrupted: false,
        }
    }

    /// At every poll: blocks signals if a handler without `SA_RESTART` is
    /// about to be installed; true once a counted handler without it ran
    /// in the wait, which must then end (a kernel `read` it interrupted
    /// would).
    pub fn poll(&mut self) -> bool {
        if let Some(u) = self.unmasked.as_ref() {
            self.interrupted |= u.interrupted();
            if !u.allowed() {
                self.own = Some(sys::block_all_signals());
                // A counted handler that ran before the block.
                self.interrupted |= u.interrupted();
                // Then out of the gate's count: an installer that reads
                // the lower count installs after the block.
                self.unmasked = None;
            }
        }
        self.interrupted
    }

    /// The wait is over: puts the mask back (the handlers of signals that
    /// came meanwhile run now) and says whether one of them lacks
    /// `SA_RESTART`, so that the read must fail with `EINTR` if it got
    /// nothing.
    pub fn end(self) -> bool {
        // An unmasked wait leaves the gate's count as `unmasked` drops.
        let counted = self.interrupted || self.unmasked.as_ref().is_some_and(Unmasked::interrupted);
        match self.own {
            Some(own) => unblock_signals(&own) || counted,
            None => counted,
        }
    }
}

/// The signals of one write that waits for room in a ring: held (blocked)
/// from its first wait on, so that one that comes meanwhile is seen
/// (`came`) and ends the write, whose handler runs when the mask comes
/// back (`release`, before any kernel call that may block, and at the
/// write's end). Held, a signal cannot interrupt the futex sleep: the
/// writer sees it when the sleep times out (`resident`, 1 ms), and no
/// signal is lost between a look and a sleep.
pub struct RoomWait {
    /// The thread's own mask, while signals are held.
    old: Option<sys::SigSet>,
    /// Whether a signal that came has a handler without `SA_RESTART`.
    interrupting: bool,
}

impl RoomWait {
    /// A write begins: nothing held.
    pub const fn new() -> Self {
        Self {
            old: None,
            interrupting: false,
        }
    }

    /// A wait for room begins: holds every signal, if not yet.
    pub fn hold(&mut self) {
        if self.old.is_none() {
            self.old = Some(sys::keep_errno(sys::block_all_signals));
        }
    }

    /// Whether a signal came while held that a kernel `write` waiting for
    /// room would have woken for: one with a handler, or whose default is
    /// to stop or end the process (not one ignored, nor one the thread
    /// had blocked itself).
    pub fn came(&mut self) -> bool {
        let Some(old) = &self.old else {
            return false;
        };
        let (came, interrupting) = sys::keep_errno(|| {
            let mut pending = sys::SigSet([0; 16]);
            // SAFETY: writes one set.
            unsafe { sys::sigpending(&mut pending) };
            let fresh = pending.0[0] & !old.0[0];
            let mut came = false;
            let mut interrupting = false;
            for sig in (1..=64).filter(|sig| fresh & (1u64 << (sig - 1)) != 0) {
                let act = disposition(sig);
                came |= !ignored(sig, &act);
                interrupting |= interrupts(&act);
            }
            (came, interrupting)
        });
        self.interrupting = interrupting;
        came
    }

    /// Whether one of the signals [`RoomWait::came`] saw has a handler
    /// without `SA_RESTART`: a write that put nothing fails with `EINTR`
    /// (with `SA_RESTART` it begins again).
    pub fn interrupts(&self) -> bool {
        self.interrupting
    }

    /// Puts the thread's mask back: the handlers of the signals that came
    /// run now (and what they leave in `errno` stays, as after a kernel
    /// call they interrupt; `pthread_sigmask` itself leaves it alone).
    pub fn release(&mut self) {
        if let Some(old) = self.old.take() {
            sys::set_signal_mask(&old);
        }
    }
}

impl Drop for RoomWait {
    fn drop(&mut self) {
        self.release();
    }
}

/// A wait with signals left alone, counted in the gate as unmasked so
/// that an installer of a handler without `SA_RESTART` waits for it to
/// end or mask: a read's wait (`WaitMask`), or the spin for room of a
/// write that may not hold signals (a thread of a process with others).
/// A handler with `SA_RESTART` that runs in such a spin runs as in the
/// copy before it, and the write goes on, as a kernel write still copying
/// would (one that had to wait would have returned the count so far, or
/// gone on if it had written nothing); a counted one ends the wait
/// ([`Unmasked::interrupted`]).
pub struct Unmasked {
    /// `counted_handlers::handled_here` at the wait's start.
    seen: u32,
}

impl Unmasked {
    /// An unmasked wait begins, if the gate allows one: only while no
    /// handler without `SA_RESTART` is known but counted ones.
    pub fn begin() -> Option<Unmasked> {
        if !(restart_only() && GATE.begin_unmasked()) {
            return None;
        }
        // After the gate's count (a handler that runs between the two and
        // installs waits for this wait until it gives up: never too
        // little).
        UNBLOCKED_HERE.with(|n| n.set(n.get() + 1));
        Some(Unmasked {
            seen: counted_handlers::handled_here(),
        })
    }

    /// Whether the wait may go on unmasked: not once an installer of a
    /// handler without `SA_RESTART` waits for it.
    pub fn allowed(&self) -> bool {
        !GATE.must_mask()
    }

    /// Whether a handler without `SA_RESTART` that the library counts
    /// (`counted_handlers`) ran in this thread since the wait began.
    pub fn interrupted(&self) -> bool {
        counted_handlers::handled_here() != self.seen
    }
}

impl Drop for Unmasked {
    fn drop(&mut self) {
        UNBLOCKED_HERE.with(|n| n.set(n.get() - 1));
        GATE.end_unmasked();
    }
}

/// Whether `sig` would be thrown away if it came unblocked: `SIG_IGN`, or
/// `SIG_DFL` for the signals whose default is to be ignored (signal(7)).
fn ignored(sig: c_int, act: &sys::SigAction) -> bool {
    const SIGCHLD: c_int = 17;
    const SIGCONT: c_int = 18;
    const SIGURG: c_int = 23;
    const SIGWINCH: c_int = 28;
    match act.handler {
        1 => true,
        0 => matches!(sig, SIGCHLD | SIGCONT | SIGURG | SIGWINCH),
        _ => false,
    }
}

/// Whether this thread is inside a wait with signals unblocked: a signal
/// handler that runs there and writes to a pipe must not hand over (its
/// reader may be the very wait it interrupted, which cannot take).
pub fn in_unblocked_wait() -> bool {
    UNBLOCKED_HERE.with(Cell::get) != 0
}

/// Called before a handler without `SA_RESTART` is installed (async-
/// signal-safe, as `sigaction` is): returns once no wait of another
/// thread runs with signals unblocked.
pub fn before_interrupting_handler() {
    let beneath = UNBLOCKED_HERE.with(Cell::get);
    let until = now_ns().saturating_add(INSTALLER_WAIT_NS);
    GATE.before_interrupting_handler(beneath, || {
        // SAFETY: sched_yield(2) has no preconditions.
        unsafe { sys::sched_yield() };
        now_ns() > until
    });
}

/// In the child of `fork`: the other threads' waits are not there, nor
/// the threads.
pub fn after_fork() {
    GATE.after_fork(UNBLOCKED_HERE.with(Cell::get));
    THREADS.store(false, Ordering::Relaxed);
}

/// A thread is about to start: from now on a write does not hold its
/// signals ([`RoomWait`]), as the kernel would give a signal sent to the
/// process to another thread that does not block it.
pub fn thread_starts() {
    THREADS.store(true, Ordering::Relaxed);
}

/// Whether this process has started a thread since it began or forked.
pub fn threads_started() -> bool {
    THREADS.load(Ordering::Relaxed)
}

/// Whether no handler without `SA_RESTART` is known; the first call reads
/// every disposition (a `sigaction` query a signal, once per process),
/// for handlers installed where the library's wrappers were not called.
pub fn restart_only() -> bool {
    if GATE.must_mask() {
        return false;
    }
    if !SCANNED.load(Ordering::Relaxed) {
        // (The C library refuses its own signals with EINVAL.)
        // (A counted handler does not shut the gate: waits see it run.)
        let shuts = |act: &sys::SigAction| interrupts(act) && !counted_handlers::is_counted(act);
        if sys::keep_errno(|| (1..=64).any(|sig| shuts(&disposition(sig)))) {
            before_interrupting_handler();
        }
        SCANNED.store(true, Ordering::Relaxed);
    }
    !GATE.must_mask()
}

/// Whether a disposition is a handler without `SA_RESTART`.
pub fn interrupts(act: &sys::SigAction) -> bool {
    act.handler > 1 && act.flags & sys::SA_RESTART == 0
}

/// Puts the mask back (pending signals' handlers run now) and says
/// whether one of them lacks `SA_RESTART`: a kernel `read` that it
/// interrupted before any byte came would have failed with `EINTR`.
fn unblock_signals(old: &sys::SigSet) -> bool {
    let mut pending = sys::SigSet([0; 16]);
    // SAFETY: writes one set.
    unsafe { sys::sigpending(&mut pending) };
    let mut interrupted = false;
    for sig in 1..=64 {
        let bit = 1u64 << ((sig - 1) % 64);
        let w = (sig as usize - 1) / 64;
        if pending.0[w] & bit != 0 && old.0[w] & bit == 0 && interrupts(&disposition(sig)) {
            interrupted = true;
        }
    }
    sys::set_signal_mask(old);
    interrupted
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ptr::null_mut;

    const SIGUSR2: c_int = 12;

    extern "C" fn nothing(_: c_int) {}

    fn set(flags: c_int) {
        let act = sys::SigAction {
            handler: nothing as extern "C" fn(c_int) as usize,
            mask: sys::SigSet([0; 16]),
            flags,
            restorer: 0,
        };
        // SAFETY: installs a handler that does nothing; the real call, as
        // one no wrapper sees.
        assert_eq!(unsafe { sys::sigaction(SIGUSR2, &act, null_mut()) }, 0);
    }

    /// What the first wait's look at every disposition finds: a handler
    /// with `SA_RESTART` is no reason to block signals, one without is.
    #[test]
    fn a_handler_interrupts_reads_only_without_sa_restart() {
        set(sys::SA_RESTART);
        assert!(!interrupts(&disposition(SIGUSR2)));
        set(0);
        assert!(interrupts(&disposition(SIGUSR2)));
        assert!(!interrupts(&disposition(9)), "SIGKILL has no handler");
    }
}
