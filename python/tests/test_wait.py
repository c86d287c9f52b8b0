"""multiprocessing.connection.wait with shmpipe connections mixed with
multiprocessing's own: it calls fileno() (which arms the end) and polls."""

import multiprocessing as mp
import time
from multiprocessing.connection import wait

import shmpipe


def test_wait_mixed_with_multiprocessing():
    s1, s2 = shmpipe.Pipe()
    sr, sw = shmpipe.Pipe(duplex=False)
    m1, m2 = mp.Pipe()
    conns = [s2, sr, m2]
    assert wait(conns, 0) == []
    assert wait(conns, 0.05) == []
    s1.send_bytes(b"one")
    assert wait(conns, 10) == [s2]
    assert wait(conns, 10) == [s2]  # level-triggered: still there
    assert s2.recv_bytes() == b"one"
    assert wait(conns, 0) == []
    m1.send_bytes(b"two")
    sw.send_bytes(b"three")
    assert set(wait(conns, 10)) == {sr, m2}
    assert m2.recv_bytes() == b"two" and sr.recv_bytes() == b"three"
    assert wait(conns, 0) == []
    sw.close()  # end of file counts as ready, as for multiprocessing
    assert wait(conns, 10) == [sr]


def late_sender(conn, delay):
    time.sleep(delay)
    conn.send_bytes(b"late")


def test_wait_wakes_on_a_message_from_another_process(children):
    a, b = shmpipe.Pipe()
    m1, m2 = mp.Pipe()
    p = children.start(late_sender, b, 0.2)
    assert wait([a, m1], 60) == [a]
    assert a.recv_bytes() == b"late"
    assert wait([a, m1], 0) == []
    assert children.join(p) == 0
    b.close()  # the last copy of the peer's end: end of file is ready
    assert wait([a, m1], 10) == [a]


def test_wait_sees_a_killed_child(children):
    a, b = shmpipe.Pipe()
    p = children.start(time.sleep, 60)
    b.close()
    assert wait([a], 0.05) == []
    p.kill()
    children.join(p)
    # The child's copy of b was the last: end of file.
    assert wait([a], 60) == [a]
