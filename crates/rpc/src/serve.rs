//! The thread-per-client servers ([`serve`], [`serve_unix`]), each
//! connection served by a [`Conn`] on a thread of its own. (The waitset
//! servers are in `waitset.rs`.)
//!
//! A thread per client spends one task of the server's pids cgroup per
//! client, so both servers bound their threads ([`ServeLimits`]) and treat
//! a thread that cannot be made, like a descriptor that cannot be had, as
//! the loss of that one connection: they tell it why, hang up, pause
//! briefly and go on accepting.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, PoisonError};

use shmpipe_core::{Connection, Listener, PeerCredentials};

use crate::conn::Conn;
use crate::dispatch::Dispatch;
use crate::limits::{passing, refuse, Seat, ServeLimits, Tally, BACK_OFF};

/// Serves every client of `listener`, each on its own thread with the
/// dispatcher `make` gives for it (`make` sees who connected), within
/// [`ServeLimits::new`]'s bounds ([`ServeLimits::serve`]). Returns only if
/// accepting fails for good.
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
    ServeLimits::new().serve(listener, make)
}

/// [`serve`] over a Unix socket: the same stubs on kernel IPC
/// ([`UnixTransport`](super::UnixTransport) is the client's side), within
/// [`ServeLimits::new`]'s bounds ([`ServeLimits::serve_unix`]).
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
    ServeLimits::new().serve_unix(listener, make)
}

impl ServeLimits {
    /// [`serve`](fn@crate::serve) within these limits: at most
    /// `clients` threads, fewer per user and per process. A connection
    /// past a bound, or one the server cannot make a thread for (`EAGAIN`
    /// under a pids cgroup's limit, out of memory), is told why
    /// ([`BUSY`](crate::wire::BUSY)) and dropped; the server goes on.
    /// Returns only if accepting fails for good (not for want of
    /// descriptors or memory).
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-limits-serve-doc-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.clients(2);
    /// std::thread::spawn(move || limits.serve(listener, |_| PingServer(P)));
    /// let (a, b) = (PingClient::connect(&path)?, PingClient::connect(&path)?);
    /// let third = PingClient::connect(&path).unwrap_err(); // two threads at most
    /// assert_eq!(third.kind(), std::io::ErrorKind::ConnectionRefused);
    /// assert_eq!(a.ping()? + b.ping()?, 14);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve<D, F>(&self, listener: Listener, make: F) -> io::Result<()>
    where
        D: Dispatch + Send + 'static,
        F: Fn(&PeerCredentials) -> D,
    {
        let tally = Arc::new(Mutex::new(Tally::default()));
        loop {
            let Some((conn, seat)) = admit_next(&listener, &tally, self)? else {
                continue;
            };
            let d = make(&conn.peer);
            let refused = on_own_thread("shmpipe-rpc", seat, (d, conn), |(d, conn)| {
                let _ = Conn::new(d, conn).serve();
            });
            if let Some((why, (_, mut conn))) = refused {
                conn.writer.set_nonblocking(true);
                refuse(&mut conn.writer, &why);
                std::thread::sleep(BACK_OFF);
            }
        }
    }

    /// [`serve_unix`](fn@crate::serve_unix) within these limits, as
    /// [`serve`](Self::serve) keeps to them. Out of descriptors, a new
    /// client is told so and hung up on at once (the server keeps a spare
    /// descriptor for that), so the queue of clients drains and the loop
    /// does not spin.
    ///
    /// # Examples
    ///
    /// ```
    /// #[shmpipe::service]
    /// pub trait Ping { fn ping(&self) -> u8; }
    /// struct P;
    /// impl Ping for P { fn ping(&self) -> u8 { 7 } }
    ///
    /// let path = std::env::temp_dir().join(format!("shmpipe-limits-unix-doc-{}.sock", std::process::id()));
    /// let listener = std::os::unix::net::UnixListener::bind(&path)?;
    /// let mut limits = shmpipe::rpc::ServeLimits::new();
    /// limits.per_process(1);
    /// std::thread::spawn(move || limits.serve_unix(listener, || PingServer(P)));
    /// let connect = || shmpipe::rpc::UnixTransport::connect(&path).and_then(PingClient::with_transport);
    /// let first = connect()?;
    /// assert_eq!(connect().unwrap_err().kind(), std::io::ErrorKind::ConnectionRefused);
    /// assert_eq!(first.ping()?, 7);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serve_unix<D, F>(&self, listener: UnixListener, make: F) -> io::Result<()>
    where
        D: Dispatch + Send + 'static,
        F: Fn() -> D,
    {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut spare = spare();
        loop {
            let mut stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if out_of_fds(&e) && spare.is_some() => {
                    // Give the spare's place to the client, to tell it.
                    drop(spare.take());
                    if let Ok((mut stream, _)) = listener.accept() {
                        turn_away(&mut stream, "the server is out of descriptors");
                    }
                    spare = self::spare();
                    continue;
                }
                Err(e) if passing(&e) => {
                    std::thread::sleep(BACK_OFF);
                    spare = spare.or_else(self::spare);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Ok(peer) = PeerCredentials::of(&stream) else {
                continue;
            };
            let seat = match Seat::take(&tally, self, &peer) {
                Ok(seat) => seat,
                Err(why) => {
                    turn_away(&mut stream, &why);
                    continue;
                }
            };
            let replies = match stream.try_clone() {
                Ok(w) => w,
                Err(e) => {
                    turn_away(
                        &mut stream,
                        &format!("the server cannot serve it now ({e})"),
                    );
                    std::thread::sleep(BACK_OFF);
                    continue;
                }
            };
            let job = (make(), stream, replies);
            let refused = on_own_thread("shmpipe-rpc-unix", seat, job, |(d, s, r)| {
                let _ = Conn::with_streams(d, s, r).serve();
            });
            if let Some((why, (_, mut stream, _))) = refused {
                turn_away(&mut stream, &why);
                std::thread::sleep(BACK_OFF);
            }
        }
    }
}

/// Runs `serve(job)` on a thread of its own that holds `seat` while it
/// runs; if no thread can be made, hands the job back with the reason.
fn on_own_thread<J: Send + 'static>(
    name: &str,
    seat: Seat,
    job: J,
    serve: impl FnOnce(J) + Send + 'static,
) -> Option<(String, J)> {
    // The job waits here until the thread takes it, so that a failed
    // spawn (which drops the thread's closure) leaves it with us.
    let slot = Arc::new(Mutex::new(Some(job)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _seat = seat;
            let job = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(job) = job {
                serve(job);
            }
        });
    let e = spawned.err()?;
    let job = slot.lock().unwrap_or_else(PoisonError::into_inner).take()?;
    Some((
        format!("the server cannot start a thread for it now ({e})"),
        job,
    ))
}

/// Tells a client of `serve_unix` why it is shed, and hangs up.
fn turn_away(stream: &mut UnixStream, why: &str) {
    let _ = stream.set_nonblocking(true);
    refuse(stream, why);
}

/// A descriptor kept in reserve, to accept (and turn away) a client with
/// when out of descriptors.
fn spare() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

/// A blocking accept for the thread-per-client servers; `None` after a
/// short back-off when out of descriptors (the listener had no spare to
/// turn the client away with) or memory, instead of ending the server.
pub(crate) fn accept_or_back_off(listener: &Listener) -> io::Result<Option<Connection>> {
    match listener.accept() {
        Ok(conn) => Ok(Some(conn)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(e) if passing(&e) => {
            std::thread::sleep(BACK_OFF);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The next connection of `listener` that `limits` lets in, with its
/// place in `tally`; `None` when there was none to take (see
/// [`accept_or_back_off`]) or it was over a bound, told why and dropped.
pub(crate) fn admit_next(
    listener: &Listener,
    tally: &Arc<Mutex<Tally>>,
    limits: &ServeLimits,
) -> io::Result<Option<(Connection, Seat)>> {
    let Some(mut conn) = accept_or_back_off(listener)? else {
        return Ok(None);
    };
    match Seat::take(tally, limits, &conn.peer) {
        Ok(seat) => Ok(Some((conn, seat))),
        Err(why) => {
            conn.writer.set_nonblocking(true);
            refuse(&mut conn.writer, &why);
            Ok(None)
        }
    }
}

/// `EMFILE` or `ENFILE` from an accept.
pub(crate) fn out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
