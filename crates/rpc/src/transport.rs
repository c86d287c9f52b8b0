//! How a client's frames travel: through shmpipe's rings, or a Unix
//! socket (the same stubs over kernel IPC, for comparison).

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::marker::PhantomData;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering};

use shmpipe_ring::inline::INLINE_MAX;
use shmpipe_ring::layout::PARKED;

use super::wire::HEADER;
use super::Client;
use crate::wait::Ready;
use crate::{error, Connection, Reader, Writer};

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
pub struct FrameOut<'a, const Q: usize> {
    ptr: *mut u8,
    _room: PhantomData<&'a mut [u8; Q]>,
}

impl<'a, const Q: usize> FrameOut<'a, Q> {
    /// A frame written into `buf`.
    #[inline(always)]
    pub fn new(buf: &'a mut [u8; Q]) -> Self {
        FrameOut {
            ptr: buf.as_mut_ptr(),
            _room: PhantomData,
        }
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
        let b = v.as_bytes();
        assert!(
            off <= Q && b.len() <= Q - off,
            "FrameOut::put past the frame"
        );
        // SAFETY: `ptr` points to `Q` writable bytes (a buffer we borrow,
        // or room reserved in the request ring that no one else writes
        // until it is published), and `off + len <= Q`; `b` is a separate
        // value.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr.add(off), b.len()) };
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
/// the two ends' hot state (`shmpipe_ring::Hot`), lent while the client is
/// not busy. Positions are the rings' free-running ones.
///
/// # Examples
///
/// ```
/// let lanes = shmpipe::rpc::ShmLanes::default(); // not lent: every call goes the general way
/// # let _ = lanes;
/// ```
#[derive(Debug)]
pub struct ShmLanes {
    /// The request ring's next position to write.
    q_pos: Cell<u64>,
    /// How far the fast path may write: the reader's head (as last seen)
    /// plus the capacity, or the end of this lap of the ring, whichever
    /// is first. `q_pos` when not lent.
    q_end: Cell<u64>,
    /// The data's address minus this lap's first position: position `p`
    /// of this lap is at `q_base + p`.
    q_base: Cell<*mut u8>,
    /// Our tail in shared memory.
    q_index: Cell<*const AtomicU64>,
    /// The server's parked word on the request ring.
    q_parked: Cell<*const AtomicU64>,
    /// Publish with a full fence (not the ring's light fences).
    heavy: Cell<bool>,
    /// How far the producer knows `q_pos` went: it is told only when the
    /// lanes are taken back or the server must be woken, not at every
    /// call (see `slow_reply`).
    q_told: Cell<u64>,
    /// The reply ring's next position to read.
    r_pos: Cell<u64>,
    /// How far replies may be read in place: the writer's tail (as last
    /// seen), the end of this lap, or a quarter ring past the last
    /// published head, whichever is first.
    r_end: Cell<u64>,
    /// As `q_base`, for the reply ring.
    r_base: Cell<*const u8>,
    /// The reply ring's data.
    r_data: Cell<*const u8>,
    /// How far the consumer knows `r_pos` went.
    r_told: Cell<u64>,
    /// The head last published.
    r_published: Cell<u64>,
    /// The last small reply waited for, copied out of the ring (see
    /// `slow_reply`).
    reply: Cell<[u8; INLINE_MAX]>,
}

// SAFETY: the pointers point into the shared mappings of the transport
// the lanes belong to (one `Client` holds both, and they move together);
// nothing in them is tied to a thread.
unsafe impl Send for ShmLanes {}

impl Default for ShmLanes {
    fn default() -> Self {
        ShmLanes {
            q_pos: Cell::new(0),
            q_end: Cell::new(0),
            q_base: Cell::new(std::ptr::null_mut()),
            q_index: Cell::new(std::ptr::null()),
            q_parked: Cell::new(std::ptr::null()),
            heavy: Cell::new(true),
            q_told: Cell::new(0),
            r_pos: Cell::new(0),
            r_end: Cell::new(0),
            r_base: Cell::new(std::ptr::null()),
            r_data: Cell::new(std::ptr::null()),
            r_told: Cell::new(0),
            r_published: Cell::new(0),
            reply: Cell::new([0; INLINE_MAX]),
        }
    }
}

impl ShmLanes {
    /// Lends the writer's state (publishing what it committed first).
    fn lend_writer(&self, w: &mut Writer, look: bool) {
        w.end.publish();
        if look {
            // A fresh look at the reader's head: the fast path never makes
            // one. (Not at every wait for a reply: the head's line is the
            // server's, and a look costs a miss while the room is ample.)
            let _ = w.end.ring.free(w.end.ring.capacity());
        }
        let Some(h) = w.end.ring.hot() else {
            self.q_end.set(self.q_pos.get());
            return;
        };
        let lap = h.pos & !h.mask;
        self.q_pos.set(h.pos);
        self.q_told.set(h.pos);
        self.q_end.set(h.limit.min(lap.wrapping_add(h.mask + 1)));
        self.q_base.set(h.data.wrapping_sub(lap as usize));
        self.q_index.set(h.index);
        self.q_parked.set(h.peer_parked);
        self.heavy.set(!h.light);
    }

    /// Tells the writer how far the fast path went; it publishes the same
    /// tail again (and wakes the server if it sleeps).
    fn revoke_writer(&self, w: &mut Writer) {
        let n = self.q_pos.get().wrapping_sub(self.q_told.get());
        if n > 0 {
            w.end.ring.commit(n as usize);
            self.q_told.set(self.q_pos.get());
        }
        w.end.publish();
        self.q_end.set(self.q_pos.get());
    }

    /// Lends the reader's state (publishing its head first).
    fn lend_reader(&self, r: &mut Reader) {
        r.end.publish();
        let Some(h) = r.end.ring.hot() else {
            self.r_end.set(self.r_pos.get());
            return;
        };
        self.r_pos.set(h.pos);
        self.r_told.set(h.pos);
        self.r_published.set(h.pos);
        self.r_data.set(h.data.cast_const());
        self.set_r_end(h.pos, h.limit, h.mask + 1);
    }

    /// `r_end` and `r_base` for reading from `pos` with the writer's tail
    /// at `tail`.
    fn set_r_end(&self, pos: u64, tail: u64, cap: u64) {
        let lap = pos & !(cap - 1);
        let end = tail
            .min(lap.wrapping_add(cap))
            .min(self.r_published.get().wrapping_add(cap / 4));
        self.r_end.set(end);
        self.r_base
            .set(self.r_data.get().wrapping_sub(lap as usize));
    }

    /// Tells the reader how far the fast path read, and publishes.
    fn revoke_reader(&self, r: &mut Reader) {
        self.catch_up_reader(r);
        r.end.publish();
        self.r_published.set(self.r_pos.get());
        self.r_end.set(self.r_pos.get());
    }

    /// Tells the reader how far the fast path read, without publishing.
    fn catch_up_reader(&self, r: &mut Reader) {
        let n = self.r_pos.get().wrapping_sub(self.r_told.get());
        if n > 0 {
            r.end.ring.consume(n as usize);
            self.r_told.set(self.r_pos.get());
        }
    }
}

/// Eight zero bytes: not a frame header (no tag), so no stub takes them
/// for its reply.
static NO_REPLY: [u8; HEADER] = [0; HEADER];

/// Where `wait_reply` points when there is no reply to read in place.
fn no_reply() -> *const u8 {
    NO_REPLY.as_ptr()
}

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

    #[cold]
    #[inline(never)]
    fn put_slow(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)
    }

    #[cold]
    #[inline(never)]
    fn take_slow(&mut self, dst: &mut [u8]) -> io::Result<()> {
        // A reply is usually on its way or there already: look at the
        // server's index once at once (a wait would pause before its first
        // look, which suits streams of small items, not a reply awaited).
        let ring = &mut self.reader.end.ring;
        if matches!(ring.available(dst.len()), Ok(n) if n >= dst.len()) {
            ring.pop(dst);
            return Ok(());
        }
        // Free what was read so far: the server may be waiting for room
        // to write the rest of a large reply.
        self.reader.end.publish();
        self.reader.read_exact(dst)
    }

    /// The server sleeps on the request ring: the writer publishes the
    /// same tail again, which wakes it (once per parking). Left out of the
    /// stub's instruction count with the waiting: it is the system call
    /// that stands for a kernel IPC (see the bench's `rpc-stub`).
    #[cold]
    #[inline(never)]
    fn wake_server(c: &Client<Self>) -> &Client<Self> {
        // SAFETY: the lanes were lent, so the client is not busy (see
        // `Client`); no user code runs here.
        let t = unsafe { &mut *c.transport.get() };
        c.lanes.revoke_writer(&mut t.writer);
        c.lanes.lend_writer(&mut t.writer, false);
        c
    }

    /// Waits until the reply's first `HEADER + R` bytes can be read and
    /// returns where they are (in place, or copied out if small: see
    /// `slow_reply`); [`no_reply`] (a header no reply has) if the general
    /// path must read this reply (a large one across the ring's end, one
    /// arrived in part, or the wait failed: the error is kept for it).
    /// This is the waiting the stub's instruction count leaves out (see the bench's `rpc-stub`).
    ///
    /// It hands `c` back: the stub then keeps no register of its own
    /// across the wait.
    #[inline(never)]
    fn wait_reply<const R: usize>(c: &Client<Self>) -> (*const u8, &Client<Self>) {
        let n = (HEADER + R) as u64;
        let l = &c.lanes;
        let pos = l.r_pos.get();
        if l.r_end.get().wrapping_sub(pos) >= n {
            return (l.r_base.get().wrapping_add(pos as usize), c);
        }
        (Self::slow_reply(c, n), c)
    }

    /// `wait_reply` once the reply was not in view (named apart from it:
    /// the bench's callgrind toggle matches `wait_reply*`).
    #[inline(never)]
    fn slow_reply(c: &Client<Self>, n: u64) -> *const u8 {
        let l = &c.lanes;
        if c.busy.get() || l.r_data.get().is_null() {
            return no_reply();
        }
        // SAFETY: not busy, so no other reference to the transport lives
        // (see `Client`); no user code runs here.
        let t = unsafe { &mut *c.transport.get() };
        let pos = l.r_pos.get();
        let cap = t.reader.end.ring.capacity() as u64;
        l.catch_up_reader(&mut t.reader);
        // The replies read are given back a quarter ring at a time: the
        // server then always finds room for a small reply, so the client
        // may sleep without publishing its head.
        if pos.wrapping_sub(l.r_published.get()) >= cap / 4 {
            t.reader.end.publish();
            l.r_published.set(pos);
        }
        if n > cap / 4 {
            return no_reply();
        }
        // The send is noted as the writer's first since this thread's last
        // wait (the request's bytes are out already, published by the
        // lane): the wait then knows a reply is awaited, and our CPU hint
        // for the server is refreshed, which may switch the writer's fences
        // (see the ring's `peer_shares_cpu`); the lane takes up whichever
        // way it publishes now. The writer is not told how far the lane
        // went (it commits nothing, so this publish stores nothing: a store
        // would take back the tail's line the server is reading).
        t.writer.end.publish();
        if let Some(h) = t.writer.end.ring.hot() {
            l.heavy.set(!h.light);
        }
        loop {
            match t.reader.end.ring.available(n as usize) {
                Ok(a) if a as u64 >= n => break,
                Ok(0) => {}
                // Part of a frame: the general path reads it.
                Ok(_) => return no_reply(),
                Err(e) => {
                    t.failed = Some(error::protocol(e));
                    return no_reply();
                }
            }
            match t.reader.end.side.wait(&mut t.reader.end.ring, 1) {
                Ok(Ready::Yes) => {}
                // The general path reports the end of the stream.
                Ok(Ready::PeerGone) => return no_reply(),
                Err(e) => {
                    t.failed = Some(e);
                    return no_reply();
                }
            }
        }
        let ring = &t.reader.end.ring;
        let tail = pos.wrapping_add(ring.available_cached() as u64);
        l.set_r_end(pos, tail, cap);
        if n as usize <= INLINE_MAX {
            // A small reply is copied out as the ring's reads do: from the
            // copy the server kept beside its tail (see the ring's
            // `inline`), which came with the tail the wait saw, when it
            // holds the reply; read in place from the data instead, it
            // would cost a second cross-core transfer. Across the ring's
            // end too.
            let mut buf = [0u8; INLINE_MAX];
            ring.peek(0, &mut buf[..n as usize]);
            l.reply.set(buf);
            if l.r_end.get().wrapping_sub(pos) < n {
                // Read across the ring's end (or past the quarter ring):
                // nothing after it is in view, and `r_end` stays at or
                // past `r_pos` once the stub moves it on.
                l.r_end.set(pos.wrapping_add(n));
            }
            return l.reply.as_ptr().cast_const().cast();
        }
        if l.r_end.get().wrapping_sub(pos) < n {
            // Across the ring's end.
            return no_reply();
        }
        l.r_base.get().wrapping_add(pos as usize)
    }
}

impl Transport for ShmTransport {
    type Lanes = ShmLanes;

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.writer.end.ring.try_push(bytes) {
            return Ok(());
        }
        self.put_slow(bytes)
    }

    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        self.writer.end.publish();
        self.reader.end.publish();
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
        self.writer.end.publish();
        self.reader.end.publish();
        let mut h = [0u8; HEADER];
        self.take(&mut h)?;
        Ok(u64::from_le_bytes(h))
    }

    #[inline(always)]
    fn take(&mut self, dst: &mut [u8]) -> io::Result<()> {
        let ring = &mut self.reader.end.ring;
        if ring.available_cached() >= dst.len() {
            ring.pop(dst);
            return Ok(());
        }
        self.take_slow(dst)
    }

    /// Nothing to do: the reply's room is released with the next request
    /// (or when more is awaited, or the transport is dropped).
    #[inline(always)]
    fn done(&mut self) {}

    fn lend(lanes: &ShmLanes, t: &mut Self) {
        lanes.lend_writer(&mut t.writer, true);
        lanes.lend_reader(&mut t.reader);
    }

    fn revoke(lanes: &ShmLanes, t: &mut Self) {
        lanes.revoke_writer(&mut t.writer);
        lanes.revoke_reader(&mut t.reader);
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
        let l = &c.lanes;
        let pos = l.q_pos.get();
        let end = pos.wrapping_add(Q as u64);
        // (Positions do not wrap around u64; a lap's last frame, a full
        // ring or lanes not lent go the general way.)
        if end > l.q_end.get() || Q < HEADER {
            return Fixed::Unsent;
        }
        // The room from `pos` to `end` lies inside this lap of the ring
        // and below the reader's head plus the capacity: ours to write
        // until published.
        fill(&mut FrameOut {
            ptr: l.q_base.get().wrapping_add(pos as usize),
            _room: PhantomData,
        });
        l.q_pos.set(end);
        // SAFETY: `q_index` and `q_parked` point into the mappings the
        // transport keeps (lent by the writer, valid while lent).
        let parked = unsafe {
            // SYNC: as Producer::publish: Release pairs with the server's
            // Acquire of the tail; the fence with its park.
            (*l.q_index.get()).store(end, Ordering::Release);
            if l.heavy.get() {
                fence(Ordering::SeqCst);
            }
            compiler_fence(Ordering::SeqCst);
            (*l.q_parked.get()).load(Ordering::Relaxed)
        };
        let c = if parked & PARKED != 0 {
            Self::wake_server(c)
        } else {
            c
        };
        const { assert!(R <= u32::MAX as usize) };
        let (p, c) = Self::wait_reply::<R>(c);
        // SAFETY: `wait_reply` points at `HEADER + R` readable bytes: in
        // the reply ring's data, in the lanes' copy of a small reply
        // (`ShmLanes::reply`, left alone until the next wait), or at
        // `NO_REPLY`; plain bytes, copied once (a hostile server may
        // scribble on the ring's: we check what we copied). The body is
        // read only after the header matched, so never from `NO_REPLY`.
        let h = u64::from_le_bytes(unsafe { p.cast::<[u8; HEADER]>().read_unaligned() });
        if h != ok {
            return Fixed::Sent(c);
        }
        // SAFETY: as above.
        let v = unsafe { p.add(HEADER).cast::<[u8; R]>().read_unaligned() };
        let l = &c.lanes;
        l.r_pos.set(l.r_pos.get().wrapping_add((HEADER + R) as u64));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::wire::{self, HELLO_LEN};
    use crate::rpc::Interface;

    const IFACE: Interface = Interface {
        name: "Fences",
        id: 0x5eed,
        version: 1,
        max_frame: 64,
    };

    fn pin(cpu: usize) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).unwrap();
    }

    /// The lanes publish as the writer does now: with a full fence unless
    /// the writer publishes with light ones. The writer's fences follow
    /// where the server runs (`peer_shares_cpu`, switched at the CPU-hint
    /// exchange of the publish that notes a send, in `slow_reply`, while
    /// the lanes are lent); lanes still on
    /// light fences after the writer went full and cleared its header
    /// flag publish without the fence the server's park, skipping its
    /// membarrier, relies on: a lost wake-up (the ring's loom model
    /// `fence_switch_*` deadlocks on such a publish).
    #[test]
    fn lanes_fence_as_the_writer_does() {
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .take(2)
            .collect();
        if !crate::sys::light_fences() || cpus.len() < 2 {
            eprintln!("skipped: needs light fences (membarrier) and two CPUs");
            return;
        }
        let (ours, other) = (cpus[0], cpus[1]);
        let path =
            std::env::temp_dir().join(format!("shmpipe-lanes-fences-{}.sock", std::process::id()));
        let listener = crate::Listener::bind(&path).unwrap();
        // The server runs on another CPU and never sleeps, but its hint
        // says it runs on ours (a hint gone stale: it last waited here, then
        // moved). The client's publishes never wake it, so `wake_server`
        // never re-lends the writer: only `slow_reply`'s note of the send
        // sees the hint.
        pin(ours);
        const CALLS: u32 = 50;
        let (lent_tx, lent_rx) = std::sync::mpsc::channel::<()>();
        // Set when this test ends, however: the server stops spinning.
        struct Over(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Over {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let over = Over(Default::default());
        let done = over.0.clone();
        let server = std::thread::spawn(move || {
            pin(other);
            let (mut r, mut w) = listener.accept().unwrap().split();
            let mut hello = [0u8; wire::HEADER + HELLO_LEN];
            r.read_exact(&mut hello).unwrap();
            w.write_all(&wire::header(0, wire::OK)).unwrap();
            w.flush().unwrap();
            if lent_rx.recv().is_err() {
                return;
            }
            r.end.ring.exchange_cpu_hint(ours as u32);
            let mut q = [0u8; wire::HEADER + 4];
            for _ in 0..CALLS {
                while r.end.ring.available(q.len()).unwrap() < q.len() {
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                r.end.ring.pop(&mut q);
                r.end.publish();
                let x = u32::from_ne_bytes(q[8..].try_into().unwrap());
                let mut reply = [0u8; wire::HEADER + 4];
                reply[..8].copy_from_slice(&wire::header(4, wire::OK));
                reply[8..].copy_from_slice(&(x + 1).to_ne_bytes());
                w.write_all(&reply).unwrap();
                w.flush().unwrap();
            }
        });
        let t = ShmTransport::new(crate::connect(&path).unwrap());
        let client = super::super::Client::new(t, &IFACE).unwrap();
        lent_tx.send(()).unwrap();
        let _ = std::fs::remove_file(&path);
        let light = |c: &super::super::Client<ShmTransport>| {
            // SAFETY: not busy, no call in progress: ours alone here.
            let t = unsafe { &*c.transport.get() };
            t.writer.end.ring.hot().is_some_and(|h| h.light)
        };
        for x in 0..CALLS {
            let got = match client.call_fixed::<12, 4>(
                |f| {
                    f.put(0, &wire::header(4, 7));
                    f.put(8, &x);
                },
                wire::ok_header(4),
            ) {
                Fixed::Done(b) => u32::from_ne_bytes(b),
                other => panic!("call {x}: {other:?}"),
            };
            assert_eq!(got, x + 1);
            assert!(
                client.lanes.heavy.get() || light(&client),
                "call {x}: the lanes publish with light fences, the writer's header says full ones"
            );
        }
        server.join().unwrap();
        drop((client, over));
    }
}
