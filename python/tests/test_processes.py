"""Connections in child processes: the three start methods, a child killed
while the parent waits, Ctrl-C in a blocking recv, and 10^5 messages of
random sizes with checksums. Every child runs under the `children`
watchdog (conftest.py), which kills it if the test fails or hangs."""

import multiprocessing as mp
import os
import random
import signal
import sys
import time
import zlib

import pytest

import shmpipe
from conftest import START_METHODS, wait_until_asleep


def echo_upper(conn):
    # Under fork the child holds a copy of the parent's end too, so it
    # would never see EOF (as with multiprocessing.Pipe): stop on a word.
    while True:
        msg = conn.recv_bytes()
        if msg == b"stop":
            return
        conn.send_bytes(msg.upper())


def echo_objects(conn):
    conn.send(("pid", os.getpid()))
    while True:
        try:
            conn.send(conn.recv())
        except EOFError:
            return


@pytest.mark.parametrize("method", START_METHODS)
def test_start_methods(children, method):
    a, b = shmpipe.Pipe()
    p = children.start(echo_upper, b, method=method)
    b.close()
    for msg in [b"hello", b"", b"x" * 100000]:
        a.send_bytes(msg)
        assert a.recv_bytes() == msg.upper()
    a.send_bytes(b"stop")
    assert children.join(p) == 0
    # Every copy of the child's end is gone now.
    with pytest.raises(EOFError):
        a.recv_bytes()


@pytest.mark.parametrize("method", START_METHODS)
def test_start_methods_one_way_and_objects(children, method):
    r, w = shmpipe.Pipe(duplex=False)
    r2, w2 = shmpipe.Pipe(duplex=False)
    p = children.start(relay, r, w2, method=method)
    r.close()
    w2.close()
    obj = {"list": list(range(100)), "bytes": b"\0" * 1000}
    w.send(obj)
    assert r2.recv() == obj
    w.close()
    assert children.join(p) == 0


def relay(r, w):
    w.send(r.recv())


def test_connection_sent_over_a_connection(children):
    # Pickling outside of process start goes through multiprocessing's
    # resource sharer, as for its own connections.
    ctl_parent, ctl_child = mp.Pipe()
    p = children.start(take_connection, ctl_child, method="spawn")
    a, b = shmpipe.Pipe()
    ctl_parent.send(b)
    b.close()
    assert a.recv() == ("pid", p.pid)
    a.send("ping")
    assert a.recv() == "ping"
    a.close()
    assert children.join(p) == 0


def take_connection(ctl):
    conn = ctl.recv()
    echo_objects(conn)


def sleeper(conn, ready):
    ready.send_bytes(b"ready")
    conn.recv_bytes()


@pytest.mark.parametrize("how", ["recv", "poll"])
def test_child_killed_while_parent_waits(children, how):
    a, b = shmpipe.Pipe()
    ready_r, ready_w = mp.Pipe(duplex=False)
    p = children.start(sleeper, b, ready_w)
    b.close()
    assert ready_r.recv_bytes() == b"ready"

    def kill_soon():
        time.sleep(0.2)
        p.kill()

    import threading

    t = threading.Thread(target=kill_soon)
    t.start()
    if how == "recv":
        with pytest.raises(EOFError):
            a.recv_bytes()
    else:
        assert a.poll(None) is True
        with pytest.raises(EOFError):
            a.recv_bytes()
    t.join()
    children.join(p)


def interrupted(conn, ready, how):
    # Python leaves SIGINT alone if it started ignored (a shell's
    # background job): Ctrl-C must reach us wherever the suite runs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ready.send_bytes(b"ready")
    try:
        if how == "recv":
            conn.recv_bytes()
        else:
            conn.poll(None)
    except KeyboardInterrupt:
        ready.send_bytes(b"interrupted")
        sys.exit(42)
    sys.exit(1)


@pytest.mark.parametrize("how", ["recv", "poll"])
def test_ctrl_c_interrupts_a_wait(children, how):
    a, b = shmpipe.Pipe()
    ready_r, ready_w = mp.Pipe(duplex=False)
    p = children.start(interrupted, b, ready_w, how, method="spawn")
    assert ready_r.poll(60) and ready_r.recv_bytes() == b"ready"
    wait_until_asleep(p.pid)  # in the wait, not still sending "ready"
    os.kill(p.pid, signal.SIGINT)
    assert ready_r.poll(60) and ready_r.recv_bytes() == b"interrupted"
    assert children.join(p) == 42


POOL = 400_000


def checked_sender(conn, count, seed):
    rng = random.Random(seed)
    pool = rng.randbytes(POOL)
    for _ in range(count):
        size, off = sized(rng)
        body = pool[off:off + size]
        conn.send_bytes(body + zlib.crc32(body).to_bytes(4, "little"))
    conn.close()


def sized(rng):
    """A message size (mostly small, some around the fragment threshold of
    a small ring, a few large) and where its bytes come from in the pool."""
    r = rng.random()
    if r < 0.9:
        size = rng.randrange(0, 256)
    elif r < 0.995:
        size = rng.randrange(0, 8192)
    else:
        size = rng.randrange(60000, 300000)
    return size, rng.randrange(0, POOL - size + 1)


@pytest.mark.parametrize("capacity", [shmpipe.DEFAULT_CAPACITY, 16384])
def test_many_random_messages_with_checksums(children, capacity):
    count = 100_000
    r, w = shmpipe.Pipe(duplex=False, capacity=capacity)
    p = children.start(checked_sender, w, count, 1234)
    w.close()
    rng = random.Random(1234)
    pool = rng.randbytes(POOL)
    for i in range(count):
        msg = r.recv_bytes()
        body, crc = msg[:-4], int.from_bytes(msg[-4:], "little")
        assert zlib.crc32(body) == crc, f"message {i} corrupt"
        size, off = sized(rng)
        assert body == pool[off:off + size], f"message {i} is not the one sent"
    with pytest.raises(EOFError):
        r.recv_bytes()
    assert children.join(p) == 0
