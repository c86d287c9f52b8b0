//! The hooks' paths through a pipe's resident ring (stage 2b,
//! on by default, `switch`; docs/run.md, "2b wired"): `read` and `write` on
//! a descriptor whose pipe has a ring (`rings`), a new pipe's ring, and
//! the spill that hands a pipe to the kernel for good, the ring's bytes
//! first, before anything the library does not see may touch it.
//!
//! A write copies into the ring and publishes with one compare-and-swap; a
//! read takes from it; neither makes a system call while the reader is
//! awake. The protocol (`resident_protocol`) decides when bytes go through
//! the kernel pipe instead, and says why.

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};

use crate::counted_handlers;
use crate::resident::{
    Budget, ReadSide, Ring, SpillSide, Wait, WriteSide, YieldOnce, CAPACITY, PIPE_BUF,
};
use crate::resident_protocol::{self as protocol, Taken, Written, FOREVER, KERNEL, RING};
use crate::rings::Entry;
use crate::stats::{kernel_read_call as kernel_read, kernel_write_call as kernel_write};
use crate::sys::SOCK_NONBLOCK;
use crate::wait_signals::{self, RoomWait, WaitMask};
use crate::{checked, pid, rings, stats, sys, table};

/// How long a reader that finds the ring empty waits for a writer before
/// it sleeps in the kernel (ns): the upper end of a cross-CPU wake-up on
/// the CPUs measured (40-80 us), so a wait that fails costs at most about
/// what the sleep it avoids would have. Only speed depends on it.
const WAIT_NS: i64 = 50_000;
/// How often a writer with room asks the kernel whether a reader is left
/// (ns): the bound on how long it may write into a ring nobody reads.
/// Counted by the coarse clock, which every write reads, so the bound is
/// this plus a timer tick (1-10 ms).
const READER_CHECK_NS: i64 = 1_000_000;
/// How much of a long write is published at once (see `write`).
const PIECE: usize = 16 * 1024;
/// `F_GETFD`, `FD_CLOEXEC`.
const F_GETFD: c_int = 1;
const FD_CLOEXEC: c_int = 1;
/// `O_DIRECT`: a packet-mode pipe, whose reads keep write boundaries.
const O_DIRECT: c_int = 0o40000;
/// `EFAULT`.
const EFAULT: c_int = 14;

/// Set where a spill could not reach the kernel pipe (no `/proc`): no
/// pipe gets a ring in this process after that.
static CANNOT_SPILL: AtomicBool = AtomicBool::new(false);
/// Whether this process has seen a spill's way to the kernel pipe work.
static PROC_CHECKED: AtomicBool = AtomicBool::new(false);

std::thread_local! {
    /// Whether this thread is inside a ring write: a signal handler's
    /// write on it must not wait for the writer lock.
    static WRITING: Cell<bool> = const { Cell::new(false) };
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno is a valid int.
    unsafe { *sys::__errno_location() = e };
}

/// Gives the new pipe `read`, `write` (made with `flags`) a ring if it may
/// have one: rings on, both ends above the standard descriptors (stdio
/// writes those where the library does not see), a blocking byte-stream
/// pipe with room for a whole ring.
pub fn new_pipe(read: c_int, write: c_int, flags: c_int) {
    if !rings::on() || CANNOT_SPILL.load(Ordering::Relaxed) || !table::owns_memory() {
        return;
    }
    if read < 3 || write < 3 || flags & (sys::O_NONBLOCK | O_DIRECT) != 0 {
        return;
    }
    if !in_table(read) || !in_table(write) {
        return; // an end the table cannot note would miss the ring
    }
    sys::keep_errno(|| {
        // SAFETY: fcntl with an integer argument.
        if unsafe { sys::fcntl(write, sys::F_GETPIPE_SZ, 0) } < CAPACITY as c_int {
            return; // under `pipe-user-pages-soft`: a spill might not fit
        }
        if !PROC_CHECKED.load(Ordering::Relaxed) {
            // This process's first ring: a spill from a read end needs a
            // write end of its own, opened through /proc.
            let w = open_write_end(read);
            if w < 0 {
                CANNOT_SPILL.store(true, Ordering::Relaxed);
                return;
            }
            // SAFETY: the descriptor just opened.
            unsafe { sys::close(w) };
            PROC_CHECKED.store(true, Ordering::Relaxed);
        }
        let Some(pipe) = pipe_of(read) else {
            return;
        };
        if let Some(i) = rings::take() {
            rings::made(read, write, i, pipe);
            if !rings::still_on_after_making() {
                spill(write); // an io_uring is being made
            }
        }
    });
}

/// Gives the new Unix stream socket pair `a`, `b` (of type `ty`) two rings,
/// one each way, if it may have them: rings on, both ends above the
/// standard descriptors, blocking, each with a send buffer that takes a
/// whole ring (a spill writes the ring's bytes through the socket that
/// sent them, and must not wait: 4 KiB writes fill it to about 85%).
///
/// A direction stays on its ring only while every process that holds its
/// reading end also holds its writing end (`closing`): the spill of a
/// ring, which puts its bytes into the kernel socket, needs the writing
/// end, and a socket cannot be opened again through `/proc` as a pipe can.
pub fn new_socket_pair(a: c_int, b: c_int, ty: c_int) {
    if !rings::on() || !table::owns_memory() || a < 3 || b < 3 || ty & SOCK_NONBLOCK != 0 {
        return;
    }
    if !in_table(a) || !in_table(b) {
        return; // an end the table cannot note would miss the ring
    }
    sys::keep_errno(|| {
        let takes_a_ring =
            |fd| sys::socket_int(fd, sys::SO_SNDBUF).is_some_and(|n| n as usize >= 2 * CAPACITY);
        if !takes_a_ring(a) || !takes_a_ring(b) {
            return;
        }
        let (Some(id_a), Some(id_b)) = (socket_id(a), socket_id(b)) else {
            return;
        };
        if let Some(i) = rings::take_pair() {
            rings::made_socket_pair(a, b, i, [id_a, id_b]);
            if !rings::still_on_after_making() {
                spill(a); // both ways; an io_uring is being made
            }
        }
    });
}

/// Whether `fd` is below the descriptors the table follows.
fn in_table(fd: c_int) -> bool {
    (fd as u32 as usize) < table::TRACKED_FDS
}

/// The `st_dev` and `st_ino` of the socket `fd` is, if it is one.
fn socket_id(fd: c_int) -> Option<(u64, u64)> {
    sys::Stat::of_kind(fd, sys::S_IFSOCK).map(|st| (st.dev(), st.ino()))
}

/// The `st_dev` and `st_ino` of the pipe (or FIFO) `fd` is, if it is one.
fn pipe_of(fd: c_int) -> Option<(u64, u64)> {
    sys::Stat::of_kind(fd, sys::S_IFIFO).map(|st| (st.dev(), st.ino()))
}

/// read(2) on `fd`, whose pipe has ring `i`.
///
/// # Safety
///
/// As for read(2).
#[inline(always)]
pub unsafe fn read(fd: c_int, i: u16, buf: *mut c_void, n: usize) -> isize {
    let ring = rings::ring(i);
    if n == 0 || ring.mode() == FOREVER {
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    // A writer on this CPU cannot run while this reader spins: it waits by
    // one yield (`yield_gate`), so that the writer's next write still
    // finds the ring; where it may not (a handler without SA_RESTART must
    // find it asleep in the kernel), the kernel read at once, and the
    // pipe left the kernel's while that holds.
    let entry = rings::bookkeeping(i);
    let here = this_cpu();
    if entry.reader_cpu.load(Ordering::Relaxed) != here {
        entry.reader_cpu.store(here, Ordering::Relaxed);
    }
    let shares_cpu = entry.writer_cpu.load(Ordering::Relaxed) == here;
    let yields = shares_cpu && wait_signals::restart_only();
    if shares_cpu && !yields && protocol::kernel_read_begin(ring) {
        // The kernel pipe's read, counted, and nothing else: what the
        // protocol below decides here, less its set-up (a same-CPU round
        // trip is two kernel calls a side; see docs/run.md, "2b wired").
        // SAFETY: the caller's contract.
        let r = unsafe { kernel_read(fd, buf, n) };
        protocol::kernel_read_done(ring);
        return r;
    }
    // SAFETY: the caller's contract.
    unsafe {
        if yields {
            read_by_protocol::<YieldOnce>(fd, ring, true, buf, n)
        } else {
            read_by_protocol::<Budget>(fd, ring, shares_cpu, buf, n)
        }
    }
}

/// `read` past its front: the protocol's read, which may wait.
///
/// # Safety
///
/// As for read(2).
#[inline(never)]
unsafe fn read_by_protocol<W: Wait>(
    fd: c_int,
    ring: &'static Ring,
    shares_cpu: bool,
    buf: *mut c_void,
    n: usize,
) -> isize {
    if !checked::writable(pid::mine() as c_int, buf, n.min(CAPACITY)) {
        // What the kernel says of a buffer it cannot write, losing nothing.
        set_errno(EFAULT);
        return -1;
    }
    // While a handler without SA_RESTART is installed, a read does not
    // wait here with signals unblocked: it takes what the ring holds, or
    // sleeps in the kernel at once, whose `read` such a signal interrupts.
    // The mask's wait begins at the first pause: a read that finds bytes
    // at its first look waits for nothing, so it pays none of the gate's
    // read-modify-writes.
    let waits = !shares_cpu && wait_signals::restart_only();
    let mut mask: Option<WaitMask> = None;
    let wait_ns = if waits { WAIT_NS } else { 0 };
    // A yield to a writer on this CPU leaves signals alone too: a counted
    // handler without SA_RESTART that runs in it ends the read as below.
    let handled = W::YIELDS.then(counted_handlers::handled_here);
    let taken = {
        let mut poll = || match mask.as_mut() {
            Some(m) => m.poll(),
            None if waits => {
                mask = Some(WaitMask::begin());
                false
            }
            None => false,
        };
        // SAFETY: `buf` is writable for min(n, CAPACITY) bytes (checked),
        // the most the protocol copies.
        let side = unsafe { ReadSide::<W>::new(ring, fd, buf.cast(), wait_ns) };
        // A reader that yields to its writer brings a KERNEL pipe back.
        let stay = shares_cpu && !W::YIELDS;
        let mut side = side.with_poll(&mut poll).stay_in_kernel(stay);
        // At most a ring's worth, the part of `buf` checked: a process of
        // the tree that scribbles on the state word cannot make a copy
        // run past it.
        protocol::read(ring, &mut side, n.min(CAPACITY), true)
    };
    let interrupted = mask.map(WaitMask::end).unwrap_or(false)
        || handled.is_some_and(|h| h != counted_handlers::handled_here());
    match taken {
        Taken::Ring(k) => k as isize,
        Taken::Kernel { counted } => {
            let r = if interrupted {
                set_errno(sys::EINTR);
                -1
            } else {
                // SAFETY: the caller's contract.
                unsafe { kernel_read(fd, buf, n) }
            };
            if counted {
                protocol::kernel_read_done(ring);
            }
            r
        }
    }
}

/// write(2) on `fd`, whose pipe has ring `i` (with `socket`, a socket
/// pair's end, which writes ring `i`).
///
/// # Safety
///
/// As for write(2).
#[inline(always)]
pub unsafe fn write(fd: c_int, i: u16, socket: bool, buf: *const c_void, n: usize) -> isize {
    let ring = rings::ring(i);
    let mode = ring.mode();
    // (In KERNEL mode the kernel's own write tells of a reader gone.)
    if n == 0 || mode == FOREVER || rings::no_reader(i) || (mode == RING && reader_gone(fd, i)) {
        // No reader left: the kernel raises EPIPE and SIGPIPE.
        // SAFETY: the caller's contract.
        return unsafe { kernel_write(fd, buf, n) };
    }
    let entry = rings::bookkeeping(i);
    let here = this_cpu();
    if entry.writer_cpu.load(Ordering::Relaxed) != here {
        entry.writer_cpu.store(here, Ordering::Relaxed);
    }
    // Its reader on this CPU, in a process with threads (whose writes do
    // not wait in the ring, so do not yield for it): the pipe stays the
    // kernel's (`stay_in_kernel` below), and the write is the kernel
    // pipe's, counted, as the protocol would decide it after its set-up.
    // Other writers bring it back (`write_by_protocol`).
    if mode == KERNEL
        && entry.reader_cpu.load(Ordering::Relaxed) == here
        && wait_signals::threads_started()
        && protocol::kernel_write_begin(ring)
    {
        // SAFETY: the caller's contract.
        let r = unsafe { kernel_write(fd, buf, n) };
        protocol::kernel_write_done(ring);
        return r;
    }
    // SAFETY: the caller's contract.
    unsafe { write_by_protocol(fd, ring, entry, here, socket, buf, n) }
}

/// `write` past its front: the protocol's write, which may wait.
///
/// # Safety
///
/// As for write(2).
#[inline(never)]
unsafe fn write_by_protocol(
    fd: c_int,
    ring: &'static Ring,
    entry: &'static Entry,
    here: u32,
    socket: bool,
    buf: *const c_void,
    n: usize,
) -> isize {
    let me = pid::mine();
    let nested = WRITING.with(|w| w.replace(true));
    // Held while the write waits for room: a signal ends it (`Signalled`).
    // Not with other threads: the kernel would send them the process's
    // signals; such a write spins for room with signals left alone (while
    // every handler restarts), then lets the kernel wait.
    let mut room_wait = RoomWait::new();
    let threads = wait_signals::threads_started();
    let mut done = 0;
    let mut checked_to = 0;
    let result = loop {
        if done == n {
            break done as isize;
        }
        if done == checked_to {
            // The buffer is checked a ring's worth at a time.
            let len = (n - done).min(CAPACITY);
            // SAFETY: inside the caller's buffer.
            let from = unsafe { buf.cast::<u8>().add(done) };
            if !checked::readable(me as c_int, from.cast(), len) {
                // The kernel's answer to a buffer it cannot read.
                if done == 0 {
                    set_errno(EFAULT);
                    break -1;
                }
                break done as isize;
            }
            checked_to = done + len;
        }
        // Whole writes of up to PIPE_BUF; longer ones in pieces, so that
        // the reader copies one while the writer copies the next.
        let chunk = if n <= PIPE_BUF {
            n
        } else {
            (checked_to - done).min(PIECE)
        };
        // SAFETY: inside the caller's buffer.
        let from = unsafe { buf.cast::<u8>().add(done) };
        // The reader's CPU is this one: a spin for room only delays it.
        // The write yields to it once instead, for room or for it to bring
        // a KERNEL pipe back after a lead, then sleeps; one that may not
        // sleep (a thread's, signals left alone) yields up to 16 times,
        // then spills, and leaves the pipe the kernel's.
        let reader_here = entry.reader_cpu.load(Ordering::Relaxed) == here;
        // SAFETY: `from` is readable for `chunk` bytes (checked).
        let side = unsafe { WriteSide::new(ring, fd, from, me, WAIT_NS) };
        let mut side = side
            .room_wait(&mut room_wait)
            .lead_skips(&entry.lead_skips)
            .no_wait(threads)
            .nested(nested)
            .sleep_at_once(reader_here)
            .yield_once(reader_here)
            .stay_in_kernel(reader_here && threads)
            .socket(socket);
        let written = protocol::write(ring, &mut side, chunk);
        // Bytes of a lead went through the kernel, counted there.
        let lead = side.lead_bytes() as isize;
        match written {
            Written::Ring => {
                stats::ring_wrote(chunk as isize - lead);
                done += chunk;
            }
            Written::Signalled { done: put } => {
                stats::ring_wrote(put as isize - lead);
                done += put;
                if done > 0 {
                    break done as isize;
                }
                // Nothing written: the handler runs, and the write fails
                // with EINTR, or begins again under SA_RESTART.
                room_wait.release();
                if room_wait.interrupts() {
                    set_errno(sys::EINTR);
                    break -1;
                }
            }
            Written::Kernel { done: put, counted } => {
                stats::ring_wrote(put as isize - lead);
                done += put;
                // The kernel's write may block: signals must reach it.
                room_wait.release();
                // The rest, this chunk's and the later ones', in one
                // kernel write, as the program asked (after bytes of its
                // own, as the kernel's write would go on: `kernel_rest`).
                // SAFETY: the caller's contract, from `done` on.
                let r = unsafe {
                    if done == 0 {
                        kernel_write(fd, buf, n)
                    } else {
                        kernel_rest(fd, buf.cast::<u8>().add(done), n - done)
                    }
                };
                if counted {
                    protocol::kernel_write_done(ring);
                }
                break match r {
                    r if r >= 0 => done as isize + r,
                    _ if done > 0 => done as isize,
                    r => r,
                };
            }
        }
    };
    // The handlers of signals that came while it waited run now.
    room_wait.release();
    WRITING.with(|w| w.set(nested));
    result
}

/// The rest of a write (`n` bytes from `buf`) that has put bytes of its
/// own already, to the kernel pipe, as the kernel's write would go on
/// there: a signal handled while it waits for room ends it with the count
/// so far, `SA_RESTART` or not. (One kernel write would restart instead
/// if it had taken none of the rest.) So the kernel is given what fits
/// (its size less `FIONREAD`), and the wait for room is a `poll`, which a
/// handled signal always ends with `EINTR`. Returns the bytes it wrote
/// (its failures end it, as more bytes after some do for the kernel's).
///
/// # Safety
///
/// `buf` is readable for `n` bytes.
unsafe fn kernel_rest(fd: c_int, buf: *const u8, n: usize) -> isize {
    // `errno` as the kernel's write that succeeds leaves it: as before,
    // or as a handler that ran left it (so the wait is a system call that
    // does not set it).
    let mut done = 0;
    while done < n {
        let mut queued: c_int = 0;
        // SAFETY: FIONREAD writes one int; fcntl with no argument.
        let (q, size) = sys::keep_errno(|| unsafe {
            (
                sys::ioctl(fd, sys::FIONREAD, (&raw mut queued) as usize),
                sys::fcntl(fd, sys::F_GETPIPE_SZ, 0),
            )
        });
        let room = if q == 0 && size > 0 {
            (size - queued).max(0) as usize
        } else {
            n - done // not asked: one write, as before
        };
        if room > 0 {
            // SAFETY: inside the caller's buffer.
            let r = sys::keep_errno(|| unsafe {
                kernel_write(fd, buf.add(done).cast(), (n - done).min(room))
            });
            if r <= 0 {
                break; // EPIPE (SIGPIPE raised), EINTR, ...
            }
            done += r as usize;
            continue;
        }
        let mut p = sys::PollFd {
            fd,
            events: sys::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd, no timeout, no mask.
        let r = unsafe {
            sys::raw_keeping_errno(sys::nr::PPOLL, [(&raw mut p) as usize, 1, 0, 0, 8, 0])
        };
        if r < 0 {
            break; // EINTR: a handler ran
        }
        if p.revents & sys::POLLERR != 0 {
            // No reader: the kernel's write says EPIPE (and raises
            // SIGPIPE), as after some bytes natively.
            // SAFETY: inside the caller's buffer.
            sys::keep_errno(|| unsafe { kernel_write(fd, buf.add(done).cast(), n - done) });
            break;
        }
    }
    done as isize
}

/// The CPU this thread runs on, plus one (0: not known): a load from
/// glibc's rseq area.
fn this_cpu() -> u32 {
    // SAFETY: no preconditions.
    (unsafe { sys::sched_getcpu() } + 1) as u32
}

/// Whether the kernel says no reader of `fd`'s pipe is left, asked at
/// most every [`READER_CHECK_NS`] per ring.
fn reader_gone(fd: c_int, i: u16) -> bool {
    let e = rings::bookkeeping(i);
    let now = sys::coarse_now_ns();
    if now.saturating_sub(e.reader_checked_ns.load(Ordering::Relaxed) as i64) < READER_CHECK_NS {
        return false;
    }
    e.reader_checked_ns.store(now as u64, Ordering::Relaxed);
    let mut p = sys::PollFd {
        fd,
        events: sys::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd, no wait.
    let r = sys::keep_errno(|| unsafe { sys::poll(&mut p, 1, 0) });
    r == 1 && p.revents & crate::resident::READER_GONE != 0
}

/// Hands `fd`'s pipe to the kernel for good, the ring's bytes first, if it
/// has a ring: before a call the library does not carry touches it.
/// Keeps `errno`.
pub fn spill(fd: c_int) {
    let Some((i, write_end)) = rings::of(fd) else {
        return;
    };
    let ring = rings::ring(i);
    if ring.mode() == FOREVER
        && rings::socket_of(fd).is_none_or(|i| rings::ring(i ^ 1).mode() == FOREVER)
    {
        return;
    }
    sys::keep_errno(|| {
        if !table::owns_memory() {
            // A `vfork` child: its closes and copies are not in the table
            // (its parent's), so `fd` may be another file now, and so may
            // any write end the table names.
            spill_what_it_is(fd);
            return;
        }
        if let Some(i) = rings::socket_of(fd) {
            // Both ways: the ring `fd` writes through `fd`, the one it
            // reads through a descriptor of the other end, which this
            // process holds while it holds `fd` (`closing`).
            spill_ring(i, fd);
            if let Some(other) = rings::writing(i ^ 1) {
                spill_ring(i ^ 1, other);
            }
            return;
        }
        if write_end {
            spill_ring(i, fd);
            return;
        }
        // A read end: the bytes go in through a write end of the same pipe
        // this process holds, or one opened through /proc (checked to work
        // at this process's first ring).
        if let Some(held) = rings::writing(i) {
            spill_ring(i, held);
            return;
        }
        let w = open_write_end(fd);
        if w < 0 {
            // No way into the kernel pipe (no descriptor left, no /proc):
            // the ring stays as it is rather than lose its bytes.
            return;
        }
        protocol::spill(ring, &mut SpillSide::new(ring, w));
        // SAFETY: the descriptor opened above.
        unsafe { sys::close(w) };
    });
}

/// Spills ring `i` through `fd`, a write end of its pipe or socket pair.
fn spill_ring(i: u16, fd: c_int) {
    let ring = rings::ring(i);
    if ring.mode() != FOREVER {
        protocol::spill(ring, &mut SpillSide::new(ring, fd));
    }
}

/// Before `fd` is closed (or replaced by `dup2`, `dup3`): keeps the rule
/// of `new_socket_pair`. A socket pair's end whose last descriptor in this
/// process goes while the process still holds the other end spills the
/// ring it writes, through `fd`: its readers would otherwise include a
/// process that holds no way into the kernel socket. In a `vfork` child,
/// whose descriptors the table does not follow, any socket end of a ring
/// spills the ring it writes. Keeps `errno`.
pub fn closing(fd: c_int) {
    if !rings::active() {
        return;
    }
    sys::keep_errno(|| {
        if !table::owns_memory() {
            if let Some(i) = socket_id(fd).and_then(rings::with_pipe) {
                spill_ring(i, fd);
            }
            return;
        }
        let Some(i) = rings::socket_of(fd) else {
            return;
        };
        if !rings::held_elsewhere(fd) && rings::writing(i ^ 1).is_some() {
            spill_ring(i, fd);
        }
    });
}

/// Before descriptors `first..=last` are closed: `closing` for each that
/// uses a ring, in turn, each counted out before the next is looked at
/// (so that of two ends closed together only the first spills).
pub fn closing_range(first: u32, last: u32) {
    if !rings::active() {
        return;
    }
    rings::each(|fd, _, _| {
        if (first..=last).contains(&(fd as u32)) {
            closing(fd);
            rings::forget(fd);
        }
    });
}

/// The last handler `exit` runs: registered in the constructor, before
/// the program starts, so it comes after `main`'s handlers and every
/// destructor. Some handler registered in a constructor that ran before
/// this library's may still write after it, and would write to the
/// kernel (its descriptor no longer uses a ring): so a write end whose
/// ring holds bytes is spilled first, which keeps them ahead. Then the
/// rings are counted out (`rings::at_exit`). An `exit` called by a
/// signal handler that interrupted a ring write leaves everything as it
/// is (the spill would wait for that write), as a killed process does.
pub extern "C" fn before_exit(_: *mut c_void) {
    if !rings::active() || !table::owns_memory() || WRITING.with(Cell::get) {
        return;
    }
    if wait_signals::threads_started() {
        return;
    }
    rings::each(|fd, i, write_end| {
        let ring = rings::ring(i);
        if write_end && ring.mode() != FOREVER && ring.holds_bytes() {
            if rings::socket_of(fd).is_some() {
                spill_ring(i, fd); // the way it writes only
            } else {
                spill(fd);
            }
        }
    });
    rings::at_exit();
}

/// Spills every ring descriptor of this process; with `inheritable_only`,
/// only those not close-on-exec (what an `exec` passes on).
pub fn spill_all(inheritable_only: bool) {
    if !rings::active() {
        return;
    }
    let passed_on = |fd: c_int| {
        // SAFETY: fcntl with no argument.
        let flags = unsafe { sys::fcntl(fd, F_GETFD, 0) };
        flags >= 0 && !(inheritable_only && flags & FD_CLOEXEC != 0)
    };
    sys::keep_errno(|| {
        if table::owns_memory() {
            rings::each(|fd, _, _| {
                if passed_on(fd) {
                    spill(fd);
                }
            });
            return;
        }
        // A `vfork` child: the table is its parent's, so its own
        // descriptors are looked at one by one (`dup2(p[0], 0)` then
        // `close(p[0])` left the pipe where the table does not say).
        each_open_descriptor(|fd| {
            if passed_on(fd) {
                spill_what_it_is(fd);
            }
        });
    });
}

/// Spills the ring of the pipe or socket `fd` is, if it is one of this
/// process's pool, though no wrapper saw `fd` made: a descriptor taken
/// from another process (`pidfd_getfd`), whose reads and writes the
/// library would not put on the ring.
pub fn spill_taken(fd: c_int) {
    if rings::active() {
        sys::keep_errno(|| spill_what_it_is(fd));
    }
}

/// In a `vfork` child: spills the ring of the pipe `fd` is, if it has one
/// and this process's table names any ring, through a write end opened
/// from `fd` itself.
fn spill_what_it_is(fd: c_int) {
    if let Some(i) = socket_id(fd).and_then(rings::with_pipe) {
        // The ring it writes through `fd`; the one it reads through a
        // descriptor of the other end, if this child still has one (if
        // not, it closed it here, and `closing` spilled that ring then).
        spill_ring(i, fd);
        let Some(other) = rings::pipe_id(i ^ 1) else {
            return;
        };
        let mut through = -1;
        each_open_descriptor(|o| {
            if through < 0 && socket_id(o) == Some(other) {
                through = o;
            }
        });
        if through >= 0 {
            spill_ring(i ^ 1, through);
        }
        return;
    }
    let Some(i) = pipe_of(fd).and_then(rings::with_pipe) else {
        return;
    };
    let ring = rings::ring(i);
    if ring.mode() == FOREVER {
        return;
    }
    let w = open_write_end(fd);
    if w < 0 {
        return; // no reader left (ENXIO), or no /proc: as in `spill`
    }
    protocol::spill(ring, &mut SpillSide::new(ring, w));
    // SAFETY: the descriptor opened above.
    unsafe { sys::close(w) };
}

/// Calls `f` with each descriptor open in this process (`/proc/self/fd`),
/// but the one it reads them through.
fn each_open_descriptor(mut f: impl FnMut(c_int)) {
    // SAFETY: a NUL-terminated path.
    let dir = unsafe {
        sys::open(
            c"/proc/self/fd".as_ptr(),
            sys::O_RDONLY | sys::O_DIRECTORY | sys::O_CLOEXEC,
            0,
        )
    };
    if dir < 0 {
        return;
    }
    // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, name.
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: getdents64 writes at most `buf`'s 4096 bytes.
        let n = unsafe {
            sys::raw(
                sys::nr::GETDENTS64,
                [dir as usize, buf.as_mut_ptr() as usize, 4096, 0, 0, 0],
            )
        };
        if n <= 0 {
            break;
        }
        let bytes = buf.as_ptr().cast::<u8>();
        let mut at = 0;
        while at + 19 < n as usize {
            // SAFETY: the kernel wrote `n` bytes of whole records; each
            // record's length is at offset 16, its NUL-terminated name at 19.
            let (len, name) = unsafe {
                (
                    core::ptr::read_unaligned(bytes.add(at + 16).cast::<u16>()) as usize,
                    bytes.add(at + 19),
                )
            };
            if len == 0 {
                break;
            }
            let mut fd: i64 = 0;
            let mut k = 0;
            // SAFETY: the name ends with a NUL inside its record.
            while let b @ b'0'..=b'9' = unsafe { *name.add(k) } {
                fd = fd * 10 + i64::from(b - b'0');
                k += 1;
            }
            if k > 0 && fd <= i64::from(c_int::MAX) && fd as c_int != dir {
                f(fd as c_int);
            }
            at += len;
        }
    }
    // SAFETY: the descriptor opened above.
    unsafe { sys::close(dir) };
}

/// A new write end of the pipe whose read end is `fd` (`/proc/self/fd/N`
/// opened for writing, non-blocking and close-on-exec), or -1.
fn open_write_end(fd: c_int) -> c_int {
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0";
    let mut digits = [0u8; 10];
    let (mut v, mut k) = (fd as u32, 0);
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for j in 0..k {
        path[14 + j] = digits[k - 1 - j];
    }
    // SAFETY: a NUL-terminated path (at most 10 digits, then NULs).
    unsafe {
        sys::open(
            path.as_ptr().cast(),
            sys::O_WRONLY | sys::O_NONBLOCK | sys::O_CLOEXEC,
            0,
        )
    }
}
