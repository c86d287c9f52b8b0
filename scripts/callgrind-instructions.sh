#!/usr/bin/env bash
# Instructions per message for shmpipe's stream-8B and roundtrip-8B, counted
# with valgrind's callgrind (this machine has no hardware counters): builds
# `shmpipe` and runs `shmpipe instructions`, which `shmpipe bench` also
# reports. See crates/bench/src/instructions.rs for how it counts.
#
# Usage: scripts/callgrind-instructions.sh [path/to/shmpipe]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [[ -z $bin ]]; then
    CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench} cargo build --release -q -p shmpipe-cli
    bin=${CARGO_TARGET_DIR:-target/bench}/release/shmpipe
fi
exec "$bin" instructions
