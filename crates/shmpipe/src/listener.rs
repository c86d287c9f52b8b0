//! A rendezvous by filesystem path, like `UnixListener`/`UnixStream`: each
//! connection is a pair of pipes, one each way.
//!
//! Access is checked once, at connect: the socket file is created mode
//! 0600, and the kernel's record of the peer (`SO_PEERCRED`) must pass the
//! listener's policy (by default: the same user). The client checks the
//! server the same way. Then each side creates the regions it writes,
//! sealed so that only its own mapping can ever write them, and sends them
//! over the socket (`SCM_RIGHTS`); the peer maps them read-only. From then
//! on the data path runs without the kernel.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use shmpipe_ring::layout::{Role, MAGIC, VERSION};

use crate::setup::{self, OwnRegion};
use crate::sys;
use crate::wait::{End, Side};
use crate::{Options, Reader, Receiver, Sender, Writer};

/// How long a handshake may take before the other side is given up on.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the kernel recorded about the process at the other end when it
/// connected (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

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
    policy: Policy,
    options: Options,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish()
    }
}

/// One connection: a pipe each way.
#[derive(Debug)]
pub struct Connection {
    /// Bytes from the peer.
    pub reader: Reader,
    /// Bytes to the peer.
    pub writer: Writer,
    /// Who the peer is.
    pub peer: PeerCredentials,
}

impl Connection {
    /// Splits the connection into its two pipe ends.
    pub fn split(self) -> (Reader, Writer) {
        (self.reader, self.writer)
    }

    /// Uses both pipes for messages instead of bytes. Both sides must do
    /// so before sending anything; a side that reads messages from a
    /// byte stream gets `InvalidData`.
    pub fn into_messages(self) -> (Receiver, Sender) {
        (
            Receiver {
                end: self.reader.end,
            },
            Sender {
                end: self.writer.end,
            },
        )
    }
}

impl Listener {
    /// Binds a listener at `path` (which must not exist), with the socket
    /// file readable and writable by its owner only, accepting peers of
    /// this process's user.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Listener> {
        let path = path.as_ref().to_path_buf();
        let socket = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let uid = rustix::process::getuid().as_raw();
        Ok(Listener {
            socket,
            path,
            policy: Box::new(move |p| p.uid == uid),
            options: Options::new(),
        })
    }

    /// Replaces the access policy: `allow` sees each connecting peer's
    /// credentials and says whether to serve it. The socket file's mode is
    /// checked by the kernel before this; widen it too if other users must
    /// reach the listener.
    pub fn set_policy(&mut self, allow: impl Fn(&PeerCredentials) -> bool + Send + Sync + 'static) {
        self.policy = Box::new(allow);
    }

    /// Sets the capacity and spin time of the pipes this side writes.
    pub fn set_options(&mut self, options: Options) {
        self.options = options;
    }

    /// The path the listener is bound to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for the next peer the policy allows and completes the
    /// handshake with it. A refused peer is told so and dropped, and a
    /// peer whose handshake fails is dropped; both are skipped.
    pub fn accept(&self) -> io::Result<Connection> {
        loop {
            let (stream, _) = self.socket.accept()?;
            let Ok(peer) = credentials(&stream) else {
                continue;
            };
            // The verdict goes first, before the client sends anything, so
            // a refused client reads it instead of a connection reset.
            let allowed = (self.policy)(&peer);
            let verdict = hello(if allowed { STATUS_OK } else { STATUS_REFUSED });
            if sys::send_fds(stream.as_fd(), &verdict, &[]).is_err() || !allowed {
                continue;
            }
            if let Ok(conn) = handshake(&stream, peer, &self.options) {
                return Ok(conn);
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Connects to a [`Listener`] at `path` with the default [`Options`].
pub fn connect(path: impl AsRef<Path>) -> io::Result<Connection> {
    Options::new().connect(path)
}

impl Options {
    /// Connects to a [`Listener`] at `path`; these options apply to the
    /// pipe this side writes. The server must run as the same user (or
    /// root).
    pub fn connect(&self, path: impl AsRef<Path>) -> io::Result<Connection> {
        let stream = UnixStream::connect(path)?;
        let peer = credentials(&stream)?;
        let me = rustix::process::getuid().as_raw();
        if peer.uid != me && peer.uid != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("shmpipe: listener runs as uid {}, not {me}", peer.uid),
            ));
        }
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        match read_hello(&stream)? {
            (STATUS_OK, _) => handshake(&stream, peer, self),
            _ => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "shmpipe: the listener refused this peer",
            )),
        }
    }
}

fn credentials(stream: &UnixStream) -> io::Result<PeerCredentials> {
    let c = sys::peer_credentials(stream.as_fd())?;
    Ok(PeerCredentials {
        pid: c.pid.as_raw_nonzero().get(),
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

const STATUS_OK: u8 = b'Y';
const STATUS_REFUSED: u8 = b'N';
const HELLO_LEN: usize = 16;

/// The handshake message: magic, layout version, status.
fn hello(status: u8) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12] = status;
    h
}

/// Reads one handshake message and checks its magic and version; returns
/// its status byte and the descriptors that came with it.
fn read_hello(stream: &UnixStream) -> io::Result<(u8, Vec<OwnedFd>)> {
    let mut msg = [0u8; HELLO_LEN];
    let (n, fds) = sys::recv_fds(stream.as_fd(), &mut msg).map_err(|e| match e.kind() {
        // SO_RCVTIMEO expiring shows as EAGAIN.
        io::ErrorKind::WouldBlock => {
            io::Error::new(io::ErrorKind::TimedOut, "shmpipe: handshake timed out")
        }
        _ => e,
    })?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "shmpipe: peer closed during handshake",
        ));
    }
    if n != HELLO_LEN || msg[..12] != hello(STATUS_OK)[..12] {
        return Err(sys::invalid(
            "shmpipe: peer does not speak this shmpipe protocol version",
        ));
    }
    Ok((msg[12], fds))
}

/// Both sides: send our regions and the peer's socket end, receive and
/// check theirs, build the two pipe ends.
fn handshake(
    stream: &UnixStream,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<Connection> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let out_w = OwnRegion::create(Role::Writer, options.capacity, true)?;
    let in_r = OwnRegion::create(Role::Reader, options.capacity, true)?;
    let (out_sock, out_sock_peer) = sys::socket_pair()?;
    let ours = [out_w.fd.as_fd(), in_r.fd.as_fd(), out_sock_peer.as_fd()];
    let our_inodes = ours
        .map(sys::inode)
        .into_iter()
        .collect::<io::Result<Vec<_>>>()?;
    sys::send_fds(stream.as_fd(), &hello(STATUS_OK), &ours)?;
    drop(out_sock_peer);

    let (status, fds) = read_hello(stream)?;
    if status != STATUS_OK {
        return Err(sys::invalid("shmpipe: bad status in handshake"));
    }
    let [peer_w, peer_r, in_sock]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| sys::invalid("shmpipe: handshake carries three descriptors"))?;
    sys::check_wake_socket(in_sock.as_fd())?;
    // A peer that sends our own descriptors back would loop the connection
    // into ourselves, and we would hold both ends of the liveness socket,
    // blind to the peer's death.
    for fd in [peer_w.as_fd(), peer_r.as_fd(), in_sock.as_fd()] {
        if our_inodes.contains(&sys::inode(fd)?) {
            return Err(sys::invalid("shmpipe: peer sent our own descriptors back"));
        }
    }

    in_r.follow_writer(peer_w.as_fd())?;
    let settings = options.settings();
    let (consumer, in_r_fd) = setup::consumer(in_r, peer_w.as_fd())?;
    let (producer, out_w_fd) = setup::producer(out_w, peer_r.as_fd())?;
    Ok(Connection {
        reader: Reader {
            end: End {
                ring: consumer,
                side: Side::new(in_sock, in_r_fd, peer_w, settings),
            },
        },
        writer: Writer {
            end: End {
                ring: producer,
                side: Side::new(out_sock, out_w_fd, peer_r, settings),
            },
        },
        peer,
    })
}
