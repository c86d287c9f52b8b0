#!/usr/bin/env bash
# Runs every check of the project: formatting, clippy, all tests (unit,
# cross-process, hostile-peer and crash tests, doc tests), the loom models,
# Miri on the ring, and a bounded fuzz run. Installs what it needs; a tool
# that cannot be installed here (Miri, cargo-fuzz) is skipped with a
# message, never silently.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Each step says when it starts (minutes:seconds into the run), so a log
# shows what each part of the suite costs.
step() { printf '\n== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || echo "rustup: could not add rustfmt/clippy (using what is installed)"
cargo --version

step "fmt"
cargo fmt --all --check

# The checks' builds, made for speed of building: dependencies at
# opt-level 0 (the tests exercise our crates, which keep opt-level 1),
# line tables only for debug info, no incremental cache. On a 2-CPU guest
# the tests' build went from 14.0 to 6.7 minutes and the tests ran no
# slower. Plain `cargo test` keeps the profiles of Cargo.toml.
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
quick_deps=(--config 'profile.dev.package."*".opt-level=0')

# The bridge (feature zenoh) is built in the same cargo runs as the rest,
# so Zenoh and the crates below it are compiled once for clippy and once
# for the tests, with one set of features.
zenoh=shmpipe-bridge/zenoh,shmpipe-cli/zenoh

step "clippy (with the bridge's feature zenoh, and the bridge's crates without it)"
cargo clippy "${quick_deps[@]}" --workspace --all-targets --features "$zenoh" -- -D warnings
cargo clippy "${quick_deps[@]}" -p shmpipe-bridge -p shmpipe-cli --all-targets -- -D warnings

step "tests (the bridge's across two network namespaces)"
cargo test "${quick_deps[@]}" --workspace --features "$zenoh" 2>&1 | tee -a "$log"

step "C API: header, install, C tests under ASan (scripts/test-c.sh)"
bash scripts/test-c.sh 2>&1 | tee -a "$log"

if [ -f scripts/verify-ring.sh ]; then
    step "ring: loom, Miri, fuzz"
    bash scripts/verify-ring.sh 2>&1 | tee -a "$log"
fi

step "fuzz: a pipe end attached to a hostile peer's memory (shmpipe, 30 s)"
if cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked >/dev/null 2>&1; then
    bash scripts/fuzz-hostile-end.sh "${SHMPIPE_FUZZ_SECONDS:-30}"
else
    echo "fuzz: skipped (cargo-fuzz could not be installed)"
fi

step "python: pip install ./python into a fresh venv, pytest"
bash scripts/test-python.sh 2>&1 | tee -a "$log"

step "README: its install, build and run blocks, as written, in a fresh copy (scripts/test-readme.sh)"
bash scripts/test-readme.sh 2>&1 | tee -a "$log"

step "summary"
passed=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '; [0-9]+ failed' "$log" | awk '{s+=$2} END {print s+0}')
echo "all: $passed passed, $failed failed, in $((SECONDS / 60)) min $((SECONDS % 60)) s"
[ "$failed" -eq 0 ]
