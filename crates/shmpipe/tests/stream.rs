//! Byte-stream pipes across processes: fork, exec, EOF, BrokenPipe,
//! SIGKILL, non-blocking and timeouts. Every test runs under a watchdog.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use common::{check, fill, fork, role, serial, spawn_role, watchdog, Rng};

const LIMIT: Duration = Duration::from_secs(120);

/// The seeds' consistency check, at scale: 10^8 bytes in random-sized
/// chunks, parent reading, forked child writing, byte for byte.
#[test]
fn fork_hundred_million_bytes_random_chunks() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const TOTAL: u64 = 100_000_000;
    let (mut r, w) = shmpipe::Options::new().capacity(64 * 1024).pipe().unwrap();
    let child = fork(move || {
        let mut w = w;
        let mut rng = Rng::new(7);
        let mut buf = vec![0u8; 100_000];
        let mut pos = 0u64;
        while pos < TOTAL {
            let n = (rng.upto(99_999) + 1).min((TOTAL - pos) as usize);
            fill(&mut buf[..n], pos);
            w.write_all(&buf[..n]).unwrap();
            pos += n as u64;
        }
        0
    });
    let mut rng = Rng::new(11);
    let mut buf = vec![0u8; 70_000];
    let mut pos = 0u64;
    loop {
        let want = rng.upto(69_999) + 1;
        let n = r.read(&mut buf[..want]).unwrap();
        if n == 0 {
            break;
        }
        check(&buf[..n], pos);
        pos += n as u64;
    }
    assert_eq!(pos, TOTAL, "EOF before all bytes arrived");
    child.join();
}

/// The usual idiom: the child drops the ends it does not use and writes;
/// the parent drops its writer and reads to EOF. A forked copy dropping its
/// end must not close the pipe for the other process.
#[test]
fn fork_idiom_reads_to_eof() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, w) = shmpipe::pipe().unwrap();
    let (r2, w2) = shmpipe::pipe().unwrap();
    let child = fork(move || {
        // Child: keeps only the writer of the first pipe.
        drop(r2);
        drop(w2);
        let mut w = w;
        w.write_all(b"hello ").unwrap();
        w.write_all(b"world").unwrap();
        0
    });
    // The closure (and with it the parent's copy of `w`) was dropped here.
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello world");
    assert_eq!(r.read(&mut [0u8; 8]).unwrap(), 0, "EOF is sticky");
    child.join();
}

/// Once every copy of the reader is gone, writing fails with BrokenPipe
/// (by the time the ring is full), and no SIGPIPE kills us.
#[test]
fn broken_pipe_after_reader_exits() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (r, mut w) = shmpipe::Options::new().capacity(4096).pipe().unwrap();
    let child = fork(move || {
        drop(r);
        0
    });
    child.join();
    let chunk = [0u8; 1000];
    let mut written = 0;
    let err = loop {
        match w.write(&chunk) {
            Ok(n) => written += n,
            Err(e) => break e,
        }
        assert!(written <= 4096 + 1000, "kept writing past a full ring");
    };
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
}

/// A writer SIGKILLed while the reader sleeps: the reader gets exactly the
/// bytes published before the kill, then EOF.
#[test]
fn sigkill_writer_while_reader_blocked() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, w) = shmpipe::Options::new().spin(Duration::ZERO).pipe().unwrap();
    let (mut ready_r, ready_w) = shmpipe::pipe().unwrap();
    let child = fork(move || {
        let mut w = w;
        let mut ready_w = ready_w;
        let mut buf = [0u8; 5000];
        fill(&mut buf, 0);
        w.write_all(&buf).unwrap();
        ready_w.write_all(b"!").unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let mut one = [0u8; 1];
    ready_r.read_exact(&mut one).unwrap();
    let mut got = vec![0u8; 5000];
    r.read_exact(&mut got).unwrap();
    check(&got, 0);
    // The reader now sleeps on an empty ring; kill the writer under it.
    let killer = std::thread::spawn({
        let pid = child.pid();
        move || {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    assert_eq!(
        r.read(&mut got).unwrap(),
        0,
        "expected EOF after the writer died"
    );
    killer.join().unwrap();
    assert_eq!(child.wait(LIMIT), 128 + libc::SIGKILL);
}

/// A reader SIGKILLed while the writer sleeps on a full ring: the write
/// fails with BrokenPipe instead of sleeping forever.
#[test]
fn sigkill_reader_while_writer_blocked() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (r, mut w) = shmpipe::Options::new().capacity(4096).pipe().unwrap();
    let child = fork(move || {
        let _keep = r;
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let killer = std::thread::spawn({
        let pid = child.pid();
        move || {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let buf = [7u8; 1024];
    let err = loop {
        if let Err(e) = w.write(&buf) {
            break e;
        }
    };
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    killer.join().unwrap();
    assert_eq!(child.wait(LIMIT), 128 + libc::SIGKILL);
}

/// Non-blocking mode: WouldBlock on empty and on full, EOF and BrokenPipe
/// once the peer is gone.
#[test]
fn nonblocking_paths() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    r.set_nonblocking(true);
    w.set_nonblocking(true);
    let mut buf = [0u8; 128];
    assert_eq!(r.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(w.write(&[1u8; 100]).unwrap(), 64);
    assert_eq!(
        w.write(&[1u8; 1]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(r.read(&mut buf).unwrap(), 64);
    drop(w);
    assert_eq!(r.read(&mut buf).unwrap(), 0);

    let (r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    w.set_nonblocking(true);
    w.write_all(&[0u8; 64]).unwrap();
    drop(r);
    assert_eq!(
        w.write(&[0u8; 1]).unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

/// Timeouts: TimedOut on empty and on full, with the peer alive in
/// another process; zero is rejected as in std.
#[test]
fn timeouts_across_processes() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    let (r2, mut w2) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    let (mut done_r, done_w) = shmpipe::pipe().unwrap();
    let child = fork(move || {
        // Holds w and r2 open, doing nothing, until told to stop.
        let (_w, _r2, _dw) = (w, r2, done_w);
        let mut b = [0u8; 1];
        let _ = done_r.read(&mut b);
        0
    });
    r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    assert_eq!(
        r.read(&mut [0u8; 8]).unwrap_err().kind(),
        ErrorKind::TimedOut
    );
    w2.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    w2.write_all(&[0u8; 64]).unwrap();
    assert_eq!(w2.write(&[0u8; 1]).unwrap_err().kind(), ErrorKind::TimedOut);
    assert_eq!(
        r.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    drop(child);
}

/// A reader handed to a spawned program by descriptor inheritance; the
/// child checks 10^7 bytes and EOF.
#[test]
fn spawned_child_inherits_reader() {
    let _s = serial();
    const TOTAL: u64 = 10_000_000;
    if role().as_deref() == Some("reader") {
        let mut r = shmpipe::Reader::from_env("data").unwrap();
        let mut buf = vec![0u8; 50_000];
        let mut pos = 0;
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            check(&buf[..n], pos);
            pos += n as u64;
        }
        assert_eq!(pos, TOTAL);
        return;
    }
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let child = spawn_role("spawned_child_inherits_reader", "reader", |cmd| {
        r.pass_to(cmd, "data").unwrap()
    });
    drop(r);
    let mut buf = vec![0u8; 33_333];
    let mut pos = 0u64;
    while pos < TOTAL {
        let n = buf.len().min((TOTAL - pos) as usize);
        fill(&mut buf[..n], pos);
        w.write_all(&buf[..n]).unwrap();
        pos += n as u64;
    }
    drop(w);
    child.join();
}

/// A writer handed to a spawned program; the parent reads to EOF.
#[test]
fn spawned_child_inherits_writer() {
    let _s = serial();
    if role().as_deref() == Some("writer") {
        let mut w = shmpipe::Writer::from_env("out").unwrap();
        assert_eq!(
            shmpipe::Writer::from_env("out").unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            shmpipe::Reader::from_env("nope").unwrap_err().kind(),
            ErrorKind::NotFound
        );
        w.write_all(b"written by a spawned program").unwrap();
        return;
    }
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let child = spawn_role("spawned_child_inherits_writer", "writer", |cmd| {
        w.pass_to(cmd, "out").unwrap()
    });
    drop(w);
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert!(s.ends_with("written by a spawned program"), "got {s:?}");
    child.join();
}

/// An end sent over a Unix socket to another process.
#[test]
fn end_sent_over_unix_socket() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut w = shmpipe::Writer::recv_from(&b).unwrap();
        w.write_all(b"over SCM_RIGHTS").unwrap();
        0
    });
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    w.send_over(&a).unwrap();
    drop(w);
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "over SCM_RIGHTS");
    child.join();
}

/// Zero-copy both ways: reserve/commit on the writer, read_chunk on the
/// reader, including a range that wraps around the end of the ring.
#[test]
fn zero_copy_reserve_and_read_chunk_wrap() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    w.write_all(&[0u8; 40]).unwrap();
    let mut sink = [0u8; 40];
    r.read_exact(&mut sink).unwrap();
    // The next 48 bytes wrap: 24 at the end of the ring, 24 at its start.
    let mut data = [0u8; 48];
    fill(&mut data, 1000);
    let mut g = w.reserve(48).unwrap();
    let (a, b) = g.as_mut_slices();
    assert_eq!((a.len(), b.len()), (24, 24));
    a.copy_from_slice(&data[..24]);
    b.copy_from_slice(&data[24..]);
    g.commit_unpublished(48);
    w.flush().unwrap();
    let chunk = r.read_chunk().unwrap();
    assert_eq!(chunk.len(), 48);
    assert_eq!(chunk.bytes().to_vec(), data);
    assert_eq!(chunk.bytes().iter().collect::<Vec<_>>(), data);
    assert_eq!(chunk.bytes().get(47), Some(data[47]));
    assert_eq!(chunk.bytes().get(48), None);
    chunk.consume(48);
    assert_eq!(w.reserve(65).unwrap_err().kind(), ErrorKind::InvalidInput);
    drop(w);
    assert!(
        r.read_chunk().unwrap().is_empty(),
        "EOF shows as an empty chunk"
    );
}

/// An end received over a socket is checked like a stranger's: regions
/// that are too short, unsealed, or not memfds at all, and a wake
/// descriptor that is not a pipe, give InvalidData, never a SIGBUS.
#[test]
fn received_end_with_bad_descriptors_is_invalid_data() {
    let _s = serial();
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::os::fd::{AsFd, OwnedFd};
    let memfd = |len: u64, seal: bool| -> OwnedFd {
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, len).unwrap();
        if seal {
            rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
        }
        fd
    };
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (p_in, p_out) = rustix::pipe::pipe().unwrap();
    let devnull = std::fs::File::open("/dev/null").unwrap();
    let cases: Vec<(&str, [OwnedFd; 4])> = vec![
        (
            "short own region",
            [
                memfd(10, true),
                memfd(8192, true),
                p_in.try_clone().unwrap(),
                p_out.try_clone().unwrap(),
            ],
        ),
        (
            "unsealed own region",
            [
                memfd(8192, false),
                memfd(8192, true),
                p_in.try_clone().unwrap(),
                p_out.try_clone().unwrap(),
            ],
        ),
        (
            "zeroed regions",
            [
                memfd(8192, true),
                memfd(8192, true),
                p_in.try_clone().unwrap(),
                p_out.try_clone().unwrap(),
            ],
        ),
        (
            "not a memfd",
            [
                devnull.try_clone().unwrap().into(),
                memfd(8192, true),
                p_in.try_clone().unwrap(),
                p_out.try_clone().unwrap(),
            ],
        ),
        (
            "not a pipe",
            [
                memfd(8192, true),
                memfd(8192, true),
                devnull.try_clone().unwrap().into(),
                p_out.try_clone().unwrap(),
            ],
        ),
    ];
    for (what, fds) in cases {
        let tag = [b'w'];
        let borrowed = fds.each_ref().map(|fd| fd.as_fd());
        send_with_fds(&a, &tag, &borrowed);
        let err = shmpipe::Writer::recv_from(&b).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData, "{what}: {err}");
    }
    // The wrong kind of end.
    let (mut r, _w) = shmpipe::pipe().unwrap();
    r.send_over(&a).unwrap();
    assert_eq!(
        shmpipe::Writer::recv_from(&b).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
}

fn send_with_fds(
    sock: &std::os::unix::net::UnixStream,
    bytes: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    rustix::net::sendmsg(
        sock,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
}

/// read_exact and write_all when the data comes in pieces, with and
/// without spinning, and on rings smaller than the buffers: every byte
/// arrives in order, nothing waits for room that cannot appear. (A
/// read_exact that waited for its whole buffer once returned with half of
/// it, and a write_all larger than an 8-byte ring once never returned.)
#[test]
fn split_items_and_tiny_rings() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let (mut r, mut w) = shmpipe::Options::new().spin(spin).pipe().unwrap();
        r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let writer = std::thread::spawn(move || {
            w.write_all(&[1, 2, 3, 4]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(&[5, 6, 7, 8]).unwrap();
        });
        let mut buf = [0u8; 8];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8], "spin {spin:?}");
        writer.join().unwrap();
    }

    // Buffers larger than the ring, both ways.
    for cap in [8usize, 16, 64] {
        let (mut r, mut w) = shmpipe::Options::new().capacity(cap).pipe().unwrap();
        let sizes = [1usize, 7, 16, 100, 3, 64, 9];
        let writer = std::thread::spawn(move || {
            let mut next = 0u8;
            for &n in sizes.iter().cycle().take(7 * 28) {
                let chunk: Vec<u8> = (0..n)
                    .map(|_| {
                        next = next.wrapping_add(1);
                        next
                    })
                    .collect();
                w.write_all(&chunk).unwrap();
            }
        });
        let mut want = 0u8;
        for &n in sizes.iter().rev().cycle().take(7 * 28) {
            let mut buf = vec![0u8; n];
            r.read_exact(&mut buf).unwrap();
            for b in buf {
                want = want.wrapping_add(1);
                assert_eq!(b, want, "capacity {cap}");
            }
        }
        writer.join().unwrap();
    }

    // A reader in the middle of a read_exact must let go of what it has,
    // or a writer reserving the whole ring would wait for it forever.
    let (mut r, mut w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&[9; 4]).unwrap();
        let mut grant = w.reserve(64).unwrap();
        let (a, b) = grant.as_mut_slices();
        a.fill(10);
        b.fill(10);
        grant.commit(64);
    });
    let mut head = [0u8; 8];
    r.read_exact(&mut head).unwrap();
    assert_eq!(head, [9, 9, 9, 9, 10, 10, 10, 10]);
    let mut rest = [0u8; 60];
    r.read_exact(&mut rest).unwrap();
    assert!(rest.iter().all(|&b| b == 10));
    writer.join().unwrap();
}

// ---------------------------------------------------------------------------
// Issue #8: untrusted edges (timeouts, signals, inherited descriptors).

/// Item 2: `Duration::MAX` is a valid timeout, as for std's sockets, and
/// means none (it used to overflow `Instant + Duration` and panic at the
/// first wait).
#[test]
fn duration_max_timeout_means_no_timeout() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::Options::new()
        .capacity(64)
        .spin(Duration::ZERO)
        .pipe()
        .unwrap();
    r.set_read_timeout(Some(Duration::MAX)).unwrap();
    w.set_write_timeout(Some(Duration::MAX)).unwrap();
    assert_eq!(r.read_timeout(), Some(Duration::MAX));
    // 1000 bytes through a 64-byte ring: both sides wait, with that timeout.
    let writer = std::thread::spawn(move || {
        let mut buf = [0u8; 1000];
        fill(&mut buf, 0);
        w.write_all(&buf).unwrap();
    });
    let mut buf = [0u8; 1000];
    r.read_exact(&mut buf).unwrap();
    check(&buf, 0);
    writer.join().unwrap();
}

/// Item 3: a timeout still expires while signals keep interrupting the
/// sleep; each retry after EINTR waits only for what is left (it used to
/// wait the whole timeout again, so a 200 ms timeout never expired under
/// a 2 ms timer).
#[test]
fn timeout_expires_while_signals_keep_arriving() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (r, w) = shmpipe::Options::new().capacity(64).pipe().unwrap();
    let child = fork(move || {
        let (mut r, mut w) = (r, w);
        common::signals_every_2ms();
        r.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let e = r.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        w.write_all(&[0u8; 64]).unwrap();
        w.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let e = w.write(&[0u8; 1]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        0
    });
    // Generous, and only reached if the timeouts never expire.
    assert_eq!(child.wait(Duration::from_secs(30)), 0);
}

const O_CLOEXEC: u32 = 0o2_000_000;

/// An end rebuilt from good regions but wrong wake descriptors is refused
/// (`InvalidData`): a read end open for writing too (it would never read
/// EOF: the peer's death would go unseen), and a waker that is the end's
/// own wake pipe (it would wake itself and hold its own pipe open).
#[test]
fn rebuilt_end_with_wrong_wake_pipes_is_invalid_data() {
    let _s = serial();
    let (r, _w) = shmpipe::pipe().unwrap();
    let fds = || r.as_fds().map(|fd| fd.try_clone_to_owned().unwrap());
    let [own, peer, wake_in, wake_out] = fds();
    let swapped = shmpipe::Reader::from_fds([own, peer, wake_out, wake_in]).unwrap_err();
    assert_eq!(swapped.kind(), ErrorKind::InvalidData, "{swapped}");
    let [own, peer, wake_in, _] = fds();
    let again = wake_in.try_clone().unwrap();
    let own_pipe = shmpipe::Reader::from_fds([own, peer, wake_in, again]).unwrap_err();
    assert_eq!(own_pipe.kind(), ErrorKind::InvalidData, "{own_pipe}");
    // The good ones still make a working end.
    let mut again = shmpipe::Reader::from_fds(fds()).unwrap();
    again.set_nonblocking(true);
    assert_eq!(
        again.read(&mut [0u8; 1]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

/// Item 5: an end taken with `from_env` is close-on-exec again, and its
/// variable is gone, so programs the taker starts do not inherit it (a
/// helper left running would otherwise keep the pipe open: no EOF).
#[test]
fn from_env_restores_close_on_exec_and_removes_the_variable() {
    let _s = serial();
    if role().as_deref() == Some("cloexec") {
        let inheritable = || -> std::collections::BTreeSet<i32> {
            common::open_fds()
                .into_iter()
                .filter(|&fd| common::fd_flags(fd).is_some_and(|f| f & O_CLOEXEC == 0))
                .collect()
        };
        let before = inheritable();
        let mut w = shmpipe::Writer::from_env("out").unwrap();
        assert!(
            std::env::var_os("SHMPIPE_END_out").is_none(),
            "the variable is removed"
        );
        // The end's four descriptors (and only they) are close-on-exec
        // now; whatever else this process inherited is not ours to change.
        let after = inheritable();
        assert!(after.is_subset(&before), "{before:?} -> {after:?}");
        assert_eq!(before.len() - after.len(), 4, "{before:?} -> {after:?}");
        // A helper that outlives us must not hold the pipe open (the
        // parent kills it; it is not ours to wait for).
        #[allow(clippy::zombie_processes)]
        let helper = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        w.write_all(&helper.id().to_le_bytes()).unwrap();
        return;
    }
    let _w = watchdog(LIMIT);
    let (mut r, mut w) = shmpipe::pipe().unwrap();
    let child = spawn_role(
        "from_env_restores_close_on_exec_and_removes_the_variable",
        "cloexec",
        |cmd| w.pass_to(cmd, "out").unwrap(),
    );
    drop(w);
    r.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let res = r.read_to_end(&mut got);
    if got.len() >= 4 {
        let pid = u32::from_le_bytes(got[..4].try_into().unwrap());
        // SAFETY: plain kill of the helper our child started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    res.expect("EOF once the child exits, whatever it started");
    assert_eq!(got.len(), 4);
    child.join();
}

/// Item 5: `from_env` takes only descriptors it was handed. A value that
/// names one descriptor thrice, or numbers that belong to files this
/// process opened itself, is `InvalidData`, and nothing is closed (it used
/// to take them: two owners of one descriptor, I/O-safety UB).
#[test]
fn from_env_refuses_descriptors_it_was_not_handed() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let child = fork(|| {
        use std::os::fd::AsRawFd;
        let files: Vec<std::fs::File> = (0..3)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let (r, _w) = shmpipe::pipe().unwrap();
        let [a, b, c] = [0, 1, 2].map(|k| files[k].as_raw_fd());
        let values = [
            format!("w:{a},{a},{a}"),
            format!("w:{a},{b},{c}"),
            "w:-1,0,1".to_string(),
            format!("w:{a},{b}"),
        ];
        for value in values {
            std::env::set_var("SHMPIPE_END_x", &value);
            let err = shmpipe::Writer::from_env("x").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidData, "{value}: {err}");
        }
        // Every file is still open and ours.
        for f in &files {
            assert!(common::fd_target(f.as_raw_fd()).ends_with("/dev/null"));
        }
        drop(files);
        drop(r);
        0
    });
    child.join();
}
