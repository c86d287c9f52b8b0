#!/usr/bin/env bash
# The README, tested as it is written: its blocks are taken from README.md
# itself, so they cannot drift from what a newcomer copies.
#
# A fresh copy of the clone (the files git tracks or would track; no
# target/) goes into a temporary folder as `shmpipe/`, beside a home of
# its own. Every block then runs as written, in a clean shell (`env -i`:
# HOME is that temporary home, PATH the caller's, the network settings,
# nothing else but the cargo settings below), in the copy:
#
#   ```sh         run with `bash -e`; a failing line fails the test
#   ```sh setup   the two set-up commands (bench.sh, test.sh): CI runs
#                 them itself, and this script is part of test.sh, so they
#                 are not run again here
#   ```sh examples  the example programs: `cargo test -p shmpipe
#                 --all-features` runs them (tests/examples.rs); here the
#                 list is checked against crates/shmpipe/examples
#   ```c          the first one is saved as prog.c, the program the C block builds
#   ```python     the first one is saved as example.py
#   ```toml       the first one is the dependency line: put into a new
#                 crate beside the copy, whose src/main.rs is the README's
#                 first ```rust block, built and run with `cargo run`
#
# Any other word after `sh` fails the test, so no block opts out unseen.
# What the blocks print must show they worked: ./prog prints hello, the
# Python example and the crate exit 0, `shmpipe` is on PATH after
# `cargo install` (CARGO_INSTALL_ROOT is the temporary home's ~/.cargo).
#
# Build caches, so that what the other tests of test.sh built is reused
# rather than built again: cargo's registry (CARGO_HOME), and the copy's
# target/ and python/target/ are links to this clone's (cargo names a
# workspace's crates by their path inside it, and tar keeps the files'
# times, so the copy's crates match the builds there). The new crate
# builds in target/readme-crate. Prints a cargo-style "test result:" line
# for test.sh's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/shmpipe" "$work/home/.cargo/bin" "$work/blocks"

# The copy: a clone's files, as they are in this working tree.
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$work/shmpipe"
target=${CARGO_TARGET_DIR:-$repo/target}
mkdir -p "$target" python/target
ln -s "$(cd "$target" && pwd)" "$work/shmpipe/target"
ln -s "$repo/python/target" "$work/shmpipe/python/target"

# The blocks: blocks/N.lang holds the body, blocks/N.info the info string.
awk -v dir="$work/blocks" '
    /^```/ && !on {
        n++; on = 1; body = dir "/" n ".body"; printf "" > body
        print substr($0, 4) > (dir "/" n ".info"); close(dir "/" n ".info")
        print NR > (dir "/" n ".line"); close(dir "/" n ".line")
        next
    }
    /^```$/ && on { on = 0; close(body); next }
    on { print >> body }
' README.md

cargo_bin=$(dirname "$(command -v cargo)")
# The machine's network settings (proxies, certificates, pip's index) are
# kept: a newcomer's shell has them too, and pip and cargo need them.
network=()
while IFS= read -r -d '' kv; do
    case "$kv" in
    http_proxy=* | https_proxy=* | no_proxy=* | HTTP_PROXY=* | HTTPS_PROXY=* | NO_PROXY=* | \
        PIP_* | SSL_CERT_* | REQUESTS_CA_BUNDLE=* | CURL_CA_BUNDLE=*) network+=("$kv") ;;
    esac
done < <(env -0)
clean() {
    env -i "${network[@]}" HOME="$work/home" PATH="$work/home/.cargo/bin:$cargo_bin:$PATH" \
        CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
        CARGO_INSTALL_ROOT="$work/home/.cargo" CARGO_TERM_COLOR=never "$@"
}

passed=0
failed=0
result() { # name, ok (0) or not, log file
    if [ "$2" -eq 0 ]; then
        echo "test readme::$1 ... ok ($(($(date +%s) - start)) s)"
        passed=$((passed + 1))
    else
        sed 's/^/    /' "$3"
        echo "test readme::$1 ... FAILED"
        failed=$((failed + 1))
    fi
}

first() { # the body of the first block whose info string is $1
    local f
    for f in $(ls "$work/blocks"/*.info | sort -V); do
        if [ "$(cat "$f")" = "$1" ]; then
            echo "${f%.info}.body"
            return
        fi
    done
    echo "test-readme: README.md has no \`\`\`$1 block" >&2
    echo /dev/null
}
cp "$(first c)" "$work/shmpipe/prog.c"
cp "$(first python)" "$work/shmpipe/example.py"

for info in $(ls "$work/blocks"/*.info | sort -V); do
    n=$(basename "$info" .info)
    body="$work/blocks/$n.body"
    line=$(cat "$work/blocks/$n.line")
    case "$(cat "$info")" in
    sh) ;;
    "sh setup")
        echo "test readme::block_line_$line ... skipped: a set-up command, run by CI itself"
        continue
        ;;
    "sh examples")
        start=$(date +%s)
        log="$work/$n.log"
        listed=$(grep -o -- '--example [a-z_]*' "$body" | awk '{print $2}' | sort)
        # soak is the crash tests' helper (minutes of traffic), not one to read.
        present=$(ls crates/shmpipe/examples | sed -n 's/\.rs$//p' | grep -vx soak | sort)
        if diff <(echo "$listed") <(echo "$present") >"$log" 2>&1; then rc=0; else rc=1; fi
        result "examples_listed_line_$line" "$rc" "$log"
        continue
        ;;
    sh*)
        echo "test readme::block_line_$line ... FAILED: unknown marker \`\`\`$(cat "$info")"
        failed=$((failed + 1))
        continue
        ;;
    *) continue ;;
    esac
    start=$(date +%s)
    log="$work/$n.log"
    set +e
    (cd "$work/shmpipe" && clean timeout 1800 bash -e -o pipefail "$body") >"$log" 2>&1
    rc=$?
    set -e
    # What the block must have shown, beyond exiting 0.
    if [ "$rc" -eq 0 ] && grep -q '^\./prog$' "$body" && ! grep -qx hello "$log"; then
        echo "./prog did not print hello" >>"$log"
        rc=1
    fi
    # install-c.sh strips the libraries of their debug info (the release
    # profile keeps it: the .so was 3.9 MB, the .a 11.6 MB).
    if [ "$rc" -eq 0 ] && grep -q 'install-c.sh ~/.local' "$body" && command -v readelf >/dev/null; then
        for lib in "$work/home/.local/lib/libshmpipe.so.0" "$work/home/.local/lib/libshmpipe.a"; do
            if readelf -S -W "$lib" 2>>"$log" | grep -q '\.debug_info'; then
                echo "$lib keeps its debug info ($(du -kL "$lib" | cut -f1) KiB)" >>"$log"
                rc=1
            fi
        done
    fi
    if [ "$rc" -eq 0 ] && grep -q '^cargo install' "$body" && [ ! -x "$work/home/.cargo/bin/shmpipe" ]; then
        echo "cargo install left no shmpipe in ~/.cargo/bin" >>"$log"
        rc=1
    fi
    result "block_line_$line" "$rc" "$log"
done

# The dependency line, in a new crate beside the clone, running the
# README's first Rust example.
start=$(date +%s)
log="$work/dependency.log"
set +e
(
    cd "$work" && clean cargo new -q --vcs none --bin hello &&
        grep -v '^\[dependencies\]$' "$(first toml)" >>hello/Cargo.toml &&
        cp "$(first rust)" hello/src/main.rs &&
        cd hello && clean CARGO_TARGET_DIR="$target/readme-crate" timeout 1800 cargo run -q
) >"$log" 2>&1
rc=$?
set -e
result path_dependency_runs_the_rust_example "$rc" "$log"

echo "$passed passed, $failed failed"
if [ "$failed" -eq 0 ]; then
    echo "test result: ok. $passed passed; $failed failed (README)"
else
    echo "test result: FAILED. $passed passed; $failed failed (README)"
    exit 1
fi
