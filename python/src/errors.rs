//! `io::Error` to the exceptions `multiprocessing` (and CPython's `os`)
//! raise: an error with an errno becomes `OSError(errno, strerror[,
//! filename])`, which CPython turns into the subclass for that errno
//! (`BrokenPipeError`, `FileNotFoundError`...), so `e.errno == errno.EPIPE`
//! holds as it does for a kernel pipe.

use std::io;
use std::path::Path;

use pyo3::exceptions::{PyEOFError, PyOSError, PyRuntimeError};
use pyo3::PyErr;
use rustix::io::Errno;

/// An error of the ring or the kernel as a Python exception: end of file
/// is `EOFError`, a misbehaving peer a plain `OSError` saying so, the
/// rest `OSError(errno, strerror)` (see [`with_path`]).
pub(crate) fn to_py(e: io::Error) -> PyErr {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => PyEOFError::new_err(()),
        // A misbehaving peer (or a pipe of another kind): say so plainly.
        io::ErrorKind::InvalidData => {
            PyOSError::new_err(format!("shmpipe: bad data from the peer: {e}"))
        }
        _ => os_error(&e, None),
    }
}

/// An error of a call that names a file (bind, connect): the exception
/// carries the path as `filename`, with the C library's text for the
/// errno, as `open()` does: `[Errno 2] No such file or directory: 'p'`.
pub(crate) fn with_path(e: io::Error, path: &Path) -> PyErr {
    match errno_of(&e) {
        Some(_) => os_error(&e, Some(path)),
        None => to_py(e),
    }
}

/// `OSError(errno, strerror[, filename])`; CPython picks the subclass.
fn os_error(e: &io::Error, path: Option<&Path>) -> PyErr {
    let Some(errno) = errno_of(e) else {
        return PyOSError::new_err(e.to_string());
    };
    // The C library's text, as CPython shows it, unless the error carries
    // a message of shmpipe's own that says more (and no file is named).
    let text = match e.get_ref() {
        Some(own) if path.is_none() && e.raw_os_error().is_none() => own.to_string(),
        _ => strerror(errno),
    };
    match path {
        // A str, as CPython's own calls give (not a pathlib.Path).
        Some(p) => PyOSError::new_err((errno, text, p.as_os_str().to_os_string())),
        None => PyOSError::new_err((errno, text)),
    }
}

/// The errno of an error: the kernel's, or the one its kind stands for
/// (shmpipe reports a peer's death as `BrokenPipe` without a system call).
fn errno_of(e: &io::Error) -> Option<i32> {
    if let Some(n) = e.raw_os_error() {
        return Some(n);
    }
    use io::ErrorKind as K;
    let errno = match e.kind() {
        K::NotFound => Errno::NOENT,
        K::PermissionDenied => Errno::ACCESS,
        K::ConnectionRefused => Errno::CONNREFUSED,
        K::ConnectionReset => Errno::CONNRESET,
        K::ConnectionAborted => Errno::CONNABORTED,
        K::NotConnected => Errno::NOTCONN,
        K::AddrInUse => Errno::ADDRINUSE,
        K::AddrNotAvailable => Errno::ADDRNOTAVAIL,
        K::BrokenPipe => Errno::PIPE,
        K::AlreadyExists => Errno::EXIST,
        K::WouldBlock => Errno::AGAIN,
        K::InvalidInput => Errno::INVAL,
        K::TimedOut => Errno::TIMEDOUT,
        K::Interrupted => Errno::INTR,
        K::Unsupported => Errno::OPNOTSUPP,
        K::OutOfMemory => Errno::NOMEM,
        _ => return None,
    };
    Some(errno.raw_os_error())
}

/// The C library's text for `errno` (`strerror`), as `os.strerror` gives
/// it: Rust's text for an OS error is the same with " (os error N)" added.
fn strerror(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// `multiprocessing`'s message for a closed connection.
pub(crate) fn closed() -> PyErr {
    PyOSError::new_err("handle is closed")
}

/// A direction of the connection is in use by another thread.
pub(crate) fn busy() -> PyErr {
    PyRuntimeError::new_err("shmpipe: another thread is sending (or receiving) on this connection")
}

/// A message was cut short (interrupted, or a bad peer): the stream of
/// messages cannot be resynchronised.
pub(crate) fn broken() -> PyErr {
    PyOSError::new_err("shmpipe: connection broken by a message cut short")
}
