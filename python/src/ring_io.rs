//! One ring message at a time, with the waits around it: sending a piece
//! of a message (at once if it fits, else after waiting for room), and
//! looking at the length of the next one (at once if it is there, else
//! after waiting). `connection` builds Python's messages from these
//! (see `framing` for how a message is cut into pieces).

use std::io;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use pyo3::prelude::*;
use shmpipe::{Receiver, Sender};

use crate::blocking;
use crate::buffer::Src;
use crate::errors::to_py;
use crate::framing::{self, TOTAL};

/// The length of the next ring message, left in the ring: at once if it
/// is there (holding the GIL), else after waiting.
pub(crate) fn next_len(
    py: Python<'_>,
    rx: &mut Receiver,
    closed: &AtomicBool,
    deadline: Option<Instant>,
) -> PyResult<io::Result<usize>> {
    match rx.peek_len() {
        Ok(Some(n)) => Ok(Ok(n)),
        Ok(None) => blocking::wait(py, rx, closed, deadline, peek),
        Err(e) => Ok(Err(e)),
    }
}

/// Whether every copy of the sender is gone: a zero-timeout `poll` of the
/// read end of the end's wake pipe, or its wake socket (either hangs up
/// then), which arms nothing.
pub(crate) fn sender_gone(rx: &Receiver) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags};
    let wake_in = rx.descriptors()[2];
    let mut fds = [PollFd::new(&wake_in, PollFlags::empty())];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero))?;
    Ok(fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR))
}

/// The length of the next ring message, left in the ring.
fn peek(rx: &mut Receiver) -> io::Result<usize> {
    let msg = rx.recv_in_place()?;
    let n = msg.len();
    // Not consumed: the caller reads it again, without waiting.
    std::mem::forget(msg);
    Ok(n)
}

/// A failed send: of Python's making (a signal handler's exception,
/// closed by another thread) or of the pipe's.
pub(crate) enum SendError {
    Py(PyErr),
    Io(io::Error),
}

impl SendError {
    pub(crate) fn into_py(self) -> PyErr {
        match self {
            SendError::Py(e) => e,
            SendError::Io(e) => to_py(e),
        }
    }
}

/// Sends one ring message (see `put`): at once, holding the GIL, if it
/// fits now; else after waiting for room. Never arms the end.
pub(crate) fn send_piece(
    py: Python<'_>,
    tx: &mut Sender,
    closed: &AtomicBool,
    src: Src,
    off: usize,
    n: usize,
    total: Option<u64>,
) -> Result<(), SendError> {
    let len = n + if total.is_some() { TOTAL } else { 0 };
    let done = if tx.has_room(len).map_err(SendError::Io)? {
        put(tx, src, off, n, total)
    } else {
        // The ring is full: wait for a quarter of it to drain, not for
        // room for just this message, so a writer ahead of its reader
        // sleeps and is woken once per batch instead of once per message.
        let batch = framing::threshold(tx.capacity()).max(len);
        blocking::wait(py, tx, closed, None, move |tx| {
            let _ = tx.reserve(batch)?; // uncommitted: nothing is sent
            put(tx, src, off, n, total)
        })
        .map_err(SendError::Py)?
    };
    done.map_err(SendError::Io)
}

/// Sends `n` bytes of `src` from `off` as one ring message, followed by
/// `total` if this is the first fragment of a long message.
fn put(tx: &mut Sender, src: Src, off: usize, n: usize, total: Option<u64>) -> io::Result<()> {
    let extra = if total.is_some() { TOTAL } else { 0 };
    let mut grant = tx.reserve(n + extra)?;
    let (a, b) = grant.as_mut_slices();
    let in_a = n.min(a.len());
    src.copy_to(off, &mut a[..in_a]);
    src.copy_to(off + in_a, &mut b[..n - in_a]);
    if let Some(t) = total {
        for (i, byte) in t.to_le_bytes().into_iter().enumerate() {
            let p = n + i;
            if p < a.len() {
                a[p] = byte;
            } else {
                b[p - a.len()] = byte;
            }
        }
    }
    grant.send()
}
