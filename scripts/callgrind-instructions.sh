#!/usr/bin/env bash
# Instructions per message for shmpipe's stream-8B and roundtrip-8B, counted
# with valgrind's callgrind (this machine has no hardware counters).
#
# `shmpipe probe TEST N` moves N messages through shmpipe in one thread, so
# nothing waits or spins; running it for two counts and taking the
# difference cancels start-up and set-up. User-space instructions only:
# callgrind does not see the kernel (the data path should make no system
# call; `strace -f -c` confirms that).
#
# Usage: scripts/callgrind-instructions.sh [path/to/shmpipe]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [[ -z $bin ]]; then
    CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/bench} cargo build --release -q -p shmpipe-cli
    bin=${CARGO_TARGET_DIR:-target/bench}/release/shmpipe
fi
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Total instructions (Ir) of one probe run.
count() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" probe "$1" "$2" >/dev/null 2>"$tmp/log" ||
        { cat "$tmp/log" >&2; exit 1; }
    awk '/^summary:/ { print $2 }' "$tmp/out"
}

lo=10000
hi=60000
for test in stream-8B roundtrip-8B; do
    a=$(count "$test" "$lo")
    b=$(count "$test" "$hi")
    per=$(awk -v a="$a" -v b="$b" -v n=$((hi - lo)) 'BEGIN { printf "%.1f", (b - a) / n }')
    case $test in
        stream-8B) what="per 8-byte item (one write + one read)" ;;
        roundtrip-8B) what="per round trip (two writes + two reads)" ;;
    esac
    echo "shmpipe $test: $per instructions $what"
done
