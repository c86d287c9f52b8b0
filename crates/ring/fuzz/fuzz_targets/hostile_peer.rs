//! The ring against a hostile peer: the input is a script of peer actions
//! (overwrite an index, a parked word, a header field, data bytes; publish
//! honest data; re-attach an end) interleaved with calls on the ends, and
//! in one mode a scribbler thread overwrites control fields concurrently.
//! The victim must only ever return data or a `ProtocolError`; see
//! `tests/support/script.rs`, which `tests/hostile.rs` also runs on stable.
//!
//! `cargo +nightly fuzz run hostile_peer` (from crates/ring); replay a
//! crash with `cargo +nightly fuzz run hostile_peer <file>` or
//! `SHMPIPE_SCRIPT=<file> cargo test -p shmpipe-ring --test hostile replay`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/script.rs"]
mod script;

fuzz_target!(|data: &[u8]| script::run(data));
