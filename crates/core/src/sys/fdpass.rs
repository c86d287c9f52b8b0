//! Descriptors passed between processes over a Unix socket
//! (`SCM_RIGHTS`), and what tells who and what came: a descriptor's
//! identity (device and inode), the peer's credentials, our own pid and
//! uid.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::error;

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
const MAX_FDS: usize = 8;

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

/// `fstat(fd)`, see [fstat(2)](https://man7.org/linux/man-pages/man2/fstat.2.html): the device and
/// inode behind a descriptor, to tell one object from another.
pub(crate) fn inode(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
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
