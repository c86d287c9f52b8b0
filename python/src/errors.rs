//! `io::Error` to the exceptions `multiprocessing` raises.

use std::io;

use pyo3::exceptions::{PyEOFError, PyOSError, PyRuntimeError};
use pyo3::PyErr;

/// An error of the ring or the kernel as a Python exception: end of file
/// is `EOFError`, the rest what PyO3 maps the kind to (`BrokenPipeError`,
/// `TimeoutError`, `OSError` with the errno...).
pub(crate) fn to_py(e: io::Error) -> PyErr {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => PyEOFError::new_err(()),
        // A misbehaving peer (or a pipe of another kind): say so plainly.
        io::ErrorKind::InvalidData => {
            PyOSError::new_err(format!("shmpipe: bad data from the peer: {e}"))
        }
        _ => e.into(),
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
