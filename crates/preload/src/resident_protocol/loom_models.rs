//! Loom models of the resident ring's protocol: the functions of the
//! module above, as the library will run them, with a model's ring, kernel
//! pipe and futex.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-preload --release --lib`.
//!
//! The kernel pipe is a queue under a mutex with a condition variable: a
//! kernel read sleeps until it holds bytes or every writer has closed
//! (EOF), as the real one does, and never polls. A writer's sleep for room
//! is a futex: it sleeps only while the head still has the value it saw,
//! until a wake. So a byte left in a ring nobody watches ends in a reader
//! that sleeps for good or reads EOF too early, and a lost wake-up ends in
//! a writer that sleeps for good: loom fails the model either way. The
//! ring's bytes are atomics, as the library's are (a reader's copy may
//! race with a writer when another reader took the bytes first).

use loom::sync::atomic::AtomicU8;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::collections::VecDeque;

use super::*;
use crate::loom_check::check;

/// The ring's size in the models, and the largest whole write.
const CAP: usize = 4;
const ATOMIC: usize = 2;
/// A reader's buffer.
const BUF: usize = 4;
const WRITER: u32 = 5;

struct Kernel {
    bytes: VecDeque<u8>,
    writers: usize,
}

/// A pipe: its ring's words and bytes, the kernel pipe, the head's futex.
struct Model {
    state: AtomicU64,
    head: AtomicU32,
    writer: AtomicU32,
    room_wanted: AtomicU32,
    head_seen: AtomicU32,
    last_tag: AtomicU64,
    last: [AtomicU8; ATOMIC],
    /// The largest write copied beside the tag: 0 but in the models of
    /// the copy (whose correctness does not depend on the mode, and which
    /// would multiply every other model's schedules).
    copies: usize,
    ring: [AtomicU8; CAP],
    kernel: Mutex<Kernel>,
    kernel_changed: Condvar,
    futex: Mutex<()>,
    futex_woken: Condvar,
    spilled: Mutex<bool>,
    spill_over: Condvar,
}

impl Model {
    fn new(writers: usize) -> Arc<Self> {
        Self::with_copies(writers, 0)
    }

    /// A pipe whose writes of up to `copies` bytes are copied beside the
    /// tag too.
    fn with_copies(writers: usize, copies: usize) -> Arc<Self> {
        Arc::new(Self {
            state: AtomicU64::new(0),
            head: AtomicU32::new(0),
            writer: AtomicU32::new(0),
            room_wanted: AtomicU32::new(0),
            head_seen: AtomicU32::new(0),
            last_tag: AtomicU64::new(0),
            last: std::array::from_fn(|_| AtomicU8::new(0xee)),
            copies,
            ring: std::array::from_fn(|_| AtomicU8::new(0xee)),
            kernel: Mutex::new(Kernel {
                bytes: VecDeque::new(),
                writers,
            }),
            kernel_changed: Condvar::new(),
            futex: Mutex::new(()),
            futex_woken: Condvar::new(),
            spilled: Mutex::new(false),
            spill_over: Condvar::new(),
        })
    }

    /// A reader's or writer's pause: while a spill runs, until it ends (a
    /// spin loom would explore for ever; a pause that waited for anything
    /// but the spill would deadlock the model).
    fn pause(&self) {
        if mode(self.state.load(Ordering::SeqCst)) == SPILLING {
            let mut over = self.spilled.lock().unwrap();
            if *over {
                // A later spill (a socket writer's, to KERNEL): a yield.
                drop(over);
                thread::yield_now();
                return;
            }
            while !*over {
                over = self.spill_over.wait(over).unwrap();
            }
        } else {
            thread::yield_now();
        }
    }

    /// A blocking kernel read of up to `n` bytes (empty: EOF).
    fn kernel_read(&self, n: usize) -> Vec<u8> {
        let mut k = self.kernel.lock().unwrap();
        while k.bytes.is_empty() && k.writers > 0 {
            k = self.kernel_changed.wait(k).unwrap();
        }
        let m = n.min(k.bytes.len());
        k.bytes.drain(..m).collect()
    }

    fn kernel_write(&self, bytes: &[u8]) {
        self.kernel.lock().unwrap().bytes.extend(bytes);
        self.kernel_changed.notify_all();
    }

    /// A writer's last close.
    fn close_writer(&self) {
        self.kernel.lock().unwrap().writers -= 1;
        self.kernel_changed.notify_all();
    }
}

impl Words for Model {
    fn state(&self) -> &AtomicU64 {
        &self.state
    }
    fn head(&self) -> &AtomicU32 {
        &self.head
    }
    fn writer(&self) -> &AtomicU32 {
        &self.writer
    }
    fn room_wanted(&self) -> &AtomicU32 {
        &self.room_wanted
    }
    fn head_seen(&self) -> &AtomicU32 {
        &self.head_seen
    }
    fn capacity(&self) -> u32 {
        CAP as u32
    }
    fn atomic(&self) -> usize {
        ATOMIC
    }
    fn last_tag(&self) -> &AtomicU64 {
        &self.last_tag
    }
    fn last_max(&self) -> usize {
        self.copies
    }
}

struct ModelWriter<'a> {
    pipe: &'a Model,
    bytes: &'a [u8],
    /// Acts as a signal handler that interrupted the lock's holder.
    handler: bool,
    late_at: usize,
    looks: usize,
    lock_looks: usize,
    /// False: as a writer in a process with other threads, which lets
    /// the kernel wait for room.
    may_wait: bool,
    /// A signal comes in the first wait for room that ends late.
    signal: bool,
    /// Whether it may send a lead through the kernel.
    lead: bool,
    /// False: as a socket pair's writer, which sends the ring to the
    /// kernel rather than sleep for room.
    sleeps: bool,
    /// As a writer whose reader shares its CPU: a KERNEL pipe that holds
    /// bytes gets a pause before a kernel write.
    drains: bool,
}

impl Spiller for ModelWriter<'_> {
    unsafe fn to_kernel(&mut self, at: u32, len: usize) {
        // SAFETY: the protocol's contract, passed on.
        unsafe { ToKernel(self.pipe).to_kernel(at, len) };
    }
    fn wait_for_spill(&mut self) {
        self.pipe.pause();
    }
    fn wake_writer(&mut self) {
        ToKernel(self.pipe).wake_writer();
    }
    fn spill_over(&mut self) {
        ToKernel(self.pipe).spill_over();
    }
}

impl Writer for ModelWriter<'_> {
    fn me(&mut self) -> u32 {
        WRITER
    }
    fn reentered(&mut self) -> bool {
        self.handler
    }
    unsafe fn put(&mut self, at: u32, from: usize, len: usize) {
        for i in 0..len {
            let p = (at as usize + i) % CAP;
            self.pipe.ring[p].store(self.bytes[from + i], Ordering::Relaxed);
        }
    }
    unsafe fn put_last(&mut self, from: usize, len: usize) {
        for i in 0..len {
            self.pipe.last[i].store(self.bytes[from + i], Ordering::Relaxed);
        }
    }
    fn pause(&mut self) {
        self.pipe.pause();
    }
    fn late(&mut self) -> bool {
        self.looks += 1;
        self.looks > self.late_at
    }
    fn lock_late(&mut self) -> bool {
        self.lock_looks += 1;
        self.lock_looks > self.late_at
    }
    fn sleep(&mut self, head: u32) {
        self.looks = 0;
        let g = self.pipe.futex.lock().unwrap();
        if self.pipe.head.load(Ordering::SeqCst) == head {
            drop(self.pipe.futex_woken.wait(g).unwrap());
        }
    }
    fn reader_gone(&mut self) -> bool {
        false
    }
    fn kernel_empty(&mut self) -> bool {
        self.pipe.kernel.lock().unwrap().bytes.is_empty()
    }
    fn may_wait(&mut self) -> bool {
        self.may_wait
    }
    fn may_lead(&mut self) -> bool {
        self.lead
    }
    fn sleeps_for_room(&mut self) -> bool {
        self.sleeps
    }
    fn waits_for_drain(&mut self) -> bool {
        self.drains
    }
    fn signalled(&mut self) -> bool {
        core::mem::take(&mut self.signal)
    }
    unsafe fn kernel_lead(&mut self, from: usize, len: usize) -> isize {
        self.looks = 0;
        self.pipe.kernel_write(&self.bytes[from..from + len]);
        len as isize
    }
}

/// One `write` of `bytes`, as the library's hook will make it.
fn write_one(pipe: &Model, bytes: &[u8], handler: bool, late_at: usize) {
    write_by(pipe, bytes, handler, late_at, true);
}

/// One `write` of `bytes` by a writer that may wait for room or not.
fn write_by(pipe: &Model, bytes: &[u8], handler: bool, late_at: usize, may_wait: bool) {
    write_leading(pipe, bytes, handler, late_at, may_wait, true);
}

/// One `write` of `bytes` by a writer that may wait for room or not, and
/// may send a lead or not.
fn write_leading(
    pipe: &Model,
    bytes: &[u8],
    handler: bool,
    late_at: usize,
    may_wait: bool,
    lead: bool,
) {
    write_draining(pipe, bytes, handler, late_at, may_wait, lead, true, false);
}

/// One `write` of `bytes`; with `sleeps` false, as a socket pair's
/// writer, which sends the ring to the kernel rather than sleep for room;
/// with `drains`, as a writer whose reader shares its CPU
/// (`Writer::waits_for_drain`).
#[allow(clippy::too_many_arguments)]
fn write_draining(
    pipe: &Model,
    bytes: &[u8],
    handler: bool,
    late_at: usize,
    may_wait: bool,
    lead: bool,
    sleeps: bool,
    drains: bool,
) {
    let mut w = ModelWriter {
        pipe,
        bytes,
        handler,
        late_at,
        looks: 0,
        lock_looks: 0,
        may_wait,
        signal: false,
        lead,
        sleeps,
        drains,
    };
    let out = write(pipe, &mut w, bytes.len());
    assert_forever_holds_nothing(pipe);
    match out {
        Written::Ring => {}
        Written::Kernel { done, counted } => {
            pipe.kernel_write(&bytes[done..]);
            if counted {
                kernel_write_done(pipe);
            }
        }
        Written::Signalled { .. } => unreachable!("no signal comes"),
    }
}

/// `bytes` in `write`s as a program that goes on after a short one makes
/// them, the first of which a signal interrupts if it waits for room
/// long: the write's counts, in order.
fn write_all_signalled(pipe: &Model, bytes: &[u8], late_at: usize) -> Vec<usize> {
    let mut counts = Vec::new();
    let mut at = 0;
    let mut signal = true;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let mut w = ModelWriter {
            pipe,
            bytes: rest,
            handler: false,
            late_at,
            looks: 0,
            lock_looks: 0,
            may_wait: true,
            signal: core::mem::take(&mut signal),
            lead: true,
            sleeps: true,
            drains: false,
        };
        let n = match write(pipe, &mut w, rest.len()) {
            Written::Ring => rest.len(),
            Written::Kernel { done, counted } => {
                pipe.kernel_write(&rest[done..]);
                if counted {
                    kernel_write_done(pipe);
                }
                rest.len()
            }
            // None written: the write begins again, as under SA_RESTART.
            Written::Signalled { done } => {
                assert_eq!(pipe.writer.load(Ordering::SeqCst), 0, "the lock is let go");
                done
            }
        };
        if n > 0 {
            counts.push(n);
        }
        at += n;
    }
    counts
}

/// FOREVER leaves no byte in the ring (a reader outside the library
/// would never see it): true at any moment once it holds, as nothing is
/// published in FOREVER.
fn assert_forever_holds_nothing(pipe: &Model) {
    // The state first: a head read before it may predate the spill's
    // claim that came before FOREVER.
    let s = pipe.state.load(Ordering::SeqCst);
    let h = pipe.head.load(Ordering::SeqCst);
    if mode(s) == FOREVER {
        assert_eq!(used(tail(s), h), 0, "bytes left in the ring in FOREVER");
    }
}

struct ModelReader<'a> {
    pipe: &'a Model,
    late_at: usize,
    looks: usize,
    got: Vec<u8>,
}

impl Reader for ModelReader<'_> {
    unsafe fn take(&mut self, at: u32, len: usize) {
        self.got = (0..len)
            .map(|i| self.pipe.ring[(at as usize + i) % CAP].load(Ordering::Relaxed))
            .collect();
    }
    unsafe fn take_last(&mut self, skip: usize, len: usize) {
        self.got = (skip..skip + len)
            .map(|i| self.pipe.last[i].load(Ordering::Relaxed))
            .collect();
    }
    fn late(&mut self) -> bool {
        self.looks += 1;
        self.looks > self.late_at
    }
    fn pause(&mut self) {
        self.pipe.pause();
    }
    fn kernel_empty(&mut self) -> bool {
        self.pipe.kernel.lock().unwrap().bytes.is_empty()
    }
    fn wake_writer(&mut self) {
        let _g = self.pipe.futex.lock().unwrap();
        self.pipe.futex_woken.notify_all();
    }
}

/// One `read` of up to `BUF` bytes, as the library's hook will make it:
/// the bytes (none: EOF).
fn read_one(pipe: &Model, late_at: usize) -> Vec<u8> {
    read_up_to(pipe, late_at, BUF)
}

/// One `read` of up to `buf` bytes.
fn read_up_to(pipe: &Model, late_at: usize, buf: usize) -> Vec<u8> {
    let mut r = ModelReader {
        pipe,
        late_at,
        looks: 0,
        got: Vec::new(),
    };
    match read(pipe, &mut r, buf, true) {
        Taken::Ring(k) => {
            assert_eq!(k, r.got.len());
            assert!(k > 0, "a ring read takes bytes");
            r.got
        }
        Taken::Kernel { counted } => {
            let got = pipe.kernel_read(buf);
            if counted {
                kernel_read_done(pipe);
            }
            got
        }
    }
}

/// A writer thread that writes `writes` one after another, then closes.
fn write_then_close(pipe: &Arc<Model>, writes: &'static [&'static [u8]]) -> thread::JoinHandle<()> {
    let p = pipe.clone();
    thread::spawn(move || {
        for w in writes {
            write_one(&p, w, false, 0);
        }
        p.close_writer();
    })
}

/// A spill's side: the ring's bytes into the model's kernel pipe.
struct ToKernel<'a>(&'a Model);

impl Spiller for ToKernel<'_> {
    unsafe fn to_kernel(&mut self, at: u32, len: usize) {
        let bytes: Vec<u8> = (0..len)
            .map(|i| self.0.ring[(at as usize + i) % CAP].load(Ordering::Relaxed))
            .collect();
        self.0.kernel_write(&bytes);
    }
    fn wait_for_spill(&mut self) {
        thread::yield_now();
    }
    fn wake_writer(&mut self) {
        let _g = self.0.futex.lock().unwrap();
        self.0.futex_woken.notify_all();
    }
    fn spill_over(&mut self) {
        *self.0.spilled.lock().unwrap() = true;
        self.0.spill_over.notify_all();
    }
}

/// A spill by a reader-side process (a read end leaving the library).
fn spill_and_tell(pipe: &Model) {
    spill(pipe, &mut ToKernel(pipe));
}

/// Reads until EOF: every byte in the order taken.
fn read_all(pipe: &Model, late_at: usize) -> Vec<u8> {
    read_all_by(pipe, late_at, BUF)
}

/// Reads until EOF, `buf` bytes at most at a time.
fn read_all_by(pipe: &Model, late_at: usize, buf: usize) -> Vec<u8> {
    read_all_in_front(pipe, false, late_at, buf)
}

#[test]
fn one_writer_one_reader_get_every_byte_once_in_order() {
    // Five bytes through a ring of four: the writer waits for room (spins,
    // or sleeps at once), the reader sleeps in the kernel after 0, 1 or 2
    // empty looks, switching the pipe back and forth, and reads one byte
    // or four at a time (one at a time, a writer waits for room twice in
    // a write: the case that needs `room_wanted` swapped, not stored).
    for (reader_late, writer_late, buf) in [
        (0, 0, 4),
        (0, 1, 4),
        (1, 0, 4),
        (1, 1, 4),
        (2, 0, 4),
        (2, 1, 4),
        (0, 0, 1),
        (1, 0, 1),
    ] {
        {
            check(
                &format!("reader late at {reader_late}, writer at {writer_late}, reads of {buf}"),
                Some(2),
                move || {
                    let pipe = Model::new(1);
                    let p = pipe.clone();
                    let writer = thread::spawn(move || {
                        write_one(&p, &[1, 2], false, writer_late);
                        write_one(&p, &[3, 4], false, writer_late);
                        write_one(&p, &[5], false, writer_late);
                        p.close_writer();
                    });
                    let got = read_all_by(&pipe, reader_late, buf);
                    writer.join().unwrap();
                    assert_eq!(got, [1, 2, 3, 4, 5]);
                },
            );
        }
    }
}

#[test]
fn a_socket_writer_short_of_room_keeps_every_byte_once_in_order() {
    // A socket pair's writer that finds no room after its spin sends the
    // ring to the kernel and the rest after it, leaving the pipe KERNEL
    // (not FOREVER): a reader that looks at any point, sleeps in the
    // kernel or brings the pipe back to the ring, gets every byte once,
    // in order; the epoch the spill moves on keeps a reader that saw an
    // empty kernel pipe before it from switching back over its bytes.
    // A writer that may not wait (a thread of a process with others)
    // spills so too once its spin (`late_at`: one look) is over.
    let socket = [(0, 4, false), (1, 4, false), (1, 1, false), (0, 1, true)]
        .map(|(reader_late, buf, lead)| (reader_late, buf, lead, true, 0));
    let thread = [(0, 4, false), (1, 1, false)]
        .map(|(reader_late, buf, lead)| (reader_late, buf, lead, false, 1));
    for (reader_late, buf, lead, socket, late_at) in socket.into_iter().chain(thread) {
        check(
            &format!(
                "{} writer, reader late at {reader_late}, reads of {buf}, lead {lead}",
                if socket { "socket" } else { "threaded" }
            ),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    for w in [&[1u8, 2][..], &[3, 4], &[5, 6]] {
                        // A socket's writer may wait but not sleep; a
                        // thread's may not wait, and sleeps is not asked.
                        write_draining(&p, w, false, late_at, socket, lead, !socket, false);
                    }
                    p.close_writer();
                });
                let got = read_all_by(&pipe, reader_late, buf);
                writer.join().unwrap();
                assert_eq!(got, [1, 2, 3, 4, 5, 6]);
            },
        );
    }
}

#[test]
fn a_write_up_to_the_atomic_size_reaches_a_reader_whole() {
    check("whole writes", Some(2), || {
        let pipe = Model::new(1);
        let p = pipe.clone();
        let writer = thread::spawn(move || {
            write_one(&p, &[1, 2], false, 0);
            write_one(&p, &[3, 4], false, 0);
            p.close_writer();
        });
        let mut reads = Vec::new();
        loop {
            let got = read_one(&pipe, 1);
            if got.is_empty() {
                break;
            }
            reads.push(got);
        }
        writer.join().unwrap();
        let all: Vec<u8> = reads.concat();
        assert_eq!(all, [1, 2, 3, 4]);
        // No read ends inside a write: every read's end is a write's end.
        let mut at = 0;
        for r in &reads {
            at += r.len();
            assert!(at % 2 == 0, "a read split a write: {reads:?}");
        }
    });
}

#[test]
fn two_readers_never_take_one_byte_twice() {
    for late in [0, 1] {
        check(
            &format!("two readers, late at {late}"),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let writer = write_then_close(&pipe, &[&[1, 2], &[3]]);
                let p = pipe.clone();
                let other = thread::spawn(move || read_all(&p, late));
                let mine = read_all(&pipe, late);
                let theirs = other.join().unwrap();
                writer.join().unwrap();
                let mut all: Vec<u8> = mine.iter().chain(&theirs).copied().collect();
                for got in [&mine, &theirs] {
                    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
                }
                all.sort_unstable();
                assert_eq!(all, [1, 2, 3], "mine {mine:?}, theirs {theirs:?}");
            },
        );
    }
}

#[test]
fn a_handlers_write_and_every_later_one_keep_their_order() {
    // Writer A holds the lock while a "handler" (a thread whose lock
    // attempts say reentered) writes: its bytes go to the kernel, and A's
    // write after the handler's must follow them.
    check("a handler's write", Some(2), || handlers_write(false));
}

/// A's write, a handler's write while A may hold the lock, then A's next
/// write; with `front`, A's next write and the reader take the same-CPU
/// front steps first. Checks that each write stays whole and in order.
fn handlers_write(front: bool) {
    let pipe = Model::new(2);
    let handler_done = Arc::new(AtomicU32::new(0));
    let (p, done) = (pipe.clone(), handler_done.clone());
    let a = thread::spawn(move || {
        write_one(&p, &[1, 2], false, 0);
        while done.load(Ordering::SeqCst) == 0 {
            thread::yield_now();
        }
        write_in_front(&p, &[4], front);
        p.close_writer();
    });
    let (p, done) = (pipe.clone(), handler_done.clone());
    let handler = thread::spawn(move || {
        write_one(&p, &[3], true, 0);
        done.store(1, Ordering::SeqCst);
        p.close_writer();
    });
    let got = read_all_in_front(&pipe, front, 1, BUF);
    a.join().unwrap();
    handler.join().unwrap();
    assert_eq!(got.len(), 4, "{got:?}");
    let at = |b: u8| got.iter().position(|&x| x == b).unwrap();
    assert!(at(1) + 1 == at(2), "a write split: {got:?}");
    assert!(
        at(2) < at(4) && at(3) < at(4),
        "a later write overtook: {got:?}"
    );
}

#[test]
fn a_spill_puts_the_rings_bytes_ahead_of_every_later_one() {
    for late in [0, 1] {
        check(
            &format!("a spill, reader late at {late}"),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let writer = write_then_close(&pipe, &[&[1, 2], &[3]]);
                let p = pipe.clone();
                let spiller = thread::spawn(move || {
                    spill_and_tell(&p);
                    assert_eq!(mode(p.state.load(Ordering::SeqCst)), FOREVER);
                });
                let got = read_all(&pipe, late);
                writer.join().unwrap();
                spiller.join().unwrap();
                assert_eq!(got, [1, 2, 3]);
            },
        );
    }
}

#[test]
fn a_writer_waiting_for_room_or_not_through_a_spill_keeps_the_order() {
    // A writer fills the ring, and the reader takes a byte and spills
    // (before a `select`) while the writer waits for room, or spills the
    // ring itself because it may not wait (its process has other
    // threads): the ring's bytes must reach the kernel pipe ahead of the
    // rest of the write (a reviewer's test caught a writer that switched
    // to KERNEL with the ring full, leaving its bytes for the spill to
    // put after). Or the writer is a socket pair's, which spills the ring
    // to KERNEL itself when short of room: both spills keep the order.
    for (may_wait, sleeps) in [(true, true), (false, true), (true, false)] {
        check(
            &format!("a spill, the writer may wait {may_wait}, sleeps for room {sleeps}"),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    for w in [&[1u8, 2][..], &[3, 4], &[5, 6]] {
                        write_draining(&p, w, false, 0, may_wait, true, sleeps, false);
                    }
                    p.close_writer();
                });
                // One byte: the last write finds room for one of its two.
                let first = read_up_to(&pipe, 1, 1);
                spill_and_tell(&pipe);
                writer.join().unwrap();
                // A reader outside the library now: the kernel pipe alone.
                let mut got = first;
                got.extend(pipe.kernel_read(8));
                assert_eq!(got, [1, 2, 3, 4, 5, 6]);
            },
        );
    }
}

#[test]
fn a_spill_leaves_nothing_in_the_ring_even_when_a_reader_claims_first() {
    // A reader that looked before the spill may win its claim; the spill
    // must then claim what is left, or a reader outside the library
    // never sees it (the first spill left it there).
    check("a spill racing a reader's claim", Some(2), || {
        let pipe = Model::new(1);
        let writer = write_then_close(&pipe, &[&[1, 2], &[3]]);
        let p = pipe.clone();
        let spiller = thread::spawn(move || {
            spill_and_tell(&p);
            let (s, h) = (
                p.state.load(Ordering::SeqCst),
                p.head.load(Ordering::SeqCst),
            );
            assert_eq!(used(tail(s), h), 0, "bytes left in the ring after a spill");
        });
        let _ = read_one(&pipe, 1);
        spiller.join().unwrap();
        writer.join().unwrap();
    });
}

#[test]
fn a_spill_wakes_a_writer_sleeping_for_room() {
    // Nobody reads: the writer fills the ring and sleeps; only the spill
    // makes room (the first spill woke no one: the model deadlocked). With
    // three preemptions, a writer that looked before the spill and reloads
    // the head after its claim must not copy over the bytes it spills.
    check("a spill and a writer asleep", Some(3), || {
        let pipe = Model::new(1);
        let writer = write_then_close(&pipe, &[&[1, 2], &[3, 4], &[5]]);
        let p = pipe.clone();
        let spiller = thread::spawn(move || spill_and_tell(&p));
        spiller.join().unwrap();
        writer.join().unwrap();
        // A reader outside the library: the kernel pipe alone, in order.
        assert_eq!(pipe.kernel_read(8), [1, 2, 3, 4, 5]);
    });
}

#[test]
fn writes_larger_than_the_atomic_size_arrive_in_order() {
    // Split across waits for room and, if the reader sleeps, across the
    // ring and the kernel (a write partly in each), and with a lead
    // through the kernel to a reader asleep there, the rest in the ring or
    // the kernel after it. (The lead makes the one-byte reads' model 200
    // times larger, beyond a CI run: it goes without.)
    for (reader_late, writer_late, buf, lead) in [
        (0, 0, 4, true),
        (1, 0, 4, true),
        (0, 1, 1, false),
        (1, 1, 2, true),
    ] {
        check(
            &format!("writes of 3, reader late at {reader_late}, writer at {writer_late}, reads of {buf}, leads {lead}"),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    write_leading(&p, &[1, 2, 3], false, writer_late, true, lead);
                    write_leading(&p, &[4, 5, 6], false, writer_late, true, lead);
                    p.close_writer();
                });
                let got = read_all_by(&pipe, reader_late, buf);
                writer.join().unwrap();
                assert_eq!(got, [1, 2, 3, 4, 5, 6]);
            },
        );
    }
}

#[test]
fn a_signal_ends_a_long_write_short_and_the_rest_follows_in_order() {
    // Six bytes through a ring of four by a writer that a signal stops in
    // its first long wait for room: it releases the lock and returns what
    // it put (never nothing: with nothing it begins again), and the
    // program's next write goes on from there.
    for (reader_late, writer_late, buf) in [(0, 0, 4), (1, 0, 1), (0, 1, 2)] {
        check(
            &format!(
                "signalled, reader late at {reader_late}, writer at {writer_late}, reads of {buf}"
            ),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    let counts = write_all_signalled(&p, &[1, 2, 3, 4, 5, 6], writer_late);
                    p.close_writer();
                    counts
                });
                let got = read_all_by(&pipe, reader_late, buf);
                let counts = writer.join().unwrap();
                assert_eq!(got, [1, 2, 3, 4, 5, 6]);
                assert_eq!(counts.iter().sum::<usize>(), 6);
                assert!(counts.iter().all(|&c| c > 0));
            },
        );
    }
}

#[test]
fn positions_that_wrap_lose_nothing() {
    // The tail wraps at 2^24 while the head goes on to 2^24 and beyond.
    for (reader_late, writer_late, buf) in [(0, 0, 4), (1, 0, 1), (2, 1, 4)] {
        check(
            &format!(
                "wrapping, reader late at {reader_late}, writer at {writer_late}, reads of {buf}"
            ),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let start = (POS_MASK - 1) as u32;
                pipe.state.store(u64::from(start), Ordering::SeqCst);
                pipe.head.store(start, Ordering::SeqCst);
                pipe.head_seen.store(start, Ordering::SeqCst);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    for w in [&[1u8, 2][..], &[3, 4], &[5]] {
                        write_one(&p, w, false, writer_late);
                    }
                    p.close_writer();
                });
                let got = read_all_by(&pipe, reader_late, buf);
                writer.join().unwrap();
                assert_eq!(got, [1, 2, 3, 4, 5]);
            },
        );
    }
}

#[test]
fn a_reader_never_takes_a_copy_that_a_later_write_replaced() {
    // Short writes one after another, each copied beside the tag over the
    // last one's, while a reader takes a byte at a time (so it takes part
    // of a copy, and a later write may replace the rest while it copies)
    // or whole reads: every byte once, in order, whichever copy it took.
    // The last case copies only one-byte writes, so a longer write comes
    // between two copies and leaves none.
    let cases: [(&'static [&'static [u8]], usize, usize); 4] = [
        (&[&[1], &[2], &[3]], 1, 2),
        (&[&[1, 2], &[3, 4], &[5]], 1, 2),
        (&[&[1, 2], &[3, 4], &[5]], 4, 2),
        (&[&[1], &[2, 3], &[4]], 1, 1),
    ];
    for (writes, buf, copies) in cases {
        check(
            &format!("copies of up to {copies} of {writes:?}, reads of {buf}"),
            Some(2),
            move || {
                let pipe = Model::with_copies(1, copies);
                let writer = write_then_close(&pipe, writes);
                let got = read_all_by(&pipe, 3, buf);
                writer.join().unwrap();
                let want: Vec<u8> = writes.concat();
                assert_eq!(got, want);
            },
        );
    }
}

#[test]
fn two_writers_copies_keep_their_writes_whole() {
    // The writer lock orders two writers' copies and tags as it orders
    // their bytes: the second's copy replaces the first's under a new
    // `seq`, so a reader of single bytes gets each byte once.
    check("two writers' copies", Some(2), || {
        let pipe = Model::with_copies(2, ATOMIC);
        let a = write_then_close(&pipe, &[&[1, 2]]);
        let b = write_then_close(&pipe, &[&[11]]);
        let mut got = read_all_by(&pipe, 1, 1);
        a.join().unwrap();
        b.join().unwrap();
        let at = got.iter().position(|&x| x == 1).unwrap();
        assert_eq!(got[at + 1], 2, "{got:?}");
        got.sort_unstable();
        assert_eq!(got, [1, 2, 11]);
    });
}

#[test]
fn two_writers_keep_their_writes_whole_and_in_order() {
    // The second writer to find the lock held waits, or sends the pipe to
    // the kernel for good: either way each writer's bytes keep their order.
    check("two writers", Some(2), || {
        let pipe = Model::new(2);
        let a = write_then_close(&pipe, &[&[1, 2], &[3]]);
        let b = write_then_close(&pipe, &[&[11, 12]]);
        let got = read_all(&pipe, 1);
        a.join().unwrap();
        b.join().unwrap();
        let mine: Vec<u8> = got.iter().copied().filter(|&x| x < 10).collect();
        assert_eq!(mine, [1, 2, 3], "{got:?}");
        let at = got.iter().position(|&x| x == 11).unwrap();
        assert_eq!(got[at + 1], 12, "{got:?}");
        assert_eq!(got.len(), 5);
    });
}

/// One `write` of `bytes`, by the same-CPU front step first (with
/// `front`), as the hooks' `write` makes it.
fn write_in_front(pipe: &Model, bytes: &[u8], front: bool) {
    if front && kernel_write_begin(pipe) {
        pipe.kernel_write(bytes);
        kernel_write_done(pipe);
    } else {
        write_one(pipe, bytes, false, 0);
    }
}

/// Reads until EOF, `buf` bytes at most at a time, each read by the
/// same-CPU front step first (with `front`), as the hooks' `read` makes it.
fn read_all_in_front(pipe: &Model, front: bool, late_at: usize, buf: usize) -> Vec<u8> {
    let mut all = Vec::new();
    loop {
        let got = if front && kernel_read_begin(pipe) {
            let k = pipe.kernel_read(buf);
            kernel_read_done(pipe);
            k
        } else {
            read_up_to(pipe, late_at, buf)
        };
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

#[test]
fn steps_that_stay_in_the_kernel_keep_every_byte_once_in_order() {
    // A writer and a reader that share a CPU take `kernel_write_begin` and
    // `kernel_read_begin` first (the hooks' front), the whole protocol
    // when those decline; the full paths may still switch the pipe back
    // to RING between them (the model's `kernel_empty` answers), so the
    // steps meet every mode. The reader's full reads sleep in the kernel
    // at once (late at 0): the pipe is KERNEL soon.
    for (fast_writer, fast_reader) in [(true, true), (true, false), (false, true)] {
        check(
            &format!("front steps: writer {fast_writer}, reader {fast_reader}"),
            Some(2),
            move || {
                let pipe = Model::new(1);
                let p = pipe.clone();
                let writer = thread::spawn(move || {
                    for w in [&[1u8, 2][..], &[3], &[4]] {
                        write_in_front(&p, w, fast_writer);
                    }
                    p.close_writer();
                });
                let got = read_all_in_front(&pipe, fast_reader, 0, BUF);
                writer.join().unwrap();
                assert_eq!(got, [1, 2, 3, 4]);
            },
        );
    }
}

#[test]
fn a_writer_that_lets_its_reader_drain_the_kernel_keeps_every_byte_once_in_order() {
    // A writer and a reader on one CPU: the reader sleeps in the kernel
    // at once (late at 0), so the pipe goes KERNEL; the writer, finding
    // bytes there, pauses once first (late at 1) for the reader to empty
    // the kernel pipe and bring it back, and writes to the kernel after.
    // Reads of one byte leave bytes in the kernel for the pause to meet.
    // Every path must keep every byte once and in order.
    check(
        "a writer that waits for the reader to drain",
        Some(2),
        || {
            let pipe = Model::new(1);
            let p = pipe.clone();
            let writer = thread::spawn(move || {
                for w in [&[1u8, 2][..], &[3], &[4]] {
                    write_draining(&p, w, false, 1, true, false, true, true);
                }
                p.close_writer();
            });
            let got = read_all_by(&pipe, 0, 1);
            writer.join().unwrap();
            assert_eq!(got, [1, 2, 3, 4]);
        },
    );
}

#[test]
fn a_reader_that_stays_in_the_kernel_takes_the_rings_bytes_first() {
    // A handler's write sends the pipe to the kernel with writer A's bytes
    // possibly still in the ring (as in the test above); A's next write
    // and the reader take the front steps, which must keep the order the
    // full paths keep. (At this bound the model does not reach a front
    // read with bytes in the ring: dropping `kernel_read_begin`'s check of
    // an empty ring still passes. The check is `read`'s own, above.)
    check("front steps after a handler's write", Some(2), || {
        handlers_write(true)
    });
}
