//! The plumbing `#[shmpipe::service]`'s output names, reached as that code
//! reaches it (through `__private`): the fast path's frame and outcome,
//! the client's channel and its guard, and the writing of requests and
//! reading of replies the stubs call.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use shmpipe::rpc::__private::{
    bad_reply, decode, expect_ok, finish, joined, len32, request_header, take_bytes, take_string,
    take_vec, Channel, Cursor, Fixed, FrameOut, ShmLanes,
};
use shmpipe::rpc::{wire, Interface, Refused, ShmTransport, Transport, UnixTransport};

#[shmpipe::service]
trait Ping {
    fn ping(&self, x: u32) -> u32;
}

struct P;

impl Ping for P {
    fn ping(&self, x: u32) -> u32 {
        x + 1
    }
}

/// A server of `Ping` on a fresh path, on a thread.
fn ping_server(what: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "shmpipe-private-{what}-{}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let listener = shmpipe::Listener::bind(&path).unwrap();
    std::thread::spawn(move || shmpipe::rpc::serve(listener, |_| PingServer(P)));
    path
}

fn channel(path: &PathBuf) -> Channel<ShmTransport> {
    let t = ShmTransport::new(shmpipe::connect(path).unwrap());
    Channel::new(t, &PingClient::<ShmTransport>::INTERFACE).unwrap()
}

/// A transport reading the reply bytes `reply` (the header first).
fn replying(reply: &[&[u8]]) -> (UnixTransport, u64) {
    let (a, mut server) = UnixStream::pair().unwrap();
    for part in reply {
        server.write_all(part).unwrap();
    }
    let mut t = UnixTransport::new(a);
    let h = t.call().unwrap();
    (t, h)
}

#[test]
fn channel_greets_and_gives_its_transport_back() {
    let path = ping_server("channel");
    let c = channel(&path);
    let _t: ShmTransport = c.into_transport();
}

#[test]
fn channel_is_held_for_one_call_at_a_time() {
    let path = ping_server("guard");
    let c = channel(&path);
    let held = c.transport().unwrap();
    assert_eq!(c.transport().unwrap_err().kind(), ErrorKind::WouldBlock);
    drop(held);
    assert!(c.transport().is_ok());
}

#[test]
fn fixed_and_frame_out() {
    let f: Fixed<'_, ShmTransport, 4> = Fixed::Done(7u32.to_ne_bytes());
    assert!(matches!(f, Fixed::Done(b) if u32::from_ne_bytes(b) == 7));
    let mut buf = [0u8; 12];
    let mut f = FrameOut::new(&mut buf);
    f.put(0, &wire::header(4, 1));
    f.put(8, &7u32);
    assert_eq!(&buf[8..], &7u32.to_ne_bytes());
    // Lanes not lent: every call goes the general way.
    let _ = ShmLanes::default();
}

#[test]
fn joined_takes_the_value_or_the_error() {
    assert_eq!(joined(Ok(()), Some(5u32)).unwrap(), 5);
    let gone = joined::<u32>(Err(ErrorKind::BrokenPipe.into()), None).unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::BrokenPipe);
    // A step that said `Ok` without leaving its value: an error, not a panic.
    let lost = joined::<u32>(Ok(()), None).unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::InvalidData);
}

#[test]
fn request_lengths_and_header() {
    assert_eq!(len32(5).unwrap(), 5);
    assert!(len32(usize::MAX).is_err());
    let iface = Interface {
        name: "Calc",
        id: 1,
        version: 1,
        max_frame: 64,
    };
    let mut f = [0u8; wire::HEADER];
    request_header(&mut f, 3, 8, 0, &iface).unwrap();
    assert_eq!(wire::parse_header(u64::from_le_bytes(f)), Some((8, 3)));
    assert!(request_header(&mut f, 3, 65, 0, &iface).is_err());
}

#[test]
fn a_refusal_comes_back_as_an_error() {
    let (mut t, h) = replying(&[&wire::header(3, wire::BAD_REQUEST), b"no!"]);
    let e = expect_ok(&mut t, h, 64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn reply_read_part_by_part() {
    let v = 3u32.to_ne_bytes();
    let (mut t, h) = replying(&[&wire::header(6, wire::OK), &[1, 2], &v]);
    let mut rest = expect_ok(&mut t, h, 64).unwrap();
    let mut out = [0u8; 2];
    take_bytes(&mut t, &mut rest, &mut out).unwrap();
    let mut v = [0u8; 4];
    take_bytes(&mut t, &mut rest, &mut v).unwrap();
    assert_eq!((out, decode::<u32>(&v).unwrap()), ([1, 2], 3));
    finish(&mut t, rest).unwrap();
}

#[test]
fn plain_data_is_checked() {
    assert!(decode::<bool>(&[1]).unwrap());
    assert_eq!(
        decode::<bool>(&[2]).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
    assert_eq!(bad_reply("short").kind(), ErrorKind::InvalidData);
}

#[test]
fn byte_strings_and_text() {
    let n = 2u32.to_ne_bytes();
    let (mut t, h) = replying(&[&wire::header(6, wire::OK), &n, b"hi"]);
    let mut rest = expect_ok(&mut t, h, 64).unwrap();
    assert_eq!(take_vec(&mut t, &mut rest).unwrap(), b"hi");
    finish(&mut t, rest).unwrap();

    let (mut t, h) = replying(&[&wire::header(6, wire::OK), &n, &[0xff, 0xfe]]);
    let mut rest = expect_ok(&mut t, h, 64).unwrap();
    let e = take_string(&mut t, &mut rest).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
}

#[test]
fn a_reply_must_be_read_whole() {
    let (mut t, h) = replying(&[&wire::header(2, wire::OK), b".."]);
    let rest = expect_ok(&mut t, h, 64).unwrap();
    assert!(finish(&mut t, rest).is_err()); // two bytes left over
}

#[test]
fn cursor_reads_arguments_in_place() {
    // fixed part: a u16 and a length; tail: that many bytes
    let body = [7, 0, 3, 0, 0, 0, b'a', b'b', b'c'];
    let mut c = Cursor::new(&body, 6).unwrap();
    assert_eq!(c.fixed::<u16>().unwrap(), 7);
    assert_eq!(c.bytes().unwrap(), b"abc");
    c.finish().unwrap();
    let mut c = Cursor::new(&[2], 1).unwrap();
    assert_eq!(c.fixed::<bool>(), Err(Refused::BadValue));
    assert_eq!(Cursor::new(&[1, 0], 4).unwrap_err(), Refused::Short);
}
