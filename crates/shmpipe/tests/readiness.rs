//! Readiness through the end's descriptor, checked with plain `poll(2)`:
//! after `WouldBlock` every end type polls readable once its operation can
//! progress (the peer in another process), not before, and not after the
//! readiness is consumed; `arm` gives the level-triggered use; a busy
//! side costs its peer no wake.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{fork, serial, watchdog};

const LIMIT: Duration = Duration::from_secs(60);

/// `poll(2)` for POLLIN on `fd`: `None` waits without limit (the watchdog
/// ends a hang). True if it polled readable.
fn readable(fd: &impl AsFd, timeout: Option<Duration>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.map_or(-1, |t| t.as_millis() as i32);
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return n == 1;
        }
        assert_eq!(
            std::io::Error::last_os_error().kind(),
            ErrorKind::Interrupted
        );
    }
}

fn now(fd: &impl AsFd) -> bool {
    readable(fd, Some(Duration::ZERO))
}

fn wait(fd: &impl AsFd) {
    assert!(readable(fd, None));
}

/// A go-ahead between the test and its child.
fn step(s: &mut UnixStream) {
    s.write_all(b"g").unwrap();
}

fn await_step(s: &mut UnixStream) {
    let mut b = [0u8];
    s.read_exact(&mut b).unwrap();
}

#[test]
fn reader_polls_readable_after_would_block() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, w) = shmpipe::pipe().unwrap();
    let (mut ctl, mut child_ctl) = UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut w = w;
        await_step(&mut child_ctl);
        w.write_all(b"hello").unwrap();
        await_step(&mut child_ctl);
        0 // exits: the writer is gone
    });
    r.set_nonblocking(true);
    let mut buf = [0u8; 16];
    assert_eq!(r.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!now(&r), "readable before anything was written");
    step(&mut ctl);
    wait(&r);
    assert_eq!(r.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(r.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!now(&r), "still readable after the readiness was consumed");
    step(&mut ctl);
    wait(&r); // the hang-up
    assert_eq!(r.read(&mut buf).unwrap(), 0);
    child.join();
}

#[test]
fn writer_polls_readable_after_would_block() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    let (mut ctl, mut child_ctl) = UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut r = r;
        let mut buf = [0u8; 64];
        await_step(&mut child_ctl);
        r.read_exact(&mut buf).unwrap();
        await_step(&mut child_ctl);
        0
    });
    w.set_nonblocking(true);
    w.write_all(&[7u8; 64]).unwrap();
    assert_eq!(w.write(&[1]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!now(&w), "readable while the ring is full");
    step(&mut ctl);
    wait(&w);
    assert_eq!(w.write(&[1u8; 64]).unwrap(), 64);
    assert_eq!(w.write(&[1]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!now(&w), "still readable after the room was used");
    step(&mut ctl);
    wait(&w); // the reader is gone
    assert_eq!(w.write(&[1]).unwrap_err().kind(), ErrorKind::BrokenPipe);
    child.join();
}

#[test]
fn receiver_polls_readable_after_would_block() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut rx, tx) = shmpipe::message_pipe().unwrap();
    let (mut ctl, mut child_ctl) = UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut tx = tx;
        for i in 0..3u64 {
            await_step(&mut child_ctl);
            tx.send(&i.to_le_bytes()).unwrap();
        }
        await_step(&mut child_ctl);
        0
    });
    rx.set_nonblocking(true);
    let mut buf = [0u8; 8];
    for i in 0..3u64 {
        assert_eq!(rx.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
        assert!(!now(&rx), "readable before message {i}");
        step(&mut ctl);
        wait(&rx);
        assert_eq!(rx.recv(&mut buf).unwrap(), 8);
        assert_eq!(u64::from_le_bytes(buf), i);
    }
    assert_eq!(rx.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    step(&mut ctl);
    wait(&rx);
    assert_eq!(
        rx.recv(&mut buf).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    child.join();
}

#[test]
fn sender_polls_readable_after_would_block() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe().unwrap();
    let (mut ctl, mut child_ctl) = UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut rx = rx;
        let mut buf = [0u8; 64];
        await_step(&mut child_ctl);
        assert_eq!(rx.recv(&mut buf).unwrap(), 24);
        await_step(&mut child_ctl);
        0
    });
    tx.set_nonblocking(true);
    tx.send(&[1u8; 24]).unwrap();
    tx.send(&[2u8; 24]).unwrap();
    // Two frames of 32 bytes fill the ring.
    assert_eq!(
        tx.send(&[3u8; 24]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert!(!now(&tx), "readable while the ring is full");
    step(&mut ctl);
    wait(&tx);
    tx.send(&[3u8; 24]).unwrap();
    step(&mut ctl);
    wait(&tx);
    let err = loop {
        if let Err(e) = tx.send(&[4u8; 24]) {
            break e;
        }
    };
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    child.join();
}

#[test]
fn arm_is_level_triggered() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    let mut buf = [0u8; 8];
    assert!(!rx.arm().unwrap());
    assert!(!now(&rx));
    tx.send(b"one").unwrap();
    tx.send(b"two").unwrap();
    assert!(now(&rx), "no readiness after a send to an armed end");
    // Ready: it stays readable while messages are there, cached or not.
    assert!(rx.arm().unwrap());
    assert!(now(&rx));
    assert_eq!(rx.recv(&mut buf).unwrap(), 3);
    assert!(rx.arm().unwrap());
    assert!(now(&rx));
    assert_eq!(rx.recv(&mut buf).unwrap(), 3);
    // Consumed: not readable any more, and a blocking recv after a
    // readable poll finds its message.
    assert!(!rx.arm().unwrap());
    assert!(!now(&rx), "readable after the readiness was consumed");
    tx.send(b"three").unwrap();
    wait(&rx);
    assert_eq!(rx.recv(&mut buf).unwrap(), 5);
    assert!(!rx.arm().unwrap());
    drop(tx);
    wait(&rx);
    assert!(rx.arm().unwrap());
    assert_eq!(
        rx.recv(&mut buf).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
}

#[test]
fn arm_on_every_end_type() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    assert!(!r.arm().unwrap());
    assert!(w.arm().unwrap(), "an empty ring has room");
    assert!(now(&w));
    w.write_all(&[5u8; 64]).unwrap();
    assert!(now(&r));
    assert!(r.arm().unwrap());
    w.set_nonblocking(true);
    assert_eq!(w.write(&[1]).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!w.arm().unwrap());
    assert!(!now(&w));
    let mut buf = [0u8; 64];
    r.read_exact(&mut buf).unwrap();
    assert!(now(&w));
    assert!(w.arm().unwrap());

    let (mut rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe().unwrap();
    assert!(tx.arm().unwrap());
    tx.send(&[0u8; 56]).unwrap();
    assert!(rx.arm().unwrap());
    assert!(!tx.arm().unwrap(), "a full ring has no room");
    assert!(!now(&tx));
    rx.recv(&mut buf).unwrap();
    assert!(now(&tx));
    assert!(tx.arm().unwrap());
}

#[test]
fn a_busy_side_costs_its_peer_no_wake() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
    // Make the descriptor first, so a wake byte would show.
    assert!(!now(&rx));
    assert!(!now(&tx));
    let mut buf = [0u8; 8];
    for i in 0..1000u64 {
        tx.send(&i.to_le_bytes()).unwrap();
        rx.recv(&mut buf).unwrap();
    }
    assert!(!now(&rx), "the sender woke a receiver that never waited");
    assert!(!now(&tx), "the receiver woke a sender that never waited");
}
