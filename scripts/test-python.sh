#!/usr/bin/env bash
# The Python binding (python/): lints its PyO3 crate (outside the Cargo
# workspace, so the Rust-only checks need no Python), installs the package
# the way users do, `pip install ./python`, into a fresh virtual
# environment, and runs pytest there. pytest's counts come out as a
# cargo-style `test result:` line (python/tests/conftest.py), which
# test.sh's summary adds up; a failure fails this script.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null; then
    echo "test-python: needs CPython 3.9 or newer as \$PYTHON or python3" >&2
    exit 1
fi

cargo fmt --manifest-path python/Cargo.toml --check
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings

venv=target/python-venv
rm -rf "$venv"
if ! "$python" -m venv "$venv" 2>/dev/null; then
    # Debian's python3 keeps venv (ensurepip) in a package of its own.
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        apt-get install -y -qq python3-venv >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null; }
    fi
    rm -rf "$venv"
    "$python" -m venv "$venv"
fi
start=$(date +%s)
"$venv/bin/pip" install -q --disable-pip-version-check "./python[test]"
echo "test-python: pip install ./python[test] took $(($(date +%s) - start)) s"
# From the repository root, so `import shmpipe` finds the installed
# package rather than the source folder python/shmpipe.
"$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider --durations=5
