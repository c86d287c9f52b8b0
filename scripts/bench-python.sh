#!/usr/bin/env bash
# The Python binding's bench, `python -m shmpipe.bench`, in a virtual
# environment of its own (target/python-bench-venv, made and filled with
# `pip install ./python[bench]` when missing; REBUILD=1 rebuilds it).
# Arguments go to the bench, e.g.:
#   scripts/bench-python.sh --quick
#   scripts/bench-python.sh --plot docs/bench --json python-bench.json
# scripts/bench.sh runs it after the Rust bench when PYTHON_BENCH=1.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-bench-venv
python=${PYTHON:-python3}
if [[ -n ${REBUILD:-} || ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import shmpipe, faster_fifo, matplotlib' 2>/dev/null; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "./python[bench]"
else
    # Keep the installed package in step with the source.
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall ./python
fi
exec "$venv/bin/python" -m shmpipe.bench "$@"
