//! `Listener` and `client`: connections by filesystem path, over the Rust
//! `Listener`/`connect`, which check the peer's credentials (same user by
//! default, `SO_PEERCRED`). Each connection is a message pipe each way.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;

use crate::blocking;
use crate::connection::Connection;
use crate::errors::{self, to_py};

/// Listens for shmpipe connections at a filesystem path (a Unix socket,
/// mode 0600). Peers of another user are refused.
#[pyclass(module = "shmpipe._shmpipe", frozen)]
#[derive(Debug)]
pub struct Listener {
    inner: Mutex<Option<shmpipe::Listener>>,
    path: PathBuf,
}

#[pymethods]
impl Listener {
    /// Binds to `path`, which must not exist.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Listener> {
        let mut inner = py
            .detach(|| shmpipe::Listener::bind(&path))
            .map_err(|e| errors::with_path(e, &path))?;
        // `accept` waits in our loop, where signals get through.
        inner.set_nonblocking(true);
        Ok(Listener {
            inner: Mutex::new(Some(inner)),
            path,
        })
    }

    /// Waits for the next allowed peer and returns `(connection, (pid,
    /// uid, gid))`, with the GIL released; Ctrl-C interrupts it.
    fn accept(&self, py: Python<'_>) -> PyResult<(Connection, (i32, u32, u32))> {
        let guard = self.inner.try_lock().map_err(|_| errors::busy())?;
        let listener = guard.as_ref().ok_or_else(errors::closed)?;
        let conn = loop {
            match listener.accept() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => break done.map_err(to_py)?,
            }
            // Wait for a client to connect or speak, a slice at a time,
            // with the GIL released; then let Ctrl-C through.
            let fd = listener.as_fd();
            py.detach(|| readable(fd, blocking::SLICE)).map_err(to_py)?;
            py.check_signals()?;
        };
        let peer = (conn.peer.pid, conn.peer.uid, conn.peer.gid);
        let (rx, tx) = conn.into_messages();
        Ok((Connection::accepted(rx, tx).map_err(to_py)?, peer))
    }

    /// Stops listening and removes the socket file.
    fn close(&self) {
        if let Ok(mut g) = self.inner.try_lock() {
            g.take();
        }
    }

    /// The path listened at.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.try_lock().map(|g| g.is_none()).unwrap_or(false)
    }
}

/// Connects to a `Listener` at `path`, with the GIL released, and returns
/// once the kernel has queued the connection; the handshake completes on
/// first use (see `pending`).
#[pyfunction]
pub(crate) fn client(py: Python<'_>, path: PathBuf) -> PyResult<Connection> {
    let connecting = py
        .detach(|| shmpipe::Options::new().connect_later(&path))
        .map_err(|e| errors::with_path(e, &path))?;
    Ok(Connection::connecting(connecting))
}

/// Waits up to `timeout` for `fd` to poll readable (retrying on EINTR).
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    use rustix::event::{PollFd, PollFlags};
    let ts = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
