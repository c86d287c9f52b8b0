//! Remote procedure calls with generated stubs: `#[shmpipe::service]` on a
//! trait (feature `rpc`).
//!
//! For `trait Calc` the attribute generates:
//!
//! * `CalcClient`: made by `CalcClient::connect(path)` or
//!   `CalcClient::new(connection)`; it implements `Calc` itself (the same
//!   signatures; a call that fails in transport panics), and has
//!   `try_add` (an `io::Result`) and `send_add`/`recv_add` (several calls
//!   in flight) per method. `CalcClient<UnixTransport>` runs the same
//!   stubs over a Unix socket.
//! * `CalcServer<S>`: the [`Dispatch`] of any `S: Calc`, a static `match`
//!   on the opcode. [`serve_waitset`] runs it for every client of a
//!   [`Listener`](crate::Listener) from one thread, [`serve_threads`]
//!   from N threads (a waitset each, new clients spread across them),
//!   [`serve`] on a thread per client, and [`Conn`] serves one
//!   connection, blocking or not.
//! * `impl Calc for Arc<S>`, so that one implementation serves many
//!   clients.
//!
//! Parameters and results: integers, floats, `bool`, arrays and
//! `#[repr(C)]` structs or enums deriving zerocopy's `IntoBytes`,
//! `TryFromBytes` and `Immutable` travel by their bytes (checked on
//! arrival); `&[u8]` and `&str` in, `&mut [u8]` out (the caller's buffer,
//! filled in place), `Vec<u8>` and `String` either way, and `Result<T, E>`
//! as a result. The wire format is in [`wire`].
//!
//! # Examples
//!
//! ```
//! #[shmpipe::service]
//! pub trait Calc {
//!     fn add(&self, a: u32, b: u32) -> u32;
//!     fn upper(&self, text: &str) -> String;
//! }
//!
//! struct Impl;
//! impl Calc for Impl {
//!     fn add(&self, a: u32, b: u32) -> u32 { a + b }
//!     fn upper(&self, text: &str) -> String { text.to_uppercase() }
//! }
//!
//! let path = std::env::temp_dir().join(format!("shmpipe-rpc-doc-{}.sock", std::process::id()));
//! let listener = shmpipe::Listener::bind(&path)?;
//! std::thread::spawn(move || shmpipe::rpc::serve(listener, |_| CalcServer(Impl)));
//! let calc = CalcClient::connect(&path)?;
//! assert_eq!(calc.add(2, 3), 5);
//! assert_eq!(calc.try_upper("shm")?, "SHM");
//! # Ok::<(), std::io::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::cell::{RefCell, RefMut};
use std::io;
use std::ops::{Deref, DerefMut};

mod conn;
mod dispatch;
mod serve;
mod transport;
pub mod wire;

pub use conn::{Conn, Core, ReplyOut, RequestIn};
pub use dispatch::{Cursor, Dispatch, Refused, Reply};
pub use serve::{serve, serve_threads, serve_unix, serve_waitset};
pub use transport::{Fixed, FrameOut, ShmLanes, ShmTransport, Transport, UnixTransport};

/// What the generated code needs from other crates.
#[doc(hidden)]
pub mod __private {
    pub use shmpipe_core::{connect, Connection};
    pub use zerocopy::{Immutable, IntoBytes, TryFromBytes};
}

/// An interface's identity, as checked at connect.
///
/// # Examples
///
/// ```
/// #[shmpipe::service(version = 3)]
/// pub trait Ping { fn ping(&self); }
/// let i = PingClient::<shmpipe::rpc::ShmTransport>::INTERFACE;
/// assert_eq!((i.name, i.version), ("Ping", 3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// The trait's name.
    pub name: &'static str,
    /// A hash of the trait's name and its methods' signatures.
    pub id: u64,
    /// The version given to the attribute (default 1).
    pub version: u32,
    /// The largest request or reply body, in bytes.
    pub max_frame: u32,
}

/// The client's side of a connection: the transport, checked at connect,
/// and the state its fast path keeps outside it (see
/// [`Transport::call_fixed`]).
///
/// The generated stubs take `&self` (the trait's signatures), so the
/// transport sits in a `RefCell`: a call in the general way holds it
/// through [`transport`](Self::transport), which borrows it (a call made
/// from inside another one, say from a global allocator, is refused with
/// `WouldBlock`) and takes the fast path's state back; the fast path
/// touches only `lanes`, which are lent only while the transport is not
/// borrowed, so it takes no borrow of its own.
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self, x: u32) -> u32; }
/// struct P;
/// impl Ping for P { fn ping(&self, x: u32) -> u32 { x + 1 } }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-client-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve(listener, |_| PingServer(P)));
/// let t = shmpipe::rpc::ShmTransport::new(shmpipe::connect(&path)?);
/// let client = shmpipe::rpc::Client::new(t, &PingClient::<shmpipe::rpc::ShmTransport>::INTERFACE)?;
/// let _t: shmpipe::rpc::ShmTransport = client.into_transport();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Client<T: Transport> {
    pub(crate) lanes: T::Lanes,
    pub(crate) transport: RefCell<T>,
}

impl<T: Transport> std::fmt::Debug for Client<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("busy", &self.transport.try_borrow_mut().is_err())
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Client<T> {
    /// Greets the server over `transport` and checks that it serves
    /// `iface`: `ConnectionRefused` with both names and versions if not.
    pub fn new(mut transport: T, iface: &Interface) -> io::Result<Self> {
        let mut hello = [0u8; wire::HEADER + wire::HELLO_LEN];
        hello[..wire::HEADER].copy_from_slice(&wire::header(wire::HELLO_LEN as u32, wire::HELLO));
        hello[8..12].copy_from_slice(&wire::VERSION.to_ne_bytes());
        hello[12..20].copy_from_slice(&iface.id.to_ne_bytes());
        hello[20..24].copy_from_slice(&iface.version.to_ne_bytes());
        transport.put(&hello)?;
        let h = transport.call()?;
        // (The hello reply carries the server's name: room for it even
        // under a tiny max_frame.)
        let max = iface.max_frame.max(4096);
        let mut rest = wire::expect_ok(&mut transport, h, max).map_err(|e| {
            if e.kind() == io::ErrorKind::ConnectionRefused {
                io::Error::new(
                    e.kind(),
                    format!(
                        "shmpipe rpc: {e}; this client speaks `{}` version {}",
                        iface.name, iface.version
                    ),
                )
            } else {
                e
            }
        })?;
        let mut skip = vec![0u8; rest];
        wire::take_bytes(&mut transport, &mut rest, &mut skip)?;
        wire::finish(&mut transport, rest)?;
        let lanes = T::Lanes::default();
        T::lend(&lanes, &mut transport);
        Ok(Client {
            lanes,
            transport: RefCell::new(transport),
        })
    }

    /// The transport, for one call made the general way (`put`s, `call`,
    /// `take`s); the fast path's state is taken back meanwhile and lent
    /// again when the guard goes. `WouldBlock` if a call is made from
    /// inside another.
    #[inline]
    pub fn transport(&self) -> io::Result<Held<'_, T>> {
        let Ok(mut t) = self.transport.try_borrow_mut() else {
            return Err(busy());
        };
        T::revoke(&self.lanes, &mut t);
        Ok(Held { client: self, t })
    }

    /// A whole call on the fast path, if the transport has one (see
    /// [`Transport::call_fixed`]).
    #[inline(always)]
    pub fn call_fixed<const Q: usize, const R: usize>(
        &self,
        fill: impl FnOnce(&mut FrameOut<'_, Q>),
        ok: u64,
    ) -> Fixed<'_, T, R> {
        T::call_fixed(self, fill, ok)
    }

    /// Takes the transport back.
    pub fn into_transport(self) -> T {
        let mut t = self.transport.into_inner();
        T::revoke(&self.lanes, &mut t);
        t
    }
}

/// The transport of a [`Client`], held for one call (see
/// [`Client::transport`]).
///
/// # Examples
///
/// ```
/// #[shmpipe::service]
/// pub trait Ping { fn ping(&self); }
/// struct P;
/// impl Ping for P { fn ping(&self) {} }
///
/// let path = std::env::temp_dir().join(format!("shmpipe-held-doc-{}.sock", std::process::id()));
/// let listener = shmpipe::Listener::bind(&path)?;
/// std::thread::spawn(move || shmpipe::rpc::serve(listener, |_| PingServer(P)));
/// let client = shmpipe::rpc::Client::new(
///     shmpipe::rpc::ShmTransport::new(shmpipe::connect(&path)?),
///     &PingClient::<shmpipe::rpc::ShmTransport>::INTERFACE,
/// )?;
/// let held = client.transport()?;
/// assert!(client.transport().is_err()); // one call at a time
/// drop(held);
/// assert!(client.transport().is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Held<'a, T: Transport> {
    client: &'a Client<T>,
    t: RefMut<'a, T>,
}

impl<T: Transport> std::fmt::Debug for Held<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

impl<T: Transport> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.t
    }
}

impl<T: Transport> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.t
    }
}

impl<T: Transport> Drop for Held<'_, T> {
    fn drop(&mut self) {
        T::lend(&self.client.lanes, &mut self.t);
    }
}

#[cold]
fn busy() -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        "shmpipe rpc: a call on this client is already in progress",
    )
}

/// What a trait method of a generated client does when the call fails in
/// transport: it cannot return the error, so it panics with it (use the
/// `try_` method to get the error instead).
///
/// # Examples
///
/// ```should_panic
/// shmpipe::rpc::call_failed("add", std::io::ErrorKind::BrokenPipe.into());
/// ```
#[cold]
#[track_caller]
pub fn call_failed(method: &str, e: io::Error) -> ! {
    panic!("shmpipe rpc: call `{method}` failed: {e}")
}
