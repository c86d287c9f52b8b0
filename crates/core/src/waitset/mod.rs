//! One wait over many ends: [`WaitSet`](crate::WaitSet).
//!
//! A server with many clients cannot block on one end at a time, and
//! should not make a system call per message while its clients are busy.
//! The waitset holds any number of ends and listeners ([`Source`]), each
//! under a [`Token`] of the caller's, and splits them in two:
//!
//! * **hot** ends, which were ready lately, are looked at in user space:
//!   a load of the peer's index each, no system call;
//! * **cold** ends are *armed* (the park handshake, as an end does after
//!   `WouldBlock`), so their peer's next publish sends a wake byte, and
//!   wait in one epoll instance. Listeners are always there.
//!
//! [`WaitSet::wait`](crate::WaitSet::wait) looks at the hot ends,
//! spinning for a while if none is ready, and then arms them all and
//! sleeps once, in `epoll_wait`, for everything. An end that stays idle while others are busy goes cold on
//! its own; an end whose wake arrives goes hot. While the clients are
//! busy the only system call is an `epoll_wait` that does not sleep, once
//! every [`EPOLL_EVERY`] looks, to notice cold ends, listeners and hang-ups;
//! an idle server costs a client one system call (its wake) to rouse.
//!
//! Readiness is level-triggered: a token is reported by every `wait` while
//! its operation can progress (a reading end: a message, bytes or EOF; a
//! writing end: room for what its last `WouldBlock` wanted, any room once
//! that was found, or a gone reader; a listener: a client connected or
//! spoke). Handle some or all of it and wait again. There is no need to
//! read until `WouldBlock`; ends in a waitset may stay blocking, as an
//! operation on a reported end does not wait.
//!
//! # Examples
//!
//! ```
//! use shmpipe::waitset::Token;
//! let mut set = shmpipe::WaitSet::new()?;
//! let (rx_a, mut tx_a) = shmpipe::message_pipe()?;
//! let (rx_b, _tx_b) = shmpipe::message_pipe()?;
//! set.add(1, rx_a)?;
//! set.add(2, rx_b)?;
//! tx_a.send(b"for a")?;
//! let mut ready = Vec::new();
//! set.wait(&mut ready, None)?;
//! assert_eq!(ready, [Token(1)]); // only the end with a message
//! let mut buf = [0u8; 8];
//! let n = set.receiver_mut(1).unwrap().recv(&mut buf)?;
//! assert_eq!(&buf[..n], b"for a");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! The files: `source` (what the set holds, [`Source`], and what it knows
//! each member by, [`Token`]) and `set` (the set and its wait), which
//! uses `source`.

pub(crate) mod set;
mod source;

pub use set::EPOLL_EVERY;
pub use source::{Source, Token};

/// The same type as [`shmpipe::WaitSet`](crate::WaitSet), documented
/// there; this path stays for code written against it. (An alias, not a
/// `pub use`: rustdoc keeps an item's `doc(hidden)` where a crate that
/// re-exports this one inlines it, but not a `use`'s.)
#[doc(hidden)]
pub type WaitSet = set::WaitSet;
