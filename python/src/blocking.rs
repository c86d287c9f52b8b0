//! Waiting like a good citizen: a call that may wait does so with the GIL
//! released, in slices of at most [`SLICE`], running Python's signal
//! handlers between slices so Ctrl-C raises `KeyboardInterrupt` within
//! about a slice. No thread is started.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use shmpipe::{Receiver, Sender};

use crate::errors;

/// The longest stretch spent waiting without looking at signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// An end whose blocking behaviour we set per call.
pub(crate) trait Blocking: Send {
    /// Whether a wait fails with `WouldBlock` at once.
    fn nonblocking(&mut self, on: bool);
    /// How long a wait lasts before `TimedOut`.
    fn slice(&mut self, d: Duration);
}

impl Blocking for Receiver {
    fn nonblocking(&mut self, on: bool) {
        self.set_nonblocking(on);
    }
    fn slice(&mut self, d: Duration) {
        // Never zero (the caller checks), so this cannot fail.
        let _ = self.set_read_timeout(Some(d));
    }
}

impl Blocking for Sender {
    fn nonblocking(&mut self, on: bool) {
        self.set_nonblocking(on);
    }
    fn slice(&mut self, d: Duration) {
        let _ = self.set_write_timeout(Some(d));
    }
}

/// Runs `attempt` on `end` until it does not need to wait. `deadline`
/// `None` waits for ever; once it passes, the result is `TimedOut`.
///
/// It never tries in non-blocking mode first: a reader that finds nothing
/// then *arms* its readiness descriptor (for `fileno()`), and a writer that
/// finds no room likewise, which makes the peer's next publish wake it
/// through the kernel. Callers look first with `peek_len`/`has_room`.
pub(crate) fn wait<E, T, F>(
    py: Python<'_>,
    end: &mut E,
    closed: &AtomicBool,
    deadline: Option<Instant>,
    mut attempt: F,
) -> PyResult<io::Result<T>>
where
    E: Blocking,
    T: Send,
    F: FnMut(&mut E) -> io::Result<T> + Send,
{
    // A deadline passed already looks once, without waiting.
    if deadline.is_some_and(|d| d <= Instant::now()) {
        end.nonblocking(true);
        match attempt(end) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            done => return Ok(done),
        }
    }
    end.nonblocking(false);
    loop {
        let slice = match deadline {
            None => SLICE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Err(io::ErrorKind::TimedOut.into()));
                }
                left.min(SLICE)
            }
        };
        end.slice(slice);
        match py.detach(|| attempt(end)) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
            done => return Ok(done),
        }
        py.check_signals()?;
        if closed.load(Ordering::Relaxed) {
            return Err(errors::closed());
        }
    }
}
