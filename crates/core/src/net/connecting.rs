//! A connection whose client has spoken and waits for the listener:
//! [`Options::connect_later`] returns as soon as the kernel has queued the
//! connection, like `UnixStream::connect`, and [`Connecting::finish`]
//! completes it once the listener accepts.
//!
//! [`connect`](crate::connect) waits for the listener to accept, at most
//! ten seconds. That is wrong for a caller shaped like
//! `multiprocessing.connection.Client`, whose connect returns at once: a
//! single thread that connects and then accepts would wait for itself, and
//! a server busy for longer than the handshake's timeout would drop every
//! waiting client. So here the client sends its half of the handshake
//! (message 2, see [`handshake`](super::handshake)) without waiting for
//! the verdict: the socket's buffer takes it before the listener accepts.
//! The listener, whenever it accepts, sends its verdict, finds the hello
//! already there and answers at once. Nothing on the wire changes; only
//! the order in which the client does its steps.
//!
//! No timeout is needed while waiting: a listener that closes or dies
//! resets the queued connection, and [`finish`](Connecting::finish) then
//! fails (`ConnectionReset` or `ConnectionAborted`); one that lives and
//! never accepts is waited for, as a kernel socket's reader waits.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

use super::connection::{Connection, PeerCredentials};
use super::exchange::{self, Sent};
use super::handshake::Hello;
use super::listener::listener_of_ours;
use crate::error;
use crate::Options;

/// A client's connection in the making: queued by the kernel, our half of
/// the handshake sent, the listener's answer still to come. Made by
/// [`Options::connect_later`].
///
/// # Examples
///
/// One thread connects, then accepts: the connect does not wait for the
/// accept.
///
/// ```
/// use std::time::{Duration, Instant};
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-later-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let mut connecting = shmpipe::Options::new().connect_later(&path)?;
/// let served = listener.accept()?;
/// let conn = loop {
///     if let Some(c) = connecting.finish(Instant::now() + Duration::from_secs(1))? {
///         break c;
///     }
/// };
/// assert_eq!(conn.peer, served.peer);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Connecting {
    stream: UnixStream,
    peer: PeerCredentials,
    options: Options,
    /// Our regions, until attached (then `None`: finished).
    sent: Option<Sent>,
    /// The listener's verdict, once read.
    verdict: Option<Hello>,
}

impl fmt::Debug for Connecting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connecting")
            .field("peer", &self.peer)
            .field("verdict", &self.verdict)
            .field("finished", &self.sent.is_none())
            .finish()
    }
}

impl Options {
    /// Connects to a [`Listener`](crate::Listener) at `path` without
    /// waiting for it to accept: returns once the kernel has queued the
    /// connection and our half of the handshake is sent. The server must
    /// run as the same user (or root), checked here.
    /// [`Connecting::finish`] completes the connection.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-connect-later-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let connecting = shmpipe::Options::new().connect_later(&path)?;
    /// assert_eq!(connecting.peer().pid, std::process::id() as i32);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect_later(&self, path: impl AsRef<Path>) -> io::Result<Connecting> {
        let stream = UnixStream::connect(path)?;
        let peer = listener_of_ours(&stream)?;
        let sent = exchange::client_send(&stream, self)?;
        Ok(Connecting {
            stream,
            peer,
            options: self.clone(),
            sent: Some(sent),
            verdict: None,
        })
    }
}

impl Connecting {
    /// Waits until `deadline` for the listener's answer: `Some` connection
    /// once it accepted, `None` if it has not answered by then (call
    /// again; nothing is lost). The descriptor ([`AsFd`]) polls readable
    /// when there is something to read.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` if the listener's policy refused us,
    /// `ConnectionReset` or `ConnectionAborted` if it closed (or died)
    /// before answering, `InvalidInput`/`InvalidData` if the rings exceed
    /// a side's limit or its answer is not a handshake; and
    /// `InvalidInput` once finished. An error is final.
    ///
    /// # Examples
    ///
    /// A listener that closes without accepting resets its queued
    /// connections:
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-finish-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let mut connecting = shmpipe::Options::new().connect_later(&path)?;
    /// drop(listener);
    /// let e = loop {
    ///     match connecting.finish(Instant::now() + Duration::from_secs(1)) {
    ///         Ok(None) => continue,
    ///         Ok(Some(_)) => unreachable!("nobody accepted"),
    ///         Err(e) => break e,
    ///     }
    /// };
    /// assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn finish(&mut self, deadline: Instant) -> io::Result<Option<Connection>> {
        if self.sent.is_none() {
            return Err(error::invalid_input("the connection is finished already"));
        }
        let verdict = match self.verdict {
            Some(v) => v,
            None => match read(&self.stream, deadline)? {
                None => return Ok(None),
                Some((v, _)) => {
                    // A failed check makes this error final: `sent` goes.
                    if let Err(e) = exchange::check_verdict(&self.stream, &v, &self.options) {
                        self.sent = None;
                        return Err(e);
                    }
                    self.verdict = Some(v);
                    v
                }
            },
        };
        let Some((theirs, fds)) = read(&self.stream, deadline)? else {
            return Ok(None);
        };
        let sent = self.sent.take().expect("checked above");
        exchange::client_attach(sent, &verdict, &theirs, fds, self.peer, &self.options).map(Some)
    }

    /// What the kernel recorded about the listener's process.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-later-peer-{}.sock", std::process::id()));
    /// let _listener = shmpipe::Listener::bind(&path)?;
    /// let connecting = shmpipe::Options::new().connect_later(&path)?;
    /// use std::os::unix::fs::MetadataExt;
    /// assert_eq!(connecting.peer().uid, std::fs::metadata(&path)?.uid()); // who bound it
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn peer(&self) -> PeerCredentials {
        self.peer
    }
}

/// One hello, or `None` if none came by `deadline`.
fn read(
    stream: &UnixStream,
    deadline: Instant,
) -> io::Result<Option<(Hello, Vec<std::os::fd::OwnedFd>)>> {
    match exchange::recv(stream, deadline) {
        Ok(got) => Ok(Some(got)),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(None),
        Err(e) => Err(e),
    }
}

impl AsFd for Connecting {
    /// The connection's socket: it polls readable when the listener has
    /// answered, or closed.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}
