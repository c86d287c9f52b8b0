//! The RPC wire format, version [`VERSION`]: frames on a byte stream (a
//! shmpipe connection's two pipes, or a Unix socket), one request and one
//! reply per call, replies in request order.
//!
//! ```text
//! frame:    [ len: u32 | code: u16 | TAG: u16 ][ body: len bytes ]
//!             code = opcode (request) or status (reply); native byte order
//!             (both ends share a machine); len <= the interface's max_frame
//!
//! request body:  [ fixed part ][ tail ]
//!   fixed part:  each parameter in order: plain data by its bytes
//!                (zerocopy, unaligned); `&[u8]`, `&str`, `Vec<u8>`,
//!                `String`: u32 length; `&mut [u8]`: u32 length wanted
//!   tail:        the bytes of the variable parameters, in order
//!
//! reply body (status OK):
//!   [ each `&mut [u8]` parameter's bytes, in order, full length ][ result ]
//!   result:  plain data: its bytes;  Vec<u8>/String: u32 length + bytes;
//!            Result<T, E>: u8 tag (0 Ok, 1 Err) + T or E;  (): nothing
//! reply body (other status): a UTF-8 message saying why
//!
//! hello (first request, opcode HELLO):
//!   [ VERSION: u32 | interface id: u64 | interface version: u32 ]
//! its reply: status OK or MISMATCH, body
//!   [ VERSION: u32 | id: u64 | version: u32 | name: UTF-8 ] of the server
//! ```
//!
//! A malformed request (unknown opcode, short or trailing arguments, a
//! length past the frame, a bad value) gets a `BAD_REQUEST` reply and the
//! connection goes on; a bad header or a frame over `max_frame` ends the
//! connection (its framing can no longer be trusted).

use std::io;

use zerocopy::TryFromBytes;

use super::{Interface, Transport};

// Where the dispatcher's types were before dispatch.rs: their old paths.
#[doc(hidden)]
pub use crate::dispatch::{Refused, Reply};

/// This format's version, sent in the hello.
pub const VERSION: u32 = 1;
/// Bytes in a frame header.
pub const HEADER: usize = 8;
/// The last two header bytes: catches a peer that does not speak this.
pub const TAG: u16 = 0x5052; // "RP"
/// The hello's opcode.
pub const HELLO: u16 = 0xffff;
/// Reply status: the call ran; the body holds its results.
pub const OK: u16 = 0;
/// Reply status: the request was malformed; the body says why.
pub const BAD_REQUEST: u16 = 1;
/// Reply status: the hello named another interface or version.
pub const MISMATCH: u16 = 2;
/// Bytes in the hello request's body.
pub const HELLO_LEN: usize = 16;

/// A length as the u32 the format carries.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe::rpc::wire::len32(5)?, 5);
/// assert!(shmpipe::rpc::wire::len32(usize::MAX).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn len32(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| too_big())
}

#[cold]
fn too_big() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "shmpipe rpc: request larger than the interface's max_frame",
    )
}

/// Writes a request header into `f[..HEADER]` for a body of `body` bytes
/// whose reply carries `out` bytes of out buffers, checking both against
/// the interface's limit.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::{wire, Interface};
/// let iface = Interface { name: "Calc", id: 1, version: 1, max_frame: 64 };
/// let mut f = [0u8; wire::HEADER];
/// wire::request_header(&mut f, 3, 8, 0, &iface)?;
/// assert_eq!(wire::parse_header(u64::from_le_bytes(f)), Some((8, 3)));
/// assert!(wire::request_header(&mut f, 3, 65, 0, &iface).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn request_header(
    f: &mut [u8],
    op: u16,
    body: usize,
    out: usize,
    iface: &Interface,
) -> io::Result<()> {
    if body > iface.max_frame as usize || out > iface.max_frame as usize {
        return Err(too_big());
    }
    f[..HEADER].copy_from_slice(&header(body as u32, op));
    Ok(())
}

/// A frame header.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let h = wire::header(12, wire::OK);
/// assert_eq!(wire::parse_header(u64::from_le_bytes(h)), Some((12, wire::OK)));
/// assert_eq!(u64::from_le_bytes(h), wire::ok_header(12));
/// assert_eq!(wire::parse_header(0), None); // no tag: not a frame
/// ```
#[inline(always)]
pub const fn header(len: u32, code: u16) -> [u8; HEADER] {
    header_word(len, code).to_le_bytes()
}

/// A frame header as the little-endian word it is read as.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// assert_eq!(wire::header_word(4, wire::OK).to_le_bytes(), wire::header(4, wire::OK));
/// ```
#[inline(always)]
pub const fn header_word(len: u32, code: u16) -> u64 {
    len as u64 | (code as u64) << 32 | (TAG as u64) << 48
}

/// The header of an `OK` reply of `len` bytes: a stub whose reply has a
/// fixed size checks the whole header with one compare.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// assert_eq!(wire::ok_header(4), wire::header_word(4, wire::OK));
/// ```
#[inline(always)]
pub const fn ok_header(len: usize) -> u64 {
    header_word(len as u32, OK)
}

/// Splits a header word into (length, code), checking its tag.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// assert_eq!(wire::parse_header(wire::header_word(9, 2)), Some((9, 2)));
/// assert_eq!(wire::parse_header(9), None);
/// ```
#[inline(always)]
pub fn parse_header(h: u64) -> Option<(u32, u16)> {
    if (h >> 48) as u16 != TAG {
        return None;
    }
    Some((h as u32, (h >> 32) as u16))
}

/// Checks a reply header; returns the body length to be read, at most
/// `max` (the interface's `max_frame`: a longer reply is `InvalidData`, so
/// a server cannot make the client allocate what it likes). A reply that
/// is not `OK` is read and returned as an error.
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use shmpipe::rpc::{wire, Transport, UnixTransport};
/// let (a, mut server) = std::os::unix::net::UnixStream::pair()?;
/// let mut t = UnixTransport::new(a);
/// server.write_all(&wire::header(3, wire::BAD_REQUEST))?;
/// server.write_all(b"no!")?;
/// let h = t.call()?;
/// let e = wire::expect_ok(&mut t, h, 64).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn expect_ok<T: Transport>(t: &mut T, h: u64, max: u32) -> io::Result<usize> {
    match parse_header(h) {
        Some((len, OK)) if len <= max => Ok(len as usize),
        Some((_, OK)) => Err(bad_reply("longer than the interface's max_frame")),
        other => Err(refused(t, other)),
    }
}

#[cold]
#[inline(never)]
fn refused<T: Transport>(t: &mut T, h: Option<(u32, u16)>) -> io::Error {
    let Some((len, status)) = h else {
        return bad_reply("frame header");
    };
    let mut msg = vec![0u8; (len as usize).min(4096)];
    if let Err(e) = t
        .take(&mut msg)
        .and_then(|()| t.skip(len as usize - msg.len()))
    {
        return e;
    }
    t.done();
    let msg = String::from_utf8_lossy(&msg);
    match status {
        BAD_REQUEST => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("shmpipe rpc: the server refused the request: {msg}"),
        ),
        MISMATCH => io::Error::new(io::ErrorKind::ConnectionRefused, msg.into_owned()),
        s => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("shmpipe rpc: unknown reply status {s}: {msg}"),
        ),
    }
}

/// The error for a reply that breaks the format.
///
/// # Examples
///
/// ```
/// let e = shmpipe::rpc::wire::bad_reply("short");
/// assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
/// ```
#[cold]
pub fn bad_reply(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("shmpipe rpc: malformed reply ({what})"),
    )
}

/// Reads exactly `dst.len()` bytes of the reply (an out buffer), of the
/// `rest` the reply's header announced; `InvalidData` past it.
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use shmpipe::rpc::{wire, Transport, UnixTransport};
/// let (a, mut server) = std::os::unix::net::UnixStream::pair()?;
/// let mut t = UnixTransport::new(a);
/// server.write_all(&wire::header(6, wire::OK))?;
/// server.write_all(&[1, 2])?;
/// server.write_all(&3u32.to_ne_bytes())?;
/// let h = t.call()?;
/// let mut rest = wire::expect_ok(&mut t, h, 64)?;
/// let mut out = [0u8; 2];
/// wire::take_bytes(&mut t, &mut rest, &mut out)?;
/// let mut v = [0u8; 4];
/// wire::take_bytes(&mut t, &mut rest, &mut v)?;
/// assert_eq!((out, wire::decode::<u32>(&v)?), ([1, 2], 3));
/// wire::finish(&mut t, rest)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn take_bytes<T: Transport>(t: &mut T, rest: &mut usize, dst: &mut [u8]) -> io::Result<()> {
    if dst.len() > *rest {
        return Err(bad_reply("short"));
    }
    *rest -= dst.len();
    t.take(dst)
}

/// Decodes one plain-data value read from a reply, checking its bit
/// pattern.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// assert!(wire::decode::<bool>(&[1])?);
/// assert!(wire::decode::<bool>(&[2]).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn decode<V: TryFromBytes>(b: &[u8]) -> io::Result<V> {
    V::try_read_from_bytes(b).map_err(|_| bad_reply("value out of range"))
}

/// Reads a length-prefixed byte string (its length checked against the
/// reply's `rest` before anything is allocated).
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use shmpipe::rpc::{wire, Transport, UnixTransport};
/// let (a, mut server) = std::os::unix::net::UnixStream::pair()?;
/// let mut t = UnixTransport::new(a);
/// server.write_all(&wire::header(6, wire::OK))?;
/// server.write_all(&2u32.to_ne_bytes())?;
/// server.write_all(b"hi")?;
/// let h = t.call()?;
/// let mut rest = wire::expect_ok(&mut t, h, 64)?;
/// assert_eq!(wire::take_vec(&mut t, &mut rest)?, b"hi");
/// wire::finish(&mut t, rest)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn take_vec<T: Transport>(t: &mut T, rest: &mut usize) -> io::Result<Vec<u8>> {
    let mut l = [0u8; 4];
    take_bytes(t, rest, &mut l)?;
    let len = u32::from_ne_bytes(l) as usize;
    if len > *rest {
        return Err(bad_reply("length past the frame"));
    }
    let mut v = vec![0u8; len];
    take_bytes(t, rest, &mut v)?;
    Ok(v)
}

/// Reads a length-prefixed UTF-8 string.
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use shmpipe::rpc::{wire, Transport, UnixTransport};
/// let (a, mut server) = std::os::unix::net::UnixStream::pair()?;
/// let mut t = UnixTransport::new(a);
/// server.write_all(&wire::header(6, wire::OK))?;
/// server.write_all(&2u32.to_ne_bytes())?;
/// server.write_all(&[0xff, 0xfe])?;
/// let h = t.call()?;
/// let mut rest = wire::expect_ok(&mut t, h, 64)?;
/// let e = wire::take_string(&mut t, &mut rest).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn take_string<T: Transport>(t: &mut T, rest: &mut usize) -> io::Result<String> {
    String::from_utf8(take_vec(t, rest)?).map_err(|_| bad_reply("string not UTF-8"))
}

/// Ends reading a reply: it must have been read whole (`InvalidData`
/// otherwise, with the rest skipped, so the next reply is read aright).
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use shmpipe::rpc::{wire, Transport, UnixTransport};
/// let (a, mut server) = std::os::unix::net::UnixStream::pair()?;
/// let mut t = UnixTransport::new(a);
/// server.write_all(&wire::header(2, wire::OK))?;
/// server.write_all(b"..")?;
/// let h = t.call()?;
/// let rest = wire::expect_ok(&mut t, h, 64)?;
/// assert!(wire::finish(&mut t, rest).is_err()); // two bytes left over
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline(always)]
pub fn finish<T: Transport>(t: &mut T, rest: usize) -> io::Result<()> {
    if rest != 0 {
        return Err(trailing(t, rest));
    }
    t.done();
    Ok(())
}

#[cold]
fn trailing<T: Transport>(t: &mut T, rest: usize) -> io::Error {
    if let Err(e) = t.skip(rest) {
        return e;
    }
    t.done();
    bad_reply("trailing bytes")
}
