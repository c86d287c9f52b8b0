//! epoll and eventfd: the readiness of many descriptors at once, for the
//! listener's accept loop, the waitset and the descriptor an end shows to
//! event loops; and a flag (an eventfd) that makes such a descriptor
//! readable on this process's own say.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::Errno;

use super::sleep::timespec;

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
    let ts = timeout.map(timespec);
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
