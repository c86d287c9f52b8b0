//! The handshake's steps: each side's turn in the exchange of
//! [`Hello`]s that [`handshake`](super::handshake) specifies, the regions
//! each side makes and sends, and the checks on what the peer sent before
//! anything of it is mapped. The listener calls [`send_verdict`] and
//! [`server_finish`] (from `accept`), a client [`client`] (from
//! `Options::connect`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use shmpipe_ring::layout::Role;

use super::connection::{Connection, PeerCredentials};
use super::handshake::{
    Hello, FDS, HELLO_LEN, STATUS_OK, STATUS_REFUSED, STATUS_TOO_LARGE, TIMEOUT,
};
use crate::error;
use crate::setup::{self, OwnRegion};
use crate::sys;
use crate::wait::{End, Side};
use crate::{Options, Reader, Writer};

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
pub(crate) fn recv(stream: &UnixStream, deadline: Instant) -> io::Result<(Hello, Vec<OwnedFd>)> {
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
    let (verdict, _) = recv(stream, deadline)?;
    check_verdict(stream, &verdict, options)?;
    let sent = client_send(stream, options)?;
    let (theirs, fds) = recv(stream, deadline)?;
    client_attach(sent, &verdict, &theirs, fds, peer, options)
}

/// Our regions, sent to the server (message 2) and waiting for its.
pub(crate) struct Sent {
    regions: Regions,
    inodes: Vec<(u64, u64)>,
}

/// Client: makes our regions and sends them (message 2). The socket's
/// buffer is empty and the message small, so this does not wait, even if
/// the server has not accepted yet (`Options::connect_later` sends it
/// before reading the verdict: the server reads it after the verdict all
/// the same).
pub(crate) fn client_send(stream: &UnixStream, options: &Options) -> io::Result<Sent> {
    stream.set_write_timeout(Some(TIMEOUT))?;
    let regions = Regions::create(options)?;
    let [w, r, s] = [
        regions.w.fd.as_fd(),
        regions.r.fd.as_fd(),
        regions.sock_peer.as_fd(),
    ];
    send(stream, ours(STATUS_OK, options), &[w, r, s])?;
    let inodes = regions.inodes()?;
    Ok(Sent { regions, inodes })
}

/// Client: checks the verdict (message 1): let in, and both rings within
/// both sides' limits.
pub(crate) fn check_verdict(
    stream: &UnixStream,
    verdict: &Hello,
    options: &Options,
) -> io::Result<()> {
    match verdict.status {
        STATUS_OK => {}
        STATUS_REFUSED => return Err(error::permission_denied("the listener refused this peer")),
        _ => return Err(error::invalid_data("bad status in handshake")),
    }
    if let Err(e) = check_limits(verdict, options) {
        // Tell the server why, so it fails clearly too.
        let _ = send(stream, ours(STATUS_TOO_LARGE, options), &[]);
        return Err(e);
    }
    Ok(())
}

/// Client: checks the server's regions (message 3, `theirs` with `fds`)
/// and attaches to them.
pub(crate) fn client_attach(
    sent: Sent,
    verdict: &Hello,
    theirs: &Hello,
    fds: Vec<OwnedFd>,
    peer: PeerCredentials,
    options: &Options,
) -> io::Result<Connection> {
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
    let peer_fds = PeerFds::check(fds, &sent.inodes, &peer)?;
    sent.regions.attach(peer_fds, theirs, peer, options)
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
