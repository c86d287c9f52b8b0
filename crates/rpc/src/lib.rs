//! Remote procedure calls with generated stubs: `#[shmpipe::service]` on a
//! trait (feature `rpc`).
//!
//! For `trait Calc` the attribute generates:
//!
//! * `CalcClient`: made by `CalcClient::connect(path)` or
//!   `CalcClient::new(connection)`; per method of `Calc` it has the
//!   method, with the same parameters and an `io::Result` of its result
//!   (a call that fails in transport, say because the server died,
//!   returns the error: it never panics), and `send_add`/`recv_add`
//!   (several calls in flight). `CalcClient<UnixTransport>` runs the same
//!   stubs over a Unix socket. The client does not implement `Calc`,
//!   whose signatures have no room for that error; `try_add`, the old
//!   name of the call that returned it, is kept for one release,
//!   deprecated.
//! * `CalcServer<S>`: the [`Dispatch`] of any `S: Calc`, a static `match`
//!   on the opcode. [`serve_waitset`] runs it for every client of a
//!   [`Listener`](shmpipe_core::Listener) from one thread, [`serve_threads`]
//!   from N threads (a waitset each, new clients spread across them),
//!   [`serve`](fn@serve) on a thread per client, and [`Conn`] serves one
//!   connection, blocking or not. Each server bounds what its clients
//!   may take ([`ServeLimits`]: clients in all, per user and per
//!   process; buffered bytes) and sheds a client past a bound, telling it
//!   why.
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
//! assert_eq!(calc.add(2, 3)?, 5);
//! assert_eq!(calc.upper("shm")?, "SHM");
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![forbid(unsafe_code)]

mod client;
mod conn;
mod dispatch;
mod limits;
mod serve;
mod transport;
mod waitset;
pub mod wire;

pub use client::Transport;
pub use conn::{Conn, Core, ReplyOut, RequestIn};
pub use dispatch::{Dispatch, Refused, Reply};
pub use limits::{ServeLimits, DEFAULT_BUFFERED, DEFAULT_CLIENTS, DEFAULT_PER_PROCESS};
pub use serve::{serve, serve_unix};
pub use transport::{ShmTransport, UnixTransport};
pub use waitset::{serve_threads, serve_waitset};

/// The old name of what a generated client speaks through, kept so that
/// code written against it still builds.
#[doc(hidden)]
#[deprecated(note = "renamed `Channel` (in `__private`): use the generated `FooClient` instead")]
pub type Client<T> = client::Channel<T>;

/// The old name of [`Channel`](client::Channel)'s guard, kept so that code
/// written against it still builds.
#[doc(hidden)]
#[deprecated(note = "renamed `TransportGuard` (in `__private`)")]
pub type Held<'a, T> = client::TransportGuard<'a, T>;

/// Everything the code `#[shmpipe::service]` generates names, and its only
/// path into this crate: the public items it uses and the plumbing users
/// never write (the fast path's frame and outcome, the client's channel,
/// the reading of replies, the argument cursor). Not an API: it changes
/// with the macro.
#[doc(hidden)]
pub mod __private {
    pub use crate::client::{
        decode, expect_ok, finish, joined, len32, request_header, take_bytes, take_string,
        take_vec, Channel, Fixed, FrameOut, TransportGuard,
    };
    pub use crate::dispatch::{Cursor, Dispatch, Refused, Reply};
    pub use crate::transport::{ShmLanes, ShmTransport};
    pub use crate::wire::{bad_reply, header, ok_header, HEADER};
    pub use crate::{Interface, Transport};
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
