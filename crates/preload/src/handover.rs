//! Hand-over, stage 2a of docs/run.md: a writer gives its bytes straight
//! to a reader of the same pipe (or of the other end of the same Unix
//! stream socket pair) that is waiting inside the library's `read`,
//! through a slot of shared memory, instead of through the kernel.
//!
//! Bytes are in shared memory only while both calls are in progress, so
//! between calls the kernel pipe is the whole pipe: readiness, `FIONREAD`,
//! EOF, `fork`, `exec` and every call the library does not see get the
//! kernel's answers. The order of bytes against bytes that go through the
//! kernel (stdio's internal `__write`, processes without the library,
//! `splice`) holds by three rules (docs/run.md, "Why the order of bytes
//! holds"): a reader waits only after finding the kernel pipe empty; a
//! writer hands over only when the kernel pipe is empty, checked while it
//! holds the reader; a writer returns only once the reader took its bytes,
//! and a hand-over is a whole `write` or nothing.
//!
//! On unless `SHMPIPE_RUN_RINGS` turns it off (`switch`; by default pipes
//! with a resident ring take `ring_io`'s path instead) and as long as more
//! than one CPU is usable.
//!
//! The slots and where their memory comes from are `arena`'s; the phases
//! of a slot and the moves between them are `slot_protocol`'s (which a
//! model checker runs), and this module brings the system calls.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, Ordering};

#[cfg(test)]
pub use crate::arena::map as map_arena;
pub use crate::arena::{on, MAX};
use crate::arena::{slot, Slot};
use crate::stats::{kernel_read_call as kernel_read, kernel_write_call as kernel_write};
use crate::sys::now_ns;
use crate::wait_signals::{self, WaitMask};
use crate::{
    arena, checked, main_stack, pid, slot_protocol, socket_options, stats, switch, sys, table,
};

/// The longest a reader waits in the library before it goes to sleep in
/// the kernel, and how long it waits on a pipe before a kernel wake-up was
/// measured on it (ns). The wait itself is the measured cost of a wake-up
/// (`Slot::wake_ns`): waiting that long at most costs no more than twice
/// what the kernel would (the ski-rental bound), whatever the machine.
/// Only speed depends on it: a hand-over that does not happen in time
/// goes through the kernel.
const MAX_WAIT_NS: i64 = 200_000;
/// How long a writer waits for the reader to take its bytes before it
/// takes them back (ns): a reader that is waiting takes them within a
/// poll unless it lost its CPU.
const WRITER_WAIT_NS: i64 = 200_000;
/// Polls of the slot before the first `sched_yield`: a writer on another
/// CPU answers within them; one on this CPU needs the yield to run.
const SPINS: u32 = 200;
/// Waits in a row that may end without a hand-over before a pipe's reads
/// stop waiting. A wait for nothing costs the reader's CPU, which the
/// writer needs when a pipeline has more stages than CPUs (a writer of
/// more than MAX bytes at once, one that is slow, or one that is not
/// running never hands over). Then the pipe's reads go straight to the
/// kernel, without a look, and only every [`PROBE`]-th looks and may
/// wait, until one gets a hand-over. (Probes that grew sparser the longer
/// they failed cost `lat_ctx -P 8`, 8 processes on 2 CPUs, most of what
/// hand-over gives it: there waits succeed often, but in runs.)
pub const MISSES: u32 = 16;
/// See [`MISSES`].
pub const PROBE: u32 = 16;

/// Whether a read of a pipe whose slot counts `misses` may wait.
fn may_wait(misses: u32) -> bool {
    misses < MISSES || misses.is_multiple_of(PROBE)
}

/// Fruitless waits in a row in this process, over all its pipes, counted
/// as a pipe's are ([`MISSES`]): a process that makes a pipe for each
/// child and reads its output (a shell's `$(...)`, `make`) waits in vain
/// on every new pipe, whose own count starts again, while the child it
/// waits for may need this CPU. A hand-over on any pipe starts it again.
static PROCESS_MISSES: AtomicU32 = AtomicU32::new(0);

/// Whether this process's reads may still wait (`PROCESS_MISSES`).
fn process_may_wait() -> bool {
    may_wait(PROCESS_MISSES.load(Ordering::Relaxed))
}

/// Counts a read that did not wait, or waited for nothing, in `slot` (if
/// it is the pipe's: `own`) and in this process.
fn count_miss(slot: &Slot, own: bool, misses: u32) {
    if own {
        slot.misses.store(one_more_miss(misses), Ordering::Relaxed);
    }
    count_process_miss();
}

/// Counts a read of a pipe new to this process that did not wait.
fn count_process_miss() {
    let process = PROCESS_MISSES.load(Ordering::Relaxed);
    PROCESS_MISSES.store(one_more_miss(process), Ordering::Relaxed);
}

/// Starts this process's count again (each test its own).
#[cfg(test)]
pub fn forget_process_misses() {
    PROCESS_MISSES.store(0, Ordering::Relaxed);
}

/// Counts a read that got a hand-over.
fn count_hit(slot: &Slot) {
    slot.misses.store(0, Ordering::Relaxed);
    PROCESS_MISSES.store(0, Ordering::Relaxed);
}

/// The miss count after one more read that did not get a hand-over.
fn one_more_miss(misses: u32) -> u32 {
    if misses >= 1 << 30 {
        MISSES
    } else {
        misses + 1
    }
}

/// Maps the arena if the mode asks for hand-over (`switch`: unset, `1` or
/// `2`, on two or more usable CPUs). Called from the constructor only.
pub fn open_from_env(mode: switch::Mode) {
    sys::keep_errno(|| {
        if !mode.hands_over() {
            return;
        }
        arena::open();
        pid::open();
        main_stack::open();
    });
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno is a valid int.
    unsafe { *sys::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *sys::__errno_location() = e };
}

/// The inode of `fd` if it is a pipe (or FIFO), else 0.
fn fifo_inode(fd: c_int) -> u64 {
    inode_if(fd, sys::S_IFIFO)
}

/// The inode of `fd` if it is a socket, else 0.
pub fn socket_inode(fd: c_int) -> u64 {
    inode_if(fd, sys::S_IFSOCK)
}

/// The inode of `fd` if its file type is `kind`, else 0.
fn inode_if(fd: c_int, kind: u32) -> u64 {
    sys::Stat::of_kind(fd, kind).map_or(0, |st| st.ino())
}

/// The inode a reader on `fd` waits under (its own), if `fd` is still the
/// kind of end the table says and open for reading the way that end is:
/// else 0.
fn reader_inode(fd: c_int, kind: u8, flags: c_int) -> u64 {
    match (kind, flags & sys::O_ACCMODE) {
        (table::PIPE_READ, sys::O_RDONLY) => fifo_inode(fd),
        (table::STREAM_SOCKET, sys::O_RDWR) => socket_inode(fd),
        _ => 0,
    }
}

/// Whether a `read` on the socket `fd` may look without waiting and then
/// wait in the library: not if its low-water mark asks for more than one
/// byte (a read that does not wait, or a hand-over, would end early with
/// fewer), nor if the other end's inode is unknown (no writer could find
/// this reader).
fn socket_may_wait(fd: c_int) -> bool {
    table::peer(fd) != 0 && sys::socket_int(fd, sys::SO_RCVLOWAT).is_some_and(|l| l <= 1)
}

/// `fd`'s file status flags, or -1.
fn status_flags(fd: c_int) -> c_int {
    // SAFETY: F_GETFL reads no memory.
    unsafe { sys::fcntl(fd, sys::F_GETFL, 0) }
}

/// One poll's pause: a spin hint at first, then a yield so that a peer on
/// this CPU can run; a yield at once if the peer is known to be on this
/// CPU (`peer_here`).
fn pause(polls: &mut u32, peer_here: bool) {
    *polls += 1;
    if *polls < SPINS && !peer_here {
        core::hint::spin_loop();
    } else {
        // SAFETY: sched_yield(2) has no preconditions.
        unsafe { sys::sched_yield() };
    }
}

/// The CPU this thread runs on, plus one (0: not known).
fn cpu() -> u32 {
    // SAFETY: sched_getcpu(3) has no preconditions.
    (unsafe { sys::sched_getcpu() }).saturating_add(1).max(0) as u32
}

/// Whether the writer of the pipe of `ino` last wrote from the CPU this
/// thread runs on (as far as `slot` knows: it may hold another pipe). A
/// reader there does not wait in the library: its writer cannot run while
/// it spins, and blocking in the kernel gives the writer the CPU. Such a
/// reader notes its CPU, so that the writer skips the clock read that
/// only a waiting reader's measurement needs.
fn writer_shares_cpu(slot: &Slot, ino: u64) -> bool {
    let w = slot.writer_cpu.load(Ordering::Relaxed);
    if w == 0 || slot.ino.load(Ordering::Relaxed) != ino || w != cpu() {
        return false;
    }
    if slot.reader_cpu.load(Ordering::Relaxed) != w {
        slot.reader_cpu.store(w, Ordering::Relaxed);
    }
    true
}

/// How long a reader of `slot` waits for a writer: the measured cost of a
/// kernel wake-up (if the writer comes later, the kernel would have been
/// at least as fast), or the bound while none was measured.
fn wait_budget(slot: &Slot) -> i64 {
    match slot.wake_ns.load(Ordering::Relaxed) {
        0 => MAX_WAIT_NS,
        w => (w as i64).min(MAX_WAIT_NS),
    }
}

/// Folds one measured wake-up (ns) into the slot's average (weight 1/8:
/// a placement that changes shows within a few round trips).
fn learn_wake(slot: &Slot, took: i64) {
    let took = took.clamp(1, MAX_WAIT_NS) as u64;
    let old = slot.wake_ns.load(Ordering::Relaxed);
    let new = if old == 0 {
        took
    } else {
        old - old / 8 + took / 8
    };
    // Racing updates lose a sample, which only slows the average.
    slot.wake_ns.store(new.max(1), Ordering::Relaxed);
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only asks whether the process exists.
    pid != 0 && (unsafe { sys::kill(pid as c_int, 0) } == 0 || errno() != sys::ESRCH)
}

/// read(2) on a descriptor the table says is a pipe's read end or a
/// socket pair's end, with hand-over on.
///
/// # Safety
///
/// As for read(2).
pub unsafe fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    let saved = errno();
    let kind = table::kind(fd);
    if n == 0 || (kind != table::PIPE_READ && kind != table::STREAM_SOCKET) {
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    // 0. The writer runs on this CPU: nothing to look at, the kernel read
    // is the answer. The inode is a hint; a stale one costs only a wait.
    // (No wake-up is measured here: it is not what a wait would save.)
    let hint = table::inode(fd);
    if hint != 0 {
        let (slot, _) = slot(hint);
        if writer_shares_cpu(slot, hint) {
            // SAFETY: the caller's contract.
            return unsafe { kernel_read(fd, buf, n) };
        }
        // A pipe, or a process, whose reads stopped waiting (`MISSES`,
        // `PROCESS_MISSES`) does not look either: a look costs two or
        // three system calls.
        let misses = slot.misses.load(Ordering::Relaxed);
        let own = slot.ino.load(Ordering::Relaxed) == hint;
        if (own && !may_wait(misses)) || !process_may_wait() {
            count_miss(slot, own, misses);
            // SAFETY: the caller's contract.
            return unsafe { timed_kernel_read(fd, buf, n, hint) };
        }
    }
    if hint == 0 && !process_may_wait() {
        // A pipe new to this process, which waits in vain: no look either.
        count_process_miss();
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    // A socket end a read found plain at this options generation needs no
    // asking again (`socket_options`), as long as it is still that socket.
    let generation = if kind == table::STREAM_SOCKET {
        socket_options::generation()
    } else {
        0
    };
    let noted = generation != 0 && table::plain_at(fd) == generation && hint != 0;
    if kind == table::STREAM_SOCKET && !noted && !sys::keep_errno(|| socket_may_wait(fd)) {
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    // 1. What the kernel pipe holds, without waiting: bytes or EOF are the
    // answer, as they would be.
    let iov = sys::IoVec { base: buf, len: n };
    // SAFETY: one iovec over the caller's buffer; offset -1 is the file's
    // own position, the only one a pipe has.
    let r = unsafe { sys::preadv2(fd, &iov, 1, -1, sys::RWF_NOWAIT) };
    if r >= 0 {
        stats::kernel_read(r);
        return r;
    }
    let empty = errno() == sys::EAGAIN;
    // (A socket's only access mode is read-write.)
    let plain = noted && empty && socket_inode(fd) == hint;
    if noted && !plain && empty && !sys::keep_errno(|| socket_may_wait(fd)) {
        // The note was another socket's: this one is asked in full.
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    let flags = if plain { sys::O_RDWR } else { status_flags(fd) };
    if !empty || flags < 0 || flags & sys::O_NONBLOCK != 0 {
        // No way to look (an old kernel), a failure the kernel will repeat,
        // or a reader that must not wait: the kernel answers.
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    // A socket with a receive timeout goes to the kernel: its `read`
    // fails with `EINTR` under any handler, `SA_RESTART` or not, and
    // times out from its start (signal(7)).
    let ino = if plain {
        hint
    } else {
        reader_inode(fd, kind, flags)
    };
    if ino == 0 || (kind == table::STREAM_SOCKET && !plain && sys::socket_has_receive_timeout(fd)) {
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    if kind == table::STREAM_SOCKET && !plain && generation != 0 {
        // Its low-water mark, blocking and timeout were all just asked.
        table::note_plain(fd, generation);
    }
    if ino != hint {
        // (Noting it asks the kernel which process this is.)
        table::set_inode(fd, ino);
    }
    let (slot, data) = slot(ino);
    if writer_shares_cpu(slot, ino) {
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    let misses = slot.misses.load(Ordering::Relaxed);
    if !may_wait(misses) || !process_may_wait() {
        count_miss(slot, true, misses);
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { timed_kernel_read(fd, buf, n, ino) };
    }
    // A buffer the kernel would refuse with EFAULT is its to refuse: the
    // take below copies with plain stores.
    let me = pid::mine();
    if !checked::writable(me as c_int, buf, n.min(MAX)) {
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_read(fd, buf, n) };
    }
    #[cfg(test)]
    WAITS.fetch_add(1, Ordering::Relaxed);
    let start = now_ns();
    let (got, interrupted) = wait_for_writer(fd, slot, data, ino, me, buf.cast(), n);
    // The miss count is Relaxed, and races with other readers of the
    // pipe: a heuristic, only speed depends on it. A wait that found bytes
    // in the kernel pipe at once met a writer that runs, just too early
    // (it wrote while this reader got ready to wait, as a round trip's
    // writer on another CPU often does): it cost no spinning and is no
    // reason to stop waiting. One that spun first is a miss: with more
    // runnable processes than CPUs, the writer may have needed this CPU.
    // That a signal ended a wait says nothing of the writer; the time it
    // had waited still does (a writer starved of CPU).
    if got > 0 {
        count_hit(slot);
    } else if now_ns() - start > wait_budget(slot) / 8 || (!interrupted && !kernel_has_bytes(fd)) {
        count_miss(slot, true, misses);
    }
    if got > 0 {
        set_errno(saved);
        return got as isize;
    }
    if interrupted {
        set_errno(sys::EINTR);
        return -1;
    }
    set_errno(saved);
    // SAFETY: the caller's contract.
    unsafe { timed_kernel_read(fd, buf, n, ino) }
}

/// The kernel's `read` on the pipe of `ino`, measuring the wake-up when the
/// pipe's writer wrote while this reader slept (`Slot::wake_ns`).
///
/// # Safety
///
/// As for read(2).
unsafe fn timed_kernel_read(fd: c_int, buf: *mut c_void, n: usize, ino: u64) -> isize {
    let (slot, _) = slot(ino);
    let asleep = now_ns();
    // SAFETY: the caller's contract.
    let r = unsafe { kernel_read(fd, buf, n) };
    if r > 0 && slot.ino.load(Ordering::Relaxed) == ino {
        let wrote = slot.kernel_write_ns.load(Ordering::Relaxed) as i64;
        if wrote > asleep {
            learn_wake(slot, now_ns() - wrote);
        }
    }
    r
}

/// Whether the kernel pipe of `fd` holds bytes (which a writer that found
/// no reader waiting, or a path the library does not see, put there).
fn kernel_has_bytes(fd: c_int) -> bool {
    let mut queued: c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { sys::ioctl(fd, sys::FIONREAD, (&raw mut queued) as usize) };
    r == 0 && queued > 0
}

/// Announces a reader of `ino` in `slot` and waits for a writer: the bytes
/// taken (copied to `buf`), or 0 if none came in time, the kernel pipe
/// got bytes meanwhile, the slot was busy, or the writer gave up; and
/// whether a signal whose handler lacks `SA_RESTART` came meanwhile (so
/// that a read that got nothing fails with `EINTR`). The phases are
/// `slot_protocol`'s; this side brings the clock, the kernel, the copy
/// and the signal mask (`wait_signals`).
fn wait_for_writer(
    fd: c_int,
    slot: &Slot,
    data: *mut u8,
    ino: u64,
    me: u32,
    buf: *mut u8,
    n: usize,
) -> (usize, bool) {
    let mut mask = WaitMask::begin();
    let mut side = Waiting {
        fd,
        slot,
        data,
        buf,
        mask: &mut mask,
        here: 0,
        deadline: 0,
        interrupted: false,
        // The first look (and every 64th) also asks the kernel: a writer
        // that found no reader waiting just before this announcement wrote
        // there, and would not end the wait.
        polls: 63,
    };
    let got = slot_protocol::wait_for_writer(slot, ino, me, n.min(MAX), &mut side);
    (got, mask.end())
}

/// A reader waiting in `slot`, as the slot protocol sees it from outside.
struct Waiting<'a> {
    fd: c_int,
    slot: &'a Slot,
    /// The slot's buffer.
    data: *mut u8,
    /// The caller's buffer.
    buf: *mut u8,
    /// The thread's signal mask for the wait.
    mask: &'a mut WaitMask,
    /// The CPU (plus one) the reader announced from.
    here: u32,
    deadline: i64,
    /// A counted handler ran during the wait (`WaitMask::poll`): it ends
    /// at the next look, as the kernel's read would with `EINTR`.
    interrupted: bool,
    polls: u32,
}

impl slot_protocol::Reader for Waiting<'_> {
    fn alive(&self, pid: u32) -> bool {
        alive(pid)
    }

    fn announcing(&mut self) {
        self.here = cpu();
        self.slot.reader_cpu.store(self.here, Ordering::Relaxed);
    }

    fn waiting(&mut self) {
        self.deadline = now_ns() + wait_budget(self.slot);
    }

    fn late(&mut self) -> bool {
        // Once yielding, every poll is a system call anyway.
        self.interrupted
            || ((self.polls % 64 == 63 || self.polls >= SPINS)
                && (now_ns() > self.deadline || kernel_has_bytes(self.fd)))
    }

    fn pause(&mut self) {
        self.interrupted |= self.mask.poll();
        // A writer that came from this CPU (it published it before its
        // claim) needs it to finish.
        let here = self.here;
        pause(
            &mut self.polls,
            here != 0 && self.slot.writer_cpu.load(Ordering::Relaxed) == here,
        );
    }

    unsafe fn take(&mut self, len: usize) {
        // SAFETY: the buffer holds `len <= MAX` bytes the writer wrote
        // before FILLED and no writer touches it until IDLE (the caller's
        // contract); `buf` has room for `n >= len` (read(2)'s contract);
        // they do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(self.data, self.buf, len) };
    }
}

/// write(2) on a descriptor the table says is a pipe's write end, with
/// hand-over on.
///
/// # Safety
///
/// As for write(2).
pub unsafe fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    let kind = table::kind(fd);
    if n == 0 || n > MAX || (kind != table::PIPE_WRITE && kind != table::STREAM_SOCKET) {
        // SAFETY: the caller's contract.
        return unsafe { kernel_write(fd, buf, n) };
    }
    let saved = errno();
    // `ino` is the inode a reader of these bytes waits under: the pipe's,
    // or the other end's of a socket pair.
    let (mut ino, end) = if kind == table::PIPE_WRITE {
        (table::inode(fd), End::Pipe)
    } else {
        (
            table::peer(fd),
            End::Socket {
                own: table::inode(fd),
            },
        )
    };
    if ino == 0 && kind == table::PIPE_WRITE {
        ino = fifo_inode(fd);
        table::set_inode(fd, ino);
    }
    if ino == 0 {
        set_errno(saved);
        // SAFETY: the caller's contract.
        return unsafe { kernel_write(fd, buf, n) };
    }
    // A pipe whose reader has waited in the library learns where its
    // writer runs (so that a reader on the same CPU does not wait) and
    // when it writes to the kernel (so that a reader woken by it measures
    // the wake-up). Other pipes pay one load.
    let (slot, _) = slot(ino);
    let watched = slot.ino.load(Ordering::Relaxed) == ino;
    let mut here = 0;
    if watched {
        here = cpu();
        if slot.writer_cpu.load(Ordering::Relaxed) != here {
            slot.writer_cpu.store(here, Ordering::Relaxed);
        }
    }
    // A signal handler that interrupted a wait of this thread (signals
    // unblocked) writes through the kernel: the wait it interrupted may be
    // this write's reader, which cannot take until the handler returns.
    if !wait_signals::in_unblocked_wait() && hand_over(fd, ino, end, buf.cast(), n) {
        set_errno(saved);
        stats::ring_wrote(n as isize);
        #[cfg(test)]
        HANDED.fetch_add(1, Ordering::Relaxed);
        return n as isize;
    }
    // A reader on this CPU does not wait, so needs no measurement (and
    // the clock costs a same-CPU round trip more than anything else here).
    if watched && slot.reader_cpu.load(Ordering::Relaxed) != here {
        slot.kernel_write_ns
            .store(now_ns() as u64, Ordering::Relaxed);
    }
    set_errno(saved);
    // SAFETY: the caller's contract.
    unsafe { kernel_write(fd, buf, n) }
}

/// The end a writer writes from.
#[derive(Clone, Copy)]
enum End {
    /// A pipe's write end: its reader waits under the pipe's inode.
    Pipe,
    /// One end of a socket pair, whose inode is `own`: its reader waits
    /// under the other end's.
    Socket { own: u64 },
}

/// Whether a writer on `fd`, holding the claim on a reader waiting under
/// `ino`, may hand its bytes over: the descriptor is still the end the
/// table says (the table is a hint), the kernel would take the bytes now,
/// and it holds none of this direction's bytes (rule R2: a byte in the
/// kernel must not be overtaken).
fn writer_may_hand_over(fd: c_int, ino: u64, end: End) -> bool {
    let mut queued: c_int = 0;
    match end {
        End::Pipe => {
            fifo_inode(fd) == ino
                && status_flags(fd) & sys::O_ACCMODE == sys::O_WRONLY
                // SAFETY: FIONREAD writes one int.
                && unsafe { sys::ioctl(fd, sys::FIONREAD, (&raw mut queued) as usize) } == 0
                && queued == 0
        }
        // An empty send fails with EPIPE where a write would: this end
        // shut down for writing, or the other for reading, or closed. A
        // Unix stream socket's unread bytes are charged to its sender, so
        // SIOCOUTQ counts what the other end has not read yet.
        // A writer that found so at this options generation knows without
        // the send (`socket_options`: a `shutdown` moves it on; the reader
        // it holds keeps the other end open).
        End::Socket { own } => {
            let generation = socket_options::generation();
            let noted = generation != 0 && table::sendable_at(fd) == generation;
            // A current note at 3 or above also says it is this socket
            // (`table`): an `fstat` less with the reader held.
            ((noted && table::note_vouches(fd)) || socket_inode(fd) == own)
                && (noted
                    // SAFETY: sends nothing from a valid pointer; no signal.
                    || (unsafe { sys::send(fd, c"".as_ptr().cast(), 0, sys::MSG_DONTWAIT | sys::MSG_NOSIGNAL) } == 0
                        && {
                            if generation != 0 {
                                table::note_sendable(fd, generation);
                            }
                            true
                        }))
                // SAFETY: SIOCOUTQ writes one int.
                && unsafe { sys::ioctl(fd, sys::SIOCOUTQ, (&raw mut queued) as usize) } == 0
                && queued == 0
        }
    }
}

/// Hands `n` bytes at `buf` to a reader waiting under `ino` in its slot:
/// whether it took them (if not, nothing of them was delivered). The
/// phases are `slot_protocol`'s; this side brings the checks, the copy and
/// the clock.
fn hand_over(fd: c_int, ino: u64, end: End, buf: *const u8, n: usize) -> bool {
    let (slot, data) = slot(ino);
    let mut side = Handing {
        fd,
        ino,
        end,
        slot,
        data,
        buf,
        n,
        deadline: 0,
        reader_here: false,
        polls: 0,
    };
    slot_protocol::hand_over(slot, ino, n, &mut side)
}

/// A writer handing over through `slot`, as the slot protocol sees it
/// from outside.
struct Handing<'a> {
    fd: c_int,
    ino: u64,
    end: End,
    slot: &'a Slot,
    /// The slot's buffer.
    data: *mut u8,
    /// The caller's bytes.
    buf: *const u8,
    n: usize,
    deadline: i64,
    /// Whether the reader announced from this CPU.
    reader_here: bool,
    polls: u32,
}

impl slot_protocol::Writer for Handing<'_> {
    fn pid(&mut self) -> u32 {
        pid::mine()
    }

    fn holding(&mut self) -> bool {
        writer_may_hand_over(self.fd, self.ino, self.end)
    }

    unsafe fn fill(&mut self, me: u32) -> bool {
        // The claim gives this writer the slot's buffer until FILLED (or
        // until it frees an ABANDONED slot), and `n <= MAX` bytes fit. A
        // `buf` the kernel would refuse with EFAULT goes to the kernel to
        // refuse.
        checked::copy_in(me as c_int, self.data, self.buf, self.n)
    }

    fn filled(&mut self) {
        self.deadline = now_ns() + WRITER_WAIT_NS;
        // A reader that announced from this CPU is not running now (this
        // writer is): yield to it from the first poll.
        self.reader_here = self.slot.reader_cpu.load(Ordering::Relaxed) == cpu() && cpu() != 0;
    }

    fn late(&mut self) -> bool {
        // Not taken in time: the reader was killed, stopped or is not
        // running.
        self.polls % 64 == 63 && now_ns() > self.deadline
    }

    fn pause(&mut self) {
        pause(&mut self.polls, self.reader_here);
    }
}

/// Reads that waited in the library, in this test program.
#[cfg(test)]
pub static WAITS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Writes that were handed over, in this test program.
#[cfg(test)]
pub static HANDED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
