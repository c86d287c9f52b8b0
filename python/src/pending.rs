//! A connection made by `Client()` before the listener has accepted it.
//!
//! `multiprocessing.connection.Client` returns once the kernel has queued
//! the connection; so does ours (`shmpipe::Options::connect_later`): the
//! client's half of the handshake waits in the socket's buffer. The rest
//! completes on the connection's first use that needs the rings (send,
//! receive, poll, `fileno`), with the GIL released and in slices that let
//! Ctrl-C through, for as long as the listener lives. Why lazily and not
//! in a thread: a connection that is never used costs nothing, and no
//! thread outlives a fork.
//!
//! A listener that closes or dies without accepting resets the queued
//! connection: the first use then sees what a kernel connection would
//! show, end of file (`recv`, `poll`) or a broken pipe (`send`). A refusal
//! (another user, a ring over a limit) raises its error on every use.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use shmpipe::{Connecting, Receiver, Sender};

use crate::blocking::SLICE;
use crate::errors;

/// The handshake of a client's connection, while it is not complete.
#[derive(Debug)]
pub(crate) enum Handshake {
    /// Our half sent; waiting for the listener's.
    Waiting(Connecting),
    /// It failed; the socket stays open (for `fileno`) until `close`.
    Failed(Connecting, Failure),
}

/// A failed handshake's error, kept to raise again on each use.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    raw: Option<i32>,
    kind: io::ErrorKind,
    text: String,
}

impl Failure {
    fn of(e: &io::Error) -> Failure {
        Failure {
            raw: e.raw_os_error(),
            kind: e.kind(),
            text: e.to_string(),
        }
    }

    /// The listener went away (closed, or died) before accepting.
    fn gone(&self) -> bool {
        use io::ErrorKind as K;
        matches!(
            self.kind,
            K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::NotConnected
                | K::UnexpectedEof
        )
    }

    fn error(&self) -> io::Error {
        match self.raw {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::new(self.kind, self.text.clone()),
        }
    }
}

/// Where a connection's handshake stands after [`settle`].
pub(crate) enum Settled {
    /// Complete: the ends are in place.
    Yes,
    /// The deadline came first.
    NotYet,
    /// The listener went away before accepting; `fd` is the socket,
    /// readable (hung up) for `multiprocessing.connection.wait`.
    Gone { fd: i32 },
    /// Refused or broken: raise this.
    Failed(PyErr),
}

/// Completes the handshake in `slot` if there is one pending, waiting
/// until `deadline` (`None`: for as long as the listener lives), and hands
/// the ends to `install`. `slot` empty means complete.
pub(crate) fn settle(
    py: Python<'_>,
    slot: &Mutex<Option<Handshake>>,
    closed: &AtomicBool,
    deadline: Option<Instant>,
    install: impl FnOnce(Receiver, Sender) -> PyResult<()>,
) -> PyResult<Settled> {
    // Another thread may hold the lock while it waits (GIL released):
    // wait for it without the GIL, in short sleeps (a guard cannot cross
    // `detach`).
    let mut guard = loop {
        match slot.try_lock() {
            Ok(g) => break g,
            Err(TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                py.detach(|| std::thread::sleep(Duration::from_millis(1)));
                py.check_signals()?;
            }
        }
    };
    loop {
        let connecting = match guard.as_mut() {
            None => return Ok(Settled::Yes),
            Some(Handshake::Failed(c, f)) if f.gone() => {
                return Ok(Settled::Gone {
                    fd: c.as_fd().as_raw_fd(),
                })
            }
            Some(Handshake::Failed(_, f)) => {
                return Ok(Settled::Failed(errors::to_py(f.error())));
            }
            Some(Handshake::Waiting(c)) => c,
        };
        let now = Instant::now();
        let until = match deadline {
            Some(d) if d <= now => return Ok(Settled::NotYet),
            Some(d) => d.min(now + SLICE),
            None => now + SLICE,
        };
        match py.detach(|| connecting.finish(until)) {
            Ok(Some(conn)) => {
                *guard = None;
                let (rx, tx) = conn.into_messages();
                install(rx, tx)?;
                return Ok(Settled::Yes);
            }
            Ok(None) => {
                py.check_signals()?;
                if closed.load(Ordering::Relaxed) {
                    guard.take();
                    return Err(errors::closed());
                }
            }
            Err(e) => {
                if let Some(Handshake::Waiting(c)) = guard.take() {
                    *guard = Some(Handshake::Failed(c, Failure::of(&e)));
                }
            }
        }
    }
}
