//! The same services across machines: a bridge carries shmpipe RPC
//! connections over [Zenoh](https://zenoh.io) (feature `zenoh`), so that
//! an unmodified client on one machine calls an unmodified server on
//! another.
//!
//! [`serve`] makes a local service (any `#[shmpipe::service]` server, or
//! the file server) reachable as a Zenoh key; [`connect`] binds a local
//! listener whose connections are carried to it. Whole RPC frames cross,
//! in order, both ways; the hello goes through to the real server, which
//! checks the interface as it does for a local client. One remote
//! connection is one local connection of the serving bridge, counted per
//! remote peer ([`BridgeLimits`]); the end of either side, or of the
//! network between them, ends the connection on the other within
//! [`LEASE`].
//!
//! The session is mutual TLS over Zenoh's QUIC link (`quic/` endpoints):
//! both sides present a certificate of a CA the other trusts ([`Tls`]).
//! Without it the bridge refuses to start, unless told `insecure`, and
//! then serves loopback only. Within the session every remote peer is
//! its own client: the serving bridge's access control and per-connection
//! secrets let a peer reach the connections it opened and no other (see
//! [`serve`]).
//!
//! Where it sits: above `shmpipe-rpc` (its frames and limits) and
//! `shmpipe-core` (local connections), beside the facade; the `shmpipe`
//! program's `bridge` command (feature `zenoh`) runs it.
//!
//! # Examples
//!
//! The bounds are plain data, with or without the feature:
//!
//! ```
//! let mut limits = shmpipe_bridge::BridgeLimits::new();
//! limits.per_peer(8);
//! assert_eq!(limits.max_per_peer(), 8);
//! ```

#![forbid(unsafe_code)]

mod frame;
mod limits;
#[doc(hidden)]
pub mod testing;

pub use limits::{
    BridgeLimits, DEFAULT_CONNECTIONS, DEFAULT_MAX_FRAME, DEFAULT_PER_PEER, DEFAULT_WINDOW,
};

#[cfg(feature = "zenoh")]
mod config;
#[cfg(feature = "zenoh")]
mod connect;
#[cfg(feature = "zenoh")]
mod link;
#[cfg(feature = "zenoh")]
mod pieces;
#[cfg(feature = "zenoh")]
#[doc(hidden)]
pub mod probe;
#[cfg(feature = "zenoh")]
#[doc(hidden)]
pub mod relay;
#[cfg(feature = "zenoh")]
mod serve;

#[cfg(feature = "zenoh")]
pub use config::{Options, Tls, LEASE, OPEN_TIMEOUT};
#[cfg(feature = "zenoh")]
pub use connect::{connect, REPLY_RING};
#[cfg(feature = "zenoh")]
pub use serve::serve;

/// The key a serving bridge answers open requests on.
#[cfg(feature = "zenoh")]
fn open_key(key: &str) -> String {
    format!("{key}/_open")
}

/// The key a peer whose certificate is named `name` asks to open on.
#[cfg(feature = "zenoh")]
fn named_open_key(key: &str, name: &str) -> String {
    format!("{key}/_open/{name}")
}

#[cfg(feature = "zenoh")]
fn zerr(e: zenoh::Error) -> std::io::Error {
    std::io::Error::other(format!("shmpipe bridge: zenoh: {e}"))
}
