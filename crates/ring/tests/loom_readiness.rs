//! Loom models of readiness: a side that got `WouldBlock` *arms* (the park
//! handshake without the sleep) and then polls its descriptor, against a
//! peer that publishes. This is what `shmpipe`'s non-blocking ends, its
//! `arm` and its waitset do (`wait::Side::arm`, `settle`).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-ring --test loom_readiness --release`.
//!
//! The descriptor is modelled by [`Descriptor`]: wake bytes pending on the
//! end's socket and the end's own flag (its eventfd). `poll` waits, with
//! no timeout, until either is there and consumes nothing (level
//! triggered); only the end itself drains and lowers them. Nobody hangs
//! up, so a lost readiness is a deadlock, which loom reports.

#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use shmpipe_ring::local::channel;
use shmpipe_ring::{Consumer, Producer};

/// Preemption bound unless `LOOM_MAX_PREEMPTIONS` says otherwise.
const PREEMPTIONS: Option<usize> = Some(3);

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::model;

fn byte(i: usize) -> u8 {
    (i % 255) as u8 + 1
}

/// One end's readiness descriptor as the kernel keeps it.
#[derive(Default)]
struct Descriptor {
    state: Mutex<(usize, bool)>,
    cond: Condvar,
}

impl Descriptor {
    /// The peer's wake byte.
    fn wake(&self) {
        self.state.lock().unwrap().0 += 1;
        self.cond.notify_all();
    }
    /// `poll(2)` with no timeout: returns once a byte is pending or the
    /// flag is raised; consumes nothing.
    fn poll(&self) {
        let mut s = self.state.lock().unwrap();
        while s.0 == 0 && !s.1 {
            s = self.cond.wait(s).unwrap();
        }
    }
    /// The end drains its socket (one non-blocking recv).
    fn drain(&self) {
        self.state.lock().unwrap().0 = 0;
    }
    /// The end raises or lowers its own flag.
    fn set_flag(&self, on: bool) {
        self.state.lock().unwrap().1 = on;
        self.cond.notify_all();
    }
}

/// What `wait::Side` keeps about readiness.
#[derive(Default)]
struct Armer {
    armed: bool,
    raised: bool,
}

/// The ring operations arming needs, for either end.
trait End {
    fn ready(&mut self, want: usize) -> bool;
    fn park(&mut self, want: usize) -> bool;
    fn unpark(&mut self);
}

impl End for Consumer {
    fn ready(&mut self, want: usize) -> bool {
        self.available(want).unwrap() >= want
    }
    fn park(&mut self, _: usize) -> bool {
        Consumer::park(self).unwrap()
    }
    fn unpark(&mut self) {
        Consumer::unpark(self)
    }
}

impl End for Producer {
    fn ready(&mut self, want: usize) -> bool {
        self.free(want).unwrap() >= want
    }
    fn park(&mut self, want: usize) -> bool {
        Producer::park(self, want).unwrap()
    }
    fn unpark(&mut self) {
        Producer::unpark(self)
    }
}

impl Armer {
    /// `Side::settle`: take back the arming and the flag.
    fn settle(&mut self, end: &mut impl End, d: &Descriptor) {
        if self.armed {
            end.unpark();
            self.armed = false;
            d.drain();
        }
        if self.raised {
            d.set_flag(false);
            self.raised = false;
        }
    }

    /// A non-blocking operation's slow path (`Side::wait_slow`): true if
    /// it can progress, false for `WouldBlock` (armed).
    fn try_op(&mut self, end: &mut impl End, want: usize, d: &Descriptor) -> bool {
        self.settle(end, d);
        if end.ready(want) {
            return true;
        }
        if end.park(want) {
            return true; // ready during the re-check
        }
        self.armed = true;
        false
    }

    /// `Side::arm`: level-triggered readiness.
    fn arm(&mut self, end: &mut impl End, want: usize, d: &Descriptor) -> bool {
        if !end.ready(want) {
            self.settle(end, d);
            if !end.park(want) {
                self.armed = true;
                return false;
            }
        }
        if !self.raised {
            d.set_flag(true);
            self.raised = true;
        }
        true
    }
}

/// The reader's and the writer's descriptors.
type Fds = (Arc<Descriptor>, Arc<Descriptor>);

/// What every model starts from: an 8-byte ring, the descriptors, and a
/// second handle on each for the peer thread.
fn setup() -> (Producer, Consumer, Fds, Fds) {
    let (mut tx, rx) = channel(8).unwrap();
    // The inline copy beside the tail has a model of its own (loom.rs);
    // here it would multiply the interleavings past any time budget.
    tx.set_inline_copy(false);
    let fds: Fds = Default::default();
    let clones = (fds.0.clone(), fds.1.clone());
    (tx, rx, fds, clones)
}

/// Sends `n` one-byte items, each published at once, waking the reader's
/// descriptor when `publish` says so.
fn send_bytes(tx: &mut Producer, n: usize, reader: &Descriptor) {
    for i in 0..n {
        while tx.free(1).unwrap() == 0 {
            thread::yield_now();
        }
        tx.push(&[byte(i)]);
        if tx.publish() {
            reader.wake();
        }
    }
}

/// Consumes one byte and checks it, waking the writer if it asked.
fn take_byte(rx: &mut Consumer, i: usize, writer: &Descriptor) {
    let mut b = [0u8];
    assert_eq!(rx.pop(&mut b), 1);
    assert_eq!(b[0], byte(i));
    if rx.publish() {
        writer.wake();
    }
}

#[test]
fn reader_would_block_then_polls() {
    // Edge-triggered use: read until WouldBlock, then poll the descriptor.
    model(PREEMPTIONS, || {
        let (mut tx, mut rx, (reader_fd, _writer_fd), (rd, wd)) = setup();
        let writer = thread::spawn(move || {
            send_bytes(&mut tx, 3, &rd);
            tx // no hang-up: a lost readiness deadlocks
        });
        let mut a = Armer::default();
        for i in 0..3 {
            while !(rx.available_cached() > 0 || a.try_op(&mut rx, 1, &reader_fd)) {
                reader_fd.poll();
            }
            take_byte(&mut rx, i, &wd);
        }
        drop(writer.join().unwrap());
    });
}

#[test]
fn reader_arms_polls_then_blocks() {
    // Level-triggered use: arm, poll, then a blocking read (the park and
    // sleep of `wait`, with its settle first). A readiness the flag or a
    // wake byte signalled must be there; a stale one must not strand the
    // blocking read.
    model(PREEMPTIONS, || {
        let (mut tx, mut rx, (reader_fd, _writer_fd), (rd, wd)) = setup();
        let writer = thread::spawn(move || {
            send_bytes(&mut tx, 2, &rd);
            tx
        });
        let mut a = Armer::default();
        for i in 0..2 {
            if !a.arm(&mut rx, 1, &reader_fd) {
                reader_fd.poll();
            }
            // The blocking read.
            if rx.available_cached() == 0 {
                a.settle(&mut rx, &reader_fd);
                while !rx.ready(1) {
                    if !rx.park().unwrap() {
                        // Sleep: a blocking recv on the socket, which
                        // consumes the wake bytes.
                        reader_fd.poll_socket();
                        rx.unpark();
                    }
                }
            }
            take_byte(&mut rx, i, &wd);
        }
        drop(writer.join().unwrap());
    });
}

impl Descriptor {
    /// A blocking `recv` on the socket alone: waits for a wake byte and
    /// consumes the pending ones.
    fn poll_socket(&self) {
        let mut s = self.state.lock().unwrap();
        while s.0 == 0 {
            s = self.cond.wait(s).unwrap();
        }
        s.0 = 0;
    }
}

#[test]
fn writer_would_block_then_polls() {
    // A writer facing a full ring (10 bytes through 8) gets WouldBlock,
    // arms and polls; the reader frees space and wakes it.
    model(PREEMPTIONS, || {
        let (mut tx, mut rx, (_reader_fd, writer_fd), (rd, wd)) = setup();
        let reader = thread::spawn(move || {
            for i in 0..10 {
                while rx.available(1).unwrap() == 0 {
                    thread::yield_now();
                }
                take_byte(&mut rx, i, &wd);
            }
            rx
        });
        let mut a = Armer::default();
        let mut i = 0;
        while i < 10 {
            if tx.free_cached() == 0 && !a.try_op(&mut tx, 1, &writer_fd) {
                writer_fd.poll();
                continue;
            }
            tx.push(&[byte(i)]);
            i += 1;
            if tx.publish() {
                rd.wake();
            }
        }
        drop(reader.join().unwrap());
    });
}
