//! The rendezvous by path: connect/accept across processes, refusal by
//! policy and by user, and the seals that keep each side's pages its own.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use common::{fork, serial, watchdog};

const LIMIT: Duration = Duration::from_secs(60);

fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmpipe-test-{tag}-{}.sock", std::process::id()))
}

#[test]
fn echo_between_processes() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("echo");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let client = fork({
        let path = path.clone();
        move || {
            let mut conn = shmpipe::connect(&path).unwrap();
            for i in 0..1000u32 {
                conn.writer.write_all(&i.to_le_bytes()).unwrap();
                let mut b = [0u8; 4];
                conn.reader.read_exact(&mut b).unwrap();
                assert_eq!(u32::from_le_bytes(b), i * 2);
            }
            0
        }
    });
    let mut conn = listener.accept().unwrap();
    assert_eq!(conn.peer.pid, client.pid());
    let mut b = [0u8; 4];
    loop {
        match conn.reader.read_exact(&mut b) {
            Ok(()) => conn
                .writer
                .write_all(&(u32::from_le_bytes(b) * 2).to_le_bytes())
                .unwrap(),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("{e}"),
        }
    }
    client.join();
    drop(listener);
    assert!(!path.exists(), "the listener removes its socket file");
}

#[test]
fn messages_over_a_connection() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("msg");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    let client = fork({
        let path = path.clone();
        move || {
            let (mut rx, mut tx) = shmpipe::connect(&path).unwrap().into_messages();
            tx.send(b"request").unwrap();
            let mut buf = Vec::new();
            rx.recv_vec(&mut buf).unwrap();
            assert_eq!(buf, b"reply to request");
            0
        }
    });
    let (mut rx, mut tx) = listener.accept().unwrap().into_messages();
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    tx.send(&[b"reply to ".as_slice(), &buf].concat()).unwrap();
    client.join();
}

#[test]
fn peer_refused_by_policy() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("policy");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let me = std::process::id() as i32;
    listener.set_policy(move |peer| peer.pid == me);
    let refused = fork({
        let path = path.clone();
        move || match shmpipe::connect(&path) {
            Err(e) if e.kind() == ErrorKind::PermissionDenied => 0,
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => 1,
        }
    });
    // The listener skips the refused peer; accept in a thread and connect
    // from this process, which the policy allows.
    let server = std::thread::spawn(move || listener.accept().map(|c| c.peer.pid));
    assert_eq!(
        refused.wait(LIMIT),
        0,
        "the refused client must see PermissionDenied"
    );
    let _conn = shmpipe::connect(&path).unwrap();
    assert_eq!(server.join().unwrap().unwrap(), me);
}

/// A peer of another uid is refused by default even when the socket file
/// lets it in (CI runs as root, so the child can change uid).
#[test]
fn other_user_refused_by_default() {
    let _s = serial();
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs root to change uid");
        return;
    }
    let _w = watchdog(LIMIT);
    let path = sock_path("uid");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let other = fork({
        let path = path.clone();
        move || {
            // SAFETY: setgid/setuid in a single-threaded child.
            if unsafe { libc::setgid(65534) } != 0 || unsafe { libc::setuid(65534) } != 0 {
                return 3;
            }
            match shmpipe::connect(&path) {
                // The client refuses a root listener? No: root is trusted.
                Err(e) if e.kind() == ErrorKind::PermissionDenied => 0,
                Err(e) => {
                    eprintln!("unexpected: {e}");
                    2
                }
                Ok(_) => 1,
            }
        }
    });
    let server = std::thread::spawn(move || listener.accept().map(|c| c.peer.uid));
    assert_eq!(
        other.wait(LIMIT),
        0,
        "a peer of another uid must be refused"
    );
    let _conn = shmpipe::connect(&path).unwrap();
    assert_eq!(server.join().unwrap().unwrap(), 0);
}

/// The socket file itself is private: mode 0600.
#[test]
fn socket_file_is_owner_only() {
    let _s = serial();
    use std::os::unix::fs::PermissionsExt;
    let path = sock_path("mode");
    let _listener = shmpipe::Listener::bind(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn connect_to_nothing_fails_cleanly() {
    let _s = serial();
    let err = shmpipe::connect(sock_path("absent")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

/// Each side chooses the capacity of the pipe it writes; the two need
/// not agree.
#[test]
fn sides_with_different_capacities_connect() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("caps");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut server_opts = shmpipe::Options::new();
    server_opts.capacity(4096);
    listener.set_options(server_opts);
    let client = fork({
        let path = path.clone();
        move || {
            let (mut rx, mut tx) = shmpipe::Options::new()
                .capacity(1 << 20)
                .connect(&path)
                .unwrap()
                .into_messages();
            assert_eq!(tx.max_message(), (1 << 20) - 8);
            tx.send(&vec![7u8; 100_000]).unwrap();
            let mut buf = Vec::new();
            rx.recv_vec(&mut buf).unwrap();
            assert_eq!(buf, vec![9u8; 4088]);
            0
        }
    });
    let (mut rx, mut tx) = listener.accept().unwrap().into_messages();
    assert_eq!(tx.max_message(), 4096 - 8);
    let mut buf = Vec::new();
    rx.recv_vec(&mut buf).unwrap();
    assert_eq!(buf, vec![7u8; 100_000]);
    tx.send(&[9u8; 4088]).unwrap();
    client.join();
}

/// Issue #8, item 1: a listener's limit on the rings clients declare. A
/// client over it fails with `InvalidInput` naming the limit, before it
/// makes any region; the listener skips it and serves the next client.
#[test]
fn client_ring_over_the_listeners_limit_is_refused() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("max-peer");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    listener.set_max_peer_capacity(64 * 1024);
    let client = fork({
        let path = path.clone();
        move || {
            let err = shmpipe::Options::new()
                .capacity(128 * 1024)
                .connect(&path)
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().contains("65536"), "{err}");
            let mut conn = shmpipe::Options::new()
                .capacity(64 * 1024)
                .connect(&path)
                .unwrap();
            conn.writer.write_all(b"fits").unwrap();
            0
        }
    });
    let mut conn = listener.accept().unwrap();
    let mut buf = [0u8; 4];
    conn.reader.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"fits");
    assert_eq!(conn.reader.capacity(), 64 * 1024);
    client.join();
}

/// Issue #8, item 1, the client's side: `connect` refuses a listener whose
/// ring is over the client's `max_peer_capacity` with `InvalidData`, and
/// the listener, told why, serves the next client.
#[test]
fn listener_ring_over_the_clients_limit_is_refused() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("max-server");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut opts = shmpipe::Options::new();
    opts.capacity(128 * 1024);
    listener.set_options(opts);
    let client = fork({
        let path = path.clone();
        move || {
            let err = shmpipe::Options::new()
                .max_peer_capacity(64 * 1024)
                .connect(&path)
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
            assert!(err.to_string().contains("131072"), "{err}");
            let mut conn = shmpipe::connect(&path).unwrap();
            conn.writer.write_all(b"next").unwrap();
            0
        }
    });
    let mut conn = listener.accept().unwrap();
    let mut buf = [0u8; 4];
    conn.reader.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"next");
    client.join();
}

/// Issue #8, item 3, in the handshake: a silent listener makes `connect`
/// time out after `handshake::TIMEOUT` even while signals keep
/// interrupting the wait (each retry used to start the timeout over).
#[test]
fn handshake_timeout_expires_while_signals_keep_arriving() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("silent");
    let _ = std::fs::remove_file(&path);
    // Connections queue in the backlog; nobody ever answers them.
    let _silent = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let child = fork({
        let path = path.clone();
        move || {
            common::signals_every_2ms();
            let err = shmpipe::connect(&path).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
            0
        }
    });
    let limit = shmpipe::handshake::TIMEOUT * 4;
    assert_eq!(child.wait(limit), 0);
    let _ = std::fs::remove_file(&path);
}

/// Issue #8, item 7: a listener in a pid namespace of its own (a server in
/// a container) cannot see its client's pid: `SO_PEERCRED` reports 0. The
/// connection works and `peer.pid` is 0 (rustix's credentials, whose pid
/// may not be zero, made accept skip such a client: undefined behaviour,
/// then a handshake timeout).
#[test]
fn peer_in_another_pid_namespace() {
    let _s = serial();
    use std::os::unix::net::UnixStream;
    let _w = watchdog(LIMIT);
    let path = sock_path("pidns");
    let _ = std::fs::remove_file(&path);
    let (mut ready, ready_child) = UnixStream::pair().unwrap();
    let server = fork({
        let path = path.clone();
        move || {
            let mut ready = ready_child;
            let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
            // SAFETY: unshare in this single-threaded child.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
                let why = format!("unshare: {}", std::io::Error::last_os_error());
                let _ = ready.write_all(format!("S{why}").as_bytes());
                return 0;
            }
            // Map our user to root in the namespace, so files and the
            // listener's same-user policy work as outside.
            let maps = [
                ("/proc/self/uid_map", format!("0 {} 1", uid.as_raw())),
                ("/proc/self/setgroups", "deny".to_string()),
                ("/proc/self/gid_map", format!("0 {} 1", gid.as_raw())),
            ];
            for (file, map) in maps {
                if let Err(e) = std::fs::write(file, map) {
                    let _ = ready.write_all(format!("S{file}: {e}").as_bytes());
                    return 0;
                }
            }
            // The first child forked now is pid 1 of a new pid namespace.
            let inner = fork(move || {
                // SAFETY: prctl on ourselves: die with our parent.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
                let listener = shmpipe::Listener::bind(&path).unwrap();
                ready.write_all(b"R").unwrap();
                let mut conn = listener.accept().unwrap();
                conn.writer.write_all(&conn.peer.pid.to_le_bytes()).unwrap();
                let mut b = [0u8; 1];
                let _ = conn.reader.read(&mut b);
                0
            });
            inner.wait(LIMIT)
        }
    });
    let mut answer = Vec::new();
    let mut b = [0u8; 256];
    let n = ready.read(&mut b).unwrap();
    answer.extend_from_slice(&b[..n]);
    if answer.first() == Some(&b'S') {
        eprintln!(
            "skipped: no new user+pid namespace here ({})",
            String::from_utf8_lossy(&answer[1..])
        );
        server.join();
        return;
    }
    assert_eq!(answer, b"R");
    let mut conn = shmpipe::connect(&path).unwrap();
    let mut pid = [0u8; 4];
    conn.reader.read_exact(&mut pid).unwrap();
    assert_eq!(i32::from_le_bytes(pid), 0, "the server cannot see our pid");
    drop(conn);
    server.join();
    let _ = std::fs::remove_file(&path);
}

/// Lowers this (forked) process's descriptor limit to what it has open
/// now plus `room`.
fn limit_fds(room: u64) {
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let lim = libc::rlimit {
        rlim_cur: open + room,
        rlim_max: 4096,
    };
    // SAFETY: setrlimit with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// Out of descriptors (silent clients can cause it), a blocking `accept`
/// turns new clients away (they read end-of-file) instead of leaving them
/// queued while it spins on the still-readable listening socket: every
/// one of 40 clients hears from the server, a verdict or a hang-up.
#[test]
fn accept_out_of_descriptors_turns_clients_away() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("emfile");
    let _ = std::fs::remove_file(&path);
    let (ready, ready_child) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = fork({
        let path = path.clone();
        move || {
            let listener = shmpipe::Listener::bind(&path).unwrap();
            limit_fds(8);
            (&ready).write_all(&[1]).unwrap();
            loop {
                let _ = listener.accept();
            }
        }
    });
    let mut b = [0u8; 1];
    assert_eq!((&ready_child).read(&mut b).unwrap(), 1); // bound and limited
    let mut clients: Vec<_> = (0..40)
        .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
        .collect();
    let mut hung_up = 0;
    for c in &mut clients {
        // Blocks (and the watchdog fails the test) if the server never
        // takes this client off its queue.
        let mut buf = [0u8; 64];
        if c.read(&mut buf).unwrap() == 0 {
            hung_up += 1;
        }
    }
    drop(child);
    let _ = std::fs::remove_file(&path);
    assert!(hung_up > 0, "no client was turned away");
}

/// Out of descriptors, a non-blocking `accept` (as `serve_waitset` uses
/// it) returns `WouldBlock` instead of looping inside until a pending
/// client's handshake deadline frees a descriptor.
#[test]
fn nonblocking_accept_out_of_descriptors_returns_would_block() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("emfile-nb");
    let _ = std::fs::remove_file(&path);
    let (go, go_child) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = fork({
        let path = path.clone();
        move || {
            let mut listener = shmpipe::Listener::bind(&path).unwrap();
            listener.set_nonblocking(true);
            limit_fds(8);
            let mut b = [0u8; 1];
            assert_eq!((&go_child).read(&mut b).unwrap(), 1); // clients queued
                                                              // The call returns: the silent clients are taken (those past
                                                              // the limit hung up on) and none has finished a handshake.
            match listener.accept() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                Err(e) => panic!("accept: {e}"),
                Ok(_) => panic!("a silent client completed a handshake"),
            }
        }
    });
    let clients: Vec<_> = (0..40)
        .filter_map(|_| {
            while !path.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::os::unix::net::UnixStream::connect(&path).ok()
        })
        .collect();
    assert_eq!(clients.len(), 40);
    (&go).write_all(&[1]).unwrap();
    // Within the handshake deadline (10 s), which would otherwise be what
    // ends the call.
    let code = child.wait(Duration::from_secs(8));
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 0, "non-blocking accept did not return WouldBlock");
}

/// `listener`, bound at `path`, accepts a client.
fn serves_a_client(listener: &shmpipe::Listener, path: &std::path::Path) {
    let client = std::thread::spawn({
        let path = path.to_path_buf();
        move || shmpipe::connect(&path).map(drop)
    });
    listener.accept().unwrap();
    client.join().unwrap().unwrap();
}

/// Waits (under the test's watchdog) until something is at `path`.
fn wait_for_file(path: &std::path::Path) {
    while std::fs::symlink_metadata(path).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_socket_file_left_by_a_killed_listener_is_reclaimed() {
    let _s = serial();
    // SIGKILL gives a listener no chance to remove its socket file; the
    // next bind there finds nobody listening, replaces it and serves.
    let _w = watchdog(LIMIT);
    let path = sock_path("stale");
    let _ = std::fs::remove_file(&path);
    let server = fork({
        let path = path.clone();
        move || {
            let _listener = shmpipe::Listener::bind(&path).unwrap();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    });
    wait_for_file(&path);
    server.kill();
    assert_eq!(server.wait(LIMIT), 128 + libc::SIGKILL);
    assert!(path.exists(), "the killed listener's socket file stays");
    let listener = shmpipe::Listener::bind(&path).unwrap();
    serves_a_client(&listener, &path);
    drop(listener);
    assert!(!path.exists());
}

#[test]
fn a_path_a_server_listens_on_is_refused_by_name() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("live");
    let _ = std::fs::remove_file(&path);
    let first = shmpipe::Listener::bind(&path).unwrap();
    let e = shmpipe::Listener::bind(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains("another server is listening"),
        "{text}"
    );
    // The first listener still has its file and serves (the second's
    // probe was one more client that hung up before its hello).
    serves_a_client(&first, &path);
    assert_no_staging_files();
}

#[test]
fn what_is_not_a_socket_is_never_removed() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    // A regular file.
    let path = sock_path("regular");
    std::fs::write(&path, b"precious").unwrap();
    let e = shmpipe::Listener::bind(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();
    // A symlink, even to a stale socket file: neither is touched.
    let stale = sock_path("stale-target");
    let _ = std::fs::remove_file(&stale);
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let link = sock_path("link-to-stale");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&stale, &link).unwrap();
    let e = shmpipe::Listener::bind(&link).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(std::fs::symlink_metadata(&stale).is_ok());
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&stale).unwrap();
}

#[test]
fn a_listener_removes_only_its_own_socket_file() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let path = sock_path("own");
    let _ = std::fs::remove_file(&path);
    let old = shmpipe::Listener::bind(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let new = shmpipe::Listener::bind(&path).unwrap();
    drop(old);
    assert!(path.exists(), "the old listener removed the new one's file");
    drop(new);
    assert!(!path.exists());
}

#[test]
fn servers_racing_for_a_stale_socket_file_end_with_one_listener() {
    let _s = serial();
    // Eight processes bind at once where a stale socket file is: one
    // wins, the others are told a server listens there; none removes the
    // winner's file. They hold their outcome until all have one.
    let _w = watchdog(LIMIT);
    let path = sock_path("race");
    let _ = std::fs::remove_file(&path);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // stale
    let (mut results, results_child) = std::os::unix::net::UnixStream::pair().unwrap();
    let (mut release, release_child) = std::os::unix::net::UnixStream::pair().unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            let (mut results, mut release) = (
                results_child.try_clone().unwrap(),
                release_child.try_clone().unwrap(),
            );
            fork(move || {
                let code = match shmpipe::Listener::bind(&path) {
                    Ok(l) => {
                        results.write_all(&[0]).unwrap();
                        let mut b = [0u8];
                        release.read_exact(&mut b).unwrap();
                        // Still the file's owner when all have tried.
                        assert!(path.exists());
                        drop(l);
                        return 0;
                    }
                    Err(e) if e.kind() == ErrorKind::AddrInUse => 1,
                    Err(e) => {
                        eprintln!("bind: {e}");
                        2
                    }
                };
                results.write_all(&[code]).unwrap();
                let mut b = [0u8];
                release.read_exact(&mut b).unwrap();
                code as i32
            })
        })
        .collect();
    let mut outcomes = [0u8; 8];
    results.read_exact(&mut outcomes).unwrap();
    release.write_all(&[1; 8]).unwrap();
    let codes: Vec<i32> = children.into_iter().map(|c| c.wait(LIMIT)).collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 1).count(), 7, "{codes:?}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_socket_file_appears_only_once_its_listener_accepts() {
    let _s = serial();
    // A client that waits for the file and then connects is never
    // refused, however soon after the file appears it connects (the way
    // scripts and tests wait for a server to start).
    let _w = watchdog(LIMIT);
    let path = sock_path("appears");
    for _ in 0..300 {
        let _ = std::fs::remove_file(&path);
        let binder = std::thread::spawn({
            let path = path.clone();
            move || shmpipe::Listener::bind(&path).unwrap()
        });
        while std::fs::symlink_metadata(&path).is_err() {
            std::hint::spin_loop();
        }
        let client = std::os::unix::net::UnixStream::connect(&path);
        assert!(
            client.is_ok(),
            "refused once the file was there: {client:?}"
        );
        drop(binder.join().unwrap());
    }
    assert_no_staging_files();
}

/// No staging file a bind made (see `Listener::bind`) is left in the
/// temporary directory.
fn assert_no_staging_files() {
    let prefix = format!(".shmpipe-{}-", std::process::id());
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_path_with_no_room_for_a_staging_name_is_bound_in_place() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    // The longest path a socket address holds (107 bytes), with a
    // one-letter name: a staging name beside it would not fit.
    let base = std::env::temp_dir().join(format!("shmpipe-test-long-{}-", std::process::id()));
    let room = 107 - base.as_os_str().len() - "/s".len();
    let dir = PathBuf::from(format!("{}{}", base.display(), "d".repeat(room)));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    assert_eq!(path.as_os_str().len(), 107);
    let listener = shmpipe::Listener::bind(&path).unwrap();
    serves_a_client(&listener, &path);
    // Taken while it listens, by name.
    let e = shmpipe::Listener::bind(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
    drop(listener);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}
