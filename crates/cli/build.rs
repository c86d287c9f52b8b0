//! Builds the preload library (`crates/preload`) and leaves it in OUT_DIR,
//! where `src/run.rs` embeds it: `shmpipe run` must work from a plain
//! `cargo build` and after `cargo install --path crates/cli`, which
//! installs the binary alone.
//!
//! The library is compiled by calling rustc directly, not a nested cargo:
//! it has no dependencies, so one rustc run is the whole build, and it needs
//! no registry (offline CI), no lock of the target directory the outer
//! cargo holds, and no Cargo.lock (`cargo install` resolves its own).
//! Its lints and tests run in the workspace as any member's do.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let src = manifest.join("../preload/src");
    println!("cargo:rerun-if-changed={}", src.display());
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let lib = out.join("libshmpipe_preload.so");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("cargo sets it");
    // Always optimised (it sits under every call a program makes), without
    // debug info or symbol table (it is embedded in every `shmpipe`), and
    // panics abort: none should happen, and none may unwind into C.
    let status = Command::new(&rustc)
        .args(["--crate-name", "shmpipe_preload", "--crate-type", "cdylib"])
        .args([
            "--edition",
            "2021",
            "--target",
            &target,
            "--cap-lints",
            "allow",
        ])
        .args([
            "-C",
            "opt-level=3",
            "-C",
            "codegen-units=1",
            "-C",
            "panic=abort",
        ])
        .args(["-C", "debuginfo=0", "-C", "strip=symbols"])
        .arg("-o")
        .arg(&lib)
        .arg(src.join("lib.rs"))
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", PathBuf::from(&rustc).display()));
    assert!(
        status.success(),
        "rustc failed to build the preload library"
    );
    let bytes = std::fs::read(&lib).expect("read the preload library");
    // The file name `shmpipe run` writes it under: a different build gets a
    // different file, so a running program's children keep loading theirs.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
    for b in &bytes {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    println!("cargo:rustc-env=SHMPIPE_PRELOAD_HASH={hash:016x}");
}
