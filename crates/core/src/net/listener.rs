//! The two ends of a rendezvous by filesystem path: [`Listener`] (bind,
//! policy, accept) and [`connect`].

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::accept::{self, Parts, Pending};
use super::connection::{credentials, Connection, PeerCredentials};
use super::exchange;
use super::socket_file;
use crate::error;
use crate::sys;
use crate::Options;

type Policy = Box<dyn Fn(&PeerCredentials) -> bool + Send + Sync>;

/// Listens for shmpipe connections at a filesystem path.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let client = std::thread::spawn({
///     let path = path.clone();
///     move || -> std::io::Result<()> {
///         let mut conn = shmpipe::connect(&path)?;
///         conn.writer.write_all(b"ping")?;
///         let mut buf = [0; 4];
///         conn.reader.read_exact(&mut buf)?;
///         assert_eq!(&buf, b"pong");
///         Ok(())
///     }
/// });
/// let mut conn = listener.accept()?;
/// let mut buf = [0; 4];
/// conn.reader.read_exact(&mut buf)?;
/// conn.writer.write_all(b"pong")?;
/// client.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Listener {
    socket: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode, so that only it is removed.
    file: socket_file::Identity,
    policy: Policy,
    options: Options,
    /// The readiness descriptor: the listening socket and every pending
    /// client's (see `accept`).
    epoll: OwnedFd,
    pending: Mutex<Pending>,
    nonblocking: bool,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish()
    }
}

impl Listener {
    /// Binds a listener at `path`, with the socket file readable and
    /// writable by its owner only, accepting peers of this process's user.
    /// The file appears only once the listener accepts connections (a
    /// staging file beside it, `.shmpipe-PID-N`, is linked into place),
    /// so a client that waits for it to exist is not refused.
    ///
    /// A socket file already at `path` that nobody listens on, left by a
    /// server that was killed, is replaced. Anything else there is left
    /// alone and makes `bind` fail with an error that names the path:
    /// `AddrInUse` if a server listens there, `AlreadyExists` if it is
    /// not a socket. Dropping the listener removes its socket file (only
    /// its own: not one another listener has bound there since).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::unix::fs::PermissionsExt;
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-bind-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
    /// drop(listener); // removes the socket file
    /// assert!(!path.exists());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Listener> {
        let path = path.as_ref().to_path_buf();
        // Its spare descriptor first: once the path exists, the listener
        // holds all it ever holds while idle.
        let pending = Pending::new();
        let (socket, file) = socket_file::bind(&path, 0o600)?;
        let uid = sys::uid();
        Ok(Listener {
            epoll: accept::readiness(&socket)?,
            socket,
            path,
            file,
            policy: Box::new(move |p| p.uid == uid),
            options: Options::new(),
            pending: Mutex::new(pending),
            nonblocking: false,
        })
    }

    /// Replaces the access policy: `allow` sees each connecting peer's
    /// credentials and says whether to serve it. The socket file's mode is
    /// checked by the kernel before this; widen it too if other users must
    /// reach the listener.
    ///
    /// # Examples
    ///
    /// A listener that serves any process but its own: its own client is
    /// refused.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-policy-{}.sock", std::process::id()));
    /// let mut listener = shmpipe::Listener::bind(&path)?;
    /// let me = std::process::id() as i32;
    /// listener.set_policy(move |peer| peer.pid != me);
    /// listener.set_nonblocking(true);
    /// let client = std::thread::spawn(move || shmpipe::connect(&path).map(drop));
    /// while !client.is_finished() {
    ///     assert!(listener.accept().is_err()); // no connection, ever
    ///     std::thread::yield_now();
    /// }
    /// let refused = client.join().unwrap().unwrap_err();
    /// assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_policy(&mut self, allow: impl Fn(&PeerCredentials) -> bool + Send + Sync + 'static) {
        self.policy = Box::new(allow);
    }

    /// Sets the capacity and spin time of the pipes this side writes, and
    /// the largest ring a client may make us map
    /// ([`Options::max_peer_capacity`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-options-{}.sock", std::process::id()));
    /// let mut listener = shmpipe::Listener::bind(&path)?;
    /// let mut options = shmpipe::Options::new();
    /// options.capacity(1 << 16).spin(std::time::Duration::ZERO);
    /// listener.set_options(options);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_options(&mut self, options: Options) {
        self.options = options;
    }

    /// Sets the largest ring a client may declare, in bytes (default
    /// [`DEFAULT_MAX_PEER_CAPACITY`](crate::DEFAULT_MAX_PEER_CAPACITY)):
    /// the listener maps each client's ring whole, so this bounds the
    /// address space one client can make it spend. A client whose ring is
    /// larger is refused, and both sides get an error that says so.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-max-{}.sock", std::process::id()));
    /// let mut listener = shmpipe::Listener::bind(&path)?;
    /// listener.set_max_peer_capacity(1 << 20); // clients' rings: 1 MiB at most
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_max_peer_capacity(&mut self, bytes: usize) {
        self.options.max_peer_capacity(bytes);
    }

    /// The path the listener is bound to.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-path-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// assert_eq!(listener.path(), path);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next peer the policy allows whose handshake
    /// completes, and returns its connection. A refused peer is told so and
    /// dropped; a peer whose handshake fails or takes longer than ten
    /// seconds is dropped.
    ///
    /// Clients are handshaken side by side: one that connects and says
    /// nothing, speaks slowly or sends garbage holds up no other (each has
    /// its own deadline; at most [`max_pending`](crate::max_pending) wait
    /// at once, and past that the oldest is dropped). Out of descriptors,
    /// a new client is hung up on at once (the listener keeps a spare
    /// descriptor for that), so the call neither spins nor stalls.
    ///
    /// # Errors
    ///
    /// In non-blocking mode ([`set_nonblocking`](Self::set_nonblocking))
    /// `WouldBlock` when no handshake has completed; then the descriptor
    /// ([`AsFd`]) polls readable once a client connects or a pending one
    /// speaks. Otherwise only the listening socket's own errors.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-accept-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let client = std::thread::spawn(move || shmpipe::connect(&path).map(drop));
    /// let conn = listener.accept()?;
    /// assert_eq!(conn.peer.pid, std::process::id() as i32); // a thread of ours
    /// client.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn accept(&self) -> io::Result<Connection> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.accept(&Parts {
            socket: &self.socket,
            epoll: self.epoll.as_fd(),
            allow: &*self.policy,
            options: &self.options,
            nonblocking: self.nonblocking,
        })
    }

    /// In non-blocking mode [`accept`](Self::accept) returns `WouldBlock`
    /// instead of waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-nb-{}.sock", std::process::id()));
    /// let mut listener = shmpipe::Listener::bind(&path)?;
    /// listener.set_nonblocking(true);
    /// let err = listener.accept().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_nonblocking(&mut self, nonblocking: bool) {
        self.nonblocking = nonblocking;
    }

    /// Clients in the middle of their handshake.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-pending-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// assert_eq!(listener.pending(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Handshakes that failed since the listener was made: clients that
    /// sent garbage or hung up, said nothing within ten seconds, were
    /// dropped as the oldest of [`max_pending`](crate::max_pending), were turned away
    /// for want of descriptors, or whose rings we could not make (out of
    /// memory or descriptors). [`accept`](Self::accept) does not return
    /// these errors: they concern one client, and the others are served
    /// all the same. See [`take_handshake_error`](Self::take_handshake_error).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-failed-{}.sock", std::process::id()));
    /// let mut listener = shmpipe::Listener::bind(&path)?;
    /// listener.set_nonblocking(true);
    /// let mut client = std::os::unix::net::UnixStream::connect(&path)?;
    /// client.write_all(&[0xAB; 40])?; // not a hello
    /// while listener.failed_handshakes() == 0 {
    ///     assert!(listener.accept().is_err()); // WouldBlock
    /// }
    /// let e = listener.take_handshake_error().unwrap();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn failed_handshakes(&self) -> u64 {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failures()
    }

    /// The error of the latest failed handshake (see
    /// [`failed_handshakes`](Self::failed_handshakes)), if one failed since
    /// the last call: for a server that logs why clients did not get in.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-error-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// assert!(listener.take_handshake_error().is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn take_handshake_error(&self) -> Option<io::Error> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_error()
    }
}

impl AsFd for Listener {
    /// The listener's readiness descriptor, an epoll instance holding the
    /// listening socket and the sockets of clients in the middle of their
    /// handshake: it polls readable (`POLLIN`) when a client connects or a
    /// pending client speaks or hangs up, which is when a non-blocking
    /// [`accept`](Listener::accept) may make progress (it may still say
    /// `WouldBlock`, if what arrived was a refusal or garbage).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl std::os::fd::AsRawFd for Listener {
    /// See [`AsFd`].
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.epoll.as_fd().as_raw_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        socket_file::remove(&self.path, self.file);
    }
}

/// Connects to a [`Listener`] at `path` with the default [`Options`].
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-connect-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// let server = std::thread::spawn(move || -> std::io::Result<()> {
///     let mut conn = listener.accept()?;
///     conn.writer.write_all(b"welcome")
/// });
/// let mut conn = shmpipe::connect(&path)?;
/// let mut buf = [0; 7];
/// conn.reader.read_exact(&mut buf)?;
/// assert_eq!(&buf, b"welcome");
/// server.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn connect(path: impl AsRef<Path>) -> io::Result<Connection> {
    Options::new().connect(path)
}

impl Options {
    /// Connects to a [`Listener`] at `path`; these options apply to the
    /// pipe this side writes. The server must run as the same user (or
    /// root).
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-opt-connect-{}.sock", std::process::id()));
    /// let listener = shmpipe::Listener::bind(&path)?;
    /// let server = std::thread::spawn(move || listener.accept().map(drop));
    /// let (_rx, tx) = shmpipe::Options::new()
    ///     .capacity(1 << 16)
    ///     .connect(&path)?
    ///     .into_messages();
    /// assert_eq!(tx.max_message(), (1 << 16) - 8);
    /// server.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect(&self, path: impl AsRef<Path>) -> io::Result<Connection> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path).map_err(|e| error::no_listener(path, e))?;
        let peer = listener_of_ours(&stream)?;
        exchange::client(&stream, peer, self)
    }
}

/// The credentials of the listener `stream` reached, refused unless it
/// runs as our user or root: a client hands its pipe's memory only to
/// those.
pub(crate) fn listener_of_ours(stream: &UnixStream) -> io::Result<PeerCredentials> {
    let peer = credentials(stream)?;
    let me = sys::uid();
    if peer.uid != me && peer.uid != 0 {
        return Err(error::permission_denied(format!(
            "listener runs as uid {}, not {me}",
            peer.uid
        )));
    }
    Ok(peer)
}
