//! Stage 2b's rings (docs/run.md, "2b wired"): where each pipe's resident
//! ring lives, which descriptors of this process use which ring, and how
//! many descriptors in the process tree hold each ring's read and write
//! ends, so that a ring is given back once no descriptor of its pipe is
//! left.
//!
//! The pool, version 2: one shared anonymous mapping, made when the
//! library loads with rings on (`switch`) and shared with
//! every process forked after it (the only ones that can hold the pipes
//! made in it: an `exec`, `posix_spawn` or descriptor passing hands a
//! ring's pipe to the kernel first, `spill_hooks`):
//!
//! ```text
//! offset                size
//! 0                     COUNT x 64 B     entry i: Entry (holders, EPIPE clock)
//! COUNT * 64            COUNT x RING     ring i: resident::Ring
//! ```
//!
//! Zero pages are free entries and empty rings in RING mode. Version 2
//! put the last write's copy on each ring's state line (`resident`).
//! Only processes forked from the one that made the pool share it, so
//! every user runs the same library and the version is not stored. An entry's
//! `holders` word is `writers << 32 | readers`: descriptors, in every
//! process of the tree, of the ring's pipe's write and read ends. It goes
//! from 0 to one of each at `pipe`, up at `dup` and `fork` (in the parent,
//! before the child exists, so that no close in either can free a ring the
//! other still uses), down at `close`, and down for every descriptor a
//! process still holds when it exits through `exit` or `_exit`
//! (`at_exit`); at 0 the ring is free. A Unix stream socket pair takes
//! two rings, `2k` and `2k + 1`: its first end writes ring `2k` and reads
//! ring `2k + 1`, the other the other way round, so each of its
//! descriptors holds one ring as a writer and the other as a reader, and
//! an entry's pipe inode is then its writing end's socket inode. A
//! process killed, one that started
//! threads, or one that ends by a raw `exit_group`, leaves its counts: that
//! ring is never given back in this tree (a later pipe that finds no free
//! ring goes through the kernel, which is always right).

use core::ffi::c_int;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, AtomicU16, AtomicU32, AtomicU64, Ordering};

use crate::resident::Ring;
use crate::ring_switch::Switch;
use crate::{main_stack, pid, switch, sys, table};

/// Rings in a process tree's pool: 128 x 64 KiB of address space, touched
/// only when used.
pub const COUNT: usize = 128;
const ENTRY: usize = 64;
const RINGS_AT: usize = COUNT * ENTRY;
const POOL_LEN: usize = RINGS_AT + COUNT * core::mem::size_of::<Ring>();
const ONE_READER: u64 = 1;
const ONE_WRITER: u64 = 1 << 32;

const _: () = assert!(core::mem::size_of::<Ring>().is_multiple_of(64));
const _: () = assert!(COUNT < u16::MAX as usize);

/// One ring's bookkeeping, a line of its own.
#[repr(C, align(64))]
pub struct Entry {
    /// `writers << 32 | readers` (see the module).
    holders: AtomicU64,
    /// When a writer last asked the kernel whether a reader is left
    /// (monotonic ns).
    pub reader_checked_ns: AtomicU64,
    /// The CPU (plus one; 0: not known) the pipe's writer last wrote from:
    /// a reader there does not wait for it, which only delays it.
    pub writer_cpu: AtomicU32,
    /// The CPU (plus one) the pipe's reader last read from: a writer there
    /// that finds no room lets the kernel wait (the reader needs the CPU).
    pub reader_cpu: AtomicU32,
    /// Writes left before a writer tries a lead again, after one that did
    /// not bring the pipe back to the ring (`ring_io`).
    pub lead_skips: AtomicU32,
    /// The pipe's `st_dev` and `st_ino`: how a `vfork` child, whose
    /// descriptors the table does not follow, knows the pipe again.
    pipe_dev: AtomicU64,
    pipe_ino: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<Entry>() == ENTRY);

/// Whether rings were asked for when the library loaded (`switch`; and
/// more than one CPU is usable), and not stopped since.
static ON: Switch = Switch::off();
/// The pool, or null while rings are off.
static POOL: AtomicPtr<u8> = AtomicPtr::new(null_mut());

/// Whether resident rings are on: the one load a call pays for them.
#[inline(always)]
pub fn on() -> bool {
    ON.on()
}

/// Gives no new pipe or socket pair a ring in this process, nor in the
/// children it forks after (they copy the switch): for a process that
/// starts using a path to its pipes no wrapper sees (`syscall_hook`).
/// Every ring in the table after this returns is the caller's to spill;
/// one another thread notes later is spilled by that thread
/// ([`still_on_after_making`], `ring_switch`).
pub fn stop() {
    ON.stop();
}

/// Called once a new ring is in the table: whether rings are still on
/// (else its maker spills it: `ring_switch`).
pub fn still_on_after_making() -> bool {
    ON.still_on_after_making()
}

/// Whether any ring may be in use in this process (the pool exists, which
/// it does while rings are on): the calls that must hand a ring's pipe to
/// the kernel look no further before.
#[inline(always)]
pub fn active() -> bool {
    !POOL.load(Ordering::Relaxed).is_null()
}

/// Turns rings on if the mode asks for them (`switch`: unset or `2`, on
/// two or more usable CPUs). Called from the constructor only.
pub fn open_from_env(mode: switch::Mode) {
    sys::keep_errno(|| {
        if mode != switch::Mode::Rings {
            return;
        }
        // The variadic wrappers a spill needs (`execl`, `dprintf`, ...) are
        // written for x86-64 only (`spill_hooks`).
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        pid::open();
        main_stack::open();
        // Mapped now, not at the first pipe: a program that counts its
        // mappings before and after making pipes sees no change.
        if pool().is_some() {
            ON.turn_on();
        }
    });
}

/// Turns rings on whatever the environment says (the tests' way in).
#[cfg(test)]
pub fn turn_on() {
    pid::open();
    main_stack::open();
    ON.turn_on();
}

/// The pool, mapped now if this is the tree's first pipe; `None` if the
/// kernel refuses.
fn pool() -> Option<*mut u8> {
    let p = POOL.load(Ordering::Acquire);
    if !p.is_null() {
        return Some(p);
    }
    // SAFETY: a new shared anonymous mapping at an address the kernel
    // picks: it aliases nothing.
    let m = unsafe {
        sys::mmap(
            null_mut(),
            POOL_LEN,
            sys::PROT_RW,
            sys::MAP_SHARED | sys::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == sys::MAP_FAILED {
        return None;
    }
    match POOL.compare_exchange(null_mut(), m.cast(), Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(m.cast()),
        Err(other) => {
            // Another thread's first pipe won.
            // SAFETY: the mapping just made, seen by no one else.
            unsafe { sys::munmap(m, POOL_LEN) };
            Some(other)
        }
    }
}

fn entry(i: u16) -> &'static Entry {
    let p = POOL.load(Ordering::Acquire);
    // SAFETY: a ring index is handed out only once the pool exists, which
    // is never unmapped; entry `i < COUNT` lies inside it and is shared
    // with other processes only through atomics.
    unsafe { &*p.add(usize::from(i) * ENTRY).cast::<Entry>() }
}

/// Ring `i` of the pool.
pub fn ring(i: u16) -> &'static Ring {
    let p = POOL.load(Ordering::Acquire);
    // SAFETY: as for `entry`; ring `i` lies inside the pool, 64-aligned,
    // and its words are atomics.
    unsafe {
        &*p.add(RINGS_AT + usize::from(i) * core::mem::size_of::<Ring>())
            .cast::<Ring>()
    }
}

/// Ring `i`'s bookkeeping.
pub fn bookkeeping(i: u16) -> &'static Entry {
    entry(i)
}

/// A free ring for a new pipe, its holders one reader and one writer; or
/// `None` (no pool, or every ring in use).
pub fn take() -> Option<u16> {
    pool()?;
    (0..COUNT as u16).find(|&i| claim(i))
}

/// Two free rings `2k` and `2k + 1` for a new socket pair (its first end
/// writes `2k`), each held by one reader and one writer; or `None`.
pub fn take_pair() -> Option<u16> {
    pool()?;
    (0..COUNT as u16).step_by(2).find(|&i| {
        if !claim(i) {
            return false;
        }
        if claim(i + 1) {
            return true;
        }
        entry(i)
            .holders
            .fetch_sub(ONE_READER | ONE_WRITER, Ordering::Release);
        false
    })
}

/// Takes ring `i` if it is free, as `take` does.
fn claim(i: u16) -> bool {
    let e = entry(i);
    if e.holders.load(Ordering::Relaxed) != 0
        || e.holders
            .compare_exchange(
                0,
                ONE_READER | ONE_WRITER,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return false;
    }
    // No descriptor anywhere refers to a free ring: it is this pipe's
    // alone until its ends are copied.
    ring(i).reset();
    e.reader_checked_ns.store(0, Ordering::Relaxed);
    e.writer_cpu.store(0, Ordering::Relaxed);
    e.reader_cpu.store(0, Ordering::Relaxed);
    e.lead_skips.store(0, Ordering::Relaxed);
    e.pipe_ino.store(0, Ordering::Relaxed);
    true
}

/// What each descriptor of this process below `table::TRACKED_FDS` uses:
/// 0, or `1 + ring | WRITE_END | SOCKET_END` (the ring's index plus one,
/// whether it is the write end, and whether it is a socket pair's end,
/// which also reads ring `ring ^ 1`). Zero pages until used.
static RING_OF: [AtomicU16; table::TRACKED_FDS] = [const { AtomicU16::new(0) }; table::TRACKED_FDS];
const WRITE_END: u16 = 1 << 15;
const SOCKET_END: u16 = 1 << 14;
const _: () = assert!(COUNT < SOCKET_END as usize);
/// One more than the highest descriptor that ever used a ring here: how
/// far `fork` looks.
static HIGHEST: AtomicU32 = AtomicU32::new(0);

fn one(write_end: bool) -> u64 {
    if write_end {
        ONE_WRITER
    } else {
        ONE_READER
    }
}

/// One more holder of what the table value `v` uses: a pipe's end, or
/// both rings of a socket end.
fn hold(v: u16) {
    for (i, write_end) in rings_of(v) {
        entry(i)
            .holders
            .fetch_add(one(write_end), Ordering::Relaxed);
    }
}

/// One holder fewer of what the table value `v` uses.
fn release(v: u16) {
    for (i, write_end) in rings_of(v) {
        // Release: the ring's last user's accesses come before the next
        // pipe's reset (`take`'s Acquire).
        entry(i)
            .holders
            .fetch_sub(one(write_end), Ordering::Release);
    }
}

/// The rings the table value `v` (not 0) holds, and as which end.
fn rings_of(v: u16) -> impl Iterator<Item = (u16, bool)> {
    let (i, write_end) = decode(v).expect("a ring's value");
    let read = (v & SOCKET_END != 0).then_some((i ^ 1, false));
    core::iter::once((i, write_end)).chain(read)
}

/// The ring and end a table value names (a socket end: the ring it writes).
fn decode(v: u16) -> Option<(u16, bool)> {
    (v != 0).then(|| ((v & !(WRITE_END | SOCKET_END)) - 1, v & WRITE_END != 0))
}

fn set(fd: c_int, v: u16) {
    if let Some(slot) = RING_OF.get(fd as u32 as usize) {
        slot.store(v, Ordering::Relaxed);
        if v != 0 {
            HIGHEST.fetch_max(fd as u32 + 1, Ordering::Relaxed);
        }
    }
}

/// Ring `i` serves the new pipe whose ends are `read` and `write`, and
/// whose `st_dev` and `st_ino` are `pipe` (its holders are already one of
/// each, `take`'s).
pub fn made(read: c_int, write: c_int, i: u16, pipe: (u64, u64)) {
    let e = entry(i);
    e.pipe_dev.store(pipe.0, Ordering::Relaxed);
    e.pipe_ino.store(pipe.1, Ordering::Relaxed);
    set(read, i + 1);
    set(write, (i + 1) | WRITE_END);
}

/// Rings `i` and `i + 1` (`take_pair`'s) serve the new socket pair `a`,
/// `b`, whose sockets' `st_dev` and `st_ino` are `ids`: `a` writes ring
/// `i` and reads `i + 1`.
pub fn made_socket_pair(a: c_int, b: c_int, i: u16, ids: [(u64, u64); 2]) {
    for (k, (dev, ino)) in ids.into_iter().enumerate() {
        let e = entry(i + k as u16);
        e.pipe_dev.store(dev, Ordering::Relaxed);
        e.pipe_ino.store(ino, Ordering::Relaxed);
    }
    set(a, (i + 1) | WRITE_END | SOCKET_END);
    set(b, (i + 2) | WRITE_END | SOCKET_END);
}

/// The ring in use whose pipe has `st_dev` and `st_ino` `pipe`, if any:
/// the pool's, not this process's table (which a `vfork` child shares
/// with its parent, but whose descriptors it may have moved).
pub fn with_pipe(pipe: (u64, u64)) -> Option<u16> {
    if !active() {
        return None;
    }
    (0..COUNT as u16).find(|&i| {
        let e = entry(i);
        e.holders.load(Ordering::Relaxed) != 0
            && e.pipe_ino.load(Ordering::Relaxed) == pipe.1
            && e.pipe_dev.load(Ordering::Relaxed) == pipe.0
    })
}

/// The `st_dev` and `st_ino` of ring `i`'s pipe (of a socket pair's ring:
/// its writing end's socket), if the ring is in use.
pub fn pipe_id(i: u16) -> Option<(u64, u64)> {
    let e = entry(i);
    (e.holders.load(Ordering::Relaxed) != 0).then(|| {
        (
            e.pipe_dev.load(Ordering::Relaxed),
            e.pipe_ino.load(Ordering::Relaxed),
        )
    })
}

/// The ring `fd` uses and whether `fd` is its write end, if any (a
/// socket pair's end: the ring it writes, and true).
#[inline]
pub fn of(fd: c_int) -> Option<(u16, bool)> {
    decode(value(fd))
}

/// The ring a socket pair's end `fd` writes (it reads ring `i ^ 1`), if
/// `fd` is one with rings.
#[inline]
pub fn socket_of(fd: c_int) -> Option<u16> {
    let v = value(fd);
    if v & SOCKET_END != 0 {
        decode(v).map(|(i, _)| i)
    } else {
        None
    }
}

/// Whether another descriptor of this process than `fd` holds what `fd`
/// holds (for a socket end: the same end).
pub fn held_elsewhere(fd: c_int) -> bool {
    let v = value(fd);
    v != 0 && (0..HIGHEST.load(Ordering::Relaxed) as c_int).any(|o| o != fd && value(o) == v)
}

/// A descriptor of this process that writes ring `i` (a pipe's write end,
/// or a socket end), if any.
pub fn writing(i: u16) -> Option<c_int> {
    (0..HIGHEST.load(Ordering::Relaxed) as c_int).find(|&o| decode(value(o)) == Some((i, true)))
}

fn value(fd: c_int) -> u16 {
    RING_OF
        .get(fd as u32 as usize)
        .map_or(0, |v| v.load(Ordering::Relaxed))
}

/// `fd` is being closed (or replaced): its ring loses a holder. In a
/// `vfork` child, which shares its parent's memory, nothing changes (its
/// closes are not its parent's, and its copies were never counted).
pub fn forget(fd: c_int) {
    if let Some(slot) = RING_OF.get(fd as u32 as usize) {
        if slot.load(Ordering::Relaxed) != 0 && table::owns_memory() {
            let v = slot.swap(0, Ordering::Relaxed);
            if v != 0 {
                release(v);
            }
        }
    }
}

/// Descriptors `first..=last` are being closed.
pub fn forget_range(first: u32, last: u32) {
    let end = HIGHEST.load(Ordering::Relaxed).min(last.saturating_add(1));
    for fd in first..end {
        forget(fd as c_int);
    }
}

/// `to` is now a copy of `from` (what `to` was is gone): it uses `from`'s
/// ring, held once more. False if `from` has a ring and the copy cannot
/// be recorded (at or above `table::TRACKED_FDS`): the caller must hand
/// the pipe to the kernel.
pub fn copied(from: c_int, to: c_int) -> bool {
    if from == to || !table::owns_memory() {
        return true;
    }
    forget(to);
    match value(from) {
        0 => true,
        _ if RING_OF.get(to as u32 as usize).is_none() => false,
        v => {
            hold(v);
            set(to, v);
            true
        }
    }
}

/// Every descriptor of this process that uses a ring, with its ring and
/// end.
pub fn each(mut f: impl FnMut(c_int, u16, bool)) {
    let end = HIGHEST.load(Ordering::Relaxed);
    for fd in 0..end {
        if let Some((i, w)) = of(fd as c_int) {
            f(fd as c_int, i, w);
        }
    }
}

/// Each table value of this process's descriptors that use rings.
fn each_value(mut f: impl FnMut(u16)) {
    let end = HIGHEST.load(Ordering::Relaxed);
    for fd in 0..end {
        let v = value(fd as c_int);
        if v != 0 {
            f(v);
        }
    }
}

/// The process is ending (`exit`, after its handlers and destructors, or
/// `_exit`): each ring descriptor it still holds, which the kernel is
/// about to close, is counted out, as `close` would, so that a ring whose
/// last holders exit without closing is given back to the tree. A later
/// call on such a descriptor goes to the kernel (`ring_io::before_exit`
/// has put the ring's bytes there first where one might).
///
/// Only where nothing can use a ring after the count: not in a `vfork`
/// child (whose descriptors were never counted), and not once threads
/// were started (another thread may be inside a ring's call, and would go
/// on using a ring another pipe may take). What is left then stays
/// counted, as for a killed process.
pub fn at_exit() {
    if !active() || !table::owns_memory() || crate::wait_signals::threads_started() {
        return;
    }
    let end = HIGHEST.load(Ordering::Relaxed);
    for fd in 0..end {
        forget(fd as c_int);
    }
}

/// Before `fork`: every ring descriptor of this process is held once more,
/// by the child to be, so that no close in either frees a ring the other
/// still uses.
pub fn before_fork() {
    if active() && table::owns_memory() {
        each_value(hold);
    }
}

/// After a `fork` that failed: takes back what `before_fork` added.
pub fn fork_failed() {
    if active() && table::owns_memory() {
        each_value(release);
    }
}

/// Whether no descriptor of ring `i`'s read end is left in the tree (so a
/// write goes to the kernel, which raises `EPIPE`).
pub fn no_reader(i: u16) -> bool {
    entry(i).holders.load(Ordering::Relaxed) & 0xffff_ffff == 0
}

/// The descriptors holding ring `i`'s read and write ends (the tests').
#[cfg(test)]
pub fn holders(i: u16) -> (u32, u32) {
    let h = entry(i).holders.load(Ordering::Relaxed);
    (h as u32, (h >> 32) as u32)
}
