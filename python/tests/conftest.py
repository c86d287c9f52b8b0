"""Shared fixtures: a watchdog over child processes, and a summary line in
cargo's format so scripts/test.sh counts pytest's results with cargo's."""

import multiprocessing as mp
import os
import signal

import pytest

START_METHODS = ["fork", "spawn", "forkserver"]

# How long any child may live: generous, so a slow machine never fails a
# test, yet a hang ends (and is reported) instead of stalling the suite.
CHILD_TIMEOUT = 60


class Children:
    """Starts child processes and kills whatever is left at teardown."""

    def __init__(self):
        self.procs = []

    def start(self, target, *args, method="fork"):
        p = mp.get_context(method).Process(target=target, args=args, daemon=True)
        p.start()
        self.procs.append(p)
        return p

    def join(self, p, timeout=CHILD_TIMEOUT):
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            pytest.fail(f"child {p.pid} did not finish within {timeout} s (killed)")
        return p.exitcode

    def kill_all(self):
        for p in self.procs:
            if p.is_alive():
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.join(5)


def wait_until_asleep(pid, timeout=CHILD_TIMEOUT):
    """Waits until process `pid` sleeps in the kernel (state S), so that a
    signal sent next finds it inside a blocking call, not before it: a
    sleep of fixed length is not enough on a loaded machine."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            # The state follows the command name's closing parenthesis.
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state == "S":
            return
        time.sleep(0.01)
    pytest.fail(f"child {pid} never went to sleep within {timeout} s")


@pytest.fixture
def children():
    c = Children()
    try:
        yield c
    finally:
        c.kill_all()


def pytest_terminal_summary(terminalreporter):
    stats = terminalreporter.stats
    passed = len(stats.get("passed", []))
    failed = len(stats.get("failed", [])) + len(stats.get("error", []))
    skipped = len(stats.get("skipped", [])) + len(stats.get("xfailed", []))
    verdict = "ok" if failed == 0 else "FAILED"
    terminalreporter.write_line(
        f"test result: {verdict}. {passed} passed; {failed} failed; {skipped} ignored (pytest)"
    )
