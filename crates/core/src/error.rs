//! Every `io::Error` shmpipe makes, in one place, so that each kind means
//! one thing everywhere and every message reads alike: `shmpipe: ` and
//! then what went wrong, in lower case, without a full stop. Errors of the
//! operating system pass through unchanged, but for those whose text
//! would not say which file they concern (see [`no_listener`]).
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

/// Our caller asked for a ring the layout cannot have. Not the ring's
/// `BadCapacity`, which reports a peer's control block: the caller's own
/// argument is `InvalidInput`, and the text says what would do.
#[cold]
pub(crate) fn bad_capacity(capacity: usize) -> io::Error {
    invalid_input(format!(
        "bad ring capacity {capacity}: it must be a power of two of at least {} (and at most 2^40)",
        shmpipe_ring::layout::MIN_CAPACITY
    ))
}

/// A message end found a frame header that breaks the framing. The
/// usual cause is no attack but a mix-up: the other side writes bytes (a
/// stream end, `Writer`) into what this side reads as messages, and the
/// first bytes of its text read as an absurd length. The text asks.
#[cold]
pub(crate) fn message_protocol(e: ProtocolError) -> io::Error {
    match e {
        ProtocolError::BadMessage { .. } => invalid_data(format!(
            "{}: is the other side a stream end? both ends of a message pipe must use messages",
            e.to_string().trim_start_matches("shmpipe: ")
        )),
        e => protocol(e),
    }
}

/// `connect` found no listener at `path`: no such file (`NotFound`), or
/// a socket file nobody listens on (`ConnectionRefused`, left by a server
/// that was killed). The system's text names neither the path nor the
/// likely cause, so this does; the kind stays the system's, so that C's
/// and Python's errno are still `ENOENT` and `ECONNREFUSED`. Any other
/// error of `connect` is returned unchanged.
#[cold]
pub(crate) fn no_listener(path: &std::path::Path, e: io::Error) -> io::Error {
    let why = match e.kind() {
        ErrorKind::NotFound => "no such file",
        ErrorKind::ConnectionRefused => "no server listens there (connection refused)",
        _ => return e,
    };
    with(
        e.kind(),
        format!(
            "cannot connect to {}: {why}; is the server running?",
            path.display()
        ),
    )
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
