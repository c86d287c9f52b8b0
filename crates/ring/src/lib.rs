//! The single-producer, single-consumer protocol behind `shmpipe`.
//!
//! This crate is the bottom layer: it knows the shared-memory layout
//! ([`layout`]), the index arithmetic and memory orderings
//! ([`Producer`], [`Consumer`]), message framing ([`frame`]) and the
//! park/wake handshake, and nothing about processes. It makes no system
//! call (but for a yield while it waits for [`owed`]'s lock), so Miri and
//! loom can check all of it; the `shmpipe` crate maps the memory, passes
//! descriptors and does the actual sleeping. It also keeps the core of
//! `shmpipe`'s list of wakes a publish failed to send ([`owed`]).
//!
//! # Protocol in brief
//!
//! Positions are free-running `u64` counters; a position's slot is
//! `pos & (capacity - 1)`. The producer writes slots, then stores `tail`
//! with Release; the consumer loads `tail` with Acquire, reads, then stores
//! `head` with Release; the producer loads `head` with Acquire before
//! reusing slots. Each side caches the other's index and reloads it only
//! when the cache says empty (or full).
//!
//! A writer may also copy a small publish (at most 40 bytes) onto its
//! tail's cache line, so that a reader waiting on the tail gets the bytes
//! with it ([`inline`]); the tail and the data stay the authority.
//!
//! A side that finds nothing to do may sleep. It stores its park epoch in
//! its own `parked` word, issues a SeqCst fence and re-checks the peer's
//! index; the peer, after publishing, issues a SeqCst fence and loads the
//! `parked` word. The fences guarantee that at least one of the two sees
//! the other's store, so a wake-up is never lost (`tests/loom.rs` checks
//! this). `publish` returns `true` exactly when the caller must wake the
//! peer.
//!
//! Closing is the kernel's decision (a copy of an end left by `fork` may
//! go while another lives on), but a dropped [`Consumer`] says it is going
//! as a new parking in its word, so the producer's next publish returns
//! `true` and its owner asks the kernel; the producer also looks at the
//! consumer's head at least every [`WINDOW`] bytes, for a consumer that
//! died without a word.
//!
//! Everything read from the peer's memory is untrusted: each index is
//! loaded once and checked, each slot access is masked, each message
//! length is checked, and a violation becomes a [`ProtocolError`].

#![deny(unsafe_code)]

#[allow(unsafe_code)]
#[cfg(not(loom))]
pub mod bulk;
#[allow(unsafe_code)]
mod consumer;
#[allow(unsafe_code)]
pub mod cpu;
#[allow(unsafe_code)]
pub mod data;
mod error;
pub mod frame;
#[allow(unsafe_code)]
#[cfg(not(loom))]
mod hot;
pub mod inline;
pub mod layout;
#[allow(unsafe_code)]
mod link;
#[allow(unsafe_code)]
pub mod local;
#[allow(unsafe_code)]
pub mod owed;
#[allow(unsafe_code)]
mod producer;
mod sync;
#[allow(unsafe_code)]
pub mod turns;

pub use consumer::Consumer;
pub use error::ProtocolError;
#[cfg(not(loom))]
pub use hot::{publish_lent, Hot};
pub use link::Keepalive;
pub use producer::{Producer, STALL_LOOKS, WINDOW};
