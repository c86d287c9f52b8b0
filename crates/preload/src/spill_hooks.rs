//! The wrappers that hand a ring's pipe to the kernel for good, its ring's
//! bytes first (`ring_io::spill`), before a call the library does not
//! carry may touch it: every `exec` (the new image may lack the library,
//! and does not know the ring), `posix_spawn`, `system` and `popen`
//! (glibc's spawn `exec`s through calls no wrapper sees), a stdio stream
//! bound to it (`fdopen`, `dprintf`, `vdprintf`: glibc writes those
//! through its internal `__write`), readiness (`poll`, `ppoll`, `select`,
//! `pselect`, `epoll_ctl`: the kernel's answer is then the whole answer),
//! `ioctl`, the kernel's zero-copy calls (`splice`, `tee`, `vmsplice`,
//! `sendfile`, `copy_file_range`) and descriptor passing (`SCM_RIGHTS` in
//! `sendmsg`). docs/run.md, "2b wired", gives the list and the reasons.
//!
//! Each does nothing more than one load while no ring exists in the
//! process (`rings::active`), then calls the real call.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::{checked, pid, ring_io, rings, socket_options, stats, sys, table};

/// Spills `fd`'s ring, if it has one.
#[inline(always)]
pub(crate) fn spill(fd: c_int) {
    if rings::active() && rings::of(fd).is_some() {
        ring_io::spill(fd);
    }
}

/// Spills every ring descriptor an `exec` passes on; the new image may
/// change the options of the socket ends it gets unseen.
pub(crate) fn before_exec() {
    socket_options::leaving();
    if rings::active() {
        ring_io::spill_all(true);
    }
}

/// Spills every ring descriptor (file actions may pass close-on-exec ones);
/// as [`before_exec`] for socket ends.
fn before_spawn() {
    socket_options::leaving();
    if rings::active() {
        ring_io::spill_all(false);
    }
}

fn resolve_one(slot: &AtomicUsize, name: &[u8]) {
    // SAFETY: a NUL-terminated name; RTLD_NEXT.
    let a = unsafe { sys::dlsym(-1isize as *mut c_void, name.as_ptr().cast()) } as usize;
    slot.store(a, Ordering::Relaxed);
}

type Ptr = *const c_void;

/// Defines wrappers that spill some of their arguments' rings (or every
/// inheritable one) and then make the real call.
macro_rules! spilling {
    ($( $man:literal fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, spilling $what:expr; )*) => {$(
        #[doc = concat!($man, ": hands the pipes it may pass on, or touch, to the kernel first.")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $what;
            // SAFETY: the caller's contract is the C call's.
            unsafe { sys::$name($($arg),*) }
        }
    )*};
}

spilling! {
    "execve(2)" fn execve(path: *const c_char, argv: Ptr, envp: Ptr) -> c_int, spilling before_exec();
    "execv(3)" fn execv(path: *const c_char, argv: Ptr) -> c_int, spilling before_exec();
    "execvp(3)" fn execvp(file: *const c_char, argv: Ptr) -> c_int, spilling before_exec();
    "execvpe(3)" fn execvpe(file: *const c_char, argv: Ptr, envp: Ptr) -> c_int, spilling before_exec();
    "fexecve(3)" fn fexecve(fd: c_int, argv: Ptr, envp: Ptr) -> c_int, spilling before_exec();
    "execveat(2)" fn execveat(dirfd: c_int, path: *const c_char, argv: Ptr, envp: Ptr, flags: c_int) -> c_int, spilling before_exec();
    // File actions may give a close-on-exec descriptor to the child.
    "posix_spawn(3)" fn posix_spawn(pid: *mut c_int, path: *const c_char, acts: Ptr, attr: Ptr, argv: Ptr, envp: Ptr) -> c_int, spilling before_spawn();
    "posix_spawnp(3)" fn posix_spawnp(pid: *mut c_int, file: *const c_char, acts: Ptr, attr: Ptr, argv: Ptr, envp: Ptr) -> c_int, spilling before_spawn();
    "system(3)" fn system(cmd: *const c_char) -> c_int, spilling before_exec();
    "popen(3)" fn popen(cmd: *const c_char, mode: *const c_char) -> *mut c_void, spilling before_exec();
    // glibc's `fclose` closes the descriptor unseen (`table::distrust`).
    "fdopen(3)" fn fdopen(fd: c_int, mode: *const c_char) -> *mut c_void, spilling { spill(fd); table::distrust(fd) };
    "vdprintf(3)" fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int, spilling spill(fd);
    "vdprintf(3) built with _FORTIFY_SOURCE" fn __vdprintf_chk(fd: c_int, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int, spilling spill(fd);
    "splice(2)" fn splice(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, len: usize, flags: u32) -> isize, spilling { spill(fd_in); spill(fd_out) };
    "tee(2)" fn tee(fd_in: c_int, fd_out: c_int, len: usize, flags: u32) -> isize, spilling { spill(fd_in); spill(fd_out) };
    "vmsplice(2)" fn vmsplice(fd: c_int, iov: Ptr, count: usize, flags: u32) -> isize, spilling spill(fd);
    "sendfile(2)" fn sendfile(out: c_int, inp: c_int, off: *mut i64, count: usize) -> isize, spilling { spill(out); spill(inp) };
    "sendfile64(2)" fn sendfile64(out: c_int, inp: c_int, off: *mut i64, count: usize) -> isize, spilling { spill(out); spill(inp) };
    "copy_file_range(2)" fn copy_file_range(fd_in: c_int, off_in: *mut i64, fd_out: c_int, off_out: *mut i64, len: usize, flags: u32) -> isize, spilling { spill(fd_in); spill(fd_out) };
    "poll(2)" fn poll(fds: *mut sys::PollFd, count: u64, timeout: c_int) -> c_int, spilling spill_polled(fds, count);
    "ppoll(2)" fn ppoll(fds: *mut sys::PollFd, count: u64, ts: Ptr, mask: Ptr) -> c_int, spilling spill_polled(fds, count);
    "select(2)" fn select(nfds: c_int, r: *mut u64, w: *mut u64, e: *mut u64, tv: Ptr) -> c_int, spilling spill_selected(nfds, [r, w, e]);
    "pselect(2)" fn pselect(nfds: c_int, r: *mut u64, w: *mut u64, e: *mut u64, ts: Ptr, mask: Ptr) -> c_int, spilling spill_selected(nfds, [r, w, e]);
    "epoll_ctl(2)" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut c_void) -> c_int, spilling spill(fd);
    // Socket calls the rings do not carry, which reach the kernel socket
    // past `recv` and `send` (the fortified ones through glibc's internal
    // `__recv`, which no wrapper sees).
    "recv(2) built with _FORTIFY_SOURCE" fn __recv_chk(fd: c_int, buf: Ptr, n: usize, size: usize, flags: c_int) -> isize, spilling spill(fd);
    "recvfrom(2) built with _FORTIFY_SOURCE" fn __recvfrom_chk(fd: c_int, buf: Ptr, n: usize, size: usize, flags: c_int, addr: Ptr, alen: Ptr) -> isize, spilling spill(fd);
    "recvmmsg(2)" fn recvmmsg(fd: c_int, vec: Ptr, vlen: u32, flags: c_int, timeout: Ptr) -> c_int, spilling spill(fd);
    "sendmmsg(2)" fn sendmmsg(fd: c_int, vec: Ptr, vlen: u32, flags: c_int) -> c_int, spilling spill(fd);
    // `FIONREAD`, `FIONBIO`, `FIOASYNC`: each would see the kernel pipe only.
    // Pipes take offset -1 (the file's position): the kernel's bytes only.
    "preadv(2)" fn preadv(fd: c_int, iov: Ptr, cnt: c_int, off: i64) -> isize, spilling spill(fd);
    "pwritev(2)" fn pwritev(fd: c_int, iov: Ptr, cnt: c_int, off: i64) -> isize, spilling spill(fd);
    "preadv2(2)" fn preadv2(fd: c_int, iov: *const sys::IoVec, cnt: c_int, off: i64, flags: c_int) -> isize, spilling spill(fd);
    "pwritev2(2)" fn pwritev2(fd: c_int, iov: Ptr, cnt: c_int, off: i64, flags: c_int) -> isize, spilling spill(fd);
    "preadv64(2)" fn preadv64(fd: c_int, iov: Ptr, cnt: c_int, off: i64) -> isize, spilling spill(fd);
    "pwritev64(2)" fn pwritev64(fd: c_int, iov: Ptr, cnt: c_int, off: i64) -> isize, spilling spill(fd);
    "preadv64v2(2)" fn preadv64v2(fd: c_int, iov: Ptr, cnt: c_int, off: i64, flags: c_int) -> isize, spilling spill(fd);
    "pwritev64v2(2)" fn pwritev64v2(fd: c_int, iov: Ptr, cnt: c_int, off: i64, flags: c_int) -> isize, spilling spill(fd);
}

/// ioctl(2), declared with one word argument (see `fcntl` in `hooks`):
/// hands the pipe to the kernel first (`FIONREAD`, `FIONBIO`, `FIOASYNC`
/// would each see the kernel pipe only); `FIONBIO` may change a socket
/// end's `O_NONBLOCK` (`socket_options`).
///
/// # Safety
///
/// As for ioctl(2).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: u64, arg: usize) -> c_int {
    spill(fd);
    // SAFETY: the caller's contract is ioctl(2)'s.
    let r = unsafe { sys::ioctl(fd, req, arg) };
    if r >= 0 && req == sys::FIONBIO {
        socket_options::changed();
    }
    r
}

/// `__read_chk` (`read` built with `_FORTIFY_SOURCE` where the buffer's
/// size is known): glibc's calls its internal `__read`, which no wrapper
/// sees, so a length within the buffer goes to the library's `read`.
///
/// # Safety
///
/// As for read(2), `buf` being `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, size: usize) -> isize {
    if n > size {
        // SAFETY: glibc's check fails the program, as natively.
        return unsafe { sys::__read_chk(fd, buf, n, size) };
    }
    // SAFETY: the caller's contract is read(2)'s.
    unsafe { crate::hooks::read(fd, buf, n) }
}

/// `__poll_chk` (`poll` built with `_FORTIFY_SOURCE`): as `poll`.
///
/// # Safety
///
/// As for poll(2).
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut sys::PollFd,
    count: u64,
    timeout: c_int,
    size: usize,
) -> c_int {
    if rings::active() {
        spill_polled(fds, count);
    }
    // SAFETY: the caller's contract is poll(2)'s.
    unsafe { sys::__poll_chk(fds, count, timeout, size) }
}

/// `__ppoll_chk`: as `ppoll`.
///
/// # Safety
///
/// As for ppoll(2).
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut sys::PollFd,
    count: u64,
    ts: Ptr,
    mask: Ptr,
    size: usize,
) -> c_int {
    if rings::active() {
        spill_polled(fds, count);
    }
    // SAFETY: the caller's contract is ppoll(2)'s.
    unsafe { sys::__ppoll_chk(fds, count, ts, mask, size) }
}

/// sendmsg(2): hands the pipes whose descriptors it passes (`SCM_RIGHTS`)
/// to the kernel first, and counts the bytes on a tracked socket.
///
/// # Safety
///
/// As for sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: Ptr, flags: c_int) -> isize {
    if rings::active() || socket_options::any_made() {
        spill(fd);
        each_passed(msg, |passed| {
            spill(passed);
            if table::kind(passed) == table::STREAM_SOCKET {
                socket_options::leaving();
            }
        });
    }
    // SAFETY: the caller's contract is sendmsg(2)'s.
    let r = unsafe { sys::sendmsg(fd, msg, flags) };
    if table::is_tracked(fd) {
        stats::kernel_wrote(r);
    }
    r
}

/// Spills the rings of the descriptors in `fds[..count]`, once the kernel
/// says that memory is readable (else `poll` fails with `EFAULT`, and no
/// ring is touched).
pub(crate) fn spill_polled(fds: *mut sys::PollFd, count: u64) {
    if !rings::active() {
        return;
    }
    let len = (count as usize).saturating_mul(core::mem::size_of::<sys::PollFd>());
    if fds.is_null()
        || len > checked::MAX_LEN
        || !checked::readable(pid::mine() as c_int, fds.cast(), len)
    {
        return; // the kernel answers `EFAULT` or `EINVAL`; no ring is touched
    }
    for k in 0..count as usize {
        // SAFETY: inside the checked array.
        spill(unsafe { (*fds.add(k)).fd });
    }
}

/// Spills the rings of the descriptors set in any of `sets`, below `nfds`
/// (each set checked readable first).
pub(crate) fn spill_selected(nfds: c_int, sets: [*mut u64; 3]) {
    if !rings::active() {
        return;
    }
    if nfds > 1024 {
        // Past an `fd_set` (glibc's `select` takes larger sets): every ring.
        ring_io::spill_all(false);
        return;
    }
    let n = nfds.max(0) as usize;
    let words = n.div_ceil(64);
    for set in sets {
        if set.is_null() || !checked::readable(pid::mine() as c_int, set.cast(), words * 8) {
            continue;
        }
        rings::each(|fd, _, _| {
            let fd = fd as usize;
            // SAFETY: word fd / 64 < words lies in the checked set.
            if fd < n && unsafe { *set.add(fd / 64) } & (1 << (fd % 64)) != 0 {
                ring_io::spill(fd as c_int);
            }
        });
    }
}

/// Calls `f` with each descriptor a `sendmsg` passes (`SCM_RIGHTS`); `msg`
/// (a `struct msghdr`) and its control data are checked readable before
/// they are read.
fn each_passed(msg: Ptr, mut f: impl FnMut(c_int)) {
    // struct msghdr on 64-bit Linux: msg_control at 32, msg_controllen at 40.
    const HDR: usize = 56;
    let me = pid::mine() as c_int;
    if msg.is_null() || !checked::readable(me, msg, HDR) {
        return;
    }
    // SAFETY: the 56 checked bytes of the header.
    let (control, len) = unsafe {
        (
            msg.cast::<u8>()
                .add(32)
                .cast::<*const u8>()
                .read_unaligned(),
            msg.cast::<u8>().add(40).cast::<usize>().read_unaligned(),
        )
    };
    if control.is_null()
        || len == 0
        || len > checked::MAX_LEN
        || !checked::readable(me, control.cast(), len)
    {
        return;
    }
    // struct cmsghdr: cmsg_len (usize), cmsg_level, cmsg_type (ints), data;
    // each aligned to 8.
    let mut at = 0;
    while at + 16 <= len {
        // SAFETY: inside the checked control buffer.
        let (clen, level, kind) = unsafe {
            let c = control.add(at);
            (
                c.cast::<usize>().read_unaligned(),
                c.add(8).cast::<c_int>().read_unaligned(),
                c.add(12).cast::<c_int>().read_unaligned(),
            )
        };
        if clen < 16 || at + clen > len {
            return;
        }
        if level == sys::SOL_SOCKET && kind == 1 {
            for k in 0..(clen - 16) / 4 {
                // SAFETY: inside this message's data.
                f(unsafe {
                    control
                        .add(at + 16 + 4 * k)
                        .cast::<c_int>()
                        .read_unaligned()
                });
            }
        }
        at += (clen + 7) & !7;
    }
}

/// The variadic calls (`execl`, `execlp`, `execle`, `dprintf`): their
/// arguments cannot be taken apart in Rust, so each wrapper is a few
/// instructions that keep every argument register, call the spill, and
/// jump to the real call with the arguments as they came.
static REAL_EXECL: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECLP: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECLE: AtomicUsize = AtomicUsize::new(0);
static REAL_DPRINTF: AtomicUsize = AtomicUsize::new(0);
static REAL_DPRINTF_CHK: AtomicUsize = AtomicUsize::new(0);

/// Looks the variadic calls' real definitions up (from the constructor:
/// a `vfork` child must not call `dlsym`, which may allocate).
pub fn resolve() {
    resolve_one(&REAL_EXECL, b"execl\0");
    resolve_one(&REAL_EXECLP, b"execlp\0");
    resolve_one(&REAL_EXECLE, b"execle\0");
    resolve_one(&REAL_DPRINTF, b"dprintf\0");
    resolve_one(&REAL_DPRINTF_CHK, b"__dprintf_chk\0");
}

extern "C" fn variadic_exec(_: usize) {
    before_exec();
}

extern "C" fn variadic_dprintf(fd: usize) {
    spill(fd as c_int);
}

/// Defines a variadic wrapper: keeps the argument registers (the integer
/// ones, `al` and the vector ones a variadic call may pass), calls
/// `$before` with the first argument, restores them, and jumps to the
/// real call, whose address the constructor found.
macro_rules! variadic {
    ($( $man:literal fn $name:ident via $before:ident, $real:ident; )*) => {$(
        #[doc = concat!($man, ": as the other spilling wrappers (a variadic call, so written in assembly).")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                // Entry: rsp is 8 modulo 16; seven pushes (56 bytes) make it
                // 0, and the vector registers' 128 bytes keep it so for the
                // call (136 left it at 8: a reviewer's `execl` crashed on
                // an aligned store in the spill).
                "push rdi", "push rsi", "push rdx", "push rcx", "push r8", "push r9", "push rax",
                "sub rsp, 128",
                "movdqu [rsp], xmm0", "movdqu [rsp + 16], xmm1",
                "movdqu [rsp + 32], xmm2", "movdqu [rsp + 48], xmm3",
                "movdqu [rsp + 64], xmm4", "movdqu [rsp + 80], xmm5",
                "movdqu [rsp + 96], xmm6", "movdqu [rsp + 112], xmm7",
                "call {before}",
                "movdqu xmm0, [rsp]", "movdqu xmm1, [rsp + 16]",
                "movdqu xmm2, [rsp + 32]", "movdqu xmm3, [rsp + 48]",
                "movdqu xmm4, [rsp + 64]", "movdqu xmm5, [rsp + 80]",
                "movdqu xmm6, [rsp + 96]", "movdqu xmm7, [rsp + 112]",
                "add rsp, 128",
                "pop rax", "pop r9", "pop r8", "pop rcx", "pop rdx", "pop rsi", "pop rdi",
                "jmp qword ptr [rip + {real}]",
                before = sym $before,
                real = sym $real,
            )
        }
    )*};
}

variadic! {
    "execl(3)" fn execl via variadic_exec, REAL_EXECL;
    "execlp(3)" fn execlp via variadic_exec, REAL_EXECLP;
    "execle(3)" fn execle via variadic_exec, REAL_EXECLE;
    "dprintf(3)" fn dprintf via variadic_dprintf, REAL_DPRINTF;
    "dprintf(3) built with _FORTIFY_SOURCE" fn __dprintf_chk via variadic_dprintf, REAL_DPRINTF_CHK;
}
