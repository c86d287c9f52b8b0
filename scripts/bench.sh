#!/usr/bin/env bash
# Builds `shmpipe` in release mode (saying so first: minutes the first
# time) and runs `shmpipe bench` with the given arguments, e.g.:
#   scripts/bench.sh --quick                 # under two minutes
#   scripts/bench.sh --quick --json > bench.json
#   scripts/bench.sh --plot docs/bench       # the careful run, with charts
#   scripts/bench.sh --filter shmpipe,pipe,roundtrip-8B
# Set FEATURES=peers to include iceoryx2 and shmem-ipc (slow to build);
# PYTHON_BENCH=1 to run `python -m shmpipe.bench` afterwards
# (scripts/bench-python.sh; its arguments in PYTHON_BENCH_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench}
features=()
[[ -n ${FEATURES:-} ]] && features=(--features "$FEATURES")
exe="$CARGO_TARGET_DIR/release/shmpipe"
say() { echo "bench.sh: $*" >&2; }
say "building $exe (cargo build --release -p shmpipe-cli ${features[*]}):" \
    "a few minutes the first time, seconds after"
start=$(date +%s)
cargo build --release -q -p shmpipe-cli "${features[@]}"
say "built in $(($(date +%s) - start)) s"
# The instruction counts need valgrind; install it where we may (the bench
# says so and goes on without them where we may not).
apt_install() {
    "$@" apt-get install -y -qq valgrind >/dev/null 2>&1 ||
        { "$@" apt-get update -qq >/dev/null 2>&1 && "$@" apt-get install -y -qq valgrind >/dev/null 2>&1; } ||
        echo "bench.sh: could not install valgrind" >&2
}
if ! command -v valgrind >/dev/null && command -v apt-get >/dev/null; then
    if [[ $(id -u) == 0 ]]; then
        say "installing valgrind for the instruction counts: apt-get install valgrind"
        apt_install
    elif sudo -n true 2>/dev/null; then
        say "installing valgrind for the instruction counts: sudo apt-get install valgrind"
        apt_install sudo
    fi
fi
if [[ -n ${PYTHON_BENCH:-} ]]; then
    # PYTHON_BENCH=1: then the Python binding's bench (PYTHON_BENCH_ARGS).
    "$exe" bench "$@"
    exec bash scripts/bench-python.sh ${PYTHON_BENCH_ARGS:-}
fi
exec "$exe" bench "$@"
