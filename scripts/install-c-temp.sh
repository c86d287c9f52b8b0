#!/usr/bin/env bash
# Sourced (from the repository root) by c/seed.sh and scripts/test-c.sh:
# installs libshmpipe with scripts/install-c.sh into a fresh temporary
# prefix, removed when the caller exits, showing the build's output only if
# it fails; sets $prefix and points pkg-config at it.
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
bash scripts/install-c.sh "$prefix" >/dev/null 2>"$prefix/build.log" || {
    cat "$prefix/build.log" >&2
    exit 1
}
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
