//! `#[shmpipe::service]` across processes: every argument kind both ways,
//! over shmpipe and over a Unix socket; interface mismatch refused;
//! randomized malformed requests against a running server, which goes on
//! serving an honest client; a client that stops reading harms no one.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use common::{fork, watchdog, Rng};
use shmpipe::rpc::{self, UnixTransport};
use zerocopy::{Immutable, IntoBytes, KnownLayout, TryFromBytes};

const LIMIT: Duration = Duration::from_secs(120);

/// A `#[repr(C)]` plain-data struct.
#[derive(Debug, Clone, Copy, PartialEq, IntoBytes, TryFromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Point {
    x: i32,
    y: i32,
    z: f64,
}

/// A serialisable error.
#[derive(Debug, Clone, Copy, PartialEq, IntoBytes, TryFromBytes, Immutable, KnownLayout)]
#[repr(u8)]
enum Oops {
    Odd = 1,
    Big = 2,
}

#[allow(clippy::too_many_arguments)]
#[shmpipe::service(max_frame = 65536)]
trait Kinds {
    fn add(&self, a: u32, b: u32) -> u32;
    fn mix(&self, a: i8, b: u16, c: i64, d: u128, e: f32, f: f64, g: bool) -> f64;
    fn not(&self, g: bool) -> bool;
    fn reverse(&self, v: [u16; 5]) -> [u16; 5];
    fn scale(&self, p: Point, k: i32) -> Point;
    fn echo(&self, b: &[u8]) -> Vec<u8>;
    fn fill(&self, seed: u8, out: &mut [u8]) -> u32;
    fn two(&self, a: &mut [u8], tag: u8, b: &mut [u8]);
    fn sum(&self, v: Vec<u8>) -> u64;
    fn greet(&self, name: &str) -> String;
    fn own(&self, s: String) -> String;
    fn half(&self, x: u32) -> Result<u32, Oops>;
    fn text(&self, x: u32) -> Result<String, String>;
    fn nothing(&self);
    fn boom(&self, x: u32) -> u32;
}

struct Impl;

#[allow(clippy::too_many_arguments)]
impl Kinds for Impl {
    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    fn mix(&self, a: i8, b: u16, c: i64, d: u128, e: f32, f: f64, g: bool) -> f64 {
        a as f64 + b as f64 + c as f64 + d as f64 + e as f64 + f + if g { 0.5 } else { 0.0 }
    }
    fn not(&self, g: bool) -> bool {
        !g
    }
    fn reverse(&self, mut v: [u16; 5]) -> [u16; 5] {
        v.reverse();
        v
    }
    fn scale(&self, p: Point, k: i32) -> Point {
        Point {
            x: p.x.wrapping_mul(k),
            y: p.y.wrapping_mul(k),
            z: p.z * k as f64,
        }
    }
    fn echo(&self, b: &[u8]) -> Vec<u8> {
        b.to_vec()
    }
    fn fill(&self, seed: u8, out: &mut [u8]) -> u32 {
        for (i, b) in out.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        out.len() as u32
    }
    fn two(&self, a: &mut [u8], tag: u8, b: &mut [u8]) {
        a.fill(tag);
        b.fill(tag.wrapping_add(1));
    }
    fn sum(&self, v: Vec<u8>) -> u64 {
        v.iter().map(|&b| u64::from(b)).sum()
    }
    fn greet(&self, name: &str) -> String {
        format!("hello, {name}")
    }
    fn own(&self, s: String) -> String {
        s.chars().rev().collect()
    }
    fn half(&self, x: u32) -> Result<u32, Oops> {
        match x {
            x if x > 1000 => Err(Oops::Big),
            x if x % 2 == 1 => Err(Oops::Odd),
            x => Ok(x / 2),
        }
    }
    fn text(&self, x: u32) -> Result<String, String> {
        if x == 0 {
            Err("zero".into())
        } else {
            Ok("x".repeat(x as usize))
        }
    }
    fn nothing(&self) {}
    fn boom(&self, x: u32) -> u32 {
        assert!(x != 13, "boom: 13");
        x
    }
}

/// Every kind, checked, over any transport.
fn exercise<T: rpc::Transport>(c: &KindsClient<T>) {
    assert_eq!(c.add(2, 40).unwrap(), 42);
    assert_eq!(c.add(u32::MAX, 1).unwrap(), 0);
    assert_eq!(
        c.mix(-3, 500, -7_000_000_000, 1 << 100, 1.5, 0.25, true)
            .unwrap(),
        { -3.0 + 500.0 - 7e9 + (1u128 << 100) as f64 + 1.5 + 0.25 + 0.5 }
    );
    assert!(c.not(false).unwrap());
    assert!(!c.not(true).unwrap());
    assert_eq!(c.reverse([1, 2, 3, 4, 5]).unwrap(), [5, 4, 3, 2, 1]);
    let p = c
        .scale(
            Point {
                x: 1,
                y: -2,
                z: 0.5,
            },
            3,
        )
        .unwrap();
    assert_eq!(
        p,
        Point {
            x: 3,
            y: -6,
            z: 1.5
        }
    );
    for n in [0usize, 1, 7, 4096, 60000] {
        let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
        assert_eq!(c.echo(&data).unwrap(), data);
        let mut out = vec![0u8; n];
        assert_eq!(c.fill(9, &mut out).unwrap(), n as u32);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, &b)| b == 9u8.wrapping_add(i as u8)));
        assert_eq!(
            c.sum(data.clone()).unwrap(),
            data.iter().map(|&b| u64::from(b)).sum()
        );
    }
    let (mut a, mut b) = ([0u8; 3], [0u8; 5]);
    c.two(&mut a, 7, &mut b).unwrap();
    assert_eq!((a, b), ([7; 3], [8; 5]));
    assert_eq!(c.greet("shm").unwrap(), "hello, shm");
    assert_eq!(c.own("abc".to_string()).unwrap(), "cba");
    assert_eq!(c.half(8).unwrap(), Ok(4));
    assert_eq!(c.half(7).unwrap(), Err(Oops::Odd));
    assert_eq!(c.half(2000).unwrap(), Err(Oops::Big));
    assert_eq!(c.text(3).unwrap(), Ok("xxx".to_string()));
    assert_eq!(c.text(0).unwrap(), Err("zero".to_string()));
    c.nothing().unwrap();
    // Over the interface's limit: refused by the client stub, and the
    // connection goes on.
    let big = vec![0u8; 70000];
    assert_eq!(c.echo(&big).unwrap_err().kind(), ErrorKind::InvalidInput);
    let mut big_out = vec![0u8; 70000];
    assert_eq!(
        c.fill(1, &mut big_out).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    // Pipelined: several requests in flight, replies in order.
    for i in 0..100 {
        c.send_add(i, i).unwrap();
    }
    for i in 0..100 {
        assert_eq!(c.recv_add().unwrap(), 2 * i);
    }
    c.send_fill(3, 16).unwrap();
    let mut out = [0u8; 16];
    assert_eq!(c.recv_fill(&mut out).unwrap(), 16);
    assert_eq!(out[15], 18);
    for i in 0..10_000u32 {
        assert_eq!(c.add(i, 1).unwrap(), i + 1);
    }
}

#[test]
fn every_kind_across_processes() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-kinds", 1 << 16);
    let client = fork({
        let path = path.clone();
        move || {
            let c = KindsClient::connect(&path).unwrap();
            exercise(&c);
            0
        }
    });
    let mut conn = rpc::Conn::new(KindsServer(Impl), listener.accept().unwrap());
    conn.serve().unwrap();
    client.join();
}

#[test]
fn every_kind_over_a_unix_socket() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let path = common::sock_path("rpc-unix");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let client = fork({
        let path = path.clone();
        move || {
            let c = KindsClient::with_transport(UnixTransport::connect(&path).unwrap()).unwrap();
            exercise(&c);
            0
        }
    });
    let (stream, _) = listener.accept().unwrap();
    let mut conn = rpc::Conn::unix(KindsServer(Impl), stream).unwrap();
    conn.serve().unwrap();
    client.join();
    let _ = std::fs::remove_file(&path);
}

mod v2 {
    /// The same trait at another version.
    #[allow(dead_code)]
    #[shmpipe::service(version = 2, max_frame = 65536)]
    pub trait Kinds {
        fn add(&self, a: u32, b: u32) -> u32;
    }
}

#[allow(dead_code)]
#[shmpipe::service]
trait Other {
    fn add(&self, a: u32, b: u32) -> u32;
}

#[test]
fn interface_mismatch_is_refused() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-mismatch", 1 << 16);
    let client = fork({
        let path = path.clone();
        move || {
            let e = v2::KindsClient::connect(&path).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains("`Kinds` version 1") && msg.contains("`Kinds` version 2"),
                "{msg}"
            );
            let e = OtherClient::connect(&path).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
            assert!(e.to_string().contains("`Other` version 1"), "{e}");
            // The right one still gets in.
            assert_eq!(KindsClient::connect(&path).unwrap().add(1, 2).unwrap(), 3);
            0
        }
    });
    for _ in 0..3 {
        let mut conn = rpc::Conn::new(KindsServer(Impl), listener.accept().unwrap());
        conn.serve().unwrap();
    }
    client.join();
}

/// Writes a frame header as the wire format lays it out.
fn frame(len: u32, op: u16, tag: u16) -> [u8; 8] {
    (u64::from(len) | u64::from(op) << 32 | u64::from(tag) << 48).to_le_bytes()
}

fn hello() -> Vec<u8> {
    let i = KindsClient::<rpc::ShmTransport>::INTERFACE;
    let mut h = frame(16, rpc::wire::HELLO, rpc::wire::TAG).to_vec();
    h.extend_from_slice(&rpc::wire::VERSION.to_ne_bytes());
    h.extend_from_slice(&i.id.to_ne_bytes());
    h.extend_from_slice(&i.version.to_ne_bytes());
    h
}

/// One round of garbage from a hostile client.
fn hostile_round(path: &std::path::Path, rng: &mut Rng) {
    let Ok(conn) = shmpipe::connect(path) else {
        return;
    };
    let (mut r, mut w) = conn.split();
    if rng.upto(4) > 0 {
        w.write_all(&hello()).unwrap();
    }
    let mut expect_replies = 0;
    for _ in 0..rng.upto(20) {
        let op = match rng.upto(3) {
            0 => rng.next() as u16,
            _ => rng.upto(15) as u16,
        };
        let len = match rng.upto(10) {
            0 => rng.next() as u32,
            1 => 65537 + rng.upto(100) as u32,
            _ => rng.upto(64) as u32,
        };
        let tag = if rng.upto(20) == 0 {
            rng.next() as u16
        } else {
            rpc::wire::TAG
        };
        let mut f = frame(len, op, tag).to_vec();
        let body = (len as usize).min(64);
        f.extend((0..body).map(|_| rng.next() as u8));
        if rng.upto(10) == 0 {
            f.truncate(rng.upto(f.len()));
        }
        if w.write_all(&f).is_err() {
            return;
        }
        expect_replies += 1;
    }
    // Read what replies come; a reply with a bad status is expected.
    if rng.upto(2) == 0 && expect_replies > 0 {
        let mut buf = [0u8; 256];
        r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let _ = r.read(&mut buf);
    }
}

/// How a test runs its server: one thread through a waitset, or a
/// thread per client.
fn start_server(listener: shmpipe::Listener, one_thread: bool) {
    let shared = Arc::new(Impl);
    std::thread::spawn(move || {
        if one_thread {
            rpc::serve_waitset(listener, move |_| KindsServer(shared.clone()))
        } else {
            rpc::serve(listener, move |_| KindsServer(shared.clone()))
        }
    });
}

#[test]
fn hostile_clients_harm_no_one_on_one_thread() {
    hostile_clients_harm_no_one(true);
}

#[test]
fn hostile_clients_harm_no_one_on_threads() {
    hostile_clients_harm_no_one(false);
}

fn hostile_clients_harm_no_one(one_thread: bool) {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener(&format!("rpc-fuzz-{one_thread}"), 1 << 16);
    let rounds = common::env_count("SHMPIPE_RPC_FUZZ_ROUNDS", 400);
    let fuzzer = fork({
        let path = path.clone();
        move || {
            let mut rng = Rng::new(0x5eed_0001);
            for _ in 0..rounds {
                hostile_round(&path, &mut rng);
            }
            0
        }
    });
    let honest = fork({
        let path = path.clone();
        move || {
            let c = KindsClient::connect(&path).unwrap();
            for i in 0..20_000u32 {
                assert_eq!(c.add(i, 2).unwrap(), i + 2);
            }
            exercise(&c);
            0
        }
    });
    start_server(listener, one_thread);
    fuzzer.join();
    honest.join();
    // And after all that, a new client is served.
    let c = KindsClient::connect(&path).unwrap();
    exercise(&c);
}

#[test]
fn malformed_requests_get_error_replies() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-bad", 1 << 16);
    let client = fork({
        let path = path.clone();
        move || {
            let (mut r, mut w) = shmpipe::connect(&path).unwrap().split();
            w.write_all(&hello()).unwrap();
            let mut h = [0u8; 8];
            r.read_exact(&mut h).unwrap();
            let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
            let mut skip = vec![0u8; len];
            r.read_exact(&mut skip).unwrap();
            let cases: Vec<Vec<u8>> = vec![
                frame(0, 999, rpc::wire::TAG).to_vec(), // unknown opcode
                frame(4, 0, rpc::wire::TAG)
                    .into_iter()
                    .chain([1, 2, 3, 4])
                    .collect(), // add, short
                frame(9, 0, rpc::wire::TAG)
                    .into_iter()
                    .chain([0; 9])
                    .collect(), // trailing
                frame(1, 2, rpc::wire::TAG).into_iter().chain([7]).collect(), // bool of 7
                // echo: a length past the frame
                frame(4, 5, rpc::wire::TAG)
                    .into_iter()
                    .chain(100u32.to_ne_bytes())
                    .collect(),
                // fill: an out buffer over the limit
                frame(5, 6, rpc::wire::TAG)
                    .into_iter()
                    .chain([0])
                    .chain(1_000_000u32.to_ne_bytes())
                    .collect(),
                // greet: not UTF-8
                frame(6, 9, rpc::wire::TAG)
                    .into_iter()
                    .chain(2u32.to_ne_bytes())
                    .chain([0xff, 0xfe])
                    .collect(),
            ];
            for case in cases {
                w.write_all(&case).unwrap();
                r.read_exact(&mut h).unwrap();
                let status = u16::from_le_bytes([h[4], h[5]]);
                assert_eq!(status, rpc::wire::BAD_REQUEST, "case {case:?}");
                let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
                let mut msg = vec![0u8; len];
                r.read_exact(&mut msg).unwrap();
            }
            // Still in step: an honest add works on the same connection.
            w.write_all(&frame(8, 0, rpc::wire::TAG)).unwrap();
            w.write_all(&[2, 0, 0, 0, 3, 0, 0, 0]).unwrap();
            r.read_exact(&mut h).unwrap();
            assert_eq!(u16::from_le_bytes([h[4], h[5]]), rpc::wire::OK);
            let mut v = [0u8; 4];
            r.read_exact(&mut v).unwrap();
            assert_eq!(u32::from_ne_bytes(v), 5);
            // A method that panics: an error reply, then the end of this
            // client's connection (the server goes on).
            w.write_all(&frame(4, 14, rpc::wire::TAG)).unwrap();
            w.write_all(&13u32.to_ne_bytes()).unwrap();
            r.read_exact(&mut h).unwrap();
            assert_eq!(u16::from_le_bytes([h[4], h[5]]), rpc::wire::BAD_REQUEST);
            let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
            let mut msg = vec![0u8; len];
            r.read_exact(&mut msg).unwrap();
            assert_eq!(msg, b"the method panicked");
            assert_eq!(r.read(&mut h).unwrap(), 0);
            drop((r, w));
            let (mut r, mut w) = shmpipe::connect(&path).unwrap().split();
            w.write_all(&hello()).unwrap();
            r.read_exact(&mut h).unwrap();
            let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
            let mut skip = vec![0u8; len];
            r.read_exact(&mut skip).unwrap();
            // A frame over the limit ends the connection.
            w.write_all(&frame(1 << 20, 0, rpc::wire::TAG)).unwrap();
            assert_eq!(r.read(&mut h).unwrap(), 0);
            0
        }
    });
    let mut conn = rpc::Conn::new(KindsServer(Impl), listener.accept().unwrap());
    conn.serve().unwrap();
    drop(conn);
    let mut conn = rpc::Conn::new(KindsServer(Impl), listener.accept().unwrap());
    assert_eq!(conn.serve().unwrap_err().kind(), ErrorKind::InvalidData);
    drop(conn);
    client.join();
}

#[test]
fn a_client_that_stops_reading_blocks_only_itself_on_one_thread() {
    a_client_that_stops_reading_blocks_only_itself(true);
}

#[test]
fn a_client_that_stops_reading_blocks_only_itself_on_threads() {
    a_client_that_stops_reading_blocks_only_itself(false);
}

fn a_client_that_stops_reading_blocks_only_itself(one_thread: bool) {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener(&format!("rpc-stuck-{one_thread}"), 1 << 14);
    let stuck = fork({
        let path = path.clone();
        move || {
            let c = KindsClient::connect(&path).unwrap();
            // Requests and never a reply read: fills both rings, then blocks.
            loop {
                if c.send_add(1, 2).is_err() {
                    return 1;
                }
            }
        }
    });
    let honest = fork({
        let path = path.clone();
        move || {
            let c = KindsClient::connect(&path).unwrap();
            exercise(&c);
            0
        }
    });
    start_server(listener, one_thread);
    honest.join();
    stuck.kill();
}

/// A server whose reply claims more than the interface's `max_frame` gets
/// `InvalidData` at once: the client neither allocates what the length
/// says nor waits for bytes that will never come.
#[test]
fn a_reply_over_max_frame_is_invalid_data() {
    let _w = watchdog(LIMIT);
    let path = common::sock_path("rpc-big-reply");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut hello = [0u8; rpc::wire::HEADER + rpc::wire::HELLO_LEN];
        s.read_exact(&mut hello).unwrap();
        // Answer the hello with the client's own interface, then any
        // request with an OK reply of 2 GiB.
        let name = b"Kinds";
        let mut reply =
            rpc::wire::header((rpc::wire::HELLO_LEN + name.len()) as u32, rpc::wire::OK).to_vec();
        reply.extend_from_slice(&hello[rpc::wire::HEADER..]);
        reply.extend_from_slice(name);
        s.write_all(&reply).unwrap();
        let mut req = [0u8; 64];
        let _ = s.read(&mut req).unwrap();
        s.write_all(&rpc::wire::header(1 << 31, rpc::wire::OK))
            .unwrap();
        s.write_all(&(1u32 << 30).to_ne_bytes()).unwrap();
        s // kept open: a client that waited for the rest would hang
    });
    let c = KindsClient::with_transport(UnixTransport::connect(&path).unwrap()).unwrap();
    let e = c.echo(b"hi").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    drop(server.join().unwrap());
    let _ = std::fs::remove_file(&path);
}

/// Reads one request frame (header and body) from a raw server end.
fn read_frame(r: &mut impl Read) -> (u16, Vec<u8>) {
    let mut h = [0u8; rpc::wire::HEADER];
    r.read_exact(&mut h).unwrap();
    let (len, op) = rpc::wire::parse_header(u64::from_le_bytes(h)).unwrap();
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).unwrap();
    (op, body)
}

#[test]
fn a_hostile_server_cannot_fool_the_fast_path() {
    // The in-place fast path of a call of fixed sizes checks the reply as
    // the general path does: the whole header, the value's bit pattern.
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-hostile-server", 1 << 12);
    let server = std::thread::spawn(move || {
        let (mut r, mut w) = listener.accept().unwrap().split();
        let (op, hello) = read_frame(&mut r);
        assert_eq!(op, rpc::wire::HELLO);
        let name = b"Kinds";
        let mut reply =
            rpc::wire::header((rpc::wire::HELLO_LEN + name.len()) as u32, rpc::wire::OK).to_vec();
        reply.extend_from_slice(&hello);
        reply.extend_from_slice(name);
        w.write_all(&reply).unwrap();
        // Honest answers for a while (past the ring's end a few times).
        for _ in 0..1000 {
            let (_, body) = read_frame(&mut r);
            let a = u32::from_ne_bytes(body[..4].try_into().unwrap());
            let b = u32::from_ne_bytes(body[4..8].try_into().unwrap());
            let mut reply = rpc::wire::header(4, rpc::wire::OK).to_vec();
            reply.extend_from_slice(&a.wrapping_add(b).to_ne_bytes());
            w.write_all(&reply).unwrap();
        }
        // `not`: a bool of 2.
        read_frame(&mut r);
        let mut reply = rpc::wire::header(1, rpc::wire::OK).to_vec();
        reply.push(2);
        w.write_all(&reply).unwrap();
        // `add`: a reply of 8 bytes where 4 are due.
        read_frame(&mut r);
        let mut reply = rpc::wire::header(8, rpc::wire::OK).to_vec();
        reply.extend_from_slice(&[1; 8]);
        w.write_all(&reply).unwrap();
        // `add`: a refusal, then an honest answer.
        read_frame(&mut r);
        let mut reply = rpc::wire::header(3, rpc::wire::BAD_REQUEST).to_vec();
        reply.extend_from_slice(b"no!");
        w.write_all(&reply).unwrap();
        read_frame(&mut r);
        let mut reply = rpc::wire::header(4, rpc::wire::OK).to_vec();
        reply.extend_from_slice(&5u32.to_ne_bytes());
        w.write_all(&reply).unwrap();
        // `add`: not a frame header at all. The client may judge the
        // header, return and hang up before the rest is written: a
        // broken pipe here is the client done, not a failure.
        read_frame(&mut r);
        let _ = w.write_all(&[0xee; 12]);
        (r, w) // kept open: a client that waited for more would hang
    });
    let c = KindsClient::connect(&path).unwrap();
    for i in 0..1000u32 {
        assert_eq!(c.add(i, 7).unwrap(), i + 7);
    }
    assert_eq!(c.not(true).unwrap_err().kind(), ErrorKind::InvalidData);
    assert_eq!(c.add(1, 2).unwrap_err().kind(), ErrorKind::InvalidData);
    assert_eq!(c.add(1, 2).unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(c.add(2, 3).unwrap(), 5);
    assert_eq!(c.add(1, 2).unwrap_err().kind(), ErrorKind::InvalidData);
    drop(c);
    drop(server.join().unwrap());
    let _ = std::fs::remove_file(&path);
}

#[shmpipe::service]
trait Where {
    fn add(&self, a: u32, b: u32) -> u32;
    /// The serving thread's number (1, 2, ...).
    fn who(&self) -> u32;
}

struct Here;

static NEXT_THREAD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

thread_local! {
    static THIS_THREAD: u32 = NEXT_THREAD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

impl Where for Here {
    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    fn who(&self) -> u32 {
        THIS_THREAD.with(|t| *t)
    }
}

#[test]
fn serve_threads_deals_clients_to_its_threads() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-threads", 1 << 14);
    std::thread::spawn(move || rpc::serve_threads(listener, 2, |_| WhereServer(Here)));
    // Each client process exits with the number of the thread that
    // served it (101 if a call failed).
    let children: Vec<_> = (0..4u32)
        .map(|k| {
            let path = path.clone();
            fork(move || {
                let c = WhereClient::connect(&path).unwrap();
                for i in 0..20_000u32 {
                    assert_eq!(c.add(i, k).unwrap(), i.wrapping_add(k));
                }
                c.who().unwrap() as i32
            })
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for child in children {
        let code = child.wait(LIMIT);
        assert!((1..=2).contains(&code), "a client failed: exit code {code}");
        seen.insert(code);
    }
    assert_eq!(seen.len(), 2, "four clients dealt in turn to two threads");
    let _ = std::fs::remove_file(&path);
}

/// Every way of calling `c`, once its server is dead: each must return
/// an error (the server gone, or the client busy after a call cut short),
/// never panic.
fn calls_fail_without_panic<T: rpc::Transport>(c: &KindsClient<T>) {
    let gone = |e: std::io::Error| {
        assert!(
            matches!(
                e.kind(),
                ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ),
            "{e}"
        );
    };
    // The fast path of a call of fixed sizes, and one with no result.
    gone(c.add(1, 2).unwrap_err());
    gone(c.nothing().unwrap_err());
    gone(c.not(true).unwrap_err());
    // The general way: bytes in, bytes out, the caller's buffer.
    gone(c.echo(b"hello").unwrap_err());
    gone(c.fill(3, &mut [0u8; 16]).unwrap_err());
    gone(c.half(8).unwrap_err());
    // Pipelined: the send may still find room, the receive cannot.
    if c.send_add(1, 2).is_ok() {
        gone(c.recv_add().unwrap_err());
    }
}

#[test]
fn a_dead_server_is_an_error_of_the_call_not_a_panic() {
    // The client's methods return `io::Result`: a server killed between
    // two calls makes the next call fail, on every way a call goes.
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let (path, listener) = common::listener("rpc-dead-server", 1 << 12);
    let connecting = std::thread::spawn(move || shmpipe::connect(&path));
    let conn = listener.accept().unwrap();
    let server = fork(move || {
        let mut conn = rpc::Conn::new(KindsServer(Impl), conn);
        let _ = conn.serve();
        0
    });
    let c = KindsClient::new(connecting.join().unwrap().unwrap()).unwrap();
    assert_eq!(c.add(2, 3).unwrap(), 5);
    assert_eq!(c.echo(b"hi").unwrap(), b"hi");
    server.kill();
    assert_eq!(server.wait(LIMIT), 128 + libc::SIGKILL);
    calls_fail_without_panic(&c);
}

#[test]
fn a_dead_server_is_an_error_of_the_call_not_a_panic_over_a_unix_socket() {
    let _w = watchdog(LIMIT);
    let _s = common::serial();
    let path = common::sock_path("rpc-dead-unix");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let server = fork(move || {
        let (stream, _) = listener.accept().unwrap();
        let _ = rpc::Conn::unix(KindsServer(Impl), stream).unwrap().serve();
        0
    });
    let c = KindsClient::with_transport(UnixTransport::connect(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(c.add(2, 3).unwrap(), 5);
    server.kill();
    assert_eq!(server.wait(LIMIT), 128 + libc::SIGKILL);
    calls_fail_without_panic(&c);
}
