//! Crash tests: the writer, and separately the reader, SIGKILLed at random
//! points (random delay, random chunk sizes and capacities, byte streams
//! and messages, plain writes and zero-copy grants). In every trial the
//! survivor gets an exact prefix of what was sent (no wrong byte, no torn
//! message), then EOF (reader) or BrokenPipe (writer); nothing hangs (the
//! watchdog turns a hang into a failure).
//!
//! `SHMPIPE_CRASH_TRIALS` sets the trials per scenario (default 100;
//! `scripts/harden.sh` runs 1000 or more).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use common::{check, checksum, env_count, fill, fork, pattern, serial, watchdog, Child, Rng};

fn trials() -> u64 {
    env_count("SHMPIPE_CRASH_TRIALS", 100)
}

fn limit() -> Duration {
    Duration::from_secs(120) + Duration::from_millis(100) * trials() as u32
}

/// A random ring size and spin time for one trial.
fn options(rng: &mut Rng) -> shmpipe::Options {
    let mut o = shmpipe::Options::new();
    o.capacity([64, 4096, 65536, 262_144][rng.upto(3)]);
    if rng.upto(1) == 0 {
        o.spin(Duration::ZERO);
    }
    o
}

/// Kills `child` after a random delay (none, a few microseconds, or up to
/// a few milliseconds), from another thread, so the survivor may be
/// running, spinning or asleep when it happens.
fn kill_later(child: &Child, rng: &mut Rng) -> std::thread::JoinHandle<()> {
    let pid = child.pid();
    let delay = match rng.upto(4) {
        0 => Duration::ZERO,
        1 => Duration::from_micros(rng.upto(100) as u64),
        2 | 3 => Duration::from_micros(rng.upto(5000) as u64),
        _ => Duration::from_micros(rng.upto(20_000) as u64),
    };
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        // SAFETY: kill(2) of our own child, which the main thread reaps
        // only after joining this thread, so the pid is not reused.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    })
}

/// The child writes the pattern stream for ever: plain writes of random
/// sizes, or zero-copy grants committed (or abandoned) in pieces.
fn stream_writer(mut w: shmpipe::Writer, seed: u64) -> i32 {
    let mut rng = Rng::new(seed);
    let cap = w.capacity();
    let mut buf = vec![0u8; 3 * cap];
    let mut pos = 0u64;
    loop {
        if rng.upto(1) == 0 {
            let n = rng.upto(buf.len() - 1) + 1;
            fill(&mut buf[..n], pos);
            if w.write_all(&buf[..n]).is_err() {
                return 2;
            }
            pos += n as u64;
        } else {
            let n = rng.upto(cap - 1) + 1;
            let Ok(mut g) = w.reserve(n) else { return 2 };
            let (a, b) = g.as_mut_slices();
            fill(a, pos);
            fill(b, pos + a.len() as u64);
            // Garbage past what we commit must never be read.
            let k = rng.upto(n);
            if k < a.len() {
                a[k..].fill(0xEE);
                b.fill(0xEE);
            } else {
                b[k - a.len()..].fill(0xEE);
            }
            g.commit(k);
            pos += k as u64;
        }
    }
}

/// A message of sequence number `seq`: its header says seq, length and
/// the checksum of the pattern payload that follows.
fn make_message(seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend((0..len as u64).map(|i| pattern(seq.wrapping_mul(1 << 20) + i)));
    let sum = checksum(&out[24..]);
    out[16..24].copy_from_slice(&sum.to_le_bytes());
}

/// Checks a received message against `seq`; no torn or wrong message.
fn check_message(seq: u64, msg: &[u8]) -> Result<(), String> {
    if msg.len() < 24 {
        return Err(format!("message {seq}: {} bytes, too short", msg.len()));
    }
    let got_seq = u64::from_le_bytes(msg[..8].try_into().unwrap());
    let len = u64::from_le_bytes(msg[8..16].try_into().unwrap());
    let sum = u64::from_le_bytes(msg[16..24].try_into().unwrap());
    if got_seq != seq || len != (msg.len() - 24) as u64 || sum != checksum(&msg[24..]) {
        return Err(format!(
            "message {seq}: torn or wrong (seq {got_seq}, len {len} of {})",
            msg.len() - 24
        ));
    }
    let mut want = Vec::new();
    make_message(seq, len as usize, &mut want);
    if want != msg {
        return Err(format!("message {seq}: wrong payload"));
    }
    Ok(())
}

/// The child sends numbered messages for ever: `send`, `feed` + `flush`,
/// or a zero-copy grant.
fn message_sender(mut tx: shmpipe::Sender, seed: u64) -> i32 {
    let mut rng = Rng::new(seed);
    let max = tx.max_message();
    let mut msg = Vec::new();
    for seq in 0u64.. {
        let len = if rng.upto(3) == 0 {
            rng.upto(max - 24)
        } else {
            rng.upto(100.min(max - 24))
        };
        make_message(seq, len, &mut msg);
        let ok = match rng.upto(2) {
            0 => tx.send(&msg).is_ok(),
            1 => {
                let r = tx.feed(&msg);
                if rng.upto(2) == 0 {
                    tx.flush();
                }
                r.is_ok()
            }
            _ => match tx.reserve(msg.len()) {
                Ok(mut g) => {
                    g.copy_from_slice(&msg);
                    g.commit();
                    true
                }
                Err(_) => false,
            },
        };
        if !ok {
            return 2;
        }
    }
    unreachable!()
}

/// Totals over the trials of one scenario.
#[derive(Debug, Default)]
struct Totals {
    trials: u64,
    bytes: u64,
    messages: u64,
}

fn report(name: &str, t: &Totals, start: Instant) {
    eprintln!(
        "{name}: {} trials, {} bytes, {} messages, 0 failures, {:.1?}",
        t.trials,
        t.bytes,
        t.messages,
        start.elapsed()
    );
}

#[test]
fn writer_killed_stream_reader_gets_a_prefix_then_eof() {
    let _s = serial();
    let _w = watchdog(limit());
    let start = Instant::now();
    let mut t = Totals::default();
    let mut rng = Rng::new(0xC0FFEE);
    for trial in 0..trials() {
        let (mut r, w) = options(&mut rng).pipe().unwrap();
        let seed = rng.next();
        let child = fork(move || stream_writer(w, seed));
        let killer = kill_later(&child, &mut rng);
        let mut buf = vec![0u8; rng.upto(3 * r.capacity()) + 1];
        let mut pos = 0u64;
        loop {
            let n = r
                .read(&mut buf)
                .unwrap_or_else(|e| panic!("trial {trial}: read failed: {e}"));
            if n == 0 {
                break;
            }
            check(&buf[..n], pos);
            pos += n as u64;
        }
        assert_eq!(r.read(&mut buf).unwrap(), 0, "trial {trial}: EOF is sticky");
        killer.join().unwrap();
        assert_eq!(
            child.wait(limit()),
            128 + libc::SIGKILL,
            "trial {trial}: the writer died otherwise"
        );
        t.trials += 1;
        t.bytes += pos;
    }
    report("writer killed, stream", &t, start);
}

#[test]
fn writer_killed_messages_arrive_whole_then_eof() {
    let _s = serial();
    let _w = watchdog(limit());
    let start = Instant::now();
    let mut t = Totals::default();
    let mut rng = Rng::new(0xBADC0DE);
    for trial in 0..trials() {
        let (mut rx, tx) = options(&mut rng).message_pipe().unwrap();
        let seed = rng.next();
        let child = fork(move || message_sender(tx, seed));
        let killer = kill_later(&child, &mut rng);
        let mut msg = Vec::new();
        let mut seq = 0u64;
        let err = loop {
            let res = if rng.upto(1) == 0 {
                rx.recv_vec(&mut msg)
            } else {
                rx.recv_in_place().map(|m| msg = m.bytes().to_vec())
            };
            match res {
                Ok(()) => {
                    check_message(seq, &msg).unwrap_or_else(|e| panic!("trial {trial}: {e}"));
                    t.bytes += msg.len() as u64;
                    seq += 1;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "trial {trial}: {err}");
        killer.join().unwrap();
        assert_eq!(
            child.wait(limit()),
            128 + libc::SIGKILL,
            "trial {trial}: the sender died otherwise"
        );
        t.trials += 1;
        t.messages += seq;
    }
    report("writer killed, messages", &t, start);
}

#[test]
fn reader_killed_stream_writer_gets_broken_pipe() {
    let _s = serial();
    let _w = watchdog(limit());
    let start = Instant::now();
    let mut t = Totals::default();
    let mut rng = Rng::new(0xFEED);
    for trial in 0..trials() {
        let (r, mut w) = options(&mut rng).pipe().unwrap();
        let seed = rng.next();
        // The child checks what it gets; a wrong byte ends it with 3
        // before the kill, which the parent sees.
        let child = fork(move || {
            let mut r = r;
            let mut rng = Rng::new(seed);
            let mut buf = vec![0u8; 3 * r.capacity()];
            let mut pos = 0u64;
            loop {
                let want = rng.upto(buf.len() - 1) + 1;
                match r.read(&mut buf[..want]) {
                    Ok(0) | Err(_) => return 2,
                    Ok(n) => {
                        if (0..n).any(|k| buf[k] != pattern(pos + k as u64)) {
                            return 3;
                        }
                        pos += n as u64;
                    }
                }
            }
        });
        let killer = kill_later(&child, &mut rng);
        let cap = w.capacity();
        let mut buf = vec![0u8; 3 * cap];
        let mut pos = 0u64;
        let err = loop {
            let res = if rng.upto(1) == 0 {
                let n = rng.upto(buf.len() - 1) + 1;
                fill(&mut buf[..n], pos);
                w.write(&buf[..n])
            } else {
                let n = rng.upto(cap - 1) + 1;
                w.reserve(n).map(|mut g| {
                    let (a, b) = g.as_mut_slices();
                    fill(a, pos);
                    fill(b, pos + a.len() as u64);
                    g.commit(n);
                    n
                })
            };
            match res {
                Ok(n) => pos += n as u64,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::BrokenPipe, "trial {trial}: {err}");
        // A write that still fits may succeed (BrokenPipe comes at the
        // latest once the ring is full), but never more than a ring's worth.
        let mut after = 0;
        let err = loop {
            match w.write(&buf[..cap]) {
                Ok(n) => after += n,
                Err(e) => break e,
            }
            assert!(after <= cap, "trial {trial}: wrote past a full ring");
        };
        assert_eq!(err.kind(), ErrorKind::BrokenPipe, "trial {trial}: {err}");
        killer.join().unwrap();
        assert_eq!(
            child.wait(limit()),
            128 + libc::SIGKILL,
            "trial {trial}: the reader died otherwise (3: it read a wrong byte)"
        );
        t.trials += 1;
        t.bytes += pos;
    }
    report("reader killed, stream", &t, start);
}

#[test]
fn reader_killed_sender_gets_broken_pipe() {
    let _s = serial();
    let _w = watchdog(limit());
    let start = Instant::now();
    let mut t = Totals::default();
    let mut rng = Rng::new(0xDEAD);
    for trial in 0..trials() {
        let (rx, mut tx) = options(&mut rng).message_pipe().unwrap();
        let child = fork(move || {
            let mut rx = rx;
            let mut msg = Vec::new();
            for seq in 0u64.. {
                if rx.recv_vec(&mut msg).is_err() {
                    return 2;
                }
                if check_message(seq, &msg).is_err() {
                    return 3;
                }
            }
            unreachable!()
        });
        let killer = kill_later(&child, &mut rng);
        let max = tx.max_message();
        let mut msg = Vec::new();
        let mut seq = 0u64;
        let err = loop {
            let len = rng.upto(max - 24);
            make_message(seq, len, &mut msg);
            match tx.send(&msg) {
                Ok(()) => {
                    seq += 1;
                    t.bytes += msg.len() as u64;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::BrokenPipe, "trial {trial}: {err}");
        killer.join().unwrap();
        assert_eq!(
            child.wait(limit()),
            128 + libc::SIGKILL,
            "trial {trial}: the receiver died otherwise (3: a torn message)"
        );
        t.trials += 1;
        t.messages += seq;
    }
    report("reader killed, messages", &t, start);
}

/// Both ends of a Listener connection: the client SIGKILLed while the
/// server reads and writes; the server drains a prefix, then sees EOF and
/// BrokenPipe.
#[test]
fn connection_peer_killed() {
    let _s = serial();
    let _w = watchdog(limit());
    let path = common::sock_path("crash-conn");
    let mut listener = shmpipe::Listener::bind(&path).unwrap();
    let mut rng = Rng::new(0xC044);
    let n = (trials() / 4).max(5);
    for trial in 0..n {
        let opts = options(&mut rng);
        listener.set_options(opts.clone());
        let seed = rng.next();
        let child = fork({
            let path = path.clone();
            move || {
                let conn = opts.connect(&path).unwrap();
                let (mut r, w) = conn.split();
                // Drain what the server sends, on a thread; write ours.
                std::thread::spawn(move || {
                    let mut sink = vec![0u8; 65536];
                    while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
                });
                stream_writer(w, seed)
            }
        });
        let (mut r, mut w) = listener.accept().unwrap().split();
        let killer = kill_later(&child, &mut rng);
        let writer = std::thread::spawn(move || {
            let buf = [7u8; 4096];
            loop {
                if let Err(e) = w.write(&buf) {
                    return e.kind();
                }
            }
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        check(&got, 0);
        assert_eq!(writer.join().unwrap(), ErrorKind::BrokenPipe);
        killer.join().unwrap();
        assert_eq!(child.wait(limit()), 128 + libc::SIGKILL, "trial {trial}");
    }
    eprintln!("connection peer killed: {n} trials, 0 failures");
}
