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
//!   (or BUSY: the server sheds the connection, the body says why; it may
//!   come before the server has read the hello, and the server hangs up)
//! ```
//!
//! A malformed request (unknown opcode, short or trailing arguments, a
//! length past the frame, a bad value) gets a `BAD_REQUEST` reply and the
//! connection goes on; a bad header or a frame over `max_frame` ends the
//! connection (its framing can no longer be trusted).
//!
//! # Examples
//!
//! A request frame for opcode 0 with two `u32` arguments, built and read
//! back by hand:
//!
//! ```
//! use shmpipe::rpc::wire;
//! let mut frame = Vec::new();
//! frame.extend_from_slice(&wire::header(8, 0));
//! frame.extend_from_slice(&2u32.to_ne_bytes());
//! frame.extend_from_slice(&3u32.to_ne_bytes());
//!
//! let word = u64::from_le_bytes(frame[..wire::HEADER].try_into().unwrap());
//! let (len, op) = wire::parse_header(word).expect("a frame");
//! assert_eq!((len, op), (8, 0));
//! assert_eq!(frame.len(), wire::HEADER + len as usize);
//! ```

use std::io;

// Where the dispatcher's types were before dispatch.rs: their old paths.
#[doc(hidden)]
pub use crate::dispatch::{Refused, Reply};

/// This format's version, sent in the hello.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// // The hello's body starts with it.
/// let mut hello = [0u8; wire::HELLO_LEN];
/// hello[..4].copy_from_slice(&wire::VERSION.to_ne_bytes());
/// assert_eq!(u32::from_ne_bytes(hello[..4].try_into().unwrap()), 1);
/// ```
pub const VERSION: u32 = 1;
/// Bytes in a frame header.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// assert_eq!(wire::header(0, wire::OK).len(), wire::HEADER);
/// ```
pub const HEADER: usize = 8;
/// The last two header bytes: catches a peer that does not speak this.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let h = wire::header(5, wire::OK);
/// assert_eq!(u16::from_le_bytes([h[6], h[7]]), wire::TAG);
/// assert_eq!(wire::parse_header(5), None); // no tag: not a frame
/// ```
pub const TAG: u16 = 0x5052; // "RP"
/// The hello's opcode.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let hello = wire::header(wire::HELLO_LEN as u32, wire::HELLO);
/// assert_eq!(
///     wire::parse_header(u64::from_le_bytes(hello)),
///     Some((16, wire::HELLO))
/// );
/// ```
pub const HELLO: u16 = 0xffff;
/// Reply status: the call ran; the body holds its results.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// // A reply of 4 result bytes.
/// let h = wire::header(4, wire::OK);
/// assert_eq!(wire::parse_header(u64::from_le_bytes(h)), Some((4, wire::OK)));
/// ```
pub const OK: u16 = 0;
/// Reply status: the request was malformed; the body says why.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let why = shmpipe::rpc::Refused::UnknownOp.message();
/// let h = wire::header(why.len() as u32, wire::BAD_REQUEST);
/// assert_eq!(
///     wire::parse_header(u64::from_le_bytes(h)),
///     Some((why.len() as u32, wire::BAD_REQUEST))
/// );
/// ```
pub const BAD_REQUEST: u16 = 1;
/// Reply status: the hello named another interface or version.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let h = wire::header(0, wire::MISMATCH);
/// let (_, status) = wire::parse_header(u64::from_le_bytes(h)).unwrap();
/// assert_eq!(status, wire::MISMATCH); // the body names the server's interface
/// ```
pub const MISMATCH: u16 = 2;
/// Reply status: the server sheds this connection (it serves as many
/// clients as it may, from this process or user, or cannot take this
/// one's requests now); the body says why. The server may send it before
/// it reads anything, in place of the hello's reply, and then hangs up.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// let why = "too many connections from process 42";
/// let h = wire::header(why.len() as u32, wire::BUSY);
/// let (_, status) = wire::parse_header(u64::from_le_bytes(h)).unwrap();
/// assert_eq!(status, wire::BUSY);
/// ```
pub const BUSY: u16 = 3;
/// Bytes in the hello request's body.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::wire;
/// // VERSION: u32, interface id: u64, interface version: u32.
/// assert_eq!(wire::HELLO_LEN, 4 + 8 + 4);
/// ```
pub const HELLO_LEN: usize = 16;

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

/// The error for a reply that breaks the format (the stubs', and the file
/// client's, which reads its replies by hand).
#[doc(hidden)]
#[cold]
pub fn bad_reply(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("shmpipe rpc: malformed reply ({what})"),
    )
}
