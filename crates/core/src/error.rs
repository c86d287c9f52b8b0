//! Every `io::Error` shmpipe makes, in one place, so that each kind means
//! one thing everywhere and every message reads alike: `shmpipe: ` and
//! then what went wrong, in lower case, without a full stop. Errors of the
//! operating system pass through unchanged.
//!
//! The kinds, as a Rust user expects them at the edges (see STYLE.md):
//! `InvalidData` for a peer (or a descriptor) that breaks the protocol,
//! `InvalidInput` for our own caller's arguments, `WouldBlock`,
//! `TimedOut`, `BrokenPipe` and `UnexpectedEof` for the states of a pipe.

use std::fmt::Display;
use std::io::{self, ErrorKind};

use shmpipe_ring::ProtocolError;

fn with(kind: ErrorKind, msg: impl Display) -> io::Error {
    io::Error::new(kind, format!("shmpipe: {msg}"))
}

/// A peer (or whatever it sent us) broke the protocol.
#[cold]
pub(crate) fn invalid_data(msg: impl Display) -> io::Error {
    with(ErrorKind::InvalidData, msg)
}

/// The ring found the peer breaking the protocol (its message already
/// says `shmpipe: `).
#[cold]
pub(crate) fn protocol(e: ProtocolError) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, e)
}

/// Our caller asked for something this pipe cannot do.
#[cold]
pub(crate) fn invalid_input(msg: impl Display) -> io::Error {
    with(ErrorKind::InvalidInput, msg)
}

/// A peer we may not serve, or that may not serve us.
#[cold]
pub(crate) fn permission_denied(msg: impl Display) -> io::Error {
    with(ErrorKind::PermissionDenied, msg)
}

/// No end was passed under that name.
#[cold]
pub(crate) fn not_found(msg: impl Display) -> io::Error {
    with(ErrorKind::NotFound, msg)
}

/// Something that works, but not here.
#[cold]
pub(crate) fn unsupported(msg: impl Display) -> io::Error {
    with(ErrorKind::Unsupported, msg)
}

/// The peer left in the middle of the handshake.
#[cold]
pub(crate) fn connection_aborted(msg: impl Display) -> io::Error {
    with(ErrorKind::ConnectionAborted, msg)
}

/// A name (a token, a path) that is in use already.
#[cold]
pub(crate) fn already_exists(msg: impl Display) -> io::Error {
    with(ErrorKind::AlreadyExists, msg)
}

/// A path a listener cannot take: a server listens there, or may.
#[cold]
pub(crate) fn addr_in_use(msg: impl Display) -> io::Error {
    with(ErrorKind::AddrInUse, msg)
}

/// An error of the system, with what we were doing when it came (for a
/// call whose own text would not say which file it concerns); its kind
/// stays the system's.
#[cold]
pub(crate) fn annotated(e: io::Error, doing: impl Display) -> io::Error {
    with(e.kind(), format!("{doing}: {e}"))
}

/// A limit of ours that is no one's fault.
#[cold]
pub(crate) fn other(msg: impl Display) -> io::Error {
    with(ErrorKind::Other, msg)
}

/// A send that the kernel cut short.
#[cold]
pub(crate) fn write_zero(msg: impl Display) -> io::Error {
    with(ErrorKind::WriteZero, msg)
}

/// A handshake that took too long.
#[cold]
pub(crate) fn timed_out(msg: impl Display) -> io::Error {
    with(ErrorKind::TimedOut, msg)
}

/// A wait that reached the end's timeout (as std's sockets: no message).
#[cold]
pub(crate) fn wait_timed_out() -> io::Error {
    ErrorKind::TimedOut.into()
}

/// A non-blocking end that would have to wait.
#[cold]
pub(crate) fn would_block() -> io::Error {
    ErrorKind::WouldBlock.into()
}

/// Every copy of the reading end is gone.
#[cold]
pub(crate) fn broken_pipe() -> io::Error {
    ErrorKind::BrokenPipe.into()
}

/// Every copy of the writing end is gone and the pipe is drained.
#[cold]
pub(crate) fn eof() -> io::Error {
    ErrorKind::UnexpectedEof.into()
}

/// The error of the system call just made (`errno`).
#[cold]
pub(crate) fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}
