//! The `Connection` class: one end of a shmpipe connection with the
//! methods and semantics of `multiprocessing.connection.Connection`. A
//! duplex connection holds a receiving and a sending end of two message
//! pipes; a one-way connection one of them.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple, PyType};
use shmpipe::{Options, Receiver, Sender};

use crate::buffer::{self, Dst, Held, Src};
use crate::errors::{self, to_py};
use crate::fds;
use crate::framing::{self, Head, TOTAL};
use crate::pending::{self, Handshake, Settled};
use crate::ring_io::{next_len, send_piece, sender_gone};

/// Ring capacity of a pipe made without one: shmpipe's default.
pub(crate) const DEFAULT_CAPACITY: usize = shmpipe::DEFAULT_CAPACITY;

/// An end's four descriptor numbers, if there is that end.
type EndFds = Option<[i32; 4]>;

/// A receiving end and whether a message was cut short on it. The end is
/// boxed: an end is aligned to 128 bytes (its hot state keeps a cache line
/// of its own), and a pyclass lives in memory Python allocated, aligned
/// to 16 only; the Rust allocator gives the box its alignment.
#[derive(Debug)]
struct RecvHalf {
    end: Box<Receiver>,
    broken: bool,
}

/// A sending end and whether a message was cut short on it (boxed, as
/// in [`RecvHalf`]).
#[derive(Debug)]
struct SendHalf {
    end: Box<Sender>,
    broken: bool,
}

/// One end of a pipe made by `shmpipe.Pipe()` (or `Listener.accept()` /
/// `Client()`), with the methods of `multiprocessing.connection.Connection`.
///
/// Messages are `bytes` of any length, sent through shared memory: a
/// message costs no system call while the peer is busy. Each direction
/// may be used by one thread at a time (another thread gets
/// `RuntimeError`); sending and receiving may run in two threads.
#[pyclass(module = "shmpipe", frozen)]
#[derive(Debug)]
pub struct Connection {
    rx: Mutex<Option<RecvHalf>>,
    tx: Mutex<Option<SendHalf>>,
    readable: AtomicBool,
    writable: bool,
    closed: AtomicBool,
    /// A client's handshake still to complete (see `pending`); `settled`
    /// says, without the lock, that there is none.
    handshake: Mutex<Option<Handshake>>,
    settled: AtomicBool,
    /// Made by `Listener`/`Client`: its memory is sealed to this process,
    /// so it cannot be pickled for another.
    sealed: bool,
}

/// What `recv_message` did.
enum Received<'py> {
    /// A new `bytes` holding the message.
    Bytes(Bound<'py, PyBytes>),
    /// The message went into the caller's buffer; its length.
    Into(usize),
    /// The caller's buffer was too short: the whole message.
    TooShort(Bound<'py, PyBytes>),
    /// Longer than `maxlength`: left in the pipe.
    TooLong,
}

impl Connection {
    /// A connection over the given ends.
    pub(crate) fn new(rx: Option<Receiver>, tx: Option<Sender>) -> io::Result<Connection> {
        for cap in rx
            .iter()
            .map(|r| r.capacity())
            .chain(tx.iter().map(|t| t.capacity()))
        {
            framing::check_capacity(cap)?;
        }
        if rx.is_none() && tx.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no end"));
        }
        Ok(Connection {
            readable: AtomicBool::new(rx.is_some()),
            writable: tx.is_some(),
            rx: Mutex::new(rx.map(|end| RecvHalf {
                end: Box::new(end),
                broken: false,
            })),
            tx: Mutex::new(tx.map(|end| SendHalf {
                end: Box::new(end),
                broken: false,
            })),
            closed: AtomicBool::new(false),
            handshake: Mutex::new(None),
            settled: AtomicBool::new(true),
            sealed: false,
        })
    }

    /// A connection made by `Listener.accept()`: sealed to this process.
    pub(crate) fn accepted(rx: Receiver, tx: Sender) -> io::Result<Connection> {
        let mut c = Connection::new(Some(rx), Some(tx))?;
        c.sealed = true;
        Ok(c)
    }

    /// A connection made by `Client()` whose handshake completes on first
    /// use (see `pending`): sealed to this process too.
    pub(crate) fn connecting(c: shmpipe::Connecting) -> Connection {
        Connection {
            readable: AtomicBool::new(true),
            writable: true,
            rx: Mutex::new(None),
            tx: Mutex::new(None),
            closed: AtomicBool::new(false),
            handshake: Mutex::new(Some(Handshake::Waiting(c))),
            settled: AtomicBool::new(false),
            sealed: true,
        }
    }

    /// Completes a client's handshake if it is pending, waiting until
    /// `deadline` (`None`: as long as it takes).
    fn settle(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<Settled> {
        if self.settled.load(Ordering::Acquire) {
            return Ok(Settled::Yes);
        }
        let done = pending::settle(py, &self.handshake, &self.closed, deadline, |rx, tx| {
            framing::check_capacity(rx.capacity()).map_err(to_py)?;
            framing::check_capacity(tx.capacity()).map_err(to_py)?;
            *self.rx.lock().unwrap_or_else(|e| e.into_inner()) = Some(RecvHalf {
                end: Box::new(rx),
                broken: false,
            });
            *self.tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(SendHalf {
                end: Box::new(tx),
                broken: false,
            });
            Ok(())
        })?;
        if matches!(done, Settled::Yes) {
            self.settled.store(true, Ordering::Release);
        }
        Ok(done)
    }

    /// Settles before sending: a listener gone before accepting is a
    /// broken pipe, as for a kernel connection.
    fn settle_to_send(&self, py: Python<'_>) -> PyResult<()> {
        match self.settle(py, None)? {
            Settled::Yes | Settled::NotYet => Ok(()),
            Settled::Gone { .. } => Err(to_py(io::ErrorKind::BrokenPipe.into())),
            Settled::Failed(e) => Err(e),
        }
    }

    /// Settles before receiving: a listener gone before accepting is end
    /// of file.
    fn settle_to_recv(&self, py: Python<'_>) -> PyResult<()> {
        match self.settle(py, None)? {
            Settled::Yes | Settled::NotYet => Ok(()),
            Settled::Gone { .. } => Err(to_py(io::ErrorKind::UnexpectedEof.into())),
            Settled::Failed(e) => Err(e),
        }
    }

    fn check_closed(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(errors::closed());
        }
        Ok(())
    }

    fn check_readable(&self) -> PyResult<()> {
        self.check_closed()?;
        if !self.readable.load(Ordering::Relaxed) {
            return Err(PyOSError::new_err("connection is write-only"));
        }
        Ok(())
    }

    fn check_writable(&self) -> PyResult<()> {
        self.check_closed()?;
        if !self.writable {
            return Err(PyOSError::new_err("connection is read-only"));
        }
        Ok(())
    }

    /// `multiprocessing`'s answer to a message over `maxlength`.
    fn bad_message_length(&self) -> PyErr {
        if self.writable {
            self.readable.store(false, Ordering::Relaxed);
        } else {
            self.close();
        }
        PyOSError::new_err("bad message length")
    }

    /// Sends `src` as one message.
    fn send_src(&self, py: Python<'_>, src: Src) -> PyResult<()> {
        self.settle_to_send(py)?;
        let mut guard = use_end(&self.tx, &self.closed)?;
        let half = guard.as_mut().ok_or_else(errors::closed)?;
        if half.broken {
            return Err(errors::broken());
        }
        let closed = &self.closed;
        let cap = half.end.capacity();
        let len = src.len();
        let t = framing::threshold(cap);
        if len < t {
            return send_piece(py, &mut half.end, closed, src, 0, len, None)
                .map_err(|e| e.into_py());
        }
        let first = t - TOTAL;
        send_piece(py, &mut half.end, closed, src, 0, first, Some(len as u64))
            .map_err(|e| e.into_py())?;
        let mut off = first;
        while off < len {
            let n = framing::fragment(len - off, cap);
            if let Err(e) = send_piece(py, &mut half.end, closed, src, off, n, None) {
                half.broken = true;
                return Err(e.into_py());
            }
            off += n;
        }
        Ok(())
    }

    /// Receives one message into `into` (a buffer and an offset) if it
    /// fits, else into a new `bytes`.
    fn recv_message<'py>(
        &self,
        py: Python<'py>,
        maxlength: Option<usize>,
        into: Option<(Dst, usize)>,
    ) -> PyResult<Received<'py>> {
        self.settle_to_recv(py)?;
        let mut guard = use_end(&self.rx, &self.closed)?;
        let half = guard.as_mut().ok_or_else(errors::closed)?;
        if half.broken {
            return Err(errors::broken());
        }
        let closed = &self.closed;
        // Peeking at a length leaves the end's turn open (the message is
        // read next, in that turn); it is left before Python runs again,
        // whatever the outcome, or other holders would wait for its lock.
        let got = (|| {
            let len = next_len(py, &mut half.end, closed, None)?.map_err(to_py)?;
            let cap = half.end.capacity();
            let head = framing::classify(len, cap).map_err(|e| {
                half.broken = true;
                to_py(e)
            })?;
            let total = match head {
                Head::Short(n) => n,
                Head::Long => {
                    let msg = half.end.recv_in_place().map_err(to_py)?;
                    let bytes = msg.bytes();
                    let mut raw = [0u8; TOTAL];
                    for (i, b) in raw.iter_mut().enumerate() {
                        *b = bytes.get(len - TOTAL + i).unwrap_or(0);
                    }
                    std::mem::forget(msg);
                    framing::check_total(u64::from_le_bytes(raw), cap).map_err(|e| {
                        half.broken = true;
                        to_py(e)
                    })?
                }
            };
            if maxlength.is_some_and(|m| total > m) {
                return Ok(Received::TooLong);
            }
            let (mut dst, offset, new) = match into {
                Some((dst, off)) if off + total <= dst.len() => (dst, off, None),
                _ => {
                    let (obj, dst) = buffer::new_bytes(py, total)?;
                    (dst, 0, Some(obj))
                }
            };
            let first = match head {
                Head::Short(n) => n,
                Head::Long => len - TOTAL,
            };
            {
                let msg = half.end.recv_in_place().map_err(to_py)?;
                dst.fill(offset, msg.bytes(), first);
            }
            let mut got = first;
            while got < total {
                let want = framing::fragment(total - got, cap);
                let next = next_len(py, &mut half.end, closed, None);
                let n = match next {
                    Ok(Ok(n)) if n == want => n,
                    Ok(Ok(n)) => {
                        half.broken = true;
                        return Err(to_py(framing::bad(format!(
                            "fragment of {n} bytes where {want} were due"
                        ))));
                    }
                    Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        half.broken = true;
                        return Err(PyOSError::new_err("got end of file during message"));
                    }
                    Ok(Err(e)) => {
                        half.broken = true;
                        return Err(to_py(e));
                    }
                    Err(e) => {
                        half.broken = true;
                        return Err(e);
                    }
                };
                let msg = half.end.recv_in_place().map_err(to_py)?;
                dst.fill(offset + got, msg.bytes(), n);
                drop(msg);
                got += n;
            }
            Ok(match (new, into) {
                (Some(obj), None) => Received::Bytes(obj),
                (Some(obj), Some(_)) => Received::TooShort(obj),
                (None, _) => Received::Into(total),
            })
        })();
        half.end.leave_turn();
        got
    }
}

/// One direction, locked for an operation. If the connection was closed
/// by another thread meanwhile, the end is dropped when the operation
/// ends (`close` could not take it while we held it).
struct InUse<'a, T> {
    guard: MutexGuard<'a, Option<T>>,
    closed: &'a AtomicBool,
}

impl<T> std::ops::Deref for InUse<'_, T> {
    type Target = Option<T>;
    fn deref(&self) -> &Option<T> {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for InUse<'_, T> {
    fn deref_mut(&mut self) -> &mut Option<T> {
        &mut self.guard
    }
}

impl<T> Drop for InUse<'_, T> {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Relaxed) {
            self.guard.take();
        }
    }
}

/// Locks one direction for an operation (see `InUse`).
fn use_end<'a, T>(m: &'a Mutex<Option<T>>, closed: &'a AtomicBool) -> PyResult<InUse<'a, T>> {
    Ok(InUse {
        guard: lock(m)?,
        closed,
    })
}

/// Locks one direction, or says another thread uses it.
fn lock<T>(m: &Mutex<Option<T>>) -> PyResult<MutexGuard<'_, Option<T>>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(errors::busy()),
    }
}

/// `multiprocessing.reduction.ForkingPickler`, for `send`/`recv`.
fn pickler(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static PICKLER: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    PICKLER.import(py, "multiprocessing.reduction", "ForkingPickler")
}

/// `multiprocessing.BufferTooShort`.
fn buffer_too_short(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static EXC: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    EXC.import(py, "multiprocessing", "BufferTooShort")
}

fn non_negative(v: i64, what: &'static str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(what))
}

#[pymethods]
impl Connection {
    /// True if the connection is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// True if the connection is readable.
    #[getter]
    fn readable(&self) -> bool {
        self.readable.load(Ordering::Relaxed)
    }

    /// True if the connection is writable.
    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }

    /// A descriptor that polls readable while a message (or end of file)
    /// is there to be received, as `multiprocessing.connection.wait` needs:
    /// the receiving end's readiness descriptor, armed (level-triggered) by
    /// this call. On a write-only connection, the sending end's, readable
    /// while there is room.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        self.check_closed()?;
        match self.settle(py, None)? {
            Settled::Yes | Settled::NotYet => {}
            Settled::Gone { fd } => return Ok(fd),
            Settled::Failed(e) => return Err(e),
        }
        if let Some(h) = lock(&self.rx)?.as_mut() {
            h.end.arm().map_err(to_py)?;
            return Ok(h.end.as_raw_fd());
        }
        if let Some(h) = lock(&self.tx)?.as_mut() {
            h.end.arm().map_err(to_py)?;
            return Ok(h.end.as_raw_fd());
        }
        Err(errors::closed())
    }

    /// Closes the connection. The peer sees end of file (or a broken pipe)
    /// once every copy of this end, in every process, is closed.
    fn close(&self) {
        if self.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        // A thread blocked in this connection drops its end when it
        // notices (within a wait slice); otherwise drop them now.
        if let Ok(mut g) = self.rx.try_lock() {
            g.take();
        }
        if let Ok(mut g) = self.tx.try_lock() {
            g.take();
        }
        if let Ok(mut g) = self.handshake.try_lock() {
            g.take();
        }
    }

    /// Sends `size` bytes of `buf` (any bytes-like object, read in place)
    /// from `offset`, as one message.
    #[pyo3(signature = (buf, offset=0, size=None))]
    fn send_bytes(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        offset: i64,
        size: Option<i64>,
    ) -> PyResult<()> {
        self.check_writable()?;
        let held = Held::new(buf)?;
        let src = held.src();
        let n = src.len();
        let offset = non_negative(offset, "offset is negative")?;
        if n < offset {
            return Err(PyValueError::new_err("buffer length < offset"));
        }
        let size = match size {
            None => n - offset,
            Some(s) => {
                let s = non_negative(s, "size is negative")?;
                if offset.checked_add(s).is_none_or(|end| end > n) {
                    return Err(PyValueError::new_err("buffer length < offset + size"));
                }
                s
            }
        };
        self.send_src(py, src.sub(offset, size))
    }

    /// Sends an object, pickled as `multiprocessing` does.
    fn send(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_writable()?;
        let data = pickler(py)?.call_method1("dumps", (obj,))?;
        let held = Held::new(&data)?;
        self.send_src(py, held.src())
    }

    /// Receives one message as `bytes`. `OSError` if it is longer than
    /// `maxlength` (the connection is then no longer readable), `EOFError`
    /// once the peer is gone and nothing is left.
    #[pyo3(signature = (maxlength=None))]
    fn recv_bytes<'py>(
        &self,
        py: Python<'py>,
        maxlength: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.check_readable()?;
        let maxlength = maxlength
            .map(|m| non_negative(m, "negative maxlength"))
            .transpose()?;
        match self.recv_message(py, maxlength, None)? {
            Received::Bytes(b) => Ok(b),
            Received::TooLong => Err(self.bad_message_length()),
            Received::Into(_) | Received::TooShort(_) => unreachable!("no buffer given"),
        }
    }

    /// Receives one message into the writable buffer `buf` at byte
    /// `offset` and returns its length; `multiprocessing.BufferTooShort`
    /// (holding the message) if it does not fit.
    #[pyo3(signature = (buf, offset=0))]
    fn recv_bytes_into(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        offset: i64,
    ) -> PyResult<usize> {
        self.check_readable()?;
        let held = Held::new(buf)?;
        let dst = held.dst()?;
        let offset = non_negative(offset, "negative offset")?;
        if offset > dst.len() {
            return Err(PyValueError::new_err("offset too large"));
        }
        match self.recv_message(py, None, Some((dst, offset)))? {
            Received::Into(n) => Ok(n),
            Received::TooShort(b) => Err(PyErr::from_value(buffer_too_short(py)?.call1((b,))?)),
            Received::Bytes(_) | Received::TooLong => unreachable!("a buffer was given"),
        }
    }

    /// Receives an object sent with `send`.
    fn recv<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.check_readable()?;
        match self.recv_message(py, None, None)? {
            Received::Bytes(b) => pickler(py)?.call_method1("loads", (b,)),
            _ => unreachable!("no buffer, no maxlength"),
        }
    }

    /// Whether a message (or end of file) is there to be received, waiting
    /// up to `timeout` seconds for one; `None` waits for ever.
    #[pyo3(signature = (timeout=0.0))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.check_readable()?;
        let deadline = match timeout {
            None => None,
            Some(t) if t.is_nan() => return Err(PyValueError::new_err("timeout is NaN")),
            Some(t) => Duration::try_from_secs_f64(t.max(0.0))
                .ok()
                .and_then(|d| Instant::now().checked_add(d)),
        };
        // A timeout too large for the clock waits for ever.
        let deadline = if timeout.is_some() && deadline.is_none() {
            None
        } else {
            deadline
        };
        match self.settle(py, deadline)? {
            Settled::Yes => {}
            Settled::NotYet => return Ok(false),
            Settled::Gone { .. } => return Ok(true),
            Settled::Failed(e) => return Err(e),
        }
        let mut guard = use_end(&self.rx, &self.closed)?;
        let half = guard.as_mut().ok_or_else(errors::closed)?;
        if half.broken {
            return Err(errors::broken());
        }
        if deadline.is_some_and(|d| d <= Instant::now()) {
            // poll(0), often called in a loop: a look at the ring, and at
            // the wake pipe (for a hang-up) if it is empty, like multiprocessing's
            // one select(); nothing is armed.
            return match half.end.peek_len().map_err(to_py)? {
                Some(_) => Ok(true),
                None => Ok(sender_gone(&half.end).map_err(to_py)?),
            };
        }
        let next = next_len(py, &mut half.end, &self.closed, deadline);
        // The peek's turn, if any, is not Python's to keep (see `recv_message`).
        half.end.leave_turn();
        match next? {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(false),
            Err(e) => Err(to_py(e)),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " closed" } else { "" };
        let dir = match (self.readable(), self.writable) {
            (true, true) => "duplex",
            (true, false) => "read-only",
            (false, true) => "write-only",
            (false, false) => "unreadable",
        };
        format!("<shmpipe.Connection {dir}{state}>")
    }

    /// The descriptors of the receiving and the sending end (four each,
    /// or `None`), for pickling by `multiprocessing` (see `_reduction`).
    fn _handoff(&self) -> PyResult<(EndFds, EndFds)> {
        if self.sealed {
            return Err(PyTypeError::new_err(
                "cannot pickle a shmpipe.Connection made by Listener.accept() or Client(): \
                 its memory is sealed to the process that connected (a peer of \
                 another process cannot write it); connect in the process that uses it \
                 (call Client(address) there), or hand over an end of shmpipe.Pipe()",
            ));
        }
        self.check_closed()?;
        let rx = lock(&self.rx)?;
        let tx = lock(&self.tx)?;
        let raw = |fds: [std::os::fd::BorrowedFd<'_>; 4]| fds.map(|f| f.as_raw_fd());
        Ok((
            rx.as_ref().map(|h| raw(h.end.as_fds())),
            tx.as_ref().map(|h| raw(h.end.as_fds())),
        ))
    }

    /// Rebuilds a connection from descriptors `_handoff` gave in another
    /// process. The caller keeps (and closes) the numbers it passes.
    #[staticmethod]
    #[pyo3(signature = (rx, tx))]
    fn _from_fds(rx: EndFds, tx: EndFds) -> PyResult<Connection> {
        let rx = rx
            .map(|r| fds::dup4(r).and_then(Receiver::from_fds))
            .transpose()
            .map_err(to_py)?;
        let tx = tx
            .map(|t| fds::dup4(t).and_then(Sender::from_fds))
            .transpose()
            .map_err(to_py)?;
        Connection::new(rx, tx).map_err(to_py)
    }

    /// The ring capacity in bytes of the receiving (else the sending) end.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> PyResult<usize> {
        self.settle_to_recv(py)?;
        if let Some(h) = lock(&self.rx)?.as_ref() {
            return Ok(h.end.capacity());
        }
        if let Some(h) = lock(&self.tx)?.as_ref() {
            return Ok(h.end.capacity());
        }
        Err(errors::closed())
    }
}

/// Creates a pair of connections: duplex (two message pipes, one each
/// way) or one-way, `(reader, writer)`.
#[pyfunction]
#[pyo3(signature = (duplex=true, capacity=DEFAULT_CAPACITY))]
pub(crate) fn pipe(duplex: bool, capacity: usize) -> PyResult<(Connection, Connection)> {
    if !capacity.is_power_of_two() || framing::check_capacity(capacity).is_err() {
        return Err(PyValueError::new_err(format!(
            "capacity must be a power of two of at least {} bytes, not {capacity}",
            framing::MIN_CAPACITY
        )));
    }
    let make = || Options::new().capacity(capacity).message_pipe();
    let (rx1, tx1) = make().map_err(to_py)?;
    if duplex {
        let (rx2, tx2) = make().map_err(to_py)?;
        Ok((
            Connection::new(Some(rx1), Some(tx2)).map_err(to_py)?,
            Connection::new(Some(rx2), Some(tx1)).map_err(to_py)?,
        ))
    } else {
        Ok((
            Connection::new(Some(rx1), None).map_err(to_py)?,
            Connection::new(None, Some(tx1)).map_err(to_py)?,
        ))
    }
}
