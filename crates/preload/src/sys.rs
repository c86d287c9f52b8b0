//! The C calls the library makes, and the real definitions of the calls it
//! wraps.
//!
//! A wrapped call (`write`, `close`, ...) is exported by this library, so a
//! plain `extern "C"` declaration of it would find the wrapper again. The
//! real one is the next definition in the loader's search order after this
//! library, `dlsym(RTLD_NEXT, name)`: glibc's, or another preloaded
//! library's wrapper that in turn calls glibc's. They are looked up once,
//! in the constructor; a hook called before it (from another library's
//! constructor) looks its one call up then.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// `AF_UNIX`.
pub const AF_UNIX: c_int = 1;
/// `SOCK_STREAM`.
pub const SOCK_STREAM: c_int = 1;
/// `SOCK_NONBLOCK | SOCK_CLOEXEC`: flags `socketpair` takes in its type.
pub const SOCK_TYPE_FLAGS: c_int = 0o4000 | 0o2000000;
/// `F_DUPFD`.
pub const F_DUPFD: c_int = 0;
/// `F_GETFL`.
pub const F_GETFL: c_int = 3;
/// `F_DUPFD_CLOEXEC`.
pub const F_DUPFD_CLOEXEC: c_int = 1030;
/// `F_GETPIPE_SZ`: succeeds on pipes and FIFOs only.
pub const F_GETPIPE_SZ: c_int = 1032;
/// `O_ACCMODE`, `O_RDONLY`, `O_WRONLY`.
pub const O_ACCMODE: c_int = 3;
/// `O_RDONLY`.
pub const O_RDONLY: c_int = 0;
/// `O_WRONLY`.
pub const O_WRONLY: c_int = 1;
/// `O_RDWR`.
pub const O_RDWR: c_int = 2;
/// `O_CLOEXEC`.
pub const O_CLOEXEC: c_int = 0o2000000;
/// `O_DIRECTORY`.
#[cfg(target_arch = "x86_64")]
pub const O_DIRECTORY: c_int = 0o200000;
/// `O_DIRECTORY`.
#[cfg(not(target_arch = "x86_64"))]
pub const O_DIRECTORY: c_int = 0o40000;
/// `CLOSE_RANGE_CLOEXEC`: `close_range` only marks, closes nothing.
pub const CLOSE_RANGE_CLOEXEC: c_int = 4;
/// `ENOSYS`.
pub const ENOSYS: c_int = 38;
/// `SOL_SOCKET`, `SO_TYPE`, `SO_DOMAIN`.
pub const SOL_SOCKET: c_int = 1;
/// `SO_TYPE`.
pub const SO_TYPE: c_int = 3;
/// `SO_DOMAIN`.
pub const SO_DOMAIN: c_int = 39;
/// `PROT_READ | PROT_WRITE`.
pub const PROT_RW: c_int = 3;
/// `SEEK_END`.
pub const SEEK_END: c_int = 2;
/// `MAP_SHARED`.
pub const MAP_SHARED: c_int = 1;
/// `MAP_ANONYMOUS`.
pub const MAP_ANONYMOUS: c_int = 0x20;
/// `MAP_FAILED`: what `mmap` (and `mremap`, `shmat`) return on failure.
pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
/// `O_NONBLOCK`.
pub const O_NONBLOCK: c_int = 0o4000;
/// `EAGAIN`.
pub const EAGAIN: c_int = 11;
/// `EINTR`.
pub const EINTR: c_int = 4;
/// `ESRCH`.
pub const ESRCH: c_int = 3;
/// `RWF_NOWAIT`: a read that would wait fails with `EAGAIN` instead.
pub const RWF_NOWAIT: c_int = 8;
/// `FIONREAD`: the bytes waiting in a pipe.
pub const FIONREAD: u64 = 0x541b;
/// `S_IFMT` and `S_IFIFO`.
pub const S_IFMT: u32 = 0o170000;
/// `S_IFIFO`.
pub const S_IFIFO: u32 = 0o010000;
/// `S_IFSOCK`.
pub const S_IFSOCK: u32 = 0o140000;
/// `SIOCOUTQ`: the bytes a Unix stream socket sent that its peer has not
/// read yet.
pub const SIOCOUTQ: u64 = 0x5411;
/// `SO_RCVLOWAT`.
pub const SO_RCVLOWAT: c_int = 18;
/// `SO_RCVTIMEO` (`SO_RCVTIMEO_OLD`: a `struct timeval`).
pub const SO_RCVTIMEO: c_int = 20;
/// `FIONBIO`: sets or clears `O_NONBLOCK`.
pub const FIONBIO: u64 = 0x5421;
/// `MSG_DONTWAIT`.
pub const MSG_DONTWAIT: c_int = 0x40;
/// `MSG_NOSIGNAL`.
pub const MSG_NOSIGNAL: c_int = 0x4000;
/// `SIG_BLOCK`, `SIG_SETMASK`.
pub const SIG_BLOCK: c_int = 0;
/// `SIG_SETMASK`.
pub const SIG_SETMASK: c_int = 2;
/// `SA_RESTART`.
pub const SA_RESTART: c_int = 0x1000_0000;
/// `CLOCK_MONOTONIC`.
pub const CLOCK_MONOTONIC: c_int = 1;
/// `CLOCK_MONOTONIC_COARSE`.
const CLOCK_MONOTONIC_COARSE: c_int = 6;

/// glibc's `sigset_t` (1024 bits).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SigSet(pub [u64; 16]);

/// glibc's `struct sigaction` on x86-64 and AArch64: the handler (or
/// `SIG_DFL` 0, `SIG_IGN` 1), the mask, the flags, the restorer.
#[repr(C)]
pub struct SigAction {
    /// `sa_handler` / `sa_sigaction`.
    pub handler: usize,
    /// `sa_mask`.
    pub mask: SigSet,
    /// `sa_flags`.
    pub flags: c_int,
    /// `sa_restorer`.
    pub restorer: usize,
}

/// Blocks every signal in this thread (glibc leaves its own alone) and
/// returns the mask it had, for [`set_signal_mask`].
pub fn block_all_signals() -> SigSet {
    let all = SigSet([u64::MAX; 16]);
    let mut old = SigSet([0; 16]);
    // SAFETY: both sets are valid.
    unsafe { pthread_sigmask(SIG_BLOCK, &all, &mut old) };
    old
}

/// Sets this thread's signal mask (pending signals it unblocks are
/// delivered now).
pub fn set_signal_mask(mask: &SigSet) {
    // SAFETY: `mask` is a valid set.
    unsafe { pthread_sigmask(SIG_SETMASK, mask, core::ptr::null_mut()) };
}

/// The disposition of `sig` (`SIG_DFL` where the query fails, as for the
/// C library's own signals).
pub fn disposition(sig: c_int) -> SigAction {
    let mut act = SigAction {
        handler: 0,
        mask: SigSet([0; 16]),
        flags: 0,
        restorer: 0,
    };
    // SAFETY: reads the disposition into `act`, changes nothing
    // (async-signal-safe).
    if unsafe { sigaction(sig, core::ptr::null(), &mut act) } != 0 {
        act.handler = 0;
    }
    act
}

/// `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IoVec {
    /// `iov_base`.
    pub base: *mut c_void,
    /// `iov_len`.
    pub len: usize,
}

/// `struct pollfd`.
#[repr(C)]
pub struct PollFd {
    /// `fd`.
    pub fd: c_int,
    /// `events`.
    pub events: i16,
    /// `revents`.
    pub revents: i16,
}

/// `POLLOUT`, `POLLERR`.
pub const POLLOUT: i16 = 4;
pub const POLLERR: i16 = 8;
/// `POLLHUP`.
pub const POLLHUP: i16 = 16;
/// `SO_SNDBUF`.
pub const SO_SNDBUF: c_int = 7;
/// `SOCK_NONBLOCK`.
pub const SOCK_NONBLOCK: c_int = 0o4000;

/// `FUTEX_WAIT` and `FUTEX_WAKE`, not `_PRIVATE`: the word is shared
/// between processes.
pub const FUTEX_WAIT: usize = 0;
pub const FUTEX_WAKE: usize = 1;

/// `struct timespec`.
#[repr(C)]
pub struct TimeSpec {
    /// `tv_sec`.
    pub sec: i64,
    /// `tv_nsec`.
    pub nsec: i64,
}

/// Room for glibc's `struct stat` (144 bytes on x86-64, 128 on AArch64).
#[repr(C, align(8))]
pub struct Stat(pub [u8; 256]);

impl Stat {
    /// `st_dev`: at offset 0 on both.
    pub fn dev(&self) -> u64 {
        u64::from_ne_bytes(self.0[0..8].try_into().unwrap_or([0; 8]))
    }

    /// `st_ino`: at offset 8 on both.
    pub fn ino(&self) -> u64 {
        u64::from_ne_bytes(self.0[8..16].try_into().unwrap_or([0; 8]))
    }

    /// `st_size`: at offset 48 on both.
    pub fn size(&self) -> u64 {
        u64::from_ne_bytes(self.0[48..56].try_into().unwrap_or([0; 8]))
    }

    /// `st_mode`: after `st_nlink` (8 bytes) on x86-64, before it (4) on
    /// AArch64.
    pub fn mode(&self) -> u32 {
        #[cfg(target_arch = "x86_64")]
        const AT: usize = 24;
        #[cfg(not(target_arch = "x86_64"))]
        const AT: usize = 16;
        u32::from_ne_bytes(self.0[AT..AT + 4].try_into().unwrap_or([0; 4]))
    }

    /// `fd`'s status, if `fstat` works and its file type (`S_IFMT` bits)
    /// is `kind`.
    pub fn of_kind(fd: c_int, kind: u32) -> Option<Stat> {
        let mut st = Stat([0; 256]);
        // SAFETY: `st` has room for the C library's struct stat.
        let r = unsafe { fstat(fd, &mut st) };
        (r == 0 && st.mode() & S_IFMT == kind).then_some(st)
    }
}

// Calls this library does not wrap: plain declarations reach libc.
extern "C" {
    /// dlsym(3).
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    /// The calling thread's `errno`.
    pub fn __errno_location() -> *mut c_int;
    /// getpid(2).
    pub fn getpid() -> c_int;
    /// ftruncate(2).
    pub fn ftruncate(fd: c_int, len: i64) -> c_int;
    /// getauxval(3).
    pub fn getauxval(kind: core::ffi::c_ulong) -> core::ffi::c_ulong;
    /// getrlimit(2): `rlim` is a `struct rlimit`, two 64-bit words.
    pub fn getrlimit(resource: c_int, rlim: *mut u64) -> c_int;
    /// readlink(2).
    pub fn readlink(path: *const c_char, buf: *mut c_char, len: usize) -> isize;
    /// process_vm_readv(2): here on this process itself, a copy that fails
    /// with `EFAULT` where a plain one would fault.
    pub fn process_vm_readv(
        pid: c_int,
        local: *const IoVec,
        local_count: core::ffi::c_ulong,
        remote: *const IoVec,
        remote_count: core::ffi::c_ulong,
        flags: core::ffi::c_ulong,
    ) -> isize;
    /// getenv(3); called only from the constructor.
    pub fn getenv(name: *const c_char) -> *const c_char;
    /// open(2), with its mode; `open` is variadic in C, and the System V
    /// ABI of x86-64 and AArch64 passes the integer arguments of a variadic
    /// call in the registers of a plain one.
    pub fn open(path: *const c_char, flags: c_int, mode: c_int) -> c_int;
    /// lseek(2).
    pub fn lseek(fd: c_int, off: i64, whence: c_int) -> i64;
    /// fstat(2).
    pub fn fstat(fd: c_int, st: *mut Stat) -> c_int;
    /// pthread_sigmask(3).
    pub fn pthread_sigmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
    /// sigpending(2).
    pub fn sigpending(set: *mut SigSet) -> c_int;
    /// sigtimedwait(2).
    pub fn sigtimedwait(set: *const SigSet, info: *mut c_void, timeout: *const TimeSpec) -> c_int;
    /// sched_getaffinity(2): `set` is `len` bytes; glibc returns 0 on
    /// success.
    pub fn sched_getaffinity(pid: c_int, len: usize, set: *mut u64) -> c_int;
    /// sched_yield(2).
    pub fn sched_yield() -> c_int;
    /// sched_getcpu(3): a load from the thread's rseq area in glibc 2.35
    /// and later, the vDSO's getcpu before; -1 if neither answers.
    pub fn sched_getcpu() -> c_int;
    /// kill(2), here only with signal 0.
    pub fn kill(pid: c_int, sig: c_int) -> c_int;
    /// clock_gettime(2).
    pub fn clock_gettime(clock: c_int, ts: *mut TimeSpec) -> c_int;
    /// getsockopt(2).
    pub fn getsockopt(
        fd: c_int,
        level: c_int,
        name: c_int,
        val: *mut c_void,
        len: *mut u32,
    ) -> c_int;
}

/// The system call numbers of the mapping calls, for `raw`.
pub mod nr {
    use core::ffi::c_long;
    #[cfg(target_arch = "x86_64")]
    pub const MMAP: c_long = 9;
    #[cfg(target_arch = "x86_64")]
    pub const MPROTECT: c_long = 10;
    #[cfg(target_arch = "x86_64")]
    pub const MUNMAP: c_long = 11;
    #[cfg(target_arch = "x86_64")]
    pub const MREMAP: c_long = 25;
    #[cfg(target_arch = "x86_64")]
    pub const MADVISE: c_long = 28;
    #[cfg(target_arch = "x86_64")]
    pub const SHMAT: c_long = 30;
    #[cfg(target_arch = "x86_64")]
    pub const PKEY_MPROTECT: c_long = 329;
    #[cfg(target_arch = "x86_64")]
    pub const EXIT_GROUP: c_long = 231;
    #[cfg(target_arch = "aarch64")]
    pub const EXIT_GROUP: c_long = 94;
    #[cfg(target_arch = "aarch64")]
    pub const MMAP: c_long = 222;
    #[cfg(target_arch = "aarch64")]
    pub const MPROTECT: c_long = 226;
    #[cfg(target_arch = "aarch64")]
    pub const MUNMAP: c_long = 215;
    #[cfg(target_arch = "aarch64")]
    pub const MREMAP: c_long = 216;
    #[cfg(target_arch = "aarch64")]
    pub const MADVISE: c_long = 233;
    #[cfg(target_arch = "aarch64")]
    pub const SHMAT: c_long = 196;
    #[cfg(target_arch = "aarch64")]
    pub const PKEY_MPROTECT: c_long = 288;
    /// getdents64(2), which glibc wraps only in 2.30 and later.
    #[cfg(target_arch = "x86_64")]
    pub const GETDENTS64: c_long = 217;
    #[cfg(target_arch = "aarch64")]
    pub const GETDENTS64: c_long = 61;
    /// futex(2), which the C library does not wrap.
    #[cfg(target_arch = "x86_64")]
    pub const FUTEX: c_long = 202;
    #[cfg(target_arch = "aarch64")]
    pub const FUTEX: c_long = 98;
    /// gettid(2), which glibc wraps only in 2.30 and later.
    #[cfg(target_arch = "x86_64")]
    pub const GETTID: c_long = 186;
    #[cfg(target_arch = "aarch64")]
    pub const GETTID: c_long = 178;
    /// getpid(2), which glibc before 2.25 answers from a cache.
    #[cfg(target_arch = "x86_64")]
    pub const GETPID: c_long = 39;
    #[cfg(target_arch = "aarch64")]
    pub const GETPID: c_long = 172;
    /// openat(2), read(2) and close(2), made by number where a program's
    /// own wrapper of the C call must not run (a signal handler's hold).
    #[cfg(target_arch = "x86_64")]
    pub const OPENAT: c_long = 257;
    #[cfg(target_arch = "aarch64")]
    pub const OPENAT: c_long = 56;
    #[cfg(target_arch = "x86_64")]
    pub const READ: c_long = 0;
    #[cfg(target_arch = "aarch64")]
    pub const READ: c_long = 63;
    #[cfg(target_arch = "x86_64")]
    pub const CLOSE: c_long = 3;
    #[cfg(target_arch = "aarch64")]
    pub const CLOSE: c_long = 57;
    /// tgkill(2), here only with signal 0.
    #[cfg(target_arch = "x86_64")]
    pub const TGKILL: c_long = 234;
    #[cfg(target_arch = "aarch64")]
    pub const TGKILL: c_long = 131;
    /// ppoll(2), made by [`super::raw_keeping_errno`].
    #[cfg(target_arch = "x86_64")]
    pub const PPOLL: c_long = 271;
    #[cfg(target_arch = "aarch64")]
    pub const PPOLL: c_long = 73;
}

/// The system call `number` with up to six word-sized arguments, made by
/// the instruction itself: the kernel's answer, `-errno` on failure, and
/// `errno` as it was. For a wait a signal handler may interrupt: what the
/// handler leaves in `errno` must stay, as after a call that succeeds.
///
/// # Safety
///
/// As for the system call made.
pub unsafe fn raw_keeping_errno(number: core::ffi::c_long, args: [usize; 6]) -> isize {
    let [a, b, c, d, e, f] = args;
    let r: isize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract is the system call's; `syscall`
    // clobbers rcx and r11 only.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => r,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e, in("r9") f,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller's contract is the system call's.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a as isize => r,
            in("x1") b, in("x2") c, in("x3") d, in("x4") e, in("x5") f,
            options(nostack),
        );
    }
    r
}

/// The system call `number` with up to six word-sized arguments, made
/// directly (the C library's `syscall`: `-1` and `errno` on failure).
///
/// # Safety
///
/// As for the system call made.
pub unsafe fn raw(number: core::ffi::c_long, args: [usize; 6]) -> isize {
    // Not through the C library's `syscall`: this library wraps that
    // (`syscall_hook`), whose routes call back into the wrappers.
    // SAFETY: the caller's contract is the system call's.
    let r = unsafe { raw_keeping_errno(number, args) };
    if (-4095..0).contains(&r) {
        // SAFETY: the calling thread's errno is a valid int.
        unsafe { *__errno_location() = -r as c_int };
        return -1;
    }
    r
}

/// The real `_exit` (the next definition after this library), found in the
/// constructor: its hook may run in a signal handler or a `vfork` child,
/// where `dlsym` must not.
static REAL_EXIT: Slot = Slot::new(b"_exit\0");

/// Looks the real `_exit` up (from the constructor).
pub fn resolve_exit() {
    REAL_EXIT.get();
}

/// Ends the process as `_exit(2)` does, through the real `_exit`, or the
/// `exit_group` system call if there is none.
pub fn real_exit(code: c_int) -> ! {
    let addr = REAL_EXIT.known();
    if addr != 0 {
        // SAFETY: `addr` is the C library's `_exit`, whose C signature this is.
        let f: unsafe extern "C" fn(c_int) -> ! = unsafe { core::mem::transmute(addr) };
        // SAFETY: _exit(2) has no preconditions.
        unsafe { f(code) }
    }
    loop {
        // SAFETY: exit_group(2) has no preconditions and does not return.
        unsafe { raw_keeping_errno(nr::EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]) };
    }
}

/// __cxa_atexit(3): `f(arg)` runs at `exit`, after every handler
/// registered later (and so after `main`'s and every library's
/// destructors, registered once the loader has run this library's
/// constructor).
pub fn at_exit(f: extern "C" fn(*mut c_void)) -> bool {
    extern "C" {
        fn __cxa_atexit(f: extern "C" fn(*mut c_void), arg: *mut c_void, dso: *mut c_void)
            -> c_int;
    }
    // SAFETY: `f` is a plain function that lives as long as the process
    // (the library is never unloaded); a null handle ties it to no object.
    unsafe { __cxa_atexit(f, core::ptr::null_mut(), core::ptr::null_mut()) == 0 }
}

/// `RTLD_NEXT`.
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The address of one real call, found on first use.
struct Slot {
    addr: AtomicUsize,
    name: &'static [u8],
}

impl Slot {
    const fn new(name: &'static [u8]) -> Self {
        Slot {
            addr: AtomicUsize::new(0),
            name,
        }
    }

    /// The real call's address, or 0 if not looked up yet.
    #[inline(always)]
    fn known(&self) -> usize {
        // Relaxed: the value is a code address, complete in itself; two
        // threads racing to look it up store the same one.
        self.addr.load(Ordering::Relaxed)
    }

    /// The real call's address, or 0 if the C library has none (an old
    /// glibc's `close_range`).
    fn get(&self) -> usize {
        match self.known() {
            0 => self.resolve(),
            a => a,
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> usize {
        // SAFETY: `name` is a NUL-terminated literal (the macro adds the
        // NUL); dlsym with RTLD_NEXT reads it and returns an address or null.
        let a = unsafe { dlsym(RTLD_NEXT, self.name.as_ptr().cast()) } as usize;
        self.addr.store(a, Ordering::Relaxed);
        a
    }
}

/// Declares each wrapped call's real definition as a function of this
/// module with the same name and C signature. A call the C library lacks
/// fails with `ENOSYS`.
macro_rules! real_calls {
    ($( fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )*) => {
        #[allow(non_upper_case_globals)]
        mod slots {
            use super::Slot;
            $( pub(super) static $name: Slot = Slot::new(concat!(stringify!($name), "\0").as_bytes()); )*
        }

        /// Whether each real call has been looked up: a hook whose caller
        /// may be an allocator still starting (before this library's
        /// constructor) must not call `dlsym`, which may allocate.
        #[allow(non_snake_case, dead_code)]
        pub mod known {
            $(
                #[inline(always)]
                pub fn $name() -> bool {
                    super::slots::$name.known() != 0
                }
            )*
        }

        /// Looks every real call up now (from the constructor, where
        /// `dlsym` may allocate), so that no hook has to later.
        pub fn resolve_all() {
            $( slots::$name.resolve(); )*
        }

        $(
            /// The real call of this name (the next definition after this
            /// library).
            ///
            /// # Safety
            ///
            /// As for the C call of this name.
            #[inline(always)]
            #[allow(non_snake_case)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                let addr = slots::$name.known();
                if addr == 0 {
                    // Out of line, so that this path needs no stack frame
                    // and the call below stays a tail call.
                    #[cold]
                    #[inline(never)]
                    unsafe fn first_call($($arg: $ty),*) -> $ret {
                        let addr = slots::$name.resolve();
                        if addr == 0 {
                            // SAFETY: the calling thread's errno is a valid int.
                            unsafe { *__errno_location() = ENOSYS };
                            return -1isize as $ret;
                        }
                        // SAFETY: `addr` is the C library's definition of
                        // this very call, whose C signature this is.
                        let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(addr) };
                        // SAFETY: the caller keeps the C call's contract.
                        unsafe { f($($arg),*) }
                    }
                    // SAFETY: the caller keeps the C call's contract.
                    return unsafe { first_call($($arg),*) };
                }
                // SAFETY: `addr` is the C library's definition of this
                // very call, whose C signature this is.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(addr) };
                // SAFETY: the caller keeps the C call's contract.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

real_calls! {
    fn pipe(fds: *mut c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn socketpair(domain: c_int, ty: c_int, proto: c_int, fds: *mut c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn close_range(first: u32, last: u32, flags: c_int) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    fn fork() -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn readv(fd: c_int, iov: *const c_void, cnt: c_int) -> isize;
    fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut c_void, alen: *mut u32) -> isize;
    fn recvmsg(fd: c_int, msg: *mut c_void, flags: c_int) -> isize;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn writev(fd: c_int, iov: *const c_void, cnt: c_int) -> isize;
    fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize;
    fn sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const c_void, alen: u32) -> isize;
    fn sendmsg(fd: c_int, msg: *const c_void, flags: c_int) -> isize;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: u32) -> c_int;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn sigaction(sig: c_int, act: *const SigAction, old: *mut SigAction) -> c_int;
    fn pthread_create(thread: *mut u64, attr: *const c_void, start: usize, arg: *mut c_void) -> c_int;
    fn signal(sig: c_int, handler: usize) -> isize;
    fn bsd_signal(sig: c_int, handler: usize) -> isize;
    fn ssignal(sig: c_int, handler: usize) -> isize;
    fn sigset(sig: c_int, handler: usize) -> isize;
    fn sysv_signal(sig: c_int, handler: usize) -> isize;
    fn __sysv_signal(sig: c_int, handler: usize) -> isize;
    fn siginterrupt(sig: c_int, flag: c_int) -> c_int;
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    fn mmap64(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
    fn mremap(old: *mut c_void, old_len: usize, len: usize, flags: c_int, new: *mut c_void) -> *mut c_void;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn pkey_mprotect(addr: *mut c_void, len: usize, prot: c_int, pkey: c_int) -> c_int;
    fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    fn shmat(id: c_int, addr: *const c_void, flags: c_int) -> *mut c_void;
    fn _Fork() -> c_int;
    fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, size: usize) -> isize;
    fn __recv_chk(fd: c_int, buf: *const c_void, n: usize, size: usize, flags: c_int) -> isize;
    fn __recvfrom_chk(fd: c_int, buf: *const c_void, n: usize, size: usize, flags: c_int, addr: *const c_void, alen: *const c_void) -> isize;
    fn recvmmsg(fd: c_int, vec: *const c_void, vlen: u32, flags: c_int, timeout: *const c_void) -> c_int;
    fn sendmmsg(fd: c_int, vec: *const c_void, vlen: u32, flags: c_int) -> c_int;
    fn __poll_chk(fds: *mut PollFd, count: u64, timeout: c_int, size: usize) -> c_int;
    fn __ppoll_chk(fds: *mut PollFd, count: u64, ts: *const c_void, mask: *const c_void, size: usize) -> c_int;
    fn preadv(fd: c_int, iov: *const c_void, cnt: c_int, off: i64) -> isize;
    fn pwritev(fd: c_int, iov: *const c_void, cnt: c_int, off: i64) -> isize;
    fn preadv2(fd: c_int, iov: *const IoVec, cnt: c_int, off: i64, flags: c_int) -> isize;
    fn pwritev2(fd: c_int, iov: *const c_void, cnt: c_int, off: i64, flags: c_int) -> isize;
    fn preadv64(fd: c_int, iov: *const c_void, cnt: c_int, off: i64) -> isize;
    fn pwritev64(fd: c_int, iov: *const c_void, cnt: c_int, off: i64) -> isize;
    fn preadv64v2(fd: c_int, iov: *const c_void, cnt: c_int, off: i64, flags: c_int) -> isize;
    fn pwritev64v2(fd: c_int, iov: *const c_void, cnt: c_int, off: i64, flags: c_int) -> isize;
    fn ioctl(fd: c_int, req: u64, arg: usize) -> c_int;
    fn poll(fds: *mut PollFd, count: u64, timeout: c_int) -> c_int;
    fn ppoll(fds: *mut PollFd, count: u64, ts: *const c_void, mask: *const c_void) -> c_int;
    fn select(nfds: c_int, r: *mut u64, w: *mut u64, e: *mut u64, tv: *const c_void) -> c_int;
    fn pselect(nfds: c_int, r: *mut u64, w: *mut u64, e: *mut u64, ts: *const c_void, mask: *const c_void) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut c_void) -> c_int;
    fn execve(path: *const c_char, argv: *const c_void, envp: *const c_void) -> c_int;
    fn execv(path: *const c_char, argv: *const c_void) -> c_int;
    fn execvp(file: *const c_char, argv: *const c_void) -> c_int;
    fn execvpe(file: *const c_char, argv: *const c_void, envp: *const c_void) -> c_int;
    fn fexecve(fd: c_int, argv: *const c_void, envp: *const c_void) -> c_int;
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const c_void, envp: *const c_void, flags: c_int) -> c_int;
    fn posix_spawn(pid: *mut c_int, path: *const c_char, acts: *const c_void, attr: *const c_void, argv: *const c_void, envp: *const c_void) -> c_int;
    fn posix_spawnp(pid: *mut c_int, file: *const c_char, acts: *const c_void, attr: *const c_void, argv: *const c_void, envp: *const c_void) -> c_int;
    fn system(cmd: *const c_char) -> c_int;
    fn popen(cmd: *const c_char, mode: *const c_char) -> *mut c_void;
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut c_void;
    fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int;
    fn __vdprintf_chk(fd: c_int, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int;
    fn splice(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, len: usize, flags: u32) -> isize;
    fn tee(fd_in: c_int, fd_out: c_int, len: usize, flags: u32) -> isize;
    fn vmsplice(fd: c_int, iov: *const c_void, count: usize, flags: u32) -> isize;
    fn sendfile(out: c_int, inp: c_int, off: *mut i64, count: usize) -> isize;
    fn sendfile64(out: c_int, inp: c_int, off: *mut i64, count: usize) -> isize;
    fn copy_file_range(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, len: usize, flags: u32) -> isize;
}

/// How many CPUs this process may run on (0 if the kernel does not say).
pub fn usable_cpus() -> u32 {
    let mut cpus = [0u64; 16];
    // SAFETY: the kernel writes at most 128 bytes into `cpus`.
    let r = unsafe { sched_getaffinity(0, 128, cpus.as_mut_ptr()) };
    // glibc's wrapper returns 0 on success (the system call, a size).
    if r != 0 {
        return 0;
    }
    cpus.iter().map(|w| w.count_ones()).sum()
}

/// `CLOCK_MONOTONIC` in nanoseconds (the vDSO's clock: no system call).
pub fn now_ns() -> i64 {
    clock_ns(CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the time of the last timer
/// tick (1-10 ms behind), read from the vDSO's data page without the
/// time-stamp counter, so about a fifth of [`now_ns`]'s cost (7 against
/// 36 ns on the Zen 1 guest). For bounds that a tick's lag does not hurt.
pub fn coarse_now_ns() -> i64 {
    clock_ns(CLOCK_MONOTONIC_COARSE)
}

/// `clock`'s time in nanoseconds.
#[inline(always)]
fn clock_ns(clock: c_int) -> i64 {
    let mut ts = TimeSpec { sec: 0, nsec: 0 };
    // SAFETY: writes one timespec.
    unsafe { clock_gettime(clock, &mut ts) };
    ts.sec.saturating_mul(1_000_000_000).saturating_add(ts.nsec)
}

/// Runs `f` and puts `errno` back as it was: for the library's own calls
/// inside a hook, which must not change what the program sees.
pub fn keep_errno<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: the calling thread's errno is a valid int for its lifetime.
    let errno = unsafe { __errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    let r = f();
    // SAFETY: as above.
    unsafe { *errno = saved };
    r
}

/// Whether the socket `fd` has a receive timeout (`SO_RCVTIMEO`); true
/// where the kernel does not say.
pub fn socket_has_receive_timeout(fd: c_int) -> bool {
    let (mut tv, mut len) = ([0i64; 2], 16u32);
    // SAFETY: writes at most `len` bytes, one `struct timeval`, into a
    // local of that size.
    let r = unsafe {
        getsockopt(
            fd,
            SOL_SOCKET,
            SO_RCVTIMEO,
            tv.as_mut_ptr().cast(),
            &mut len,
        )
    };
    r != 0 || tv != [0, 0]
}

/// The socket option `name` (at `SOL_SOCKET`) of `fd`, an int; `None`
/// if `fd` is no socket or the kernel refuses.
pub fn socket_int(fd: c_int, name: c_int) -> Option<c_int> {
    let (mut value, mut len) = (0 as c_int, 4u32);
    // SAFETY: writes at most `len` bytes, one int, into a local of that size.
    let r = unsafe { getsockopt(fd, SOL_SOCKET, name, (&raw mut value).cast(), &mut len) };
    (r == 0).then_some(value)
}

static CLOSEFROM: Slot = Slot::new(b"closefrom\0");

/// The real closefrom(3) (glibc 2.34 and later; it returns nothing, so it
/// is not one of `real_calls!`'s). Does nothing where the C library has
/// none, which a program that calls it cannot meet.
///
/// # Safety
///
/// As for closefrom(3).
pub unsafe fn closefrom(low: c_int) {
    let addr = CLOSEFROM.get();
    if addr != 0 {
        // SAFETY: the C library's closefrom, whose signature this is.
        let f: unsafe extern "C" fn(c_int) = unsafe { core::mem::transmute(addr) };
        // SAFETY: the caller keeps closefrom's contract.
        unsafe { f(low) }
    }
}
