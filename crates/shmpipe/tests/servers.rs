//! One server, many clients: the `echo_server` example (built by `cargo
//! test`) serves 1,000 connections from several processes with every
//! message checked; silent and broken clients in front of ordinary ones
//! hold nobody up; clients SIGKILLed at random leave no descriptor and no
//! mapping behind in the server. And the waitset itself, in process.

mod common;

use std::ffi::CString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{fork, raw, serial, watchdog, Child, Rng};

const LIMIT: Duration = Duration::from_secs(120);

/// The tests take turns: the harness runs them on threads of one process,
/// and a client forked while another test holds thousands of ends would
/// inherit them all (a fork copies the descriptor table), running the
/// child into RLIMIT_NOFILE and the tests into each other.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmpipe-test-{tag}-{}.sock", std::process::id()))
}

/// The example program, next to this test binary's directory.
fn echo_server_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join("echo_server")
}

/// Starts `echo_server PATH` (killed with the test) and waits until it
/// answers.
fn start_server(path: &Path) -> Child {
    let _ = std::fs::remove_file(path);
    let exe = CString::new(echo_server_exe().as_os_str().as_bytes()).unwrap();
    let arg = CString::new(path.as_os_str().as_bytes()).unwrap();
    assert!(
        echo_server_exe().exists(),
        "{} not built (plain `cargo test` builds it; else `cargo build -p shmpipe --example echo_server`)",
        echo_server_exe().display()
    );
    let server = fork(move || {
        let argv = [exe.as_ptr(), arg.as_ptr(), std::ptr::null()];
        // SAFETY: NUL-terminated strings made before the fork, a
        // NULL-terminated argv; execv only returns on failure.
        unsafe { libc::execv(exe.as_ptr(), argv.as_ptr()) };
        127
    });
    // Wait until it listens (the watchdog ends a server that never does).
    loop {
        if let Ok(conn) = shmpipe::connect(path) {
            let (mut rx, mut tx) = conn.into_messages();
            tx.send(b"up?").unwrap();
            let mut buf = Vec::new();
            rx.recv_vec(&mut buf).unwrap();
            assert_eq!(buf, b"up?");
            return server;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A 16-byte message: who, which connection, which round.
fn message(who: u64, conn: u64, round: u64) -> [u8; 24] {
    let mut m = [0u8; 24];
    m[..8].copy_from_slice(&who.to_le_bytes());
    m[8..16].copy_from_slice(&conn.to_le_bytes());
    m[16..].copy_from_slice(&round.to_le_bytes());
    m
}

#[test]
fn a_thousand_connections_from_several_processes() {
    let _s = serial();
    let _turn = take_turn();
    let _w = watchdog(LIMIT);
    shmpipe::raise_fd_limit().unwrap();
    const PROCS: u64 = 4;
    const PER: u64 = 250;
    const ROUNDS: u64 = 20;
    let path = sock_path("thousand");
    let server = start_server(&path);
    let start = idle_counts(server.pid());
    let clients: Vec<Child> = (0..PROCS)
        .map(|p| {
            let path = path.clone();
            fork(move || {
                shmpipe::raise_fd_limit().unwrap();
                let mut conns: Vec<_> = (0..PER)
                    .map(|_| {
                        let mut opts = shmpipe::Options::new();
                        opts.capacity(4096);
                        opts.connect(&path).unwrap().into_messages()
                    })
                    .collect();
                let mut buf = [0u8; 64];
                for round in 0..ROUNDS {
                    // All connections in flight at once, then every reply.
                    for (c, (_, tx)) in conns.iter_mut().enumerate() {
                        tx.send(&message(p, c as u64, round)).unwrap();
                    }
                    for (c, (rx, _)) in conns.iter_mut().enumerate() {
                        let n = rx.recv(&mut buf).unwrap();
                        assert_eq!(&buf[..n], message(p, c as u64, round));
                    }
                }
                0
            })
        })
        .collect();
    for c in clients {
        c.join();
    }
    // All gone: the server holds nothing of them any more.
    let end = settle(server.pid(), start);
    eprintln!(
        "echo_server: {} descriptors and {} memfd mappings before {} clients, {} and {} after",
        start.fds,
        start.maps,
        PROCS * PER,
        end.fds,
        end.maps
    );
}

/// Waits until the server holds nothing of any client and its counts are
/// back to `start`, and returns them. A server that does not get there
/// within `LIMIT / 2` fails the test with what it still holds.
fn settle(pid: i32, start: Counts) -> Counts {
    let begun = std::time::Instant::now();
    loop {
        let now = server_counts(pid);
        if now == start {
            return now;
        }
        if begun.elapsed() > LIMIT / 2 {
            panic!(
                "the server still holds {now:?} after every client is gone; at start {start:?}; its descriptors: {:?}",
                fd_targets(pid)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn silent_and_broken_clients_hold_nobody_up() {
    let _s = serial();
    let _turn = take_turn();
    let _w = watchdog(LIMIT);
    let path = sock_path("silent");
    let _server = start_server(&path);
    // In front: clients that connect and say nothing, and clients that
    // send garbage and stay.
    let mut silent = Vec::new();
    for i in 0..40 {
        let (stream, _verdict) = raw::dial(&path).unwrap();
        if i % 2 == 1 {
            raw::send_msg(stream.as_fd(), &[0xAB; 40], &[]).unwrap();
        }
        silent.push(stream);
    }
    let (broken, _) = raw::dial(&path).unwrap();
    raw::send_msg(broken.as_fd(), b"GET / HTTP/1.0\r\n\r\n", &[]).unwrap();
    // An ordinary client is served while they all still wait.
    let (mut rx, mut tx) = shmpipe::connect(&path).unwrap().into_messages();
    let mut buf = Vec::new();
    for i in 0..100u32 {
        tx.send(&i.to_le_bytes()).unwrap();
        rx.recv_vec(&mut buf).unwrap();
        assert_eq!(buf, i.to_le_bytes());
    }
    // The silent ones were not dropped for time meanwhile (a handshake
    // one at a time would have made the ordinary client wait for every
    // silent one's timeout, and they would all be closed by now).
    for (i, s) in silent.iter().enumerate().step_by(2) {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        match (&*s).read(&mut b) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("silent client {i} was dropped already: {other:?}"),
        }
    }
    // The garbage senders were dropped.
    broken
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(raw::closed_by_peer(&broken));
}

/// What the server holds, from `/proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Open descriptors.
    fds: usize,
    /// Those of a client: memfds (its rings and ours), and sockets past
    /// the one listening socket (wake sockets, handshakes under way).
    client_fds: usize,
    /// Shared (memfd) mappings.
    maps: usize,
}

/// The server's counts once it holds nothing of any client (the probe
/// connection of `start_server` is dropped a moment after its echo).
///
/// Neither `/proc/PID/fd` nor `/proc/PID/maps` is read in one snapshot,
/// and the server drops an end's mappings before its descriptors: a
/// total taken when the mappings were gone could still count some of the
/// probe's descriptors, a baseline the server then never gets back to.
/// So the baseline is taken from a listing with no client descriptor in
/// it; the server opens nothing meanwhile, so the listing is exact.
fn idle_counts(pid: i32) -> Counts {
    let begun = std::time::Instant::now();
    loop {
        let now = server_counts(pid);
        if now.client_fds == 0 && now.maps == 0 {
            return now;
        }
        if begun.elapsed() > LIMIT / 2 {
            panic!(
                "the server still holds {now:?} of the start-up probe, long gone; its descriptors: {:?}",
                fd_targets(pid)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What each of the server's descriptors is (`readlink`); one closed
/// meanwhile is left out.
fn fd_targets(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect()
}

fn server_counts(pid: i32) -> Counts {
    let fds = fd_targets(pid);
    let memfds = fds.iter().filter(|t| t.starts_with("/memfd:")).count();
    let sockets = fds.iter().filter(|t| t.starts_with("socket:")).count();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    Counts {
        fds: fds.len(),
        client_fds: memfds + sockets.saturating_sub(1),
        maps: maps.lines().filter(|l| l.contains("/memfd:")).count(),
    }
}

#[test]
fn killed_clients_leave_nothing_in_the_server() {
    let _s = serial();
    let _turn = take_turn();
    let _w = watchdog(LIMIT);
    let path = sock_path("killed");
    let server = start_server(&path);
    let start = idle_counts(server.pid());
    let mut rng = Rng::new(7);
    let mut running: Vec<(Child, UnixStream)> = Vec::new();
    for round in 0..24u64 {
        // A client with a few connections that echoes until killed; it
        // says when its first round trips are done.
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let conns = 1 + rng.upto(7) as u64;
        let path2 = path.clone();
        let child = fork(move || {
            let mut theirs = theirs;
            let mut conns: Vec<_> = (0..conns)
                .map(|_| shmpipe::connect(&path2).unwrap().into_messages())
                .collect();
            let mut buf = [0u8; 64];
            for r in 0.. {
                for (c, (rx, tx)) in conns.iter_mut().enumerate() {
                    tx.send(&message(round, c as u64, r)).unwrap();
                    let n = rx.recv(&mut buf).unwrap();
                    assert_eq!(&buf[..n], message(round, c as u64, r));
                }
                if r == 0 {
                    theirs.write_all(b"r").unwrap();
                }
            }
            0
        });
        let mut b = [0u8; 1];
        ours.read_exact(&mut b).unwrap();
        running.push((child, ours));
        // Kill one at random now and then, some mid-handshake too.
        if rng.upto(2) > 0 && !running.is_empty() {
            let k = rng.upto(running.len() - 1);
            let (victim, _) = running.swap_remove(k);
            victim.kill();
            assert_eq!(victim.wait(LIMIT), 128 + libc::SIGKILL);
        }
        if round % 6 == 0 {
            let half = fork({
                let path = path.clone();
                move || {
                    let _ = raw::dial(&path);
                    // SAFETY: ends this process at once, mid-handshake.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                    0
                }
            });
            assert_eq!(half.wait(LIMIT), 128 + libc::SIGKILL);
        }
    }
    for (c, _) in running.drain(..) {
        c.kill();
        assert_eq!(c.wait(LIMIT), 128 + libc::SIGKILL);
    }
    // The server notices each hang-up and drops the client; wait until
    // it has (the watchdog ends a server that never does).
    settle(server.pid(), start);
    // And it still serves.
    let (mut rx, mut tx) = shmpipe::connect(&path).unwrap().into_messages();
    tx.send(b"still here").unwrap();
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(buf, b"still here");
}

/// Raises RLIMIT_NOFILE to `want` if allowed (root), else the soft limit
/// to the hard one; returns the soft limit.
fn raise_fd_limit_to(want: u64) -> u64 {
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: setrlimit reads one valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        return want;
    }
    shmpipe::raise_fd_limit().unwrap()
}

#[test]
fn waitset_holds_ten_thousand_ends() {
    let _s = serial();
    let _turn = take_turn();
    let _w = watchdog(LIMIT);
    // An end in a waitset costs its process three descriptors: its
    // wake/liveness socket, which the set's epoll watches itself (no epoll
    // or eventfd of the end's own), and the memfds of the two regions of
    // its ring (kept to hand the end on). So the ends here are receivers
    // whose senders live in another process, and 10,000 of them need
    // 30,000 descriptors: root may raise the hard limit, others get what
    // fits (about 6,300 under a hard limit of 20,000).
    let want = 10_000u64;
    let limit = raise_fd_limit_to(3 * want + 1000);
    let n = want.min(limit.saturating_sub(1000) / 3);
    if n < want {
        eprintln!(
            "only {n} ends: three descriptors each, and RLIMIT_NOFILE is {limit} and cannot be raised here"
        );
    }
    let (path, listener) = common::listener("many", 64);
    let (mut ctl, theirs) = UnixStream::pair().unwrap();
    let peers = fork(move || {
        let mut theirs = theirs;
        let mut opts = shmpipe::Options::new();
        opts.capacity(64);
        // Only the senders are kept (three descriptors each here too).
        let mut senders: Vec<_> = (0..n)
            .map(|_| opts.connect(&path).unwrap().into_messages().1)
            .collect();
        // Told which end to send on; u64::MAX: done (no EOF to wait for:
        // this process has a copy of the other end too).
        let mut k = [0u8; 8];
        loop {
            theirs.read_exact(&mut k).unwrap();
            let k = u64::from_le_bytes(k);
            if k == u64::MAX {
                return 0;
            }
            senders[k as usize].send(&k.to_le_bytes()).unwrap();
        }
    });
    let mut set = shmpipe::WaitSet::new().unwrap();
    let before = common::open_fds().len();
    for i in 0..n {
        let (rx, _replies) = listener.accept().unwrap().into_messages();
        set.add(2 * i, rx).unwrap();
    }
    assert_eq!(
        common::open_fds().len() - before,
        3 * n as usize,
        "three descriptors per end in the set"
    );
    let mut ready = Vec::new();
    set.wait(&mut ready, Some(Duration::ZERO)).unwrap();
    assert!(ready.is_empty());
    // Everything goes cold (armed): a send wakes it.
    set.set_spin(Duration::ZERO);
    set.wait(&mut ready, Some(Duration::from_millis(1)))
        .unwrap();
    assert!(ready.is_empty());
    let mut rng = Rng::new(3);
    for _ in 0..50 {
        let k = rng.upto(n as usize - 1) as u64;
        ctl.write_all(&k.to_le_bytes()).unwrap();
        set.wait(&mut ready, None).unwrap();
        assert_eq!(ready, [2 * k]);
        let mut buf = [0u8; 8];
        set.receiver_mut(2 * k).unwrap().recv(&mut buf).unwrap();
        assert_eq!(u64::from_le_bytes(buf), k);
    }
    // Writers too: a full sender is ready once its reader takes a message.
    let (mut rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe().unwrap();
    tx.set_nonblocking(true);
    while tx.send(&[0u8; 8]).is_ok() {}
    set.add(1, tx).unwrap();
    set.wait(&mut ready, Some(Duration::from_millis(1)))
        .unwrap();
    assert!(ready.is_empty());
    rx.recv(&mut [0u8; 8]).unwrap();
    set.wait(&mut ready, None).unwrap();
    assert_eq!(ready, [1]);
    assert_eq!(set.len() as u64, n + 1);
    // Removal is cheap and complete; a hang-up is reported.
    for i in 0..n {
        assert!(set.remove(2 * i).is_some());
    }
    // The peers go only now: their hang-ups would make every end ready.
    ctl.write_all(&u64::MAX.to_le_bytes()).unwrap();
    peers.join();
    let (rx, tx) = shmpipe::message_pipe().unwrap();
    set.add(5, rx).unwrap();
    set.wait(&mut ready, Some(Duration::from_millis(1)))
        .unwrap();
    drop(tx);
    loop {
        set.wait(&mut ready, None).unwrap();
        if ready.contains(&5.into()) {
            break;
        }
    }
    let err = set
        .receiver_mut(5)
        .unwrap()
        .recv(&mut [0u8; 8])
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
}

#[test]
fn listener_in_a_waitset_with_a_silent_client() {
    let _s = serial();
    let _turn = take_turn();
    let _w = watchdog(LIMIT);
    let path = sock_path("ws-listener");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    listener.set_nonblocking(true);
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    let mut set = shmpipe::WaitSet::new().unwrap();
    set.add(0, listener).unwrap();
    let _silent = UnixStream::connect(&path).unwrap();
    let client = std::thread::spawn({
        let path = path.clone();
        move || {
            let (mut rx, mut tx) = shmpipe::connect(&path).unwrap().into_messages();
            tx.send(b"hi").unwrap();
            let mut buf = Vec::new();
            rx.recv_vec(&mut buf).unwrap();
            assert_eq!(buf, b"hi");
        }
    });
    let mut ready = Vec::new();
    let (mut rx, mut tx) = loop {
        set.wait(&mut ready, None).unwrap();
        assert_eq!(ready, [0]);
        match set.listener_mut(0).unwrap().accept() {
            Ok(conn) => break conn.into_messages(),
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(set.listener_mut(0).unwrap().pending(), 1, "the silent one");
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    tx.send(&buf).unwrap();
    client.join().unwrap();
}

#[test]
fn a_writer_waits_for_no_room_a_finished_send_wanted() {
    let _s = serial();
    // A send that would block wants room for its message; once that room
    // is there and the send is done, a smaller send that fits now must
    // not be held up by the old want (a level-triggered loop that waits
    // for "writable" first would wait for ever if the reader waits for
    // that send).
    let (mut rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe().unwrap();
    tx.set_nonblocking(true);
    tx.send(&[1; 8]).unwrap(); // 16 of 64 bytes
    let err = tx.send(&[2; 48]).unwrap_err(); // wants 56
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    let mut set = shmpipe::WaitSet::new().unwrap();
    set.add(1, tx).unwrap();
    let mut ready = Vec::new();
    set.wait(&mut ready, Some(Duration::ZERO)).unwrap();
    assert!(ready.is_empty());
    let mut buf = [0u8; 64];
    assert_eq!(rx.recv(&mut buf).unwrap(), 8);
    set.wait(&mut ready, None).unwrap();
    assert_eq!(ready, [1]);
    let Some(shmpipe::waitset::Source::Sender(mut tx)) = set.remove(1) else {
        panic!("the sender");
    };
    tx.send(&[2; 48]).unwrap();
    assert_eq!(rx.recv(&mut buf).unwrap(), 48);
    tx.send(&[3; 32]).unwrap(); // 40 of 64 bytes: an 8-byte send fits
    set.add(2, tx).unwrap();
    set.wait(&mut ready, Some(Duration::ZERO)).unwrap();
    assert_eq!(ready, [2], "writable: an 8-byte message fits");
    let tx = set.sender_mut(2).unwrap();
    assert!(tx.arm().unwrap());
    tx.send(&[4; 8]).unwrap();
}
