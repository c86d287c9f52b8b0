"""Errors shaped like CPython's (issue 23 item 6): OSError subclasses carry
errno, strerror and, where a path is involved, filename, with the C
library's text; and the package's namespace holds only its API."""

import errno
import os

import pytest

import shmpipe


def test_namespace_holds_only_the_api():
    public = {n for n in dir(shmpipe) if not n.startswith("__")}
    assert public == set(shmpipe.__all__)
    for name in shmpipe.__all__:
        assert getattr(shmpipe, name) is not None


def test_send_to_a_closed_peer_is_broken_pipe_with_epipe():
    a, b = shmpipe.Pipe(capacity=4096)
    b.close()
    with pytest.raises(BrokenPipeError) as info:
        for _ in range(10_000):  # fills the ring, then finds the peer gone
            a.send_bytes(b"x" * 100)
    e = info.value
    assert e.errno == errno.EPIPE
    assert e.strerror == os.strerror(errno.EPIPE)
    assert str(e) == f"[Errno {errno.EPIPE}] {os.strerror(errno.EPIPE)}"
    a.close()


def test_client_of_a_missing_path_names_it(tmp_path):
    path = str(tmp_path / "nobody")
    with pytest.raises(FileNotFoundError) as info:
        shmpipe.Client(path)
    e = info.value
    assert (e.errno, e.strerror, e.filename) == (errno.ENOENT, os.strerror(errno.ENOENT), path)
    assert "os error" not in str(e)
    # The same text as CPython's own open() of the path.
    with pytest.raises(FileNotFoundError) as theirs:
        open(path)
    assert str(e) == str(theirs.value)


def test_client_of_a_path_nobody_listens_at(tmp_path):
    path = str(tmp_path / "file")
    open(path, "w").close()
    with pytest.raises(ConnectionRefusedError) as info:
        shmpipe.Client(path)
    assert (info.value.errno, info.value.filename) == (errno.ECONNREFUSED, path)


def test_listener_on_a_taken_path_names_it(tmp_path):
    path = str(tmp_path / "sock")
    with shmpipe.Listener(path):
        with pytest.raises(OSError) as info:
            shmpipe.Listener(path)
    e = info.value
    assert (e.errno, e.strerror, e.filename) == (
        errno.EADDRINUSE,
        os.strerror(errno.EADDRINUSE),
        path,
    )
    assert "os error" not in str(e)


def test_path_as_bytes_and_pathlike(tmp_path):
    with shmpipe.Listener(tmp_path / "p") as l:
        assert l.address == str(tmp_path / "p")
        with shmpipe.Client(os.fsencode(l.address)) as c, l.accept() as d:
            c.send_bytes(b"ok")
            assert d.recv_bytes() == b"ok"


def test_abstract_names_are_refused_clearly():
    with pytest.raises(ValueError, match="filesystem paths only"):
        shmpipe.Listener("\0shmpipe-abstract")
    with pytest.raises(ValueError, match="filesystem paths only"):
        shmpipe.Client("\0shmpipe-abstract")
