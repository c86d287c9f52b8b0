//! The connection handshake: what a [`Listener`](crate::Listener) and
//! [`connect`](crate::connect) say to each other over the Unix socket
//! before the data path starts, and the checks each side makes. This is
//! the one cross-process format besides the ring's
//! ([`shmpipe_ring::layout`]), which it names by version.
//!
//! ```text
//! client (connect)                            server (Listener::accept)
//!   connect(path) ───────────────────────────▶ accept, SO_PEERCRED, policy
//!                 ◀─── 1. verdict hello: OK or REFUSED, no descriptors
//!   (REFUSED: PermissionDenied)
//!   our ring <= its max, its ring <= our max?
//!   no: ─── TOO_LARGE hello ─────────────────▶ (error, dropped)
//!   2. client hello: OK + 3 descriptors ─────▶ checks them and both limits
//!                 ◀─── TOO_LARGE hello, or
//!                 ◀─── 3. server hello: OK + 3 descriptors
//!   checks them; connected                     connected
//! ```
//!
//! Every message is one [`Hello`] of [`HELLO_LEN`] bytes, little-endian:
//!
//! ```text
//! offset size field
//!      0    8 magic        MAGIC (b"SHMPIPEH")
//!      8    4 version      VERSION of this handshake
//!     12    4 layout       shmpipe_ring::layout::VERSION (the ring format)
//!     16    1 status       STATUS_OK, STATUS_REFUSED or STATUS_TOO_LARGE
//!     17    7 zero
//!     24    8 capacity     the sender's ring (the pipe it writes), bytes
//!     32    8 max_capacity the largest ring the sender maps from the receiver
//! ```
//!
//! Messages 2 and 3 carry three descriptors (`SCM_RIGHTS`), in this order:
//! the sender's writer region (control block and data of the pipe it
//! writes), its reader region (the head of the pipe it reads), and one end
//! of a socketpair whose other end it keeps as the wake/liveness channel of
//! the pipe it writes. Each side seals its regions so that only its own
//! mapping can write them; the other maps them read-only.
//!
//! Why sockets here, while [`pipe`](crate::pipe)'s ends wake each other
//! through pipes: the peer may be a stranger, and whoever holds an end of
//! a pipe can pin the pipe's lock (a `splice` from an empty socket into it
//! blocks while holding it), so that each read, write or open of ours
//! waits, unkillable, for as long as the peer likes. No lock that a `send`
//! or `recv` of ours takes can be held by the peer. A version-2 hello
//! (one development snapshot sent the write ends of two wake pipes
//! instead) is refused with `InvalidData` naming both versions, as is a
//! hello whose third descriptor is a pipe.
//!
//! The limits: a side never maps a peer's ring larger than its own
//! [`Options::max_peer_capacity`](crate::Options::max_peer_capacity), so a
//! peer cannot spend our address space. Both sides announce their limit
//! before any region is made, so an honest pair fails early with a clear
//! error on both sides (a `STATUS_TOO_LARGE` hello tells the other why);
//! a dishonest peer is caught by the same check on the region itself.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use shmpipe_ring::layout::{self, Role};

use crate::error;
use crate::listener::{Connection, PeerCredentials};
use crate::setup::{self, OwnRegion};
use crate::sys;
use crate::wait::{End, Side};
use crate::{Options, Reader, Writer};

/// First word of every hello: `b"SHMPIPEH"` read as little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMPIPEH");
/// Version of this handshake; bumped on any change to this file's format.
pub const VERSION: u32 = 1;
/// Bytes in every hello.
pub const HELLO_LEN: usize = 40;
/// Descriptors in a hello that carries them (messages 2 and 3).
pub const FDS: usize = 3;

/// Status: go on (verdict), or here are my descriptors.
pub const STATUS_OK: u8 = b'Y';
/// Status: the listener's policy refuses this peer (verdict only).
pub const STATUS_REFUSED: u8 = b'N';
/// Status: a ring exceeds the receiving or the sending side's limit; the
/// handshake ends. Carries no descriptors.
pub const STATUS_TOO_LARGE: u8 = b'L';

/// Byte offsets of a hello's fields (see the module's diagram).
pub mod offset {
    /// `magic`: u64.
    pub const MAGIC: usize = 0;
    /// `version`: u32.
    pub const VERSION: usize = 8;
    /// `layout`: u32.
    pub const LAYOUT: usize = 12;
    /// `status`: u8.
    pub const STATUS: usize = 16;
    /// `capacity`: u64.
    pub const CAPACITY: usize = 24;
    /// `max_capacity`: u64.
    pub const MAX_CAPACITY: usize = 32;
}

const _: () = {
    assert!(offset::MAX_CAPACITY + 8 == HELLO_LEN);
    assert!(offset::STATUS < offset::CAPACITY);
};

/// How long a handshake may take before the other side is given up on.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// One handshake message, decoded.
///
/// # Examples
///
/// ```
/// use shmpipe::handshake::{Hello, STATUS_OK};
/// let hello = Hello { status: STATUS_OK, capacity: 1 << 16, max_capacity: 1 << 26 };
/// assert_eq!(Hello::decode(&hello.encode())?, hello);
/// assert!(Hello::decode(&[0; 40]).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// [`STATUS_OK`], [`STATUS_REFUSED`] or [`STATUS_TOO_LARGE`].
    pub status: u8,
    /// The capacity of the ring the sender writes, in bytes.
    pub capacity: u64,
    /// The largest ring the sender maps from the receiver, in bytes.
    pub max_capacity: u64,
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut h = [0u8; HELLO_LEN];
        put(&mut h, offset::MAGIC, &MAGIC.to_le_bytes());
        put(&mut h, offset::VERSION, &VERSION.to_le_bytes());
        put(&mut h, offset::LAYOUT, &layout::VERSION.to_le_bytes());
        h[offset::STATUS] = self.status;
        put(&mut h, offset::CAPACITY, &self.capacity.to_le_bytes());
        put(
            &mut h,
            offset::MAX_CAPACITY,
            &self.max_capacity.to_le_bytes(),
        );
        h
    }

    /// Checks and decodes a message: `InvalidData` unless it is exactly
    /// [`HELLO_LEN`] bytes of this handshake and ring version with a known
    /// status and zero padding.
    pub fn decode(bytes: &[u8]) -> io::Result<Hello> {
        let bad_version =
            || error::invalid_data("peer does not speak this shmpipe protocol version");
        let h: &[u8; HELLO_LEN] = bytes.try_into().map_err(|_| bad_version())?;
        if u64_at(h, offset::MAGIC) != MAGIC
            || u32_at(h, offset::VERSION) != VERSION
            || u32_at(h, offset::LAYOUT) != layout::VERSION
        {
            return Err(bad_version());
        }
        let status = h[offset::STATUS];
        if ![STATUS_OK, STATUS_REFUSED, STATUS_TOO_LARGE].contains(&status)
            || h[offset::STATUS + 1..offset::CAPACITY]
                .iter()
                .any(|&b| b != 0)
        {
            return Err(error::invalid_data("malformed handshake message"));
        }
        Ok(Hello {
            status,
            capacity: u64_at(h, offset::CAPACITY),
            max_capacity: u64_at(h, offset::MAX_CAPACITY),
        })
    }
}

fn put(h: &mut [u8; HELLO_LEN], at: usize, bytes: &[u8]) {
    h[at..at + bytes.len()].copy_from_slice(bytes);
}

fn u64_at(h: &[u8; HELLO_LEN], at: usize) -> u64 {
    u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(h: &[u8; HELLO_LEN], at: usize) -> u32 {
    u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"))
}

/// Our hello with `status`, announcing our ring and our limit.
fn ours(status: u8, options: &Options) -> Hello {
    Hello {
        status,
        capacity: options.capacity as u64,
        max_capacity: options.max_peer_capacity as u64,
    }
}

/// Sends a hello with descriptors.
fn send(stream: &UnixStream, hello: Hello, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    sys::send_fds(stream.as_fd(), &hello.encode(), fds)
}

/// Reads one hello and the descriptors that came with it, by `deadline`.
fn recv(stream: &UnixStream, deadline: Instant) -> io::Result<(Hello, Vec<OwnedFd>)> {
    // Exactly one hello: a longer message leaves bytes that fail the next.
    let mut msg = [0u8; HELLO_LEN];
    let (n, fds) = sys::recv_fds(stream.as_fd(), &mut msg, Some(deadline))?;
    if n == 0 {
        return Err(error::connection_aborted("peer closed during handshake"));
    }
    Ok((Hello::decode(&msg[..n])?, fds))
}

/// Whether a hello's rings fit both sides' limits; the error says which
/// does not, from the point of view of the side holding `options`.
fn check_limits(theirs: &Hello, options: &Options) -> io::Result<()> {
    if theirs.capacity > options.max_peer_capacity as u64 {
        return Err(error::invalid_data(format!(
            "the peer's ring of {} bytes exceeds this side's limit of {} \
             (Options::max_peer_capacity)",
            theirs.capacity, options.max_peer_capacity
        )));
    }
    if options.capacity as u64 > theirs.max_capacity {
        return Err(error::invalid_input(format!(
            "this side's ring of {} bytes exceeds the peer's limit of {} \
                 (Options::capacity)",
            options.capacity, theirs.max_capacity
        )));
    }
    Ok(())
}

/// Server, message 1: the verdict, sent before the client says anything so
/// that a refused client reads it instead of a reset.
pub(crate) fn send_verdict(
    stream: &UnixStream,
    allowed: bool,
    options: &Options,
) -> io::Result<()> {
    let status = if allowed { STATUS_OK } else { STATUS_REFUSED };
    send(stream, ours(status, options), &[])
}

/// Server, after the verdict: reads the client's hello (message 2), checks
/// it, and answers with our regions (message 3) or `STATUS_TOO_LARGE`.
pub(crate) fn server_finish(
    stream: &UnixStream,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<Connection> {
    let deadline = Instant::now() + TIMEOUT;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let (theirs, fds) = recv(stream, deadline)?;
    if theirs.status == STATUS_TOO_LARGE {
        return Err(error::invalid_input(format!(
            "the client maps rings of at most {} bytes, ours is {} \
                 (Options::capacity)",
            theirs.max_capacity, options.capacity
        )));
    }
    if theirs.status != STATUS_OK {
        return Err(error::invalid_data("bad status in handshake"));
    }
    if let Err(e) = check_limits(&theirs, options) {
        let _ = send(stream, ours(STATUS_TOO_LARGE, options), &[]);
        return Err(e);
    }
    let peer_fds = PeerFds::check(fds, &[], &peer)?;
    let (conn, ours_fds) = attach(peer_fds, &theirs, peer, options)?;
    let [w, r, s] = &ours_fds;
    send(
        stream,
        ours(STATUS_OK, options),
        &[w.as_fd(), r.as_fd(), s.as_fd()],
    )?;
    Ok(conn)
}

/// Client, after `connect`: reads the verdict (message 1), sends our
/// regions (message 2) and attaches to the server's (message 3).
pub(crate) fn client(
    stream: &UnixStream,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<Connection> {
    let deadline = Instant::now() + TIMEOUT;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let (verdict, _) = recv(stream, deadline)?;
    match verdict.status {
        STATUS_OK => {}
        STATUS_REFUSED => return Err(error::permission_denied("the listener refused this peer")),
        _ => return Err(error::invalid_data("bad status in handshake")),
    }
    if let Err(e) = check_limits(&verdict, options) {
        // Tell the server why, so it fails clearly too.
        let _ = send(stream, ours(STATUS_TOO_LARGE, options), &[]);
        return Err(e);
    }
    let regions = Regions::create(options)?;
    let [w, r, s] = [
        regions.w.fd.as_fd(),
        regions.r.fd.as_fd(),
        regions.sock_peer.as_fd(),
    ];
    send(stream, ours(STATUS_OK, options), &[w, r, s])?;
    let our_inodes = regions.inodes()?;
    let (theirs, fds) = recv(stream, deadline)?;
    match theirs.status {
        STATUS_OK => {}
        STATUS_TOO_LARGE => {
            // We checked the server's announced limits; it changed its mind.
            return Err(error::invalid_data(format!(
                "the listener refused the rings (its limit: {} bytes, ours: {}; \
                 our limit: {} bytes, its ring: {})",
                theirs.max_capacity, options.capacity, options.max_peer_capacity, theirs.capacity
            )));
        }
        _ => return Err(error::invalid_data("bad status in handshake")),
    }
    if theirs.capacity != verdict.capacity || theirs.max_capacity != verdict.max_capacity {
        return Err(error::invalid_data("the listener changed its hello"));
    }
    let peer_fds = PeerFds::check(fds, &our_inodes, &peer)?;
    regions.attach(peer_fds, &theirs, peer, options)
}

/// The three descriptors a peer sent, checked for what can be checked
/// before mapping anything.
struct PeerFds {
    w: OwnedFd,
    r: OwnedFd,
    sock: OwnedFd,
}

impl PeerFds {
    /// Three descriptors; the socket a Unix stream socket that the peer
    /// (of credentials `peer`) made, not one of ours handed back; none of
    /// them one of `ours`.
    fn check(
        fds: Vec<OwnedFd>,
        ours: &[(u64, u64)],
        peer: &PeerCredentials,
    ) -> io::Result<PeerFds> {
        let [w, r, sock]: [OwnedFd; FDS] = fds
            .try_into()
            .map_err(|_| error::invalid_data("handshake carries three descriptors"))?;
        // Before any fstat (which calls into a file's filesystem: a FUSE
        // one the peer serves could block us there), the cheap looks that
        // never do: the regions must be memfds, the socket a connected
        // Unix stream socket.
        sys::check_memfd(w.as_fd())?;
        sys::check_memfd(r.as_fd())?;
        sys::check_wake_socket(sock.as_fd())?;
        // A peer that sends our own descriptors back would loop the
        // connection into ourselves, and we would hold both ends of the
        // liveness socket, blind to the peer's death. Ours (of this
        // handshake) are known by inode; a socket of any earlier
        // connection of ours shows our own pid as its creator.
        for fd in [w.as_fd(), r.as_fd(), sock.as_fd()] {
            if ours.contains(&sys::inode(fd)?) {
                return Err(error::invalid_data("peer sent our own descriptors back"));
            }
        }
        // (A connection within one process is its own business.)
        let me = sys::pid();
        if peer.pid != me && sys::peer_credentials(sock.as_fd())?.pid == me {
            return Err(error::invalid_data("peer sent a socket of ours back"));
        }
        Ok(PeerFds { w, r, sock })
    }
}

/// Our two regions and the socketpair of the pipe we write, before they
/// are sent.
struct Regions {
    /// Our writer region (the pipe we write).
    w: OwnRegion,
    /// Our reader region (the pipe we read).
    r: OwnRegion,
    /// The wake/liveness socket of the pipe we write: ours.
    sock: OwnedFd,
    /// Its other end, for the peer.
    sock_peer: OwnedFd,
}

impl Regions {
    fn create(options: &Options) -> io::Result<Regions> {
        let w = OwnRegion::create(Role::Writer, options.capacity, true)?;
        let r = OwnRegion::create(Role::Reader, options.capacity, true)?;
        let (sock, sock_peer) = sys::socket_pair()?;
        Ok(Regions {
            w,
            r,
            sock,
            sock_peer,
        })
    }

    fn inodes(&self) -> io::Result<Vec<(u64, u64)>> {
        [self.w.fd.as_fd(), self.r.fd.as_fd(), self.sock_peer.as_fd()]
            .into_iter()
            .map(sys::inode)
            .collect()
    }

    /// Maps the peer's regions (their ring no larger than `theirs` said,
    /// and than our limit) and builds both pipe ends.
    fn attach(
        self,
        peer_fds: PeerFds,
        theirs: &Hello,
        peer: PeerCredentials,
        options: &Options,
    ) -> io::Result<Connection> {
        let PeerFds {
            w: peer_w,
            r: peer_r,
            sock: in_sock,
        } = peer_fds;
        let max = theirs.capacity.min(options.max_peer_capacity as u64);
        self.r.follow_writer(peer_w.as_fd(), max)?;
        let settings = options.settings();
        let (consumer, in_r_fd) = setup::consumer(self.r, peer_w.as_fd())?;
        let (producer, out_w_fd) = setup::producer(self.w, peer_r.as_fd())?;
        Ok(Connection {
            reader: Reader {
                end: End {
                    ring: consumer,
                    side: Side::new(sys::Bell::socket(in_sock), in_r_fd, peer_w, settings),
                },
            },
            writer: Writer {
                end: End {
                    ring: producer,
                    side: Side::new(sys::Bell::socket(self.sock), out_w_fd, peer_r, settings),
                },
            },
            peer,
        })
    }
}

/// Server: makes our regions, attaches to the client's, and returns the
/// connection with the descriptors to send the client.
fn attach(
    peer_fds: PeerFds,
    theirs: &Hello,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<(Connection, [OwnedFd; FDS])> {
    let regions = Regions::create(options)?;
    let to_send = [
        regions.w.fd.try_clone()?,
        regions.r.fd.try_clone()?,
        regions.sock_peer.try_clone()?,
    ];
    let conn = regions.attach(peer_fds, theirs, peer, options)?;
    Ok((conn, to_send))
}
