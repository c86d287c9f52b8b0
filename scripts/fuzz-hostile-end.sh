#!/usr/bin/env bash
# Runs shmpipe's `hostile_end` fuzz target (AddressSanitizer) for SECONDS
# and prints libFuzzer's summary lines. Needs nightly and cargo-fuzz; the
# callers (test.sh, harden.sh) check for them.
#
# Usage: scripts/fuzz-hostile-end.sh SECONDS
set -euo pipefail
cd "$(dirname "$0")/../crates/shmpipe"
mkdir -p fuzz/corpus/hostile_end
cargo +nightly fuzz run hostile_end fuzz/corpus/hostile_end -- \
    -max_total_time="${1:?seconds}" -print_final_stats=1 2>&1 |
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==ERROR|SUMMARY)'
