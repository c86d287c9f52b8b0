//! The listener's side of connecting: many clients' handshakes at once,
//! so that no client can hold up another.
//!
//! `accept(2)` hands us clients in the order they connected, but a client
//! may then say nothing, say it slowly, or say garbage. Each accepted
//! client therefore gets a place here until its hello arrives, with its
//! own deadline (`handshake::TIMEOUT`). Its socket sits in an epoll
//! instance next to the listening socket; that instance is the listener's
//! descriptor (`AsFd`), readable when a client connects or a pending one
//! has spoken (or hung up). A client's hello is read only once its socket
//! is readable, and the rest of its handshake (mapping its rings, making
//! ours, one send to a socket whose buffer is empty) does not wait on it.
//!
//! At most [`max_pending`] clients wait at once (a quarter of the
//! descriptor limit, at most [`MAX_PENDING`]); a new one past that drops
//! the oldest, which has had the longest time to speak.
//!
//! Out of descriptors (`EMFILE`, `ENFILE`), a queued connection would keep
//! the level-triggered listening socket readable for ever. The listener
//! keeps one spare descriptor for that case: it closes the spare, takes the
//! client, hangs up on it at once and opens the spare again, so the queue
//! drains and `accept` never spins. Without a spare the error goes back to
//! the caller, as `accept(2)`'s does.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::connection::{credentials, Connection, PeerCredentials};
use super::exchange;
use super::handshake;
use crate::error;
use crate::owed;
use crate::sys::{self, EpollEvent};
use crate::wait::BRIEF_SLEEP;
use crate::Options;

/// The upper bound of the clients in the middle of a handshake at once
/// (see [`Listener::accept`](crate::Listener::accept)); the bound in
/// force is [`max_pending`], smaller under a low descriptor limit.
///
/// # Examples
///
/// ```
/// assert!(shmpipe::MAX_PENDING >= 64);
/// ```
pub const MAX_PENDING: usize = 1024;

/// Most clients in the middle of a handshake at once in this process: a
/// quarter of the soft descriptor limit (`RLIMIT_NOFILE`), at least 16 and
/// at most [`MAX_PENDING`], so silent clients alone cannot use up the
/// server's descriptors.
///
/// # Examples
///
/// ```
/// let n = shmpipe::max_pending();
/// assert!((16..=shmpipe::MAX_PENDING).contains(&n));
/// ```
pub fn max_pending() -> usize {
    usize::try_from(soft_fd_limit() / 4)
        .unwrap_or(MAX_PENDING)
        .clamp(16, MAX_PENDING)
}

/// The epoll tag of the listening socket; pending clients are tagged by
/// their number, which never reaches it.
const LISTENING: u64 = u64::MAX;

/// Clients accepted at most per look at the listening socket, so that a
/// flood of connections cannot keep `accept` from finishing handshakes.
const ACCEPT_BATCH: usize = 64;

/// Events taken from the epoll instance per look.
const EVENTS: usize = 64;

/// A client that connected, was let in, and has not sent its hello yet.
#[derive(Debug)]
struct AwaitingHello {
    stream: UnixStream,
    peer: PeerCredentials,
}

/// Every pending client, and the events not handled yet.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    clients: HashMap<u64, AwaitingHello>,
    /// Deadlines in the order clients came (all get the same time, so
    /// this is also deadline order); entries of finished clients are
    /// skipped when they come up.
    deadlines: VecDeque<(Instant, u64)>,
    next: u64,
    events: Vec<EpollEvent>,
    /// The spare descriptor given up to turn away a client when
    /// descriptors run out (see the module's doc); `None` until first
    /// opened, or while it could not be opened again.
    spare: Option<OwnedFd>,
    /// [`max_pending`] when the listener was made.
    max_pending: usize,
    /// Handshakes that failed, and the latest one's error (see
    /// `Listener::failed_handshakes`).
    failed: u64,
    last_error: Option<io::Error>,
}

/// What `accept` works with, borrowed from the listener.
pub(crate) struct Parts<'a> {
    pub(crate) socket: &'a UnixListener,
    pub(crate) epoll: BorrowedFd<'a>,
    pub(crate) allow: &'a dyn Fn(&PeerCredentials) -> bool,
    pub(crate) options: &'a Options,
    pub(crate) nonblocking: bool,
}

/// The listener's epoll instance, holding its listening socket (made
/// non-blocking: one that looks readable may have lost its client).
pub(crate) fn readiness(socket: &UnixListener) -> io::Result<OwnedFd> {
    socket.set_nonblocking(true)?;
    let epoll = sys::epoll()?;
    sys::epoll_add(epoll.as_fd(), socket.as_fd(), LISTENING)?;
    Ok(epoll)
}

impl Pending {
    /// Nobody pending yet; the spare descriptor is opened now, while
    /// descriptors are surely there.
    pub(crate) fn new() -> Pending {
        Pending {
            spare: open_spare(),
            max_pending: max_pending(),
            ..Pending::default()
        }
    }

    /// The next connection whose handshake completes; in non-blocking
    /// mode `WouldBlock` if none has yet.
    pub(crate) fn accept(&mut self, p: &Parts<'_>) -> io::Result<Connection> {
        loop {
            let now = Instant::now();
            self.expire(p, now);
            if self.events.is_empty() {
                // A wake this thread owes a peer is sent before we sleep
                // (see `owed`); while it stays owed, the sleep is brief.
                let owing = !owed::pay();
                let timeout = if p.nonblocking {
                    Some(Duration::ZERO)
                } else {
                    // Until the next deadline, or no limit.
                    let next = self
                        .deadlines
                        .front()
                        .map(|&(d, _)| d.saturating_duration_since(now));
                    if owing {
                        Some(next.map_or(BRIEF_SLEEP, |n| n.min(BRIEF_SLEEP)))
                    } else {
                        next
                    }
                };
                sys::epoll_wait(p.epoll, &mut self.events, EVENTS, timeout)?;
                if self.events.is_empty() && p.nonblocking {
                    return Err(error::would_block());
                }
            }
            let mut progress = false;
            while let Some(ev) = self.events.pop() {
                if ev.data == LISTENING {
                    progress |= self.take_new(p)?;
                } else if let Some(conn) = self.finish(p, ev.data) {
                    return Ok(conn);
                } else {
                    progress = true; // a client done with (hung up, garbage)
                }
            }
            // A pass that took nobody off the queue and finished no
            // handshake (say, out of memory for new clients): in
            // non-blocking mode the caller polls again rather than this
            // call looping on a socket that stays readable.
            if p.nonblocking && !progress {
                return Err(error::would_block());
            }
        }
    }

    /// Accepts what waits on the listening socket: each client is told the
    /// policy's verdict at once and, if let in, waits here for its hello.
    /// True if any client was taken off the queue.
    fn take_new(&mut self, p: &Parts<'_>) -> io::Result<bool> {
        let mut took = false;
        for _ in 0..ACCEPT_BATCH {
            let stream = match p.socket.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(took),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors: turn the client away with the spare
                // (the queue drains, the socket stops polling readable),
                // or, without one, hand the error back.
                Err(e) if out_of_fds(&e) => match self.turn_away(p) {
                    Some(true) => {
                        took = true;
                        self.failed(e);
                        continue;
                    }
                    Some(false) => return Ok(took), // the queue is empty
                    None => return Err(e),
                },
                // A client that reset before we took it, or memory
                // running short: the others are still served.
                Err(e) if is_transient(&e) => return Ok(took),
                Err(e) => return Err(e),
            };
            took = true;
            let Ok(peer) = credentials(&stream) else {
                continue;
            };
            let allowed = (p.allow)(&peer);
            if exchange::send_verdict(&stream, allowed, p.options).is_err() || !allowed {
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let id = self.next;
            self.next += 1;
            if sys::epoll_add(p.epoll, stream.as_fd(), id).is_err() {
                continue;
            }
            if self.clients.len() >= self.max_pending {
                self.drop_oldest(p);
            }
            self.clients.insert(id, AwaitingHello { stream, peer });
            self.deadlines
                .push_back((Instant::now() + handshake::TIMEOUT, id));
        }
        Ok(took)
    }

    /// Closes the spare, accepts one client and hangs up on it, opens the
    /// spare again. `None` without a spare, else whether a client was
    /// taken.
    fn turn_away(&mut self, p: &Parts<'_>) -> Option<bool> {
        self.spare.take()?;
        // Taken and dropped at once: the client is hung up on, and its
        // descriptor is free again for the spare.
        let took = p.socket.accept().is_ok();
        self.spare = open_spare();
        Some(took)
    }

    /// A pending client's socket polled readable: its hello (or its
    /// hang-up, or garbage) is there. The client is done with either way.
    fn finish(&mut self, p: &Parts<'_>, id: u64) -> Option<Connection> {
        let client = self.clients.remove(&id)?;
        sys::epoll_del(p.epoll, client.stream.as_fd());
        // Not the caller's error: other clients are served all the same.
        // It is counted and kept for `Listener::take_handshake_error`.
        exchange::server_finish(&client.stream, client.peer, p.options)
            .map_err(|e| self.failed(e))
            .ok()
    }

    /// Notes a failed handshake.
    fn failed(&mut self, e: io::Error) {
        self.failed += 1;
        self.last_error = Some(e);
    }

    /// Handshakes failed so far.
    pub(crate) fn failures(&self) -> u64 {
        self.failed
    }

    /// The latest failed handshake's error, taken.
    pub(crate) fn take_error(&mut self) -> Option<io::Error> {
        self.last_error.take()
    }

    /// Drops clients whose time is up. A client whose hello is waiting to
    /// be read is kept: the time went by in the server, busy elsewhere
    /// between two `accept` calls, not in the client, and dropping it
    /// would make a server's slowness drop every waiting client. Its
    /// socket polls readable, so this or the next `accept` finishes it.
    fn expire(&mut self, p: &Parts<'_>, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if self.clients.contains_key(&id) && deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if self
                .clients
                .get(&id)
                .is_some_and(|c| has_spoken(c.stream.as_fd()))
            {
                continue;
            }
            if self.drop_client(p, id) {
                self.failed(error::timed_out(format!(
                    "handshake: the client said nothing within {} s",
                    handshake::TIMEOUT.as_secs()
                )));
            }
        }
    }

    fn drop_oldest(&mut self, p: &Parts<'_>) {
        while let Some((_, id)) = self.deadlines.pop_front() {
            if self.drop_client(p, id) {
                self.failed(error::connection_aborted(
                    "handshake: dropped, the oldest of max_pending() clients in their handshake",
                ));
                return;
            }
        }
    }

    fn drop_client(&mut self, p: &Parts<'_>, id: u64) -> bool {
        match self.clients.remove(&id) {
            Some(c) => {
                sys::epoll_del(p.epoll, c.stream.as_fd());
                true
            }
            None => false,
        }
    }

    /// Clients in the middle of their handshake.
    pub(crate) fn len(&self) -> usize {
        self.clients.len()
    }
}

// The system calls this module makes itself rather than through `sys`,
// one function each, ready to move there.

/// `getrlimit(RLIMIT_NOFILE)`, see
/// [getrlimit(2)](https://man7.org/linux/man-pages/man2/getrlimit.2.html):
/// the soft descriptor limit, `u64::MAX` if unlimited.
fn soft_fd_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// `open("/dev/null", O_RDONLY | O_CLOEXEC)`, see
/// [open(2)](https://man7.org/linux/man-pages/man2/open.2.html): the spare
/// descriptor, `None` if none is left.
fn open_spare() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// `poll(fd, POLLIN, 0)`, see
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html): whether
/// a client's socket has something to read (its hello, or its hang-up).
fn has_spoken(fd: BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// `EMFILE` or `ENFILE`: this process, or the system, has no descriptor
/// left for the client.
fn out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Errors of `accept(2)` that concern one client or a passing shortage,
/// not the listener.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EPROTO | libc::ENOBUFS | libc::ENOMEM)
    )
}
