//! The resident ring's protocol (stage 2b of docs/run.md): which path a
//! pipe's bytes take, the ring or the kernel pipe, and every move between
//! the two, so that a reader gets every byte once and in order.
//!
//! While a reader of the pipe is awake, a write copies its bytes into the
//! ring and publishes them with one compare-and-swap: no system call on
//! either side. A reader that finds nothing for as long as a wake-up costs
//! switches the pipe to the kernel and sleeps in the kernel `read`, so a
//! later write goes to the kernel pipe and wakes it there, and EOF,
//! `EINTR` and `O_NONBLOCK` are the kernel's own. The next read that finds
//! the kernel pipe empty switches it back.
//!
//! One state word holds the ring's tail and the mode, so that a write is
//! published only while the pipe is in ring mode and a reader goes to
//! sleep only while the ring is empty: the two compare-and-swaps exclude
//! each other, and no byte is left in a ring nobody watches.
//!
//! ```text
//!  63          40 39    33 32    26 25 24 23                     0
//! +--------------+--------+--------+-----+------------------------+
//! | epoch        | kr     | kw     | mode| tail                   |
//! +--------------+--------+--------+-----+------------------------+
//!   epoch: one more at the end of each kernel write (a reader that saw
//!          no writer in the kernel and an empty kernel pipe knows no
//!          write came and went since)
//!   kr:    readers inside a kernel read     kw: writers inside a kernel write
//!   mode:  RING, KERNEL, SPILLING, FOREVER  tail: bytes ever published,
//!                                                 modulo 2^24
//!
//!   RING --reader: ring empty, no byte in time, or O_NONBLOCK--> KERNEL
//!   KERNEL --reader or writer: no kr, no kw, kernel pipe empty--> RING
//!   RING --writer: its reader is gone, or it is a signal handler that
//!          interrupted its own thread's write--> KERNEL
//!   RING --writer that may not sleep for room (a socket pair's, or a
//!          thread's of a process with others) and found none in
//!          time--> SPILLING --> KERNEL
//!   RING, KERNEL --a read end leaves the library, or a writer waited
//!          too long for the writer lock--> SPILLING --> FOREVER
//!   KERNEL --127 readers or writers in the kernel, ring empty--> FOREVER
//! ```
//!
//! The rules the models check (`resident_protocol/loom_models.rs`):
//! - a ring write is published only in RING mode (its CAS expects it);
//! - RING becomes KERNEL by a reader only with the ring empty (the CAS
//!   expects the tail it compared with the head), so every kernel byte
//!   written after it is later than every ring byte;
//! - KERNEL becomes RING (by a reader or a writer) only with no reader or
//!   writer in the kernel (counts `kr`, `kw`) and the kernel pipe empty,
//!   the epoch unchanged;
//! - a reader takes ring bytes before kernel bytes, and claims them with
//!   a CAS of the head after copying, so two readers never both take a
//!   byte, and a copy a writer may have overwritten is thrown away;
//! - a writer waiting for room sleeps only after saying so, and a reader
//!   that frees room wakes it (no lost wake-up);
//! - a spill moves the ring's bytes into the kernel pipe, ahead of every
//!   later write, before the pipe is the kernel's for good: FOREVER
//!   leaves no byte in the ring.
//!
//! The last write's copy: a write of up to `last_max()` bytes (48 in the
//! library) is copied beside the state word too, with a tag, so that a
//! reader spinning on that line has the bytes when it sees the tail, and
//! neither side moves the ring's data lines across CPUs for a short
//! message (about 30% of a cross-CPU round trip, docs/run.md, "The last
//! write's copy"). The ring still gets the bytes, for longer reads,
//! spills and a reader that finds the copy replaced.
//!
//! ```text
//!  63                          32 31     24 23                     0
//! +------------------------------+---------+------------------------+
//! | seq                          | len     | end                    |
//! +------------------------------+---------+------------------------+
//!   seq: one more at each copy     len: the write's bytes, 0: no copy
//!   end: the tail position at the write's end
//! ```
//!
//! A sequence lock: the writer stores the tag with the new `seq` and no
//! copy, a Release fence, the words, then the whole tag (Release), all
//! before the tail's CAS; a longer write sets `len` to 0. A reader whose
//! unread bytes end at `end` and lie within the write copies them from
//! the words, and keeps the copy only if the tag is unchanged after an
//! Acquire fence. (The model `a_reader_never_takes_a_copy_that_a_later_write_replaced`
//! checks it.)
//!
//! No system call in here: the copies, the kernel pipe's `FIONREAD`, the
//! sleeps, the clock and whether the reader exists come in through
//! [`Writer`], [`Reader`] and [`Spiller`]; the atomics come from `sync`.

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
mod loom_models;

const POS_MASK: u64 = (1 << 24) - 1;
const MODE_SHIFT: u32 = 24;
const MODE_MASK: u64 = 0b11 << MODE_SHIFT;
const KW_ONE: u64 = 1 << 26;
const KR_ONE: u64 = 1 << 33;
const COUNT_MAX: u64 = 0x7f;
const EPOCH_ONE: u64 = 1 << 40;
const LAST_LEN_SHIFT: u32 = 24;
const LAST_LEN_MASK: u64 = 0xff << LAST_LEN_SHIFT;
const LAST_SEQ_ONE: u64 = 1 << 32;
const LAST_SEQ_MASK: u64 = !(LAST_SEQ_ONE - 1);

/// Writes publish to the ring; readers spin on it.
pub const RING: u64 = 0;
/// Writes go to the kernel pipe; readers take what the ring still holds,
/// then read the kernel pipe.
pub const KERNEL: u64 = 1;
/// A read end is leaving the library: the ring's bytes are moving into
/// the kernel pipe, and every other reader and writer waits.
pub const SPILLING: u64 = 2;
/// The kernel pipe for good.
pub const FOREVER: u64 = 3;

/// The ring's tail in state word `s`.
pub fn tail(s: u64) -> u32 {
    (s & POS_MASK) as u32
}

/// The mode in state word `s`.
pub fn mode(s: u64) -> u64 {
    (s & MODE_MASK) >> MODE_SHIFT
}

/// The bytes of the write whose copy tag `t` describes (0: no copy).
fn last_len(t: u64) -> usize {
    ((t & LAST_LEN_MASK) >> LAST_LEN_SHIFT) as usize
}

/// The tail position at the end of that write.
fn last_end(t: u64) -> u32 {
    (t & POS_MASK) as u32
}

fn writers_in_kernel(s: u64) -> u64 {
    (s / KW_ONE) & COUNT_MAX
}

fn readers_in_kernel(s: u64) -> u64 {
    (s / KR_ONE) & COUNT_MAX
}

fn with_mode(s: u64, m: u64) -> u64 {
    (s & !MODE_MASK) | (m << MODE_SHIFT)
}

fn with_tail(s: u64, t: u32) -> u64 {
    (s & !POS_MASK) | (u64::from(t) & POS_MASK)
}

/// Bytes in the ring between `head` and `tail` (positions modulo 2^24).
pub fn used(tail: u32, head: u32) -> u32 {
    tail.wrapping_sub(head) & POS_MASK as u32
}

/// Tail position `p` moved on by `n` bytes (modulo 2^24).
pub fn advance(p: u32, n: usize) -> u32 {
    (p.wrapping_add(n as u32)) & POS_MASK as u32
}

/// Head `h` moved on by `n` bytes: all 32 bits, so that a reader's CAS
/// from a stale look fails unless 4 GiB went by, not 16 MiB.
pub fn advance_head(h: u32, n: usize) -> u32 {
    h.wrapping_add(n as u32)
}

/// The words of a pipe's ring the protocol moves (the arena's, or a
/// model's own under loom).
pub trait Words {
    /// See the module's diagram.
    fn state(&self) -> &AtomicU64;
    /// Bytes ever taken, modulo 2^32 (compared with the tail modulo
    /// 2^24); moved by readers with a CAS. A writer waiting for room
    /// sleeps on it (a futex word).
    fn head(&self) -> &AtomicU32;
    /// 0, or the process whose writer is copying into the ring.
    fn writer(&self) -> &AtomicU32;
    /// Non-zero while a writer sleeps for room (or is about to).
    fn room_wanted(&self) -> &AtomicU32;
    /// The head as the writer lock's holder last read it: at or behind
    /// the head, so room counted from it is never more than there is.
    /// Only the holder touches it (on the writer's line, so a write with
    /// room does not fetch the readers' line).
    fn head_seen(&self) -> &AtomicU32;
    /// The ring's size in bytes: a power of two, at most the kernel
    /// pipe's capacity and 2^23.
    fn capacity(&self) -> u32;
    /// The largest write that must reach a reader whole (`PIPE_BUF`).
    fn atomic(&self) -> usize;
    /// The last write's tag (see "The last write's copy" below), on the
    /// state word's line.
    fn last_tag(&self) -> &AtomicU64;
    /// The largest write whose bytes are also copied beside the tag.
    fn last_max(&self) -> usize;
}

/// What a write needs from outside the ring; a writer that gives up on
/// the lock spills the ring with its own write end.
pub trait Writer: Spiller {
    /// This process (non-zero).
    fn me(&mut self) -> u32;
    /// Whether this thread holds the writer lock itself (a signal handler
    /// that interrupted its copy): it must not wait for it. (A thread
    /// merely inside a write, waiting for another's lock, does not.)
    fn reentered(&mut self) -> bool;
    /// Copies the caller's bytes `[from, from + len)` into the ring from
    /// position `at` on (wrapping at the capacity).
    ///
    /// # Safety
    ///
    /// `[at, at + len)` is free: no reader takes it until the tail is
    /// published past it.
    unsafe fn put(&mut self, at: u32, from: usize, len: usize);
    /// Copies the caller's bytes `[from, from + len)` beside the last
    /// write's tag, from its first byte on.
    ///
    /// # Safety
    ///
    /// `len <= last_max()`; this writer holds the writer lock, and the
    /// tag says no copy is there.
    unsafe fn put_last(&mut self, from: usize, len: usize);
    /// Between two looks while the ring is full or the lock busy.
    fn pause(&mut self);
    /// Whether the short wait for room is over (the next wait sleeps).
    fn late(&mut self) -> bool;
    /// Whether the wait for the writer lock is over (the pipe goes to the
    /// kernel for good). Longer than a sleep for room, which the holder
    /// may be in.
    fn lock_late(&mut self) -> bool;
    /// Sleeps while the head is still `head` (a futex wait on it), for at
    /// most the time after which the reader's existence is asked again.
    fn sleep(&mut self, head: u32);
    /// Whether no process holds the read end any more (the kernel says
    /// so: a `poll` of the write end's `POLLERR`).
    fn reader_gone(&mut self) -> bool;
    /// Whether the kernel pipe is empty (`FIONREAD`) and a reader is left:
    /// a writer that finds the pipe KERNEL with nobody inside the kernel
    /// brings it back to the ring, as a reader would, but not once the
    /// reader is gone (its write must fail with `EPIPE` at once). May
    /// answer false without asking (a writer that knows its reader shares
    /// its CPU keeps the pipe the kernel's).
    fn kernel_empty(&mut self) -> bool;
    /// Whether this writer's reader shares its CPU: a KERNEL pipe that
    /// holds bytes, with no other writer inside, is not written at once
    /// but after a pause (while `late` allows), in which the reader may
    /// empty it and bring it back to the ring. Without, on one CPU one
    /// side is inside a kernel call (woken, waiting for the CPU) whenever
    /// the other looks, and the pipe never comes back.
    fn waits_for_drain(&mut self) -> bool {
        false
    }
    /// Whether this write may hold signals and sleep for room in the
    /// ring; if not, it only spins for room (`pause` until `late`, while
    /// [`Writer::may_spin_for_room`]), and with none then the ring is
    /// spilled and the rest goes to the kernel, which waits.
    fn may_wait(&mut self) -> bool;
    /// For a write that may not wait: whether it may spin on, asked at
    /// each look (the library's, while no handler without `SA_RESTART`
    /// is known: `wait_signals::Unmasked`). Ended by `release_signals`.
    fn may_spin_for_room(&mut self) -> bool {
        true
    }
    /// Whether a wait for room that is still short of it once the spin is
    /// over sleeps until a reader makes room; if not, the pipe becomes
    /// KERNEL and the rest goes to the kernel (a socket pair's ring, whose
    /// kernel socket holds more than the ring: a writer that the kernel
    /// would let go on must not wait for a reader).
    fn sleeps_for_room(&mut self) -> bool {
        true
    }
    /// A wait for room begins: a signal that comes from now on waits
    /// until [`Writer::release_signals`] (or the write's end), so that
    /// [`Writer::signalled`] sees it.
    fn hold_signals(&mut self) {}
    /// The write leaves the ring for the kernel, whose calls signals must
    /// reach: held ones are handled now.
    fn release_signals(&mut self) {}
    /// Whether a signal came while this write waited for room that would
    /// have ended a kernel `write` waiting there: the write ends with the
    /// bytes it has put.
    fn signalled(&mut self) -> bool {
        false
    }
    /// Writes the caller's bytes `[from, from + len)` to the kernel pipe,
    /// which is empty, `len` at most `atomic()` (so the kernel takes them
    /// whole without waiting): the kernel's answer, as `write(2)`'s.
    /// Begins a new short wait (`late` answers false again).
    ///
    /// # Safety
    ///
    /// `from + len` is at most the write's size.
    unsafe fn kernel_lead(&mut self, from: usize, len: usize) -> isize;
    /// Whether this write may try a lead (none soon after one that missed).
    fn may_lead(&mut self) -> bool {
        true
    }
    /// A lead did not bring the pipe back within the short wait.
    fn lead_missed(&mut self) {}
}

/// What a read needs from outside the ring.
pub trait Reader {
    /// Copies `len` ring bytes from position `at` on to the caller's
    /// buffer. The copy may race with a writer if another reader took
    /// them first; it is then thrown away, so it must use atomic loads.
    ///
    /// # Safety
    ///
    /// `len` is at most the caller's buffer.
    unsafe fn take(&mut self, at: u32, len: usize);
    /// Copies `len` bytes of the last write's copy, from its byte `skip`
    /// on, to the caller's buffer. The copy may race with the next write,
    /// and is thrown away if the tag changed, so it must use atomic loads.
    ///
    /// # Safety
    ///
    /// `len` is at most the caller's buffer; `skip + len <= last_max()`.
    unsafe fn take_last(&mut self, skip: usize, len: usize);
    /// Asked at every look at an empty ring: whether to stop waiting for
    /// a writer and sleep in the kernel instead.
    fn late(&mut self) -> bool;
    /// Between two looks.
    fn pause(&mut self);
    /// Whether the kernel pipe is empty (`FIONREAD`).
    fn kernel_empty(&mut self) -> bool;
    /// Wakes the writer sleeping for room (a futex wake of the head).
    fn wake_writer(&mut self);
}

/// What a spill needs: a way to put ring bytes into the kernel pipe.
pub trait Spiller {
    /// Writes `len` ring bytes from position `at` on into the kernel pipe
    /// (all of them: the kernel pipe has room for a whole ring).
    ///
    /// # Safety
    ///
    /// The spill has claimed `[at, at + len)`: no writer overwrites it
    /// until the spill returns.
    unsafe fn to_kernel(&mut self, at: u32, len: usize);
    /// Between two looks while another spill runs.
    fn wait_for_spill(&mut self);
    /// Wakes a writer sleeping for room (the spill made room).
    fn wake_writer(&mut self);
    /// The pipe is FOREVER: whoever waits for the spill may go on.
    fn spill_over(&mut self);
    /// Before this spill may make the pipe SPILLING: no signal handler of
    /// this thread runs until [`Spiller::handlers_back`], since one that
    /// touched the pipe would wait for the spill it interrupted.
    fn handlers_out(&mut self) {}
    /// The end of [`Spiller::handlers_out`].
    fn handlers_back(&mut self) {}
}

/// Where a write went.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// All of it into the ring.
    Ring,
    /// The first `done` bytes into the ring; the caller writes the rest
    /// to the kernel pipe, then calls [`kernel_write_done`] if `counted`.
    Kernel { done: usize, counted: bool },
    /// The first `done` bytes into the ring, then a signal came while it
    /// waited for room ([`Writer::signalled`]): the write ends with them,
    /// or, with none, begins again once the signal's handler has run (the
    /// kernel's `write` under `SA_RESTART`).
    Signalled { done: usize },
}

/// Where a read's bytes are.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// `n` bytes copied from the ring.
    Ring(usize),
    /// None in the ring: the caller reads the kernel pipe (blocking as the
    /// program asked), then calls [`kernel_read_done`] if `counted`.
    Kernel { counted: bool },
}

/// Writes `n` bytes (the caller's, copied by `w.put`): into the ring while
/// the pipe is in RING mode, whole if `n` is at most `atomic()`; what is
/// left goes to the kernel pipe.
pub fn write<R: Words, W: Writer>(ring: &R, w: &mut W, n: usize) -> Written {
    let mut done = 0;
    loop {
        let signalled;
        (done, signalled) = into_ring(ring, w, n, done);
        if done == n {
            return Written::Ring;
        }
        // A signal that came while the write waited for room (held, so
        // not yet handled) ends it here, before the kernel can make it
        // wait on; then signals reach the kernel's calls again.
        if signalled || w.signalled() {
            return Written::Signalled { done };
        }
        w.release_signals();
        match kernel_turn(ring, w, n, done) {
            Turn::Kernel(out) => return out,
            // A reader switched back to RING before this writer was
            // counted into the kernel: the rest goes to the ring after all.
            Turn::Ring => {}
            Turn::Lead => {
                let len = ring.atomic();
                // SAFETY: done + len < n (kernel_turn's condition).
                let r = unsafe { w.kernel_lead(done, len) };
                if r != len as isize {
                    // Not taken whole (a writer the library does not see
                    // filled the pipe, or the reader went): the kernel has
                    // the rest from what it took on, still counted, so no
                    // reader switches back before it lands, and gives its
                    // answer.
                    return Written::Kernel {
                        done: done + r.max(0) as usize,
                        counted: true,
                    };
                }
                kernel_write_done(ring);
                done += len;
                // The reader wakes with the lead, and its next read finds
                // the pipe quiet and brings it back to the ring, where the
                // rest then goes; if it does not come within a short wait,
                // the rest goes to the kernel.
                w.hold_signals();
                while mode(ring.state().load(Ordering::Acquire)) == KERNEL && !w.late() {
                    w.pause();
                }
                if mode(ring.state().load(Ordering::Acquire)) == KERNEL {
                    w.lead_missed();
                }
                if w.signalled() {
                    return Written::Signalled { done };
                }
            }
        }
    }
}

/// A writer's turn once the pipe has left the ring.
enum Turn {
    /// Counted into the kernel (or FOREVER): the caller writes the rest.
    Kernel(Written),
    /// Back in RING mode.
    Ring,
    /// Counted into the kernel to write a lead of `atomic()` bytes that
    /// wakes a reader sleeping there, which brings the pipe back.
    Lead,
}

/// Copies bytes `[done, n)` into the ring while the pipe is in RING mode:
/// how far it got, and whether a signal stopped it.
fn into_ring<R: Words, W: Writer>(ring: &R, w: &mut W, n: usize, mut done: usize) -> (usize, bool) {
    let state = ring.state();
    let me = w.me();
    // The writer lock: one copier at a time, so no copy lands on bytes
    // another writer published.
    loop {
        if mode(state.load(Ordering::Acquire)) != RING {
            return (done, false);
        }
        match ring
            .writer()
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(_) if w.reentered() => {
                // The holder is this thread, interrupted: its bytes are not
                // published, so these may go first, to the kernel, and
                // every write after them must follow them there.
                to_mode_from_ring(ring, KERNEL);
                return (done, false);
            }
            // Held too long: two writers at once, or a holder that died,
            // was exec'd over or jumped out of a handler (a pid cannot
            // tell: zombies answer `kill(pid, 0)`, pids are reused, other
            // namespaces say ESRCH). The kernel for good, which is always
            // right, with the ring's bytes spilled ahead of this write's.
            Err(_) if w.lock_late() => {
                spill(ring, w);
                return (done, false);
            }
            Err(_) => w.pause(),
        }
    }
    let cap = ring.capacity();
    let whole = n <= ring.atomic();
    let mut signalled = false;
    while done < n {
        let s = state.load(Ordering::Acquire);
        if mode(s) != RING {
            break;
        }
        let t = tail(s);
        let want = n - done;
        let need = if whole { want } else { 1 };
        let mut h = ring.head_seen().load(Ordering::Relaxed);
        if ((cap - used(t, h)) as usize) < need {
            // SYNC POINT: Acquire pairs with the readers' head CAS: the
            // bytes they took are out of the ring before it is written
            // again.
            h = ring.head().load(Ordering::Acquire);
            ring.head_seen().store(h, Ordering::Relaxed);
            // A head moved by a spill frees bytes it is still copying out:
            // the spill moved the mode first, so this sees it (a reviewer's
            // harness caught a copy over a spill's bytes without it).
            if state.load(Ordering::Acquire) != s {
                continue;
            }
        }
        let free = (cap - used(t, h)) as usize;
        if free < need {
            match wait_for_room(ring, w, h) {
                Room::Again => continue,
                Room::Kernel => to_mode_from_ring(ring, KERNEL),
                Room::Signalled => signalled = true,
            }
            break;
        }
        let k = want.min(free);
        // SAFETY: [t, t + k) is free (k <= cap - used), and the writer
        // lock keeps other writers out of it.
        unsafe { w.put(t, done, k) };
        note_last_write(ring, w, done, k, advance(t, k));
        // SYNC POINT: Release publishes the copy with the tail; it fails
        // if a reader switched the pipe to the kernel meanwhile (it found
        // the ring empty: these bytes were never seen).
        if state
            .compare_exchange(
                s,
                with_tail(s, advance(t, k)),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            done += k;
        }
    }
    ring.writer().store(0, Ordering::Release);
    (done, signalled)
}

/// Leaves a copy of the caller's bytes `[from, from + k)`, the chunk of
/// a write about to be published up to tail position `end`, beside the
/// state word if `k` is at most `last_max()` (a short write, or a piece of
/// a long one that found that little room), for a reader that takes it
/// from the line it spins on; a longer chunk says there is none, so that
/// a tail that comes round to an old copy's `end` after 2^24 bytes does
/// not find it. Called by the writer lock's holder before it publishes
/// the write, so that a reader that sees the tail sees this tag (or a
/// later one).
fn note_last_write<R: Words, W: Writer>(ring: &R, w: &mut W, from: usize, k: usize, end: u32) {
    if ring.last_max() == 0 {
        return; // no copies (a model's ring)
    }
    let tag = ring.last_tag();
    // The holder's own word: the lock's Acquire made the last one visible.
    let old = tag.load(Ordering::Relaxed);
    if k > ring.last_max() {
        if last_len(old) != 0 {
            tag.store(old & !LAST_LEN_MASK, Ordering::Relaxed);
        }
        return;
    }
    let seq = (old & LAST_SEQ_MASK).wrapping_add(LAST_SEQ_ONE);
    // SYNC POINT: a sequence lock. The tag without a copy, then a Release
    // fence, before the words: a reader whose copy saw a word of this
    // write sees this tag, not the one it began with, at its second look
    // (its Acquire fence pairs with this one).
    tag.store(seq, Ordering::Relaxed);
    fence(Ordering::Release);
    // SAFETY: k <= last_max(); this thread holds the writer lock, and the
    // tag just stored says no copy is there.
    unsafe { w.put_last(from, k) };
    // What makes the copy visible with the tail is the tail's CAS, which
    // follows (its Release, the reader's Acquire load of the state); the
    // Release here and the reader's Acquire on the tag order nothing more
    // the models need, and cost nothing on x86.
    tag.store(
        seq | (k as u64) << LAST_LEN_SHIFT | u64::from(end),
        Ordering::Release,
    );
}

/// Takes `k` of the `avail` unread bytes, which end at tail position
/// `tail`, from the last write's copy, if they all are the end of that
/// write and no later write replaced the copy meanwhile: whether it did.
/// If not, the caller copies them from the ring.
fn take_last_write<R: Words, D: Reader>(
    ring: &R,
    r: &mut D,
    tail: u32,
    avail: usize,
    k: usize,
) -> bool {
    if ring.last_max() == 0 {
        return false;
    }
    let tag = ring.last_tag();
    let t = tag.load(Ordering::Acquire);
    let len = last_len(t);
    // A length past `last_max` is a peer's damage: the ring has the bytes.
    if len == 0 || len > ring.last_max() || last_end(t) != tail || avail > len {
        return false;
    }
    // SAFETY: k <= avail <= len <= last_max(), and k is at most the
    // caller's buffer (`read`'s k <= n).
    unsafe { r.take_last(len - avail, k) };
    // SYNC POINT: pairs with the fence in `note_last_write`: a copy that
    // saw a later write's word sees that write's tag here.
    fence(Ordering::Acquire);
    tag.load(Ordering::Relaxed) == t
}

/// How a wait for room ended.
enum Room {
    /// Look again.
    Again,
    /// The kernel must take the rest: the reader is gone, or the write may
    /// not wait (and the ring was spilled).
    Kernel,
    /// A signal came ([`Writer::signalled`]).
    Signalled,
}

/// A short wait (spin) or a sleep until a reader frees room.
fn wait_for_room<R: Words, W: Writer>(ring: &R, w: &mut W, h: u32) -> Room {
    if !w.may_wait() {
        // Its spin leaves signals alone: a handler may run in it as in
        // the copy before it, and the write goes on, as a kernel write
        // still copying would (so only while every handler restarts).
        if !w.late() && w.may_spin_for_room() {
            w.pause();
            return Room::Again;
        }
        // Then the kernel must do the waiting: the ring's bytes go to the
        // kernel pipe first, which is empty in RING mode (a switch to
        // KERNEL alone would leave them in the ring for a later spill to
        // put behind this write's: a reviewer's test caught it), and the
        // pipe is KERNEL, which comes back to the ring once quiet, as for
        // a socket pair's writer below. The spin is over first (its
        // count in the signal gate: the spill's kernel writes may block).
        w.release_signals();
        spill_to(ring, w, KERNEL);
        return Room::Kernel;
    }
    w.hold_signals();
    if !w.late() {
        w.pause();
        return Room::Again;
    }
    // Looked for at the end of each spin and sleep only: a signal that
    // comes in a spin that room ends waits for the write's end, as if it
    // had come while the bytes were copied.
    if w.signalled() {
        return Room::Signalled;
    }
    if !w.sleeps_for_room() {
        // The ring's bytes go to the kernel first, as for a writer that
        // may not wait, but the pipe stays KERNEL, not FOREVER: it may
        // come back to the ring once quiet.
        spill_to(ring, w, KERNEL);
        return Room::Kernel;
    }
    // SYNC POINT: the SeqCst fence pairs with the reader's, between its
    // head CAS and its swap of `room_wanted`: the reader sees the flag, or
    // this sees its head. (Fences, not SeqCst accesses: loom checks these.)
    ring.room_wanted().store(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    if ring.head().load(Ordering::Relaxed) != h {
        return Room::Again;
    }
    w.sleep(h);
    if w.reader_gone() {
        Room::Kernel
    } else {
        Room::Again
    }
}

/// RING becomes KERNEL or FOREVER (a writer's doing: the ring may hold
/// bytes, which readers take before the kernel's).
fn to_mode_from_ring<R: Words>(ring: &R, to: u64) {
    let state = ring.state();
    let mut s = state.load(Ordering::Acquire);
    while mode(s) == RING {
        match state.compare_exchange(s, with_mode(s, to), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => s = now,
        }
    }
}

/// Counts a writer into the kernel, so that no reader switches back to
/// RING before its bytes are read, unless a reader switched back first.
fn kernel_turn<R: Words, W: Writer>(ring: &R, w: &mut W, n: usize, done: usize) -> Turn {
    let state = ring.state();
    loop {
        let s = state.load(Ordering::Acquire);
        match mode(s) {
            RING => return Turn::Ring,
            FOREVER => {
                return Turn::Kernel(Written::Kernel {
                    done,
                    counted: false,
                })
            }
            // Nobody inside the kernel, the ring and the kernel pipe empty:
            // back to the ring, by the reader's own rule (a bulk writer is
            // nearly always inside a kernel write once there, so a reader
            // seldom finds the pipe quiet). Not with bytes in the ring: a
            // writer sent here for want of room (or of a reader) would come
            // straight back; nor for a handler that interrupted its own
            // thread's copy. The CAS expects the counts and the epoch seen
            // before `FIONREAD`: no kernel write came and went since.
            KERNEL
                if writers_in_kernel(s) == 0
                    && readers_in_kernel(s) == 0
                    && used(tail(s), ring.head().load(Ordering::Acquire)) == 0
                    && !w.reentered()
                    && w.kernel_empty()
                    && state
                        .compare_exchange(
                            s,
                            with_mode(s, RING),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok() =>
            {
                return Turn::Ring;
            }
            // A reader on this CPU and bytes in the kernel pipe: the
            // reader's turn first (it may be waiting for the CPU, woken by
            // this writer's last kernel write), so that it empties the
            // pipe and brings it back (`Writer::waits_for_drain`).
            KERNEL
                if writers_in_kernel(s) == 0
                    && w.waits_for_drain()
                    && !w.kernel_empty()
                    && !w.late() =>
            {
                w.pause();
            }
            KERNEL if writers_in_kernel(s) < COUNT_MAX => {
                // A reader asleep in the kernel on an empty pipe, and more
                // than a whole write's worth to go: a lead through the
                // kernel wakes it, and it brings the pipe back (its rule,
                // as above), which a bulk pipe seldom does once there. The
                // CAS that counts this writer in expects the state seen
                // before `FIONREAD`, as above.
                let lead = n - done > ring.atomic()
                    && writers_in_kernel(s) == 0
                    && readers_in_kernel(s) > 0
                    && used(tail(s), ring.head().load(Ordering::Acquire)) == 0
                    && !w.reentered()
                    && w.may_lead()
                    && w.kernel_empty();
                if state
                    .compare_exchange(s, s + KW_ONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return if lead {
                        Turn::Lead
                    } else {
                        Turn::Kernel(Written::Kernel {
                            done,
                            counted: true,
                        })
                    };
                }
            }
            // 127 in the kernel (or counts left by processes killed
            // there): the kernel for good, where nothing is counted, once
            // readers have taken what the ring holds (FOREVER holds none).
            KERNEL => {
                let h = ring.head().load(Ordering::Acquire);
                let s = state.load(Ordering::Acquire);
                if used(tail(s), h) != 0 {
                    w.pause();
                } else {
                    let _ = state.compare_exchange(
                        s,
                        with_mode(s, FOREVER),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
            }
            _ => w.pause(), // SPILLING
        }
    }
}

/// A write that stays in the kernel (its caller keeps a KERNEL pipe the
/// kernel's, as a writer whose reader shares its CPU does): counted into
/// the kernel as [`write`] counts it there, with none of its other steps.
/// True if counted: the caller writes to the kernel pipe, then calls
/// [`kernel_write_done`]. False in any other mode, or with the count full:
/// the caller takes [`write`].
pub fn kernel_write_begin<R: Words>(ring: &R) -> bool {
    let state = ring.state();
    let s = state.load(Ordering::Acquire);
    // The CAS of `kernel_turn` that counts a writer in without a lead.
    mode(s) == KERNEL
        && writers_in_kernel(s) < COUNT_MAX
        && state
            .compare_exchange(s, s + KW_ONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
}

/// The end of a counted kernel write (its bytes are in the kernel pipe).
pub fn kernel_write_done<R: Words>(ring: &R) {
    // SYNC POINT: Release: a reader that sees the count fall and the epoch
    // rise sees this write's bytes in the kernel pipe (`FIONREAD`).
    ring.state()
        .fetch_add(EPOCH_ONE.wrapping_sub(KW_ONE), Ordering::Release);
}

/// Reads up to `n` bytes: from the ring if it holds any, after a wait for
/// a writer if the pipe is in RING mode and `blocking`; else the caller
/// reads the kernel pipe.
pub fn read<R: Words, D: Reader>(ring: &R, r: &mut D, n: usize, blocking: bool) -> Taken {
    let state = ring.state();
    loop {
        // The head first: read after it, the tail is at or past it (in the
        // other order another reader may move the head past a stale tail,
        // and the difference would wrap; the spill model found it).
        let h = ring.head().load(Ordering::Acquire);
        // SYNC POINT: Acquire pairs with the writer's tail CAS: the bytes
        // below the tail are complete.
        let s = state.load(Ordering::Acquire);
        let avail = used(tail(s), h) as usize;
        let m = mode(s);
        if avail > 0 && m != SPILLING {
            let k = avail.min(n);
            if !take_last_write(ring, r, tail(s), avail, k) {
                // SAFETY: k <= n, the caller's buffer.
                unsafe { r.take(h, k) };
            }
            // SYNC POINT: Release pairs with the writer's Acquire head load
            // (it writes there only after this).
            if ring
                .head()
                .compare_exchange(h, advance_head(h, k), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // SYNC POINT: pairs with the fence in `wait_for_room`.
                fence(Ordering::SeqCst);
                // A load first (the flag is seldom set), then a swap, not a
                // store: a store of 0 could clear a flag the writer set
                // again after the load (its second wait in one write), and
                // it would sleep with nobody to wake it.
                if ring.room_wanted().load(Ordering::Relaxed) != 0
                    && ring.room_wanted().swap(0, Ordering::Relaxed) != 0
                {
                    r.wake_writer();
                }
                return Taken::Ring(k);
            }
            continue; // another reader took them first
        }
        match m {
            FOREVER => return Taken::Kernel { counted: false },
            RING if blocking && !r.late() => r.pause(),
            RING => {
                // Empty: to sleep in the kernel. The CAS expects this tail,
                // which equals the head: a write published since fails it.
                if state
                    .compare_exchange(
                        s,
                        with_mode(s, KERNEL) + KR_ONE,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    return Taken::Kernel { counted: true };
                }
            }
            KERNEL => {
                let quiet = writers_in_kernel(s) == 0 && readers_in_kernel(s) == 0;
                if blocking && quiet && r.kernel_empty() {
                    // Back to the ring. The CAS expects the epoch and the
                    // counts seen before `FIONREAD`: no kernel write came
                    // and went since.
                    let _ = state.compare_exchange(
                        s,
                        with_mode(s, RING),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                } else if readers_in_kernel(s) == COUNT_MAX {
                    // As for writers (`kernel_turn`): the kernel for good
                    // (the ring is empty: avail is 0).
                    let _ = state.compare_exchange(
                        s,
                        with_mode(s, FOREVER),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                } else if state
                    .compare_exchange(s, s + KR_ONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Taken::Kernel { counted: true };
                }
            }
            _ => r.pause(), // SPILLING
        }
    }
}

/// A read that stays in the kernel (its caller keeps a KERNEL pipe the
/// kernel's, as a reader whose writer shares its CPU does): counted into
/// the kernel as [`read`] counts it there when the ring is empty, with
/// none of its other steps. True if counted: the caller reads the kernel
/// pipe, then calls [`kernel_read_done`]. False with bytes in the ring
/// (they come first), in any other mode, or with the count full: the
/// caller takes [`read`].
pub fn kernel_read_begin<R: Words>(ring: &R) -> bool {
    let state = ring.state();
    // The head first, as in `read`.
    let h = ring.head().load(Ordering::Acquire);
    let s = state.load(Ordering::Acquire);
    // The CAS of `read`'s KERNEL case; it expects this tail, so bytes a
    // writer put in the ring since (after a switch back) fail it.
    mode(s) == KERNEL
        && used(tail(s), h) == 0
        && readers_in_kernel(s) < COUNT_MAX
        && state
            .compare_exchange(s, s + KR_ONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
}

/// The end of a counted kernel read.
pub fn kernel_read_done<R: Words>(ring: &R) {
    ring.state().fetch_sub(KR_ONE, Ordering::Release);
}

/// Moves the pipe to the kernel for good, the ring's bytes first, before a
/// read end reaches a reader the library does not see. Returns once the
/// pipe is FOREVER.
///
/// The ring's bytes land behind what the kernel pipe holds. That is
/// empty unless a writer switched the pipe to KERNEL with bytes in the
/// ring (a signal handler writing while its own thread was inside a write
/// to the pipe) and the readers have not caught up since: then those
/// kernel bytes come out first, the one order this protocol can get wrong
/// (docs/run.md, "2b").
pub fn spill<R: Words, S: Spiller>(ring: &R, sp: &mut S) {
    spill_to(ring, sp, FOREVER);
}

/// A spill that leaves the pipe in mode `end`: FOREVER, or KERNEL (a
/// writer short of room that may not sleep for it, a socket pair's or a
/// thread's, `wait_for_room`), which returns to
/// the ring by the usual rule once nobody is in the kernel and it is
/// empty. To KERNEL, the epoch moves on, as after a kernel write: a CAS
/// that expects a state seen before the spill's kernel writes fails even
/// where the tail since came round to the same value.
fn spill_to<R: Words, S: Spiller>(ring: &R, sp: &mut S, end: u64) {
    let state = ring.state();
    loop {
        let s = state.load(Ordering::Acquire);
        match mode(s) {
            FOREVER => return,
            // Already KERNEL (a handler of this thread wrote meanwhile,
            // `reentered`, or a reader emptied the ring and sleeps):
            // readers take the ring's bytes before the kernel's, and a
            // spill now would put them behind a handler's.
            KERNEL if end == KERNEL => return,
            SPILLING => sp.wait_for_spill(),
            _ => {
                sp.handlers_out();
                if state
                    .compare_exchange(
                        s,
                        with_mode(s, SPILLING),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    break;
                }
                sp.handlers_back();
            }
        }
    }
    // No write is published from here on, and no read starts a claim
    // (both wait in SPILLING); a writer still copying copies into free
    // room. A reader that looked before may still win its claim: then
    // claim again what is left.
    let s = state.load(Ordering::Acquire);
    loop {
        let h = ring.head().load(Ordering::Acquire);
        let k = used(tail(s), h) as usize;
        if k == 0 {
            break;
        }
        // SYNC POINT: the claim comes before the copy out, as a reader's
        // cannot here; a reader's CAS from before the spill fails on it.
        if ring
            .head()
            .compare_exchange(h, advance_head(h, k), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: [h, h + k) was published and is claimed; writers
            // publish nothing in SPILLING, and copy only into free room,
            // which this range was not when they looked.
            unsafe { sp.to_kernel(h, k) };
            break;
        }
    }
    // SYNC POINT: as a reader's take, the room made wakes a writer that
    // sleeps for it (pairs with the fence in `wait_for_room`).
    fence(Ordering::SeqCst);
    if ring.room_wanted().swap(0, Ordering::Relaxed) != 0 {
        sp.wake_writer();
    }
    let mut s = state.load(Ordering::Acquire);
    loop {
        let next = if end == FOREVER {
            with_mode(s, FOREVER)
        } else {
            with_mode(s, end).wrapping_add(EPOCH_ONE)
        };
        match state.compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                sp.handlers_back();
                return sp.spill_over();
            }
            Err(now) => s = now,
        }
    }
}
