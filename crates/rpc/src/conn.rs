//! One connection served: [`Conn`], its state machine [`Core`], and what
//! the server needs of a dispatcher and of the byte streams it serves.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use shmpipe_core::{Connection, Reader, Writer};

use crate::dispatch::{Dispatch, Reply};
use crate::wire::{self, HEADER};

/// One client's connection on the server: reads requests, dispatches
/// them and writes the replies, in order.
///
/// [`serve`](Conn::serve) works on blocking ends (a thread per client)
/// and on non-blocking ones (an event loop: it returns `WouldBlock` when
/// it must wait, and picks up where it stopped). A malformed request gets
/// an error reply; a broken frame ends the connection with `InvalidData`.
/// A client that does not read its replies stops only its own
/// connection: the server stops reading its requests until the reply
/// ring has room.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self) -> u8; }
/// struct P;
/// impl Ping for P { fn ping(&self) -> u8 { 7 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-conn-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let t = std::thread::spawn(move || -> std::io::Result<()> {
///     let mut conn = shmpipe::rpc::Conn::new(PingServer(P), listener.accept()?);
///     conn.serve()
/// });
/// assert_eq!(PingClient::connect(&path)?.ping()?, 7);
/// t.join().unwrap()?; // `serve` returned: the client is gone (and, with the listener, the socket file)
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Conn<D, R = Reader, W = Writer> {
    dispatch: D,
    reader: R,
    writer: W,
    core: Core,
}

/// A connection's state apart from its ends: the request bytes read and
/// the reply not yet written. (An event loop that keeps the ends
/// elsewhere drives it with [`Core::step`].)
///
/// It holds memory only for what the client sends: request bytes in a
/// buffer that grows as they come (doubling, up to the interface's
/// `max_frame`) and shrinks back once the client is idle (a non-blocking
/// read finds nothing), and the part of a reply the reply ring had no
/// room for. Replies are made in a buffer of the serving thread's.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self) -> u8; }
/// struct P;
/// impl Ping for P { fn ping(&self) -> u8 { 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-core-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let t = std::thread::spawn(move || -> std::io::Result<()> {
///     let (mut r, mut w) = listener.accept()?.split();
///     let mut core = shmpipe::rpc::Core::new::<PingServer<P>>();
///     core.step(&mut PingServer(P), &mut r, &mut w)
/// });
/// assert_eq!(PingClient::connect(&path)?.ping()?, 1);
/// t.join().unwrap()?; // the client is gone; the socket file went with the listener
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Core {
    /// Request bytes: `input[start..have]` not handled yet.
    input: Vec<u8>,
    start: usize,
    have: usize,
    /// A whole frame of the interface: `HEADER + max_frame`.
    room: usize,
    /// What is left to write of the last reply: `out[out_pos..]`.
    out: Vec<u8>,
    out_pos: usize,
    greeted: bool,
    closing: bool,
}

/// The request buffer a client gets once it sends anything, and keeps
/// while idle: room for many small requests in a row.
const SMALL: usize = 4096;

thread_local! {
    /// Where this thread's server makes a reply the ring could not take
    /// in place: one buffer per serving thread, not one per client.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a buffer of `room` bytes: the thread's scratch buffer, or
/// a buffer of its own if a method re-entered the server on this thread.
fn with_scratch<R>(room: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < room {
                // Zeroed memory fresh from the system: pages are touched
                // only as replies reach them.
                *buf = vec![0u8; room];
            }
            f(&mut buf[..room])
        }
        Err(_) => f(&mut vec![0u8; room]),
    })
}

/// Where replies go: any `Write`; shmpipe's [`Writer`] also takes them
/// straight into its ring.
///
/// # Examples
///
/// ```
/// use std::io::Read;
/// use shmpipe::rpc::ReplyOut;
/// let (mut r, mut w) = shmpipe::pipe()?;
/// w.direct(8, |buf| {
///     buf[..3].copy_from_slice(b"abc");
///     3
/// })
/// .unwrap_or_else(|_| panic!("room in a fresh ring"));
/// let mut got = [0u8; 3];
/// r.read_exact(&mut got)?;
/// assert_eq!(&got, b"abc");
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait ReplyOut: Write {
    /// Lets `fill` write up to `len` bytes in place, if that much room is
    /// free and contiguous now (without waiting), and sends the first `n`
    /// bytes, `n` being what `fill` returns; gives `fill` back otherwise.
    fn direct<F: FnOnce(&mut [u8]) -> usize>(&mut self, len: usize, fill: F) -> Result<(), F> {
        let _ = len;
        Err(fill)
    }
}

impl ReplyOut for UnixStream {}

/// Where requests come from: any `Read`; shmpipe's [`Reader`] is also
/// looked at once before a read that would wait.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use shmpipe::rpc::RequestIn;
/// let (mut r, mut w) = shmpipe::pipe()?;
/// w.write_all(b"x")?;
/// r.look(); // sees the byte without waiting
/// assert_eq!(r.buffered(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait RequestIn: Read {
    /// Refreshes the view of what the client has sent, without waiting.
    fn look(&mut self) {}
}

impl RequestIn for UnixStream {}

impl RequestIn for Reader {
    #[inline]
    fn look(&mut self) {
        // The next request is usually published already: see it now
        // rather than after the pause a waiting read makes first.
        self.look_now();
    }
}

impl ReplyOut for Writer {
    #[inline]
    fn direct<F: FnOnce(&mut [u8]) -> usize>(&mut self, len: usize, fill: F) -> Result<(), F> {
        self.write_in_place(len, fill)
    }
}

impl<D: Dispatch> Conn<D> {
    /// Serves `dispatch` on a shmpipe connection.
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-conn-new-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let server = std::thread::spawn(move || -> std::io::Result<()> {
    ///     let client = listener.accept()?;
    ///     drop(listener); // one client: this also removes the socket file
    ///     shmpipe::rpc::Conn::new(PingServer(P), client).serve()
    /// });
    /// let client = PingClient::connect(&path)?;
    /// assert_eq!(client.ping()?, 7);
    /// drop(client);
    /// server.join().unwrap()?; // `serve` ends once the client is gone
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(dispatch: D, conn: Connection) -> Self {
        let (r, w) = conn.split();
        Conn::with_streams(dispatch, r, w)
    }

    /// Puts both pipe ends in non-blocking mode, for an event loop.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[shmpipe::service]
    /// # pub trait Ping { fn ping(&self) -> u8; }
    /// # struct P;
    /// # impl Ping for P { fn ping(&self) -> u8 { 7 } }
    /// # let path = std::env::temp_dir().join(format!("shmpipe-conn-nonblocking-doc-{}.sock", std::process::id()));
    /// # let listener = shmpipe::Listener::bind(&path)?;
    /// # let accepting = std::thread::spawn(move || listener.accept()); // the socket file goes with the listener
    /// # let _client = shmpipe::connect(&path)?;
    /// let mut conn = shmpipe::rpc::Conn::new(PingServer(P), accepting.join().unwrap()?);
    /// conn.set_nonblocking(true);
    /// // The client has sent nothing: `serve` returns rather than wait.
    /// assert_eq!(conn.serve().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_nonblocking(&mut self, on: bool) {
        self.reader.set_nonblocking(on);
        self.writer.set_nonblocking(on);
    }

    /// The request pipe's end: it polls readable when the client may have
    /// sent something (or is gone).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[shmpipe::service]
    /// # pub trait Ping { fn ping(&self) -> u8; }
    /// # struct P;
    /// # impl Ping for P { fn ping(&self) -> u8 { 7 } }
    /// # let path = std::env::temp_dir().join(format!("shmpipe-conn-reader-doc-{}.sock", std::process::id()));
    /// # let listener = shmpipe::Listener::bind(&path)?;
    /// # let accepting = std::thread::spawn(move || listener.accept()); // the socket file goes with the listener
    /// # let _client = shmpipe::connect(&path)?;
    /// let mut conn = shmpipe::rpc::Conn::new(PingServer(P), accepting.join().unwrap()?);
    /// assert!(conn.reader().capacity() > 0);
    /// assert_eq!(conn.reader().buffered(), 0); // nothing sent yet
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The reply pipe's end.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[shmpipe::service]
    /// # pub trait Ping { fn ping(&self) -> u8; }
    /// # struct P;
    /// # impl Ping for P { fn ping(&self) -> u8 { 7 } }
    /// # let path = std::env::temp_dir().join(format!("shmpipe-conn-writer-doc-{}.sock", std::process::id()));
    /// # let listener = shmpipe::Listener::bind(&path)?;
    /// # let accepting = std::thread::spawn(move || listener.accept()); // the socket file goes with the listener
    /// # let _client = shmpipe::connect(&path)?;
    /// let mut conn = shmpipe::rpc::Conn::new(PingServer(P), accepting.join().unwrap()?);
    /// assert!(conn.writer().capacity() > 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn writer(&self) -> &Writer {
        &self.writer
    }
}

impl<D: Dispatch> Conn<D, UnixStream, UnixStream> {
    /// Serves `dispatch` on a Unix socket.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{Conn, UnixTransport};
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let (server_end, client_end) = UnixStream::pair()?;
    /// let server = std::thread::spawn(move || -> std::io::Result<()> {
    ///     Conn::unix(PingServer(P), server_end)?.serve()
    /// });
    /// let client = PingClient::with_transport(UnixTransport::new(client_end))?;
    /// assert_eq!(client.ping()?, 7);
    /// drop(client);
    /// server.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn unix(dispatch: D, stream: UnixStream) -> io::Result<Self> {
        let w = stream.try_clone()?;
        Ok(Conn::with_streams(dispatch, stream, w))
    }
}

impl<D: Dispatch, R: RequestIn, W: ReplyOut> Conn<D, R, W> {
    /// Serves `dispatch` on any byte streams.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{Conn, UnixTransport};
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let (requests, client_end) = UnixStream::pair()?;
    /// let replies = requests.try_clone()?;
    /// let server = std::thread::spawn(move || Conn::with_streams(PingServer(P), requests, replies).serve());
    /// let client = PingClient::with_transport(UnixTransport::new(client_end))?;
    /// assert_eq!(client.ping()?, 7);
    /// drop(client);
    /// server.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_streams(dispatch: D, reader: R, writer: W) -> Self {
        Conn {
            core: Core::new::<D>(),
            dispatch,
            reader,
            writer,
        }
    }

    /// The implementation served.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{Conn, UnixTransport};
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct Counter(Cell<u8>);
    /// impl Ping for Counter {
    ///     fn ping(&self) -> u8 { self.0.set(self.0.get() + 1); self.0.get() }
    /// }
    ///
    /// let (server_end, client_end) = UnixStream::pair()?;
    /// let client = std::thread::spawn(move || -> std::io::Result<u8> {
    ///     PingClient::with_transport(UnixTransport::new(client_end))?.ping()
    /// });
    /// let mut conn = Conn::unix(PingServer(Counter(Cell::new(0))), server_end)?;
    /// conn.serve()?; // until the client is gone
    /// assert_eq!(client.join().unwrap()?, 1);
    /// assert_eq!(conn.dispatcher().0 .0.get(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn dispatcher(&mut self) -> &mut D {
        &mut self.dispatch
    }

    /// Serves requests until the client is gone (`Ok`), must be waited
    /// for (`WouldBlock`, non-blocking ends only) or broke the protocol
    /// (`InvalidData`; drop the connection).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::Conn;
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let (server_end, mut client_end) = UnixStream::pair()?;
    /// client_end.write_all(&[0; 8])?; // a header without the tag
    /// let mut conn = Conn::unix(PingServer(P), server_end)?;
    /// assert_eq!(conn.serve().unwrap_err().kind(), std::io::ErrorKind::InvalidData);
    ///
    /// let (server_end, client_end) = UnixStream::pair()?;
    /// drop(client_end);
    /// assert!(Conn::unix(PingServer(P), server_end)?.serve().is_ok()); // the client is gone
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve(&mut self) -> io::Result<()> {
        self.core
            .step(&mut self.dispatch, &mut self.reader, &mut self.writer)
    }
}

impl Core {
    /// A fresh connection's state for an interface `D`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::{Core, UnixTransport};
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let (mut requests, client_end) = UnixStream::pair()?;
    /// let mut replies = requests.try_clone()?;
    /// let client = std::thread::spawn(move || -> std::io::Result<u8> {
    ///     PingClient::with_transport(UnixTransport::new(client_end))?.ping()
    /// });
    /// // Sized for the interface's largest frame.
    /// let mut core = Core::new::<PingServer<P>>();
    /// core.step(&mut PingServer(P), &mut requests, &mut replies)?;
    /// assert_eq!(client.join().unwrap()?, 7);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new<D: Dispatch>() -> Self {
        Core {
            input: Vec::new(),
            start: 0,
            have: 0,
            room: HEADER + D::INTERFACE.max_frame as usize,
            out: Vec::new(),
            out_pos: 0,
            greeted: false,
            closing: false,
        }
    }

    /// Serves with these ends as [`Conn::serve`] does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::net::UnixStream;
    /// use shmpipe::rpc::Core;
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let (mut requests, client_end) = UnixStream::pair()?;
    /// let mut replies = requests.try_clone()?;
    /// let mut core = Core::new::<PingServer<P>>();
    /// requests.set_nonblocking(true)?;
    /// let err = core.step(&mut PingServer(P), &mut requests, &mut replies).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock); // nothing sent yet
    /// drop(client_end);
    /// core.step(&mut PingServer(P), &mut requests, &mut replies)?; // the client is gone
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn step<D: Dispatch>(
        &mut self,
        d: &mut D,
        reader: &mut impl RequestIn,
        writer: &mut impl ReplyOut,
    ) -> io::Result<()> {
        loop {
            if self.flush(writer)? {
                return Ok(());
            }
            if let Some(frame) = self.next_frame::<D>()? {
                self.handle(d, writer, frame);
                continue;
            }
            if self.fill(reader)? {
                return Ok(());
            }
        }
    }

    /// [`step`](Self::step) that handles at most `max` requests, so that
    /// one busy client cannot keep a one-thread server from the others:
    /// `Ok(false)` if it stopped there with the connection open (requests
    /// may be buffered here, where no readiness shows them: call again
    /// without waiting), `Ok(true)` once the connection is over.
    pub(crate) fn step_at_most<D: Dispatch>(
        &mut self,
        d: &mut D,
        reader: &mut impl RequestIn,
        writer: &mut impl ReplyOut,
        max: usize,
    ) -> io::Result<bool> {
        let mut handled = 0;
        loop {
            if self.flush(writer)? {
                return Ok(true);
            }
            if handled == max {
                return Ok(false);
            }
            if let Some(frame) = self.next_frame::<D>()? {
                self.handle(d, writer, frame);
                handled += 1;
                continue;
            }
            if self.fill(reader)? {
                return Ok(true);
            }
        }
    }

    /// Whether a reply waits to be written (the reply ring was full).
    pub(crate) fn reply_waits(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// The bytes this connection's buffers hold now.
    pub(crate) fn held(&self) -> usize {
        self.input.capacity() + self.out.capacity()
    }

    /// Writes what is left of the last reply; true if the connection is
    /// over (the client is gone or this side closes it). Inlined: it is
    /// called twice per request, between a request's arrival and its
    /// reply too, and has nothing to do when the reply went straight into
    /// the ring (measured with callgrind: 28 instructions a call out of
    /// line).
    #[inline]
    fn flush(&mut self, writer: &mut impl ReplyOut) -> io::Result<bool> {
        if self.out_pos >= self.out.len() && !self.closing {
            return Ok(false);
        }
        self.flush_slow(writer)
    }

    /// `flush` when a reply waits in `out` or the connection closes.
    #[cold]
    #[inline(never)]
    fn flush_slow(&mut self, writer: &mut impl ReplyOut) -> io::Result<bool> {
        while self.out_pos < self.out.len() {
            match writer.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(true),
                Err(e) => return Err(e),
            }
        }
        self.out_pos = 0;
        if self.out.capacity() > SMALL {
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
        if self.closing {
            writer.flush()?;
        }
        Ok(self.closing)
    }

    /// Reads more requests; true at the client's end.
    fn fill(&mut self, reader: &mut impl RequestIn) -> io::Result<bool> {
        // Move a partial frame to the front first (usually there is none:
        // no copy then).
        if self.start == self.have {
            self.start = 0;
            self.have = 0;
        } else if self.start > 0 {
            self.input.copy_within(self.start..self.have, 0);
            self.have -= self.start;
            self.start = 0;
        }
        if self.have == self.input.len() {
            // Full, and the frame in it not whole (`next_frame` saw to
            // that), so shorter than `room`: room for as much again.
            debug_assert!(self.input.len() < self.room);
            let len = (2 * self.input.len()).max(SMALL).min(self.room);
            self.input.resize(len, 0);
        }
        reader.look();
        loop {
            match reader.read(&mut self.input[self.have..]) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    self.have += n;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(true),
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock && self.have == 0 {
                        self.idle();
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The client has sent nothing more: a buffer grown for a large
    /// frame goes back (an idle client keeps `SMALL` bytes at most).
    #[cold]
    fn idle(&mut self) {
        if self.input.len() > SMALL {
            self.input = Vec::new();
        }
    }

    /// The next whole frame in the input: (opcode, body range).
    fn next_frame<D: Dispatch>(&mut self) -> io::Result<Option<(u16, usize, usize)>> {
        let avail = self.have - self.start;
        if avail < HEADER {
            return Ok(None);
        }
        let h: [u8; HEADER] = self.input[self.start..self.start + HEADER]
            .try_into()
            .expect("8 bytes");
        let Some((len, op)) = wire::parse_header(u64::from_le_bytes(h)) else {
            return Err(broken("not an RPC frame header"));
        };
        if len > D::INTERFACE.max_frame {
            return Err(broken("a frame over the interface's max_frame"));
        }
        let len = len as usize;
        if avail < HEADER + len {
            return Ok(None);
        }
        let body = self.start + HEADER;
        self.start = body + len;
        Ok(Some((op, body, body + len)))
    }

    /// Runs one request; its reply goes straight into the reply ring when
    /// its size is known and there is room, else into `out`.
    fn handle<D: Dispatch>(
        &mut self,
        d: &mut D,
        writer: &mut impl ReplyOut,
        (op, from, to): (u16, usize, usize),
    ) {
        let body = &self.input[from..to];
        if self.greeted && op != wire::HELLO {
            if let Some(bound) = D::reply_bound(op, body) {
                let room = HEADER + bound.max(64);
                let closing = &mut self.closing;
                let direct = writer.direct(room, |buf| {
                    let (status, len) = run(d, closing, op, body, buf);
                    buf[..HEADER].copy_from_slice(&wire::header(len as u32, status));
                    HEADER + len
                });
                if direct.is_ok() {
                    return;
                }
            }
        }
        let (greeted, closing) = (&mut self.greeted, &mut self.closing);
        let left = &mut self.out;
        with_scratch(self.room, |out| {
            let (status, len) = if op == wire::HELLO {
                if *greeted {
                    message(out, wire::BAD_REQUEST, "a second hello")
                } else {
                    let (status, len) = hello::<D>(out, body);
                    *greeted = status == wire::OK;
                    *closing = !*greeted;
                    (status, len)
                }
            } else if !*greeted {
                *closing = true;
                message(out, wire::BAD_REQUEST, "no hello")
            } else {
                run(d, closing, op, body, out)
            };
            out[..HEADER].copy_from_slice(&wire::header(len as u32, status));
            let reply = &out[..HEADER + len];
            // What the ring takes now goes; the rest waits in `left`
            // (`flush` writes it, and reports any error).
            let mut sent = 0;
            while sent < reply.len() {
                match writer.write(&reply[sent..]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            left.extend_from_slice(&reply[sent..]);
        });
    }
}

/// Dispatches one request, its reply's body after `out[..HEADER]`;
/// returns (status, body length).
/// A method that panics fails that one call (the server and its other
/// clients go on); its client's connection is ended after the reply, as
/// the implementation's state for it may be half-changed.
#[inline]
fn run<D: Dispatch>(
    d: &mut D,
    closing: &mut bool,
    op: u16,
    body: &[u8],
    out: &mut [u8],
) -> (u16, usize) {
    let mut reply = Reply::new(&mut out[HEADER..]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.dispatch(op, body, &mut reply)
    }));
    match r {
        Ok(Ok(())) => (wire::OK, reply.len()),
        Ok(Err(r)) => message(out, wire::BAD_REQUEST, r.message()),
        Err(_) => {
            *closing = true;
            message(out, wire::BAD_REQUEST, "the method panicked")
        }
    }
}

/// Writes an error reply's text; returns (status, body length).
fn message(out: &mut [u8], status: u16, text: &str) -> (u16, usize) {
    let n = text.len().min(out.len() - HEADER);
    out[HEADER..HEADER + n].copy_from_slice(&text.as_bytes()[..n]);
    (status, n)
}

/// Answers a hello: OK with the server's identity, or MISMATCH.
fn hello<D: Dispatch>(out: &mut [u8], body: &[u8]) -> (u16, usize) {
    let iface = D::INTERFACE;
    let fits = body.len() == wire::HELLO_LEN
        && body[..4] == wire::VERSION.to_ne_bytes()
        && body[4..12] == iface.id.to_ne_bytes()
        && body[12..16] == iface.version.to_ne_bytes();
    if !fits {
        let text = format!(
            "the server serves `{}` version {} (wire format {}); \
             the client asked for another interface or version",
            iface.name,
            iface.version,
            wire::VERSION
        );
        return message(out, wire::MISMATCH, &text);
    }
    let mut b = Vec::with_capacity(wire::HELLO_LEN + iface.name.len());
    b.extend_from_slice(&wire::VERSION.to_ne_bytes());
    b.extend_from_slice(&iface.id.to_ne_bytes());
    b.extend_from_slice(&iface.version.to_ne_bytes());
    b.extend_from_slice(iface.name.as_bytes());
    let n = b.len().min(out.len() - HEADER);
    out[HEADER..HEADER + n].copy_from_slice(&b[..n]);
    (wire::OK, n)
}

#[cold]
fn broken(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("shmpipe rpc: client sent {what}"),
    )
}
