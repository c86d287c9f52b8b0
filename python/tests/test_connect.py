"""Listener/Client shaped like multiprocessing.connection's (issue 23
items 11 and 12): Client() returns once the kernel queued the connection,
and a connection they make refuses, at pickling time, to go to another
process."""

import multiprocessing as mp
import pickle
import threading
import time
from multiprocessing.reduction import ForkingPickler

import pytest

import shmpipe
from conftest import START_METHODS


def test_connect_then_accept_in_one_thread():
    with shmpipe.Listener() as l:
        with shmpipe.Client(l.address) as c:
            with l.accept() as d:
                c.send("ping")
                assert d.recv() == "ping"
                d.send_bytes(b"pong")
                assert c.recv_bytes() == b"pong"
                assert l.last_accepted.pid == mp.current_process().pid


def test_poll_before_accept_times_out_then_sees_data():
    with shmpipe.Listener() as l:
        c = shmpipe.Client(l.address)
        assert c.poll(0) is False
        assert c.poll(0.05) is False  # nobody accepted yet: no data
        d = l.accept()
        d.send(1)
        assert c.poll(None) is True
        assert c.recv() == 1
        c.close()
        d.close()


def test_client_waits_for_a_slow_server():
    # The server accepts long after the client connected and sent; the
    # client's first use waits for it (multiprocessing's would be queued
    # in the kernel), with no timeout of its own.
    with shmpipe.Listener() as l:
        c = shmpipe.Client(l.address)
        got = []

        def server():
            time.sleep(0.5)
            with l.accept() as d:
                got.append(d.recv())

        t = threading.Thread(target=server)
        t.start()
        c.send("late")
        t.join(60)
        assert got == ["late"]
        c.close()


def test_listener_closed_before_accepting():
    l = shmpipe.Listener()
    recv, send, poll = (shmpipe.Client(l.address) for _ in range(3))
    l.close()  # the kernel resets connections nobody accepted
    with pytest.raises(EOFError):
        recv.recv()
    with pytest.raises(BrokenPipeError):
        send.send_bytes(b"x")
    assert poll.poll(None) is True  # end of file is there
    for c in (recv, send, poll):
        c.close()


def test_wait_sees_a_listener_gone():
    from multiprocessing.connection import wait

    l = shmpipe.Listener()
    c = shmpipe.Client(l.address)
    l.close()
    assert wait([c], 60) == [c]
    c.close()


def test_close_before_accept():
    with shmpipe.Listener() as l:
        c = shmpipe.Client(l.address)
        c.close()
        assert c.closed
        with pytest.raises(OSError, match="handle is closed"):
            c.recv()


def _child(conn):
    conn.send("unreachable")


@pytest.mark.parametrize("method", START_METHODS)
def test_listener_connections_refuse_pickling(method, children):
    """The seal: refused when pickled, with a TypeError naming the reason,
    under every start method, and the pipe given to a child still works."""
    with shmpipe.Listener() as l:
        c = shmpipe.Client(l.address)
        d = l.accept()
        for conn in (c, d):
            with pytest.raises(TypeError, match="sealed"):
                ForkingPickler.dumps(conn)
        ctx = mp.get_context(method)
        r, w = shmpipe.Pipe(duplex=False)
        if method == "fork":
            # fork copies its arguments without pickling; a connection sent
            # to a child is pickled, and refused.
            with pytest.raises(TypeError, match="sealed"):
                w.send(d)
        else:
            p = ctx.Process(target=_child, args=(d,))
            with pytest.raises(TypeError, match="sealed"):
                p.start()
        # Plain pickle refuses it too.
        with pytest.raises(TypeError):
            pickle.dumps(c)
        w.send("still fine")
        assert r.recv() == "still fine"
        for x in (c, d, r, w):
            x.close()
