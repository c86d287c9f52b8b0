//! The operating-system layer: memfd, seals, mmap, the wake pipes and
//! sockets (see [`Bell`]), poll and
//! descriptor passing. Every system call shmpipe makes is in this module,
//! and so is most of its unsafe code (mapping memory). Each wrapper's doc
//! starts with the C call it makes and a link to its man page, as rustix's do.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::error;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// Seals every shared region carries: its size can never change, so a
/// mapping of it can never fault with SIGBUS, and no seal can be removed.
pub(crate) const SIZE_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)` and `ftruncate`,
/// see [memfd_create(2)](https://man7.org/linux/man-pages/man2/memfd_create.2.html): a memfd of `len`
/// zero bytes, close-on-exec, sealable, nameless in the filesystem
/// (nothing under /dev/shm).
pub(crate) fn memfd(name: &str, len: usize) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    Ok(fd)
}

/// `fcntl(fd, F_ADD_SEALS, seals)`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): adds seals to a memfd.
pub(crate) fn seal(fd: BorrowedFd<'_>, seals: SealFlags) -> io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(fd, seals)?)
}

/// `TMPFS_MAGIC` from `<linux/magic.h>`: the filesystem of an ordinary
/// memfd (shmem).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `fcntl(F_GET_SEALS)`, then `fstatfs` and `fstat`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html) and
/// [fstatfs(2)](https://man7.org/linux/man-pages/man2/fstatfs.2.html):
/// checks that a memfd we did not create is sealed against resizing and
/// lives on tmpfs, and returns its size. Anything else (no memfd,
/// unsealed, a hugetlbfs memfd) is `InvalidData`.
///
/// Why tmpfs only: a hugetlbfs memfd (`MFD_HUGETLB`) takes the same seals,
/// but a mapping of it is rounded to the huge page size (our `munmap` of
/// the length we asked for then fails, leaking the mapping), and its owner
/// can still punch holes in it despite the seals, so our next load from
/// its index would raise SIGBUS.
pub(crate) fn check_sealed(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // F_GET_SEALS first: it fails at once on anything but a memfd (or a
    // tmpfs/hugetlbfs file) without calling into the file's filesystem,
    // where fstatfs or fstat on a FUSE file the peer serves could block
    // us for as long as it likes.
    let seals = check_memfd(fd)?;
    let fs = rustix::fs::fstatfs(fd)?;
    if fs.f_type as i64 != TMPFS_MAGIC {
        return Err(error::invalid_data(format!(
            "peer's region is not a tmpfs memfd (filesystem {:#x})",
            fs.f_type
        )));
    }
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(error::invalid_data(
            "peer's region is not sealed against resizing",
        ));
    }
    let size = rustix::fs::fstat(fd)?.st_size;
    usize::try_from(size).map_err(|_| error::invalid_data("peer's region has a bad size"))
}

/// `fcntl(fd, F_GET_SEALS)`, see [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html):
/// the seals of a descriptor from the peer, `InvalidData` if it is not a
/// sealable memfd. The first look at such a descriptor: it never calls
/// into a filesystem the peer may control (FUSE), as `fstat` would.
pub(crate) fn check_memfd(fd: BorrowedFd<'_>) -> io::Result<SealFlags> {
    rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| error::invalid_data(format!("peer's region is not a sealable memfd ({e})")))
}

/// `fcntl(fd, F_GET_SEALS)`, see [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): the
/// seals on a memfd.
pub(crate) fn seals(fd: BorrowedFd<'_>) -> io::Result<SealFlags> {
    Ok(rustix::fs::fcntl_get_seals(fd)?)
}

/// A shared mapping of a whole memfd, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range; it is only read and written
// through atomics or raw copies by the ring, which keeps its own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `mmap(NULL, len, PROT_READ [| PROT_WRITE], MAP_SHARED, fd, 0)`, see
    /// [mmap(2)](https://man7.org/linux/man-pages/man2/mmap.2.html): maps `len` bytes of `fd` shared,
    /// writable or read-only; `munmap` on drop.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh mapping at an address the kernel chooses aliases
        // no Rust object; the memfd cannot shrink under it (we create or
        // check it sealed), so every byte of it stays accessible.
        let ptr =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)? };
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and nothing uses
        // the range after the Mapping (its owners hold it in an Arc that
        // outlives every ring end built on it).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

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
pub(crate) fn wake_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// `fstat(fd)`, see [fstat(2)](https://man7.org/linux/man-pages/man2/fstat.2.html): the device and
/// inode behind a descriptor, to tell one object from another.
pub(crate) fn inode(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
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
    let waker = if proc_hidden() {
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

#[cfg(test)]
thread_local! {
    /// Unit tests: `/proc` is missing for this thread (every reopen
    /// through it fails with `ENOENT`).
    pub(crate) static NO_PROC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a unit test hid `/proc` from this thread (see `NO_PROC`).
fn proc_hidden() -> bool {
    #[cfg(test)]
    return NO_PROC.with(|n| n.get());
    #[cfg(not(test))]
    false
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

#[cfg(test)]
thread_local! {
    /// Unit tests: the next this many wakes sent by this thread fail as
    /// `ENOMEM` would (nothing is sent).
    pub(crate) static WAKES_FAIL: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One wake byte through a pipe waker or a wake socket (see
/// [`pipe_wake`], [`socket_wake`]); false if it must be sent again.
fn send_wake(fd: BorrowedFd<'_>, socket: bool) -> bool {
    #[cfg(test)]
    if WAKES_FAIL.with(|n| n.replace(n.get().saturating_sub(1))) > 0 {
        return false;
    }
    if socket {
        socket_wake(fd)
    } else {
        pipe_wake(fd)
    }
}

/// What ended a sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// The peer sent a wake byte (or a stale one was pending).
    Woken,
    /// The peer is gone: every copy of its waker is closed.
    HungUp,
    /// The timeout passed.
    TimedOut,
}

/// A blocking `read` of our wake pipe without a deadline, or
/// `poll(fd, POLLIN, timeout)` then a drain with one, see
/// [read(2)](https://man7.org/linux/man-pages/man2/read.2.html) and
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html): sleeps
/// until the peer wakes us or is gone, or `deadline` passes. Pending wake
/// bytes are drained. After `EINTR` the poll goes on with the time left
/// until the deadline, so signals cannot stretch a timeout.
fn pipe_sleep(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<Woke> {
    if deadline.is_none() {
        // Without a timeout one blocking read both sleeps and drains: a
        // wake byte returns it, the peer's last close returns 0 (EOF).
        let mut buf = [0u8; 64];
        loop {
            match rustix::io::read(fd, &mut buf) {
                Ok(0) => return Ok(Woke::HungUp),
                Ok(_) => return Ok(Woke::Woken),
                Err(Errno::INTR) => continue,
                // Someone made the read end non-blocking: poll instead.
                Err(Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let Some(ev) = poll_until(fd, PollFlags::IN, deadline)? else {
        return Ok(Woke::TimedOut);
    };
    if ev.intersects(PollFlags::ERR | PollFlags::NVAL)
        || (ev.contains(PollFlags::HUP) && !ev.contains(PollFlags::IN))
    {
        return Ok(Woke::HungUp);
    }
    Ok(if pipe_drain(fd) {
        Woke::HungUp
    } else {
        Woke::Woken
    })
}

/// `poll(fd, events, time left until deadline)`, see
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html): the
/// events that came, or `None` once `deadline` passed. After `EINTR` it
/// polls again with the time left, so signals cannot stretch a timeout.
fn poll_until(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    deadline: Option<Instant>,
) -> io::Result<Option<PollFlags>> {
    let mut fds = [PollFd::new(&fd, events)];
    loop {
        let ts = deadline.map(|d| timespec(d.saturating_duration_since(Instant::now())));
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(fds[0].revents())),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn timespec(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: d.subsec_nanos().into(),
    }
}

/// `poll(fd, POLLIN, 0)`, then `read(fd, buf, 256)` if it is readable,
/// see [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html) and
/// [read(2)](https://man7.org/linux/man-pages/man2/read.2.html): reads and
/// discards pending wake bytes without blocking (our read end blocks, for
/// `sleep`): one read, so a peer that floods the pipe cannot keep us
/// here. Bytes left over only cause a spurious wake-up, after which the
/// ring is looked at again anyway. True if the peer is gone (EOF, or a
/// hang-up with nothing left to read).
fn pipe_drain(fd: BorrowedFd<'_>) -> bool {
    let Ok(ev) = poll_now(fd, PollFlags::IN) else {
        return false;
    };
    if ev.contains(PollFlags::IN) {
        let mut buf = [0u8; 256];
        return matches!(rustix::io::read(fd, &mut buf), Ok(0));
    }
    ev.intersects(PollFlags::HUP | PollFlags::ERR)
}

/// `poll(fd, events, 0)`, see
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html): whether
/// the peer is gone (every copy of its end closed; for a socket, `RDHUP`
/// also once it shut its side down for writing), without sleeping.
fn hung_up(fd: BorrowedFd<'_>, events: PollFlags) -> io::Result<bool> {
    Ok(poll_now(fd, events)?.intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR))
}

/// `poll(fd, events, 0)`, see
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html): the
/// events there are now, without sleeping (again after `EINTR`).
fn poll_now(fd: BorrowedFd<'_>, events: PollFlags) -> io::Result<PollFlags> {
    let mut fds = [PollFd::new(&fd, events)];
    loop {
        match rustix::event::poll(&mut fds, Some(&timespec(Duration::ZERO))) {
            Ok(_) => return Ok(fds[0].revents()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// `poll(fd, POLLIN | POLLRDHUP, timeout)` then a non-blocking `recv`, or
/// a blocking `recv` without a deadline, see
/// [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html) and
/// [recv(2)](https://man7.org/linux/man-pages/man2/recv.2.html): sleeps on
/// a wake socket until the peer wakes us or is gone, or `deadline` passes.
/// Pending wake bytes are drained. After `EINTR` the poll goes on with the
/// time left until the deadline, so signals cannot stretch a timeout.
fn socket_sleep(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<Woke> {
    if deadline.is_none() {
        // Without a timeout one blocking recv both sleeps and drains: a
        // wake byte returns it, the peer's hang-up (or its shutdown for
        // writing) returns 0 (or a reset).
        let mut buf = [MaybeUninit::<u8>::uninit(); 64];
        loop {
            match rustix::net::recv(fd, &mut buf[..], RecvFlags::empty()) {
                Ok(((&mut [], _), _)) => return Ok(Woke::HungUp),
                Ok(_) => return Ok(Woke::Woken),
                Err(Errno::INTR) => continue,
                Err(Errno::CONNRESET | Errno::PIPE) => return Ok(Woke::HungUp),
                // Someone made the socket non-blocking: poll instead.
                Err(Errno::AGAIN) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let Some(ev) = poll_until(fd, PollFlags::IN | PollFlags::RDHUP, deadline)? else {
        return Ok(Woke::TimedOut);
    };
    if ev.intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR | PollFlags::NVAL) {
        return Ok(Woke::HungUp);
    }
    Ok(if socket_drain(fd) {
        Woke::HungUp
    } else {
        Woke::Woken
    })
}

/// `recv(fd, buf, 256, MSG_DONTWAIT)`, see
/// [recv(2)](https://man7.org/linux/man-pages/man2/recv.2.html): reads and
/// discards pending wake bytes of a wake socket: one read, so a peer that
/// floods the socket cannot keep us here. True if it read EOF (the peer
/// is gone, or shut its socket down for writing).
fn socket_drain(fd: BorrowedFd<'_>) -> bool {
    let mut buf = [MaybeUninit::<u8>::uninit(); 256];
    matches!(
        rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT),
        Ok(((&mut [], _), _)) | Err(Errno::CONNRESET | Errno::PIPE)
    )
}

/// `nanosleep` for `d` (std's `thread::sleep`, which goes on after `EINTR`
/// with the time left), see
/// [nanosleep(2)](https://man7.org/linux/man-pages/man2/nanosleep.2.html):
/// a pause that no wake byte can cut short.
pub(crate) fn nap(d: Duration) {
    std::thread::sleep(d);
}

/// `sched_getcpu()`, see [sched_getcpu(3)](https://man7.org/linux/man-pages/man3/sched_getcpu.3.html):
/// the CPU this thread runs on now (`u32::MAX` if unknown). glibc's
/// `sched_getcpu` goes through the vDSO (no system call); rustix's own
/// vDSO lookup crashes under valgrind, which counts our instructions.
pub(crate) fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(u32::MAX)
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds (the clock `Instant`
/// reads), see
/// [clock_gettime(2)](https://man7.org/linux/man-pages/man2/clock_gettime.2.html).
/// Through libc, not rustix: rustix's vDSO lookup crashes under valgrind,
/// which the bench's instruction counts and our users' memchecks run.
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes only the timespec we pass, valid for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// Has `child` run in the child process after every later `fork` of
/// this process, in the thread that forked (see
/// [pthread_atfork(3)](https://man7.org/linux/man-pages/man3/pthread_atfork.3.html)),
/// once per process however often it is called: `registered` is the
/// caller's own flag for that. A registration that failed is not tried
/// again.
pub(crate) fn on_fork_child_once(registered: &AtomicBool, child: extern "C" fn()) {
    if registered.load(Ordering::Relaxed) || registered.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: registers a plain function pointer, valid for the whole
    // program; `child` runs in the child's only thread, before anything
    // else.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// `membarrier(MEMBARRIER_CMD_QUERY)` and
/// `membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED)` (once), see
/// [membarrier(2)](https://man7.org/linux/man-pages/man2/membarrier.2.html): whether this process
/// publishes with light fences (a compiler fence
/// instead of a hardware one, see the ring's `use_light_fences`): it must
/// be registered for `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, so that a peer's
/// `membarrier` runs a full barrier on every CPU running us. Registered
/// once per process (fork keeps it, exec drops it and we register again);
/// `SHMPIPE_FULL_FENCES=1` in the environment keeps hardware fences.
pub(crate) fn light_fences() -> bool {
    use rustix::thread::MembarrierCommand as Cmd;
    use std::sync::atomic::{AtomicU8, Ordering};
    // Not a OnceLock: a fork while another thread held its lock would leave
    // the child waiting forever. Racing first callers just both register.
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
    match STATE.load(Ordering::Relaxed) {
        YES => return true,
        NO => return false,
        _ => {}
    }
    let on = std::env::var_os("SHMPIPE_FULL_FENCES").is_none_or(|v| v == "0") && {
        let q = rustix::thread::membarrier_query();
        q.contains_command(Cmd::GlobalExpedited)
            && q.contains_command(Cmd::RegisterGlobalExpedited)
            && rustix::thread::membarrier(Cmd::RegisterGlobalExpedited).is_ok()
    };
    STATE.store(if on { YES } else { NO }, Ordering::Relaxed);
    on
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, see
/// [membarrier(2)](https://man7.org/linux/man-pages/man2/membarrier.2.html): runs a full memory barrier
/// on every CPU that runs a thread of a process registered for it, the
/// fence a light-fenced peer left out of its publish. False if it failed.
pub(crate) fn global_barrier() -> bool {
    rustix::thread::membarrier(rustix::thread::MembarrierCommand::GlobalExpedited).is_ok()
}

/// `sched_yield()`, see [sched_yield(2)](https://man7.org/linux/man-pages/man2/sched_yield.2.html):
/// gives up the CPU to another runnable thread, if any.
pub(crate) fn yield_now() {
    rustix::thread::sched_yield();
}

/// `sendmsg(sock, bytes + SCM_RIGHTS(fds), MSG_NOSIGNAL)`, see
/// [sendmsg(2)](https://man7.org/linux/man-pages/man2/sendmsg.2.html) and
/// [unix(7)](https://man7.org/linux/man-pages/man7/unix.7.html): sends `bytes` with `fds` attached on a
/// Unix socket, again after `EINTR` (nothing was sent then).
pub(crate) fn send_fds(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(error::invalid_input("too many descriptors"));
    }
    let iov = [io::IoSlice::new(bytes)];
    // EINTR means nothing was sent: send it all again.
    let sent = loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(Errno::INTR) => continue,
            other => break other?,
        }
    };
    if sent != bytes.len() {
        return Err(error::write_zero("short handshake send"));
    }
    Ok(())
}

/// Most descriptors one handshake message carries.
pub(crate) const MAX_FDS: usize = 8;

/// `recvmsg(sock, buf, MSG_CMSG_CLOEXEC)`, see
/// [recvmsg(2)](https://man7.org/linux/man-pages/man2/recvmsg.2.html) and
/// [unix(7)](https://man7.org/linux/man-pages/man7/unix.7.html): receives one message of up to
/// `buf.len()` bytes and the descriptors attached to it, close-on-exec.
/// Returns the byte count (0 on EOF).
///
/// With a `deadline`, waits no longer than until then (`TimedOut`): each
/// try, the first and any after `EINTR`, sets `SO_RCVTIMEO` to the time
/// left, so signals cannot stretch the wait.
pub(crate) fn recv_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(buf)];
    let timed_out = || error::timed_out("handshake timed out");
    let msg = loop {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            // (A zero SO_RCVTIMEO would mean no timeout at all.)
            set_socket_timeout(
                sock,
                Timeout::Recv,
                Some(left.max(Duration::from_micros(1))),
            )?;
        }
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => continue,
            // SO_RCVTIMEO expiring shows as EAGAIN.
            Err(Errno::AGAIN) if deadline.is_some() => return Err(timed_out()),
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(error::invalid_data("peer sent too many descriptors"));
    }
    Ok((msg.bytes, fds))
}

/// What `SO_PEERCRED` reports: the peer's pid (0 when the peer's process
/// is not visible in our pid namespace), uid and gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ucred {
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// `getsockopt(fd, SOL_SOCKET, SO_PEERCRED)`, see
/// [socket(7)](https://man7.org/linux/man-pages/man7/socket.7.html): the
/// credentials of the process at the other end of a Unix socket, as the
/// kernel recorded them at connect (or `socketpair`) time.
///
/// Not rustix's `sockopt::socket_peercred`: its `UCred` holds the pid as a
/// non-zero number, but the kernel reports pid 0 for a peer outside our
/// pid namespace (a client in a container), which would be undefined
/// behaviour there.
pub(crate) fn peer_credentials(sock: BorrowedFd<'_>) -> io::Result<Ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` its size, as
    // SO_PEERCRED expects; the kernel writes at most `len` bytes. Any bit
    // pattern is a valid ucred (three integers).
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(error::invalid_data("short SO_PEERCRED answer"));
    }
    Ok(Ucred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// `getpid()`, see [getpid(2)](https://man7.org/linux/man-pages/man2/getpid.2.html):
/// this process's id (in its own pid namespace).
pub(crate) fn pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// `getuid()`, see [getuid(2)](https://man7.org/linux/man-pages/man2/getuid.2.html):
/// this process's real user id.
pub(crate) fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `fcntl(fd, F_SETFD, 0)` in a pre-exec hook, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html): arranges for `fds` to survive `exec`
/// in the child `cmd` spawns (and only there): the descriptors are moved into the command, which closes them
/// when it is dropped, and a pre-exec hook clears their close-on-exec flag
/// in the child.
pub(crate) fn inherit_across_exec(cmd: &mut std::process::Command, fds: Vec<OwnedFd>) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let _keep = fds;
    let hook = move || {
        let _ = &_keep;
        for &fd in &raw {
            // SAFETY: `_keep` holds these descriptors open in the parent
            // until the Command is dropped, so in the forked child they
            // are open with the same numbers; fcntl is async-signal-safe.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
        }
        Ok(())
    };
    // SAFETY: the hook only calls fcntl (async-signal-safe), allocates
    // nothing and takes no lock, as code between fork and exec must.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Takes ownership of the descriptors `raws` that this process inherited
/// across `exec`, after `check` has seen them, and makes them close-on-exec
/// again (`fcntl(F_GETFD)`, `fcntl(F_SETFD, FD_CLOEXEC)`, see
/// [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html)).
///
/// Nothing is taken unless every number is open, distinct, and *not*
/// close-on-exec: the parent's `inherit_across_exec` cleared the flag on
/// exactly these, while every descriptor this process opened itself
/// (Rust's `std` and shmpipe open all theirs close-on-exec) has it, so a
/// number that now belongs to another file of ours, or was taken already
/// (taking sets the flag), is refused instead of getting a second owner.
/// `check` vets what the descriptors are before ownership is taken, so a
/// refusal closes nothing.
///
/// Only called by `handoff::from_env` for numbers that our parent's
/// `inherit_across_exec` put in the environment.
pub(crate) fn take_inherited<const N: usize>(
    raws: [i32; N],
    check: impl FnOnce([BorrowedFd<'_>; N]) -> io::Result<()>,
) -> io::Result<[OwnedFd; N]> {
    use rustix::io::FdFlags;
    use std::os::fd::FromRawFd;
    for (k, &raw) in raws.iter().enumerate() {
        if raw < 0 || raws[..k].contains(&raw) {
            return Err(error::invalid_data(format!(
                "inherited descriptor {raw} is negative or named twice"
            )));
        }
        // SAFETY: F_GETFD only inspects the descriptor table; a closed
        // number fails with EBADF.
        let flags = rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(raw) })
            .map_err(|_| error::invalid_data(format!("inherited descriptor {raw} is not open")))?;
        if flags.contains(FdFlags::CLOEXEC) {
            return Err(error::invalid_data(format!(
                "descriptor {raw} was not inherited (it is close-on-exec: \
                 opened by this process, or taken already)"
            )));
        }
    }
    // SAFETY: each number is open (checked above) and stays open while
    // `check` runs: nothing here closes it, and it is not close-on-exec,
    // so no one in this process opened it (see above) to close it.
    check(raws.map(|raw| unsafe { BorrowedFd::borrow_raw(raw) }))?;
    Ok(raws.map(|raw| {
        // SAFETY: open, distinct, inherited for us and owned by no one
        // else in this process (see above); from here on we own it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Cannot fail on an open descriptor; if it did, the descriptor
        // would merely leak into a later exec.
        let _ = rustix::io::fcntl_setfd(&fd, FdFlags::CLOEXEC);
        fd
    }))
}

/// A new epoll instance, close-on-exec (`epoll_create1`).
pub(crate) fn epoll() -> io::Result<OwnedFd> {
    Ok(rustix::event::epoll::create(
        rustix::event::epoll::CreateFlags::CLOEXEC,
    )?)
}

/// Adds `fd` to `epoll`, level-triggered, for input (hang-up and errors
/// are always reported), tagged with `data`.
pub(crate) fn epoll_add(epoll: BorrowedFd<'_>, fd: BorrowedFd<'_>, data: u64) -> io::Result<()> {
    use rustix::event::epoll::{EventData, EventFlags};
    Ok(rustix::event::epoll::add(
        epoll,
        fd,
        EventData::new_u64(data),
        EventFlags::IN,
    )?)
}

/// Removes `fd` from `epoll`; a descriptor that is not there is fine.
pub(crate) fn epoll_del(epoll: BorrowedFd<'_>, fd: BorrowedFd<'_>) {
    let _ = rustix::event::epoll::delete(epoll, fd);
}

/// One event from [`epoll_wait`]: the tag and whether it was a hang-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EpollEvent {
    pub(crate) data: u64,
    pub(crate) hung_up: bool,
}

/// Waits on `epoll` for up to `timeout` (`None`: no limit; zero: just
/// look) and appends what it reports to `out` (at most `max` events). An
/// interrupted wait returns with nothing.
pub(crate) fn epoll_wait(
    epoll: BorrowedFd<'_>,
    out: &mut Vec<EpollEvent>,
    max: usize,
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    use rustix::event::epoll::{Event, EventFlags};
    let ts = timeout.map(|d| rustix::time::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: d.subsec_nanos().into(),
    });
    let mut space = [MaybeUninit::<Event>::uninit(); 256];
    let max = max.clamp(1, space.len());
    let events = match rustix::event::epoll::wait(epoll, &mut space[..max], ts.as_ref()) {
        Ok((events, _)) => events,
        Err(Errno::INTR) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    out.extend(events.iter().map(|e| {
        let flags = e.flags;
        EpollEvent {
            data: e.data.u64(),
            hung_up: flags.intersects(EventFlags::HUP | EventFlags::ERR | EventFlags::RDHUP),
        }
    }));
    Ok(())
}

/// A non-blocking, close-on-exec eventfd at zero: a flag this process can
/// raise and lower, which polls readable while raised.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// Raises an eventfd flag (see [`eventfd`]).
pub(crate) fn raise(fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        match rustix::io::write(fd, &1u64.to_ne_bytes()) {
            Err(Errno::INTR) => continue,
            // Only at a count of 2^64 - 2: raised already.
            Ok(_) | Err(Errno::AGAIN) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Lowers an eventfd flag (see [`eventfd`]).
pub(crate) fn lower(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 8];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Err(Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// Raises the soft limit on open descriptors to the hard limit, for a
/// process that holds one or more descriptors per client (a server with
/// thousands of clients needs more than the usual 1024). Returns the new
/// soft limit.
///
/// # Examples
///
/// ```
/// let limit = shmpipe::raise_fd_limit()?;
/// assert!(limit >= 3);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn raise_fd_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(lim.current.unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    //! Ends made where `/proc` is missing (injected: `NO_PROC`).

    use std::io::{ErrorKind, Read, Write};
    use std::time::Duration;

    use super::{Bell, NO_PROC};

    #[test]
    fn without_proc_pipe_ends_wake_through_sockets() {
        NO_PROC.with(|n| n.set(true));
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
        NO_PROC.with(|n| n.set(true));
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
