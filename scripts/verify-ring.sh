#!/usr/bin/env bash
# Checks the ring crate (crates/ring), and the preload library's hand-over
# slot protocol and resident ring, with the tools that prove them:
#   1. loom: the models in crates/ring/tests/loom.rs (orderings, no lost
#      wake-up, EOF and broken pipe), loom_readiness.rs, loom_owed.rs
#      (the list of owed wakes) and loom_turns.rs (copies of an end taking
#      turns), in their own target dir; and the models of the preload
#      library's hand-over slot protocol (crates/preload/src/slot_protocol/
#      loom_models.rs), of its signal gate (src/signal_gate/
#      loom_models.rs), of stage 2b's resident ring (src/
#      resident_protocol/loom_models.rs) and of the switch that turns
#      rings off (src/ring_switch/loom_models.rs), which run the very code
#      the library ships;
#   2. Miri: the whole shmpipe-ring test suite under the interpreter;
#   3. a bounded libFuzzer run of the hostile_peer target (ASan), for
#      FUZZ_SECONDS seconds (default 30, a bounded run for CI).
# Installs what it needs (nightly, Miri, cargo-fuzz); a tool that cannot be
# installed is skipped with a message, never silently. Runs every section
# and exits non-zero if any failed.
#
#   FUZZ_SECONDS=300 scripts/verify-ring.sh      # a longer fuzz run
#   LOOM_MAX_PREEMPTIONS=5 scripts/verify-ring.sh  # deeper loom search
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

FUZZ_SECONDS=${FUZZ_SECONDS:-30}
failed=()

section() { printf '\n==== verify-ring: %s ====\n' "$*"; }
timed() {
    local start=$SECONDS
    "$@"
    local rc=$?
    echo "(took $((SECONDS - start)) s, exit $rc)"
    return $rc
}

have_nightly() {
    rustup run nightly rustc --version >/dev/null 2>&1 && return 0
    echo "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1
}

# ---- loom ----
# Built in one cargo run first, so that the models' crates (one codegen
# unit each) compile side by side; each then runs on its own.
section "loom: building the models"
if ! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom timed cargo test --release --no-run \
    -p shmpipe-ring --test loom --test loom_readiness --test loom_owed --test loom_turns; then
    failed+=(loom-build)
fi
for model in loom loom_readiness loom_owed loom_turns; do
    section "loom (crates/ring/tests/$model.rs)"
    if ! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
        timed cargo test -p shmpipe-ring --test "$model" --release -- --nocapture; then
        failed+=("${model//_/-}")
    fi
done

section "loom (crates/preload/src/slot_protocol/loom_models.rs, signal_gate/loom_models.rs, resident_protocol/loom_models.rs)"
if ! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    timed cargo test -p shmpipe-preload --lib --release -- --nocapture; then
    failed+=(loom-slot-protocol)
fi

# ---- Miri ----
section "Miri (cargo +nightly miri test -p shmpipe-ring)"
if have_nightly && { rustup run nightly cargo miri --version >/dev/null 2>&1 \
    || rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1; }; then
    # Strict provenance: the ring never makes pointers from integers.
    if ! MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}" \
        timed cargo +nightly miri test -p shmpipe-ring; then
        failed+=(miri)
    fi
else
    echo "miri: skipped (install failed)"
fi

# ---- fuzz ----
section "fuzz (hostile_peer, ${FUZZ_SECONDS} s, AddressSanitizer)"
if ! have_nightly; then
    echo "fuzz: skipped (no nightly toolchain)"
elif ! cargo fuzz --version >/dev/null 2>&1 \
    && ! { echo "installing cargo-fuzz"; cargo install cargo-fuzz --locked >/dev/null 2>&1; }; then
    echo "fuzz: skipped (cargo-fuzz could not be installed)"
else
    fuzz_log=$(mktemp)
    (
        cd crates/ring &&
            cargo +nightly fuzz build hostile_peer &&
            mkdir -p fuzz/corpus/hostile_peer &&
            timed cargo +nightly fuzz run hostile_peer fuzz/corpus/hostile_peer -- \
                -max_total_time="$FUZZ_SECONDS" -print_final_stats=1
    ) >"$fuzz_log" 2>&1
    rc=$?
    # The progress lines are many; show the outcome.
    grep -E '^(Done|#[0-9]+[[:space:]]+DONE)|stat::number_of_executed_units|stat::average_exec_per_sec|^\(took|ERROR|panicked|Failing input|artifact_prefix|fuzz/artifacts' "$fuzz_log"
    if [ $rc -ne 0 ]; then
        echo "fuzz: FAILED; the last lines of the log:"
        tail -n 60 "$fuzz_log"
        failed+=(fuzz)
    fi
    rm -f "$fuzz_log"
fi

section "summary"
if [ ${#failed[@]} -eq 0 ]; then
    echo "verify-ring: all passed"
else
    echo "verify-ring: FAILED: ${failed[*]}"
    exit 1
fi
