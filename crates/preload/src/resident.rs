//! The resident ring (stage 2b of docs/run.md): one pipe's ring in shared
//! memory, and the copies and system calls its protocol
//! (`resident_protocol`) asks for: the futex a writer sleeps on for room,
//! `FIONREAD`, whether the reader is gone, the spill's kernel writes.
//!
//! `ring_io` drives it from the hooks; the tests below drive it between
//! two processes over real pipes.
//!
//! The ring's memory, one per pipe in the pool (`rings`, which versions
//! it; zeroed memory is an empty ring in RING mode):
//!
//! ```text
//! offset 0     state  u64   tail, mode, counts, epoch (resident_protocol)
//! offset 8     tag    u64   the last write's copy: seq, len, end
//! offset 16    last   [u8; 48] a copy of the last write, if it is short
//! offset 64    head   u32   bytes ever taken; the futex a writer sleeps on
//! offset 68    room   u32   non-zero while a writer sleeps for room
//! offset 128   writer u32   0, or the process whose writer copies in
//! offset 132   seen   u32   the head as that writer last read it
//! offset 192   bytes  [u8; CAPACITY], as CAPACITY / 8 native-endian u64
//! ```
//!
//! Each word its own cache line: the writer's publishing, the readers'
//! taking and the writer lock do not share one. The last write's copy
//! shares the state word's line on purpose: a reader fetches it with the
//! tail it spins on (`resident_protocol`, "The last write's copy"). The bytes are atomics,
//! moved by `span_copy`: a reader's copy may race with the writer (when
//! another reader took those bytes first, and the copy is thrown away).

use core::ffi::c_int;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::resident_protocol::{Reader, Spiller, Words, Writer};
use crate::span_copy;
use crate::yield_gate;

/// How long a writer waits for the writer lock before it gives the pipe
/// to the kernel for good: two of the holder's sleeps for room (1 ms
/// each), so a holder waiting for a slow reader is not mistaken for one
/// that is gone.
const LOCK_WAIT_NS: i64 = 2_000_000;
/// How many writes that could try a lead let the chance pass after one
/// that missed (its reader did not come back within a short wait: a
/// reader descheduled, or a count left by a reader killed in the
/// kernel): a miss costs one wait in this many writes.
const LEAD_SKIPS: u32 = 64;
use crate::stats::kernel_write_call;
use crate::sys;
use crate::wait_signals::{RoomWait, Unmasked};

/// A ring's bytes: no more than a kernel pipe's default capacity, so a
/// spill always fits in an empty kernel pipe.
pub const CAPACITY: usize = 64 * 1024;
/// The largest write the kernel keeps whole.
pub const PIPE_BUF: usize = 4096;

#[repr(C, align(64))]
struct Line<T>(T);

/// The largest write copied beside the state word too: what the rest of
/// its line holds.
const LAST_MAX: usize = 48;

/// The state word and the last write's copy (one cache line).
#[repr(C)]
struct StateLine {
    state: AtomicU64,
    tag: AtomicU64,
    last: [AtomicU64; LAST_MAX / 8],
}

const _: () = assert!(core::mem::size_of::<StateLine>() == 64);

/// One pipe's ring (see the module's diagram).
#[repr(C)]
pub struct Ring {
    state: Line<StateLine>,
    head: Line<[AtomicU32; 2]>,
    writer: Line<[AtomicU32; 2]>,
    words: [AtomicU64; CAPACITY / 8],
}

impl Words for Ring {
    fn state(&self) -> &AtomicU64 {
        &self.state.0.state
    }
    fn head(&self) -> &AtomicU32 {
        &self.head.0[0]
    }
    fn writer(&self) -> &AtomicU32 {
        &self.writer.0[0]
    }
    fn head_seen(&self) -> &AtomicU32 {
        &self.writer.0[1]
    }
    fn room_wanted(&self) -> &AtomicU32 {
        &self.head.0[1]
    }
    fn capacity(&self) -> u32 {
        CAPACITY as u32
    }
    fn atomic(&self) -> usize {
        PIPE_BUF
    }
    fn last_tag(&self) -> &AtomicU64 {
        &self.state.0.tag
    }
    fn last_max(&self) -> usize {
        LAST_MAX
    }
}

impl Ring {
    /// Makes the ring empty and in RING mode, as zeroed memory is: for a
    /// new pipe, before any other process can see it.
    pub fn reset(&self) {
        self.state.0.state.store(0, Ordering::Relaxed);
        self.state.0.tag.store(0, Ordering::Relaxed);
        for w in self.head.0.iter().chain(&self.writer.0) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Copies `len` bytes from `from` into the ring from position `at` on.
    ///
    /// # Safety
    ///
    /// `from` is readable for `len` bytes; `len <= CAPACITY`.
    unsafe fn put(&self, at: u32, from: *const u8, len: usize) {
        let p = at as usize % CAPACITY;
        let first = len.min(CAPACITY - p);
        // SAFETY: [p, p + first) and [0, len - first) lie inside the ring
        // (len <= CAPACITY), and `from` is readable for `len` bytes.
        unsafe {
            span_copy::put(&self.words, p, from, first);
            span_copy::put(&self.words, 0, from.add(first), len - first);
        }
    }

    /// Copies `len` ring bytes from position `at` on to `to`.
    ///
    /// # Safety
    ///
    /// `to` is writable for `len` bytes; `len <= CAPACITY`.
    unsafe fn take(&self, at: u32, to: *mut u8, len: usize) {
        let p = at as usize % CAPACITY;
        let first = len.min(CAPACITY - p);
        // SAFETY: as in `put`, and `to` is writable for `len` bytes.
        unsafe {
            span_copy::take(&self.words, p, to, first);
            span_copy::take(&self.words, 0, to.add(first), len - first);
        }
    }

    /// Copies `len` bytes from `from` into the last write's copy.
    ///
    /// # Safety
    ///
    /// `from` is readable for `len` bytes; `len <= LAST_MAX`.
    unsafe fn put_last(&self, from: *const u8, len: usize) {
        // SAFETY: [0, len) lies inside the copy's words; the caller's
        // contract for `from`.
        unsafe { span_copy::put(&self.state.0.last, 0, from, len) };
    }

    /// Copies `len` bytes of the last write's copy from byte `skip` on to
    /// `to`.
    ///
    /// # Safety
    ///
    /// `to` is writable for `len` bytes; `skip + len <= LAST_MAX`.
    unsafe fn take_last(&self, skip: usize, to: *mut u8, len: usize) {
        // SAFETY: [skip, skip + len) lies inside the copy's words; the
        // caller's contract for `to`.
        unsafe { span_copy::take(&self.state.0.last, skip, to, len) };
    }

    /// Whether bytes wait in the ring for a reader.
    pub fn holds_bytes(&self) -> bool {
        let tail = crate::resident_protocol::tail(self.state.0.state.load(Ordering::Acquire));
        crate::resident_protocol::used(tail, self.head.0[0].load(Ordering::Acquire)) != 0
    }

    /// The pipe's mode (`resident_protocol`'s RING, KERNEL, ...).
    pub fn mode(&self) -> u64 {
        crate::resident_protocol::mode(self.state.0.state.load(Ordering::Acquire))
    }
}

/// How long a side spins and yields before it sleeps. The clock is read
/// only once the spins are over: a wait that ends within them (a round
/// trip's) reads none.
pub struct Budget {
    ns: i64,
    until: i64,
    polls: u32,
    pauses: u32,
}

impl Budget {
    /// Polls spin this many times before they yield.
    const SPINS: u32 = 200;

    fn new(ns: i64) -> Self {
        Self {
            ns,
            until: 0,
            polls: 0,
            pauses: 0,
        }
    }

    fn late(&mut self) -> bool {
        if self.ns <= 0 {
            return true; // no wait at all
        }
        self.polls += 1;
        if self.polls <= Self::SPINS {
            return false;
        }
        if self.until == 0 {
            self.until = sys::now_ns().saturating_add(self.ns);
        }
        sys::now_ns() > self.until
    }

    /// Spins at first, then yields: counted here too, as some waits (a
    /// spill's, a busy count's) never ask `late`.
    fn pause(&mut self) {
        self.pauses = self.pauses.saturating_add(1);
        if self.pauses <= Self::SPINS {
            core::hint::spin_loop();
        } else {
            // SAFETY: no preconditions.
            unsafe { sys::sched_yield() };
        }
    }
}

/// How a side waits between two looks, and when it stops: `Budget`'s
/// spins and yields for a peer on another CPU, or `YieldOnce` for one on
/// its own. (Two types, not a flag: a cross-CPU spin's loop stays as
/// short as it was; a flag in `Budget` made `lat_ctx -P 8` across CPUs
/// about 10% slower on the Zen 1 guest.)
pub trait Wait {
    /// Whether it waits for a peer on its own CPU (`YieldOnce`).
    const YIELDS: bool;
    /// A wait of at most `ns` (which `YieldOnce` ignores).
    fn with_ns(ns: i64) -> Self;
    /// Asked at every look that finds the wait not over: whether to stop.
    fn late(&mut self) -> bool;
    /// Between two looks.
    fn pause(&mut self);
}

impl Wait for Budget {
    const YIELDS: bool = false;
    fn with_ns(ns: i64) -> Self {
        Budget::new(ns)
    }
    fn late(&mut self) -> bool {
        Budget::late(self)
    }
    fn pause(&mut self) {
        Budget::pause(self)
    }
}

/// The wait of a side whose peer shares its CPU, which cannot run while
/// this one spins: one pause, a `sched_yield` (unless `yield_gate` says
/// a recent one was lost), then late; or several, for a writer that may
/// not sleep ([`YieldOnce::patient`]).
pub struct YieldOnce {
    looks: u32,
    /// Looks before it is late.
    limit: u32,
    /// For pauses the gate refuses, and those of waits that never ask
    /// `late` (a spill's).
    spins: Budget,
}

impl YieldOnce {
    /// Yields up to [`PATIENT_YIELDS`] times: for a writer that may not
    /// sleep for room (a thread's), whose alternative is to give the pipe
    /// to the kernel, where a reader on its CPU (at its first wait, say,
    /// still looking at every signal's disposition) could not bring it
    /// back.
    fn patient() -> Self {
        Self {
            limit: PATIENT_YIELDS,
            ..Self::with_ns(0)
        }
    }
}

/// How many yields a writer that may not sleep gives a reader on its CPU
/// before it spills: a count of the reader's turns, not a time. One was
/// too few for `bw_pipe_thread same` (the reader still starting up: 64
/// KiB of 1 GB on the ring); with 16 the ring carried it all in half the
/// runs (docs/run.md, "Threaded writers").
const PATIENT_YIELDS: u32 = 16;

impl Wait for YieldOnce {
    const YIELDS: bool = true;
    fn with_ns(_: i64) -> Self {
        Self {
            looks: 0,
            limit: 1,
            spins: Budget::new(0),
        }
    }
    fn late(&mut self) -> bool {
        self.looks += 1;
        self.looks > self.limit
    }
    fn pause(&mut self) {
        if !yield_gate::yield_cpu() {
            self.spins.pause();
        }
    }
}

/// A read's side: the kernel pipe's read end and the caller's buffer,
/// waiting for a writer by `W`.
pub struct ReadSide<'a, W: Wait = Budget> {
    ring: &'a Ring,
    fd: c_int,
    to: *mut u8,
    wait: W,
    on_pause: Option<&'a mut dyn FnMut() -> bool>,
    /// Whether `on_pause` ended the wait.
    stopped: bool,
    stay_in_kernel: bool,
}

impl<'a, W: Wait> ReadSide<'a, W> {
    /// A read of `ring`'s pipe, whose read end is `fd`, into `to`, that
    /// waits for a writer for at most `wait_ns` (by `Budget`) before it
    /// sleeps.
    ///
    /// # Safety
    ///
    /// `to` is writable for as many bytes as the read asks for.
    pub unsafe fn new(ring: &'a Ring, fd: c_int, to: *mut u8, wait_ns: i64) -> Self {
        Self {
            ring,
            fd,
            to,
            wait: W::with_ns(wait_ns),
            on_pause: None,
            stopped: false,
            stay_in_kernel: false,
        }
    }

    /// Leaves a pipe the kernel's as long as this reader finds it so
    /// (without asking `FIONREAD`): for a reader whose writer runs on its
    /// CPU, where a ring cannot save the sleep and the switches back and
    /// forth would cost a system call each.
    pub fn stay_in_kernel(mut self, stay: bool) -> Self {
        self.stay_in_kernel = stay;
        self
    }

    /// Calls `f` at every pause of the wait (the hooks' look at the
    /// signal gate), which ends once `f` says true.
    pub fn with_poll(mut self, f: &'a mut dyn FnMut() -> bool) -> Self {
        self.on_pause = Some(f);
        self
    }
}

impl<W: Wait> Reader for ReadSide<'_, W> {
    unsafe fn take(&mut self, at: u32, len: usize) {
        // SAFETY: `len` is at most the read's size (the protocol's
        // contract), for which `to` is writable (`new`'s).
        unsafe { self.ring.take(at, self.to, len) };
    }
    unsafe fn take_last(&mut self, skip: usize, len: usize) {
        // SAFETY: `len` is at most the read's size and `skip + len` at
        // most LAST_MAX (the protocol's contract).
        unsafe { self.ring.take_last(skip, self.to, len) };
    }
    fn late(&mut self) -> bool {
        self.stopped || self.wait.late()
    }
    fn pause(&mut self) {
        if let Some(f) = self.on_pause.as_mut() {
            self.stopped |= f();
        }
        self.wait.pause();
    }
    fn kernel_empty(&mut self) -> bool {
        !self.stay_in_kernel && kernel_pipe_empty(self.fd)
    }
    fn wake_writer(&mut self) {
        wake_writer(self.ring);
    }
}

/// A write's side: the kernel pipe's write end and the caller's bytes.
pub struct WriteSide<'a> {
    ring: &'a Ring,
    fd: c_int,
    from: *const u8,
    me: u32,
    wait_ns: i64,
    budget: Budget,
    lock_budget: Budget,
    nested: bool,
    stay_in_kernel: bool,
    no_wait: bool,
    /// A `no_wait` write's spin for room, counted in the signal gate.
    unheld: Option<Unmasked>,
    /// The gate refused this write a spin.
    unheld_refused: bool,
    held: Option<HeldSignals>,
    room_wait: Option<&'a mut RoomWait>,
    lead_bytes: usize,
    lead_skips: Option<&'a AtomicU32>,
    socket: bool,
    /// Its reader shares its CPU: it waits by this, not `budget`.
    yields: Option<YieldOnce>,
}

impl<'a> WriteSide<'a> {
    /// A write to `ring`'s pipe, whose write end is `fd`, of bytes from
    /// `from`, by process `me`, that spins for room for at most `wait_ns`
    /// before it sleeps.
    ///
    /// # Safety
    ///
    /// `from` is readable for as many bytes as the write has.
    pub unsafe fn new(ring: &'a Ring, fd: c_int, from: *const u8, me: u32, wait_ns: i64) -> Self {
        Self {
            ring,
            fd,
            from,
            me,
            wait_ns,
            budget: Budget::new(wait_ns),
            lock_budget: Budget::new(LOCK_WAIT_NS),
            nested: false,
            stay_in_kernel: false,
            no_wait: false,
            unheld: None,
            unheld_refused: false,
            held: None,
            room_wait: None,
            lead_bytes: 0,
            lead_skips: None,
            socket: false,
            yields: None,
        }
    }

    /// `fd` is a socket pair's end, not a pipe's: the kernel's bytes are
    /// those it sent (`SIOCOUTQ`, not `FIONREAD`, which counts those sent
    /// to it), and the write does not sleep for room (its kernel socket
    /// holds more than the ring: `Writer::sleeps_for_room`).
    pub fn socket(mut self, socket: bool) -> Self {
        self.socket = socket;
        self
    }

    /// Holds signals in `wait` while the write waits for room, so that one
    /// that comes ends it (without, a handler runs in the wait and the
    /// write goes on).
    pub fn room_wait(mut self, wait: &'a mut RoomWait) -> Self {
        self.room_wait = Some(wait);
        self
    }

    /// Leaves a pipe the kernel's (no `FIONREAD` to bring it back): for a
    /// writer whose reader shares its CPU.
    pub fn stay_in_kernel(mut self, stay: bool) -> Self {
        self.stay_in_kernel = stay;
        self
    }

    /// Tries leads (`Writer::kernel_lead`) only while `skips`, the pipe's
    /// count of writes to let pass after a lead that missed, is 0.
    pub fn lead_skips(mut self, skips: &'a AtomicU32) -> Self {
        self.lead_skips = Some(skips);
        self
    }

    /// How many of the write's bytes went to the kernel as leads
    /// (`Writer::kernel_lead`).
    pub fn lead_bytes(&self) -> usize {
        self.lead_bytes
    }

    /// This write runs in a signal handler that interrupted a write of
    /// its own thread to a ring: it must not wait for the writer lock,
    /// which that write may hold (the pipe goes to the kernel instead).
    pub fn nested(mut self, nested: bool) -> Self {
        self.nested = nested;
        self
    }

    /// This write must not hold signals nor sleep for room: it spins for
    /// room with its signals left alone while the signal gate allows
    /// (`Unmasked`), and with none by the end of the spin the ring is
    /// spilled and the kernel waits (for a thread of a process with
    /// others, whose signals a held mask would send to another thread).
    pub fn no_wait(mut self, no_wait: bool) -> Self {
        self.no_wait = no_wait;
        self
    }

    /// Waits for room, or for its reader to empty a KERNEL pipe
    /// (`Writer::waits_for_drain`), by one `sched_yield` before it sleeps
    /// or writes to the kernel: for a writer whose reader shares its CPU.
    pub fn yield_once(mut self, yes: bool) -> Self {
        if yes {
            self.yields = Some(self.new_yields());
        }
        self
    }

    /// A yielding wait: patient for a write that may not sleep.
    fn new_yields(&self) -> YieldOnce {
        if self.no_wait {
            YieldOnce::patient()
        } else {
            YieldOnce::with_ns(0)
        }
    }

    /// A new wait, after a sleep or a lead.
    fn rewait(&mut self) {
        self.budget = Budget::new(self.wait_ns);
        if self.yields.is_some() {
            self.yields = Some(self.new_yields());
        }
    }

    /// Sleeps for room at once, without spinning (a reader on this CPU
    /// needs it to make room).
    pub fn sleep_at_once(mut self, at_once: bool) -> Self {
        if at_once {
            self.budget = Budget::new(0);
            self.wait_ns = 0;
        }
        self
    }
}

impl Writer for WriteSide<'_> {
    fn me(&mut self) -> u32 {
        self.me
    }
    fn reentered(&mut self) -> bool {
        self.nested
    }
    unsafe fn put(&mut self, at: u32, from: usize, len: usize) {
        // SAFETY: `from + len` is at most the write's size (the
        // protocol's contract), for which `from` is readable (`new`'s).
        unsafe { self.ring.put(at, self.from.add(from), len) };
    }
    unsafe fn put_last(&mut self, from: usize, len: usize) {
        // SAFETY: `from + len` is at most the write's size and `len` at
        // most LAST_MAX (the protocol's contract).
        unsafe { self.ring.put_last(self.from.add(from), len) };
    }
    fn pause(&mut self) {
        match self.yields.as_mut() {
            Some(y) => y.pause(),
            None => self.budget.pause(),
        }
    }
    fn late(&mut self) -> bool {
        match self.yields.as_mut() {
            Some(y) => y.late(),
            None => self.budget.late(),
        }
    }
    fn lock_late(&mut self) -> bool {
        self.lock_budget.late()
    }
    fn sleep(&mut self, head: u32) {
        // At most a millisecond: then the reader's existence is asked
        // again (a reader killed while the ring was full wakes no one).
        let limit = sys::TimeSpec {
            sec: 0,
            nsec: 1_000_000,
        };
        let word = self.ring.head() as *const AtomicU32 as usize;
        // SAFETY: a futex wait on a word in mapped memory, with a timeout.
        sys::keep_errno(|| unsafe {
            sys::raw(
                sys::nr::FUTEX,
                [
                    word,
                    sys::FUTEX_WAIT,
                    head as usize,
                    (&raw const limit) as usize,
                    0,
                    0,
                ],
            )
        });
        self.rewait();
    }
    fn kernel_empty(&mut self) -> bool {
        let sent = if self.socket {
            sys::SIOCOUTQ
        } else {
            sys::FIONREAD
        };
        !self.stay_in_kernel && kernel_holds_none(self.fd, sent) && !self.reader_gone()
    }
    fn may_wait(&mut self) -> bool {
        !self.no_wait
    }
    fn may_spin_for_room(&mut self) -> bool {
        if !self.no_wait {
            return true;
        }
        if self.unheld.is_none() && !self.unheld_refused {
            self.unheld = Unmasked::begin();
            self.unheld_refused = self.unheld.is_none();
        }
        // A counted handler without SA_RESTART that ran in the spin ends
        // it: the kernel then waits, and such a signal interrupts that.
        if self
            .unheld
            .as_ref()
            .is_some_and(|u| u.allowed() && !u.interrupted())
        {
            return true;
        }
        self.unheld = None;
        false
    }
    fn waits_for_drain(&mut self) -> bool {
        self.yields.is_some()
    }
    fn sleeps_for_room(&mut self) -> bool {
        !self.socket
    }
    fn hold_signals(&mut self) {
        if self.no_wait {
            return; // never waits long: nothing to hold signals for
        }
        if let Some(w) = self.room_wait.as_deref_mut() {
            w.hold();
        }
    }
    fn release_signals(&mut self) {
        self.unheld = None;
        if let Some(w) = self.room_wait.as_deref_mut() {
            w.release();
        }
    }
    fn signalled(&mut self) -> bool {
        self.room_wait.as_deref_mut().is_some_and(RoomWait::came)
    }
    fn may_lead(&mut self) -> bool {
        let Some(skips) = self.lead_skips else {
            return false;
        };
        // Relaxed: a count only speed depends on.
        let left = skips.load(Ordering::Relaxed);
        if left > 0 {
            skips.store(left - 1, Ordering::Relaxed);
        }
        left == 0
    }
    fn lead_missed(&mut self) {
        if let Some(skips) = self.lead_skips {
            skips.store(LEAD_SKIPS, Ordering::Relaxed);
        }
    }
    unsafe fn kernel_lead(&mut self, from: usize, len: usize) -> isize {
        self.rewait();
        // SAFETY: `from + len` is inside the write (the caller's
        // contract), readable (`new`'s).
        let r = unsafe { kernel_write_call(self.fd, self.from.add(from).cast(), len) };
        if r > 0 {
            self.lead_bytes += r as usize;
        }
        r
    }
    fn reader_gone(&mut self) -> bool {
        let mut p = sys::PollFd {
            fd: self.fd,
            events: sys::POLLOUT,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        let r = sys::keep_errno(|| unsafe { sys::poll(&mut p, 1, 0) });
        r == 1 && p.revents & READER_GONE != 0
    }
}

impl Spiller for WriteSide<'_> {
    unsafe fn to_kernel(&mut self, at: u32, len: usize) {
        spill_to_kernel(self.ring, self.fd, at, len);
    }
    fn wait_for_spill(&mut self) {
        self.lock_budget.pause();
    }
    fn wake_writer(&mut self) {
        wake_writer(self.ring);
    }
    fn spill_over(&mut self) {
        // Waiters yield until they see it.
    }
    fn handlers_out(&mut self) {
        self.held = Some(HeldSignals::hold());
    }
    fn handlers_back(&mut self) {
        if let Some(h) = self.held.take() {
            h.release();
        }
    }
}

/// A spill's side: a write end of the kernel pipe to put the ring's bytes
/// into.
pub struct SpillSide<'a> {
    ring: &'a Ring,
    fd: c_int,
    held: Option<HeldSignals>,
}

impl<'a> SpillSide<'a> {
    /// Spills `ring` into the kernel pipe whose write end is `fd`.
    pub fn new(ring: &'a Ring, fd: c_int) -> Self {
        Self {
            ring,
            fd,
            held: None,
        }
    }
}

impl Spiller for SpillSide<'_> {
    unsafe fn to_kernel(&mut self, at: u32, len: usize) {
        spill_to_kernel(self.ring, self.fd, at, len);
    }
    fn wait_for_spill(&mut self) {
        // SAFETY: no preconditions.
        unsafe { sys::sched_yield() };
    }
    fn wake_writer(&mut self) {
        wake_writer(self.ring);
    }
    fn spill_over(&mut self) {
        // Waiters yield until they see it.
    }
    fn handlers_out(&mut self) {
        self.held = Some(HeldSignals::hold());
    }
    fn handlers_back(&mut self) {
        if let Some(h) = self.held.take() {
            h.release();
        }
    }
}

/// This thread's signals, blocked for a spill (`Spiller::handlers_out`):
/// a handler that wrote to the pipe would wait for the spill forever. A
/// SIGPIPE that comes meanwhile is the spill's own (its write had no
/// reader to reach), not the program's: it is taken before the mask comes
/// back. The spill's writes do not wait while the pipe is RING (the
/// kernel pipe is empty then), so a signal waits at most that long.
struct HeldSignals {
    old: sys::SigSet,
    pipe_was_pending: bool,
}

const SIGPIPE_BIT: u64 = 1 << (13 - 1);

fn sigpipe_pending() -> bool {
    let mut set = sys::SigSet([0; 16]);
    // SAFETY: writes one set.
    unsafe { sys::sigpending(&mut set) };
    set.0[0] & SIGPIPE_BIT != 0
}

impl HeldSignals {
    fn hold() -> Self {
        sys::keep_errno(|| Self {
            old: sys::block_all_signals(),
            pipe_was_pending: sigpipe_pending(),
        })
    }

    fn release(self) {
        sys::keep_errno(|| {
            if !self.pipe_was_pending && sigpipe_pending() {
                let pipe_only = sys::SigSet({
                    let mut w = [0u64; 16];
                    w[0] = SIGPIPE_BIT;
                    w
                });
                let zero = sys::TimeSpec { sec: 0, nsec: 0 };
                // SAFETY: a set, no info wanted, a zero timeout.
                unsafe { sys::sigtimedwait(&pipe_only, core::ptr::null_mut(), &zero) };
            }
            sys::set_signal_mask(&self.old);
        });
    }
}

/// Writes `len` ring bytes from position `at` on into the kernel pipe
/// whose write end is `fd`, with this thread's signals held
/// (`HeldSignals`).
fn spill_to_kernel(ring: &Ring, fd: c_int, at: u32, len: usize) {
    sys::keep_errno(|| spill_writes(ring, fd, at, len));
}

/// The spill's kernel writes (see `spill_to_kernel`).
fn spill_writes(ring: &Ring, fd: c_int, at: u32, len: usize) {
    {
        let mut chunk = [0u8; 4096];
        let mut done = 0;
        while done < len {
            let k = (len - done).min(chunk.len());
            // SAFETY: `chunk` is writable for k <= 4096 bytes.
            unsafe { ring.take(at.wrapping_add(done as u32), chunk.as_mut_ptr(), k) };
            let mut sent = 0;
            while sent < k {
                // SAFETY: writes from a local buffer of k bytes.
                let r = unsafe { sys::write(fd, chunk[sent..k].as_ptr().cast(), k - sent) };
                if r > 0 {
                    sent += r as usize;
                    continue;
                }
                // SAFETY: the thread's errno.
                let errno = unsafe { *sys::__errno_location() };
                if r < 0 && errno == sys::EINTR {
                    continue;
                }
                if r < 0 && errno == sys::EAGAIN {
                    // The write end is non-blocking (a status the program
                    // may set): wait for room, unless no reader is left.
                    let mut p = sys::PollFd {
                        fd,
                        events: sys::POLLOUT,
                        revents: 0,
                    };
                    // SAFETY: one pollfd.
                    let ready = unsafe { sys::poll(&mut p, 1, -1) };
                    if ready == 1 && p.revents & READER_GONE == 0 {
                        continue;
                    }
                }
                return; // no reader left: the bytes have no one to reach
            }
            done += k;
        }
    }
}

/// What `poll` says of a write end whose reader is gone: `POLLERR` for a
/// pipe, `POLLHUP` for a socket pair's end whose peer is closed.
pub const READER_GONE: i16 = sys::POLLERR | sys::POLLHUP;

/// Whether the kernel pipe of `fd` (either end) holds no byte
/// (`FIONREAD`), keeping errno.
fn kernel_pipe_empty(fd: c_int) -> bool {
    kernel_holds_none(fd, sys::FIONREAD)
}

/// Whether the count `req` (`FIONREAD`, or `SIOCOUTQ` for the bytes a
/// socket sent) of `fd` is 0, keeping errno.
fn kernel_holds_none(fd: c_int, req: u64) -> bool {
    let mut n: c_int = 0;
    // SAFETY: both requests write one int.
    let r = sys::keep_errno(|| unsafe { sys::ioctl(fd, req, (&raw mut n) as usize) });
    r == 0 && n == 0
}

/// Wakes a writer sleeping for room in `ring` (a futex wake of the head).
fn wake_writer(ring: &Ring) {
    let head = ring.head() as *const AtomicU32 as usize;
    // SAFETY: a futex wake of a word in mapped memory.
    sys::keep_errno(|| unsafe { sys::raw(sys::nr::FUTEX, [head, sys::FUTEX_WAKE, 1, 0, 0, 0]) });
}

#[cfg(test)]
mod tests;
