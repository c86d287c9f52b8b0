"""A sender learns that every copy of the peer's end is gone, as with
multiprocessing.Pipe: BrokenPipeError at the first send after the last
copy was closed or its process was killed while it waited in a recv, and
never because only a fork's copy was closed. Counts of sends, never times;
every child runs under the `children` watchdog (conftest.py)."""

import os
import signal
import time

import pytest

import shmpipe

# A ring far larger than what the tests send, so that a full ring cannot
# be what stops the sender.
BIG = 1 << 20
SLOW = 0.01


def asleep(pid):
    """Whether process `pid` sleeps in the kernel (state S)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "S"


def sends_until_broken(conn, gap, limit):
    """Sends 8-byte messages `gap` seconds apart until BrokenPipeError;
    returns how many succeeded (fails the test past `limit`)."""
    ok = 0
    while True:
        try:
            conn.send_bytes(b"12345678")
        except BrokenPipeError:
            return ok
        ok += 1
        assert ok <= limit, f"{ok} sends succeeded without a receiver"
        time.sleep(gap)


def test_first_send_after_close_fails():
    a, b = shmpipe.Pipe(capacity=BIG)
    a.send_bytes(b"seen")
    b.close()
    assert sends_until_broken(a, 0, 0) == 0
    with pytest.raises(BrokenPipeError):
        a.send_bytes(b"x" * 100000)


def read_five(conn, then):
    for _ in range(5):
        conn.recv_bytes()
    if then == "close":
        conn.close()
        os._exit(0)
    conn.recv_bytes()  # asleep until killed
    os._exit(3)


@pytest.mark.parametrize("then", ["close", "kill"])
def test_slow_sender_learns_at_its_next_send(children, then):
    a, b = shmpipe.Pipe(capacity=BIG)
    p = children.start(read_five, b, then)
    b.close()  # our copy: the child's lives on
    for _ in range(5):
        a.send_bytes(b"12345678")
        time.sleep(SLOW)
    if then == "kill":
        while not asleep(p.pid):
            time.sleep(0.001)
        os.kill(p.pid, signal.SIGKILL)
        assert children.join(p) == -signal.SIGKILL
    else:
        assert children.join(p) == 0
    assert sends_until_broken(a, SLOW, 100) == 0


def close_copy(conn):
    conn.close()


def test_a_fork_copy_closing_does_not_break_the_pipe(children):
    a, b = shmpipe.Pipe(capacity=BIG)
    p = children.start(close_copy, b)
    assert children.join(p) == 0
    for i in range(1000):
        a.send_bytes(i.to_bytes(8, "little"))
    for i in range(1000):
        assert b.recv_bytes() == i.to_bytes(8, "little")
