//! The scheduler and the clock as a waiter sees them: the CPU this thread
//! runs on and the monotonic clock (both read through glibc's vDSO,
//! without a system call), `sched_yield`, and membarrier (the light fences
//! of the ring's publish); and the hook that runs in the child after a
//! `fork`. The waiting paths call these between looks at the ring.

use std::sync::atomic::{AtomicBool, Ordering};

/// `sched_getcpu()`, see [sched_getcpu(3)](https://man7.org/linux/man-pages/man3/sched_getcpu.3.html):
/// the CPU this thread runs on now (`u32::MAX` if unknown). glibc's
/// `sched_getcpu` goes through the vDSO (no system call); rustix's own
/// vDSO lookup crashes under valgrind, which counts our instructions.
pub(crate) fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(u32::MAX)
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds (the clock `Instant`
/// reads), see
/// [clock_gettime(2)](https://man7.org/linux/man-pages/man2/clock_gettime.2.html).
/// Through libc, not rustix: rustix's vDSO lookup crashes under valgrind,
/// which the bench's instruction counts and our users' memchecks run.
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes only the timespec we pass, valid for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// Has `child` run in the child process after every later `fork` of
/// this process, in the thread that forked (see
/// [pthread_atfork(3)](https://man7.org/linux/man-pages/man3/pthread_atfork.3.html)),
/// once per process however often it is called: `registered` is the
/// caller's own flag for that. A registration that failed is not tried
/// again.
pub(crate) fn on_fork_child_once(registered: &AtomicBool, child: extern "C" fn()) {
    if registered.load(Ordering::Relaxed) || registered.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: registers a plain function pointer, valid for the whole
    // program; `child` runs in the child's only thread, before anything
    // else.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// `membarrier(MEMBARRIER_CMD_QUERY)` and
/// `membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED)` (once), see
/// [membarrier(2)](https://man7.org/linux/man-pages/man2/membarrier.2.html): whether this process
/// publishes with light fences (a compiler fence
/// instead of a hardware one, see the ring's `use_light_fences`): it must
/// be registered for `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, so that a peer's
/// `membarrier` runs a full barrier on every CPU running us. Registered
/// once per process (fork keeps it, exec drops it and we register again);
/// `SHMPIPE_FULL_FENCES=1` in the environment keeps hardware fences.
pub(crate) fn light_fences() -> bool {
    use rustix::thread::MembarrierCommand as Cmd;
    use std::sync::atomic::{AtomicU8, Ordering};
    // Not a OnceLock: a fork while another thread held its lock would leave
    // the child waiting forever. Racing first callers just both register.
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
    match STATE.load(Ordering::Relaxed) {
        YES => return true,
        NO => return false,
        _ => {}
    }
    let on = std::env::var_os("SHMPIPE_FULL_FENCES").is_none_or(|v| v == "0") && {
        let q = rustix::thread::membarrier_query();
        q.contains_command(Cmd::GlobalExpedited)
            && q.contains_command(Cmd::RegisterGlobalExpedited)
            && rustix::thread::membarrier(Cmd::RegisterGlobalExpedited).is_ok()
    };
    STATE.store(if on { YES } else { NO }, Ordering::Relaxed);
    on
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, see
/// [membarrier(2)](https://man7.org/linux/man-pages/man2/membarrier.2.html): runs a full memory barrier
/// on every CPU that runs a thread of a process registered for it, the
/// fence a light-fenced peer left out of its publish. False if it failed.
pub(crate) fn global_barrier() -> bool {
    rustix::thread::membarrier(rustix::thread::MembarrierCommand::GlobalExpedited).is_ok()
}

/// `sched_yield()`, see [sched_yield(2)](https://man7.org/linux/man-pages/man2/sched_yield.2.html):
/// gives up the CPU to another runnable thread, if any.
pub(crate) fn yield_now() {
    rustix::thread::sched_yield();
}
