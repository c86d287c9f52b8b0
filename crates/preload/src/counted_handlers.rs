//! Handlers without `SA_RESTART`, installed through `sigaction`, run
//! behind a trampoline that counts them in the thread they run in, so a
//! wait in the library with signals left alone can tell that one ran
//! (and end as a kernel `read` such a signal interrupts does, with
//! `EINTR`) without blocking signals for every wait. Without this, one
//! such handler anywhere in a process (every Rust program's `SIGSEGV`
//! and `SIGBUS`, CPython's `SIGINT`) kept its reads out of the ring.
//!
//! The program sees its own handler: `sigaction`'s old disposition, and
//! the old handler `signal`, `sigset` and their kind return, name it;
//! and the flags installed are the program's (so `wait_signals` still
//! finds a handler without `SA_RESTART` for a signal pending in a held
//! wait).

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU8, AtomicUsize, Ordering};

use crate::sys;

/// Signals 1 to 64 (index 0 unused).
const SIGNALS: usize = 65;

/// The program's handler of each signal a trampoline stands for, one
/// entry for each of the two. A change installs the other trampoline
/// than the last one installed, after writing its entry: a signal
/// delivered meanwhile still gets the old handler with the old flags and
/// mask, one after the change the new handler with the new ones. (A
/// delivery whose trampoline is slower to load its entry than two changes
/// are to be made may run a handler installed after it.)
static HANDLERS: [[AtomicUsize; 2]; SIGNALS] =
    [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; SIGNALS];

/// The trampoline last installed for each signal (written holding
/// [`INSTALLING`]): the kernel may have moved off it where no wrapper saw
/// (`SA_RESETHAND`; glibc's `system`, which sets `SIG_IGN` and puts the
/// old disposition back through its own `sigaction`), and may come back.
static LAST: [AtomicU8; SIGNALS] = [const { AtomicU8::new(0) }; SIGNALS];

/// The thread (its kernel id; 0: none) that changes a disposition, over
/// the table's entry and the kernel's `sigaction` that go together: two
/// threads installing at once would otherwise leave the table naming one's
/// handler and the kernel holding the other's flags and mask.
static INSTALLING: AtomicI32 = AtomicI32::new(0);

std::thread_local! {
    /// Whether this thread holds [`INSTALLING`].
    static HOLDING: Cell<bool> = const { Cell::new(false) };
    /// Counted handlers that ran in this thread: written by the
    /// trampoline, which interrupts this thread between two of its
    /// instructions (an atomic, so that a wait's loop reads it again).
    static HANDLED_HERE: AtomicU32 = const { AtomicU32::new(0) };
}

/// The handlers the kernel calls for a counted signal (`WHICH`: the
/// table's entry, 0 or 1). A program's handler may unwind out of one
/// (`pthread_exit`, a C++ `throw`): its frame holds nothing to drop, and
/// the handler is called as "C", so no landing pad stops the unwind
/// ("C-unwind" would get one that aborts, the embedded library being
/// built with `panic=abort`; counted_handlers.c step 7).
extern "C" fn trampoline<const WHICH: usize>(sig: c_int, info: *mut c_void, context: *mut c_void) {
    // First, while the kernel's choice of this trampoline is newest: the
    // entry it stands for.
    let handler = slots(sig).map_or(0, |slots| slots[WHICH].load(Ordering::Acquire));
    // Counted only while the disposition lacks SA_RESTART: the C library's
    // `siginterrupt(sig, 0)`, or a program given back the trampoline by a
    // raw `rt_sigaction` query, may have set it where no wrapper saw.
    // (errno as the handler found it; a failed query reads as SIG_DFL.)
    if sys::keep_errno(|| sys::disposition(sig)).flags & sys::SA_RESTART == 0 {
        HANDLED_HERE.with(|n| n.fetch_add(1, Ordering::Relaxed));
    }
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
/// that installs cannot interrupt its own thread's hold. The same thread
/// inside `f` (a `sigaction` preloaded after this one calling back) goes
/// on; a holder that is gone (killed, cancelled, exited as the main
/// thread, or a thread of the parent of a fork's child) is taken over;
/// others wait for one system call, yielding, then sleeping (a waiter
/// that outranks the holder).
pub fn installing<T>(f: impl FnOnce() -> T) -> T {
    let mask = sys::block_all_signals();
    let me = this_thread();
    // Re-entered only by the thread that took it: the word alone may name
    // this thread's id where a thread now gone had it first (ids are
    // reused; a child of a raw clone or an unseen fork starts with its
    // parent's words).
    // (The word too: a `vfork` child killed inside `f` leaves its
    // parent's thread, whose thread-locals it ran on, with the flag set.)
    let mine = !(HOLDING.with(Cell::get) && INSTALLING.load(Ordering::Relaxed) == me);
    if mine {
        take(me);
        HOLDING.with(|h| h.set(true));
    }
    let r = f();
    if mine {
        HOLDING.with(|h| h.set(false));
        // Only if still ours: a holder judged gone wrongly (a `vfork`
        // child's view of its parent's threads) does not free the word of
        // the thread that took it over.
        let _ = INSTALLING.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
    }
    // (errno as `f` left it: none of these calls sets it.)
    sys::set_signal_mask(&mask);
    r
}

/// Takes [`INSTALLING`] for thread `me`, which does not hold it.
fn take(me: i32) {
    let mut looks = 0u32;
    loop {
        match INSTALLING.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return,
            // This thread's id, but not its hold: left by a thread gone.
            Err(holder) if holder == me || (looks % 16 == 15 && !thread_lives(holder)) => {
                if INSTALLING
                    .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
            Err(_) => {}
        }
        looks = looks.wrapping_add(1);
        if looks < 64 {
            // SAFETY: no arguments; never fails.
            unsafe { sys::sched_yield() };
        } else {
            pause_50us();
        }
    }
}

/// The calling thread's kernel id.
fn this_thread() -> i32 {
    // SAFETY: gettid(2) takes nothing and cannot fail.
    unsafe { sys::raw_keeping_errno(sys::nr::GETTID, [0; 6]) as i32 }
}

/// The calling process's id, from the kernel: glibc before 2.25 caches
/// its `getpid`, which a child of a raw clone then answers with its
/// parent's.
fn this_process() -> i32 {
    // SAFETY: getpid(2) takes nothing and cannot fail.
    unsafe { sys::raw_keeping_errno(sys::nr::GETPID, [0; 6]) as i32 }
}

/// Whether thread `tid` is one of this process's and has not exited.
fn thread_lives(tid: i32) -> bool {
    let pid = this_process();
    // SAFETY: signal 0 only asks; errno is left alone.
    let r = unsafe {
        sys::raw_keeping_errno(sys::nr::TGKILL, [pid as usize, tid as usize, 0, 0, 0, 0])
    };
    // An exited main thread stays, a zombie that signal 0 still reaches,
    // until the process ends (other threads go at once).
    r != -(sys::ESRCH as isize) && !(tid == pid && main_thread_exited(pid))
}

/// Whether `/proc/self/stat` says this process's main thread has exited
/// (false where it cannot be read, or is another pid namespace's view).
fn main_thread_exited(pid: i32) -> bool {
    let mut stat = [0u8; 512];
    let n = read_proc(c"/proc/self/stat", &mut stat);
    stat_says_exited(&stat[..n], pid)
}

/// Reads up to `to.len()` bytes of `path` by system calls (a program's
/// own `open` must not run inside a hold); how many, 0 on a failure.
fn read_proc(path: &core::ffi::CStr, to: &mut [u8]) -> usize {
    const AT_FDCWD: isize = -100;
    let flags = (sys::O_RDONLY | sys::O_CLOEXEC) as usize;
    // SAFETY: a NUL-terminated path; errno is left alone.
    let fd = unsafe {
        sys::raw_keeping_errno(
            sys::nr::OPENAT,
            [AT_FDCWD as usize, path.as_ptr() as usize, flags, 0, 0, 0],
        )
    };
    if fd < 0 {
        return 0;
    }
    // SAFETY: `to` is writable for its length; `fd` was just opened.
    let n = unsafe {
        sys::raw_keeping_errno(
            sys::nr::READ,
            [fd as usize, to.as_mut_ptr() as usize, to.len(), 0, 0, 0],
        )
    };
    // SAFETY: the descriptor just opened.
    unsafe { sys::raw_keeping_errno(sys::nr::CLOSE, [fd as usize, 0, 0, 0, 0, 0]) };
    n.max(0) as usize
}

/// Whether a `stat` line ("pid (name) S ...") is process `pid`'s and says
/// `Z` or `X`. The name may hold ") ", so the state follows the last one.
fn stat_says_exited(stat: &[u8], pid: i32) -> bool {
    let Some(at) = stat.windows(2).rposition(|w| w == b") ") else {
        return false;
    };
    let first = stat.iter().position(|&b| b == b' ').unwrap_or(0);
    let ours = core::str::from_utf8(&stat[..first])
        .ok()
        .and_then(|f| f.parse().ok())
        == Some(pid);
    ours && matches!(stat.get(at + 2), Some(b'Z' | b'X'))
}

/// Sleeps about 50 us (ppoll(2) of no descriptors; errno left alone).
fn pause_50us() {
    // The kernel writes the time left back.
    let mut ts = sys::TimeSpec {
        sec: 0,
        nsec: 50_000,
    };
    // SAFETY: no descriptors, a valid, writable timeout, no mask.
    unsafe { sys::raw_keeping_errno(sys::nr::PPOLL, [0, 0, &raw mut ts as usize, 0, 8, 0]) };
}

/// In a fork's child: no thread of the parent's holds [`INSTALLING`]
/// here.
pub fn after_fork() {
    INSTALLING.store(0, Ordering::Relaxed);
    HOLDING.with(|h| h.set(false));
}

/// The table's entries for `sig`, if a signal number.
fn slots(sig: c_int) -> Option<&'static [AtomicUsize; 2]> {
    HANDLERS.get(sig as usize).filter(|_| sig > 0)
}

/// The trampolines' addresses, as a disposition's handler (two: their
/// code differs in the entry it loads, so no linker folds them into one).
fn trampolines() -> [usize; 2] {
    type Handler = extern "C" fn(c_int, *mut c_void, *mut c_void);
    let both = [
        trampoline::<0> as Handler as usize,
        trampoline::<1> as Handler as usize,
    ];
    debug_assert_ne!(both[0], both[1]);
    both
}

/// Which trampoline `handler` is, if one.
fn which_trampoline(handler: usize) -> Option<usize> {
    trampolines().iter().position(|&t| t == handler)
}

/// The program's handler of `sig` where `handler`, the kernel's, is a
/// trampoline; else `handler`.
fn program_handler_of(sig: c_int, handler: usize) -> usize {
    match (slots(sig), which_trampoline(handler)) {
        (Some(slots), Some(which)) => slots[which].load(Ordering::Acquire),
        _ => handler,
    }
}

/// Where `old` (null, or written by a successful call) is a trampoline,
/// names the program's handler instead.
///
/// # Safety
///
/// `old` is null or points to a `struct sigaction`.
unsafe fn name_program_handler(sig: c_int, old: *mut sys::SigAction) {
    // SAFETY: the caller's contract.
    if let Some(old) = unsafe { old.as_mut() } {
        old.handler = program_handler_of(sig, old.handler);
    }
}

/// Whether a disposition is a trampoline's.
pub fn is_counted(act: &sys::SigAction) -> bool {
    which_trampoline(act.handler).is_some()
}

/// How many counted handlers have run in this thread (compare two).
pub fn handled_here() -> u32 {
    HANDLED_HERE.with(|n| n.load(Ordering::Relaxed))
}

/// sigaction(2) for a handler without `SA_RESTART` (`act` is one): a
/// trampoline is installed in its place, with its flags and mask.
///
/// # Safety
///
/// As for sigaction(2); `act` is not null.
pub unsafe fn install(sig: c_int, act: *const sys::SigAction, old: *mut sys::SigAction) -> c_int {
    // SAFETY: not null (the caller's contract).
    let act = unsafe { &*act };
    let Some(slots) = slots(sig) else {
        // SAFETY: the caller's contract; the kernel refuses the number.
        return unsafe { sys::sigaction(sig, act, old) };
    };
    installing(|| {
        // Not the entry of the kernel's trampoline, nor of the last one
        // installed (which the kernel may take back).
        let last = &LAST[sig as usize];
        let now = which_trampoline(sys::disposition(sig).handler);
        let which = 1 - now.unwrap_or(usize::from(last.load(Ordering::Relaxed)));
        slots[which].store(act.handler, Ordering::Release);
        let ours = sys::SigAction {
            handler: trampolines()[which],
            mask: act.mask,
            flags: act.flags,
            restorer: act.restorer,
        };
        // SAFETY: `ours` is a valid disposition; `old` is the caller's.
        let r = unsafe { sys::sigaction(sig, &ours, old) };
        if r == 0 {
            last.store(which as u8, Ordering::Relaxed);
            // SAFETY: `old` is null or written by the call.
            unsafe { name_program_handler(sig, old) };
        }
        r
    })
}

/// What `signal`, `sigset` and their kind return as the old handler
/// (`old`, or `SIG_ERR`): the program's where a trampoline stands for it.
pub fn program_handler(sig: c_int, old: isize) -> isize {
    program_handler_of(sig, old as usize) as isize
}

/// sigaction(2) for anything else: the old disposition names the
/// program's handler where a trampoline stands for it.
///
/// # Safety
///
/// As for sigaction(2).
pub unsafe fn query(sig: c_int, act: *const sys::SigAction, old: *mut sys::SigAction) -> c_int {
    let call = || {
        // SAFETY: the caller's contract.
        let r = unsafe { sys::sigaction(sig, act, old) };
        if r == 0 {
            // SAFETY: `old` is null or written by the call.
            unsafe { name_program_handler(sig, old) };
        }
        r
    };
    // Holding the table, so that the old handler named is the one the
    // kernel's trampoline stood for (two changes made between the call
    // and the entry's load would name another).
    installing(call)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `installing` in a thread of its own, with an answer within `secs`
    /// (a hang fails the test instead of the suite).
    fn returns_in_time(secs: u64, f: impl FnOnce() -> u32 + Send + 'static) -> Option<u32> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(secs)).ok()
    }

    // One test: both use the one flag.
    #[test]
    fn a_hold_is_reentered_by_its_thread_and_taken_over_from_one_gone() {
        assert_eq!(
            returns_in_time(10, || installing(|| installing(|| 7))),
            Some(7)
        );
        assert_eq!(INSTALLING.load(Ordering::Relaxed), 0);
        let gone = std::thread::spawn(this_thread).join().unwrap();
        INSTALLING.store(gone, Ordering::Relaxed);
        assert_eq!(returns_in_time(10, || installing(|| 8)), Some(8));
        assert_eq!(INSTALLING.load(Ordering::Relaxed), 0);
        // The word names the caller, but a thread gone left it there: the
        // caller takes it and frees it after.
        let reused = returns_in_time(10, || {
            INSTALLING.store(this_thread(), Ordering::Relaxed);
            installing(|| 9)
        });
        assert_eq!(reused, Some(9));
        assert_eq!(INSTALLING.load(Ordering::Relaxed), 0);
        // A holder that took it over keeps it when the one judged gone
        // comes back and lets go.
        let other = 12345;
        let after = returns_in_time(10, move || {
            installing(|| INSTALLING.store(other, Ordering::Relaxed));
            INSTALLING.swap(0, Ordering::Relaxed) as u32
        });
        assert_eq!(after, Some(other as u32));
    }

    #[test]
    fn a_running_thread_lives_and_a_joined_one_goes() {
        assert!(thread_lives(this_thread()));
        assert!(thread_lives(this_process()));
        assert!(!main_thread_exited(this_process()));
        // A joined thread may stay in the kernel's table a little while.
        let gone = std::thread::spawn(this_thread).join().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while thread_lives(gone) {
            assert!(
                std::time::Instant::now() < deadline,
                "a joined thread lived 10 s"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn an_exited_main_thread_is_seen_in_its_stat() {
        // A child not yet waited for: its main thread has exited.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let stat_path = format!("/proc/{pid}/stat");
        let mut seen = false;
        for _ in 0..2000 {
            let stat = std::fs::read(&stat_path).unwrap_or_default();
            if stat_says_exited(&stat, pid) {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(seen, "a zombie's main thread looked alive for 10 s");
        assert!(!stat_says_exited(b"12 (a) b) Z) S 1", 12));
        assert!(stat_says_exited(b"12 (a) b) S) Z 1", 12));
        assert!(!stat_says_exited(b"13 (x) Z 1", 12));
        assert!(!stat_says_exited(b"", 12));
    }
}
