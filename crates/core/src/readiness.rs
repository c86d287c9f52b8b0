//! The descriptor an end shows to event loops (its `AsFd`), and the
//! contract behind it.
//!
//! A ring has no descriptor of its own: a side learns of progress by
//! looking at the peer's index, and sleeps on its wake pipe (or socket)
//! only after announcing so in its `parked` word (see `wait`). A side that
//! got `WouldBlock` *arms* the same way before returning: it announces,
//! fences and re-checks, so the peer's next publish sends a wake byte, and
//! the pipe polls readable; the peer's hang-up (EOF) makes it poll readable
//! too. A side that never got `WouldBlock` never arms, so its peer's
//! publishes cost no system call.
//!
//! The descriptor users poll is not that pipe but an epoll instance,
//! made on first use, that holds the pipe's read end (or the socket) and
//! a private eventfd:
//!
//! ```text
//!   readiness fd (epoll) --+-- wake pipe or socket  (peer: wake byte, hang-up)
//!                          +-- eventfd               (this end: "ready now")
//! ```
//!
//! The eventfd lets an end that is ready already (data cached, found by
//! [`arm`](crate::Reader::arm)) make its own descriptor poll readable, for
//! level-triggered callers that poll without trying the operation first.
//! Both are lowered again by the end itself (the pipe drained, the flag
//! cleared) once the readiness is consumed: on the next operation that has
//! to look past its cached view, or the next `arm` that finds nothing.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys;

/// The epoll instance and the flag behind an end's descriptor.
#[derive(Debug)]
pub(crate) struct Readiness {
    epoll: OwnedFd,
    flag: OwnedFd,
}

impl Readiness {
    /// An epoll instance holding `wake_in` and a new flag (three descriptors
    /// the end keeps until it is dropped).
    pub(crate) fn new(wake_in: BorrowedFd<'_>) -> io::Result<Readiness> {
        let epoll = sys::epoll()?;
        let flag = sys::eventfd()?;
        sys::epoll_add(epoll.as_fd(), wake_in, 0)?;
        sys::epoll_add(epoll.as_fd(), flag.as_fd(), 1)?;
        Ok(Readiness { epoll, flag })
    }

    /// The descriptor to poll.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Makes the descriptor poll readable.
    pub(crate) fn raise(&self) -> io::Result<()> {
        sys::raise(self.flag.as_fd())
    }

    /// Undoes [`raise`](Self::raise).
    pub(crate) fn lower(&self) {
        sys::lower(self.flag.as_fd())
    }
}
