//! A writer learns that every reader is gone, as on a kernel pipe: at its
//! first write after the last copy of the reader was dropped or after a
//! reader asleep in a read was killed, within 64 KiB of data after a reader
//! killed while busy; and never when only one copy of the reader (a
//! `fork`'s) goes. Counts of successful writes, never times. Every test
//! runs under a watchdog.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use common::{fork, serial, watchdog};

const LIMIT: Duration = Duration::from_secs(120);

/// A ring far larger than the bound, so that a full ring cannot be what
/// stops the writer.
const BIG: usize = 1 << 20;

/// The bound after a reader killed while busy (four of the ring's `WINDOW`s).
const BOUND: usize = 64 * 1024;

/// The gap between a slow writer's writes.
const SLOW: Duration = Duration::from_millis(10);

/// Whether process `pid` is asleep in the kernel (state `S` in
/// `/proc/PID/stat`).
fn asleep(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name, which ends with the last ')'.
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
}

/// Writes 8-byte items until one fails; returns how many succeeded and the
/// error. `gap` between writes (a slow writer); stops past `max` items.
fn write_until_error(w: &mut shmpipe::Writer, gap: Duration, max: usize) -> (usize, ErrorKind) {
    let mut ok = 0;
    loop {
        match w.write(&[7u8; 8]) {
            Ok(8) => ok += 1,
            Ok(n) => panic!("short write of {n}"),
            Err(e) => return (ok, e.kind()),
        }
        assert!(
            ok <= max,
            "{ok} writes of 8 bytes succeeded without a reader"
        );
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
}

#[test]
fn first_write_after_the_reader_is_dropped_fails() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    // In this process.
    let (r, mut w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
    w.write_all(b"seen").unwrap();
    drop(r);
    assert_eq!(
        write_until_error(&mut w, Duration::ZERO, 0),
        (0, ErrorKind::BrokenPipe)
    );
    // And from then on, by every path.
    assert_eq!(w.write(b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
    assert_eq!(
        w.write_all(&[1; 100_000]).unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
    assert_eq!(w.reserve(8).unwrap_err().kind(), ErrorKind::BrokenPipe);
    // A flush with nothing to publish succeeds, as a socket's does ...
    w.flush().unwrap();
    // ... and one with bytes for a reader that is gone does not.
    let (r, mut w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
    let mut grant = w.reserve(4).unwrap();
    grant.as_mut_slices().0[..4].copy_from_slice(b"lost");
    grant.commit_unpublished(4);
    drop(r);
    assert_eq!(w.flush().unwrap_err().kind(), ErrorKind::BrokenPipe);

    // In a child that reads, then drops its end and exits.
    let (r, mut w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
    let child = fork(move || {
        let mut r = r;
        let mut buf = [0u8; 8];
        r.read_exact(&mut buf).unwrap();
        0
    });
    w.write_all(&[1; 8]).unwrap();
    child.join();
    assert_eq!(
        write_until_error(&mut w, Duration::ZERO, 0),
        (0, ErrorKind::BrokenPipe)
    );
}

#[test]
fn first_send_after_the_receiver_is_dropped_fails() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (rx, mut tx) = shmpipe::Options::new()
        .capacity(BIG)
        .message_pipe()
        .unwrap();
    let child = fork(move || {
        let mut rx = rx;
        let mut buf = [0u8; 8];
        assert_eq!(rx.recv(&mut buf).unwrap(), 8);
        0
    });
    tx.send(&[2; 8]).unwrap();
    child.join();
    assert_eq!(tx.send(&[3; 8]).unwrap_err().kind(), ErrorKind::BrokenPipe);
    assert_eq!(tx.send(&[3; 8]).unwrap_err().kind(), ErrorKind::BrokenPipe);
}

/// A writer that writes 8 bytes every 10 ms learns at its next write that
/// the reader dropped its end, or was killed while it waited for data.
#[test]
fn a_slow_writer_learns_at_its_next_write() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for kill in [false, true] {
        let (r, mut w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
        let (done_r, done_w) = shmpipe::pipe().unwrap();
        let child = fork(move || {
            let (mut r, mut done_w) = (r, done_w);
            r.set_spin(Duration::ZERO);
            let mut buf = [0u8; 8];
            for _ in 0..5 {
                r.read_exact(&mut buf).unwrap();
            }
            if kill {
                // Asleep in a read until killed.
                let _ = r.read(&mut buf);
                return 1;
            }
            drop(r);
            done_w.write_all(b"!").unwrap();
            0
        });
        let mut done_r = done_r;
        for _ in 0..5 {
            w.write_all(&[1; 8]).unwrap();
            std::thread::sleep(SLOW);
        }
        if kill {
            while !asleep(child.pid()) {
                std::thread::sleep(Duration::from_millis(1));
            }
            child.kill();
            assert_eq!(child.wait(LIMIT), 128 + libc::SIGKILL);
        } else {
            let mut b = [0u8; 1];
            done_r.read_exact(&mut b).unwrap();
            child.join();
        }
        assert_eq!(
            write_until_error(&mut w, SLOW, 100),
            (0, ErrorKind::BrokenPipe),
            "kill: {kill}"
        );
    }
}

/// A writer whose reader read its first 80 bytes and was then killed
/// while busy (not waiting in a read, so it said nothing and left no
/// parking behind).
fn writer_of_a_reader_killed_while_busy() -> shmpipe::Writer {
    let (r, mut w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
    let (busy_r, busy_w) = shmpipe::pipe().unwrap();
    let child = fork(move || {
        let (mut r, mut busy_w) = (r, busy_w);
        let mut buf = [0u8; 80];
        r.read_exact(&mut buf).unwrap();
        busy_w.write_all(b"!").unwrap();
        loop {
            std::hint::spin_loop();
        }
    });
    w.write_all(&[1; 80]).unwrap();
    let mut busy_r = busy_r;
    busy_r.read_exact(&mut [0u8; 1]).unwrap();
    child.kill();
    assert_eq!(child.wait(LIMIT), 128 + libc::SIGKILL);
    w
}

/// A reader killed while busy: the writer learns within 64 KiB.
#[test]
fn a_reader_killed_while_busy_is_learnt_within_64_kib() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let mut w = writer_of_a_reader_killed_while_busy();
    let (ok, err) = write_until_error(&mut w, Duration::ZERO, BIG / 8);
    assert_eq!(err, ErrorKind::BrokenPipe);
    assert!(
        ok * 8 <= BOUND,
        "{} bytes written after the reader died",
        ok * 8
    );
}

/// The same with `write_all` of large writes, which the ring's window
/// cuts into pieces: still learnt within 64 KiB of writes reported done.
#[test]
fn a_reader_killed_while_busy_is_learnt_within_64_kib_of_large_writes() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for size in [48 * 1024, 64 * 1024, 200 * 1024] {
        let mut w = writer_of_a_reader_killed_while_busy();
        let chunk = vec![2u8; size];
        let mut done = 0;
        let err = loop {
            match w.write_all(&chunk) {
                Ok(()) => done += size,
                Err(e) => break e.kind(),
            }
            assert!(done <= BIG, "{done} bytes written without a reader");
        };
        assert_eq!(err, ErrorKind::BrokenPipe);
        assert!(
            done <= BOUND,
            "{done} bytes in writes of {size} reported done after the reader died"
        );
    }
}

/// The fork idiom: a child's copy of the reader goes (dropped, or the
/// child exits) while the parent's copy stays: nothing breaks, whoever
/// writes.
#[test]
fn a_fork_copy_of_the_reader_going_does_not_break_the_pipe() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, w) = shmpipe::Options::new().capacity(BIG).pipe().unwrap();
    let at = std::ptr::addr_of!(r) as usize;
    // The child drops its copy of our reader (and its copy of the writer
    // goes with its exit); ours lives on.
    let child = fork(move || {
        // SAFETY: the child's own copy of the parent's reader, taken out
        // once and dropped; the original is never used in the child.
        let copy = unsafe { std::ptr::read(at as *const shmpipe::Reader) };
        drop(copy);
        0
    });
    child.join();
    // The writer, in a second child, writes; every write succeeds.
    let writer = fork(move || {
        let mut w = w;
        for i in 0..1000u64 {
            if w.write_all(&i.to_le_bytes()).is_err() {
                return 2;
            }
        }
        0
    });
    let mut buf = [0u8; 8];
    for i in 0..1000u64 {
        r.read_exact(&mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), i);
    }
    writer.join();
    assert_eq!(r.read(&mut buf).unwrap(), 0);
}
