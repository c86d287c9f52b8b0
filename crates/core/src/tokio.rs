//! Async ends for tokio (feature `tokio`): [`AsyncReader`]
//! (`AsyncRead`), [`AsyncWriter`] (`AsyncWrite`), [`AsyncReceiver`] and
//! [`AsyncSender`] (async `recv`/`send`), and [`AsyncListener`] (async
//! `accept`), each an end in non-blocking mode inside tokio's [`AsyncFd`].
//!
//! They follow tokio's readiness rules, on the end's descriptor contract
//! (see [`Reader`]'s `AsFd`): an operation is tried first; only when it
//! returns `WouldBlock` (the end armed itself, so an edge will come) is the
//! readiness cleared and the task parked. The peer's hang-up makes the
//! operation end (EOF, `BrokenPipe`), so it never spins a task. Before
//! parking, a task spins for at most the end's spin time (`set_spin`;
//! default [`Spin::Adaptive`](crate::Spin::Adaptive), zero parks at once), as
//! a blocking end does: a reply that comes within it costs no system call
//! and no trip through the runtime. Unlike a blocking end, it never yields
//! the CPU to a peer on its own CPU (the peer may be a task of the same
//! thread): it parks at once then. Ends and sockets mix freely in
//! `tokio::select!`.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_io().build()?.block_on(async {
//! use shmpipe::tokio::{AsyncReceiver, AsyncSender};
//! let (rx, tx) = shmpipe::message_pipe()?;
//! let (mut rx, mut tx) = (AsyncReceiver::new(rx)?, AsyncSender::new(tx)?);
//! let echo = tokio::spawn(async move {
//!     tx.send(b"hello").await
//! });
//! let mut buf = [0u8; 16];
//! let n = rx.recv(&mut buf).await?;
//! assert_eq!(&buf[..n], b"hello");
//! echo.await.unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! # })?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use std::os::fd::AsRawFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use crate::{Connection, Listener, Reader, Receiver, Sender, Writer};

/// Registers a readiness descriptor (for reading only: it is what turns
/// readable) with tokio's reactor.
fn register<T: AsRawFd>(inner: T) -> io::Result<AsyncFd<T>> {
    // SAFETY: `inner` is an end whose descriptor exists already (its `arm`
    // made it, or failed and we returned) or a listener (made at bind);
    // either is owned by `inner`, open while it lives, and the same on
    // every `as_raw_fd` call.
    Ok(unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }?)
}

/// Tries `op`; on `WouldBlock` waits for the descriptor's next edge and
/// tries again (tokio's `try_io` clears the readiness only then).
fn poll_io<T: AsRawFd, R>(
    fd: &mut AsyncFd<T>,
    cx: &mut Context<'_>,
    mut op: impl FnMut(&mut T) -> io::Result<R>,
) -> Poll<io::Result<R>> {
    // First without asking tokio: the end's descriptor turns readable only
    // after a WouldBlock, so there may be no edge for what is there now.
    match op(fd.get_mut()) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        other => return Poll::Ready(other),
    }
    loop {
        let mut guard = ready!(fd.poll_read_ready_mut(cx))?;
        match guard.try_io(|inner| op(inner.get_mut())) {
            Ok(r) => return Poll::Ready(r),
            Err(_would_block) => continue,
        }
    }
}

macro_rules! async_end {
    ($name:ident, $inner:ident, $what:literal) => {
        #[doc = concat!("A [`", stringify!($inner), "`] for tokio: ", $what, " (see the [module](self)).")]
        #[derive(Debug)]
        pub struct $name {
            fd: AsyncFd<$inner>,
        }

        impl $name {
            /// Puts the end in non-blocking mode and registers its
            /// descriptor with the current tokio runtime's reactor.
            ///
            /// # Errors
            ///
            /// If there is no runtime with IO enabled, or the descriptor
            /// cannot be made (`EMFILE`).
            ///
            /// # Examples
            ///
            /// ```
            /// # trait Make: Sized { fn make() -> std::io::Result<Self>; }
            /// # impl Make for shmpipe::Reader { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.0) } }
            /// # impl Make for shmpipe::Writer { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.1) } }
            /// # impl Make for shmpipe::Receiver { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.0) } }
            /// # impl Make for shmpipe::Sender { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.1) } }
            /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
            /// let _in_runtime = runtime.enter();
            /// // An end of `shmpipe::pipe()` or `shmpipe::message_pipe()`:
            #[doc = concat!("let end = <shmpipe::", stringify!($inner), " as Make>::make()?;")]
            #[doc = concat!("let mut end = shmpipe::tokio::", stringify!($name), "::new(end)?;")]
            /// assert!(end.get_mut().arm().is_ok());
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn new(mut end: $inner) -> io::Result<$name> {
                end.set_nonblocking(true);
                end.arm()?; // makes the descriptor, or says why not
                Ok($name {
                    fd: register(end)?,
                })
            }

            /// The end.
            ///
            /// # Examples
            ///
            /// ```
            /// # trait Make: Sized { fn make() -> std::io::Result<Self>; }
            /// # impl Make for shmpipe::Reader { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.0) } }
            /// # impl Make for shmpipe::Writer { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.1) } }
            /// # impl Make for shmpipe::Receiver { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.0) } }
            /// # impl Make for shmpipe::Sender { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.1) } }
            /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
            /// let _in_runtime = runtime.enter();
            /// // An end of `shmpipe::pipe()` or `shmpipe::message_pipe()`:
            #[doc = concat!("let end = <shmpipe::", stringify!($inner), " as Make>::make()?;")]
            #[doc = concat!("let mut end = shmpipe::tokio::", stringify!($name), "::new(end)?;")]
            /// assert_eq!(end.get_ref().capacity(), shmpipe::DEFAULT_CAPACITY);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn get_ref(&self) -> &$inner {
                self.fd.get_ref()
            }

            /// The end (for its settings; keep it non-blocking).
            ///
            /// # Examples
            ///
            /// ```
            /// # trait Make: Sized { fn make() -> std::io::Result<Self>; }
            /// # impl Make for shmpipe::Reader { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.0) } }
            /// # impl Make for shmpipe::Writer { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.1) } }
            /// # impl Make for shmpipe::Receiver { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.0) } }
            /// # impl Make for shmpipe::Sender { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.1) } }
            /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
            /// let _in_runtime = runtime.enter();
            /// // An end of `shmpipe::pipe()` or `shmpipe::message_pipe()`:
            #[doc = concat!("let end = <shmpipe::", stringify!($inner), " as Make>::make()?;")]
            #[doc = concat!("let mut end = shmpipe::tokio::", stringify!($name), "::new(end)?;")]
            /// end.get_mut().set_spin(std::time::Duration::ZERO); // park at once
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn get_mut(&mut self) -> &mut $inner {
                self.fd.get_mut()
            }

            /// Gives the end back, in blocking mode.
            ///
            /// # Examples
            ///
            /// ```
            /// # trait Make: Sized { fn make() -> std::io::Result<Self>; }
            /// # impl Make for shmpipe::Reader { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.0) } }
            /// # impl Make for shmpipe::Writer { fn make() -> std::io::Result<Self> { Ok(shmpipe::pipe()?.1) } }
            /// # impl Make for shmpipe::Receiver { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.0) } }
            /// # impl Make for shmpipe::Sender { fn make() -> std::io::Result<Self> { Ok(shmpipe::message_pipe()?.1) } }
            /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
            /// let _in_runtime = runtime.enter();
            /// // An end of `shmpipe::pipe()` or `shmpipe::message_pipe()`:
            #[doc = concat!("let end = <shmpipe::", stringify!($inner), " as Make>::make()?;")]
            #[doc = concat!("let mut end = shmpipe::tokio::", stringify!($name), "::new(end)?;")]
            /// let end = end.into_inner();
            /// assert_eq!(end.capacity(), shmpipe::DEFAULT_CAPACITY);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn into_inner(self) -> $inner {
                let mut end = self.fd.into_inner();
                end.set_nonblocking(false);
                end
            }
        }
    };
}

async_end!(AsyncReader, Reader, "`AsyncRead`");
async_end!(AsyncWriter, Writer, "`AsyncWrite`");
async_end!(AsyncReceiver, Receiver, "async `recv`");
async_end!(AsyncSender, Sender, "async `send`");

impl AsyncRead for AsyncReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = ready!(poll_io(&mut this.fd, cx, |r| {
            r.end.spin_ready();
            r.read(buf.initialize_unfilled())
        }))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for AsyncWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        poll_io(&mut self.get_mut().fd, cx, |w| {
            w.end.spin_ready();
            w.write(buf)
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().fd.get_mut().flush())
    }

    /// Nothing to do: the reader sees EOF when every copy of the writer
    /// is dropped.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl AsyncReceiver {
    /// Receives one message into `buf` and returns its length; errors as
    /// [`Receiver::recv`].
    ///
    /// # Examples
    ///
    /// See the [module](self).
    pub async fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            poll_io(&mut self.fd, cx, |r| {
                r.end.spin_ready();
                r.recv(buf)
            })
        })
        .await
    }

    /// Receives one message into `buf`, resized to fit it.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_io().build()?.block_on(async {
    /// let (rx, mut tx) = shmpipe::message_pipe()?;
    /// let mut rx = shmpipe::tokio::AsyncReceiver::new(rx)?;
    /// tx.send(b"abc")?;
    /// let mut buf = Vec::new();
    /// rx.recv_vec(&mut buf).await?;
    /// assert_eq!(buf, b"abc");
    /// # Ok::<(), std::io::Error>(())
    /// # })?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn recv_vec(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        poll_fn(|cx| {
            poll_io(&mut self.fd, cx, |r| {
                r.end.spin_ready();
                r.recv_vec(buf)
            })
        })
        .await
    }
}

impl AsyncSender {
    /// Sends one message; errors as [`Sender::send`].
    ///
    /// # Examples
    ///
    /// See the [module](self).
    pub async fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        poll_fn(|cx| {
            poll_io(&mut self.fd, cx, |s| {
                s.end.spin_ready();
                s.send(msg)
            })
        })
        .await
    }
}

/// A [`Listener`] for tokio: async `accept`.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_io().build()?.block_on(async {
/// let path = std::env::temp_dir().join(format!("shmpipe-doc-tokio-{}.sock", std::process::id()));
/// let listener = shmpipe::tokio::AsyncListener::new(shmpipe::Listener::bind(&path)?)?;
/// let client = std::thread::spawn(move || shmpipe::connect(&path).map(|_| ()));
/// let _conn = listener.accept().await?;
/// client.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// # })?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct AsyncListener {
    fd: AsyncFd<Listener>,
}

impl AsyncListener {
    /// Puts the listener in non-blocking mode and registers it with the
    /// current tokio runtime's reactor.
    ///
    /// # Errors
    ///
    /// If there is no runtime with IO enabled.
    ///
    /// # Examples
    ///
    /// ```
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    /// let _in_runtime = runtime.enter();
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-alnew-{}.sock", std::process::id()));
    /// let listener = shmpipe::tokio::AsyncListener::new(shmpipe::Listener::bind(&path)?)?;
    /// assert!(path.exists());
    /// drop(listener); // removes the socket file
    /// assert!(!path.exists());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(mut listener: Listener) -> io::Result<AsyncListener> {
        listener.set_nonblocking(true);
        Ok(AsyncListener {
            fd: register(listener)?,
        })
    }

    /// The next connection whose handshake completes (see
    /// [`Listener::accept`]); a slow client holds up no other.
    pub async fn accept(&self) -> io::Result<Connection> {
        match self.fd.get_ref().accept() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return other,
        }
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|l| l.get_ref().accept()) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// The listener.
    ///
    /// # Examples
    ///
    /// ```
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    /// let _in_runtime = runtime.enter();
    /// let path = std::env::temp_dir().join(format!("shmpipe-doc-alref-{}.sock", std::process::id()));
    /// let listener = shmpipe::tokio::AsyncListener::new(shmpipe::Listener::bind(&path)?)?;
    /// assert_eq!(listener.get_ref().path(), path);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn get_ref(&self) -> &Listener {
        self.fd.get_ref()
    }
}
