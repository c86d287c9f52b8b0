//! Sleeping on a bell's pipe or socket until the peer wakes us or hangs
//! up, or a deadline passes, with the polls and drains that go with it;
//! and [`nap`], a pause that nothing cuts short. After `EINTR` every wait
//! here goes on with the time left, so signals cannot stretch a timeout.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::RecvFlags;

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
pub(super) fn pipe_sleep(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<Woke> {
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

/// `d` as a `timespec`, its seconds capped at `i64::MAX`.
pub(super) fn timespec(d: Duration) -> rustix::time::Timespec {
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
pub(super) fn pipe_drain(fd: BorrowedFd<'_>) -> bool {
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
pub(super) fn hung_up(fd: BorrowedFd<'_>, events: PollFlags) -> io::Result<bool> {
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
pub(super) fn socket_sleep(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<Woke> {
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
pub(super) fn socket_drain(fd: BorrowedFd<'_>) -> bool {
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
