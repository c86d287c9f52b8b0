//! The client's side of a connection, generic over its transport: what a
//! [`Transport`] must do, the [`Channel`] a generated `FooClient` holds (the
//! transport, checked at connect, and its fast path's state), and the
//! writing of requests and reading of replies its stubs call.
//!
//! These are one knot: the transport's fast path takes the channel, the
//! channel greets the server through the reading of replies, which reads
//! through the transport.

use std::cell::{RefCell, RefMut};
use std::io;
use std::ops::{Deref, DerefMut};

use shmpipe_core::lend::FrameBytes;
use zerocopy::TryFromBytes;

use crate::wire::{self, bad_reply, header, parse_header, BAD_REQUEST, BUSY, HEADER, MISMATCH, OK};
use crate::Interface;

/// A byte stream each way, as the generated client stubs use it: how a
/// client's frames travel. The stubs call these in this order: `put`s (a
/// request), `flush` or `call` (which also waits for a reply's header),
/// `take`s and `done` (the reply).
///
/// [`ShmTransport`](crate::ShmTransport) and
/// [`UnixTransport`](crate::UnixTransport) are the two this crate has; a
/// transport of one's own (say one that wraps another, to count or hold
/// back its flushes) implements the methods above with `type Lanes = ()`.
/// (`ShmTransport` alone also has a fast path, through hidden methods
/// with defaults, that writes and reads calls of fixed sizes in place.)
///
/// # Examples
///
/// A transport that counts the requests it sends, over a Unix socket:
///
/// ```
/// use std::{cell::Cell, io, rc::Rc};
/// use shmpipe::rpc::{Transport, UnixTransport};
///
/// struct Counting {
///     inner: UnixTransport,
///     sent: Rc<Cell<usize>>,
/// }
///
/// impl Transport for Counting {
///     type Lanes = ();
///     fn put(&mut self, bytes: &[u8]) -> io::Result<()> { self.inner.put(bytes) }
///     fn flush(&mut self) -> io::Result<()> {
///         self.sent.set(self.sent.get() + 1);
///         self.inner.flush()
///     }
///     fn call(&mut self) -> io::Result<u64> {
///         self.sent.set(self.sent.get() + 1);
///         self.inner.call()
///     }
///     fn take(&mut self, dst: &mut [u8]) -> io::Result<()> { self.inner.take(dst) }
///     fn done(&mut self) { self.inner.done() }
/// }
///
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self, x: u32) -> u32; }
/// struct P;
/// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-transport-doc-{}.sock", std::process::id()));
/// let listener = std::os::unix::net::UnixListener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
/// let sent = Rc::new(Cell::new(0));
/// let inner = UnixTransport::connect(&path)?;
/// let client = PingClient::with_transport(Counting { inner, sent: sent.clone() })?;
/// assert_eq!(client.ping(41)?, 42);
/// assert_eq!(sent.get(), 2); // the hello, then the call
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), io::Error>(())
/// ```
pub trait Transport: Sized {
    /// The state a transport's fast path keeps outside it, in the client:
    /// `()` for a transport without one.
    type Lanes: Default + std::fmt::Debug;
    /// Appends request bytes, not yet sent.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// t.put(&wire::header(4, 0))?;
    /// t.put(&41u32.to_ne_bytes())?;
    /// server.set_nonblocking(true)?;
    /// let mut got = [0u8; 12];
    /// assert!(server.read(&mut got).is_err()); // nothing sent yet (`WouldBlock`)
    /// t.flush()?;
    /// server.set_nonblocking(false)?;
    /// server.read_exact(&mut got)?;
    /// assert_eq!(&got[8..], &41u32.to_ne_bytes());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Sends what was put.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// t.put(&wire::header(0, 3))?; // opcode 3, no arguments
    /// t.flush()?;
    /// let mut got = [0u8; wire::HEADER];
    /// server.read_exact(&mut got)?;
    /// assert_eq!(wire::parse_header(u64::from_le_bytes(got)), Some((0, 3)));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn flush(&mut self) -> io::Result<()>;
    /// Sends what was put and waits for the next reply's header (as the
    /// little-endian word it is: see [`wire`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// # let mut request = [0u8; wire::HEADER];
    /// // The server's reply, there before the request: `call` does not wait.
    /// server.write_all(&wire::header(4, wire::OK))?;
    /// server.write_all(&42u32.to_ne_bytes())?;
    /// t.put(&wire::header(0, 0))?;
    /// let h = t.call()?;
    /// assert_eq!(wire::parse_header(h), Some((4, wire::OK)));
    /// # server.read_exact(&mut request)?; // the request was sent too
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn call(&mut self) -> io::Result<u64>;
    /// Reads exactly `dst.len()` reply bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// server.write_all(&wire::header(4, wire::OK))?;
    /// server.write_all(&42u32.to_ne_bytes())?;
    /// let (len, _) = wire::parse_header(t.call()?).unwrap();
    /// let mut result = [0u8; 4];
    /// t.take(&mut result[..len as usize])?;
    /// assert_eq!(u32::from_ne_bytes(result), 42);
    /// t.done();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()>;
    /// Drops `n` reply bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// server.write_all(&wire::header(8, wire::OK))?;
    /// server.write_all(&[1, 2, 3, 4, 5, 6, 7, 8])?;
    /// t.call()?;
    /// t.skip(6)?;
    /// let mut last = [0u8; 2];
    /// t.take(&mut last)?;
    /// assert_eq!(last, [7, 8]);
    /// t.done();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn skip(&mut self, n: usize) -> io::Result<()> {
        let mut buf = [0u8; 512];
        let mut left = n;
        while left > 0 {
            let k = left.min(buf.len());
            self.take(&mut buf[..k])?;
            left -= k;
        }
        Ok(())
    }
    /// The reply has been read.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::io::{Read, Write};
    /// # use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{wire, Transport, UnixTransport};
    /// # let (client_end, mut server) = UnixStream::pair()?;
    /// let mut t = UnixTransport::new(client_end);
    /// server.write_all(&wire::header(0, wire::OK))?; // the reply of a call returning `()`
    /// let h = t.call()?;
    /// assert_eq!(wire::parse_header(h), Some((0, wire::OK)));
    /// t.done(); // nothing to read: the reply is over
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn done(&mut self);
    /// Lends `lanes` what the fast path needs (after a call made the
    /// general way, and at connect).
    #[doc(hidden)]
    fn lend(lanes: &Self::Lanes, t: &mut Self) {
        let _ = (lanes, t);
    }
    /// Takes the lanes back: the transport learns how far the fast path
    /// went, before a call made the general way.
    #[doc(hidden)]
    fn revoke(lanes: &Self::Lanes, t: &mut Self) {
        let _ = (lanes, t);
    }
    /// A whole call whose request frame is `Q` bytes (written by `fill`)
    /// and whose reply, if it is the plain `OK` of `R` bytes whose header
    /// is `ok`, is returned in [`Fixed::Done`]. The default does nothing
    /// ([`Fixed::Unsent`]): the stub makes the call the general way.
    #[doc(hidden)]
    #[inline(always)]
    fn call_fixed<const Q: usize, const R: usize>(
        channel: &Channel<Self>,
        fill: impl FnOnce(&mut FrameOut<'_, Q>),
        ok: u64,
    ) -> Fixed<'_, Self, R> {
        let _ = (channel, fill, ok);
        Fixed::Unsent
    }
}

/// What [`Transport::call_fixed`] did.
pub enum Fixed<'a, T: Transport, const R: usize> {
    /// The call is over: the reply's `R` bytes, read and released.
    Done([u8; R]),
    /// The request was sent (or failed: the transport keeps the error);
    /// read the reply the general way, through this channel (handed back
    /// so that the stub need not keep its own pointer across the wait).
    Sent(&'a Channel<T>),
    /// Nothing was sent: make the whole call the general way.
    Unsent,
}

impl<T: Transport, const R: usize> std::fmt::Debug for Fixed<'_, T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fixed::Done(b) => f.debug_tuple("Done").field(b).finish(),
            Fixed::Sent(_) => f.write_str("Sent"),
            Fixed::Unsent => f.write_str("Unsent"),
        }
    }
}

/// A request frame of `Q` bytes being written in place (see
/// [`Transport::call_fixed`]): the generated stub puts the header and
/// each argument at its offset.
#[derive(Debug)]
pub struct FrameOut<'a, const Q: usize>(pub(crate) FrameBytes<'a, Q>);

impl<'a, const Q: usize> FrameOut<'a, Q> {
    /// A frame written into `buf`.
    #[inline(always)]
    pub fn new(buf: &'a mut [u8; Q]) -> Self {
        FrameOut(FrameBytes::new(buf))
    }

    /// Writes `v`'s bytes at offset `off`.
    ///
    /// # Panics
    ///
    /// If they do not fit in the frame (the stubs' offsets are constants:
    /// the check folds away).
    #[inline(always)]
    pub fn put<V: zerocopy::IntoBytes + zerocopy::Immutable + ?Sized>(
        &mut self,
        off: usize,
        v: &V,
    ) {
        self.0.put(off, v.as_bytes());
    }
}

/// What a generated `FooClient` speaks through: its transport, checked at
/// connect (the hello), and the state the transport's fast path keeps
/// outside it (see [`Transport::call_fixed`]).
///
/// The generated stubs take `&self` (the trait's signatures), so the
/// transport sits in a `RefCell`: a call in the general way holds it
/// through [`transport`](Self::transport), which borrows it (a call made
/// from inside another one, say from a global allocator, is refused with
/// `WouldBlock`) and takes the fast path's state back; the fast path
/// touches only `lanes`, which are lent only while the transport is not
/// borrowed, so it takes no borrow of its own.
pub struct Channel<T: Transport> {
    pub(crate) lanes: T::Lanes,
    pub(crate) transport: RefCell<T>,
}

impl<T: Transport> std::fmt::Debug for Channel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("busy", &self.transport.try_borrow_mut().is_err())
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Channel<T> {
    /// Greets the server over `transport` and checks that it serves
    /// `iface`: `ConnectionRefused` with both names and versions if not.
    pub fn new(mut transport: T, iface: &Interface) -> io::Result<Self> {
        let mut hello = [0u8; wire::HEADER + wire::HELLO_LEN];
        hello[..wire::HEADER].copy_from_slice(&wire::header(wire::HELLO_LEN as u32, wire::HELLO));
        hello[8..12].copy_from_slice(&wire::VERSION.to_ne_bytes());
        hello[12..20].copy_from_slice(&iface.id.to_ne_bytes());
        hello[20..24].copy_from_slice(&iface.version.to_ne_bytes());
        let h = match transport.put(&hello).and_then(|()| transport.call()) {
            Ok(h) => h,
            // A server that sheds this connection says why before it
            // hangs up, perhaps before it read the hello: its reason is
            // the clearer error.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                let mut h = [0u8; HEADER];
                match transport.take(&mut h) {
                    Ok(()) => u64::from_le_bytes(h),
                    Err(_) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        // (The hello reply carries the server's name: room for it even
        // under a tiny max_frame.)
        let max = iface.max_frame.max(4096);
        let mismatch = matches!(parse_header(h), Some((_, MISMATCH)));
        let mut rest = expect_ok(&mut transport, h, max).map_err(|e| {
            if mismatch {
                io::Error::new(
                    e.kind(),
                    format!(
                        "shmpipe rpc: {e}; this client speaks `{}` version {}",
                        iface.name, iface.version
                    ),
                )
            } else {
                e
            }
        })?;
        let mut skip = vec![0u8; rest];
        take_bytes(&mut transport, &mut rest, &mut skip)?;
        finish(&mut transport, rest)?;
        let lanes = T::Lanes::default();
        T::lend(&lanes, &mut transport);
        Ok(Channel {
            lanes,
            transport: RefCell::new(transport),
        })
    }

    /// The transport, for one call made the general way (`put`s, `call`,
    /// `take`s); the fast path's state is taken back meanwhile and lent
    /// again when the guard goes. `WouldBlock` if a call is made from
    /// inside another.
    #[inline]
    pub fn transport(&self) -> io::Result<TransportGuard<'_, T>> {
        let Ok(mut t) = self.transport.try_borrow_mut() else {
            return Err(busy());
        };
        T::revoke(&self.lanes, &mut t);
        Ok(TransportGuard { channel: self, t })
    }

    /// A whole call on the fast path, if the transport has one (see
    /// [`Transport::call_fixed`]).
    #[inline(always)]
    pub fn call_fixed<const Q: usize, const R: usize>(
        &self,
        fill: impl FnOnce(&mut FrameOut<'_, Q>),
        ok: u64,
    ) -> Fixed<'_, T, R> {
        T::call_fixed(self, fill, ok)
    }

    /// Takes the transport back.
    pub fn into_transport(self) -> T {
        let mut t = self.transport.into_inner();
        T::revoke(&self.lanes, &mut t);
        t
    }
}

/// The transport of a [`Channel`], held for one call (see
/// [`Channel::transport`]).
pub struct TransportGuard<'a, T: Transport> {
    channel: &'a Channel<T>,
    t: RefMut<'a, T>,
}

impl<T: Transport> std::fmt::Debug for TransportGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportGuard")
    }
}

impl<T: Transport> Deref for TransportGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.t
    }
}

impl<T: Transport> DerefMut for TransportGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.t
    }
}

impl<T: Transport> Drop for TransportGuard<'_, T> {
    fn drop(&mut self) {
        T::lend(&self.channel.lanes, &mut self.t);
    }
}

#[cold]
fn busy() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "shmpipe rpc: a call on this client is already in progress",
    )
}

/// A length as the u32 the format carries.
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

/// Checks a reply header; returns the body length to be read, at most
/// `max` (the interface's `max_frame`: a longer reply is `InvalidData`, so
/// a server cannot make the client allocate what it likes). A reply that
/// is not `OK` is read and returned as an error.
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
        BUSY => io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("shmpipe rpc: the server sheds this connection: {msg}"),
        ),
        s => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("shmpipe rpc: unknown reply status {s}: {msg}"),
        ),
    }
}

/// Reads exactly `dst.len()` bytes of the reply (an out buffer), of the
/// `rest` the reply's header announced; `InvalidData` past it.
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
#[inline(always)]
pub fn decode<V: TryFromBytes>(b: &[u8]) -> io::Result<V> {
    V::try_read_from_bytes(b).map_err(|_| bad_reply("value out of range"))
}

/// Joins what a stub's out-of-line step returned, `r`, with the value it
/// left in `v`: the steps return only an `io::Result<()>` (a register)
/// and leave their value in the stub's own local, so that the stub's
/// result is built in registers on every way, and a caller that inlines
/// the stub and `?`s its result reads the fast path's value straight
/// away instead of through memory the steps also write.
#[inline(always)]
pub fn joined<V>(r: io::Result<()>, v: Option<V>) -> io::Result<V> {
    match (r, v) {
        (Ok(()), Some(v)) => Ok(v),
        (Err(e), _) => Err(e),
        // Never: a step that returns `Ok` has left its value.
        (Ok(()), None) => Err(bad_reply("no value")),
    }
}

/// Reads a length-prefixed byte string (its length checked against the
/// reply's `rest` before anything is allocated).
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
pub fn take_string<T: Transport>(t: &mut T, rest: &mut usize) -> io::Result<String> {
    String::from_utf8(take_vec(t, rest)?).map_err(|_| bad_reply("string not UTF-8"))
}

/// Ends reading a reply: it must have been read whole (`InvalidData`
/// otherwise, with the rest skipped, so the next reply is read aright).
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
