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
//! | `tokio`: async ends | `tokio` | `shmpipe-core` (feature `tokio`) |
//! | `rpc`: `#[shmpipe::service]`, clients and servers | `rpc` | `shmpipe-rpc`, `shmpipe-macros` |
//! | `fs`: the file server and its client | `rpc` | `shmpipe-fs` |
//! | the ring protocol itself | (always, underneath) | `shmpipe-ring` |
//!
//! To read the documentation of every module, build it with all features:
//! `cargo doc -p shmpipe --all-features --no-deps --open`.
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

#![forbid(unsafe_code)]

pub use shmpipe_core::*;

/// Remote procedure calls with generated stubs (the `shmpipe-rpc` crate).
#[cfg(feature = "rpc")]
pub use shmpipe_rpc as rpc;

/// The file server and its client (the `shmpipe-fs` crate).
#[cfg(feature = "rpc")]
pub use shmpipe_fs as fs;

/// Makes a trait an RPC interface: see [`rpc`] (feature `rpc`).
#[cfg(feature = "rpc")]
pub use shmpipe_macros::service;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
