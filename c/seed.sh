#!/usr/bin/env bash
# Builds and runs the seeds' experiment in C (c/seed.c) against an
# installed libshmpipe: bash c/seed.sh [ITEMS] (default 10000000).
# Prints the seeds' lines: SHMEM Time, KERNEL Time, AFFINITY SHMEM, ...
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-c-temp.sh
cc -O2 -Wall -Wextra -Werror c/seed.c $(pkg-config --cflags --libs shmpipe) -o "$prefix/seed"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/seed" "$@"
