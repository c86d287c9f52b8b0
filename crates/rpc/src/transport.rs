//! The two transports: shmpipe's rings ([`ShmTransport`], with the fast
//! path of calls of fixed sizes), or a Unix socket ([`UnixTransport`]: the
//! same stubs over kernel IPC, for comparison). What a transport is, is in
//! `client.rs`.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use shmpipe_core::lend::{Lanes, ReplyAt};
use shmpipe_core::{Connection, Reader, Writer};

use crate::client::{Channel, Fixed, FrameOut, Transport};
use crate::wire::HEADER;

/// Frames through a shmpipe connection: requests are written in place in
/// the request ring and published with one store; replies are read in
/// place from the reply ring, or copied out of the server's inline copy
/// beside its tail when small and the server made one (on Intel: see
/// shmpipe-core's `turns`). No system call while both sides are busy.
///
/// A call of fixed sizes (plain-data arguments and result) takes a fast
/// path: the stub writes the frame straight into the request ring when
/// the room lies before the ring's end, publishes it (the ring's
/// protocol), waits out of line, and copies a small reply from the inline
/// copy where there is one, which saves a second cross-core transfer; a
/// larger one, or one without a copy, it reads in place. The ends lend their state for that to the client and take it
/// back for any other call.
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

/// The fast path's state of a [`ShmTransport`], kept in its [`Channel`]:
/// the two ends' hot state, lent while the client is not busy (the
/// lending API of `shmpipe-core`). Not lent, every call goes the general
/// way.
pub type ShmLanes = Lanes;

impl ShmTransport {
    /// Uses `conn`'s two pipes.
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self, x: u32) -> u32; }
    /// struct P;
    /// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-shm-transport-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let server = std::thread::spawn(move || -> std::io::Result<()> {
    ///     let conn = listener.accept()?;
    ///     drop(listener); // one client: this also removes the socket file
    ///     shmpipe::rpc::Conn::new(PingServer(P), conn).serve()
    /// });
    /// let t = shmpipe::rpc::ShmTransport::new(shmpipe::connect(&path)?);
    /// let client = PingClient::with_transport(t)?;
    /// assert_eq!(client.ping(1)?, 2);
    /// drop(client);
    /// server.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
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
    fn wake_server(c: &Channel<Self>) -> &Channel<Self> {
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
    fn wait_reply<const R: usize>(c: &Channel<Self>) -> (ReplyAt<'_, R>, &Channel<Self>) {
        if let Some(at) = c.lanes.reply_in_view::<R>() {
            return (at, c);
        }
        (Self::slow_reply::<R>(c), c)
    }

    /// `wait_reply` once the reply was not in view (named apart from it:
    /// the bench's callgrind toggle matches `wait_reply*`).
    #[inline(never)]
    fn slow_reply<const R: usize>(c: &Channel<Self>) -> ReplyAt<'_, R> {
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
        c: &Channel<Self>,
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
/// assert_eq!(client.ping(41)?, 42);
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
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self, x: u32) -> u32; }
    /// struct P;
    /// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
    ///
    /// let (server_end, client_end) = UnixStream::pair()?;
    /// let server = std::thread::spawn(move || -> std::io::Result<()> {
    ///     shmpipe::rpc::Conn::unix(PingServer(P), server_end)?.serve()
    /// });
    /// let t = shmpipe::rpc::UnixTransport::new(client_end);
    /// let client = PingClient::with_transport(t)?;
    /// assert_eq!(client.ping(1)?, 2);
    /// drop(client);
    /// server.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self, x: u32) -> u32; }
    /// struct P;
    /// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-unix-connect-doc-{}.sock", std::process::id()));
    /// let listener = std::os::unix::net::UnixListener::bind(&path)?;
    /// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
    /// let t = shmpipe::rpc::UnixTransport::connect(&path)?;
    /// std::fs::remove_file(&path)?; // connected: the path is no longer needed
    /// let client = PingClient::with_transport(t)?;
    /// assert_eq!(client.ping(1)?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
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
