//! Hostile peers over the real `Listener`: a hand-made client (a forked
//! child, see `common::raw`) that speaks the handshake itself, keeps write
//! access to every region it hands over, and then lies in every shared
//! word the victim reads. The victim (this process's `Reader`, `Writer`,
//! `Receiver`, `Sender`, or `connect` for a hostile server) may only return
//! data, EOF or an error (`InvalidData` for a protocol violation); it never
//! panics, crashes or hangs (the watchdog turns a hang into a failure).
//!
//! `hostile_peer_rounds` is the property-based "fuzzing on stable": each
//! round draws a random script of honest and garbage writes from a seed.
//! `SHMPIPE_HOSTILE_ROUNDS` sets the number of rounds (default 3000),
//! `SHMPIPE_HOSTILE_SEED` the first seed, `SHMPIPE_HOSTILE_VERBOSE=1`
//! prints each round.

mod common;

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::{self, Peer, Region, View};
use common::{env_count, fork, listener, serial, sock_path, watchdog, Rng};
use rustix::fs::SealFlags;
use shmpipe::handshake;
use shmpipe_ring::layout::{offset, DATA_OFFSET, READER_REGION_LEN, VERSION};

const LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// The victim: whatever it calls, only these outcomes are allowed.

/// What a victim end saw in one round.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    ops: u64,
    bytes: u64,
    invalid: u64,
    timeouts: u64,
    end: bool,
}

/// How many operations a victim end tries per round.
const MAX_OPS: u64 = 300;
/// Consecutive `InvalidData` results before a victim end gives up.
const MAX_INVALID_IN_ROW: u32 = 4;

/// Classifies one result; `Err` means the outcome is not allowed.
fn judge(
    seen: &mut Seen,
    row: &mut u32,
    res: io::Result<usize>,
    end_kinds: &[ErrorKind],
    also_ok: &[ErrorKind],
) -> Result<bool, String> {
    seen.ops += 1;
    match res {
        Ok(n) => {
            *row = 0;
            seen.bytes += n as u64;
            Ok(true)
        }
        Err(e) if end_kinds.contains(&e.kind()) => {
            seen.end = true;
            Ok(false)
        }
        Err(e) if e.kind() == ErrorKind::InvalidData => {
            seen.invalid += 1;
            *row += 1;
            Ok(*row < MAX_INVALID_IN_ROW)
        }
        Err(e) if e.kind() == ErrorKind::TimedOut => {
            seen.timeouts += 1;
            Ok(false)
        }
        Err(e) if also_ok.contains(&e.kind()) => Ok(true),
        Err(e) => Err(format!("unexpected error {:?}: {e}", e.kind())),
    }
}

/// Plays one victim end: `op` tries one operation with the round's random
/// numbers (`Err` for an outcome that is never allowed) and [`judge`]
/// classifies its result, until `MAX_OPS`, the end, or too many
/// `InvalidData` in a row.
fn play_victim(
    seed: u64,
    end_kinds: &[ErrorKind],
    also_ok: &[ErrorKind],
    mut op: impl FnMut(&mut Rng) -> Result<io::Result<usize>, String>,
) -> Result<Seen, String> {
    let mut rng = Rng::new(seed);
    let (mut seen, mut row) = (Seen::default(), 0);
    while seen.ops < MAX_OPS {
        let res = op(&mut rng)?;
        if !judge(&mut seen, &mut row, res, end_kinds, also_ok)? {
            break;
        }
    }
    Ok(seen)
}

fn victim_reader(mut r: shmpipe::Reader, seed: u64) -> Result<Seen, String> {
    let cap = r.capacity();
    let mut buf = vec![0u8; 2 * cap + 1];
    play_victim(seed, &[ErrorKind::UnexpectedEof], &[], |rng| {
        Ok(if rng.upto(1) == 0 {
            let want = rng.upto(buf.len() - 1) + 1;
            match r.read(&mut buf[..want]) {
                Ok(0) => Err(io::Error::from(ErrorKind::UnexpectedEof)),
                Ok(n) if n > want || n > cap => return Err(format!("read {n} > {want}/{cap}")),
                other => other,
            }
        } else {
            match r.read_chunk() {
                Ok(c) if c.is_empty() => Err(io::Error::from(ErrorKind::UnexpectedEof)),
                Ok(c) => {
                    let n = c.len();
                    if n > cap {
                        return Err(format!("chunk of {n} > capacity {cap}"));
                    }
                    let bytes = c.bytes();
                    let v = bytes.to_vec();
                    let x = bytes.iter().fold(0u8, |a, b| a ^ b);
                    if v.len() != n || bytes.get(n - 1).is_none() || bytes.get(n).is_some() {
                        return Err("RingSlice length disagrees".into());
                    }
                    std::hint::black_box(x);
                    c.consume(rng.upto(n));
                    Ok(n)
                }
                Err(e) => Err(e),
            }
        })
    })
}

fn victim_receiver(mut rx: shmpipe::Receiver, seed: u64) -> Result<Seen, String> {
    let cap = rx.capacity();
    let max = cap - 8;
    let mut buf = vec![0u8; cap];
    let mut v = Vec::new();
    // InvalidInput: our buffer was too small for a (well-formed) message.
    let also_ok = [ErrorKind::InvalidInput];
    play_victim(seed, &[ErrorKind::UnexpectedEof], &also_ok, |rng| {
        let res = match rng.upto(2) {
            0 => rx.recv_vec(&mut v).map(|()| v.len()),
            1 => {
                let want = rng.upto(cap);
                rx.recv(&mut buf[..want])
            }
            _ => rx.recv_in_place().map(|m| {
                let n = m.len();
                let b = m.bytes();
                assert_eq!(b.to_vec().len(), n);
                assert_eq!(b.iter().count(), n);
                n
            }),
        };
        if let Ok(n) = res {
            if n > max {
                return Err(format!("message of {n} bytes > maximum {max}"));
            }
        }
        Ok(res)
    })
}

fn victim_writer(mut w: shmpipe::Writer, seed: u64) -> Result<Seen, String> {
    let cap = w.capacity();
    let buf = vec![0x5Au8; 2 * cap + 1];
    play_victim(seed, &[ErrorKind::BrokenPipe], &[], |rng| {
        Ok(match rng.upto(2) {
            0 => {
                let want = rng.upto(buf.len() - 1) + 1;
                match w.write(&buf[..want]) {
                    Ok(n) if n == 0 || n > want => return Err(format!("wrote {n} of {want}")),
                    other => other,
                }
            }
            1 => {
                let want = rng.upto(cap);
                w.reserve(want).map(|mut g| {
                    let (a, b) = g.as_mut_slices();
                    assert_eq!(a.len() + b.len(), want);
                    a.fill(1);
                    b.fill(2);
                    g.commit(want);
                    want
                })
            }
            _ => w.flush().map(|()| 0),
        })
    })
}

fn victim_sender(mut tx: shmpipe::Sender, seed: u64) -> Result<Seen, String> {
    let max = tx.max_message();
    let buf = vec![0xA5u8; max];
    play_victim(seed, &[ErrorKind::BrokenPipe], &[], |rng| {
        let len = if rng.upto(3) == 0 {
            rng.upto(max)
        } else {
            rng.upto(64.min(max))
        };
        Ok(match rng.upto(2) {
            0 => tx.send(&buf[..len]).map(|()| len),
            1 => tx.feed(&buf[..len]).map(|()| {
                tx.flush();
                len
            }),
            _ => tx.reserve(len).map(|mut g| {
                g.copy_from_slice(&buf[..len]);
                g.commit();
                len
            }),
        })
    })
}

/// Runs both victim ends of a connection at once (writer on a thread).
fn victim(conn: shmpipe::Connection, messages: bool, seed: u64) -> Result<(Seen, Seen), String> {
    let timeout = Some(Duration::from_secs(10));
    if messages {
        let (mut rx, mut tx) = conn.into_messages();
        rx.set_read_timeout(timeout).unwrap();
        tx.set_write_timeout(timeout).unwrap();
        let t = std::thread::spawn(move || victim_sender(tx, seed ^ 0x55));
        let r = victim_receiver(rx, seed);
        let w = t.join().map_err(|_| "victim sender panicked".to_string())?;
        Ok((r?, w?))
    } else {
        let (mut r, mut w) = conn.split();
        r.set_read_timeout(timeout).unwrap();
        w.set_write_timeout(timeout).unwrap();
        let t = std::thread::spawn(move || victim_writer(w, seed ^ 0x55));
        let rs = victim_reader(r, seed);
        let ws = t.join().map_err(|_| "victim writer panicked".to_string())?;
        Ok((rs?, ws?))
    }
}

// ---------------------------------------------------------------------------
// The hostile client's script.

/// Bytes a message of `len` bytes takes in the ring.
fn frame_len(len: u64) -> u64 {
    8 + len.div_ceil(8) * 8
}

fn frame_header(len: u32, check: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..].copy_from_slice(&check.to_le_bytes());
    h
}

/// A garbage value near `base` or anywhere.
fn lie(rng: &mut Rng, base: u64, cap: u64) -> u64 {
    match rng.upto(7) {
        0 => base.wrapping_sub(1 + rng.upto(cap as usize) as u64), // backwards
        1 => base.wrapping_add(cap + 1 + rng.upto(1000) as u64),   // past a ring ahead
        2 => rng.next(),
        3 => u64::MAX,
        4 => base.wrapping_add(1 + rng.upto(7) as u64), // a partial frame
        5 => base ^ (1 << rng.upto(63)),
        6 => 0,
        _ => base.wrapping_add(cap), // exactly full
    }
}

/// The hostile client: connects honestly, then runs a random script of
/// honest and lying steps, then exits (which hangs up both pipes).
fn hostile_script(path: &Path, cap: u64, messages: bool, seed: u64) -> i32 {
    let peer = match Peer::connect(path, cap) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hostile: handshake failed: {e}");
            return 2;
        }
    };
    let mut peer = peer;
    let mut rng = Rng::new(seed);
    // The victim's head of the pipe we write, and its tail and data of the
    // pipe it writes: read-only views of what it sent us.
    let their_head = View::new(peer.server_r.as_fd()).expect("map server reader region");
    let their_w = View::new(peer.server_w.as_fd()).expect("map server writer region");
    let mut tail = 0u64;
    let stop = Arc::new(AtomicBool::new(false));
    let mut racer = None;
    let steps = 10 + rng.upto(70);
    for _ in 0..steps {
        match rng.upto(13) {
            // Honest data (stream bytes or well-formed frames).
            0..=2 => {
                let head = their_head.index();
                if tail.wrapping_sub(head) > cap {
                    tail = head; // we lied before; resynchronise
                }
                let free = cap - tail.wrapping_sub(head);
                if messages {
                    let len = rng.upto(free.saturating_sub(8) as usize) as u64;
                    if frame_len(len) <= free {
                        peer.w
                            .ring_write(cap, tail, &frame_header(len as u32, !(len as u32)));
                        let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                        peer.w.ring_write(cap, tail.wrapping_add(8), &payload);
                        tail = tail.wrapping_add(frame_len(len));
                    }
                } else {
                    let n = rng.upto(free as usize) as u64;
                    let payload: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                    peer.w.ring_write(cap, tail, &payload);
                    tail = tail.wrapping_add(n);
                }
                peer.w.set_index(tail);
                if rng.upto(1) == 0 {
                    peer.wake_reader(1);
                }
            }
            // A lying tail, maybe corrected after a moment.
            3 => {
                let v = lie(&mut rng, their_head.index(), cap);
                peer.w.set_index(v);
                peer.wake_reader(1);
                if rng.upto(1) == 0 {
                    std::thread::yield_now();
                    peer.w.set_index(tail);
                }
            }
            // A lying message header, published.
            4 => {
                let (len, check) = match rng.upto(3) {
                    0 => {
                        let l = (cap as u32)
                            .wrapping_sub(8)
                            .wrapping_add(1 + rng.next() as u32 % 64);
                        (l, !l)
                    }
                    1 => {
                        let l = rng.next() as u32 % cap as u32;
                        (l, !l ^ 1)
                    }
                    2 => (rng.next() as u32, rng.next() as u32),
                    _ => {
                        // Well-formed, but longer than what is published.
                        let l = (cap as u32).saturating_sub(8);
                        (l, !l)
                    }
                };
                peer.w.ring_write(cap, tail, &frame_header(len, check));
                tail = tail.wrapping_add(8);
                peer.w.set_index(tail);
                peer.wake_reader(1);
            }
            // Garbage over the data, published or not.
            5 => {
                let pos = rng.next();
                let n = rng.upto(cap as usize);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                peer.w.ring_write(cap, pos, &junk);
            }
            // Garbage in the header fields (checked only at attach).
            6 => {
                let region = if rng.upto(1) == 0 { &peer.w } else { &peer.r };
                match rng.upto(3) {
                    0 => region.store_u64(offset::MAGIC, rng.next()),
                    1 => region.store_u32(offset::VERSION, rng.next() as u32),
                    2 => region.store_u32(offset::ROLE, rng.next() as u32),
                    _ => region.store_u64(offset::CAPACITY, rng.next() >> rng.upto(63)),
                }
            }
            // Garbage in our parked words: the victim decides whether to
            // wake us from them.
            7 => {
                let v = if rng.upto(1) == 0 {
                    rng.next()
                } else {
                    rng.upto(3) as u64
                };
                peer.w.store_u64(offset::PARKED, v);
                peer.r.store_u64(offset::PARKED, rng.next());
            }
            // Honest consumption of what the victim wrote.
            8 => {
                let t = their_w.index();
                if rng.upto(3) != 0 {
                    // Read some of it, as a reader would (copy, then publish).
                    let mut x = 0u8;
                    let h = peer.r.index();
                    for k in 0..t.wrapping_sub(h).min(64) {
                        x ^=
                            their_w.load_u8(DATA_OFFSET + (h.wrapping_add(k) & (cap - 1)) as usize);
                    }
                    std::hint::black_box(x);
                }
                peer.r.set_index(t);
                peer.wake_writer(1);
            }
            // A lying head.
            9 => {
                let v = lie(&mut rng, their_w.index(), cap);
                peer.r.set_index(v);
                peer.wake_writer(1);
                if rng.upto(1) == 0 {
                    std::thread::yield_now();
                    peer.r.set_index(their_w.index());
                }
            }
            // Wake spam on both sockets.
            10 => {
                let n = rng.upto(8192);
                peer.wake_reader(n);
                peer.wake_writer(n);
            }
            // Let the victim run, spin out and park.
            11 => {
                std::thread::sleep(Duration::from_micros(rng.upto(2000) as u64));
            }
            // A second thread that scribbles while the victim reads; or
            // hang up one pipe early.
            _ => {
                if racer.is_none() && rng.upto(1) == 0 {
                    let stop = stop.clone();
                    let seed = rng.next();
                    let fd_w = peer.w.fd.try_clone().unwrap();
                    let fd_r = peer.r.fd.try_clone().unwrap();
                    racer = Some(std::thread::spawn(move || {
                        scribble(fd_w, fd_r, cap, seed, &stop);
                    }));
                } else if rng.upto(3) == 0 {
                    peer.w_sock = None;
                } else if rng.upto(3) == 0 {
                    peer.r_sock = None;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = racer {
        t.join().unwrap();
    }
    0
}

/// The racer: maps our regions a second time and writes garbage into the
/// data, the tail and the head until told to stop.
fn scribble(fd_w: OwnedFd, fd_r: OwnedFd, cap: u64, seed: u64, stop: &AtomicBool) {
    let w = Region::alias(fd_w);
    let r = Region::alias(fd_r);
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        match rng.upto(4) {
            0 | 1 => {
                let pos = rng.next();
                w.ring_write(cap, pos, &rng.next().to_le_bytes());
            }
            2 => w.set_index(lie(&mut rng, w.index(), cap)),
            3 => r.set_index(lie(&mut rng, r.index(), cap)),
            _ => w.store_u64(offset::PARKED, rng.next()),
        }
        if rng.upto(15) == 0 {
            std::thread::yield_now();
        }
    }
}

/// Randomised hostile rounds: each round a fresh connection over one
/// listener, a random capacity, mode and script. Every victim call must
/// end in data, EOF/BrokenPipe, `InvalidData` (or `TimedOut`), and the
/// victim must neither panic nor hang.
#[test]
fn hostile_peer_rounds() {
    let _s = serial();
    let rounds = env_count("SHMPIPE_HOSTILE_ROUNDS", 3000);
    let first = env_count("SHMPIPE_HOSTILE_SEED", 0x5EED_0001);
    let verbose = env_count("SHMPIPE_HOSTILE_VERBOSE", 0) != 0;
    let _w = watchdog(LIMIT + Duration::from_millis(500) * rounds as u32);
    let path = sock_path("hostile-rounds");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let start = Instant::now();
    let (mut invalid, mut bytes, mut timeouts) = (0u64, 0u64, 0u64);
    for round in 0..rounds {
        let seed = first.wrapping_add(round);
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let cap = [64u64, 256, 4096, 65536][rng.upto(3)];
        let messages = rng.upto(1) == 1;
        let spin = if rng.upto(1) == 0 {
            Duration::ZERO
        } else {
            shmpipe::DEFAULT_SPIN
        };
        let mut opts = shmpipe::Options::new();
        opts.capacity(cap as usize).spin(spin);
        listener.set_options(opts);
        if verbose {
            eprintln!("round {round} seed {seed:#x}: capacity {cap}, messages {messages}");
        }
        let script_seed = rng.next();
        let child = fork({
            let path = path.clone();
            move || hostile_script(&path, cap, messages, script_seed)
        });
        let conn = listener.accept().unwrap();
        let (r, w) = match victim(conn, messages, rng.next()) {
            Ok(x) => x,
            Err(e) => panic!("round {round} (SHMPIPE_HOSTILE_SEED={seed}): {e}"),
        };
        assert_eq!(
            child.wait(LIMIT),
            0,
            "round {round} (seed {seed}): the hostile script itself failed"
        );
        invalid += r.invalid + w.invalid;
        timeouts += r.timeouts + w.timeouts;
        bytes += r.bytes + w.bytes;
    }
    eprintln!(
        "hostile_peer_rounds: {rounds} rounds in {:.1?}: {bytes} bytes moved, {invalid} InvalidData, {timeouts} timeouts, 0 panics",
        start.elapsed()
    );
    assert!(invalid > 0, "the hostile scripts never tripped a check");
}

// ---------------------------------------------------------------------------
// Deterministic attacks.

/// Header words changed after attach are never read again: data still
/// flows exactly, both ways, and each side ends cleanly.
#[test]
fn header_changes_after_attach_are_ignored() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    const N: u64 = 100_000;
    let (path, listener) = listener("hostile-header", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let peer = Peer::connect(&path, CAP).unwrap();
            for region in [&peer.w, &peer.r] {
                region.store_u64(offset::MAGIC, 0xDEAD_BEEF);
                region.store_u32(offset::VERSION, VERSION + 1);
                region.store_u32(offset::ROLE, 7);
                region.store_u64(offset::CAPACITY, 3);
            }
            // Send N pattern bytes honestly, and read what the victim
            // sends, checking it against the pattern.
            let their_head = View::new(peer.server_r.as_fd()).unwrap();
            let their_w = View::new(peer.server_w.as_fd()).unwrap();
            let (mut tail, mut head) = (0u64, 0u64);
            while tail < N || head < N {
                let free = CAP - tail.wrapping_sub(their_head.index());
                let n = free.min(N - tail);
                let bytes: Vec<u8> = (tail..tail + n).map(common::pattern).collect();
                peer.w.ring_write(CAP, tail, &bytes);
                tail += n;
                peer.w.set_index(tail);
                peer.wake_reader(1);
                let t = their_w.index();
                for pos in head..t {
                    let b = their_w.load_u8(DATA_OFFSET + (pos & (CAP - 1)) as usize);
                    assert_eq!(b, common::pattern(pos), "victim's byte {pos}");
                }
                head = t;
                peer.r.set_index(head);
                peer.wake_writer(1);
                std::thread::yield_now();
            }
            0
        }
    });
    let (mut r, mut w) = listener.accept().unwrap().split();
    let writer = std::thread::spawn(move || {
        let mut buf = vec![0u8; N as usize];
        common::fill(&mut buf, 0);
        w.write_all(&buf)
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got.len() as u64, N);
    common::check(&got, 0);
    writer.join().unwrap().unwrap();
    child.join();
}

/// A peer that floods the wake socket (many bytes per system call, for
/// ever) cannot keep a read or write with a timeout from timing out.
#[test]
fn wake_flood_cannot_defeat_a_timeout() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    let (path, listener) = listener("hostile-flood", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let peer = Arc::new(Peer::connect(&path, CAP).unwrap());
            let flood = move || {
                let junk = vec![1u8; 64 * 1024];
                loop {
                    for s in [&peer.w_sock, &peer.r_sock].into_iter().flatten() {
                        let flags =
                            rustix::net::SendFlags::NOSIGNAL | rustix::net::SendFlags::DONTWAIT;
                        let _ = rustix::net::send(s, &junk, flags);
                    }
                }
            };
            // Several flooding threads, so the socket never runs dry.
            for _ in 0..3 {
                std::thread::spawn(flood.clone());
            }
            flood()
        }
    });
    let (mut r, mut w) = listener.accept().unwrap().split();
    r.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    w.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let err = r.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    w.write_all(&[0u8; CAP as usize]).unwrap();
    let err = w.write(&[0u8; 1]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    drop(child);
}

/// A peer can hand the server its own descriptors back, which would loop
/// the connection into the server and hide the peer's death from it (the
/// server would hold both ends of the liveness socket). The descriptors of
/// an earlier connection are the ones a client can have: the handshake
/// sees that the socket is the server's own and refuses such a peer.
#[test]
fn reflected_descriptors_are_refused() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("hostile-reflect", 4096);
    let child = fork({
        let path = path.clone();
        move || {
            let first = Peer::connect(&path, 4096).unwrap();
            let (stream, _) = raw::dial(&path).unwrap();
            let fds = [
                first.server_w.as_fd(),
                first.server_r.as_fd(),
                first.r_sock.as_ref().unwrap().as_fd(),
            ];
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', 4096), &fds).unwrap();
            assert!(raw::closed_by_peer(&stream));
            0
        }
    });
    // The reflecting peer is refused; the listener goes on to serve the
    // next, honest client (forked only once the first is done, so the
    // listener meets them in this order).
    let server = std::thread::spawn(move || {
        let first = listener.accept().unwrap();
        let mut conn = listener.accept().unwrap();
        let mut buf = [0u8; 6];
        conn.reader.read_exact(&mut buf).unwrap();
        drop(first);
        (conn.peer.pid, buf)
    });
    child.join();
    let honest = fork({
        let path = path.clone();
        move || {
            let mut conn = shmpipe::connect(&path).unwrap();
            conn.writer.write_all(b"honest").unwrap();
            0
        }
    });
    let (pid, buf) = server.join().unwrap();
    assert_eq!(pid, honest.pid(), "the reflecting peer must not be served");
    assert_eq!(&buf, b"honest");
    honest.join();
}

/// A peer's region far larger than the ring needs is not mapped whole.
#[test]
fn oversized_peer_region_is_not_mapped_whole() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    const HUGE: usize = 1 << 40;
    let (path, listener) = listener("hostile-huge", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let w = Region::sealed(HUGE);
            w.init(raw::WRITER, CAP);
            let r = Region::sealed(HUGE);
            r.init(raw::READER, CAP);
            let peer = Peer::connect_with(&path, CAP, w, r).unwrap();
            peer.wait_hangup();
            0
        }
    });
    let conn = listener.accept().unwrap();
    let biggest = biggest_hostile_mapping();
    assert!(biggest > 0, "the peer's regions are mapped");
    assert!(
        biggest <= DATA_OFFSET + CAP as usize,
        "a {biggest}-byte mapping of the peer's region"
    );
    drop(conn);
    child.join();
}

/// The peer's hello on `stream`, and the descriptors that came with it.
fn recv_hello(stream: &std::os::unix::net::UnixStream) -> (handshake::Hello, Vec<OwnedFd>) {
    let mut msg = [0u8; handshake::HELLO_LEN];
    let (n, fds) = raw::recv_msg(stream.as_fd(), &mut msg).unwrap();
    (handshake::Hello::decode(&msg[..n]).unwrap(), fds)
}

/// The largest `memfd:hostile` mapping in this process, in bytes.
fn biggest_hostile_mapping() -> usize {
    common::maps()
        .iter()
        .filter(|l| l.contains("memfd:hostile"))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            usize::from_str_radix(b, 16).unwrap() - usize::from_str_radix(a, 16).unwrap()
        })
        .max()
        .unwrap_or(0)
}

/// Issue #8, item 1: a client whose ring is larger than the listener's
/// limit is refused before its ring is mapped, whether it says so in its
/// hello (and is told `STATUS_TOO_LARGE`) or lies there and declares the
/// huge ring only in its region. The listener goes on serving.
#[test]
fn huge_client_ring_is_refused_unmapped() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const HUGE: u64 = 1 << 30;
    let (path, listener) = listener("hostile-huge-ring", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            // Says so: refused with a reason.
            let (stream, verdict) = raw::dial(&path).unwrap();
            assert_eq!(
                verdict.max_capacity,
                shmpipe::DEFAULT_MAX_PEER_CAPACITY as u64
            );
            let (w, r) = (Region::writer(HUGE), Region::reader(HUGE));
            let (_sock, theirs) = raw::socket_pair();
            let fds = [w.fd.as_fd(), r.fd.as_fd(), theirs.as_fd()];
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', HUGE), &fds).unwrap();
            let (answer, fds) = recv_hello(&stream);
            assert_eq!(answer.status, handshake::STATUS_TOO_LARGE);
            assert!(fds.is_empty());
            // Lies in its hello: refused all the same.
            let err = Peer::connect_with(&path, CAP, Region::writer(HUGE), Region::reader(CAP))
                .unwrap_err();
            assert_ne!(err.kind(), ErrorKind::TimedOut, "{err}");
            honest_client(&path, b"next")
        }
    });
    let mut conn = listener.accept().unwrap();
    assert_eq!(conn.peer.pid, child.pid());
    assert!(
        biggest_hostile_mapping() <= READER_REGION_LEN,
        "the huge ring was mapped"
    );
    hear(&mut conn, b"next");
    child.join();
}

/// Issue #8, item 1, the other way: `connect` refuses a server whose ring
/// is larger than the client's limit, whether the server announces it
/// (the client then tells it `STATUS_TOO_LARGE`) or lies about it.
#[test]
fn huge_server_ring_is_refused_unmapped() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const HUGE: u64 = 1 << 30;
    for lie in [false, true] {
        let path = sock_path(&format!("hostile-huge-server-{lie}"));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let announced = if lie { CAP } else { HUGE };
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', announced), &[]).unwrap();
            let (answer, _client_fds) = recv_hello(&stream);
            if !lie {
                return answer.status == handshake::STATUS_TOO_LARGE;
            }
            let (w, r) = (Region::writer(HUGE), Region::reader(CAP));
            let (_sock, theirs) = raw::socket_pair();
            let fds = [w.fd.as_fd(), r.fd.as_fd(), theirs.as_fd()];
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP), &fds).unwrap();
            raw::closed_by_peer(&stream)
        });
        let err = connect_cap(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(err.kind(), ErrorKind::InvalidData, "lie {lie}: {err}");
        assert!(server.join().unwrap(), "lie {lie}: the server was not told");
        assert!(biggest_hostile_mapping() <= READER_REGION_LEN);
    }
}

// ---------------------------------------------------------------------------
// Broken handshakes, played against both victims: the Listener (which must
// drop the peer and keep serving) and `connect` (which must fail with
// InvalidData).

const CAP: u64 = 4096;

/// One way to break the second hello (the one with descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    Honest,
    GarbageBytes,
    WrongMagic,
    WrongVersion,
    WrongLayout,
    StatusN,
    Padding,
    ShortHello,
    NoFds,
    TwoFds,
    FourFds,
    TooManyFds,
    UnsealedWriter,
    UnsealedReader,
    GrowableWriter,
    ShortWriter,
    EmptyReader,
    SwappedRegions,
    PipeAsWriter,
    DevNullAsReader,
    FileAsWriter,
    EventfdAsSocket,
    MemfdAsSocket,
    DgramSocket,
    ListeningSocket,
    HeaderMagic,
    HeaderVersion,
    HeaderRole,
    CapacityNotPowerOfTwo,
    CapacityMismatch,
    CapacityTooLarge,
    TailOutOfRange,
    HeadOutOfRange,
}

const ALL_BAD: &[Bad] = &[
    Bad::GarbageBytes,
    Bad::WrongMagic,
    Bad::WrongVersion,
    Bad::WrongLayout,
    Bad::StatusN,
    Bad::Padding,
    Bad::ShortHello,
    Bad::NoFds,
    Bad::TwoFds,
    Bad::FourFds,
    Bad::TooManyFds,
    Bad::UnsealedWriter,
    Bad::UnsealedReader,
    Bad::GrowableWriter,
    Bad::ShortWriter,
    Bad::EmptyReader,
    Bad::SwappedRegions,
    Bad::PipeAsWriter,
    Bad::DevNullAsReader,
    Bad::FileAsWriter,
    Bad::EventfdAsSocket,
    Bad::MemfdAsSocket,
    Bad::DgramSocket,
    Bad::ListeningSocket,
    Bad::HeaderMagic,
    Bad::HeaderVersion,
    Bad::HeaderRole,
    Bad::CapacityNotPowerOfTwo,
    Bad::CapacityMismatch,
    Bad::CapacityTooLarge,
    Bad::TailOutOfRange,
    Bad::HeadOutOfRange,
];

/// Builds and sends the broken hello on `stream`; returns what must stay
/// open meanwhile.
fn send_bad(stream: &std::os::unix::net::UnixStream, bad: Bad) -> Vec<OwnedFd> {
    let w = match bad {
        Bad::UnsealedWriter => {
            let r = Region::new(DATA_OFFSET + CAP as usize, None);
            r.init(raw::WRITER, CAP);
            r
        }
        Bad::GrowableWriter => {
            let r = Region::new(DATA_OFFSET + CAP as usize, Some(SealFlags::SHRINK));
            r.init(raw::WRITER, CAP);
            r
        }
        Bad::ShortWriter => {
            let r = Region::sealed(DATA_OFFSET + CAP as usize / 2);
            r.init(raw::WRITER, CAP);
            r
        }
        // A writer may choose its own capacity (the reader follows it),
        // but its header must not claim more than its memfd holds.
        Bad::CapacityMismatch => {
            let r = Region::sealed(DATA_OFFSET + CAP as usize);
            r.init(raw::WRITER, 2 * CAP);
            r
        }
        _ => Region::writer(CAP),
    };
    let r = match bad {
        Bad::UnsealedReader => {
            let r = Region::new(READER_REGION_LEN, None);
            r.init(raw::READER, CAP);
            r
        }
        Bad::EmptyReader => Region::sealed(0),
        _ => Region::reader(CAP),
    };
    match bad {
        Bad::HeaderMagic => w.store_u64(offset::MAGIC, 0x1234),
        Bad::HeaderVersion => r.store_u32(offset::VERSION, VERSION + 1),
        Bad::HeaderRole => w.store_u32(offset::ROLE, raw::READER),
        Bad::CapacityNotPowerOfTwo => {
            w.store_u64(offset::CAPACITY, 3000);
            r.store_u64(offset::CAPACITY, 3000);
        }
        Bad::CapacityTooLarge => w.store_u64(offset::CAPACITY, 1 << 41),
        Bad::TailOutOfRange => w.set_index(CAP + 1),
        Bad::HeadOutOfRange => r.set_index(5),
        _ => {}
    }
    let (sock, sock_peer) = raw::socket_pair();
    let mut keep = vec![sock_peer];
    let other: OwnedFd = match bad {
        Bad::PipeAsWriter => rustix::pipe::pipe().unwrap().0,
        Bad::DevNullAsReader => std::fs::File::open("/dev/null").unwrap().into(),
        Bad::FileAsWriter => tempfile_fd(),
        Bad::EventfdAsSocket => {
            rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
        }
        Bad::MemfdAsSocket => Region::writer(CAP).fd.try_clone().unwrap(),
        Bad::DgramSocket => {
            let (a, b) = rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::DGRAM,
                rustix::net::SocketFlags::CLOEXEC,
                None,
            )
            .unwrap();
            keep.push(b);
            a
        }
        // A Unix stream socket that passes SO_TYPE and SO_DOMAIN but is
        // listening: a wake sent on it fails (ENOTCONN), and a pending
        // connection keeps it readable for ever.
        Bad::ListeningSocket => {
            let path = sock_path("hostile-listening");
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).unwrap();
            let _ = std::fs::remove_file(&path);
            l.into()
        }
        _ => sock.try_clone().unwrap(),
    };
    let (wf, rf, sf) = (w.fd.as_fd(), r.fd.as_fd(), sock.as_fd());
    let o = other.as_fd();
    let fds: Vec<_> = match bad {
        Bad::NoFds => vec![],
        Bad::TwoFds => vec![wf, rf],
        Bad::FourFds => vec![wf, rf, sf, sf],
        Bad::TooManyFds => vec![wf; 12],
        Bad::SwappedRegions => vec![rf, wf, sf],
        Bad::PipeAsWriter | Bad::FileAsWriter => vec![o, rf, sf],
        Bad::DevNullAsReader => vec![wf, o, sf],
        Bad::EventfdAsSocket | Bad::MemfdAsSocket | Bad::DgramSocket | Bad::ListeningSocket => {
            vec![wf, rf, o]
        }
        _ => vec![wf, rf, sf],
    };
    let mut msg = raw::hello(b'Y', CAP).to_vec();
    match bad {
        Bad::GarbageBytes => msg = (0..msg.len()).map(|i| (i * 37 + 11) as u8).collect(),
        Bad::WrongMagic => msg[handshake::offset::MAGIC] ^= 0xFF,
        Bad::WrongVersion => msg[handshake::offset::VERSION] ^= 1,
        Bad::WrongLayout => msg[handshake::offset::LAYOUT] ^= 1,
        Bad::StatusN => msg[handshake::offset::STATUS] = b'N',
        Bad::Padding => msg[handshake::offset::STATUS + 1] = 1,
        Bad::ShortHello => msg.truncate(8),
        _ => {}
    }
    raw::send_msg(stream.as_fd(), &msg, &fds).unwrap();
    keep.push(sock);
    keep
}

/// A descriptor of an ordinary file (not a memfd).
fn tempfile_fd() -> OwnedFd {
    let path = std::env::temp_dir().join(format!("shmpipe-hostile-{}", std::process::id()));
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(DATA_OFFSET as u64 + CAP).unwrap();
    let _ = std::fs::remove_file(&path);
    f.into()
}

/// `connect` with the ring capacity of these tests.
fn connect_cap(path: &Path) -> io::Result<shmpipe::Connection> {
    shmpipe::Options::new().capacity(CAP as usize).connect(path)
}

/// An honest client, a forked child's last act: connects to `path` and
/// sends `word`, proof that the listener still serves. Returns the
/// child's exit status.
fn honest_client(path: &Path, word: &[u8]) -> i32 {
    let mut conn = connect_cap(path).unwrap();
    conn.writer.write_all(word).unwrap();
    0
}

/// Reads the honest client's `word` from `conn`.
fn hear(conn: &mut shmpipe::Connection, word: &[u8; 4]) {
    let mut buf = [0u8; 4];
    conn.reader.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, word);
}

/// The control case (an honest hello), then every broken one.
fn every_hello() -> impl Iterator<Item = Bad> {
    std::iter::once(Bad::Honest).chain(ALL_BAD.iter().copied())
}

/// The Listener drops a client whose hello is broken, and serves the next.
fn listener_skips(bad: Bad) {
    let path = sock_path(&format!("hostile-hello-{bad:?}"));
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut opts = shmpipe::Options::new();
    opts.capacity(CAP as usize);
    listener.set_options(opts);
    let child = fork({
        let path = path.clone();
        move || {
            let (stream, verdict) = raw::dial(&path).unwrap();
            assert_eq!(verdict.status, b'Y');
            let _keep = send_bad(&stream, bad);
            let closed = raw::closed_by_peer(&stream);
            if !closed {
                eprintln!("{bad:?}: the server closed the stream: {closed}");
                return 3;
            }
            // The listener survived and serves an honest client next.
            honest_client(&path, b"next")
        }
    });
    let mut conn = listener.accept().unwrap();
    if bad == Bad::Honest {
        drop(conn); // the control case: accepted, then closed by us
        conn = listener.accept().unwrap();
    }
    conn.reader
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 4];
    conn.reader
        .read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("{bad:?}: the broken hello was accepted? {e}"));
    assert_eq!(&buf, b"next", "{bad:?}");
    assert_eq!(child.wait(LIMIT), 0, "{bad:?}");
}

/// `connect` fails with InvalidData against a server whose hello is
/// broken; returns that error.
fn connect_rejects(bad: Bad) -> Option<io::Error> {
    let path = sock_path(&format!("hostile-server-{bad:?}"));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP), &[]).unwrap();
        let _keep = send_bad(&stream, bad);
        raw::closed_by_peer(&stream)
    });
    let res = connect_cap(&path);
    let _ = std::fs::remove_file(&path);
    let err = match res {
        Ok(_) if bad == Bad::Honest => None,
        Ok(_) => panic!("{bad:?}: connect accepted a broken server"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidData, "{bad:?}: {e}");
            Some(e)
        }
    };
    assert!(
        server.join().unwrap(),
        "{bad:?}: the client closed the stream"
    );
    err
}

/// A peer's region descriptor that is no memfd is refused by its seals
/// (`fcntl(F_GET_SEALS)`, which never calls into the file's filesystem)
/// before any `fstat`/`fstatfs`: on a FUSE file the peer serves, those
/// could block the one accept thread for as long as the peer likes.
#[test]
fn a_non_memfd_region_is_refused_before_any_fstat() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for bad in [Bad::FileAsWriter, Bad::DevNullAsReader, Bad::PipeAsWriter] {
        let e = connect_rejects(bad).expect("refused");
        assert!(
            e.to_string().contains("not a sealable memfd"),
            "{bad:?} refused by a later check (after fstat?): {e}"
        );
    }
}

#[test]
fn listener_drops_broken_hellos_and_keeps_serving() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    every_hello().for_each(listener_skips);
}

#[test]
fn connect_rejects_broken_server_hellos() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for bad in every_hello() {
        connect_rejects(bad);
    }
}

/// A listening Unix socket handed over as the wake socket is refused by
/// both sides of the handshake (`InvalidData`): were it taken, every wake
/// owed to that peer would fail (`ENOTCONN`) inside the server's publish,
/// and its pending connections would keep the server's poll busy.
#[test]
fn a_listening_socket_is_refused_as_wake_socket() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    listener_skips(Bad::ListeningSocket);
    connect_rejects(Bad::ListeningSocket);
}

/// A client that connects and then says nothing holds up `accept` only
/// until the handshake timeout; one that hangs up at once not at all.
#[test]
fn silent_or_vanishing_client_is_dropped() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("hostile-vanish", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            // Hangs up right after the verdict, then mid-handshake.
            drop(std::os::unix::net::UnixStream::connect(&path).unwrap());
            let (stream, _) = raw::dial(&path).unwrap();
            drop(stream);
            let (stream, _) = raw::dial(&path).unwrap();
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP)[..10], &[]).unwrap();
            drop(stream);
            honest_client(&path, b"last")
        }
    });
    let mut conn = listener.accept().unwrap();
    hear(&mut conn, b"last");
    child.join();
}

/// Not a defence but a limit (SECURITY.md): an end copied by `fork` and
/// used by two processes at once breaks single-producer. The reader gets
/// garbled bytes or InvalidData, the writers may get InvalidData, and the
/// sides may wait for each other for ever (so all use timeouts here); no
/// crash, no undefined behaviour.
#[test]
fn two_processes_writing_one_end_garble_but_do_not_crash() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    fn write_loop(w: &mut shmpipe::Writer, seed: u64) -> i32 {
        // Two writers can also wait for each other for ever (each sees the
        // ring full or empty by its own copy of the tail): a timeout ends it.
        w.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut rng = Rng::new(seed);
        let buf = [seed as u8; 101];
        for _ in 0..2000 {
            match w.write(&buf[..rng.upto(100) + 1]) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::InvalidData => {}
                Err(e) if e.kind() == ErrorKind::BrokenPipe => return 0,
                Err(e) if e.kind() == ErrorKind::TimedOut => return 0,
                Err(e) => panic!("writer: {e:?}"),
            }
        }
        0
    }
    let (mut invalid, mut bytes, mut timeouts) = (0u64, 0u64, 0u64);
    for round in 0..10u64 {
        let (r, w) = shmpipe::Options::new().capacity(256).pipe().unwrap();
        let mut r = Some(r);
        let r_in_child = &mut r;
        // Child A forks child B: both hold the same Writer and write. A
        // first drops its copy of the reader (the fork idiom), so B never
        // has one and the writers see the reader go.
        let a = fork(move || {
            drop(r_in_child.take());
            let mut w = w;
            let b = fork(|| write_loop(&mut w, round * 2 + 2));
            let code = write_loop(&mut w, round * 2 + 1);
            code.max(b.wait(LIMIT))
        });
        let mut r = r.take().unwrap();
        r.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 512];
        let mut in_row = 0;
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    bytes += n as u64;
                    in_row = 0;
                }
                Err(e) if e.kind() == ErrorKind::InvalidData => {
                    invalid += 1;
                    in_row += 1;
                    if in_row > 1000 {
                        break; // garbage for good; stop reading
                    }
                }
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    timeouts += 1;
                    break;
                }
                Err(e) => panic!("reader: {e:?}"),
            }
        }
        drop(r);
        assert_eq!(a.wait(LIMIT), 0);
    }
    eprintln!(
        "two writers on one end: {bytes} bytes read, {invalid} InvalidData, {timeouts} timeouts"
    );
}

// ---------------------------------------------------------------------------
// Issue #8: a peer's socket and memory of the wrong kind.

/// How a victim end waits in `half_closed_peer_socket_is_a_gone_peer`.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Blocking,
    Timeout,
    NonBlocking,
}

/// Item 11: a peer that shuts its wake sockets down for writing can never
/// wake us again: it is gone, in every mode. The reader sees EOF and the
/// writer `BrokenPipe` (with a timeout it used to spin on the readable
/// socket until the timeout; non-blocking, it never noticed).
#[test]
fn half_closed_peer_socket_is_a_gone_peer() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    for mode in [Mode::Blocking, Mode::Timeout, Mode::NonBlocking] {
        let (path, listener) = listener(&format!("hostile-half-{mode:?}"), CAP as usize);
        let server = std::thread::spawn(move || listener.accept().unwrap());
        let peer = Peer::connect(&path, CAP).unwrap();
        let mut conn = server.join().unwrap();
        for sock in [&peer.w_sock, &peer.r_sock] {
            rustix::net::shutdown(sock.as_ref().unwrap(), rustix::net::Shutdown::Write).unwrap();
        }
        match mode {
            Mode::Blocking => {}
            Mode::Timeout => {
                let t = Some(Duration::from_secs(5));
                conn.reader.set_read_timeout(t).unwrap();
                conn.writer.set_write_timeout(t).unwrap();
            }
            Mode::NonBlocking => {
                conn.reader.set_nonblocking(true);
                conn.writer.set_nonblocking(true);
            }
        }
        let n = conn.reader.read(&mut [0u8; 16]);
        assert_eq!(n.map_err(|e| e.kind()), Ok(0), "{mode:?}: reader");
        let err = loop {
            match conn.writer.write(&[0u8; 64]) {
                Ok(n) => assert!(n > 0),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{mode:?}: writer: {err}");
        drop(peer);
    }
}

/// Item 11: a peer that floods wake bytes makes each wake-up find nothing;
/// every parking costs a `membarrier` (which interrupts every CPU running
/// a registered process) when the peer claims light fences. The parkings
/// of one wait are bounded: after a few empty wake-ups the waiter looks
/// every millisecond instead of parking (it used to park again per drained
/// batch of bytes). Counted by the park epoch in the server's own
/// control block, which the peer can read.
#[test]
fn wake_flood_cannot_make_us_park_in_a_loop() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("hostile-flood-park", CAP as usize);
    let server = std::thread::spawn(move || listener.accept().unwrap());
    let w = Region::writer(CAP);
    w.store_u32(offset::FLAGS, shmpipe_ring::layout::LIGHT_FENCES);
    let peer = Peer::connect_with(&path, CAP, w, Region::reader(CAP)).unwrap();
    let mut conn = server.join().unwrap();
    let reader = std::thread::spawn(move || {
        conn.reader
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut buf = [0u8; 4];
        let n = conn.reader.read(&mut buf);
        (n.map(|n| buf[..n].to_vec()), conn)
    });
    let head = View::new(peer.server_r.as_fd()).unwrap();
    while head.load_u64(offset::PARKED) & shmpipe_ring::layout::PARKED == 0 {
        std::thread::yield_now();
    }
    let parked_before = head.load_u64(offset::PARKED) >> 1;
    for _ in 0..20_000 {
        peer.wake_reader(1);
    }
    peer.w.ring_write(CAP, 0, b"data");
    peer.w.set_index(4);
    peer.wake_reader(1);
    let (got, _conn) = reader.join().unwrap();
    assert_eq!(got.unwrap(), b"data");
    let parkings = (head.load_u64(offset::PARKED) >> 1) - parked_before;
    assert!(
        parkings <= 16,
        "{parkings} parkings during one wait under a flood"
    );
}

/// Item 6: a hugetlbfs memfd takes the same seals as a tmpfs one, but
/// its mappings round to huge pages (the unmap of what we asked for fails:
/// a leak per connection) and its owner can punch holes in it despite the
/// seals (SIGBUS on our next load). `connect` refuses such a region as
/// `InvalidData` before mapping it (it used to map it: with huge pages
/// free, it attached; without, it failed with `OutOfMemory`).
#[test]
fn hugetlbfs_region_is_refused() {
    use rustix::fs::MemfdFlags;
    use rustix::mm::{MapFlags, ProtFlags};
    let _s = serial();
    let _w = watchdog(LIMIT);
    const HUGE_PAGE: usize = 2 << 20;
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING | MemfdFlags::HUGETLB;
    let huge = match rustix::fs::memfd_create("hostile-hugetlb", flags) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("skipped: this kernel makes no hugetlbfs memfd ({e})");
            return;
        }
    };
    if let Err(e) = rustix::fs::ftruncate(&huge, HUGE_PAGE as u64) {
        eprintln!("skipped: cannot size a hugetlbfs memfd ({e})");
        return;
    }
    // With a huge page free, give the region a valid header, so that only
    // the filesystem check can refuse it.
    // SAFETY: a fresh shared mapping of our own memfd, written only here
    // through atomics and unmapped right after.
    unsafe {
        if let Ok(p) = rustix::mm::mmap(
            std::ptr::null_mut(),
            HUGE_PAGE,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            &huge,
            0,
        ) {
            let at = |off: usize| p.cast::<u8>().add(off);
            std::sync::atomic::AtomicU64::from_ptr(at(offset::MAGIC).cast())
                .store(shmpipe_ring::layout::MAGIC, Ordering::Relaxed);
            std::sync::atomic::AtomicU32::from_ptr(at(offset::VERSION).cast())
                .store(VERSION, Ordering::Relaxed);
            std::sync::atomic::AtomicU32::from_ptr(at(offset::ROLE).cast())
                .store(raw::WRITER, Ordering::Relaxed);
            std::sync::atomic::AtomicU64::from_ptr(at(offset::CAPACITY).cast())
                .store(CAP, Ordering::Relaxed);
            let _ = rustix::mm::munmap(p, HUGE_PAGE);
        }
    }
    rustix::fs::fcntl_add_seals(&huge, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .unwrap();
    let path = sock_path("hostile-hugetlb");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP), &[]).unwrap();
        let mut msg = [0u8; handshake::HELLO_LEN];
        let _client = raw::recv_msg(stream.as_fd(), &mut msg).unwrap();
        let r = Region::reader(CAP);
        let (_sock, theirs) = raw::socket_pair();
        let fds = [huge.as_fd(), r.fd.as_fd(), theirs.as_fd()];
        raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP), &fds).unwrap();
        raw::closed_by_peer(&stream)
    });
    let res = connect_cap(&path);
    let _ = std::fs::remove_file(&path);
    let err = res.expect_err("a hugetlbfs region was accepted");
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert!(server.join().unwrap());
}

/// Item 1, the receiving side: `recv_vec` grows the vector only for a
/// message that is there. A header that claims more than the peer
/// published is `InvalidData`, and the vector is not grown to the claim
/// (and the ring itself, which bounds any claim, is bounded by
/// `max_peer_capacity`: `huge_client_ring_is_refused_unmapped`).
#[test]
fn recv_vec_does_not_grow_for_a_claim() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const RING: u64 = 1 << 20;
    let (path, listener) = listener("hostile-recv-vec", RING as usize);
    let server = std::thread::spawn(move || listener.accept().unwrap());
    let peer = Peer::connect(&path, RING).unwrap();
    let (mut rx, _tx) = server.join().unwrap().into_messages();
    let claim = (RING - 8) as u32;
    peer.w.ring_write(RING, 0, &frame_header(claim, !claim));
    peer.w.set_index(16);
    let mut buf = Vec::new();
    let err = rx.recv_vec(&mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert_eq!(buf.capacity(), 0, "grown for a message that is not there");
    drop(peer);
}

// ---------------------------------------------------------------------------
// Wake pipes stay on our side of the trust boundary.
//
// Whoever holds an end of a pipe can pin the pipe's mutex: a `splice` from
// an empty socket into its write end blocks while holding it, and every
// read, write, `F_GETPIPE_SZ` or `/proc` reopen of that pipe then waits in
// D state, unkillable, until the splicer dies. So an end joined to a
// stranger must never sleep on, or wake through, a pipe the stranger can
// reach: the handshake's ends use sockets (no lock of ours is the peer's).

/// The kind of file behind a descriptor of this process ("socket", "pipe"...).
fn kind_of(fd: std::os::fd::BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd;
    let t = common::fd_target(fd.as_raw_fd());
    t.split(':').next().unwrap_or("").to_string()
}

/// An end from `accept` (and from `connect`) wakes and sleeps through one
/// socket, which `as_fds` shows twice. Ends `pipe` made keep their wake
/// pipes.
#[test]
fn accepted_ends_wake_through_sockets_and_local_ends_through_pipes() {
    use std::os::fd::AsRawFd;
    let _s = serial();
    let _w = watchdog(LIMIT);
    let (path, listener) = listener("hostile-bell", 4096);
    let client = std::thread::spawn(move || shmpipe::connect(&path).unwrap());
    let conn = listener.accept().unwrap();
    let theirs = client.join().unwrap();
    for (what, fds) in [
        ("accepted reader", conn.reader.as_fds()),
        ("accepted writer", conn.writer.as_fds()),
        ("connected reader", theirs.reader.as_fds()),
        ("connected writer", theirs.writer.as_fds()),
    ] {
        assert_eq!(kind_of(fds[2]), "socket", "{what}");
        assert_eq!(fds[2].as_raw_fd(), fds[3].as_raw_fd(), "{what}");
    }
    let (r, w) = shmpipe::pipe().unwrap();
    for fds in [r.as_fds(), w.as_fds()] {
        assert_eq!(kind_of(fds[2]), "pipe");
        assert_eq!(kind_of(fds[3]), "pipe");
    }
}

/// A client that hands over wake pipes instead of a socket, be it in a
/// hello of the short-lived version 2 (which sent two wake pipes) or in a
/// version-1 hello, is dropped; the listener serves the next client.
#[test]
fn a_wake_pipe_hello_is_refused() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    let (path, listener) = listener("hostile-pipe-hello", CAP as usize);
    let child = fork({
        let path = path.clone();
        move || {
            let flags = rustix::pipe::PipeFlags::CLOEXEC;
            let (_a_in, a) = rustix::pipe::pipe_with(flags).unwrap();
            let (_b_in, b) = rustix::pipe::pipe_with(flags).unwrap();
            let (w, r) = (Region::writer(CAP), Region::reader(CAP));
            // Version 2: four descriptors, the last two wake pipes.
            let (stream, _) = raw::dial(&path).unwrap();
            let mut v2 = raw::hello(b'Y', CAP);
            v2[handshake::offset::VERSION..handshake::offset::VERSION + 4]
                .copy_from_slice(&2u32.to_le_bytes());
            let fds = [w.fd.as_fd(), r.fd.as_fd(), a.as_fd(), b.as_fd()];
            raw::send_msg(stream.as_fd(), &v2, &fds).unwrap();
            assert!(raw::closed_by_peer(&stream));
            // Version 1 with a pipe where the socket goes.
            let (stream, _) = raw::dial(&path).unwrap();
            let fds = [w.fd.as_fd(), r.fd.as_fd(), a.as_fd()];
            raw::send_msg(stream.as_fd(), &raw::hello(b'Y', CAP), &fds).unwrap();
            assert!(raw::closed_by_peer(&stream));
            0
        }
    });
    let server = std::thread::spawn(move || {
        let mut conn = listener.accept().unwrap();
        let mut buf = [0u8; 6];
        conn.reader.read_exact(&mut buf).unwrap();
        (conn.peer.pid, buf)
    });
    child.join();
    let honest = fork({
        let path = path.clone();
        move || {
            let mut conn = shmpipe::connect(&path).unwrap();
            conn.writer.write_all(b"honest").unwrap();
            0
        }
    });
    let (pid, buf) = server.join().unwrap();
    assert_eq!(
        pid,
        honest.pid(),
        "the pipe-sending peers must not be served"
    );
    assert_eq!(&buf, b"honest");
    honest.join();
}

/// The reviewer's attack: a connected client whose helper thread splices
/// from an empty socket into every pipe the client holds (the write end
/// of any wake pipe of ours it could have been given would pin its lock).
/// The accept of an honest second client and a timed read on the hostile
/// connection must go on as usual. (With sockets on this path the client
/// holds no pipe of ours; the test keeps it that way.) On any failure the
/// attacker is killed first: a thread of ours stuck in D state could not
/// be, and would hang the suite.
#[test]
fn a_client_splicing_into_its_pipes_stalls_no_one() {
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    let (path, listener) = listener("hostile-splice", CAP as usize);
    let attacker = fork({
        let path = path.clone();
        move || {
            let peer = Peer::connect(&path, CAP).unwrap();
            let (empty, _keep) = raw::socket_pair();
            let empty = Arc::new(empty);
            for fd in common::open_fds() {
                if !common::fd_target(fd).starts_with("pipe:") {
                    continue;
                }
                let empty = empty.clone();
                std::thread::spawn(move || {
                    // SAFETY: `fd` stays open: this process closes nothing
                    // until it is killed.
                    let out = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                    let _ = rustix::pipe::splice(
                        &*empty,
                        None,
                        out,
                        None,
                        1,
                        rustix::pipe::SpliceFlags::empty(),
                    );
                });
            }
            let _keep = peer;
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    });
    let guard = KillOnPanic(&attacker);
    let (mut r, _w) = listener.accept().unwrap().split();
    // Give the splicers time to start.
    std::thread::sleep(Duration::from_millis(200));
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let conn = listener.accept();
        let _ = tx.send(conn.map(|c| c.peer.pid));
    });
    let honest = fork({
        let path = path.clone();
        move || {
            let conn = shmpipe::connect(&path).unwrap();
            drop(conn);
            0
        }
    });
    let pid = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the accept of an honest client stalled")
        .unwrap();
    assert_eq!(pid, honest.pid());
    r.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let err = r.read(&mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    honest.join();
    server.join().unwrap();
    drop(guard);
    drop(attacker);
}

/// Kills a child when dropped during a panic (before anything else of the
/// test's is dropped or joined).
struct KillOnPanic<'a>(&'a common::Child);

impl Drop for KillOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.kill();
        }
    }
}

/// An end handed over in the socket form (`send_over`'s four descriptors:
/// two regions and one wake socket twice) is rebuilt with that socket,
/// keeping one descriptor of it; two different sockets are `InvalidData`.
#[test]
fn a_socket_end_handed_over_keeps_one_socket() {
    use std::os::fd::AsRawFd;
    let _s = serial();
    let _w = watchdog(LIMIT);
    const CAP: u64 = 4096;
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (w, r) = (Region::writer(CAP), Region::reader(CAP));
    let (sock, _theirs) = raw::socket_pair();
    let fds = [w.fd.as_fd(), r.fd.as_fd(), sock.as_fd(), sock.as_fd()];
    raw::send_msg(a.as_fd(), b"w", &fds).unwrap();
    let before = common::open_fds().len();
    let end = shmpipe::Writer::recv_from(&b).unwrap();
    assert_eq!(
        common::open_fds().len() - before,
        3,
        "two regions and one socket: the duplicate is closed"
    );
    let got = end.as_fds();
    assert_eq!(kind_of(got[2]), "socket");
    assert_eq!(got[2].as_raw_fd(), got[3].as_raw_fd());
    drop(end);
    let (other, _theirs2) = raw::socket_pair();
    let fds = [w.fd.as_fd(), r.fd.as_fd(), sock.as_fd(), other.as_fd()];
    raw::send_msg(a.as_fd(), b"w", &fds).unwrap();
    let err = shmpipe::Writer::recv_from(&b).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
}
