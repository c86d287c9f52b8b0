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
//!   2. client hello: OK + 4 descriptors ─────▶ checks them and both limits
//!                 ◀─── TOO_LARGE hello, or
//!                 ◀─── 3. server hello: OK + 4 descriptors
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
//! Messages 2 and 3 carry four descriptors (`SCM_RIGHTS`), in this order:
//! the sender's writer region (control block and data of the pipe it
//! writes), its reader region (the head of the pipe it reads), and the
//! write ends of its writer's and its reader's wake pipes, whose read ends
//! the sender keeps: a byte written wakes that end, and EOF there tells
//! it that every copy of the receiver's end is gone. The sender closes
//! the write ends it sent; the receiver reopens each as a private
//! description (see `sys::open_waker`) and closes the one it received.
//! Each side seals its regions so that only its own mapping can write
//! them; the other maps them read-only.
//!
//! Version 1 carried one end of a Unix socketpair per pipe instead of the
//! two wake pipes; a version-1 peer is refused with `InvalidData`.
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
use crate::own_pipes;
use crate::setup::{self, OwnRegion};
use crate::sys;
use crate::wait::{End, Side};
use crate::{Options, Reader, Writer};

/// First word of every hello: `b"SHMPIPEH"` read as little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMPIPEH");
/// Version of this handshake; bumped on any change to this file's format.
pub const VERSION: u32 = 2;
/// Bytes in every hello.
pub const HELLO_LEN: usize = 40;
/// Descriptors in a hello that carries them (messages 2 and 3).
pub const FDS: usize = 4;

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
        if u64_at(h, offset::MAGIC) != MAGIC {
            return Err(bad_version());
        }
        let (version, ring) = (u32_at(h, offset::VERSION), u32_at(h, offset::LAYOUT));
        if version != VERSION || ring != layout::VERSION {
            return Err(error::invalid_data(format!(
                "peer speaks shmpipe handshake version {version} with ring layout {ring}, \
                 this side version {VERSION} with layout {} (upgrade both sides to \
                 the same shmpipe)",
                layout::VERSION
            )));
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
    let (conn, ours_fds) = attach(fds, &theirs, peer, options)?;
    send(
        stream,
        ours(STATUS_OK, options),
        &ours_fds.each_ref().map(|fd| fd.as_fd()),
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
    send(stream, ours(STATUS_OK, options), &regions.to_send())?;
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
    let peer_fds = PeerFds::check(fds, &our_inodes, &regions.pipes()?, &peer)?;
    regions.attach(peer_fds, &theirs, peer, options)
}

/// The four descriptors a peer sent, checked for what can be checked
/// before mapping anything; its wake pipes reopened as our wakers.
struct PeerFds {
    w: OwnedFd,
    r: OwnedFd,
    /// Wakes the peer's writer: our reader's waker.
    wake_w: OwnedFd,
    /// Wakes the peer's reader: our writer's waker.
    wake_r: OwnedFd,
}

impl PeerFds {
    /// Four descriptors: two memfds and two anonymous pipes, none of them
    /// one of `ours` (this handshake's regions, by inode) or of
    /// `our_pipes` (our wake pipes).
    fn check(
        fds: Vec<OwnedFd>,
        ours: &[(u64, u64)],
        our_pipes: &[sys::PipeId],
        peer: &PeerCredentials,
    ) -> io::Result<PeerFds> {
        let [w, r, wake_w, wake_r]: [OwnedFd; FDS] = fds
            .try_into()
            .map_err(|_| error::invalid_data("handshake carries four descriptors"))?;
        // Before any fstat (which calls into a file's filesystem: a FUSE
        // one the peer serves could block us there), the cheap looks that
        // never do: the regions must be memfds (the wake pipes are checked
        // as pipes first by `open_waker`).
        sys::check_memfd(w.as_fd())?;
        sys::check_memfd(r.as_fd())?;
        // A peer that sends our own regions back would loop the
        // connection into ourselves.
        for fd in [w.as_fd(), r.as_fd()] {
            if ours.contains(&sys::inode(fd)?) {
                return Err(error::invalid_data("peer sent our own descriptors back"));
            }
        }
        let wake_w = sys::open_waker(wake_w, our_pipes)?;
        let wake_r = sys::open_waker(wake_r, our_pipes)?;
        let ids = [sys::pipe_id(wake_w.as_fd())?, sys::pipe_id(wake_r.as_fd())?];
        if ids[0] == ids[1] {
            return Err(error::invalid_data("peer sent one wake pipe for both ends"));
        }
        // A wake pipe of an earlier connection of ours (a connection within
        // one process is its own business).
        if peer.pid != sys::pid() && ids.into_iter().any(own_pipes::contains) {
            return Err(error::invalid_data("peer sent a wake pipe of ours back"));
        }
        Ok(PeerFds {
            w,
            r,
            wake_w,
            wake_r,
        })
    }
}

/// Our two regions and the wake pipes of our two ends, before they are
/// sent.
struct Regions {
    /// Our writer region (the pipe we write).
    w: OwnRegion,
    /// Our reader region (the pipe we read).
    r: OwnRegion,
    /// Our writer's wake pipe: the read end, ours, and the write end, for
    /// the peer.
    w_in: OwnedFd,
    w_bell: OwnedFd,
    /// Our reader's wake pipe, likewise.
    r_in: OwnedFd,
    r_bell: OwnedFd,
}

impl Regions {
    fn create(options: &Options) -> io::Result<Regions> {
        let w = OwnRegion::create(Role::Writer, options.capacity, true)?;
        let r = OwnRegion::create(Role::Reader, options.capacity, true)?;
        let (w_in, w_bell) = sys::wake_pipe()?;
        let (r_in, r_bell) = sys::wake_pipe()?;
        Ok(Regions {
            w,
            r,
            w_in,
            w_bell,
            r_in,
            r_bell,
        })
    }

    /// What message 2 or 3 carries, in the diagram's order.
    fn to_send(&self) -> [BorrowedFd<'_>; FDS] {
        [
            self.w.fd.as_fd(),
            self.r.fd.as_fd(),
            self.w_bell.as_fd(),
            self.r_bell.as_fd(),
        ]
    }

    fn inodes(&self) -> io::Result<Vec<(u64, u64)>> {
        [self.w.fd.as_fd(), self.r.fd.as_fd()]
            .into_iter()
            .map(sys::inode)
            .collect()
    }

    fn pipes(&self) -> io::Result<Vec<sys::PipeId>> {
        [self.w_in.as_fd(), self.r_in.as_fd()]
            .into_iter()
            .map(sys::pipe_id)
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
            wake_w,
            wake_r,
        } = peer_fds;
        // Our copies of the write ends we sent must go, or we would never
        // read EOF when the peer is gone.
        drop((self.w_bell, self.r_bell));
        let max = theirs.capacity.min(options.max_peer_capacity as u64);
        self.r.follow_writer(peer_w.as_fd(), max)?;
        let settings = options.settings();
        let (consumer, in_r_fd) = setup::consumer(self.r, peer_w.as_fd())?;
        let (producer, out_w_fd) = setup::producer(self.w, peer_r.as_fd())?;
        Ok(Connection {
            reader: Reader {
                end: End {
                    ring: consumer,
                    side: Side::new(self.r_in, wake_w, in_r_fd, peer_w, settings),
                },
            },
            writer: Writer {
                end: End {
                    ring: producer,
                    side: Side::new(self.w_in, wake_r, out_w_fd, peer_r, settings),
                },
            },
            peer,
        })
    }
}

/// Server: makes our regions, attaches to the client's, and returns the
/// connection with the descriptors to send the client.
fn attach(
    fds: Vec<OwnedFd>,
    theirs: &Hello,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<(Connection, [OwnedFd; FDS])> {
    let regions = Regions::create(options)?;
    let peer_fds = PeerFds::check(fds, &regions.inodes()?, &regions.pipes()?, &peer)?;
    let to_send = [
        regions.w.fd.try_clone()?,
        regions.r.fd.try_clone()?,
        regions.w_bell.try_clone()?,
        regions.r_bell.try_clone()?,
    ];
    let conn = regions.attach(peer_fds, theirs, peer, options)?;
    Ok((conn, to_send))
}
