//! The wrapper of the C library's `syscall(2)`: a system call made by
//! number takes the path its named wrapper would. Without it a
//! `syscall(SYS_close, fd)` left the table's entry behind, a
//! `syscall(SYS_read, ...)` missed the ring's bytes, and so on for each
//! call the library wraps.
//!
//! - A call with a wrapper whose C function is the system call itself
//!   (`read`, `close`, `dup2`, `pipe2`, `fcntl`, `mmap`, ...) goes to that
//!   wrapper.
//! - A call whose C function differs from the system call (`ppoll`,
//!   `pselect6`, `preadv`: their arguments are laid out otherwise) gets
//!   its wrapper's spill, then the system call as made.
//! - `rt_sigaction` with a handler without `SA_RESTART` is noted as
//!   `sigaction`'s wrapper notes it.
//! - `io_uring_setup`: an io_uring reads and writes descriptors where no
//!   wrapper sees, so the process hands every ring's pipe to the kernel
//!   and makes no ring from then on (nor do the children it forks after).
//!   liburing makes that call by the instruction itself, so its calls
//!   that make an io_uring (`io_uring_queue_init` and the others below)
//!   are wrapped too.
//! - `pidfd_getfd`: a descriptor taken from another process is handed to
//!   the kernel if its pipe has a ring of this process's pool.
//! - Any other call, and these ones on a descriptor the library does not
//!   follow, is made as the C library makes it: the instruction, and `-1`
//!   with `errno` on failure.
//!
//! Not seen still: the instruction itself outside the C library (a
//! static liburing, Go's runtime), and `fork`, `vfork` and `clone` made by
//! number, which run no `atfork` handler natively and so are made as
//! they are (docs/run.md, "What a program can see").
//!
//! The numbers are x86-64's, the one architecture rings run on
//! (`rings::open_from_env`); elsewhere the C library's `syscall` stays.

use core::ffi::{c_char, c_int, c_long, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::{hooks, mapping_hooks, ring_io, rings, spill_hooks, sys, wait_signals};

/// The x86-64 numbers of the calls routed here.
mod nr {
    use core::ffi::c_long;
    pub const READ: c_long = 0;
    pub const WRITE: c_long = 1;
    pub const CLOSE: c_long = 3;
    pub const POLL: c_long = 7;
    pub const MMAP: c_long = 9;
    pub const MPROTECT: c_long = 10;
    pub const MUNMAP: c_long = 11;
    pub const RT_SIGACTION: c_long = 13;
    pub const IOCTL: c_long = 16;
    pub const READV: c_long = 19;
    pub const WRITEV: c_long = 20;
    pub const PIPE: c_long = 22;
    pub const SELECT: c_long = 23;
    pub const MREMAP: c_long = 25;
    pub const MADVISE: c_long = 28;
    pub const SHMAT: c_long = 30;
    pub const DUP: c_long = 32;
    pub const DUP2: c_long = 33;
    pub const SENDFILE: c_long = 40;
    pub const SENDTO: c_long = 44;
    pub const RECVFROM: c_long = 45;
    pub const SENDMSG: c_long = 46;
    pub const RECVMSG: c_long = 47;
    pub const SHUTDOWN: c_long = 48;
    pub const SOCKETPAIR: c_long = 53;
    pub const SETSOCKOPT: c_long = 54;
    pub const EXECVE: c_long = 59;
    pub const FCNTL: c_long = 72;
    pub const EXIT_GROUP: c_long = 231;
    pub const EPOLL_CTL: c_long = 233;
    pub const PSELECT6: c_long = 270;
    pub const PPOLL: c_long = 271;
    pub const SPLICE: c_long = 275;
    pub const TEE: c_long = 276;
    pub const VMSPLICE: c_long = 278;
    pub const DUP3: c_long = 292;
    pub const PIPE2: c_long = 293;
    pub const PREADV: c_long = 295;
    pub const PWRITEV: c_long = 296;
    pub const RECVMMSG: c_long = 299;
    pub const SENDMMSG: c_long = 307;
    pub const EXECVEAT: c_long = 322;
    pub const COPY_FILE_RANGE: c_long = 326;
    pub const PREADV2: c_long = 327;
    pub const PWRITEV2: c_long = 328;
    pub const PKEY_MPROTECT: c_long = 329;
    pub const IO_URING_SETUP: c_long = 425;
    pub const CLOSE_RANGE: c_long = 436;
    pub const PIDFD_GETFD: c_long = 438;
}

/// The kernel's `struct sigaction` as `rt_sigaction` takes it (not the C
/// library's: the flags come second).
#[repr(C)]
struct KernelSigAction {
    handler: usize,
    flags: u64,
}

/// The numbers routed here, for [`routed`].
const ROUTED: [c_long; 49] = [
    nr::READ,
    nr::WRITE,
    nr::CLOSE,
    nr::POLL,
    nr::MMAP,
    nr::MPROTECT,
    nr::MUNMAP,
    nr::RT_SIGACTION,
    nr::IOCTL,
    nr::READV,
    nr::WRITEV,
    nr::PIPE,
    nr::SELECT,
    nr::MREMAP,
    nr::MADVISE,
    nr::SHMAT,
    nr::DUP,
    nr::DUP2,
    nr::SENDFILE,
    nr::SENDTO,
    nr::RECVFROM,
    nr::SENDMSG,
    nr::RECVMSG,
    nr::SHUTDOWN,
    nr::SOCKETPAIR,
    nr::SETSOCKOPT,
    nr::EXECVE,
    nr::FCNTL,
    nr::EXIT_GROUP,
    nr::EPOLL_CTL,
    nr::PSELECT6,
    nr::PPOLL,
    nr::SPLICE,
    nr::TEE,
    nr::VMSPLICE,
    nr::DUP3,
    nr::PIPE2,
    nr::PREADV,
    nr::PWRITEV,
    nr::RECVMMSG,
    nr::SENDMMSG,
    nr::EXECVEAT,
    nr::COPY_FILE_RANGE,
    nr::PREADV2,
    nr::PWRITEV2,
    nr::PKEY_MPROTECT,
    nr::IO_URING_SETUP,
    nr::CLOSE_RANGE,
    nr::PIDFD_GETFD,
];

/// One bit per number below 512, set for the numbers in [`ROUTED`].
const ROUTED_BITS: [u64; 8] = {
    let mut bits = [0u64; 8];
    let mut i = 0;
    while i < ROUTED.len() {
        let n = ROUTED[i] as usize;
        bits[n / 64] |= 1 << (n % 64);
        i += 1;
    }
    bits
};

/// [`ROUTED_BITS`] where the entry's instructions can read it.
static ROUTED_TABLE: [u64; 8] = ROUTED_BITS;

/// syscall(2). The entry is a few instructions of its own, so that a call
/// with no route (a Rust program's `futex`) costs one bounds check and a
/// bit test more than the C library's: a number below 512 whose bit is
/// set in [`ROUTED_TABLE`] goes on to [`route`] with the arguments as
/// they came; any other is the instruction, and `-1` with `errno` on
/// failure ([`failed`]). The arguments are words where C has `...`: on
/// x86-64 a variadic call passes integer and pointer arguments where a
/// plain call does (the sixth on the stack, where the C library's own
/// `syscall` reads it too), and no system call takes another kind.
///
/// # Safety
///
/// As for syscall(2) with this number.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> c_long {
    core::arch::naked_asm!(
        // Unsigned: a negative number is no route's either.
        "cmp rdi, 511",
        "ja 2f",
        "mov eax, edi",
        "shr eax, 6",
        "lea r11, [rip + {table}]",
        "mov rax, [r11 + rax * 8]",
        // The bit offset of a register operand is taken modulo 64.
        "bt rax, rdi",
        // A tail jump: `route` finds the seven arguments where the
        // caller put them, and returns to the caller.
        "jc {route}",
        "2:",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 3f",
        "ret",
        "3:",
        "mov rdi, rax",
        "jmp {failed}",
        table = sym ROUTED_TABLE,
        route = sym route,
        failed = sym failed,
    )
}

/// A failed call's `-errno` `r` as the C library returns it: `-1`, with
/// `errno` set.
extern "C" fn failed(r: isize) -> c_long {
    // SAFETY: the calling thread's errno is a valid int.
    unsafe { *sys::__errno_location() = -r as c_int };
    -1
}

/// Whether the library's constructor has run (`ready`).
static READY: AtomicBool = AtomicBool::new(false);

/// Called at the end of the library's constructor: calls made by number
/// take their routes from now on.
pub(crate) fn ready() {
    // Relaxed: the constructor runs before the program starts a thread.
    READY.store(true, Ordering::Relaxed);
}

/// The call `n`, which has a route, by that route.
///
/// # Safety
///
/// As for syscall(2) with this number.
#[cold]
#[inline(never)]
unsafe extern "C" fn route(
    n: c_long,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
    f: usize,
) -> c_long {
    if !READY.load(Ordering::Relaxed) && n != nr::RT_SIGACTION {
        // Before the constructor: no pipe has a ring yet, and a wrapper
        // would look its real call up (`dlsym`), perhaps from inside the
        // loader or an allocator starting up. A handler's note lasts.
        // SAFETY: the caller's contract is the system call's.
        return unsafe { made(n, [a, b, c, d, e, f]) };
    }
    let fd = a as c_int;
    let p = |x: usize| x as *mut c_void;
    // SAFETY: in every arm the caller's contract is the system call's,
    // which is that of the wrapper named, with the same arguments in the
    // same order (the arms whose C call differs make the system call
    // itself).
    unsafe {
        match n {
            nr::READ => hooks::read(fd, p(b), c) as c_long,
            nr::WRITE => hooks::write(fd, p(b), c) as c_long,
            // A count the wrappers' int would cut short: the kernel's
            // `EINVAL`.
            nr::READV | nr::WRITEV if c > c_int::MAX as usize => made(n, [a, b, c, d, e, f]),
            nr::READV => hooks::readv(fd, p(b), c as c_int) as c_long,
            nr::WRITEV => hooks::writev(fd, p(b), c as c_int) as c_long,
            nr::SENDTO => hooks::sendto(fd, p(b), c, d as c_int, p(e), f as u32) as c_long,
            nr::RECVFROM => hooks::recvfrom(fd, p(b), c, d as c_int, p(e), f as *mut u32) as c_long,
            nr::RECVMSG => hooks::recvmsg(fd, p(b), c as c_int) as c_long,
            nr::SENDMSG => spill_hooks::sendmsg(fd, p(b), c as c_int) as c_long,
            nr::CLOSE => hooks::close(fd) as c_long,
            // The C library may lack `close_range` and `execveat` (glibc
            // before 2.34), and its `fcntl` changes some commands: these
            // get their wrapper's bookkeeping around the call as made.
            nr::CLOSE_RANGE => {
                hooks::closing_range(a as u32, b as u32, c as c_int);
                made(n, [a, b, c, d, e, f])
            }
            nr::DUP => hooks::dup(fd) as c_long,
            nr::DUP2 => hooks::dup2(fd, b as c_int) as c_long,
            nr::DUP3 => hooks::dup3(fd, b as c_int, c as c_int) as c_long,
            nr::PIPE => hooks::pipe(a as *mut c_int) as c_long,
            nr::PIPE2 => hooks::pipe2(a as *mut c_int, b as c_int) as c_long,
            nr::SOCKETPAIR => {
                hooks::socketpair(fd, b as c_int, c as c_int, d as *mut c_int) as c_long
            }
            nr::SHUTDOWN => hooks::shutdown(fd, b as c_int) as c_long,
            nr::SETSOCKOPT => {
                hooks::setsockopt(fd, b as c_int, c as c_int, p(d), e as u32) as c_long
            }
            nr::FCNTL => {
                hooks::fcntl_by(fd, b as c_int, c, || made(n, [a, b, c, d, e, f]) as c_int)
                    as c_long
            }
            nr::IOCTL => spill_hooks::ioctl(fd, b as u64, c) as c_long,
            nr::EXIT_GROUP => hooks::_exit(fd),
            nr::EXECVE => spill_hooks::execve(a as *const c_char, p(b), p(c)) as c_long,
            nr::EXECVEAT => {
                spill_hooks::before_exec();
                made(n, [a, b, c, d, e, f])
            }
            nr::SPLICE => {
                spill_hooks::splice(fd, b as *mut i64, c as c_int, d as *mut i64, e, f as u32)
                    as c_long
            }
            nr::TEE => spill_hooks::tee(fd, b as c_int, c, d as u32) as c_long,
            nr::VMSPLICE => spill_hooks::vmsplice(fd, p(b), c, d as u32) as c_long,
            nr::SENDFILE => spill_hooks::sendfile(fd, b as c_int, c as *mut i64, d) as c_long,
            nr::COPY_FILE_RANGE => spill_hooks::copy_file_range(
                fd,
                b as *mut i64,
                c as c_int,
                d as *mut i64,
                e,
                f as u32,
            ) as c_long,
            nr::EPOLL_CTL => spill_hooks::epoll_ctl(fd, b as c_int, c as c_int, p(d)) as c_long,
            nr::RECVMMSG => spill_hooks::recvmmsg(fd, p(b), c as u32, d as c_int, p(e)) as c_long,
            nr::SENDMMSG => spill_hooks::sendmmsg(fd, p(b), c as u32, d as c_int) as c_long,
            nr::MMAP => {
                mapping_hooks::mmap(p(a), b, c as c_int, d as c_int, e as c_int, f as i64) as c_long
            }
            nr::MUNMAP => mapping_hooks::munmap(p(a), b) as c_long,
            nr::MPROTECT => mapping_hooks::mprotect(p(a), b, c as c_int) as c_long,
            nr::PKEY_MPROTECT => {
                mapping_hooks::pkey_mprotect(p(a), b, c as c_int, d as c_int) as c_long
            }
            nr::MADVISE => mapping_hooks::madvise(p(a), b, c as c_int) as c_long,
            // glibc's `mremap` reads its fifth argument only with some
            // flags: the wrapper's bookkeeping around the call as made.
            nr::MREMAP => {
                mapping_hooks::remapping(p(a), b, c, d as c_int, p(e));
                let r = made(n, [a, b, c, d, e, f]);
                mapping_hooks::remapped(r as *mut c_void, c) as c_long
            }
            nr::SHMAT => mapping_hooks::shmat(fd, p(b), c as c_int) as c_long,
            // The C calls of these lay their arguments out otherwise: the
            // wrapper's spill, then the system call as made.
            nr::POLL | nr::PPOLL => {
                spill_hooks::spill_polled(a as *mut sys::PollFd, b as u64);
                made(n, [a, b, c, d, e, f])
            }
            nr::SELECT | nr::PSELECT6 => {
                spill_hooks::spill_selected(fd, [b as *mut u64, c as *mut u64, d as *mut u64]);
                made(n, [a, b, c, d, e, f])
            }
            nr::PREADV | nr::PWRITEV | nr::PREADV2 | nr::PWRITEV2 => {
                spill_hooks::spill(fd);
                made(n, [a, b, c, d, e, f])
            }
            nr::RT_SIGACTION => {
                if b != 0 && sigsetsize_ok(d) {
                    noted_handler(b as *const KernelSigAction);
                }
                made(n, [a, b, c, d, e, f])
            }
            nr::IO_URING_SETUP => {
                making_io_uring();
                made(n, [a, b, c, d, e, f])
            }
            nr::PIDFD_GETFD => {
                let r = made(n, [a, b, c, d, e, f]);
                if r >= 0 {
                    ring_io::spill_taken(r as c_int);
                }
                r
            }
            _ => made(n, [a, b, c, d, e, f]),
        }
    }
}

/// The system call as the C library's `syscall` makes it.
///
/// # Safety
///
/// As for the system call made.
#[inline(always)]
unsafe fn made(n: c_long, args: [usize; 6]) -> c_long {
    // SAFETY: the caller's contract is the system call's.
    unsafe { sys::raw(n, args) as c_long }
}

/// Whether `rt_sigaction`'s last argument is the size the kernel takes
/// (else it fails with `EINVAL` and installs nothing).
fn sigsetsize_ok(size: usize) -> bool {
    size == 8
}

/// Notes a handler without `SA_RESTART` about to be installed, as
/// `sigaction`'s wrapper does, if the kernel will read `act` (else it
/// fails with `EFAULT`, installing nothing).
fn noted_handler(act: *const KernelSigAction) {
    let len = core::mem::size_of::<KernelSigAction>();
    if !crate::checked::readable(crate::pid::mine() as c_int, act.cast(), len) {
        return;
    }
    // SAFETY: checked readable just above; a plain read of two words.
    let act = unsafe { act.read_unaligned() };
    if act.handler > 1 && act.flags & sys::SA_RESTART as u64 == 0 {
        wait_signals::before_interrupting_handler();
    }
}

/// Before an io_uring is made: every ring's pipe to the kernel, and no
/// ring after, in this process and the children it forks after.
fn making_io_uring() {
    if rings::active() {
        rings::stop();
        ring_io::spill_all(false);
    }
}

/// `ENOSYS`, as liburing returns it (negated).
const ENOSYS: c_int = 38;

/// Defines the wrapper of a liburing call that makes an io_uring: the
/// rings go first ([`making_io_uring`]), then the next definition of the
/// call, looked up at its first call (liburing may be loaded after this
/// library's constructor ran, by `dlopen`).
macro_rules! makes_io_uring {
    ($( $man:literal fn $name:ident($($arg:ident: $ty:ty),*); )*) => {$(
        #[doc = concat!($man, ": hands the process's pipes to the kernel first.")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            static REAL: AtomicUsize = AtomicUsize::new(0);
            making_io_uring();
            let mut addr = REAL.load(Ordering::Relaxed);
            if addr == 0 {
                let name = concat!(stringify!($name), "\0");
                // SAFETY: a NUL-terminated name; RTLD_NEXT.
                addr = unsafe { sys::dlsym(-1isize as *mut c_void, name.as_ptr().cast()) } as usize;
                REAL.store(addr, Ordering::Relaxed);
            }
            if addr == 0 {
                // Found here only (a program looking liburing up by
                // name): liburing's answer for a kernel without io_uring.
                return -ENOSYS;
            }
            // SAFETY: `addr` is liburing's definition of this very call,
            // whose C signature this is.
            let real: unsafe extern "C" fn($($ty),*) -> c_int = unsafe { core::mem::transmute(addr) };
            // SAFETY: the caller's contract is the C call's.
            unsafe { real($($arg),*) }
        }
    )*};
}

makes_io_uring! {
    "io_uring_queue_init(3)" fn io_uring_queue_init(entries: u32, ring: *mut c_void, flags: u32);
    "io_uring_queue_init_params(3)" fn io_uring_queue_init_params(entries: u32, ring: *mut c_void, p: *mut c_void);
    "io_uring_queue_init_mem(3)" fn io_uring_queue_init_mem(entries: u32, ring: *mut c_void, p: *mut c_void, buf: *mut c_void, size: usize);
    "io_uring_setup(2) as liburing wraps it" fn io_uring_setup(entries: u32, p: *mut c_void);
}
