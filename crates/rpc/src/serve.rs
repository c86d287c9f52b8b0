//! The servers: a thread per client ([`serve`], [`serve_unix`]), or every
//! client from one thread's waitset ([`serve_waitset`]) or from N of them
//! ([`serve_threads`]), each connection served by a [`Conn`] or its
//! [`Core`].

use std::io::{self, Read, Write};
use std::os::unix::net::UnixListener;

use shmpipe_core::{Connection, Listener, PeerCredentials, Reader, Writer};

use crate::conn::{Conn, Core};
use crate::dispatch::Dispatch;

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
/// assert_eq!(c.ping()?, 7);
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
    let mut clients: Vec<Option<SetConn<D>>> = Vec::new();
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
        for token in ready.iter().map(|t| t.0) {
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
    clients: &'a mut Vec<Option<SetConn<D>>>,
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
    let client = SetConn {
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
    let waits_to_write = c.core.reply_waits();
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
    clients: &mut [Option<SetConn<D>>],
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
