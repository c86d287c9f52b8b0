#!/usr/bin/env bash
# Builds `shmpipe` in release mode and runs `shmpipe bench` with the given
# arguments, e.g.:
#   scripts/bench.sh --quick                 # under two minutes
#   scripts/bench.sh --quick --json > bench.json
#   scripts/bench.sh --plot docs/bench       # the careful run, with charts
#   scripts/bench.sh --filter shmpipe,pipe,roundtrip-8B
# Set FEATURES=peers to include iceoryx2 and shmem-ipc (slow to build).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench}
features=()
[[ -n ${FEATURES:-} ]] && features=(--features "$FEATURES")
cargo build --release -q -p shmpipe-cli "${features[@]}"
exec "$CARGO_TARGET_DIR/release/shmpipe" bench "$@"
