//! The exported wrappers: each has the name and C signature of the call it
//! wraps, calls the real one (`sys`) and keeps `table` and `stats` up
//! to date.
//!
//! A data call (`read`, `write`, ...) on a descriptor the table does not
//! track is one bounds check, one load and a tail call to the real call:
//! that is the whole cost the library adds to a program's other files. The
//! tracked path is out of line (`#[cold]`), so the untracked one stays that
//! short. The tracked path counts the bytes, and with hand-over on
//! (`handover::on`) `read` and `write` go through `handover`.

use core::ffi::{c_int, c_void};

use crate::resident_protocol::FOREVER;
use crate::{
    counted_handlers, handover, pid, ring_io, rings, socket_options, stats, sys, table,
    wait_signals,
};

/// Counts a write's result on a tracked descriptor and hands it back.
fn wrote(r: isize) -> isize {
    stats::kernel_wrote(r);
    r
}

/// Counts a read's result on a tracked descriptor and hands it back.
fn read_done(r: isize) -> isize {
    stats::kernel_read(r);
    r
}

/// pipe(2): both ends are recorded.
///
/// # Safety
///
/// As for pipe(2): `fds` points to two ints.
#[no_mangle]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: the caller's contract is pipe(2)'s.
    let r = unsafe { sys::pipe(fds) };
    if r == 0 {
        // SAFETY: on success the kernel filled both ints.
        let (read, write) = unsafe { (*fds, *fds.add(1)) };
        table::made_pipe(read, write);
        ring_io::new_pipe(read, write, 0);
    }
    r
}

/// pipe2(2): both ends are recorded.
///
/// # Safety
///
/// As for pipe2(2).
#[no_mangle]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's contract is pipe2(2)'s.
    let r = unsafe { sys::pipe2(fds, flags) };
    if r == 0 {
        // SAFETY: on success the kernel filled both ints.
        let (read, write) = unsafe { (*fds, *fds.add(1)) };
        table::made_pipe(read, write);
        ring_io::new_pipe(read, write, flags);
    }
    r
}

/// socketpair(2): a Unix stream pair is recorded; any other kind is left
/// alone.
///
/// # Safety
///
/// As for socketpair(2).
#[no_mangle]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    proto: c_int,
    fds: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract is socketpair(2)'s.
    let r = unsafe { sys::socketpair(domain, ty, proto, fds) };
    if r == 0 && domain == sys::AF_UNIX && ty & !sys::SOCK_TYPE_FLAGS == sys::SOCK_STREAM {
        // SAFETY: on success the kernel filled both ints.
        let (a, b) = unsafe { (*fds, *fds.add(1)) };
        // Only here does the library learn which inode is whose peer.
        let (ino_a, ino_b) = if handover::on() {
            sys::keep_errno(|| (handover::socket_inode(a), handover::socket_inode(b)))
        } else {
            (0, 0)
        };
        table::made_socket_pair(a, b, ino_a, ino_b);
        if ino_a != 0 {
            socket_options::made();
        }
        ring_io::new_socket_pair(a, b, ty);
    }
    r
}

/// setsockopt(2): an option at `SOL_SOCKET` (a low-water mark, a receive
/// timeout) may change what a socket end's read may do in the library
/// (`socket_options`).
///
/// # Safety
///
/// As for setsockopt(2).
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: u32,
) -> c_int {
    // The rings carry a socket with no option changed (a low-water mark,
    // a timeout, a buffer's size would each need them to act on it).
    ring_io::spill(fd);
    // SAFETY: the caller's contract is setsockopt(2)'s.
    let r = unsafe { sys::setsockopt(fd, level, name, value, len) };
    if r == 0 && level == sys::SOL_SOCKET {
        socket_options::changed();
    }
    r
}

/// shutdown(2): a socket end shut down for writing, or whose peer was shut
/// down for reading, fails a `write` with `EPIPE`, which a hand-over's
/// writer may have noted it would not (`socket_options`).
///
/// # Safety
///
/// As for shutdown(2).
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    // The ring's bytes go before the end of the stream.
    ring_io::spill(fd);
    // SAFETY: the caller's contract is shutdown(2)'s.
    let r = unsafe { sys::shutdown(fd, how) };
    if r == 0 {
        socket_options::changed();
    }
    r
}

/// close(2).
///
/// # Safety
///
/// As for close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if table::is_tracked(fd) {
        ring_io::closing(fd);
        table::forget(fd);
        rings::forget(fd);
    }
    // SAFETY: the caller's contract is close(2)'s.
    unsafe { sys::close(fd) }
}

/// close_range(2): forgets the range unless it is only marked
/// close-on-exec.
///
/// # Safety
///
/// As for close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: u32, last: u32, flags: c_int) -> c_int {
    closing_range(first, last, flags);
    // SAFETY: the caller's contract is close_range(2)'s.
    unsafe { sys::close_range(first, last, flags) }
}

/// Before `close_range(first, last, flags)`: forgets the range unless the
/// call only marks it close-on-exec or will fail.
pub(crate) fn closing_range(first: u32, last: u32, flags: c_int) {
    // `CLOSE_RANGE_UNSHARE`, `CLOSE_RANGE_CLOEXEC`: with any other flag the
    // kernel closes nothing (`EINVAL`), and nothing is forgotten.
    const KNOWN: c_int = 2 | sys::CLOSE_RANGE_CLOEXEC;
    if flags & !KNOWN == 0 && flags & sys::CLOSE_RANGE_CLOEXEC == 0 && first <= last {
        ring_io::closing_range(first, last);
        table::forget_range(first, last);
        rings::forget_range(first, last);
    }
}

/// closefrom(3).
///
/// # Safety
///
/// As for closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    if low >= 0 {
        closing_range(low as u32, u32::MAX, 0);
    }
    // SAFETY: the caller's contract is closefrom(3)'s.
    unsafe { sys::closefrom(low) }
}

/// dup(2): the copy is what the original is.
///
/// # Safety
///
/// As for dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's contract is dup(2)'s.
    let r = unsafe { sys::dup(fd) };
    if r >= 0 && table::is_tracked(fd) {
        copied(fd, r);
    }
    r
}

/// `to` is now a copy of `from`, which the table tracks, or `to` was.
fn copied(from: c_int, to: c_int) {
    table::copied(from, to);
    if !rings::copied(from, to) {
        // A copy the table cannot hold: its reads and writes would miss
        // the ring.
        ring_io::spill(from);
    }
    if to < 3 {
        // A standard stream: stdio writes it where no wrapper sees.
        ring_io::spill(to);
    }
}

/// dup2(2): `new` becomes what `old` is (or nothing).
///
/// # Safety
///
/// As for dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if new < 3 {
        // Before stdio can write it where no wrapper sees.
        ring_io::spill(old);
    }
    if old != new && table::is_tracked(new) {
        ring_io::closing(new);
    }
    // SAFETY: the caller's contract is dup2(2)'s.
    let r = unsafe { sys::dup2(old, new) };
    if r >= 0 && old != new && (table::is_tracked(old) || table::is_tracked(new)) {
        copied(old, new);
    }
    r
}

/// dup3(2): as `dup2`.
///
/// # Safety
///
/// As for dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if new < 3 {
        ring_io::spill(old);
    }
    if old != new && table::is_tracked(new) {
        ring_io::closing(new);
    }
    // SAFETY: the caller's contract is dup3(2)'s.
    let r = unsafe { sys::dup3(old, new, flags) };
    if r >= 0 && (table::is_tracked(old) || table::is_tracked(new)) {
        copied(old, new);
    }
    r
}

/// Before `fcntl`: a ring's pipe goes to the kernel before it becomes
/// non-blocking, asynchronous or packet-mode (`F_SETFL`) or changes size
/// (`F_SETPIPE_SZ`): the ring carries none of these.
fn before_fcntl(fd: c_int, cmd: c_int, arg: usize) {
    const F_SETFL: c_int = 4;
    const F_SETPIPE_SZ: c_int = 1031;
    const CARRIED_NOT: usize = (sys::O_NONBLOCK | 0o20000 | 0o40000) as usize;
    if (cmd == F_SETFL && arg & CARRIED_NOT != 0) || cmd == F_SETPIPE_SZ {
        ring_io::spill(fd);
    }
}

/// After a successful `fcntl`: `F_DUPFD` and `F_DUPFD_CLOEXEC` made a copy;
/// `F_SETFL` may have changed `O_NONBLOCK` (`socket_options`).
fn after_fcntl(fd: c_int, cmd: c_int, r: c_int) -> c_int {
    const F_SETFL: c_int = 4;
    if r >= 0 && (cmd == sys::F_DUPFD || cmd == sys::F_DUPFD_CLOEXEC) && table::is_tracked(fd) {
        copied(fd, r);
    } else if r >= 0 && cmd == F_SETFL {
        socket_options::changed();
    }
    r
}

/// fcntl(2). Declared with one integer argument where C has `...`: on
/// x86-64 and AArch64 Linux a variadic call passes its integer and pointer
/// arguments in the registers of a plain one, and every `fcntl` command
/// takes at most one such argument.
///
/// # Safety
///
/// As for fcntl(2).
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's contract is fcntl(2)'s.
    fcntl_by(fd, cmd, arg, || unsafe { sys::fcntl(fd, cmd, arg) })
}

/// `fcntl(fd, cmd, arg)` as `call` makes it, with the wrapper's
/// bookkeeping before and after (`fcntl`, `fcntl64`, and the call made by
/// number: `syscall_hook`).
pub(crate) fn fcntl_by(fd: c_int, cmd: c_int, arg: usize, call: impl FnOnce() -> c_int) -> c_int {
    if rings::active() {
        before_fcntl(fd, cmd, arg);
    }
    after_fcntl(fd, cmd, call())
}

/// fcntl64, which glibc's headers call for `fcntl` when a program is built
/// with 64-bit file offsets (coreutils are). As `fcntl`.
///
/// # Safety
///
/// As for fcntl(2).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's contract is fcntl(2)'s.
    fcntl_by(fd, cmd, arg, || unsafe { sys::fcntl64(fd, cmd, arg) })
}

/// fork(2): the child's table and counts become its own.
///
/// # Safety
///
/// As for fork(2).
#[no_mangle]
pub unsafe extern "C" fn fork() -> c_int {
    rings::before_fork();
    // SAFETY: the caller's contract is fork(2)'s.
    after_fork(unsafe { sys::fork() })
}

/// _Fork(3) (glibc 2.34): `fork` without the `atfork` handlers; as `fork`.
///
/// # Safety
///
/// As for _Fork(3).
#[no_mangle]
pub unsafe extern "C" fn _Fork() -> c_int {
    rings::before_fork();
    // SAFETY: the caller's contract is _Fork(3)'s.
    after_fork(unsafe { sys::_Fork() })
}

/// _exit(2): the rings this process's descriptors still hold are counted
/// out first (`rings::at_exit`), as at `exit`.
///
/// # Safety
///
/// As for _exit(2) (none).
#[no_mangle]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    rings::at_exit();
    sys::real_exit(code)
}

/// _Exit(2): as `_exit`.
///
/// # Safety
///
/// As for _exit(2) (none).
#[no_mangle]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
    rings::at_exit();
    sys::real_exit(code)
}

fn after_fork(r: c_int) -> c_int {
    if r == 0 {
        table::after_fork_child();
        stats::after_fork_child();
        wait_signals::after_fork();
        counted_handlers::after_fork();
        pid::after_fork_child();
    } else if r < 0 {
        rings::fork_failed();
    }
    r
}

/// sigaction(2): a handler without `SA_RESTART` is installed behind the
/// library's trampoline, which counts it when it runs, so that a read
/// waiting in the library with signals unblocked ends with `EINTR`
/// (`counted_handlers`, `wait_signals`).
///
/// # Safety
///
/// As for sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const sys::SigAction,
    old: *mut sys::SigAction,
) -> c_int {
    // SAFETY: `act` is null or a `struct sigaction` (the caller's contract).
    if let Some(a) = unsafe { act.as_ref() } {
        // (A trampoline handed back, from a raw query, goes in as it is.)
        if wait_signals::interrupts(a) && !counted_handlers::is_counted(a) {
            // SAFETY: the caller's contract is sigaction(2)'s.
            return unsafe { counted_handlers::install(sig, act, old) };
        }
    }
    // SAFETY: the caller's contract is sigaction(2)'s.
    unsafe { counted_handlers::query(sig, act, old) }
}

/// glibc's exported `__sigaction`, the same call under the name its own
/// code uses: as [`sigaction`].
///
/// # Safety
///
/// As for sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const sys::SigAction,
    old: *mut sys::SigAction,
) -> c_int {
    // SAFETY: the caller's contract is sigaction(2)'s.
    unsafe { sigaction(sig, act, old) }
}

/// pthread_create(3): from now on the process's writes do not hold their
/// signals while they wait for room (`wait_signals::thread_starts`).
///
/// # Safety
///
/// As for pthread_create(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut u64,
    attr: *const core::ffi::c_void,
    start: usize,
    arg: *mut core::ffi::c_void,
) -> c_int {
    wait_signals::thread_starts();
    // SAFETY: the caller's contract is pthread_create(3)'s.
    unsafe { sys::pthread_create(thread, attr, start, arg) }
}

/// Defines the wrapper of a C library call that installs a handler: it
/// counts as one without `SA_RESTART` (installed through the library's
/// internal `sigaction`, which no wrapper sees) when `$interrupts` holds
/// of its arguments, and `$returned` turns what the call returns into
/// what the program should see.
macro_rules! handler_hook {
    ($( $man:literal fn $name:ident($sig:ident: c_int, $arg:ident: $ty:ty) -> $ret:ty, when $interrupts:expr, then $returned:path, in $hold:path; )*) => {$(
        #[doc = concat!($man, ": as `sigaction`.")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($sig: c_int, $arg: $ty) -> $ret {
            if $interrupts {
                wait_signals::before_interrupting_handler();
            }
            // SAFETY: the caller's contract is the C call's.
            $hold(|| $returned($sig, unsafe { sys::$name($sig, $arg) }))
        }
    )*};
}

/// What `siginterrupt` returns, as it is.
fn as_returned(_sig: c_int, r: c_int) -> c_int {
    r
}

// A handler is any disposition but `SIG_DFL` (0), `SIG_IGN` (1) and
// `sigset`'s `SIG_HOLD` (2); glibc's `signal`, `ssignal` and `bsd_signal`
// give `SA_RESTART` unless `siginterrupt` asked otherwise (whose wrapper
// has counted it already), and are wrapped only so that the old handler
// they return is the program's, never the trampoline. Each holds the
// table (`installing`), so that the old handler named is the one the call
// replaced, except `sigset`, which changes the thread's signal mask that
// `installing` puts back.
handler_hook! {
    "signal(2)" fn signal(sig: c_int, handler: usize) -> isize, when false, then counted_handlers::program_handler, in counted_handlers::installing;
    "ssignal(3)" fn ssignal(sig: c_int, handler: usize) -> isize, when false, then counted_handlers::program_handler, in counted_handlers::installing;
    "bsd_signal(3)" fn bsd_signal(sig: c_int, handler: usize) -> isize, when false, then counted_handlers::program_handler, in counted_handlers::installing;
    "sigset(3)" fn sigset(sig: c_int, handler: usize) -> isize, when handler > 2, then counted_handlers::program_handler, in as_it_is;
    "sysv_signal(3)" fn sysv_signal(sig: c_int, handler: usize) -> isize, when handler > 1, then counted_handlers::program_handler, in counted_handlers::installing;
    "signal(2) compiled as System V's (glibc's `__sysv_signal`)" fn __sysv_signal(sig: c_int, handler: usize) -> isize, when handler > 1, then counted_handlers::program_handler, in counted_handlers::installing;
    "siginterrupt(3)" fn siginterrupt(sig: c_int, flag: c_int) -> c_int, when flag != 0, then as_returned, in counted_handlers::installing;
}

/// Runs `f` as it is (for `sigset`, which must not hold the table).
fn as_it_is<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// Defines the wrapper of a call that moves bytes: untracked descriptors
/// go straight to the real call (a tail call, no stack frame); tracked ones
/// take the out-of-line path, which counts the bytes with `$count`.
macro_rules! data_hook {
    ($( $man:literal fn $name:ident($fd:ident: c_int $(, $arg:ident: $ty:ty)*) via $count:path; )*) => {$(
        #[doc = concat!($man, ".")]
        ///
        /// # Safety
        ///
        #[doc = concat!("As for ", $man, ".")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: c_int $(, $arg: $ty)*) -> isize {
            #[cold]
            #[inline(never)]
            unsafe fn tracked($fd: c_int $(, $arg: $ty)*) -> isize {
                // The ring carries plain `read` and `write` only.
                ring_io::spill($fd);
                // SAFETY: the caller's contract is the C call's.
                $count(unsafe { sys::$name($fd $(, $arg)*) })
            }
            if table::is_tracked($fd) {
                // SAFETY: the caller's contract is the C call's.
                return unsafe { tracked($fd $(, $arg)*) };
            }
            // SAFETY: as above.
            unsafe { sys::$name($fd $(, $arg)*) }
        }
    )*};
}

/// read(2): as the other data calls, and with hand-over on, a pipe's read
/// end may take its bytes from a writer directly (`handover`).
///
/// # Safety
///
/// As for read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    #[cold]
    #[inline(never)]
    unsafe fn tracked(fd: c_int, buf: *mut c_void, n: usize) -> isize {
        if let Some((i, false)) = rings::of(fd) {
            // SAFETY: the caller's contract is read(2)'s.
            return unsafe { ring_io::read(fd, i, buf, n) };
        }
        if let Some(i) = rings::socket_of(fd) {
            // A socket pair's end reads the other end's ring; once that
            // is the kernel's for good, hand-overs may carry it.
            if !(handover::on() && rings::ring(i ^ 1).mode() == FOREVER) {
                // SAFETY: the caller's contract is read(2)'s.
                return unsafe { ring_io::read(fd, i ^ 1, buf, n) };
            }
        }
        if handover::on() {
            // SAFETY: the caller's contract is read(2)'s.
            return unsafe { handover::read(fd, buf, n) };
        }
        // SAFETY: as above.
        read_done(unsafe { sys::read(fd, buf, n) })
    }
    if table::is_tracked(fd) {
        // SAFETY: the caller's contract is read(2)'s.
        return unsafe { tracked(fd, buf, n) };
    }
    // SAFETY: as above.
    unsafe { sys::read(fd, buf, n) }
}

/// write(2): as the other data calls, and with hand-over on, a pipe's
/// write end may give its bytes to a waiting reader directly (`handover`).
///
/// # Safety
///
/// As for write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    #[cold]
    #[inline(never)]
    unsafe fn tracked(fd: c_int, buf: *const c_void, n: usize) -> isize {
        if let Some((i, true)) = rings::of(fd) {
            let socket = rings::socket_of(fd).is_some();
            if !(socket && handover::on() && rings::ring(i).mode() == FOREVER) {
                // SAFETY: the caller's contract is write(2)'s.
                return unsafe { ring_io::write(fd, i, socket, buf, n) };
            }
        }
        if handover::on() {
            // SAFETY: the caller's contract is write(2)'s.
            return unsafe { handover::write(fd, buf, n) };
        }
        // SAFETY: as above.
        wrote(unsafe { sys::write(fd, buf, n) })
    }
    if table::is_tracked(fd) {
        // SAFETY: the caller's contract is write(2)'s.
        return unsafe { tracked(fd, buf, n) };
    }
    // SAFETY: as above.
    unsafe { sys::write(fd, buf, n) }
}

data_hook! {
    "readv(2)" fn readv(fd: c_int, iov: *const c_void, cnt: c_int) via read_done;
    "recv(2)" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) via read_done;
    "recvfrom(2)" fn recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut c_void, alen: *mut u32) via read_done;
    "recvmsg(2)" fn recvmsg(fd: c_int, msg: *mut c_void, flags: c_int) via read_done;
    "writev(2)" fn writev(fd: c_int, iov: *const c_void, cnt: c_int) via wrote;
    "send(2)" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) via wrote;
    "sendto(2)" fn sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const c_void, alen: u32) via wrote;
}

#[cfg(test)]
mod tests {
    //! The bookkeeping, driven through the wrappers themselves (in this
    //! test program they are its own `pipe`, `close`, ...).

    use super::*;
    use std::sync::Mutex;

    /// Descriptor numbers are the process's: tests that make and close
    /// them run one at a time, so none sees another's reuse of a number.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn new_pipe() -> [c_int; 2] {
        let mut fds = [0; 2];
        // SAFETY: two ints to fill.
        assert_eq!(unsafe { pipe(fds.as_mut_ptr()) }, 0);
        fds
    }

    #[test]
    fn pipes_dups_and_closes_are_tracked() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        table::after_fork_child(); // this process owns the table
        let [r, w] = new_pipe();
        assert_eq!(
            (table::kind(r), table::kind(w)),
            (table::PIPE_READ, table::PIPE_WRITE)
        );
        // SAFETY: plain descriptor calls on descriptors this test owns.
        unsafe {
            let d = dup(w);
            assert_eq!(table::kind(d), table::PIPE_WRITE);
            let f = fcntl(r, sys::F_DUPFD_CLOEXEC, 100);
            assert!(f >= 100);
            assert_eq!(table::kind(f), table::PIPE_READ);
            // A file duplicated over a tracked number clears it.
            let null = sys::open(c"/dev/null".as_ptr(), sys::O_RDWR | sys::O_CLOEXEC, 0);
            assert_eq!(dup2(null, d), d);
            assert_eq!(table::kind(d), 0);
            assert_eq!(write(w, b"x".as_ptr().cast(), 1), 1);
            for fd in [r, w, d, f, null] {
                assert_eq!(close(fd), 0);
                assert_eq!(table::kind(fd), 0);
            }
        }
    }

    #[test]
    fn only_unix_stream_pairs_are_tracked() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        table::after_fork_child();
        let mut s = [0; 2];
        // SAFETY: two ints to fill; the descriptors are closed below.
        unsafe {
            assert_eq!(
                socketpair(
                    sys::AF_UNIX,
                    sys::SOCK_STREAM | sys::O_CLOEXEC,
                    0,
                    s.as_mut_ptr()
                ),
                0
            );
            assert_eq!(table::kind(s[0]), table::STREAM_SOCKET);
            close(s[0]);
            close(s[1]);
            const SOCK_DGRAM: c_int = 2;
            assert_eq!(socketpair(sys::AF_UNIX, SOCK_DGRAM, 0, s.as_mut_ptr()), 0);
            assert_eq!(table::kind(s[0]), 0);
            close(s[0]);
            close(s[1]);
        }
    }

    #[test]
    fn negative_and_huge_descriptors_are_never_tracked() {
        assert!(!table::is_tracked(-1));
        assert!(!table::is_tracked(c_int::MAX));
        assert!(!table::is_tracked(table::TRACKED_FDS as c_int));
    }

    /// Hand-over on, this test alone among those that use it, and a new
    /// pipe (read end, write end) made through the hook; the caller
    /// closes both ends.
    fn handover_pipe() -> (std::sync::MutexGuard<'static, ()>, c_int, c_int) {
        let one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        handover::map_arena();
        handover::forget_process_misses();
        table::after_fork_child();
        let mut fds = [0; 2];
        // SAFETY: two ints to fill.
        assert_eq!(unsafe { pipe(fds.as_mut_ptr()) }, 0);
        (one, fds[0], fds[1])
    }

    /// Hand-over between two threads of this program. Once on, it stays
    /// on for the other tests here, whose pipes then take its paths too.
    #[test]
    fn a_waiting_reader_gets_every_write_whole_and_in_order() {
        let (_one, r, w) = handover_pipe();
        let reader = std::thread::spawn(move || {
            let (mut got, mut buf) = (Vec::new(), vec![0u8; handover::MAX]);
            loop {
                // SAFETY: `buf` has room for MAX bytes.
                let k = unsafe { read(r, buf.as_mut_ptr().cast(), buf.len()) };
                assert!(k >= 0, "read failed");
                if k == 0 {
                    return got;
                }
                got.extend_from_slice(&buf[..k as usize]);
            }
        });
        let mut sent = Vec::new();
        for i in 0..2000usize {
            let m = vec![(i % 251) as u8; 1 + i * 37 % 5000];
            // SAFETY: `m` holds m.len() bytes.
            let k = unsafe { write(w, m.as_ptr().cast(), m.len()) };
            assert_eq!(k, m.len() as isize);
            sent.extend_from_slice(&m);
            if i % 7 == 0 {
                std::thread::yield_now(); // let the reader wait sometimes
            }
        }
        // SAFETY: our own descriptor.
        unsafe { close(w) };
        let got = reader.join().unwrap();
        // SAFETY: our own descriptor.
        unsafe { close(r) };
        assert!(
            got == sent,
            "{} bytes read, {} written",
            got.len(),
            sent.len()
        );
        // How many went by hand-over depends on where the scheduler put
        // the two threads (on one CPU, none: the reader leaves them to the
        // kernel); run.rs's tests pin two processes to two CPUs and check it.
        eprintln!(
            "handed over: {} writes",
            handover::HANDED.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    /// Resident rings between two threads of this program (stage 2b):
    /// every byte in order, EOF, and a spill (`fdopen` here) that puts
    /// what the ring holds ahead of every later kernel byte.
    #[test]
    fn a_ring_pipe_keeps_every_byte_in_order_and_spills_them_first() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        rings::turn_on();
        table::after_fork_child();
        let [r, w] = new_pipe();
        assert!(rings::of(r).is_some() && rings::of(w).is_some(), "no ring");
        let reader = std::thread::spawn(move || {
            let (mut got, mut buf) = (Vec::new(), vec![0u8; 100_000]);
            loop {
                let len = 1 + got.len() % buf.len();
                // SAFETY: `buf` has room for `len` bytes.
                let k = unsafe { read(r, buf.as_mut_ptr().cast(), len) };
                assert!(k >= 0, "read failed");
                if k == 0 {
                    return got;
                }
                got.extend_from_slice(&buf[..k as usize]);
            }
        });
        let mut sent = Vec::new();
        for i in 0..3000usize {
            let m = vec![(i % 251) as u8; 1 + i * 7919 % 70_000];
            // SAFETY: `m` holds m.len() bytes.
            let k = unsafe { write(w, m.as_ptr().cast(), m.len()) };
            assert_eq!(k, m.len() as isize);
            sent.extend_from_slice(&m);
        }
        // SAFETY: our own descriptor.
        unsafe { close(w) };
        let got = reader.join().unwrap();
        assert!(
            got == sent,
            "{} bytes read, {} written",
            got.len(),
            sent.len()
        );
        // SAFETY: our own descriptor.
        unsafe { close(r) };

        // The ring's bytes, then the spill, then kernel bytes: a plain
        // kernel read sees them in that order.
        let [r, w] = new_pipe();
        // SAFETY: plain calls on descriptors this test owns.
        unsafe {
            assert_eq!(write(w, b"ring ".as_ptr().cast(), 5), 5);
            assert_eq!(
                rings::ring(rings::of(w).unwrap().0).mode(),
                0,
                "not in RING mode"
            );
            ring_io::spill(r);
            assert_eq!(write(w, b"kernel".as_ptr().cast(), 6), 6);
            let mut buf = [0u8; 32];
            let k = sys::read(r, buf.as_mut_ptr().cast(), buf.len());
            assert_eq!(&buf[..k as usize], b"ring kernel");
            close(r);
            close(w);
        }
    }

    /// A ring counts the descriptors that hold its ends through `dup`,
    /// `dup2` (onto a ring's descriptor too), `F_DUPFD`, `fork` and
    /// `close`, and is free once none is left.
    #[test]
    fn a_ring_counts_its_holders_and_is_freed_by_the_last_close() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        rings::turn_on();
        table::after_fork_child();
        let [r, w] = new_pipe();
        let (i, _) = rings::of(r).expect("a ring");
        assert_eq!(rings::holders(i), (1, 1));
        // SAFETY: plain descriptor calls on descriptors this test owns.
        unsafe {
            let d = dup(w);
            let f = fcntl(r, sys::F_DUPFD_CLOEXEC, 200);
            assert_eq!(rings::holders(i), (2, 2));
            // A second pipe's end duplicated over `d`: `d` leaves ring i.
            let [r2, w2] = new_pipe();
            let (j, _) = rings::of(r2).expect("a second ring");
            assert_eq!(dup2(w2, d), d);
            assert_eq!((rings::holders(i), rings::holders(j)), ((2, 1), (1, 2)));
            for fd in [r, w, f, d, r2, w2] {
                close(fd);
            }
            assert_eq!((rings::holders(i), rings::holders(j)), ((0, 0), (0, 0)));
            // The child of a fork holds one more of each end; its closes
            // count, and so does what it still holds at `_exit`.
            let [r, w] = new_pipe();
            let (k, _) = rings::of(r).expect("a ring");
            extern "C" {
                fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
                fn _exit(code: c_int) -> !;
            }
            let pid = fork();
            if pid == 0 {
                close(r);
                _exit(0); // its `w` is counted out here
            }
            let mut status = 0;
            assert_eq!(waitpid(pid, &mut status, 0), pid);
            assert_eq!(rings::holders(k), (1, 1), "the child's `w` is counted out");
            // A child that started a thread leaves what it holds counted:
            // another thread might still be using the ring.
            let pid = fork();
            if pid == 0 {
                crate::wait_signals::thread_starts();
                _exit(0);
            }
            assert_eq!(waitpid(pid, &mut status, 0), pid);
            assert_eq!(rings::holders(k), (2, 2));
            close(r);
            close(w);
            assert_eq!(
                rings::holders(k),
                (1, 1),
                "the threaded child's ends stay counted"
            );
        }
    }

    /// Pins the calling thread to `cpu`; false if it cannot be.
    fn pin(cpu: usize) -> bool {
        extern "C" {
            fn sched_setaffinity(pid: c_int, len: usize, set: *const u64) -> c_int;
        }
        let mut set = [0u64; 16];
        set[cpu / 64] = 1 << (cpu % 64);
        // SAFETY: a 128-byte CPU set; pid 0 is this thread.
        unsafe { sched_setaffinity(0, 128, set.as_ptr()) == 0 }
    }

    /// A pipe whose writer never hands over (it writes more than MAX bytes
    /// at a time) soon stops costing its reader waits: after MISSES
    /// fruitless ones, only every PROBE-th read does.
    #[test]
    fn a_reader_stops_waiting_for_a_writer_that_never_hands_over() {
        let (_one, r, w) = handover_pipe();
        const CHUNKS: usize = 300;
        let writer = std::thread::spawn(move || {
            let pinned = pin(1);
            let m = vec![7u8; 2 * handover::MAX];
            for _ in 0..CHUNKS {
                // SAFETY: `m` holds m.len() bytes.
                let k = unsafe { write(w, m.as_ptr().cast(), m.len()) };
                assert_eq!(k, m.len() as isize);
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            // SAFETY: our own descriptor.
            unsafe { close(w) };
            pinned
        });
        let pinned = pin(0);
        let before = handover::WAITS.load(std::sync::atomic::Ordering::Relaxed);
        let (mut total, mut reads, mut buf) = (0usize, 0u64, vec![0u8; handover::MAX]);
        loop {
            // SAFETY: `buf` has room for MAX bytes.
            let k = unsafe { read(r, buf.as_mut_ptr().cast(), buf.len()) };
            reads += 1;
            assert!(k >= 0, "read failed");
            if k == 0 {
                break;
            }
            total += k as usize;
        }
        let waits = handover::WAITS.load(std::sync::atomic::Ordering::Relaxed) - before;
        let pinned = writer.join().unwrap() && pinned;
        // SAFETY: our own descriptor.
        unsafe { close(r) };
        assert_eq!(total, CHUNKS * 2 * handover::MAX);
        eprintln!("reads that waited: {waits} of {reads}, for {CHUNKS} writes");
        if !pinned {
            eprintln!("two CPUs could not be had: the reader never waits, nothing to check");
            return;
        }
        // Without the limit, every read that finds the pipe empty waits:
        // about two per write (a write of twice the pipe's size goes in in
        // two halves), nearly every read. With it: MISSES, then one read in
        // PROBE, plus waits that found the writer's bytes in the kernel
        // pipe at once (not misses, and as cheap as a look).
        assert!(
            waits <= u64::from(handover::MISSES) + 2 * reads / u64::from(handover::PROBE) + 8,
            "{waits} reads waited for a writer that never hands over"
        );
    }

    /// A process that reads each child's output from a new pipe (a shell's
    /// `$(...)`) whose writer never hands over stops waiting too, though
    /// each pipe's own count starts again: after MISSES fruitless waits in
    /// a row in the process, only every PROBE-th read waits.
    #[test]
    fn a_process_stops_waiting_on_new_pipes_that_never_hand_over() {
        let (_one, r0, w0) = handover_pipe();
        // SAFETY: descriptors of this test.
        unsafe {
            close(r0);
            close(w0);
        }
        const PIPES: usize = 96;
        let (to_writer, writer_gets) = std::sync::mpsc::channel::<c_int>();
        let writer = std::thread::spawn(move || {
            let pinned = pin(1);
            let m = [7u8; 10];
            for w in writer_gets {
                // Later than a reader takes to start waiting, and on a
                // path the library does not see (as stdio's writes are).
                std::thread::sleep(std::time::Duration::from_micros(300));
                // SAFETY: `m` holds m.len() bytes; `w` is this test's.
                let k = unsafe { sys::write(w, m.as_ptr().cast(), m.len()) };
                assert_eq!(k, m.len() as isize);
                // SAFETY: as above.
                unsafe { close(w) };
            }
            pinned
        });
        let pinned = pin(0);
        let before = handover::WAITS.load(std::sync::atomic::Ordering::Relaxed);
        let mut buf = vec![0u8; 100];
        for _ in 0..PIPES {
            let mut fds = [0; 2];
            // SAFETY: two ints to fill.
            assert_eq!(unsafe { pipe(fds.as_mut_ptr()) }, 0);
            to_writer.send(fds[1]).unwrap();
            let mut total = 0;
            loop {
                // SAFETY: `buf` has room for its length.
                let k = unsafe { read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
                assert!(k >= 0, "read failed");
                if k == 0 {
                    break;
                }
                total += k as usize;
            }
            assert_eq!(total, 10);
            // SAFETY: this test's descriptor.
            unsafe { close(fds[0]) };
        }
        drop(to_writer);
        let waits = handover::WAITS.load(std::sync::atomic::Ordering::Relaxed) - before;
        let pinned = writer.join().unwrap() && pinned;
        eprintln!("reads that waited: {waits}, over {PIPES} new pipes");
        if !pinned {
            eprintln!("two CPUs could not be had: the reader never waits, nothing to check");
            return;
        }
        // Without the process's count, every read that finds a new pipe
        // empty waits (each pipe's count starts at 0): two a pipe, the
        // first and the one that ends at EOF.
        assert!(
            waits
                <= u64::from(handover::MISSES) + 2 * PIPES as u64 / u64::from(handover::PROBE) + 8,
            "{waits} reads waited on new pipes that never hand over"
        );
    }
}
