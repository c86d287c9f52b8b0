#!/usr/bin/env bash
# The C API's checks, run by scripts/test.sh: the committed header must be
# what cbindgen makes from crates/capi; the library is installed into a
# temporary prefix with scripts/install-c.sh; the C tests (c/test_capi.c,
# c/test_handles.c) and the seeds' program (c/seed.c) are compiled against
# the installed header and library through pkg-config with -Wall -Wextra
# -Werror, the tests under AddressSanitizer (with LeakSanitizer) and UBSan;
# the handles' tests also against a debug build of the library, whose
# Rust checks abort on a bad handle read that a release build would only
# misread; the seed is
# also linked against the static archive and run briefly, checking every
# value it streams. The conformance test of the header's inline path
# against the ring's Rust protocol (crates/capi/tests/conformance.rs) runs
# its C side (c/conformance_peer.c), built here under the same sanitizers,
# against Rust ends in the test's own process.
#
# Prints "N passed, M failed" and the same as a cargo-style "test result:"
# line, which test.sh's summary counts; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null; }
if ! need cc || ! need pkg-config; then
    echo "test-c: installing a C compiler and pkg-config" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev pkg-config >/dev/null
fi

bash scripts/install-c.sh --check-header

source scripts/install-c-temp.sh
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
warn=(-Wall -Wextra -Werror -std=c11)

# The tests, under the sanitizers, against the shared library.
cc "${warn[@]}" -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/test_capi.c $(pkg-config --cflags --libs shmpipe) -o "$prefix/test_capi"
cc "${warn[@]}" -pthread -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/test_handles.c $(pkg-config --cflags --libs shmpipe) \
    -o "$prefix/test_handles"
# The same against a debug build of the library.
cargo rustc -q -p shmpipe-capi --crate-type cdylib
debug_lib="$prefix/debug"
mkdir -p "$debug_lib"
cp "${CARGO_TARGET_DIR:-target}/debug/libshmpipe_capi.so" "$debug_lib/libshmpipe.so"
cc "${warn[@]}" -pthread -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/test_handles.c $(pkg-config --cflags shmpipe) \
    -L"$debug_lib" -lshmpipe -Wl,-rpath,"$debug_lib" -o "$prefix/test_handles_debug"
# When a writer learns that the reader is gone, under the sanitizers.
cc "${warn[@]}" -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/test_epipe.c $(pkg-config --cflags --libs shmpipe) -o "$prefix/test_epipe"
# One end used by several processes in turn, under the sanitizers.
cc "${warn[@]}" -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/test_shared.c $(pkg-config --cflags --libs shmpipe) -o "$prefix/test_shared"
# The C side of the conformance test, under the sanitizers.
cc "${warn[@]}" -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=undefined c/conformance_peer.c $(pkg-config --cflags --libs shmpipe) \
    -o "$prefix/conformance_peer"
# The README's example, as printed there.
awk '/^```c$/ {on = 1; next} /^```$/ {on = 0} on' README.md >"$prefix/readme.c"
cc "${warn[@]}" "$prefix/readme.c" $(pkg-config --cflags --libs shmpipe) -o "$prefix/readme"
# The seed, against the shared library and against the static archive.
cc "${warn[@]}" -O2 c/seed.c $(pkg-config --cflags --libs shmpipe) -o "$prefix/seed"
cc "${warn[@]}" -O2 c/seed.c $(pkg-config --cflags shmpipe) "$prefix/lib/libshmpipe.a" \
    $(pkg-config --static --libs shmpipe | sed 's/-lshmpipe//') -o "$prefix/seed-static"

passed=0
failed=0
# Runs a C test program (its output's last line: "N passed, M failed"),
# renaming its tests with $2 when given, and adds up its counts.
run_c_tests() {
    local out="$prefix/$1.out" counts
    set +e
    ASAN_OPTIONS=detect_leaks=1 "$prefix/$1" | sed "s/^test c::/test c::$2/" | tee "$out"
    set -e
    counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
    passed=$((passed + $(echo "${counts:-0 passed, 1 failed}" | awk '{print $1}')))
    failed=$((failed + $(echo "${counts:-0 passed, 1 failed}" | awk '{print $3}')))
}
run_c_tests test_capi ""
run_c_tests test_handles ""
run_c_tests test_handles_debug "debug::"
run_c_tests test_epipe ""
run_c_tests test_shared ""

if [ "$("$prefix/readme")" = hello ]; then
    echo "test c::readme_example ... ok"
    passed=$((passed + 1))
else
    echo "test c::readme_example ... FAILED"
    failed=$((failed + 1))
fi

# The seed, both links, a short run each: every value is checked.
for seed in seed seed-static; do
    if "$prefix/$seed" 20000 >"$prefix/$seed.out" 2>&1 && grep -q '^SHMEM Time:' "$prefix/$seed.out"; then
        echo "test c::$seed ... ok"
        passed=$((passed + 1))
    else
        cat "$prefix/$seed.out"
        echo "test c::$seed ... FAILED"
        failed=$((failed + 1))
    fi
done

# The installed preload library of `shmpipe run`, set by hand.
if [ "$(LD_PRELOAD="$prefix/lib/libshmpipe-preload.so" sh -c 'seq 1 20000 | sort -rn | head -1' 2>&1)" = 20000 ]; then
    echo "test c::preload_installed ... ok"
    passed=$((passed + 1))
else
    echo "test c::preload_installed ... FAILED"
    failed=$((failed + 1))
fi

# The inline path against the ring's Rust ends, across processes: cargo's
# own summary is renamed so that scripts/test.sh counts these tests once,
# in the total below.
conf="$prefix/conformance.out"
set +e
SHMPIPE_C_PEER="$prefix/conformance_peer" ASAN_OPTIONS=detect_leaks=1 \
    cargo test -p shmpipe-capi --test conformance -- --include-ignored >"$conf" 2>&1
conf_rc=$?
set -e
sed -n 's/^test \([a-z_]*\) \.\.\. /test c::conformance::\1 ... /p' "$conf"
conf_counts=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed' "$conf" | tail -1)
if [ "$conf_rc" -ne 0 ] || [ -z "$conf_counts" ]; then
    sed -e 's/^test result:/conformance result:/' -e 's/; \([0-9]* failed\)/, \1/' "$conf"
fi
passed=$((passed + $(echo "${conf_counts:-x x x 0}" | awk '{print $4}')))
conf_failed=$(echo "${conf_counts:-x x x 0 x 1}" | awk '{print $6}')
if [ "$conf_rc" -ne 0 ] && [ "$conf_failed" -eq 0 ]; then
    conf_failed=1 # it did not build, or did not finish
fi
failed=$((failed + conf_failed))

echo "$passed passed, $failed failed"
if [ "$failed" -eq 0 ]; then
    echo "test result: ok. $passed passed; $failed failed (C API)"
else
    echo "test result: FAILED. $passed passed; $failed failed (C API)"
    exit 1
fi
