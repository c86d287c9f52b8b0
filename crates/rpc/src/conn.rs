//! The server side: a connection's state machine ([`Conn`]) and the
//! thread-per-client loops ([`serve`], [`serve_unix`]).

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use shmpipe_core::{Connection, Listener, PeerCredentials, Reader, Writer};

use crate::wire::{self, Refused, Reply, HEADER};
use crate::Interface;

/// A server's half of an interface, generated as `FooServer<S>`: decodes
/// a request's arguments in place, calls the method and encodes the
/// result in place.
///
/// # Examples
///
/// ```
/// use shmpipe::rpc::{Dispatch, Reply};
/// #[shmpipe::service]
/// pub trait Calc { fn add(&self, a: u32, b: u32) -> u32; }
/// struct C;
/// impl Calc for C { fn add(&self, a: u32, b: u32) -> u32 { a + b } }
///
/// let mut server = CalcServer(C);
/// let mut body = [0u8; 8];
/// body[..4].copy_from_slice(&2u32.to_ne_bytes());
/// body[4..].copy_from_slice(&3u32.to_ne_bytes());
/// let mut buf = [0u8; 16];
/// let mut reply = Reply::new(&mut buf);
/// server.dispatch(0, &body, &mut reply).unwrap(); // opcode 0: `add`
/// assert_eq!(reply.len(), 4);
/// assert_eq!(&buf[..4], &5u32.to_ne_bytes());
/// assert_eq!(CalcServer::<C>::reply_bound(0, &body), Some(4));
/// ```
pub trait Dispatch {
    /// The interface served.
    const INTERFACE: Interface;
    /// Runs the method `op` on the request `body`, writing the reply.
    fn dispatch(&mut self, op: u16, body: &[u8], reply: &mut Reply<'_>) -> Result<(), Refused>;
    /// The most bytes the reply to this request can take, when that is
    /// known before the call (results of fixed size): the server then
    /// writes the reply straight into the reply ring.
    fn reply_bound(op: u16, body: &[u8]) -> Option<usize> {
        let _ = (op, body);
        None
    }
}

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
/// assert_eq!(PingClient::connect(&path)?.try_ping()?, 7);
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
/// std::thread::spawn(move || -> std::io::Result<()> {
///     let (mut r, mut w) = listener.accept()?.split();
///     let mut core = shmpipe::rpc::Core::new::<PingServer<P>>();
///     core.step(&mut PingServer(P), &mut r, &mut w)
/// });
/// assert_eq!(PingClient::connect(&path)?.ping(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Core {
    input: Box<[u8]>,
    start: usize,
    have: usize,
    out: Box<[u8]>,
    out_pos: usize,
    out_len: usize,
    greeted: bool,
    closing: bool,
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
    pub fn new(dispatch: D, conn: Connection) -> Self {
        let (r, w) = conn.split();
        Conn::with_streams(dispatch, r, w)
    }

    /// Puts both pipe ends in non-blocking mode, for an event loop.
    pub fn set_nonblocking(&mut self, on: bool) {
        self.reader.set_nonblocking(on);
        self.writer.set_nonblocking(on);
    }

    /// The request pipe's end: it polls readable when the client may have
    /// sent something (or is gone).
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The reply pipe's end.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }
}

impl<D: Dispatch> Conn<D, UnixStream, UnixStream> {
    /// Serves `dispatch` on a Unix socket.
    pub fn unix(dispatch: D, stream: UnixStream) -> io::Result<Self> {
        let w = stream.try_clone()?;
        Ok(Conn::with_streams(dispatch, stream, w))
    }
}

impl<D: Dispatch, R: RequestIn, W: ReplyOut> Conn<D, R, W> {
    /// Serves `dispatch` on any byte streams.
    pub fn with_streams(dispatch: D, reader: R, writer: W) -> Self {
        Conn {
            core: Core::new::<D>(),
            dispatch,
            reader,
            writer,
        }
    }

    /// The implementation served.
    pub fn dispatcher(&mut self) -> &mut D {
        &mut self.dispatch
    }

    /// Serves requests until the client is gone (`Ok`), must be waited
    /// for (`WouldBlock`, non-blocking ends only) or broke the protocol
    /// (`InvalidData`; drop the connection).
    pub fn serve(&mut self) -> io::Result<()> {
        self.core
            .step(&mut self.dispatch, &mut self.reader, &mut self.writer)
    }
}

impl Core {
    /// A fresh connection's state for an interface `D`.
    pub fn new<D: Dispatch>() -> Self {
        let room = HEADER + D::INTERFACE.max_frame as usize;
        Core {
            input: vec![0u8; room].into_boxed_slice(),
            start: 0,
            have: 0,
            out: vec![0u8; room].into_boxed_slice(),
            out_pos: 0,
            out_len: 0,
            greeted: false,
            closing: false,
        }
    }

    /// Serves with these ends as [`Conn::serve`] does.
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

    /// Writes what is left of the last reply; true if the connection is
    /// over (the client is gone or this side closes it). Inlined: it is
    /// called twice per request, between a request's arrival and its
    /// reply too, and has nothing to do when the reply went straight into
    /// the ring (measured with callgrind: 28 instructions a call out of
    /// line).
    #[inline]
    fn flush(&mut self, writer: &mut impl ReplyOut) -> io::Result<bool> {
        if self.out_pos >= self.out_len && !self.closing {
            return Ok(false);
        }
        self.flush_slow(writer)
    }

    /// `flush` when a reply waits in `out` or the connection closes.
    #[cold]
    #[inline(never)]
    fn flush_slow(&mut self, writer: &mut impl ReplyOut) -> io::Result<bool> {
        while self.out_pos < self.out_len {
            match writer.write(&self.out[self.out_pos..self.out_len]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(true),
                Err(e) => return Err(e),
            }
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
                Err(e) => return Err(e),
            }
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
        let out = &mut self.out;
        let (status, len) = if op == wire::HELLO {
            if self.greeted {
                message(out, wire::BAD_REQUEST, "a second hello")
            } else {
                let (status, len) = hello::<D>(out, body);
                self.greeted = status == wire::OK;
                self.closing = !self.greeted;
                (status, len)
            }
        } else if !self.greeted {
            self.closing = true;
            message(out, wire::BAD_REQUEST, "no hello")
        } else {
            run(d, &mut self.closing, op, body, out)
        };
        self.out[..HEADER].copy_from_slice(&wire::header(len as u32, status));
        self.out_pos = 0;
        self.out_len = HEADER + len;
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

/// Serves every client of `listener`, each on its own thread with the
/// dispatcher `make` gives for it (`make` sees who connected). Returns
/// only if accepting fails.
///
/// # Examples
///
/// ```no_run
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// struct P;
/// impl Ping for P { fn ping(&self) {} }
/// let listener = shmpipe::Listener::bind("/tmp/ping.sock")?;
/// shmpipe::rpc::serve(listener, |_peer| PingServer(P))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve<D, F>(listener: Listener, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn(&PeerCredentials) -> D,
{
    loop {
        let Some(conn) = accept_or_back_off(&listener)? else {
            continue;
        };
        let d = make(&conn.peer);
        std::thread::Builder::new()
            .name("shmpipe-rpc".into())
            .spawn(move || {
                let _ = Conn::new(d, conn).serve();
            })?;
    }
}

/// [`serve`] over a Unix socket: the same stubs on kernel IPC
/// ([`UnixTransport`](super::UnixTransport) is the client's side).
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self) -> u8; }
/// struct P;
/// impl Ping for P { fn ping(&self) -> u8 { 7 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-serve-unix-doc-{}.sock", std::process::id()));
/// let listener = std::os::unix::net::UnixListener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_unix(listener, || PingServer(P)));
/// let c = PingClient::with_transport(shmpipe::rpc::UnixTransport::connect(&path)?)?;
/// assert_eq!(c.ping(), 7);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_unix<D, F>(listener: UnixListener, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn() -> D,
{
    loop {
        let (stream, _) = listener.accept()?;
        let d = make();
        let mut conn = Conn::unix(d, stream)?;
        std::thread::Builder::new()
            .name("shmpipe-rpc-unix".into())
            .spawn(move || {
                let _ = conn.serve();
            })?;
    }
}

/// The listener's token in [`serve_waitset`]'s set; client `id` has `2 *
/// id` for its requests and `2 * id + 1` for its replies, one of the two
/// in the set at a time.
const LISTENER: u64 = u64::MAX;

/// Requests one client of [`serve_waitset`] gets served in a row while
/// others may wait: a client that keeps its requests coming is served
/// this many, then every other ready client gets its turn.
const TURN: usize = 64;

/// One client of [`serve_waitset`]: whichever end is not in the set.
struct Client<D> {
    dispatch: D,
    core: Core,
    reader: Option<Reader>,
    writer: Option<Writer>,
    /// The pass of the serve loop that last served it (one turn a pass).
    pass: u64,
}

/// Serves every client of `listener` from this one thread, through a
/// [`WaitSet`](shmpipe_core::WaitSet): busy clients are served without a system
/// call per request, an idle server sleeps once for all of them. A client
/// whose replies are full is not read from until they drain, so it holds
/// up no one else; one that keeps its requests coming is served 64 in a
/// row, then the others get their turn; one that breaks the protocol is
/// dropped. `make` gives
/// each client its dispatcher. Returns only if the set fails.
///
/// # Examples
///
/// ```no_run
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// struct P;
/// impl Ping for P { fn ping(&self) {} }
/// let listener = shmpipe::Listener::bind("/tmp/ping.sock")?;
/// shmpipe::rpc::serve_waitset(listener, |_peer| PingServer(P))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_waitset<D, F>(mut listener: Listener, make: F) -> io::Result<()>
where
    D: Dispatch,
    F: Fn(&PeerCredentials) -> D,
{
    // Six descriptors per client (three per pipe end).
    let _ = shmpipe_core::raise_fd_limit();
    listener.set_nonblocking(true);
    let mut set = shmpipe_core::WaitSet::new()?;
    set.add(LISTENER, listener)?;
    serve_set(set, |s| accept_all(s, &make))
}

/// The loop of [`serve_waitset`] and of each thread of [`serve_threads`]:
/// `admit` takes in new clients when the source under `LISTENER` (a
/// listener, or a thread's doorbell) is ready.
fn serve_set<D: Dispatch>(
    mut set: shmpipe_core::WaitSet,
    mut admit: impl FnMut(&mut Serving<'_, D>) -> io::Result<()>,
) -> io::Result<()> {
    let mut clients: Vec<Option<Client<D>>> = Vec::new();
    let mut free: Vec<u64> = Vec::new();
    let mut ready = Vec::new();
    // Clients whose turn ended with requests left (perhaps buffered in
    // their `Core`, where no readiness shows them): served again next
    // pass, after a look at the others that does not sleep.
    let mut again: Vec<u64> = Vec::new();
    let mut turns: Vec<u64> = Vec::new();
    let mut pass = 0u64;
    loop {
        let timeout = (!again.is_empty()).then_some(std::time::Duration::ZERO);
        set.wait(&mut ready, timeout)?;
        pass += 1;
        std::mem::swap(&mut again, &mut turns);
        let mut s = Serving {
            set: &mut set,
            clients: &mut clients,
            free: &mut free,
            again: &mut again,
            pass,
        };
        for &token in &ready {
            if token == LISTENER {
                admit(&mut s)?;
            } else {
                step(&mut s, token / 2);
            }
        }
        for id in turns.drain(..) {
            step(&mut s, id);
        }
    }
}

/// Serves every client of `listener` from `threads` threads (at least
/// one), each with a [`WaitSet`](shmpipe_core::WaitSet) of its own as
/// [`serve_waitset`] has: this thread accepts, and hands the new
/// connections to the serving threads in turn (through a channel, with a
/// byte on a shmpipe pipe that the thread's set watches as its doorbell).
/// A client is served by one thread for its whole life. `make` gives each
/// client its dispatcher (in this thread). Returns only if accepting
/// fails or a serving thread ended.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self, x: u32) -> u32; }
/// struct P;
/// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-threads-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve_threads(listener, 2, |_peer| PingServer(P)));
/// let clients: Vec<_> = (0..4).map(|_| PingClient::connect(&path)).collect::<Result<_, _>>()?;
/// for (i, c) in clients.iter().enumerate() {
///     assert_eq!(c.ping(i as u32), i as u32 + 1);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_threads<D, F>(listener: Listener, threads: usize, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn(&PeerCredentials) -> D,
{
    let _ = shmpipe_core::raise_fd_limit();
    let mut doors = Vec::new();
    for i in 0..threads.max(1) {
        let (mut bell, ring) = shmpipe_core::pipe()?;
        bell.set_nonblocking(true);
        let (tx, rx) = std::sync::mpsc::channel::<(Connection, D)>();
        std::thread::Builder::new()
            .name(format!("shmpipe-rpc-{i}"))
            .spawn(move || {
                let mut set = shmpipe_core::WaitSet::new()?;
                set.add(LISTENER, bell)?;
                serve_set(set, |s| admit_handed(s, &rx))
            })?;
        doors.push((ring, tx));
    }
    let mut next = 0;
    loop {
        let Some(conn) = accept_or_back_off(&listener)? else {
            continue;
        };
        let d = make(&conn.peer);
        let n = doors.len();
        let (ring, tx) = &mut doors[next];
        next = (next + 1) % n;
        if tx.send((conn, d)).is_err() {
            return Err(io::Error::other("shmpipe rpc: a serving thread ended"));
        }
        ring.write_all(&[1])?;
    }
}

/// A serving thread of [`serve_threads`] was rung: takes in the
/// connections handed to it.
fn admit_handed<D: Dispatch>(
    s: &mut Serving<'_, D>,
    rx: &std::sync::mpsc::Receiver<(Connection, D)>,
) -> io::Result<()> {
    let Some(bell) = s.set.reader_mut(LISTENER) else {
        return Ok(());
    };
    let mut buf = [0u8; 64];
    let mut gone = false;
    loop {
        match bell.read(&mut buf) {
            Ok(0) => {
                gone = true;
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    if gone {
        // The accepting thread ended: serve the clients we have.
        s.set.remove(LISTENER);
    }
    while let Ok((conn, d)) = rx.try_recv() {
        admit(s, conn, d);
    }
    Ok(())
}

/// What a pass of [`serve_waitset`] works on.
struct Serving<'a, D> {
    set: &'a mut shmpipe_core::WaitSet,
    clients: &'a mut Vec<Option<Client<D>>>,
    free: &'a mut Vec<u64>,
    again: &'a mut Vec<u64>,
    pass: u64,
}

/// A blocking accept for the thread-per-client servers; `None` after a
/// short back-off when out of descriptors (the listener had no spare to
/// turn the client away with), instead of ending the server.
fn accept_or_back_off(listener: &Listener) -> io::Result<Option<Connection>> {
    match listener.accept() {
        Ok(conn) => Ok(Some(conn)),
        Err(e) if out_of_fds(&e) => {
            std::thread::sleep(std::time::Duration::from_millis(10));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `EMFILE` or `ENFILE` from an accept.
fn out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

fn accept_all<D: Dispatch>(
    s: &mut Serving<'_, D>,
    make: &impl Fn(&PeerCredentials) -> D,
) -> io::Result<()> {
    loop {
        let listener = s.set.listener_mut(LISTENER).expect("the listener");
        let conn = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Out of descriptors: the clients we have are still served.
            Err(e) if out_of_fds(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let dispatch = make(&conn.peer);
        admit(s, conn, dispatch);
    }
}

/// Adds a new client to the set and serves what it sent already.
fn admit<D: Dispatch>(s: &mut Serving<'_, D>, conn: Connection, dispatch: D) {
    let (mut reader, mut writer) = conn.split();
    reader.set_nonblocking(true);
    writer.set_nonblocking(true);
    let id = s.free.pop().unwrap_or(s.clients.len() as u64);
    if s.set.add(2 * id, reader).is_err() {
        s.free.push(id);
        return; // out of epoll room: this client is dropped
    }
    let client = Client {
        dispatch,
        core: Core::new::<D>(),
        reader: None,
        writer: Some(writer),
        pass: 0,
    };
    match s.clients.get_mut(id as usize) {
        Some(slot) => *slot = Some(client),
        None => s.clients.push(Some(client)),
    }
    // It may have spoken already.
    step(s, id);
}

/// Serves client `id` as far as it goes without waiting, for one turn
/// a pass at most; then leaves in the set the end it waits on.
fn step<D: Dispatch>(s: &mut Serving<'_, D>, id: u64) {
    let (set, clients, free) = (&mut *s.set, &mut *s.clients, &mut *s.free);
    let Some(Some(c)) = clients.get_mut(id as usize) else {
        return;
    };
    if c.pass == s.pass {
        return; // had its turn in this pass
    }
    c.pass = s.pass;
    let r = match (&mut c.reader, &mut c.writer) {
        (None, Some(w)) => match set.reader_mut(2 * id) {
            Some(r) => c.core.step_at_most(&mut c.dispatch, r, w, TURN),
            None => return,
        },
        (Some(r), None) => match set.writer_mut(2 * id + 1) {
            Some(w) => c.core.step_at_most(&mut c.dispatch, r, w, TURN),
            None => return,
        },
        _ => return,
    };
    let more = match r {
        Ok(false) => true,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        // Gone, closed by us, or broke the protocol.
        _ => return drop_client(set, clients, free, id),
    };
    let waits_to_write = c.core.out_pos < c.core.out_len;
    let moved = match (waits_to_write, c.reader.is_none()) {
        // Replies full: wait for room, read no more meanwhile.
        (true, true) => {
            let w = c.writer.take().expect("the writer");
            c.reader = match set.remove(2 * id) {
                Some(shmpipe_core::waitset::Source::Reader(r)) => Some(r),
                _ => None,
            };
            set.add(2 * id + 1, w).is_ok() && c.reader.is_some()
        }
        // Room again: wait for requests.
        (false, false) => {
            let r = c.reader.take().expect("the reader");
            c.writer = match set.remove(2 * id + 1) {
                Some(shmpipe_core::waitset::Source::Writer(w)) => Some(w),
                _ => None,
            };
            set.add(2 * id, r).is_ok() && c.writer.is_some()
        }
        _ => true,
    };
    if !moved {
        drop_client(set, clients, free, id);
    } else if more {
        s.again.push(id);
    }
}

fn drop_client<D>(
    set: &mut shmpipe_core::WaitSet,
    clients: &mut [Option<Client<D>>],
    free: &mut Vec<u64>,
    id: u64,
) {
    set.remove(2 * id);
    set.remove(2 * id + 1);
    if let Some(slot) = clients.get_mut(id as usize) {
        if slot.take().is_some() {
            free.push(id);
        }
    }
}
