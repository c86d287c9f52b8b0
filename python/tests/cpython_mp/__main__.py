"""Runs CPython's connection tests against shmpipe under fork, spawn and
forkserver, each in a process of its own, and prints the counts per start
method and a summary line in cargo's format (for scripts/test.sh)."""

import subprocess
import sys

METHODS = ["fork", "spawn", "forkserver"]

RUNNER = r"""
import sys, unittest
module = __import__("cpython_mp." + sys.argv[1], fromlist=["x"])
suite = unittest.defaultTestLoader.loadTestsFromModule(module)
result = unittest.TextTestRunner(verbosity=2).run(suite)
print("counts: run=%d failures=%d errors=%d skipped=%d xfail=%d xpass=%d" % (
    result.testsRun, len(result.failures), len(result.errors),
    len(result.skipped), len(result.expectedFailures),
    len(result.unexpectedSuccesses)))
sys.exit(0 if result.wasSuccessful() else 1)
"""


def main():
    totals = dict(passed=0, failed=0, ignored=0)
    ok = True
    for method in METHODS:
        out = subprocess.run(
            [sys.executable, "-c", RUNNER, method],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        sys.stdout.write(out.stdout)
        line = [l for l in out.stdout.splitlines() if l.startswith("counts: ")]
        if not line:
            print(f"cpython-mp {method}: no result (exit {out.returncode})")
            totals["failed"] += 1
            ok = False
            continue
        c = dict(kv.split("=") for kv in line[-1][len("counts: "):].split())
        c = {k: int(v) for k, v in c.items()}
        failed = c["failures"] + c["errors"] + c["xpass"]
        passed = c["run"] - failed - c["skipped"] - c["xfail"]
        print(
            f"cpython-mp {method}: {passed} passed, {c['xfail']} expected failures, "
            f"{c['skipped']} skipped, {failed} failed (unexpected passes: {c['xpass']})"
        )
        totals["passed"] += passed
        totals["failed"] += failed
        totals["ignored"] += c["skipped"] + c["xfail"]
        ok = ok and out.returncode == 0 and failed == 0
    verdict = "ok" if ok else "FAILED"
    print(
        f"test result: {verdict}. {totals['passed']} passed; {totals['failed']} failed; "
        f"{totals['ignored']} ignored (CPython's multiprocessing tests)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
