#!/usr/bin/env bash
# The long hardening runs behind SECURITY.md (not part of CI, which runs
# the bounded versions through `cargo test`):
#   crash trials, hostile-peer rounds, leak cycles, the soak, and the
#   libFuzzer target (if nightly and cargo-fuzz are installed).
#
# Usage: scripts/harden.sh
# Knobs (environment):
#   SHMPIPE_CRASH_TRIALS    trials per crash scenario      (default 1000)
#   SHMPIPE_HOSTILE_ROUNDS  hostile-peer rounds            (default 20000)
#   SHMPIPE_HOSTILE_SEED    first hostile seed             (default: the time)
#   SHMPIPE_LEAK_CYCLES     create/drop cycles of each kind (default 100000)
#   SOAK_BYTES              bytes across both pipes, per soak mode (default 10G)
#   FUZZ_SECONDS            libFuzzer run time             (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/harden}"
export SHMPIPE_CRASH_TRIALS="${SHMPIPE_CRASH_TRIALS:-1000}"
export SHMPIPE_HOSTILE_ROUNDS="${SHMPIPE_HOSTILE_ROUNDS:-20000}"
export SHMPIPE_HOSTILE_SEED="${SHMPIPE_HOSTILE_SEED:-$(date +%s)}"
export SHMPIPE_LEAK_CYCLES="${SHMPIPE_LEAK_CYCLES:-100000}"
SOAK_BYTES="${SOAK_BYTES:-10G}"
FUZZ_SECONDS="${FUZZ_SECONDS:-300}"

# Tests run in the test profile (overflow checks on), one binary at a time.
run_test() {
    echo "== $1"
    cargo test -p shmpipe --test "$1" -- --nocapture --test-threads=1 2>&1 |
        grep -E '^(test |leaks:|[a-z].*(trials|rounds|cloexec|writers)|watchdog|thread .* panicked)'
}

echo "== crash trials: $SHMPIPE_CRASH_TRIALS per scenario"
run_test crash
echo "== hostile rounds: $SHMPIPE_HOSTILE_ROUNDS from seed $SHMPIPE_HOSTILE_SEED"
run_test hostile
run_test access
echo "== leaks: $SHMPIPE_LEAK_CYCLES cycles of each kind"
run_test leaks

echo "== soak: $SOAK_BYTES bytes, stream and message mode"
cargo build -q --release -p shmpipe --example soak
"$CARGO_TARGET_DIR/release/examples/soak" --bytes "$SOAK_BYTES"
"$CARGO_TARGET_DIR/release/examples/soak" --bytes "$SOAK_BYTES" --messages

echo "== fuzz: hostile_end for $FUZZ_SECONDS s (AddressSanitizer)"
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    bash scripts/fuzz-hostile-end.sh "$FUZZ_SECONDS"
else
    echo "skipped: needs nightly and cargo-fuzz (rustup toolchain install nightly; cargo install cargo-fuzz)"
fi
echo "== harden: all passed"
