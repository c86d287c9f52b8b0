//! Leaks and close-on-exec: many create/drop cycles of `pipe()`,
//! `message_pipe()` and `Listener` connections leave the number of open
//! descriptors (`/proc/self/fd`) and of mappings (`/proc/self/maps`)
//! where they started, and every descriptor shmpipe opens is
//! close-on-exec (`/proc/self/fdinfo`).
//!
//! The counts are process-wide, so this binary holds a single test.
//! `SHMPIPE_LEAK_CYCLES` sets the cycles of each kind (default 10^4, so
//! CI stays short; `scripts/harden.sh` runs 10^5).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{env_count, fd_flags, fd_target, maps, open_fds, sock_path, watchdog};

const O_CLOEXEC: u32 = 0o2_000_000;

/// Descriptors and mappings right now.
fn counts() -> (usize, usize) {
    (open_fds().len(), maps().len())
}

/// Checks that every descriptor not in `before` is close-on-exec, and
/// returns what they point at.
fn new_fds_are_cloexec(before: &BTreeSet<i32>, what: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for fd in open_fds() {
        if before.contains(&fd) {
            continue;
        }
        let target = fd_target(fd);
        let flags = fd_flags(fd).unwrap_or_else(|| panic!("{what}: no fdinfo for {fd}"));
        assert!(
            flags & O_CLOEXEC != 0,
            "{what}: descriptor {fd} ({target}) is not close-on-exec (flags {flags:o})"
        );
        seen.push(target);
    }
    seen
}

/// One connection over `listener`, the client in `client` (a thread that
/// connects when told), used both ways, then dropped.
fn connection_cycle(listener: &shmpipe::Listener, go: &std::sync::mpsc::Sender<()>) {
    go.send(()).unwrap();
    let mut conn = listener.accept().unwrap();
    conn.writer.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    conn.reader.read_exact(&mut b).unwrap();
}

/// Ends the process with a failure when dropped during a panic: for a
/// helper thread whose death would leave the test thread blocked.
struct ExitOnPanic(&'static str);

impl Drop for ExitOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("leaks: {} panicked; failing the test now", self.0);
            std::process::exit(101);
        }
    }
}

#[test]
fn no_leaks_and_everything_cloexec() {
    let cycles = env_count("SHMPIPE_LEAK_CYCLES", 10_000);
    let conn_cycles = cycles;
    let _w = watchdog(Duration::from_secs(600));

    // The client side of connections: one long-lived thread, started
    // before the baseline so its stack and malloc arena are in it. It keeps
    // its last connection until told to make the next one, so that its
    // descriptors never close while this thread lists them (the baseline
    // then holds one client connection, as every later count does).
    let path = sock_path("leaks");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn({
        let path = path.clone();
        move || {
            // The test thread would wait in `accept` for a client that is
            // gone, until the watchdog's 600 s: end the test now instead.
            let _fail_fast = ExitOnPanic("the client thread");
            let mut held = None;
            while go_rx.recv().is_ok() {
                drop(held.take());
                let mut conn = shmpipe::connect(&path).unwrap();
                let mut b = [0u8; 1];
                conn.reader.read_exact(&mut b).unwrap();
                conn.writer.write_all(&b).unwrap();
                held = Some(conn);
            }
        }
    });

    // Warm up (lazy statics, the allocator's caches), then the baseline.
    for _ in 0..10 {
        drop(shmpipe::pipe().unwrap());
        drop(shmpipe::message_pipe().unwrap());
        connection_cycle(&listener, &go);
    }
    let before_fds: BTreeSet<i32> = open_fds().into_iter().collect();
    let (fds0, maps0) = counts();

    // Close-on-exec: everything a pipe, a message pipe and a connection
    // (both sides) open.
    let mut pipe = shmpipe::pipe().unwrap();
    let mpipe = shmpipe::message_pipe().unwrap();
    go.send(()).unwrap();
    let mut conn = listener.accept().unwrap();
    conn.writer.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    conn.reader.read_exact(&mut b).unwrap();
    let seen = new_fds_are_cloexec(&before_fds, "pipes and a connection");
    let memfds = seen
        .iter()
        .filter(|t| t.starts_with("/memfd:shmpipe"))
        .count();
    let pipes = seen.iter().filter(|t| t.starts_with("pipe:")).count();
    let sockets = seen.iter().filter(|t| t.starts_with("socket:")).count();
    // Each end of a local pipe keeps its own region, the peer's, the read
    // end of its wake pipe and its waker of the peer's: two local pipes
    // hold 4 memfds (each end a copy of both) and 4 pipe descriptors each.
    // Each end of a connection keeps the two regions and a wake socket:
    // the server side holds its ends' 4 memfds and 2 sockets (the client
    // thread's may be gone by now).
    assert!(
        memfds >= 8 && pipes >= 8 && sockets >= 2,
        "unexpected descriptors: {seen:?}"
    );
    eprintln!(
        "cloexec: {} new descriptors, all close-on-exec ({memfds} memfds, {pipes} pipe \
         descriptors, {sockets} sockets)",
        seen.len()
    );
    // Handing an end to a program keeps the parent's copies close-on-exec
    // too (only the child's are made inheritable, between fork and exec).
    let mut cmd = std::process::Command::new("true");
    pipe.0.pass_to(&mut cmd, "r").unwrap();
    new_fds_are_cloexec(&before_fds, "after pass_to");
    drop(cmd);
    drop((pipe, mpipe, conn));
    assert_eq!(counts(), (fds0, maps0), "one cycle of each leaked");

    let start = Instant::now();
    for _ in 0..cycles {
        drop(shmpipe::pipe().unwrap());
    }
    let pipes_time = start.elapsed();
    assert_eq!(counts(), (fds0, maps0), "pipe() leaked");

    let start = Instant::now();
    for _ in 0..cycles {
        let (mut rx, mut tx) = shmpipe::message_pipe().unwrap();
        tx.send(b"m").unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(rx.recv(&mut buf).unwrap(), 1);
    }
    let msg_time = start.elapsed();
    assert_eq!(counts(), (fds0, maps0), "message_pipe() leaked");

    let start = Instant::now();
    for _ in 0..conn_cycles {
        connection_cycle(&listener, &go);
    }
    let conn_time = start.elapsed();
    // Counted while the client thread still waits, as at the baseline.
    let (fds1, maps1) = counts();
    drop(go);
    client.join().unwrap();
    eprintln!(
        "leaks: {cycles} pipes ({pipes_time:.1?}), {cycles} message pipes ({msg_time:.1?}), \
         {conn_cycles} connections ({conn_time:.1?}): descriptors {fds0} -> {fds1}, mappings {maps0} -> {maps1}"
    );
    assert_eq!((fds1, maps1), (fds0, maps0), "connections leaked");
}
