//! How a client's frames travel: through shmpipe's rings, or a Unix
//! socket (the same stubs over kernel IPC, for comparison).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use shmpipe_core::lend::{FrameBytes, Lanes, ReplyAt};
use shmpipe_core::{Connection, Reader, Writer};

use crate::wire::HEADER;
use crate::Client;

/// A byte stream each way, as the generated client stubs use it. The
/// stubs call these in this order: `put`s (a request), `flush` or `call`
/// (which also waits for a reply's header), `take`s and `done` (the
/// reply). A call whose request and reply have fixed sizes goes through
/// [`call_fixed`](Self::call_fixed) first, which a transport may do in
/// place. A transport of one's own (say one wrapping another) gets the
/// general way only, with `type Lanes = ()`.
///
/// # Examples
///
/// ```
/// fn frames<T: shmpipe::rpc::Transport>(t: &mut T) -> std::io::Result<()> {
///     t.put(&shmpipe::rpc::wire::header(0, 7))?;
///     t.flush()
/// }
/// ```
pub trait Transport: Sized {
    /// The state the fast path keeps in the [`Client`], outside the
    /// transport (`()` for a transport without one).
    type Lanes: Default + std::fmt::Debug;
    /// Appends request bytes, not yet sent.
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Sends what was put.
    fn flush(&mut self) -> io::Result<()>;
    /// Sends what was put and waits for the next reply's header (as the
    /// little-endian word it is: see [`wire`](super::wire)).
    fn call(&mut self) -> io::Result<u64>;
    /// Reads exactly `dst.len()` reply bytes.
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()>;
    /// Drops `n` reply bytes.
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
    fn done(&mut self);
    /// Lends `lanes` what the fast path needs (after a call made the
    /// general way, and at connect).
    fn lend(lanes: &Self::Lanes, t: &mut Self) {
        let _ = (lanes, t);
    }
    /// Takes the lanes back: the transport learns how far the fast path
    /// went, before a call made the general way.
    fn revoke(lanes: &Self::Lanes, t: &mut Self) {
        let _ = (lanes, t);
    }
    /// A whole call whose request frame is `Q` bytes (written by `fill`)
    /// and whose reply, if it is the plain `OK` of `R` bytes whose header
    /// is `ok`, is returned in [`Fixed::Done`]. The default does nothing
    /// ([`Fixed::Unsent`]): the stub makes the call the general way.
    #[inline(always)]
    fn call_fixed<const Q: usize, const R: usize>(
        client: &Client<Self>,
        fill: impl FnOnce(&mut FrameOut<'_, Q>),
        ok: u64,
    ) -> Fixed<'_, Self, R> {
        let _ = (client, fill, ok);
        Fixed::Unsent
    }
}

/// What [`Transport::call_fixed`] did.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::{Fixed, ShmTransport};
/// let f: Fixed<'_, ShmTransport, 4> = Fixed::Done(7u32.to_ne_bytes());
/// assert!(matches!(f, Fixed::Done(b) if u32::from_ne_bytes(b) == 7));
/// ```
pub enum Fixed<'a, T: Transport, const R: usize> {
    /// The call is over: the reply's `R` bytes, read and released.
    Done([u8; R]),
    /// The request was sent (or failed: the transport keeps the error);
    /// read the reply the general way, through this client (handed back
    /// so that the stub need not keep its own pointer across the wait).
    Sent(&'a Client<T>),
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
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::FrameOut;
/// let mut buf = [0u8; 12];
/// let mut f = FrameOut::new(&mut buf);
/// f.put(0, &shmpipe::rpc::wire::header(4, 1));
/// f.put(8, &7u32);
/// assert_eq!(&buf[8..], &7u32.to_ne_bytes());
/// ```
#[derive(Debug)]
pub struct FrameOut<'a, const Q: usize>(FrameBytes<'a, Q>);

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

/// Frames through a shmpipe connection: requests are written in place in
/// the request ring and published with one store; replies are read in
/// place from the reply ring, or copied out of the server's inline copy
/// beside its tail when small. No system call while both sides are busy.
///
/// A call of fixed sizes takes a fast path ([`Transport::call_fixed`]):
/// the stub writes the frame straight into the request ring when the room
/// lies before the ring's end, publishes it (the ring's protocol, as
/// `shmpipe_ring::Hot` describes it), waits out of line, and copies a
/// small reply (up to `INLINE_MAX` bytes) from the inline copy, which saves a
/// second cross-core transfer; a larger one it reads in place. The ends lend their state for that to the client's
/// [`ShmLanes`] and take it back for any other call.
///
/// # Examples
///
/// ```no_run
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// let t = shmpipe::rpc::ShmTransport::new(shmpipe::connect("/tmp/ping.sock")?);
/// let client = PingClient::with_transport(t)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ShmTransport {
    reader: Reader,
    writer: Writer,
    /// An error the fast path met, for the general path to return.
    failed: Option<io::Error>,
}

/// The fast path's state of a [`ShmTransport`], kept in its [`Client`]:
/// the two ends' hot state, lent while the client is not busy (the
/// lending API of `shmpipe-core`).
///
/// # Examples
///
/// ```
/// let lanes = shmpipe::rpc::ShmLanes::default(); // not lent: every call goes the general way
/// # let _ = lanes;
/// ```
pub type ShmLanes = Lanes;

impl ShmTransport {
    /// Uses `conn`'s two pipes.
    pub fn new(conn: Connection) -> Self {
        let (reader, writer) = conn.split();
        ShmTransport {
            reader,
            writer,
            failed: None,
        }
    }

    /// The server sleeps on the request ring: the writer publishes the
    /// same tail again, which wakes it (once per parking). Left out of the
    /// stub's instruction count with the waiting: it is the system call
    /// that stands for a kernel IPC (see the bench's `rpc-stub`).
    #[cold]
    #[inline(never)]
    fn wake_server(c: &Client<Self>) -> &Client<Self> {
        // The lanes were lent, so the client is not busy: the borrow
        // succeeds (no user code runs here).
        if let Ok(mut t) = c.transport.try_borrow_mut() {
            c.lanes.wake_peer(&mut t.writer);
        }
        c
    }

    /// Waits until the reply's first `HEADER + R` bytes can be read and
    /// returns where they are (in place, or copied out if small); a header
    /// of zeros, which no reply has, if the general path must read this
    /// reply (a large one across the ring's end, one arrived in part, or
    /// the wait failed: the error is kept for it). This is the waiting the
    /// stub's instruction count leaves out (see the bench's `rpc-stub`).
    ///
    /// It hands `c` back: the stub then keeps no register of its own
    /// across the wait.
    #[inline(never)]
    fn wait_reply<const R: usize>(c: &Client<Self>) -> (ReplyAt<'_, R>, &Client<Self>) {
        if let Some(at) = c.lanes.reply_in_view::<R>() {
            return (at, c);
        }
        (Self::slow_reply::<R>(c), c)
    }

    /// `wait_reply` once the reply was not in view (named apart from it:
    /// the bench's callgrind toggle matches `wait_reply*`).
    #[inline(never)]
    fn slow_reply<const R: usize>(c: &Client<Self>) -> ReplyAt<'_, R> {
        // Busy (a call made from inside another): the general path.
        let Ok(mut t) = c.transport.try_borrow_mut() else {
            return ReplyAt::default();
        };
        let t = &mut *t;
        match c.lanes.wait_reply::<R>(&mut t.reader, &mut t.writer) {
            Ok(at) => at,
            Err(e) => {
                t.failed = Some(e);
                ReplyAt::default()
            }
        }
    }
}

impl Transport for ShmTransport {
    type Lanes = ShmLanes;

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.push_or_write(bytes)
    }

    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        self.writer.publish_now();
        self.reader.publish_now();
        Ok(())
    }

    /// Kept out of line: it is the publishing and the waiting.
    /// The replies read since the last call are released here too, with
    /// the request: one publish of each index per call.
    #[inline(never)]
    fn call(&mut self) -> io::Result<u64> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.writer.publish_now();
        self.reader.publish_now();
        let mut h = [0u8; HEADER];
        self.take(&mut h)?;
        Ok(u64::from_le_bytes(h))
    }

    #[inline(always)]
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()> {
        self.reader.take_exact(dst)
    }

    /// Nothing to do: the reply's room is released with the next request
    /// (or when more is awaited, or the transport is dropped).
    #[inline(always)]
    fn done(&mut self) {}

    fn lend(lanes: &ShmLanes, t: &mut Self) {
        lanes.lend(&mut t.reader, &mut t.writer);
    }

    fn revoke(lanes: &ShmLanes, t: &mut Self) {
        lanes.revoke(&mut t.reader, &mut t.writer);
    }

    /// The stub, from its entry to the request's publish and from the
    /// reply's arrival to its return: reserve in place (one compare), the
    /// frame's stores, the tail's store, a fence, a look at the server's
    /// parked word; then, once `wait_reply` says where the reply is, one
    /// compare of its whole header, a load, and the head moved on.
    #[inline(always)]
    fn call_fixed<const Q: usize, const R: usize>(
        c: &Client<Self>,
        fill: impl FnOnce(&mut FrameOut<'_, Q>),
        ok: u64,
    ) -> Fixed<'_, Self, R> {
        let Some(mut room) = c.lanes.reserve::<Q>() else {
            return Fixed::Unsent;
        };
        fill(&mut FrameOut(room.bytes()));
        let c = if c.lanes.publish(room) {
            Self::wake_server(c)
        } else {
            c
        };
        const { assert!(R <= u32::MAX as usize) };
        let (at, c) = Self::wait_reply::<R>(c);
        let Some(v) = at.body_if(ok) else {
            return Fixed::Sent(c);
        };
        c.lanes.consume::<R>();
        Fixed::Done(v)
    }
}

/// Frames through a Unix stream socket, buffered: one `write` per request
/// and as few `read`s as the replies allow.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self, x: u32) -> u32; }
/// struct P;
/// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-unix-doc-{}.sock", std::process::id()));
/// let listener = std::os::unix::net::UnixListener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
/// let client = PingClient::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
/// assert_eq!(client.ping(41), 42);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct UnixTransport {
    stream: UnixStream,
    out: Vec<u8>,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
}

impl UnixTransport {
    /// Uses a connected socket.
    pub fn new(stream: UnixStream) -> Self {
        UnixTransport {
            stream,
            out: Vec::with_capacity(64 * 1024),
            buf: vec![0u8; 64 * 1024].into_boxed_slice(),
            pos: 0,
            end: 0,
        }
    }

    /// Connects to a server from [`serve_unix`](super::serve_unix).
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self::new(UnixStream::connect(path)?))
    }

    fn fill(&mut self) -> io::Result<()> {
        self.pos = 0;
        self.end = 0;
        loop {
            match self.stream.read(&mut self.buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.end = n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Transport for UnixTransport {
    type Lanes = ();

    #[inline]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    #[inline(never)]
    fn call(&mut self) -> io::Result<u64> {
        self.flush()?;
        let mut h = [0u8; HEADER];
        self.take(&mut h)?;
        Ok(u64::from_le_bytes(h))
    }

    fn take(&mut self, mut dst: &mut [u8]) -> io::Result<()> {
        while !dst.is_empty() {
            if self.pos == self.end {
                if dst.len() >= self.buf.len() {
                    // Large: straight into the caller's buffer.
                    self.stream.read_exact(dst)?;
                    return Ok(());
                }
                self.fill()?;
            }
            let n = dst.len().min(self.end - self.pos);
            dst[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            dst = &mut dst[n..];
        }
        Ok(())
    }

    fn done(&mut self) {}
}
