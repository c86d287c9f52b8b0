#!/usr/bin/env bash
# The Python binding (python/): lints its PyO3 crate (outside the Cargo
# workspace, so the Rust-only checks need no Python), builds the wheels
# once, tests them on every CPython from 3.9 to 3.13 this machine has,
# and runs CPython's own multiprocessing connection tests against
# shmpipe under fork, spawn and forkserver (python/tests/cpython_mp).
#
# The wheels: one cp311-abi3 wheel (the stable ABI has the buffer
# protocol from 3.11 on) for 3.11, 3.12 and 3.13, and one version-specific
# wheel each for 3.9 and 3.10. They share one Cargo target folder, so the
# crates below the binding are compiled once.
#
# pytest's counts come out as cargo-style `test result:` lines
# (python/tests/conftest.py, python/tests/cpython_mp), which test.sh's
# summary adds up; a failure fails this script. A CPython that is missing
# is reported, not tested; none at all is an error.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --manifest-path python/Cargo.toml --check
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings

# The interpreter for CPython $1 (say 3.10): python3.10 on PATH, else
# pyenv's newest 3.10.x; nothing if neither runs.
find_python() {
    local v=$1 p
    for p in "$(command -v "python$v" 2>/dev/null)" \
        $(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V -r); do
        if [[ -n $p ]] && "$p" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$v'" 2>/dev/null; then
            echo "$p"
            return
        fi
    done
}

# A fresh virtual environment at $2 made by interpreter $1.
make_venv() {
    rm -rf "$2"
    if ! "$1" -m venv "$2" 2>/dev/null; then
        # Debian's python3 keeps venv (ensurepip) in a package of its own.
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            echo "test-python: installing python3-venv with apt-get"
            apt-get install -y -qq python3-venv >/dev/null 2>&1 ||
                { apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null; }
        fi
        rm -rf "$2"
        "$1" -m venv "$2"
    fi
}

declare -A python
for v in 3.9 3.10 3.11 3.12 3.13; do
    p=$(find_python "$v")
    if [[ -n $p ]]; then
        python[$v]=$p
    else
        echo "test-python: CPython $v not found on this machine: NOT TESTED" >&2
    fi
done
if [[ ${#python[@]} == 0 ]]; then
    echo "test-python: needs at least one CPython from 3.9 to 3.13" >&2
    exit 1
fi

root=target/python
rm -rf "$root/wheels"
mkdir -p "$root"

# Each CPython's environment with the test dependencies (pyproject's
# `test` extra), installed in the background while the wheels build: the
# downloads then cost no time of their own.
test_deps=$(sed -n 's/^test = \[\(.*\)\]$/\1/p' python/pyproject.toml | tr -d '",')
declare -A installing
for v in "${!python[@]}"; do
    make_venv "${python[$v]}" "$root/venv-$v"
    # shellcheck disable=SC2086 # a list of requirements
    "$root/venv-$v/bin/pip" install -q --disable-pip-version-check $test_deps \
        >"$root/venv-$v.log" 2>&1 &
    installing[$v]=$!
done

# The test wheels skip the release profile's link-time optimisation and
# single codegen unit (python/Cargo.toml): same code, built faster (89 s
# against 120 s on a 2-CPU guest). The README's `pip install ./python`
# builds the shipped way.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
start=$(date +%s)
make_venv "${python[3.11]:-${python[3.12]:-${python[3.13]:-${python[3.10]:-${python[3.9]}}}}}" "$root/build-venv"
"$root/build-venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.9.4,<2"
maturin=$root/build-venv/bin/maturin
abi3_by=""
for v in 3.11 3.12 3.13; do
    if [[ -n ${python[$v]:-} ]]; then abi3_by=${python[$v]}; break; fi
done
if [[ -n $abi3_by ]]; then
    "$maturin" build --release --quiet -m python/Cargo.toml --features abi3 -i "$abi3_by" -o "$root/wheels"
fi
for v in 3.9 3.10; do
    if [[ -n ${python[$v]:-} ]]; then
        "$maturin" build --release --quiet -m python/Cargo.toml -i "${python[$v]}" -o "$root/wheels"
    fi
done
echo "test-python: wheels built in $(($(date +%s) - start)) s:"
ls "$root/wheels"

# The wheel CPython $1 installs: its own, or the abi3 one.
wheel_for() {
    local tag=cp${1/./}
    ls "$root/wheels"/shmpipe-*-"$tag"-"$tag"-*.whl 2>/dev/null ||
        ls "$root/wheels"/shmpipe-*-cp311-abi3-*.whl
}

for v in 3.9 3.10 3.11 3.12 3.13; do
    [[ -n ${python[$v]:-} ]] || continue
    venv=$root/venv-$v
    if ! wait "${installing[$v]}"; then
        cat "$venv.log" >&2
        echo "test-python: CPython $v: installing the test dependencies failed" >&2
        exit 1
    fi
    start=$(date +%s)
    wheel=$(wheel_for "$v")
    "$venv/bin/pip" install -q --disable-pip-version-check "$wheel[test]"
    echo "test-python: CPython $v: $(basename "$wheel"), tests start after $(($(date +%s) - start)) s of installing"
    # From the repository root, so `import shmpipe` finds the installed
    # package rather than the source folder python/shmpipe.
    "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider --durations=3
done

# CPython's own tests need its `test` package, which CPython 3.11's
# install has here (some distributions ship it apart, or not at all).
if [[ -n ${python[3.11]:-} ]] && "$root/venv-3.11/bin/python" -c 'import test._test_multiprocessing' 2>/dev/null; then
    start=$(date +%s)
    (cd python/tests && "../../$root/venv-3.11/bin/python" -m cpython_mp)
    echo "test-python: CPython's multiprocessing tests took $(($(date +%s) - start)) s"
else
    echo "test-python: CPython 3.11 with its test package not found: CPython's multiprocessing tests NOT RUN" >&2
fi
