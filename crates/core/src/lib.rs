//! Pipes between processes on one Linux machine whose data path never
//! enters the kernel.
//!
//! A pipe is a single-producer, single-consumer ring in shared memory (see
//! the `shmpipe-ring` crate for the protocol). The kernel is used only to
//! create and map the memory, to pass descriptors, to check who connects
//! (once, in [`Listener`]), and to let an idle side sleep and be woken.
//! While both sides are busy, moving data makes no system call.
//!
//! * [`pipe`] gives a byte stream ([`Reader`]: `io::Read`, [`Writer`]:
//!   `io::Write`), [`message_pipe`] a message pipe ([`Receiver`],
//!   [`Sender`]); [`Options`] sets the capacity and the spin time.
//! * Ends survive `fork`, can be handed to a spawned program
//!   ([`Reader::pass_to`] and friends) and live as long as any copy does:
//!   the pipe closes when every copy of an end is gone, as the kernel
//!   decides for a kernel pipe. Then the reader drains and sees EOF, and
//!   the writer sees `BrokenPipe`: at its next write after the last copy
//!   of the reader was dropped, within 64 KiB after a reader killed while
//!   busy.
//! * [`Listener`] and [`connect`] make connections by filesystem path,
//!   each a pair of pipes, one each way.
//!
//! # Examples
//!
//! ```
//! use std::io::{Read, Write};
//! let (mut reader, mut writer) = shmpipe::pipe()?;
//! let child = std::thread::spawn(move || writer.write_all(b"hello from the other side"));
//! let mut text = String::new();
//! reader.read_to_string(&mut text)?;
//! assert_eq!(text, "hello from the other side");
//! # child.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(unsafe_code)]

mod end;
mod error;
mod handoff;
#[doc(hidden)]
#[allow(unsafe_code)]
pub mod lend;
mod message;
mod net;
#[allow(unsafe_code)]
mod owed;
mod pace;
mod readiness;
#[allow(unsafe_code)]
mod setup;
#[allow(unsafe_code)]
mod shared;
mod stream;
mod sys;
#[cfg(feature = "tokio")]
#[allow(unsafe_code)]
pub mod tokio;
#[allow(unsafe_code)]
mod view;
mod wait;
pub mod waitset;

use std::io;
use std::os::fd::AsFd;

use shmpipe_ring::layout::Role;

pub use message::{Message, MessageGrant, Receiver, Sender};
/// The handshake's wire format, for tests that forge hellos: not part of
/// the API.
#[cfg(feature = "test-kit")]
#[doc(hidden)]
pub use net::handshake;
pub use net::{
    connect, max_pending, Connecting, Connection, Listener, PeerCredentials, MAX_PENDING,
};
pub use pace::{Spin, DEFAULT_SPIN};
#[doc(hidden)]
pub use shared::revoke_on_fork;
pub use stream::{ReadChunk, Reader, WriteGrant, Writer};
#[cfg(feature = "test-kit")]
pub use sys::fault;
pub use sys::raise_fd_limit;
pub use view::RingSlice;
#[doc(hidden)]
pub use wait::mirror_sent;
pub use waitset::set::WaitSet;

use setup::OwnRegion;
use wait::{End, Settings, Side};

/// Ring capacity when none is given: 256 KiB.
///
/// # Examples
///
/// ```
/// let (reader, _writer) = shmpipe::pipe()?;
/// assert_eq!(reader.capacity(), shmpipe::DEFAULT_CAPACITY);
/// # Ok::<(), std::io::Error>(())
/// ```
pub const DEFAULT_CAPACITY: usize = 256 * 1024;

/// The largest ring a peer may make us map when none is given: 64 MiB.
///
/// Across a connection each side maps the other's ring whole, so this is
/// the address space one peer can make us spend (the memory itself is the
/// peer's, charged to it as it touches it). 64 MiB is 256 times the
/// default ring and well past the size at which a larger ring stops
/// helping throughput, yet a million such connections still fit in a
/// 47-bit address space; without a bound, a hundred clients declaring
/// 1 TiB each exhausted it.
///
/// # Examples
///
/// ```
/// let mut options = shmpipe::Options::new();
/// // Accept peers with rings up to 4 times the default bound.
/// options.max_peer_capacity(4 * shmpipe::DEFAULT_MAX_PEER_CAPACITY);
/// assert_eq!(shmpipe::DEFAULT_MAX_PEER_CAPACITY, 64 << 20);
/// ```
pub const DEFAULT_MAX_PEER_CAPACITY: usize = 64 << 20;

/// Creates a byte-stream pipe with the default [`Options`].
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let (mut reader, mut writer) = shmpipe::pipe()?;
/// writer.write_all(b"ping")?;
/// drop(writer); // the reader drains, then sees EOF
/// let mut got = Vec::new();
/// reader.read_to_end(&mut got)?;
/// assert_eq!(got, b"ping");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn pipe() -> io::Result<(Reader, Writer)> {
    Options::new().pipe()
}

/// Creates a message pipe with the default [`Options`].
///
/// # Examples
///
/// ```
/// let (mut rx, mut tx) = shmpipe::message_pipe()?;
/// tx.send(b"one")?;
/// tx.send(b"two")?;
/// let mut buf = [0u8; 16];
/// let n = rx.recv(&mut buf)?;
/// assert_eq!(&buf[..n], b"one"); // message boundaries are kept
/// let n = rx.recv(&mut buf)?;
/// assert_eq!(&buf[..n], b"two");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn message_pipe() -> io::Result<(Receiver, Sender)> {
    Options::new().message_pipe()
}

/// How to build a pipe: capacity and blocking behaviour.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let (rx, tx) = shmpipe::Options::new()
///     .capacity(1 << 20)
///     .spin(Duration::ZERO) // sleep at once instead of spinning
///     .message_pipe()?;
/// assert_eq!(tx.max_message(), (1 << 20) - 8);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    capacity: usize,
    spin: Spin,
    max_peer_capacity: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self::new()
    }
}

impl Options {
    /// The defaults: [`DEFAULT_CAPACITY`], [`Spin::Adaptive`],
    /// [`DEFAULT_MAX_PEER_CAPACITY`].
    ///
    /// # Examples
    ///
    /// ```
    /// let (reader, _writer) = shmpipe::Options::new().pipe()?;
    /// assert_eq!(reader.capacity(), shmpipe::DEFAULT_CAPACITY);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> Self {
        Options {
            capacity: DEFAULT_CAPACITY,
            spin: Spin::Adaptive,
            max_peer_capacity: DEFAULT_MAX_PEER_CAPACITY,
        }
    }

    /// Ring capacity in bytes: a power of two, at least 8.
    ///
    /// # Examples
    ///
    /// ```
    /// let (reader, writer) = shmpipe::Options::new().capacity(4096).pipe()?;
    /// assert_eq!(reader.capacity(), 4096);
    /// assert_eq!(writer.capacity(), 4096);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&mut self, bytes: usize) -> &mut Self {
        self.capacity = bytes;
        self
    }

    /// How long an end spins before sleeping (default [`Spin::Adaptive`]):
    /// a [`Duration`](std::time::Duration) is [`Spin::Fixed`], and zero sleeps at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut options = shmpipe::Options::new();
    /// options.spin(Duration::from_micros(10)); // 10 us
    /// options.spin(shmpipe::Spin::Adaptive); // the default again
    /// ```
    pub fn spin(&mut self, spin: impl Into<Spin>) -> &mut Self {
        self.spin = spin.into();
        self
    }

    /// The largest ring, in bytes, the peer of a connection may make this
    /// side map (default [`DEFAULT_MAX_PEER_CAPACITY`]); a larger one
    /// fails the handshake on both sides with an error that says so. For
    /// a [`Listener`] this bounds every client (see
    /// [`Listener::set_max_peer_capacity`]); for [`connect`](Options::connect)
    /// it bounds the server.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut options = shmpipe::Options::new();
    /// options.capacity(1 << 20).max_peer_capacity(1 << 20);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn max_peer_capacity(&mut self, bytes: usize) -> &mut Self {
        self.max_peer_capacity = bytes;
        self
    }

    fn settings(&self) -> Settings {
        Settings {
            spin: self.spin,
            ..Settings::default()
        }
    }

    /// Creates a byte-stream pipe.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut reader, mut writer) = shmpipe::Options::new().capacity(64).pipe()?;
    /// writer.write_all(b"small ring")?;
    /// let mut buf = [0u8; 10];
    /// reader.read_exact(&mut buf)?;
    /// assert_eq!(&buf, b"small ring");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pipe(&self) -> io::Result<(Reader, Writer)> {
        let (rs, ws) = self.build(false)?;
        Ok((
            Reader {
                end: End {
                    ring: rs.0,
                    side: rs.1,
                },
            },
            Writer {
                end: End {
                    ring: ws.0,
                    side: ws.1,
                },
            },
        ))
    }

    /// Creates a message pipe.
    ///
    /// # Examples
    ///
    /// ```
    /// let (mut rx, mut tx) = shmpipe::Options::new().capacity(64).message_pipe()?;
    /// tx.send(b"hi")?;
    /// let mut msg = Vec::new();
    /// rx.recv_vec(&mut msg)?;
    /// assert_eq!(msg, b"hi");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn message_pipe(&self) -> io::Result<(Receiver, Sender)> {
        let (rs, ws) = self.build(false)?;
        Ok((
            Receiver {
                end: End {
                    ring: rs.0,
                    side: rs.1,
                },
            },
            Sender {
                end: End {
                    ring: ws.0,
                    side: ws.1,
                },
            },
        ))
    }

    /// Builds both ends of one pipe in this process. With `exclusive`,
    /// each region is sealed so only its owner's mapping can write it.
    #[allow(clippy::type_complexity)]
    fn build(
        &self,
        exclusive: bool,
    ) -> io::Result<(
        (shmpipe_ring::Consumer, Side),
        (shmpipe_ring::Producer, Side),
    )> {
        let w = OwnRegion::create(Role::Writer, self.capacity, exclusive)?;
        let r = OwnRegion::create(Role::Reader, self.capacity, exclusive)?;
        let (w_dup, r_dup) = (w.fd.try_clone()?, r.fd.try_clone()?);
        let (producer, w_fd) = setup::producer(w, r_dup.as_fd())?;
        let (consumer, r_fd) = setup::consumer(r, w_dup.as_fd())?;
        // (Pipes, not sockets, where /proc allows: both are ours; see
        // `sys::Bell`.)
        let (r_bell, w_bell) = sys::Bell::pair()?;
        let settings = self.settings();
        Ok((
            (consumer, Side::new(r_bell, r_fd, w_dup, settings)),
            (producer, Side::new(w_bell, w_fd, r_dup, settings)),
        ))
    }
}
