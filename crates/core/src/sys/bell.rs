//! An end's wake and liveness channel, its [`Bell`]: how an idle end is
//! woken, and learns that its peer is gone. Made here (a wake pipe per
//! end, or a socketpair per pipe), checked here when a peer or a parent
//! hands us one, rung here ([`Bell::wake`]; an [`OwedWake`] sends a wake
//! that failed again later). The `/proc` reopen that makes our private
//! waker from a peer's wake pipe is here too ([`open_waker`]). Sleeping on
//! a bell is in `sleep`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Weak};
use std::time::Instant;

use rustix::event::PollFlags;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};

use super::fault;
use super::sleep::{hung_up, pipe_drain, pipe_sleep, socket_drain, socket_sleep, Woke};
use crate::error;

/// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)`, see
/// [socketpair(2)](https://man7.org/linux/man-pages/man2/socketpair.2.html):
/// the wake/liveness channel of one pipe between two ends that a handshake
/// joined (see [`Bell::Socket`]): a byte wakes the end sleeping on the
/// other side, and the kernel hangs it up when the last copy of an end is
/// gone, by exit or SIGKILL alike.
pub(crate) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// `getsockopt(fd, SOL_SOCKET, SO_TYPE)`, `SO_DOMAIN`, `SO_ACCEPTCONN` and
/// `getpeername(fd)`, see [socket(7)](https://man7.org/linux/man-pages/man7/socket.7.html)
/// and [getpeername(2)](https://man7.org/linux/man-pages/man2/getpeername.2.html):
/// checks that a descriptor from the peer is a *connected* Unix stream
/// socket. A listening one would pass the first two, but a wake sent on it
/// fails (`ENOTCONN`) and a pending connection keeps it readable for ever.
pub(crate) fn check_wake_socket(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::sockopt;
    let stream = sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::STREAM)
        && sockopt::socket_domain(fd).is_ok_and(|d| d == AddressFamily::UNIX);
    if !stream {
        return Err(error::invalid_data(
            "peer's wake descriptor is not a Unix stream socket",
        ));
    }
    let connected = sockopt::socket_acceptconn(fd).is_ok_and(|listening| !listening)
        && rustix::net::getpeername(fd).is_ok();
    if connected {
        Ok(())
    } else {
        Err(error::invalid_data(
            "peer's wake socket is not connected (a listening socket?)",
        ))
    }
}

/// `pipe2(O_CLOEXEC)`, see [pipe2(2)](https://man7.org/linux/man-pages/man2/pipe2.2.html):
/// a pipe end's wake pipe, as `(read end, write end)`, for ends this
/// process makes as a pair (see [`Bell::Pipe`]). The end keeps the
/// read end and sleeps in a blocking `read` on it; the peer end wakes it
/// with one byte through a waker made from the write end. When every copy of the peer's write end is closed, by exit,
/// SIGKILL or drop alike, the read end reads EOF: the same pipe is the
/// liveness channel.
fn wake_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Device and inode of a pipe, as `statx` reports them.
pub(crate) type PipeId = (u32, u32, u64);

/// `fcntl(fd, F_GETPIPE_SZ)`, then `statx(fd, "", AT_EMPTY_PATH |
/// AT_STATX_DONT_SYNC)`, see [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html)
/// and [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html):
/// the identity of a descriptor that must be a pipe, `InvalidData` if it
/// is not one. `F_GETPIPE_SZ` fails at once on anything but a pipe or a
/// FIFO without calling into a filesystem; `AT_STATX_DONT_SYNC` keeps a
/// FIFO on a FUSE filesystem the peer serves from blocking us.
pub(crate) fn pipe_id(fd: BorrowedFd<'_>) -> io::Result<PipeId> {
    use rustix::fs::{AtFlags, StatxFlags};
    let not_pipe = |e| error::invalid_data(format!("peer's wake descriptor is not a pipe ({e})"));
    rustix::pipe::fcntl_getpipe_size(fd).map_err(not_pipe)?;
    let st = rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::TYPE | StatxFlags::INO,
    )
    .map_err(not_pipe)?;
    if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFIFO {
        return Err(error::invalid_data("peer's wake descriptor is not a pipe"));
    }
    Ok((st.stx_dev_major, st.stx_dev_minor, st.stx_ino))
}

/// Checks the read end of a wake pipe we did not create (an end handed
/// to us): an anonymous pipe (on the device of our own pipes) opened
/// read-only, so that we hold no write end of it and read EOF once the
/// peer is gone. Returns its identity.
pub(crate) fn check_wake_in(fd: BorrowedFd<'_>) -> io::Result<PipeId> {
    let id = check_anonymous(fd)?;
    let mode = rustix::fs::fcntl_getfl(fd)?;
    if mode & rustix::fs::OFlags::RWMODE != rustix::fs::OFlags::RDONLY {
        return Err(error::invalid_data(
            "wake pipe's read end is not read-only (it would never see the peer leave)",
        ));
    }
    Ok(id)
}

/// The identity of a pipe, checked to be an anonymous one (a `pipe2`
/// pipe, on pipefs, as our own are), not a FIFO in some filesystem.
fn check_anonymous(fd: BorrowedFd<'_>) -> io::Result<PipeId> {
    let id = pipe_id(fd)?;
    if (id.0, id.1) != pipefs_device()? {
        return Err(error::invalid_data(
            "peer's wake descriptor is a FIFO in a filesystem, not a pipe",
        ));
    }
    Ok(id)
}

/// The device of anonymous pipes (pipefs), learnt from a pipe of our own.
fn pipefs_device() -> io::Result<(u32, u32)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // (Not a OnceLock, for fork's sake, as `light_fences`.)
    static DEV: AtomicU64 = AtomicU64::new(u64::MAX);
    let dev = DEV.load(Ordering::Relaxed);
    if dev != u64::MAX {
        return Ok(((dev >> 32) as u32, dev as u32));
    }
    let (r, _w) = wake_pipe()?;
    let (major, minor, _) = pipe_id(r.as_fd())?;
    DEV.store(
        (u64::from(major) << 32) | u64::from(minor),
        Ordering::Relaxed,
    );
    Ok((major, minor))
}

/// `openat(AT_FDCWD, "/proc/thread-self/fd/N", O_RDWR | O_NONBLOCK | O_CLOEXEC)`,
/// see [open(2)](https://man7.org/linux/man-pages/man2/open.2.html) and
/// [proc(5)](https://man7.org/linux/man-pages/man5/proc.5.html): makes
/// our private waker from the write end of the peer's wake pipe
/// (`received`, closed here), after checking that it is an anonymous
/// pipe and none of `ours` (an end rebuilt with its own pipe as waker
/// would wake itself, and hold a write end of its own pipe, blind to the
/// peer's death).
///
/// Only for pipes this process made or an end handed on by someone the
/// owner trusts (see [`Bell::Pipe`]): whoever holds another end of a pipe
/// can pin its mutex (a `splice` blocked on it), and this open, like
/// every read and write of the pipe, would then wait in D state.
///
/// Why a new open file description rather than `received` itself:
/// `O_NONBLOCK` lives in the description, and the peer, which may keep a
/// copy of it, could clear it and make our wakes block on a full pipe.
/// Why read-write: a pipe opened so always has a reader (us), so a wake
/// never raises `SIGPIPE` nor fails with `EPIPE`, and the open never
/// blocks; the peer's read end still reads EOF once every copy of ours is
/// closed, since ours is the writer it counts.
pub(crate) fn open_waker(received: OwnedFd, ours: &[PipeId]) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let id = check_anonymous(received.as_fd())?;
    if ours.contains(&id) {
        return Err(error::invalid_data("peer sent our own wake pipe back"));
    }
    // thread-self, not self: /proc/self/fd of a process whose main thread
    // has exited (while others run on) cannot be opened.
    let path = format!("/proc/thread-self/fd/{}", received.as_raw_fd());
    let waker = if fault::proc_hidden() {
        Err(Errno::NOENT)
    } else {
        rustix::fs::openat(
            rustix::fs::CWD,
            path.as_str(),
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot reopen the peer's wake pipe through {path} (is /proc mounted?): {e}"),
        )
    })?;
    // The same pipe, in case the number was reused between the checks
    // and the open (it cannot be: we own `received` until here).
    if pipe_id(waker.as_fd())? != id {
        return Err(error::invalid_data("peer's wake pipe changed under us"));
    }
    drop(received);
    Ok(waker)
}

/// `write(fd, "\x01", 1)` on our non-blocking waker (see [`open_waker`]),
/// see [write(2)](https://man7.org/linux/man-pages/man2/write.2.html):
/// wakes the peer with one byte, never blocking, never sleeping, never
/// raising SIGPIPE (it runs inside a publish, which may serve other
/// peers). On one CPU a pipe write also hands the CPU to the woken reader
/// at once (a synchronous wake-up), as a kernel pipe's does.
///
/// See [`wake_outcome`] for what the result means.
fn pipe_wake(fd: BorrowedFd<'_>) -> bool {
    loop {
        match wake_outcome(rustix::io::write(fd, &[1])) {
            Some(delivered) => return delivered,
            None => continue,
        }
    }
}

/// `send(fd, "\x01", 1, MSG_DONTWAIT | MSG_NOSIGNAL)`, see
/// [send(2)](https://man7.org/linux/man-pages/man2/send.2.html): wakes the
/// peer over a wake socket with one byte, never blocking, never raising
/// SIGPIPE. See [`wake_outcome`] for what the result means.
fn socket_wake(fd: BorrowedFd<'_>) -> bool {
    loop {
        let sent = rustix::net::send(fd, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
        match wake_outcome(sent) {
            Some(delivered) => return delivered,
            None => continue,
        }
    }
}

/// What a wake's write or send said: `None` to try again (`EINTR`);
/// `Some(false)` on a transient failure (`ENOMEM`, `ENOBUFS`: memory
/// pressure), after which the caller must not count the peer as woken,
/// so its next publish asks again; `Some(true)` otherwise: the byte went,
/// or the channel is full (wake bytes are pending already), or it can
/// carry no wake at all (the peer is gone, or the descriptor is of a kind
/// that refuses writes, say `EPIPE`, `EBADF`, `EXDEV`): retrying could
/// never help, and a wake owed for ever would make every later wait
/// spin on it. Such a peer is not woken; it hangs up or sleeps its
/// timeout out.
fn wake_outcome(r: rustix::io::Result<usize>) -> Option<bool> {
    match r {
        Err(Errno::INTR) => None,
        Err(Errno::NOMEM | Errno::NOBUFS) => Some(false),
        _ => Some(true),
    }
}

/// How an end is woken and learns that its peer is gone: the channel it
/// sleeps on, and the one it wakes its peer with.
///
/// Two kinds, by who holds the other ends:
///
/// - [`Bell::Socket`], for ends a handshake joined (a [`Listener`](crate::Listener)
///   and [`connect`](crate::connect)), so for any peer that may be a
///   stranger: one end of a Unix socketpair per pipe. Sleep is a `recv`,
///   a wake a non-blocking `send`, the peer's exit a hang-up. A peer holds
///   no lock a `send` or `recv` of ours takes, so it cannot stall us.
/// - [`Bell::Pipe`], for ends this process made as a pair ([`pipe`](crate::pipe),
///   [`message_pipe`](crate::message_pipe)) and handed on only to processes
///   their owner chose: a wake pipe per end, a pipe's write and read being
///   cheaper than a socket's send and recv on one CPU. Not for strangers:
///   whoever holds another end of a pipe can pin the pipe's mutex (a
///   `splice` from an empty socket into it blocks holding it), and every
///   read, write and open of ours then waits, unkillable, until it lets go.
#[derive(Debug)]
pub(crate) enum Bell {
    /// A wake pipe per end.
    Pipe {
        /// The read end of our wake pipe: we sleep on it; a byte is a
        /// wake, EOF means every copy of the peer's end is gone.
        wake_in: OwnedFd,
        /// Our private, non-blocking, read-write description of the
        /// peer's wake pipe (see [`open_waker`]): one byte wakes it.
        /// Shared only with the [`OwedWake`]s that point at it.
        wake_out: Arc<OwnedFd>,
    },
    /// Our end of the pipe's wake/liveness socketpair: we sleep on it and
    /// wake the peer through it. Shared only with the [`OwedWake`]s that
    /// point at it.
    Socket(Arc<OwnedFd>),
}

impl Bell {
    /// The bells of a reading and a writing end this process makes as a
    /// pair, `(reader's, writer's)`: a wake pipe each (see [`Bell::Pipe`]).
    /// Without `/proc` (not mounted, or closed to us: the reopen that
    /// makes a waker fails with `ENOENT`, `EACCES` or `EPERM`) a
    /// socketpair instead, as for the ends a handshake joins: slower to
    /// wake on one CPU, but needing nothing from any filesystem.
    pub(crate) fn pair() -> io::Result<(Bell, Bell)> {
        // Each end sleeps on its own wake pipe and wakes the other's.
        let (r_in, r_pipe) = wake_pipe()?;
        let (w_in, w_pipe) = wake_pipe()?;
        let wakers =
            open_waker(w_pipe, &[]).and_then(|r_out| Ok((r_out, open_waker(r_pipe, &[])?)));
        let no_proc = |e: &io::Error| {
            matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
            )
        };
        match wakers {
            Ok((r_out, w_out)) => Ok((Bell::pipe(r_in, r_out), Bell::pipe(w_in, w_out))),
            Err(e) if no_proc(&e) => {
                let (r, w) = socket_pair()?;
                Ok((Bell::socket(r), Bell::socket(w)))
            }
            Err(e) => Err(e),
        }
    }

    /// A wake pipe bell: we sleep on `wake_in` and wake the peer through
    /// `wake_out` (see [`open_waker`]).
    pub(crate) fn pipe(wake_in: OwnedFd, wake_out: OwnedFd) -> Bell {
        Bell::Pipe {
            wake_in,
            wake_out: Arc::new(wake_out),
        }
    }

    /// A wake socket bell: our end of the pipe's socketpair.
    pub(crate) fn socket(sock: OwnedFd) -> Bell {
        Bell::Socket(Arc::new(sock))
    }

    /// What we sleep on: readable on a wake byte and on the peer's
    /// hang-up (for poll, epoll and event loops).
    pub(crate) fn sleeps_on(&self) -> BorrowedFd<'_> {
        match self {
            Bell::Pipe { wake_in, .. } => wake_in.as_fd(),
            Bell::Socket(sock) => sock.as_fd(),
        }
    }

    /// The two descriptors an end is handed on with: the pipe's read end
    /// and our waker, or the socket twice.
    pub(crate) fn fds(&self) -> [BorrowedFd<'_>; 2] {
        match self {
            Bell::Pipe { wake_in, wake_out } => [wake_in.as_fd(), wake_out.as_fd()],
            Bell::Socket(sock) => [sock.as_fd(), sock.as_fd()],
        }
    }

    /// Wakes the peer (see [`wake_outcome`]); false if it must be asked
    /// again.
    pub(crate) fn wake(&self) -> bool {
        match self {
            Bell::Pipe { wake_out, .. } => send_wake(wake_out.as_fd(), false),
            Bell::Socket(sock) => send_wake(sock.as_fd(), true),
        }
    }

    /// A handle to send a wake that [`wake`](Self::wake) could not send
    /// again later, from anywhere, without keeping the waker open.
    pub(crate) fn owed(&self) -> OwedWake {
        match self {
            Bell::Pipe { wake_out, .. } => OwedWake {
                fd: Arc::downgrade(wake_out),
                socket: false,
            },
            Bell::Socket(sock) => OwedWake {
                fd: Arc::downgrade(sock),
                socket: true,
            },
        }
    }

    /// Sleeps until the peer wakes us or is gone, or `deadline` passes.
    pub(crate) fn sleep(&self, deadline: Option<Instant>) -> io::Result<Woke> {
        match self {
            Bell::Pipe { wake_in, .. } => pipe_sleep(wake_in.as_fd(), deadline),
            Bell::Socket(sock) => socket_sleep(sock.as_fd(), deadline),
        }
    }

    /// Reads and discards pending wake bytes without blocking; true if
    /// the peer is gone.
    pub(crate) fn drain(&self) -> bool {
        match self {
            Bell::Pipe { wake_in, .. } => pipe_drain(wake_in.as_fd()),
            Bell::Socket(sock) => socket_drain(sock.as_fd()),
        }
    }

    /// Whether the peer is gone, without sleeping.
    pub(crate) fn hung_up(&self) -> io::Result<bool> {
        match self {
            Bell::Pipe { wake_in, .. } => hung_up(wake_in.as_fd(), PollFlags::empty()),
            Bell::Socket(sock) => hung_up(sock.as_fd(), PollFlags::RDHUP),
        }
    }
}

/// A wake a [`Bell`] failed to send (a transient failure), to be sent
/// again (see `crate::owed`). It holds its waker weakly: once the end is
/// dropped its waker closes as before (the peer sees the hang-up), and
/// the wake is owed no more.
#[derive(Debug, Clone)]
pub(crate) struct OwedWake {
    fd: Weak<OwnedFd>,
    socket: bool,
}

impl OwedWake {
    /// Sends the wake again: false if it is still owed (see
    /// [`wake_outcome`]); true once sent, or once its end is gone.
    pub(crate) fn wake(&self) -> bool {
        self.fd
            .upgrade()
            .is_none_or(|fd| send_wake(fd.as_fd(), self.socket))
    }

    /// Whether both are owed through the same waker.
    pub(crate) fn same(&self, other: &OwedWake) -> bool {
        Weak::ptr_eq(&self.fd, &other.fd)
    }
}

/// One wake byte through a pipe waker or a wake socket (see
/// [`pipe_wake`], [`socket_wake`]); false if it must be sent again.
fn send_wake(fd: BorrowedFd<'_>, socket: bool) -> bool {
    if fault::wake_fails() {
        return false;
    }
    if socket {
        socket_wake(fd)
    } else {
        pipe_wake(fd)
    }
}

#[cfg(test)]
mod tests {
    //! Ends made where `/proc` is missing (injected: `fault::hide_proc`).

    use std::io::{ErrorKind, Read, Write};
    use std::time::Duration;

    use super::Bell;
    use crate::sys::fault;

    #[test]
    fn without_proc_pipe_ends_wake_through_sockets() {
        fault::hide_proc(true);
        let (mut r, mut w) = crate::Options::new()
            .capacity(4096)
            .spin(Duration::ZERO)
            .pipe()
            .unwrap();
        assert!(matches!(r.end.side.bell, Bell::Socket(_)));
        assert!(matches!(w.end.side.bell, Bell::Socket(_)));
        // 1 MiB through 4 KiB, neither side spinning: each sleeps and is
        // woken again and again; then the writer's drop is EOF.
        let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || w.write_all(&sent));
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        writer.join().unwrap().unwrap();
        assert!(got == data);
    }

    #[test]
    fn without_proc_message_ends_wake_through_sockets_and_can_be_handed_on() {
        fault::hide_proc(true);
        let (mut rx, tx) = crate::Options::new()
            .spin(Duration::ZERO)
            .message_pipe()
            .unwrap();
        assert!(matches!(rx.end.side.bell, Bell::Socket(_)));
        // Rebuilt from its descriptors (no /proc needed for a socket).
        let [a, b, c, d] = tx.as_fds().map(|fd| fd.try_clone_to_owned().unwrap());
        drop(tx);
        let mut tx = crate::Sender::from_fds([a, b, c, d]).unwrap();
        assert!(matches!(tx.end.side.bell, Bell::Socket(_)));
        let sender = std::thread::spawn(move || {
            for i in 0..1000u32 {
                tx.send(&i.to_le_bytes()).unwrap();
            }
        });
        let mut buf = [0u8; 4];
        for i in 0..1000u32 {
            assert_eq!(rx.recv(&mut buf).unwrap(), 4);
            assert_eq!(u32::from_le_bytes(buf), i);
        }
        sender.join().unwrap();
        let err = rx.recv(&mut buf).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
    }

    #[test]
    fn with_proc_pipe_ends_wake_through_pipes() {
        let (r, w) = crate::pipe().unwrap();
        assert!(matches!(r.end.side.bell, Bell::Pipe { .. }));
        assert!(matches!(w.end.side.bell, Bell::Pipe { .. }));
    }
}
