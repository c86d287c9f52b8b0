//! The ring against a hostile peer, driven by random scripts: the same
//! interpreter as the `hostile_peer` fuzz target (`fuzz/`), run on seeded
//! random inputs so the ordinary test run (and Miri) covers it.
//!
//! To replay a fuzzer's crash file: `SHMPIPE_SCRIPT=path cargo test -p
//! shmpipe-ring --test hostile replay`.

#![cfg(not(loom))] // these use std threads and the heap ring directly

#[path = "support/script.rs"]
mod script;

/// Scripts per test; far fewer under Miri.
const CASES: usize = if cfg!(miri) { 40 } else { 3_000 };

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

impl Rng {
    /// A script of random length whose mode byte has `set` bits set and
    /// `clear` bits cleared.
    fn script(&mut self, set: u8, clear: u8) -> Vec<u8> {
        let max = if cfg!(miri) { 200 } else { 3_000 };
        let len = 1 + self.upto(max - 1);
        let mut s: Vec<u8> = (0..len).map(|_| self.next() as u8).collect();
        s[0] = (s[0] | set) & !clear;
        s
    }
}

fn run_cases(seed: u64, set: u8, clear: u8, cases: usize) {
    let mut rng = Rng(seed);
    for case in 0..cases {
        let s = rng.script(set, clear);
        let r = std::panic::catch_unwind(|| script::run(&s));
        if r.is_err() {
            let path = std::env::temp_dir().join(format!("shmpipe-hostile-{seed:x}-{case}.bin"));
            let _ = std::fs::write(&path, &s);
            panic!(
                "script {case} of seed {seed:#x} failed; saved to {}",
                path.display()
            );
        }
    }
}

#[test]
fn hostile_scripts() {
    run_cases(0x5eed_0001, 0, 0x11, CASES);
}

#[test]
fn honest_scripts_match_the_model() {
    run_cases(0x5eed_0002, 0x10, 0x01, CASES);
}

#[test]
fn hostile_scripts_with_a_concurrent_scribbler() {
    run_cases(0x5eed_0003, 0x01, 0x10, CASES / 10);
}

#[test]
fn replay() {
    // A no-op unless SHMPIPE_SCRIPT names a file (a fuzzer artifact).
    if let Some(path) = std::env::var_os("SHMPIPE_SCRIPT") {
        script::run(&std::fs::read(path).expect("read SHMPIPE_SCRIPT"));
    }
}
