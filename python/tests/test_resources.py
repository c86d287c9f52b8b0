"""Descriptors and listeners: no descriptor leaks after many pipes;
Listener/Client with the peer's credentials."""

import os
import signal

import pytest

import shmpipe
from conftest import wait_until_asleep


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_no_leaked_descriptors_after_many_pipes():
    before = open_fds()
    for i in range(10_000):
        a, b = shmpipe.Pipe(duplex=(i % 2 == 0))
        a.fileno()
        if i % 3 == 0:
            a.close()
            b.close()
        # Otherwise dropped without close.
        del a, b
    assert open_fds() == before


def serve_one(address, children_ready):
    with shmpipe.Listener(address) as listener:
        children_ready.send_bytes(b"listening")
        with listener.accept() as conn:
            conn.send((os.getpid(), listener.last_accepted))
            conn.send_bytes(conn.recv_bytes().upper())


def test_listener_and_client(children, tmp_path):
    import multiprocessing as mp

    address = str(tmp_path / "sock")
    ready_r, ready_w = mp.Pipe(duplex=False)
    p = children.start(serve_one, address, ready_w, method="spawn")
    assert ready_r.poll(60) and ready_r.recv_bytes() == b"listening"
    with shmpipe.Client(address) as conn:
        server_pid, peer = conn.recv()
        assert server_pid == p.pid
        assert peer == (os.getpid(), os.getuid(), os.getgid())
        assert peer.pid == os.getpid()
        conn.send_bytes(b"hi")
        assert conn.recv_bytes() == b"HI"
    assert children.join(p) == 0
    assert not os.path.exists(address)


def test_listener_default_address_and_errors(tmp_path):
    with shmpipe.Listener() as listener:
        assert os.path.exists(listener.address)
        address = listener.address
    assert not os.path.exists(address)
    with pytest.raises(ValueError):
        shmpipe.Listener(str(tmp_path / "x"), authkey=b"secret")
    with pytest.raises(ValueError):
        shmpipe.Client(str(tmp_path / "x"), family="AF_INET")
    with pytest.raises(FileNotFoundError):
        shmpipe.Client(str(tmp_path / "nobody"))


def accept_forever(address, ready):
    # Python leaves SIGINT alone if it started ignored (a shell's
    # background job): Ctrl-C must reach us wherever the suite runs.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    listener = shmpipe.Listener(address)
    ready.send_bytes(b"ready")
    try:
        listener.accept()
    except KeyboardInterrupt:
        ready.send_bytes(b"interrupted")
        raise SystemExit(42)


def test_ctrl_c_interrupts_accept(children, tmp_path):
    import multiprocessing as mp
    import signal

    ready_r, ready_w = mp.Pipe(duplex=False)
    p = children.start(accept_forever, str(tmp_path / "sock"), ready_w, method="spawn")
    assert ready_r.poll(60) and ready_r.recv_bytes() == b"ready"
    wait_until_asleep(p.pid)  # in accept, not still sending "ready"
    os.kill(p.pid, signal.SIGINT)
    assert ready_r.poll(60) and ready_r.recv_bytes() == b"interrupted"
    assert children.join(p) == 42


def connect_as(address, uid, result):
    os.setuid(uid)
    try:
        shmpipe.Client(address)
        result.send("connected")
    except PermissionError:
        result.send("refused")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_another_user_is_refused(children, tmp_path):
    import multiprocessing as mp

    os.chmod(tmp_path, 0o755)
    address = str(tmp_path / "sock")
    result_r, result_w = mp.Pipe(duplex=False)
    with shmpipe.Listener(address):
        p = children.start(connect_as, address, 65534, result_w)
        assert result_r.poll(60) and result_r.recv() == "refused"
        assert children.join(p) == 0
