//! Soak: moves a large volume across both pipes of one shmpipe connection,
//! between two processes, in both directions at once, with random sizes,
//! and checks every byte. Not run in CI; `scripts/harden.sh` runs it.
//!
//! ```text
//! cargo run --release -p shmpipe --example soak -- [--bytes N] [--messages]
//!                                                  [--capacity C] [--seed S]
//! ```
//!
//! * `--bytes N`: total across both directions (default 10^10, so
//!   5 * 10^9 each way). Suffixes `k`, `M`, `G` (powers of ten) are allowed.
//! * stream mode (default): random write sizes (1 B .. 256 KiB) and random
//!   read sizes; every byte is checked against a position pattern, so a
//!   lost, repeated, reordered or corrupted byte is an error.
//! * `--messages`: message mode; each message carries a sequence number,
//!   its length and a checksum of its payload (random sizes, 0 .. max).
//!
//! The server (this process) binds a `Listener` and spawns itself with
//! `--connect PATH` as the client. Each process writes on one thread and
//! reads on another. At the end each side prints what it received and the
//! number of errors; the exit status is non-zero if any side saw an error.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

/// What one side saw.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    sent: u64,
    received: u64,
    messages: u64,
    errors: u64,
}

#[derive(Debug, Clone)]
struct Args {
    bytes: u64,
    messages: bool,
    capacity: usize,
    seed: u64,
    connect: Option<PathBuf>,
}

fn parse_count(s: &str) -> u64 {
    let (num, mul) = match s.as_bytes().last() {
        Some(b'k') => (&s[..s.len() - 1], 1_000),
        Some(b'M') => (&s[..s.len() - 1], 1_000_000),
        Some(b'G') => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s, 1),
    };
    let n: f64 = num
        .parse()
        .unwrap_or_else(|_| usage(&format!("bad number {s}")));
    (n * mul as f64) as u64
}

fn usage(msg: &str) -> ! {
    eprintln!("soak: {msg}");
    eprintln!("usage: soak [--bytes N] [--messages] [--capacity C] [--seed S]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        bytes: 10_000_000_000,
        messages: false,
        capacity: shmpipe::DEFAULT_CAPACITY,
        seed: 1,
        connect: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--bytes" => a.bytes = parse_count(&val()),
            "--messages" => a.messages = true,
            "--capacity" => a.capacity = parse_count(&val()) as usize,
            "--seed" => a.seed = parse_count(&val()),
            "--connect" => a.connect = Some(PathBuf::from(val())),
            _ => usage(&format!("unknown argument {arg}")),
        }
    }
    a
}

/// The byte at stream position `i` (same pattern as the tests).
fn pattern(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (i as u8)
}

/// xorshift64*, per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn upto(&mut self, max: usize) -> usize {
        (self.next() % (max as u64 + 1)) as usize
    }
}

/// A fast checksum of a payload (eight bytes per multiply).
fn checksum(data: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64 ^ data.len() as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

const MAX_CHUNK: usize = 256 * 1024;
/// Message header: sequence number, payload length, payload checksum.
const MSG_HEAD: usize = 24;

fn stream_writer(mut w: shmpipe::Writer, total: u64, seed: u64) -> io::Result<u64> {
    let mut rng = Rng(seed | 1);
    let mut buf = vec![0u8; MAX_CHUNK];
    let mut pos = 0u64;
    while pos < total {
        let n = (rng.upto(MAX_CHUNK - 1) + 1).min((total - pos) as usize);
        for (k, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(pos + k as u64);
        }
        w.write_all(&buf[..n])?;
        pos += n as u64;
    }
    Ok(pos)
}

fn stream_reader(mut r: shmpipe::Reader, seed: u64) -> io::Result<Tally> {
    let mut rng = Rng(seed | 1);
    let mut buf = vec![0u8; MAX_CHUNK];
    let mut t = Tally::default();
    loop {
        let want = rng.upto(MAX_CHUNK - 1) + 1;
        let n = r.read(&mut buf[..want])?;
        if n == 0 {
            return Ok(t);
        }
        let pos = t.received;
        let bad = buf[..n]
            .iter()
            .enumerate()
            .filter(|&(k, &b)| b != pattern(pos + k as u64))
            .count();
        if bad > 0 && t.errors == 0 {
            eprintln!("soak: first wrong byte near stream position {pos}");
        }
        t.errors += bad as u64;
        t.received += n as u64;
    }
}

fn message_writer(mut tx: shmpipe::Sender, total: u64, seed: u64) -> io::Result<u64> {
    let mut rng = Rng(seed | 1);
    let max = tx.max_message().min(MAX_CHUNK);
    let mut buf = vec![0u8; max];
    let (mut sent, mut seq, mut pos) = (0u64, 0u64, 0u64);
    while sent < total {
        let len = rng.upto(max - MSG_HEAD) + MSG_HEAD;
        let payload = &mut buf[MSG_HEAD..len];
        for (k, b) in payload.iter_mut().enumerate() {
            *b = pattern(pos + k as u64);
        }
        pos += payload.len() as u64;
        let sum = checksum(payload);
        buf[..8].copy_from_slice(&seq.to_le_bytes());
        buf[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        buf[16..24].copy_from_slice(&sum.to_le_bytes());
        tx.send(&buf[..len])?;
        sent += len as u64;
        seq += 1;
    }
    Ok(sent)
}

fn message_reader(mut rx: shmpipe::Receiver) -> io::Result<Tally> {
    let mut t = Tally::default();
    let mut buf = Vec::new();
    loop {
        match rx.recv_vec(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(t),
            Err(e) => return Err(e),
        }
        let ok = buf.len() >= MSG_HEAD
            && u64::from_le_bytes(buf[..8].try_into().unwrap()) == t.messages
            && u64::from_le_bytes(buf[8..16].try_into().unwrap()) == buf.len() as u64
            && u64::from_le_bytes(buf[16..24].try_into().unwrap()) == checksum(&buf[MSG_HEAD..]);
        if !ok {
            if t.errors == 0 {
                eprintln!("soak: first bad message is number {}", t.messages);
            }
            t.errors += 1;
        }
        t.messages += 1;
        t.received += buf.len() as u64;
    }
}

/// Runs one side: writes `each_way` bytes on a thread, reads on this one.
fn run_side(conn: shmpipe::Connection, a: &Args, seed: u64) -> io::Result<Tally> {
    let each_way = a.bytes / 2;
    let (mut t, sent) = if a.messages {
        let (rx, tx) = conn.into_messages();
        let writer = std::thread::spawn(move || message_writer(tx, each_way, seed));
        let t = message_reader(rx)?;
        (t, writer.join().expect("writer thread panicked")?)
    } else {
        let (r, w) = conn.split();
        let writer = std::thread::spawn(move || stream_writer(w, each_way, seed));
        let t = stream_reader(r, seed ^ 0xABCD)?;
        (t, writer.join().expect("writer thread panicked")?)
    };
    t.sent = sent;
    Ok(t)
}

fn report(who: &str, t: &Tally, secs: f64) {
    println!(
        "soak {who}: sent {} B, received {} B{}, {:.1} s, {:.2} GB/s received, errors {}",
        t.sent,
        t.received,
        if t.messages > 0 {
            format!(" in {} messages", t.messages)
        } else {
            String::new()
        },
        secs,
        t.received as f64 / secs / 1e9,
        t.errors
    );
}

/// Whether a side received all the peer sent: exactly half the total in
/// stream mode; in message mode the sender stops at the first message that
/// reaches half, so at least that much.
fn received_all(a: &Args, t: &Tally) -> bool {
    if a.messages {
        t.received >= a.bytes / 2
    } else {
        t.received == a.bytes / 2
    }
}

fn main() -> ExitCode {
    let a = parse_args();
    let mut options = shmpipe::Options::new();
    options.capacity(a.capacity);

    if let Some(path) = &a.connect {
        let start = Instant::now();
        let conn = options.connect(path).expect("soak client: connect");
        let t = run_side(conn, &a, a.seed.wrapping_mul(3)).expect("soak client: I/O error");
        report("client", &t, start.elapsed().as_secs_f64());
        return if t.errors == 0 && received_all(&a, &t) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }

    let path = std::env::temp_dir().join(format!("shmpipe-soak-{}.sock", std::process::id()));
    let mut listener = shmpipe::Listener::bind(&path).expect("bind");
    listener.set_options(options.clone());
    println!(
        "soak: {} bytes across both pipes ({} each way), {} mode, capacity {}, seed {}",
        a.bytes,
        a.bytes / 2,
        if a.messages { "message" } else { "stream" },
        a.capacity,
        a.seed
    );
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.arg("--connect").arg(&path);
    cmd.args(["--bytes", &a.bytes.to_string()]);
    cmd.args(["--capacity", &a.capacity.to_string()]);
    cmd.args(["--seed", &a.seed.to_string()]);
    if a.messages {
        cmd.arg("--messages");
    }
    let mut child = cmd.spawn().expect("spawn the client");
    let start = Instant::now();
    let conn = listener.accept().expect("accept");
    let t = run_side(conn, &a, a.seed).expect("soak server: I/O error");
    let secs = start.elapsed().as_secs_f64();
    let status = child.wait().expect("wait for the client");
    report("server", &t, secs);
    let total = t.sent + t.received;
    println!(
        "soak total: {} B moved in {:.1} s = {:.2} GB/s, server errors {}, client {}",
        total,
        secs,
        total as f64 / secs / 1e9,
        t.errors,
        if status.success() { "ok" } else { "FAILED" }
    );
    if t.errors == 0 && received_all(&a, &t) && status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
