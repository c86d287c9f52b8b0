//! Pipes between processes on one Linux machine whose data path never
//! enters the kernel.
//!
//! A pipe is a single-producer, single-consumer ring in shared memory. The
//! kernel is used only to create and map the memory, to pass descriptors,
//! to check who connects (once, in [`Listener`]), and to let an idle side
//! sleep and be woken. While both sides are busy, moving data makes no
//! system call.
//!
//! * [`pipe`] gives a byte stream ([`Reader`]: `io::Read`, [`Writer`]:
//!   `io::Write`), [`message_pipe`] a message pipe ([`Receiver`],
//!   [`Sender`]); [`Options`] sets the capacity and the spin time.
//! * Ends survive `fork`, can be handed to a spawned program
//!   ([`Reader::pass_to`] and friends) and live as long as any copy does:
//!   the pipe closes when every copy of an end is gone, as the kernel
//!   decides for a kernel pipe.
//! * [`Listener`] and [`connect`] make connections by filesystem path,
//!   each a pair of pipes, one each way; [`WaitSet`] waits on many ends
//!   from one thread.
//!
//! # Features and the crates behind them
//!
//! This crate is the facade: every path a program writes is here, and each
//! layer is a crate of its own, each depending only on those below it.
//!
//! | module or item | feature | crate |
//! | --- | --- | --- |
//! | [`pipe`], [`message_pipe`], [`Listener`], [`connect`], [`WaitSet`], [`handoff`](Reader::pass_to) | (always) | `shmpipe-core` |
//! | [`tokio`]: async ends | `tokio` | `shmpipe-core` (feature `tokio`) |
//! | [`rpc`]: [`#[shmpipe::service]`][service], clients and servers | `rpc` | `shmpipe-rpc`, `shmpipe-macros` |
//! | [`fs`]: the file server and its client | `rpc` | `shmpipe-fs` |
//! | the ring protocol itself | (always, underneath) | `shmpipe-ring` |
//!
//! Documentation built without a feature leaves its modules out. To read
//! every module's, build it with all features:
//! `cargo doc -p shmpipe --all-features --no-deps --open`.
//!
//! # Example programs
//!
//! `crates/shmpipe/examples` in the repository holds whole programs, each
//! run with `cargo run -p shmpipe --example NAME` (add `--features rpc`
//! or `--features tokio` where named) and run by the crate's tests:
//!
//! * `two_processes`, `ping_pong`: a pipe to a spawned child process;
//!   `echo_server PATH`: a [`WaitSet`] serving many clients from one thread.
//! * `rpc_server PATH` and `rpc_client PATH` (`rpc`): a
//!   `#[shmpipe::service]` interface served and called from two terminals.
//! * `file_server [DIR]` (`rpc`): a directory served and read back.
//! * `tokio_echo [CLIENTS]` (`tokio`): an echo server on a tokio runtime.
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
//!
// The table's links to modules of features that are off lead back to it.
#![cfg_attr(feature = "tokio", doc = "[`tokio`]: crate::tokio")]
#![cfg_attr(feature = "rpc", doc = "[`rpc`]: crate::rpc")]
#![cfg_attr(feature = "rpc", doc = "[`fs`]: crate::fs")]
#![cfg_attr(feature = "rpc", doc = "[service]: crate::service")]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`tokio`]: #features-and-the-crates-behind-them"
)]
#![cfg_attr(
    not(feature = "rpc"),
    doc = "[`rpc`]: #features-and-the-crates-behind-them"
)]
#![cfg_attr(
    not(feature = "rpc"),
    doc = "[`fs`]: #features-and-the-crates-behind-them"
)]
#![cfg_attr(
    not(feature = "rpc"),
    doc = "[service]: #features-and-the-crates-behind-them"
)]
#![forbid(unsafe_code)]

pub use shmpipe_core::*;

// Inlined, so that `cargo doc --no-deps` documents them as modules here.
#[cfg(feature = "rpc")]
#[doc(inline)]
pub use shmpipe_rpc as rpc;

#[cfg(feature = "rpc")]
#[doc(inline)]
pub use shmpipe_fs as fs;

/// Makes a trait an RPC interface: see [`rpc`] (feature `rpc`).
#[cfg(feature = "rpc")]
pub use shmpipe_macros::service;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
