//! Handlers without `SA_RESTART`, installed through `sigaction`, run
//! behind a trampoline that counts them in the thread they run in, so a
//! wait in the library with signals left alone can tell that one ran
//! (and end as a kernel `read` such a signal interrupts does, with
//! `EINTR`) without blocking signals for every wait. Without this, one
//! such handler anywhere in a process (every Rust program's `SIGSEGV`
//! and `SIGBUS`, CPython's `SIGINT`) kept its reads out of the ring.
//!
//! The program sees its own handler: `sigaction`'s old disposition, and
//! the old handler `signal`, `sigset` and their kind return, name it, and the flags installed are the program's (so `wait_signals`
//! still finds a handler without `SA_RESTART` for a signal pending in a
//! held wait).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::sys;

/// Signals 1 to 64 (index 0 unused).
const SIGNALS: usize = 65;

/// The program's handler of each signal the trampoline stands for.
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];

/// Held by a thread that changes a disposition, over the table's swap and
/// the kernel's `sigaction` that go together: two threads installing at
/// once would otherwise leave the table naming one's handler and the
/// kernel holding the other's flags and mask.
static INSTALLING: AtomicBool = AtomicBool::new(false);

std::thread_local! {
    /// Counted handlers that ran in this thread: written by the
    /// trampoline, which interrupts this thread between two of its
    /// instructions (an atomic, so that a wait's loop reads it again).
    static HANDLED_HERE: AtomicU32 = const { AtomicU32::new(0) };
}

/// The handler the kernel calls for a counted signal. A program's handler
/// may unwind out of it (`pthread_exit`, a C++ `throw`): its frame holds
/// nothing to drop, and the handler is called as "C", so no landing pad
/// stops the unwind ("C-unwind" would get one that aborts, the embedded
/// library being built with `panic=abort`; counted_handlers.c step 7).
extern "C" fn trampoline(sig: c_int, info: *mut c_void, context: *mut c_void) {
    // Counted only while the disposition lacks SA_RESTART: the C library's
    // `siginterrupt(sig, 0)`, or a program given back the trampoline by a
    // raw `rt_sigaction` query, may have set it where no wrapper saw.
    // (errno as the handler found it; a failed query reads as SIG_DFL.)
    if sys::keep_errno(|| sys::disposition(sig)).flags & sys::SA_RESTART == 0 {
        HANDLED_HERE.with(|n| n.fetch_add(1, Ordering::Relaxed));
    }
    let Some(slot) = slot(sig) else {
        return;
    };
    let handler = slot.load(Ordering::Acquire);
    if handler > 1 {
        // SAFETY: `handler` is a handler the program installed for `sig`
        // (a one-argument handler ignores the other two, which the kernel
        // passes in registers on x86-64 and AArch64).
        let f: extern "C" fn(c_int, *mut c_void, *mut c_void) =
            unsafe { core::mem::transmute(handler) };
        f(sig, info, context);
    }
}

/// Runs `f` holding [`INSTALLING`], with every signal blocked: a handler
/// that installs cannot interrupt its own thread's hold and wait for it.
/// Other holders hold it for one system call; a fork's child, where no
/// thread holds it any more, frees it ([`after_fork`]).
fn installing<T>(f: impl FnOnce() -> T) -> T {
    let mask = sys::block_all_signals();
    while INSTALLING
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // SAFETY: no arguments; never fails.
        unsafe { sys::sched_yield() };
    }
    let r = f();
    INSTALLING.store(false, Ordering::Release);
    // (errno as `f` left it: neither call sets it.)
    sys::set_signal_mask(&mask);
    r
}

/// In a fork's child: no thread of the parent's holds [`INSTALLING`]
/// here.
pub fn after_fork() {
    INSTALLING.store(false, Ordering::Relaxed);
}

/// The table's entry for `sig`, if a signal number.
fn slot(sig: c_int) -> Option<&'static AtomicUsize> {
    HANDLERS.get(sig as usize).filter(|_| sig > 0)
}

/// Where `old` (null, or written by a successful call) is the trampoline,
/// names `handler`, the program's, instead.
///
/// # Safety
///
/// `old` is null or points to a `struct sigaction`.
unsafe fn name_program_handler(old: *mut sys::SigAction, handler: impl FnOnce() -> usize) {
    // SAFETY: the caller's contract.
    if let Some(old) = unsafe { old.as_mut() } {
        if is_counted(old) {
            old.handler = handler();
        }
    }
}

/// The trampoline's address, as a disposition's handler.
fn trampoline_address() -> usize {
    trampoline as extern "C" fn(c_int, *mut c_void, *mut c_void) as usize
}

/// Whether a disposition is the trampoline's.
pub fn is_counted(act: &sys::SigAction) -> bool {
    act.handler == trampoline_address()
}

/// How many counted handlers have run in this thread (compare two).
pub fn handled_here() -> u32 {
    HANDLED_HERE.with(|n| n.load(Ordering::Relaxed))
}

/// sigaction(2) for a handler without `SA_RESTART` (`act` is one): the
/// trampoline is installed in its place, with its flags and mask.
///
/// # Safety
///
/// As for sigaction(2); `act` is not null.
pub unsafe fn install(sig: c_int, act: *const sys::SigAction, old: *mut sys::SigAction) -> c_int {
    // SAFETY: not null (the caller's contract).
    let act = unsafe { &*act };
    let Some(slot) = slot(sig) else {
        // SAFETY: the caller's contract; the kernel refuses the number.
        return unsafe { sys::sigaction(sig, act, old) };
    };
    let ours = sys::SigAction {
        handler: trampoline_address(),
        mask: act.mask,
        flags: act.flags,
        restorer: act.restorer,
    };
    installing(|| {
        let before = slot.swap(act.handler, Ordering::AcqRel);
        // SAFETY: `ours` is a valid disposition; `old` is the caller's.
        let r = unsafe { sys::sigaction(sig, &ours, old) };
        if r != 0 {
            slot.store(before, Ordering::Release);
            return r;
        }
        // SAFETY: `old` is null or written by the call.
        unsafe { name_program_handler(old, || before) };
        r
    })
}

/// What `signal`, `sigset` and their kind return as the old handler
/// (`old`, or `SIG_ERR`): the program's where the trampoline stands for it.
pub fn program_handler(sig: c_int, old: isize) -> isize {
    match slot(sig) {
        Some(slot) if old as usize == trampoline_address() => slot.load(Ordering::Acquire) as isize,
        _ => old,
    }
}

/// sigaction(2) for anything else: the old disposition names the
/// program's handler where the trampoline stands for it.
///
/// # Safety
///
/// As for sigaction(2).
pub unsafe fn query(sig: c_int, act: *const sys::SigAction, old: *mut sys::SigAction) -> c_int {
    let call = || {
        // SAFETY: the caller's contract.
        let r = unsafe { sys::sigaction(sig, act, old) };
        if r == 0 {
            if let Some(slot) = slot(sig) {
                // SAFETY: `old` is null or written by the call.
                unsafe { name_program_handler(old, || slot.load(Ordering::Acquire)) };
            }
        }
        r
    };
    // A change is made holding the table, so that the old handler named
    // is the one it replaced; a query alone needs nothing.
    if act.is_null() {
        call()
    } else {
        installing(call)
    }
}
