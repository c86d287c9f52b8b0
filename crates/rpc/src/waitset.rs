//! The waitset servers: every client from one thread's waitset
//! ([`serve_waitset`]) or from N of them ([`serve_threads`]), each
//! connection's state a [`Core`].
//!
//! One thread serves many clients here, so what each costs while idle
//! matters: a `Core` holds request and reply bytes only while a frame is
//! on its way, and the bytes all clients hold together are bounded
//! ([`ServeLimits::buffered`]): past the bound the client holding the
//! most is shed.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shmpipe_core::waitset::Source;
use shmpipe_core::{Connection, Listener, PeerCredentials, Reader, Writer};

use crate::conn::Core;
use crate::dispatch::Dispatch;
use crate::limits::{passing, refuse, Seat, ServeLimits, Tally, BACK_OFF};
use crate::serve::admit_next;

/// The listener's token in [`serve_waitset`]'s set; client `id` has `2 *
/// id` for its requests and `2 * id + 1` for its replies, one of the two
/// in the set at a time.
const LISTENER: u64 = u64::MAX;

/// Requests one client of [`serve_waitset`] gets served in a row while
/// others may wait: a client that keeps its requests coming is served
/// this many, then every other ready client gets its turn.
const TURN: usize = 64;

/// One client's connection in the waitset of [`serve_waitset`] (or of a
/// thread of [`serve_threads`]): its dispatcher and state, and whichever
/// of its two ends is not in the set.
struct SetConn<D> {
    dispatch: D,
    core: Core,
    reader: Option<Reader>,
    writer: Option<Writer>,
    /// The pass of the serve loop that last served it (one turn a pass).
    pass: u64,
    /// The bytes its `Core` held when last counted in the server's total.
    held: usize,
    /// Its place among the server's clients, given back with it.
    _seat: Seat,
}

/// Serves every client of `listener` from this one thread, through a
/// [`WaitSet`](shmpipe_core::WaitSet): busy clients are served without a system
/// call per request, an idle server sleeps once for all of them. A client
/// whose replies are full is not read from until they drain, so it holds
/// up no one else; one that keeps its requests coming is served 64 in a
/// row, then the others get their turn; one that breaks the protocol is
/// dropped. `make` gives
/// each client its dispatcher. Within [`ServeLimits::new`]'s bounds
/// ([`ServeLimits::serve_waitset`]). Returns only if the set fails.
///
/// Each client costs six descriptors; the server does not raise the
/// process's limit (`RLIMIT_NOFILE`, often 1024, about 160 clients): call
/// [`raise_fd_limit`](shmpipe_core::raise_fd_limit) first to serve more.
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
pub fn serve_waitset<D, F>(listener: Listener, make: F) -> io::Result<()>
where
    D: Dispatch,
    F: Fn(&PeerCredentials) -> D,
{
    ServeLimits::new().serve_waitset(listener, make)
}

/// The loop of [`serve_waitset`] and of each thread of [`serve_threads`]:
/// `admit` takes in new clients when the source under `LISTENER` (a
/// listener, or a thread's doorbell) is ready.
/// `admit` says whether to rest (out of descriptors or memory): the
/// source is then taken out of the set for [`BACK_OFF`], so that a
/// listener that stays readable cannot make the loop spin. The clients
/// hold `budget` bytes at most together.
fn serve_set<D: Dispatch>(
    mut set: shmpipe_core::WaitSet,
    budget: usize,
    mut admit: impl FnMut(&mut Serving<'_, D>) -> io::Result<bool>,
) -> io::Result<()> {
    let mut clients: Vec<Option<SetConn<D>>> = Vec::new();
    let mut buffered = 0usize;
    let mut resting: Option<(Source, Instant)> = None;
    let mut free: Vec<u64> = Vec::new();
    let mut ready = Vec::new();
    // Clients whose turn ended with requests left (perhaps buffered in
    // their `Core`, where no readiness shows them): served again next
    // pass, after a look at the others that does not sleep.
    let mut again: Vec<u64> = Vec::new();
    let mut turns: Vec<u64> = Vec::new();
    let mut pass = 0u64;
    loop {
        if let Some((_, until)) = &resting {
            if Instant::now() >= *until {
                let (source, _) = resting.take().expect("resting");
                set.add(LISTENER, source)?;
            }
        }
        let timeout = if !again.is_empty() {
            Some(Duration::ZERO)
        } else {
            resting
                .as_ref()
                .map(|(_, until)| until.saturating_duration_since(Instant::now()))
        };
        set.wait(&mut ready, timeout)?;
        pass += 1;
        std::mem::swap(&mut again, &mut turns);
        let mut s = Serving {
            set: &mut set,
            clients: &mut clients,
            free: &mut free,
            again: &mut again,
            pass,
            buffered: &mut buffered,
            budget,
        };
        for token in ready.iter().map(|t| t.0) {
            if token == LISTENER {
                if admit(&mut s)? {
                    let source = s.set.remove(LISTENER).expect("the listener");
                    resting = Some((source, Instant::now() + BACK_OFF));
                }
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
/// # std::fs::remove_file(&path)?;
/// for (i, c) in clients.iter().enumerate() {
///     assert_eq!(c.ping(i as u32)?, i as u32 + 1);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn serve_threads<D, F>(listener: Listener, threads: usize, make: F) -> io::Result<()>
where
    D: Dispatch + Send + 'static,
    F: Fn(&PeerCredentials) -> D,
{
    ServeLimits::new().serve_threads(listener, threads, make)
}

/// A connection handed to a serving thread of [`serve_threads`].
type Handed<D> = (Connection, D, Seat);

impl ServeLimits {
    /// [`serve_waitset`](fn@crate::serve_waitset) within these limits: a
    /// client past a bound is told why ([`BUSY`](crate::wire::BUSY)) and
    /// dropped, and while the clients together hold more than
    /// [`buffered`](Self::buffered) bytes of requests and replies, the one
    /// holding the most is shed.
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self, x: u32) -> u32; }
    /// struct P;
    /// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-limits-waitset-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.clients(100).buffered(4 << 20);
    /// std::thread::spawn(move || limits.serve_waitset(listener, |_| PingServer(P)));
    /// let client = PingClient::connect(&path)?;
    /// assert_eq!(client.ping(1)?, 2);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve_waitset<D, F>(&self, mut listener: Listener, make: F) -> io::Result<()>
    where
        D: Dispatch,
        F: Fn(&PeerCredentials) -> D,
    {
        listener.set_nonblocking(true);
        let mut set = shmpipe_core::WaitSet::new()?;
        set.add(LISTENER, listener)?;
        let tally = Arc::new(Mutex::new(Tally::default()));
        serve_set(set, self.max_buffered(), |s| {
            accept_all(s, &make, &tally, self)
        })
    }

    /// [`serve_threads`](fn@crate::serve_threads) within these limits, as
    /// [`serve_waitset`](Self::serve_waitset) keeps to them; each thread
    /// holds its share of [`buffered`](Self::buffered).
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self, x: u32) -> u32; }
    /// struct P;
    /// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-limits-threads-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.per_process(2);
    /// std::thread::spawn(move || limits.serve_threads(listener, 2, |_| PingServer(P)));
    /// let (a, b) = (PingClient::connect(&path)?, PingClient::connect(&path)?);
    /// assert!(PingClient::connect(&path).is_err()); // a third from this process
    /// assert_eq!(a.ping(1)? + b.ping(2)?, 5);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve_threads<D, F>(&self, listener: Listener, threads: usize, make: F) -> io::Result<()>
    where
        D: Dispatch + Send + 'static,
        F: Fn(&PeerCredentials) -> D,
    {
        let threads = threads.max(1);
        let share = self.max_buffered() / threads;
        let mut doors = Vec::new();
        for i in 0..threads {
            let (mut bell, ring) = shmpipe_core::pipe()?;
            bell.set_nonblocking(true);
            let (tx, rx) = std::sync::mpsc::channel::<Handed<D>>();
            std::thread::Builder::new()
                .name(format!("shmpipe-rpc-{i}"))
                .spawn(move || {
                    let mut set = shmpipe_core::WaitSet::new()?;
                    set.add(LISTENER, bell)?;
                    serve_set(set, share, |s| admit_handed(s, &rx))
                })?;
            doors.push((ring, tx));
        }
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut next = 0;
        loop {
            let Some((conn, seat)) = admit_next(&listener, &tally, self)? else {
                continue;
            };
            let d = make(&conn.peer);
            let n = doors.len();
            let (ring, tx) = &mut doors[next];
            next = (next + 1) % n;
            if tx.send((conn, d, seat)).is_err() {
                return Err(io::Error::other("shmpipe rpc: a serving thread ended"));
            }
            ring.write_all(&[1])?;
        }
    }
}

/// A serving thread of [`serve_threads`] was rung: takes in the
/// connections handed to it.
fn admit_handed<D: Dispatch>(
    s: &mut Serving<'_, D>,
    rx: &std::sync::mpsc::Receiver<Handed<D>>,
) -> io::Result<bool> {
    let Some(bell) = s.set.reader_mut(LISTENER) else {
        return Ok(false);
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
    while let Ok((conn, d, seat)) = rx.try_recv() {
        admit(s, conn, d, seat);
    }
    Ok(false)
}

/// What a pass of [`serve_waitset`] works on.
struct Serving<'a, D> {
    set: &'a mut shmpipe_core::WaitSet,
    clients: &'a mut Vec<Option<SetConn<D>>>,
    free: &'a mut Vec<u64>,
    again: &'a mut Vec<u64>,
    pass: u64,
    /// What the clients' `Core`s hold together, and its bound.
    buffered: &'a mut usize,
    budget: usize,
}

/// Takes in every client whose handshake completed; says whether to rest
/// (out of descriptors or memory: the clients we have are still served).
fn accept_all<D: Dispatch>(
    s: &mut Serving<'_, D>,
    make: &impl Fn(&PeerCredentials) -> D,
    tally: &Arc<Mutex<Tally>>,
    limits: &ServeLimits,
) -> io::Result<bool> {
    loop {
        let listener = s.set.listener_mut(LISTENER).expect("the listener");
        let mut conn = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if passing(&e) => return Ok(true),
            Err(e) => return Err(e),
        };
        let seat = match Seat::take(tally, limits, &conn.peer) {
            Ok(seat) => seat,
            Err(why) => {
                conn.writer.set_nonblocking(true);
                refuse(&mut conn.writer, &why);
                continue;
            }
        };
        let dispatch = make(&conn.peer);
        admit(s, conn, dispatch, seat);
    }
}

/// Adds a new client to the set and serves what it sent already.
fn admit<D: Dispatch>(s: &mut Serving<'_, D>, conn: Connection, dispatch: D, seat: Seat) {
    let (mut reader, mut writer) = conn.split();
    reader.set_nonblocking(true);
    writer.set_nonblocking(true);
    let id = s.free.pop().unwrap_or(s.clients.len() as u64);
    if s.set.add(2 * id, reader).is_err() {
        s.free.push(id);
        return; // out of epoll room: this client is dropped
    }
    let client = SetConn {
        dispatch,
        core: Core::new::<D>(),
        reader: None,
        writer: Some(writer),
        pass: 0,
        held: 0,
        _seat: seat,
    };
    match s.clients.get_mut(id as usize) {
        Some(slot) => *slot = Some(client),
        None => s.clients.push(Some(client)),
    }
    // It may have spoken already.
    step(s, id);
}

/// Serves client `id` as far as it goes without waiting, for one turn
/// a pass at most; then leaves in the set the end it waits on. Drops it
/// if it is gone or broke the protocol, and sheds the greediest clients
/// if they hold too much.
fn step<D: Dispatch>(s: &mut Serving<'_, D>, id: u64) {
    if !turn(s, id) {
        drop_client(s, id);
    }
    if *s.buffered > s.budget {
        shed_greediest(s);
    }
}

/// One turn of client `id`: false if it is to be dropped.
fn turn<D: Dispatch>(s: &mut Serving<'_, D>, id: u64) -> bool {
    let (set, clients) = (&mut *s.set, &mut *s.clients);
    let Some(Some(c)) = clients.get_mut(id as usize) else {
        return true;
    };
    if c.pass == s.pass {
        return true; // had its turn in this pass
    }
    c.pass = s.pass;
    let r = match (&mut c.reader, &mut c.writer) {
        (None, Some(w)) => match set.reader_mut(2 * id) {
            Some(r) => c.core.step_at_most(&mut c.dispatch, r, w, TURN),
            None => return true,
        },
        (Some(r), None) => match set.writer_mut(2 * id + 1) {
            Some(w) => c.core.step_at_most(&mut c.dispatch, r, w, TURN),
            None => return true,
        },
        _ => return true,
    };
    let held = c.core.held();
    *s.buffered = *s.buffered - c.held + held;
    c.held = held;
    let more = match r {
        Ok(false) => true,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        // Gone, closed by us, or broke the protocol.
        _ => return false,
    };
    let waits_to_write = c.core.reply_waits();
    let moved = match (waits_to_write, c.reader.is_none()) {
        // Replies full: wait for room, read no more meanwhile.
        (true, true) => {
            let w = c.writer.take().expect("the writer");
            c.reader = match set.remove(2 * id) {
                Some(Source::Reader(r)) => Some(r),
                _ => None,
            };
            set.add(2 * id + 1, w).is_ok() && c.reader.is_some()
        }
        // Room again: wait for requests.
        (false, false) => {
            let r = c.reader.take().expect("the reader");
            c.writer = match set.remove(2 * id + 1) {
                Some(Source::Writer(w)) => Some(w),
                _ => None,
            };
            set.add(2 * id, r).is_ok() && c.writer.is_some()
        }
        _ => true,
    };
    if moved && more {
        s.again.push(id);
    }
    moved
}

/// While the clients hold more than the budget, sheds the one holding
/// the most (telling it why, when no reply of its waits half-written).
/// Each client's `Core` holds two frames at most, so a client is shed
/// for what it sent, never for what others did.
#[cold]
fn shed_greediest<D>(s: &mut Serving<'_, D>) {
    while *s.buffered > s.budget {
        let greediest = s
            .clients
            .iter()
            .enumerate()
            .filter_map(|(id, c)| Some((c.as_ref()?.held, id as u64)))
            .max();
        let Some((held, id)) = greediest else {
            return;
        };
        let Some(Some(c)) = s.clients.get_mut(id as usize) else {
            return;
        };
        if !c.core.reply_waits() {
            let why = format!(
                "the server holds {} bytes of requests and replies, its limit, and this \
                 connection the most ({held})",
                s.buffered
            );
            let w = match c.writer.as_mut() {
                Some(w) => Some(w),
                None => s.set.writer_mut(2 * id + 1),
            };
            if let Some(w) = w {
                refuse(w, &why);
            }
        }
        drop_client(s, id);
    }
}

fn drop_client<D>(s: &mut Serving<'_, D>, id: u64) {
    s.set.remove(2 * id);
    s.set.remove(2 * id + 1);
    if let Some(slot) = s.clients.get_mut(id as usize) {
        if let Some(c) = slot.take() {
            *s.buffered -= c.held;
            s.free.push(id);
        }
    }
}
