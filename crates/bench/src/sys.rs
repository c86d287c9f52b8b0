//! The one module of the bench with `unsafe`: fork, shared anonymous memory,
//! signals and the watchdog timer.
//!
//! Everything else in the crate goes through the safe functions here or
//! through rustix. libc is used only where rustix has no wrapper (`fork`,
//! `_exit`, `sigprocmask`, `sigwaitinfo`, `sigaction`, `setitimer`).

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::mm::{MapFlags, ProtFlags};
use rustix::process::{Pid, Signal, WaitOptions};
use rustix::thread::CpuSet;

/// A region of `MAP_SHARED | MAP_ANONYMOUS` memory, zeroed, that a `fork`ed
/// child shares with its parent. Handed out only as atomics, so either side
/// may write any word at any time without undefined behaviour.
#[derive(Debug)]
pub struct SharedMem {
    ptr: NonNull<u8>,
    len: usize,
}

impl SharedMem {
    /// Maps `len` bytes (rounded up to a page) of shared, zeroed memory.
    pub fn new(len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // aliases no Rust object.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
            )?
        };
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self { ptr, len })
    }

    fn word<T>(&self, offset: usize) -> *const T {
        let size = std::mem::size_of::<T>();
        assert!(
            offset.is_multiple_of(size) && offset + size <= self.len,
            "offset {offset} out of the region"
        );
        // The pointer stays inside the mapping (checked above).
        self.ptr.as_ptr().wrapping_add(offset).cast::<T>()
    }

    /// The `AtomicU64` at byte `offset` (a multiple of 8, inside the region).
    pub fn u64_at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the word is aligned, inside a live mapping that lives as
        // long as `self`, was zeroed by the kernel, and is only ever accessed
        // atomically (by this process and by its forked peers).
        unsafe { &*self.word::<AtomicU64>(offset) }
    }

    /// The `AtomicU32` at byte `offset` (a multiple of 4, inside the region).
    pub fn u32_at(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as for `u64_at`.
        unsafe { &*self.word::<AtomicU32>(offset) }
    }

    /// The `AtomicI32` at byte `offset` (a multiple of 4, inside the region).
    pub fn i32_at(&self, offset: usize) -> &AtomicI32 {
        // SAFETY: as for `u64_at`.
        unsafe { &*self.word::<AtomicI32>(offset) }
    }

    /// Makes the page at byte `offset` (a multiple of 4096) read-only in
    /// this process's mapping alone (after a `fork` each process has its
    /// own); its words may still be loaded, never stored.
    ///
    /// # Examples
    ///
    /// ```
    /// let mem = shmpipe_bench::sys::SharedMem::new(8192)?;
    /// mem.make_read_only(4096)?;
    /// assert_eq!(mem.u64_at(4096).load(std::sync::atomic::Ordering::Relaxed), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn make_read_only(&self, offset: usize) -> io::Result<()> {
        assert!(offset.is_multiple_of(4096) && offset + 4096 <= self.len);
        // SAFETY: one page inside our own mapping; taking write permission
        // away changes no byte, and stores only ever go through atomics of
        // words the caller knows to be writable.
        unsafe {
            rustix::mm::mprotect(
                self.ptr.as_ptr().wrapping_add(offset).cast(),
                4096,
                rustix::mm::MprotectFlags::READ,
            )?
        };
        Ok(())
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: at least a page is mapped).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from our own mmap, and every reference
        // handed out borrows `self`, so none outlives the mapping.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Counts this process's threads from `/proc/self/status`.
fn thread_count() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Threads: line in /proc/self/status"))
}

/// A forked child process. Dropping it before [`Child::wait`] succeeded
/// kills the child with SIGKILL; it is reaped in every case.
#[derive(Debug)]
pub struct Child {
    pid: Pid,
    reaped: bool,
}

/// Forks; the child runs `body` and exits with `_exit` (0 on `Ok`, 1 on an
/// error, which it prints, and 101 on a panic), never returning here.
///
/// Refuses to fork when this process has more than one thread, because a
/// child of a multi-threaded process may only call async-signal-safe
/// functions, and `body` allocates.
pub fn spawn(body: impl FnOnce() -> io::Result<()>) -> io::Result<Child> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "refusing to fork with {threads} threads"
        )));
    }
    // SAFETY: the process is single-threaded (checked above), so the child
    // gets a consistent copy of the whole heap and may run ordinary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // Child: die with the parent, whatever happens to it.
        let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                eprintln!("shmpipe bench: child process {}: {e}", std::process::id());
                1
            }
            Err(_) => 101,
        };
        exit_now(code);
    }
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("fork gave pid 0"))?;
    Ok(Child { pid, reaped: false })
}

/// [`spawn`], after closing in the child `ours`, the parent's halves of
/// the links it shares with the child (the fork idiom: a copy left open in
/// the child would make the parent's ends take turns with it, see
/// docs/shared-ends.md). Returns the child and `ours`, for the parent.
///
/// # Examples
///
/// ```
/// let (r, w) = shmpipe::pipe()?;
/// let (mut child, mut r) = shmpipe_bench::sys::spawn_apart(r, move || {
///     use std::io::Write;
///     let mut w = w;
///     w.write_all(b"x")
/// })?;
/// let mut b = [0u8; 1];
/// std::io::Read::read_exact(&mut r, &mut b)?;
/// child.wait(std::time::Instant::now() + std::time::Duration::from_secs(10))?;
/// assert_eq!(&b, b"x");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn_apart<T>(ours: T, body: impl FnOnce() -> io::Result<()>) -> io::Result<(Child, T)> {
    let mut ours = Some(ours);
    let child = spawn(|| {
        drop(ours.take());
        body()
    })?;
    Ok((child, ours.expect("the parent's halves")))
}

/// Ends this process at once, without running destructors or flushing
/// stdio buffers (which belong to the parent).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` is always safe to call; it does not return.
    unsafe { libc::_exit(code) }
}

impl Child {
    /// The child's process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits for the child to exit until `deadline`; kills it then. Returns
    /// an error unless it exited with status 0.
    pub fn wait(&mut self, deadline: Instant) -> io::Result<()> {
        loop {
            match rustix::process::waitpid(Some(self.pid), WaitOptions::NOHANG) {
                Ok(Some((_, status))) => {
                    self.reaped = true;
                    return match status.exit_status() {
                        Some(0) => Ok(()),
                        Some(code) => {
                            Err(io::Error::other(format!("child exited with status {code}")))
                        }
                        None => Err(io::Error::other(format!(
                            "child killed by signal {:?}",
                            status.terminating_signal()
                        ))),
                    };
                }
                Ok(None) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "child did not exit in time",
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn kill(&mut self) {
        if self.reaped {
            return;
        }
        let _ = rustix::process::kill_process(self.pid, Signal::KILL);
        while let Err(rustix::io::Errno::INTR) =
            rustix::process::waitpid(Some(self.pid), WaitOptions::empty())
        {}
        self.reaped = true;
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Pins the calling process to the `i`-th CPU of those it started with
/// (counted from 0, wrapping around), or gives it back all of them. So a
/// bench started under `taskset -c 2,3` runs "CPU 0" on CPU 2.
pub fn pin(i: Option<usize>) -> io::Result<()> {
    let set = match i {
        Some(i) => {
            let mut set = CpuSet::new();
            set.set(nth_cpu(started_on(), i));
            set
        }
        None => *started_on(),
    };
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

/// The `i`-th CPU in `set`, wrapping around (CPU 0 if `set` is empty).
/// Allocates nothing: forked children pin themselves with it.
fn nth_cpu(set: &CpuSet, i: usize) -> usize {
    let n = set.count() as usize;
    if n == 0 {
        return 0;
    }
    (0..CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .nth(i % n)
        .unwrap_or(0)
}

/// The CPUs this process may run on, as it found them before its first
/// `pin`: what `pin(None)` gives back and `online_cpus` counts. Asked
/// again after a pin, the kernel would say one CPU, and every later
/// "unpinned" run would share it.
fn started_on() -> &'static CpuSet {
    static SET: std::sync::OnceLock<CpuSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        rustix::thread::sched_getaffinity(None).unwrap_or_else(|_| {
            let mut all = CpuSet::new();
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n.min(CpuSet::MAX_CPU)).for_each(|c| all.set(c));
            all
        })
    })
}

/// Number of CPUs this process may run on (those it started with, see
/// `pin`).
///
/// # Examples
///
/// ```
/// use shmpipe_bench::sys::{online_cpus, pin};
/// let n = online_cpus();
/// pin(Some(0))?;
/// assert_eq!(online_cpus(), n); // a pin does not change the count
/// pin(None)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn online_cpus() -> usize {
    (started_on().count() as usize).max(1)
}

fn usr1_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset only write the local set they are given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

/// Blocks SIGUSR1 in this process (and so in every child forked later), so
/// that the `signal` contestant can take it with `sigwaitinfo`.
pub fn block_usr1() -> io::Result<()> {
    let set = usr1_set();
    // SAFETY: a valid set pointer and a null old-set pointer.
    let r = unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for a SIGUSR1 (which must be blocked). Fails with `Interrupted`
/// when another signal (the watchdog) arrives first.
pub fn wait_usr1() -> io::Result<()> {
    let set = usr1_set();
    // SAFETY: a valid set and a null info pointer (allowed by sigwaitinfo).
    let r = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes any pending SIGUSR1 without waiting.
pub fn drain_usr1() {
    let set = usr1_set();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid set and timeout pointers, null info pointer.
    while unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } > 0 {}
}

/// Sends SIGUSR1 to `pid`.
pub fn send_usr1(pid: Pid) -> io::Result<()> {
    Ok(rustix::process::kill_process(pid, Signal::USR1)?)
}

static WATCHDOG_FIRED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_alarm(_: libc::c_int) {
    WATCHDOG_FIRED.store(true, Ordering::Relaxed);
}

/// Installs the watchdog's SIGALRM handler, without `SA_RESTART`, so that
/// the alarm interrupts any blocking system call with `EINTR`.
pub fn install_watchdog() -> io::Result<()> {
    // SAFETY: the handler only stores to an atomic (async-signal-safe); the
    // sigaction struct is fully initialised.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut())
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_timer(first: Duration, every: Duration) -> io::Result<()> {
    let tv = |d: Duration| libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros() as libc::suseconds_t,
    };
    let t = libc::itimerval {
        it_interval: tv(every),
        it_value: tv(first),
    };
    // SAFETY: a valid itimerval pointer and a null old-value pointer.
    let r = unsafe { libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Arms the watchdog: after `after`, and every 100 ms from then on, SIGALRM
/// interrupts this process and [`watchdog_fired`] turns true. Timers are
/// not inherited by forked children.
pub fn arm_watchdog(after: Duration) -> io::Result<()> {
    WATCHDOG_FIRED.store(false, Ordering::Relaxed);
    set_timer(
        after.max(Duration::from_millis(1)),
        Duration::from_millis(100),
    )
}

/// Disarms the watchdog.
pub fn disarm_watchdog() -> io::Result<()> {
    set_timer(Duration::ZERO, Duration::ZERO)?;
    WATCHDOG_FIRED.store(false, Ordering::Relaxed);
    Ok(())
}

/// Whether the watchdog has fired since it was last armed.
#[inline]
pub fn watchdog_fired() -> bool {
    WATCHDOG_FIRED.load(Ordering::Relaxed)
}

/// The hypervisor's signature from CPUID leaf 0x4000_0000 ("KVMKVMKVM",
/// "Microsoft Hv", ...), when the CPU says it runs under one.
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // `__cpuid` is safe from Rust 1.87 on, unsafe before
pub fn hypervisor_signature() -> Option<String> {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 1 is always valid.
    let leaf1 = unsafe { __cpuid(1) };
    if leaf1.ecx & (1 << 31) == 0 {
        return None;
    }
    // SAFETY: with the hypervisor bit set, leaves 0x4000_0000.. are the
    // hypervisor's and reading them has no side effects.
    let r = unsafe { __cpuid(0x4000_0000) };
    let bytes: Vec<u8> = [r.ebx, r.ecx, r.edx]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let s = String::from_utf8_lossy(&bytes)
        .trim_matches(char::from(0))
        .trim()
        .to_owned();
    Some(match s.as_str() {
        "KVMKVMKVM" => "KVM".to_owned(),
        "Microsoft Hv" => "Hyper-V".to_owned(),
        "VMwareVMware" => "VMware".to_owned(),
        "XenVMMXenVMM" => "Xen".to_owned(),
        "TCGTCGTCGTCG" => "QEMU TCG".to_owned(),
        _ => s,
    })
}

/// Elsewhere the hypervisor is not detected this way.
#[cfg(not(target_arch = "x86_64"))]
pub fn hypervisor_signature() -> Option<String> {
    None
}

/// The time-stamp counter (`rdtsc`): ticks at a constant rate on the CPUs
/// the bench runs on (`constant_tsc`), the same on every CPU of a guest,
/// and costs tens of cycles where a clock read costs a hundred: fine
/// enough to split a 100 ns round trip into stages (see
/// [`crate::stages`]). 0 on other architectures.
///
/// # Examples
///
/// ```
/// let t = shmpipe_bench::sys::tsc();
/// assert!(shmpipe_bench::sys::tsc() >= t || cfg!(not(target_arch = "x86_64")));
/// ```
#[inline(always)]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtsc` reads a counter; it touches no memory and is
    // available on every x86-64 CPU.
    return unsafe { std::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unpinned run after a pinned one gets every CPU back: asked
    /// after a pin, the kernel says one CPU, and "unpinned" rows ran on
    /// CPU 0 alone.
    #[test]
    fn unpinning_gives_back_every_cpu_the_process_started_with() {
        let all = online_cpus();
        pin(Some(0)).unwrap();
        assert_eq!(rustix::thread::sched_getaffinity(None).unwrap().count(), 1);
        assert_eq!(online_cpus(), all);
        pin(None).unwrap();
        let now = rustix::thread::sched_getaffinity(None).unwrap();
        assert_eq!(now.count() as usize, all);
        assert_eq!(now, *started_on());
    }

    /// Placements count CPUs among those the bench may use: started on
    /// CPUs 2 and 5, "CPU 0" is CPU 2 and "CPU 1" is CPU 5.
    #[test]
    fn pins_count_the_cpus_the_process_may_use() {
        let mut set = CpuSet::new();
        set.set(2);
        set.set(5);
        assert_eq!(
            (nth_cpu(&set, 0), nth_cpu(&set, 1), nth_cpu(&set, 2)),
            (2, 5, 2)
        );
        assert_eq!(nth_cpu(&CpuSet::new(), 1), 0);
    }
}
