//! Ends held by several processes (see docs/shared-ends.md): this
//! process's list of its ends, whose gates (the ring's `turns::Gate`) every
//! `fork` closes; the lock the holders of an end take turns under (a
//! process-shared, robust mutex in the end's own control block); and the
//! turn an operation takes while its end may have other holders.
//!
//! It sits beside `wait`: the pipe types (`stream`, `message`) ask
//! `needs_turn` on their slow paths and run the operation in a turn
//! ([`End::in_turn`]) when it says so; the ring does the rest.

use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shmpipe_ring::turns::Gate;
use shmpipe_ring::{Consumer, Producer, ProtocolError};

use crate::wait::{End, Settings};
use crate::{error, sys};

/// What a turn needs of either ring end.
pub(crate) trait Shared {
    fn gate(&self) -> &Arc<Gate>;
    fn needs_turn(&self) -> bool;
    fn in_turn(&self) -> bool;
    fn begin_turn(&mut self) -> Result<(), ProtocolError>;
    fn end_turn(&mut self, me: u32) -> bool;
}

macro_rules! shared {
    ($ty:ty) => {
        impl Shared for $ty {
            fn gate(&self) -> &Arc<Gate> {
                <$ty>::gate(self)
            }
            #[inline]
            fn needs_turn(&self) -> bool {
                <$ty>::needs_turn(self)
            }
            fn in_turn(&self) -> bool {
                <$ty>::in_turn(self)
            }
            fn begin_turn(&mut self) -> Result<(), ProtocolError> {
                <$ty>::begin_turn(self)
            }
            fn end_turn(&mut self, me: u32) -> bool {
                <$ty>::end_turn(self, me)
            }
        }
    };
}
shared!(Producer);
shared!(Consumer);

/// This process's id, kept across calls (a `fork`'s child handler renews it).
static ME: AtomicU32 = AtomicU32::new(0);

/// This process's id.
pub(crate) fn me() -> u32 {
    match ME.load(Ordering::Relaxed) {
        0 => {
            let me = std::process::id();
            ME.store(me, Ordering::Relaxed);
            me
        }
        me => me,
    }
}

/// The gates of this process's ends. A spin lock, not a `Mutex`: the
/// `fork` handlers hold it across the fork (taken before, released in
/// both processes after), so that the child's list is whole.
struct List {
    locked: AtomicBool,
    /// Weak: a ring end dropped outside an `End` (a connection that
    /// failed half-way) must not keep its mappings here.
    gates: UnsafeCell<Vec<EndCopy>>,
    /// Words a `fork` zeroes (see [`revoke_on_fork`]).
    lent: UnsafeCell<Vec<&'static AtomicU32>>,
}

/// A copy of an end in this process: its gate, and which end it is (the
/// device and inode of the end's own region).
struct EndCopy {
    gate: Weak<Gate>,
    end: Option<(u64, u64)>,
}

// SAFETY: `gates` is touched only under `locked` (see `with_list`).
unsafe impl Sync for List {}

static LIST: List = List {
    locked: AtomicBool::new(false),
    gates: UnsafeCell::new(Vec::new()),
    lent: UnsafeCell::new(Vec::new()),
};

/// Whether the `fork` handlers are registered.
static HANDLERS: AtomicBool = AtomicBool::new(false);

fn lock_list() {
    // SYNC: Acquire pairs with the Release in `unlock_list`.
    while LIST
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn unlock_list() {
    // SYNC: Release: our changes to the list before the next holder's look.
    LIST.locked.store(false, Ordering::Release);
}

/// Runs `f` on the list, under its lock.
fn with_list<T>(f: impl FnOnce(&mut Vec<EndCopy>) -> T) -> T {
    lock_list();
    // SAFETY: under the lock; the handlers take it too.
    let t = f(unsafe { &mut *LIST.gates.get() });
    unlock_list();
    t
}

extern "C" fn before_fork() {
    lock_list();
    // SAFETY: under the lock, held until `after_fork_*` releases it.
    for copy in unsafe { &*LIST.gates.get() } {
        if let Some(gate) = copy.gate.upgrade() {
            gate.fork_prepare();
        }
    }
    // SAFETY: as above.
    for word in unsafe { &*LIST.lent.get() } {
        word.store(0, Ordering::Relaxed);
    }
}

extern "C" fn after_fork_parent() {
    unlock_list();
}

extern "C" fn after_fork_child() {
    // A new process: its own id (getpid is async-signal-safe).
    let me = std::process::id();
    ME.store(me, Ordering::Relaxed);
    // SAFETY: the lock is held (taken by `before_fork` in the parent's
    // only forking thread, which this one continues); no allocation (the
    // gates upgraded are those of live ends: dropping them frees nothing).
    for copy in unsafe { &*LIST.gates.get() } {
        if let Some(gate) = copy.gate.upgrade() {
            gate.fork_child(me);
        }
    }
    unlock_list();
}

/// Has every `fork` from now on store 0 into `word`: the switch of a
/// fast path lent outside the ends (the C header's inline calls keep
/// theirs in the handle, `shmpipe_fast::step`), which must stop at a
/// fork as the ends' own fast paths do (see the ring's `turns::Gate`).
/// Registering a word twice is harmless.
#[doc(hidden)]
pub fn revoke_on_fork(word: &'static AtomicU32) {
    install();
    with_list(|_| {
        // SAFETY: the list's lock is held inside `with_list`, and it
        // guards `lent` as it does `gates`.
        let lent = unsafe { &mut *LIST.lent.get() };
        if !lent.iter().any(|w| std::ptr::eq(*w, word)) {
            lent.push(word);
        }
    });
}

fn install() {
    if !HANDLERS.swap(true, Ordering::AcqRel) {
        // SAFETY: three `extern "C"` functions that live for the program;
        // the child's is async-signal-safe (no allocation, no lock a
        // thread of the parent could hold: the list's was taken before).
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            )
        };
    }
}

/// An end was built in this process from its own region `own`: it holds
/// a copy (a slot with our id), and its gate joins the list the `fork`
/// handlers close.
///
/// A slot may already have our id with no copy of the end in this
/// process: the image before an `exec` claimed it (a fork-based spawn's
/// child claims a slot on every end at the fork, then execs and attaches
/// the ends it was handed). That slot is this copy's, not a second one,
/// or the end could never find itself with one holder again.
pub(crate) fn adopt(gate: &Arc<Gate>, own: BorrowedFd<'_>) {
    install();
    let me = me();
    let end = sys::inode(own).ok();
    with_list(|copies| {
        copies.retain(|c| c.gate.strong_count() > 0);
        let another_here = end.is_some() && copies.iter().any(|c| c.end == end);
        if another_here || end.is_none() || !gate.holds(me) {
            gate.claim(me);
        }
        copies.push(EndCopy {
            gate: Arc::downgrade(gate),
            end,
        });
    });
}

/// An end handed to us by another process was built (after `adopt`): its
/// copy arrived, so it is no longer in flight; it starts shared, and its
/// first operation looks whether its sender still holds a copy.
pub(crate) fn arrived(gate: &Gate) {
    gate.arrived();
}

/// This copy of an end is going: its slot is freed and its gate leaves
/// the list.
pub(crate) fn leave(gate: &Arc<Gate>) {
    gate.release(me());
    with_list(|copies| {
        if let Some(i) = copies
            .iter()
            .position(|c| std::ptr::eq(c.gate.as_ptr(), Arc::as_ptr(gate)))
        {
            copies.swap_remove(i);
        }
    });
}

/// The end's descriptors are being handed to another process, which will
/// claim a copy: count it now, and take turns from here on.
pub(crate) fn hand_on(gate: &Gate) {
    gate.hand_on();
}

/// Whether process `pid` may still use a copy of the end whose own
/// region is `own`: whether it maps that region as a holder does (see
/// `sys::maps_writable`, which also sees an `exec`,
/// a zombie and a reused pid); where the kernel does not say, whether a
/// process `pid` exists (`kill(pid, 0)`: only `ESRCH` says it is gone).
/// Errs only towards "holds" (the end stays shared: slower, never wrong).
fn holds(pid: u32, own: BorrowedFd<'_>) -> bool {
    if let Some(holds) = sys::maps_writable(pid, own) {
        return holds;
    }
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 only checks; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// How often a turn asks the kernel whether the other holders live: one
/// turn of the end's copy in this many, from its first (and a holder that
/// drops its copy frees its slot at once). Counted by each copy, not by
/// the process: a server that takes turns on many ends in a fixed order
/// would otherwise look at only those whose place in the order meets
/// the count, and never free the others.
const LOOK_EVERY: u32 = 64;

/// Frees the slots of holders that are gone, now and then (see
/// `LOOK_EVERY`; `turns` is the copy's count); `own` is the end's own
/// region.
fn forget_gone(gate: &Gate, me: u32, own: BorrowedFd<'_>, turns: &mut u32) {
    let look = *turns % LOOK_EVERY == 0;
    *turns = turns.wrapping_add(1);
    if !look {
        return;
    }
    let gone: Vec<u32> = gate.others(me).filter(|&pid| !holds(pid, own)).collect();
    for pid in gone {
        gate.forget(pid);
    }
}

/// The end's lock, a `pthread_mutex_t` in its control block.
fn mutex(gate: &Gate) -> *mut libc::pthread_mutex_t {
    gate.lock_area().cast_mut().cast()
}

const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= 64);

/// Sets up the lock of a control block its creator just initialised:
/// process-shared (its holders are in other processes), robust (a holder
/// killed while it holds it does not leave it held for ever; the next
/// taker gets `EOWNERDEAD` and goes on from the last published index),
/// error-checking (a thread that takes it twice gets `EDEADLK`, not a
/// deadlock).
pub(crate) fn init_lock(gate_area: *const std::sync::atomic::AtomicU64) -> io::Result<()> {
    let m: *mut libc::pthread_mutex_t = gate_area.cast_mut().cast();
    // SAFETY: `m` is 64 bytes (at least a pthread_mutex_t, checked above)
    // of our own fresh, writable control block, suitably aligned (8); the
    // attribute object is ours and destroyed after use.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        check(libc::pthread_mutexattr_init(attr.as_mut_ptr()))?;
        let attr = attr.as_mut_ptr();
        let rc = (|| {
            check(libc::pthread_mutexattr_setpshared(
                attr,
                libc::PTHREAD_PROCESS_SHARED,
            ))?;
            check(libc::pthread_mutexattr_setrobust(
                attr,
                libc::PTHREAD_MUTEX_ROBUST,
            ))?;
            check(libc::pthread_mutexattr_settype(
                attr,
                libc::PTHREAD_MUTEX_ERRORCHECK,
            ))?;
            check(libc::pthread_mutex_init(m, attr))
        })();
        libc::pthread_mutexattr_destroy(attr);
        rc
    }
}

fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Takes the end's lock, as the end's settings say: at once or
/// `WouldBlock` when non-blocking, within the timeout or `TimedOut`.
fn lock(gate: &Gate, settings: &Settings) -> io::Result<()> {
    let m = mutex(gate);
    // SAFETY: the mutex lives in the end's control block, mapped while
    // `gate` lives, set up by `init_lock` when the block was made (a block
    // from another process may hold anything: the mutex functions then
    // fail or wait, but only touch those 64 bytes of shared memory).
    let rc = unsafe {
        if settings.nonblocking {
            libc::pthread_mutex_trylock(m)
        } else if let Some(at) = settings
            .timeout
            .and_then(|t| SystemTime::now().checked_add(t))
        {
            // (A timeout past what the clock can say waits for ever.)
            let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
            let ts = libc::timespec {
                tv_sec: since.as_secs() as libc::time_t,
                tv_nsec: since.subsec_nanos() as _,
            };
            libc::pthread_mutex_timedlock(m, &ts)
        } else {
            libc::pthread_mutex_lock(m)
        }
    };
    match rc {
        0 => Ok(()),
        // The holder died holding it, mid-operation: what it did not
        // publish is not there for anyone, and the published indices are
        // whole (one store each), so the end goes on from them.
        libc::EOWNERDEAD => {
            // SAFETY: we hold the mutex (EOWNERDEAD hands it over).
            check(unsafe { libc::pthread_mutex_consistent(m) })
        }
        libc::EBUSY => Err(io::ErrorKind::WouldBlock.into()),
        libc::ETIMEDOUT => Err(io::ErrorKind::TimedOut.into()),
        libc::EDEADLK => Err(io::Error::other(
            "this thread is in a turn of another copy of this end \
             (a grant or chunk it has not finished)",
        )),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

fn unlock(gate: &Gate) {
    // SAFETY: as in `lock`; we hold it (taken by this thread in `lock`).
    unsafe { libc::pthread_mutex_unlock(mutex(gate)) };
}

/// Releases the lock if the operation in the turn panics.
struct Unlock(Option<Arc<Gate>>);

impl Drop for Unlock {
    fn drop(&mut self) {
        if let Some(gate) = self.0.take() {
            unlock(&gate);
        }
    }
}

/// Runs `op` on `s` (a pipe end type) in a turn of its ring end (`end`
/// picks it out): the end type's operation, called again inside, then
/// finds itself in the turn and goes its usual way.
#[cold]
#[inline(never)]
pub(crate) fn run_in_turn<S, R: crate::wait::Ring, T>(
    s: &mut S,
    end: impl Fn(&mut S) -> &mut End<R>,
    op: impl FnOnce(&mut S) -> io::Result<T>,
) -> io::Result<T> {
    end(s).enter_turn()?;
    let mut guard = Unlock(Some(Shared::gate(&end(s).ring).clone()));
    let done = op(s);
    guard.0 = None; // done: `leave_turn` unlocks
    end(s).leave_turn();
    done
}

impl<R: crate::wait::Ring> End<R> {
    /// Runs `op` in a turn: under the end's lock, from the shared indices,
    /// everything it committed published at the end (see the module).
    #[cold]
    #[inline(never)]
    pub(crate) fn in_turn<T>(
        &mut self,
        op: impl FnOnce(&mut Self) -> io::Result<T>,
    ) -> io::Result<T> {
        self.enter_turn()?;
        let mut guard = Unlock(Some(Shared::gate(&self.ring).clone()));
        let done = op(self);
        guard.0 = None; // done: `leave_turn` unlocks
        self.leave_turn();
        done
    }

    /// Starts a turn (see `in_turn`); a turn started here must be left
    /// with `leave_turn` (a grant or a chunk left in it does so when it
    /// goes).
    #[cold]
    pub(crate) fn enter_turn(&mut self) -> io::Result<()> {
        lock(Shared::gate(&self.ring), &self.side.settings)?;
        if let Err(e) = Shared::begin_turn(&mut self.ring) {
            Shared::end_turn(&mut self.ring, 0);
            unlock(Shared::gate(&self.ring));
            return Err(error::protocol(e));
        }
        Ok(())
    }

    /// Leaves the turn a grant or chunk entered (see `enter_turn`), if any.
    pub(crate) fn leave_turn_if_in(&mut self) {
        if Shared::in_turn(&self.ring) {
            self.leave_turn();
        }
    }

    /// Publishes what the turn committed (waking the peer as a publish
    /// does), ends the turn (the fast path opens again if this is the only
    /// copy left) and releases the lock.
    #[cold]
    pub(crate) fn leave_turn(&mut self) {
        let _ = self.publish();
        let me = me();
        forget_gone(
            Shared::gate(&self.ring),
            me,
            self.side.own_region.as_fd(),
            &mut self.side.turns,
        );
        Shared::end_turn(&mut self.ring, me);
        unlock(Shared::gate(&self.ring));
    }
}
