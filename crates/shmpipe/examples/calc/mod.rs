//! The interface `rpc_server` serves and `rpc_client` calls: one trait,
//! compiled into both programs. `#[shmpipe::service]` makes `CalcClient`
//! (the stubs) and `CalcServer` (the dispatch) from it; the interface's
//! name, version and a hash of its signatures are checked at connect.

// Each program uses only its own half of what the attribute generates.
#![allow(dead_code)]

/// A small calculator, one method per kind of argument.
#[shmpipe::service(version = 1)]
pub trait Calc {
    /// Plain data in and out: the call takes the client's fast path.
    fn add(&self, a: u32, b: u32) -> u32;
    /// Text in, text out.
    fn upper(&self, text: &str) -> String;
    /// Fills the caller's buffer in place with `seed, seed + 1, ...` and
    /// returns how many bytes it wrote.
    fn count_up(&self, seed: u8, out: &mut [u8]) -> u32;
}
