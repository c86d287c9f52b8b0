//! Connections by filesystem path, like `UnixListener`/`UnixStream`: a
//! [`Listener`] and [`connect`] make [`Connection`]s, each a pair of
//! pipes, one each way.
//!
//! Access is checked once, at connect: the socket file is created mode
//! 0600, and the kernel's record of the peer (`SO_PEERCRED`) must pass the
//! listener's policy (by default: the same user). The client checks the
//! server the same way. Then each side creates the regions it writes,
//! sealed so that only its own mapping can ever write them, and sends them
//! over the socket (`SCM_RIGHTS`); the peer maps them read-only. From then
//! on the data path runs without the kernel.
//!
//! The files, each using only those listed before it:
//!
//! * `connection`: what a handshake makes ([`Connection`],
//!   [`PeerCredentials`]);
//! * `handshake`: the hello, this layer's one cross-process format, with
//!   its diagram and version (reachable from outside only with the
//!   `test-kit` feature, for tests that forge hellos);
//! * `exchange`: each side's steps of the handshake, and its checks on
//!   what the peer sends;
//! * `accept`: the listener's side, many clients' handshakes at once;
//! * `socket_file`: the listener's socket file: bound (a stale one
//!   reclaimed), and removed only while it is the listener's own;
//! * `listener`: [`Listener`] and [`connect`];
//! * `connecting`: [`Options::connect_later`](crate::Options::connect_later)
//!   and [`Connecting`], a connect that does not wait for the accept.

mod accept;
mod connecting;
mod connection;
mod exchange;
#[doc(hidden)]
pub mod handshake;
mod listener;
mod socket_file;

pub use accept::{max_pending, MAX_PENDING};
pub use connecting::Connecting;
pub use connection::{Connection, PeerCredentials};
pub use listener::{connect, Listener};
