"""Every Connection method against multiprocessing.Pipe: each test runs on
both, so shmpipe behaves as the reference does."""

import array
import multiprocessing as mp
import threading

import pytest

import shmpipe

IMPLS = {"multiprocessing": mp.Pipe, "shmpipe": shmpipe.Pipe}


@pytest.fixture(params=list(IMPLS))
def Pipe(request):
    return IMPLS[request.param]


@pytest.fixture
def pair(Pipe):
    a, b = Pipe()
    yield a, b
    a.close()
    b.close()


def in_thread(fn, *args):
    t = threading.Thread(target=fn, args=args)
    t.start()
    return t


def test_send_recv_bytes(pair):
    a, b = pair
    a.send_bytes(b"hello")
    a.send_bytes(b"")
    b.send_bytes(b"back")
    assert b.recv_bytes() == b"hello"
    assert b.recv_bytes() == b""
    assert a.recv_bytes() == b"back"


@pytest.mark.parametrize(
    "buf",
    [b"0123456789", bytearray(b"0123456789"), memoryview(b"0123456789"), array.array("b", b"0123456789")],
    ids=["bytes", "bytearray", "memoryview", "array"],
)
def test_buffer_kinds(pair, buf):
    a, b = pair
    a.send_bytes(buf)
    a.send_bytes(buf, 2)
    a.send_bytes(buf, 2, 3)
    a.send_bytes(buf, 10)
    a.send_bytes(buf, 3, 0)
    assert [b.recv_bytes() for _ in range(5)] == [b"0123456789", b"23456789", b"234", b"", b""]


def test_offsets_in_bytes_for_wide_items(pair):
    a, b = pair
    ints = array.array("i", [1, 2, 3, 4])
    a.send_bytes(ints, 4, 8)
    assert b.recv_bytes() == ints.tobytes()[4:12]


@pytest.mark.parametrize(
    "offset, size, message",
    [(-1, None, "offset is negative"), (11, None, "buffer length < offset"),
     (0, -1, "size is negative"), (5, 6, "buffer length < offset \\+ size")],
)
def test_send_bytes_bad_range(pair, offset, size, message):
    a, _ = pair
    with pytest.raises(ValueError, match=message):
        a.send_bytes(b"0123456789", offset, size)


def test_send_bytes_needs_a_buffer(pair):
    a, _ = pair
    with pytest.raises(TypeError):
        a.send_bytes("text")


def test_send_recv_objects(pair):
    a, b = pair
    objs = [None, 1, "two", [3.0, {"four": (5,)}], b"x" * 100000]
    for o in objs:
        a.send(o)
    assert [b.recv() for _ in objs] == objs


def test_recv_bytes_maxlength(pair):
    a, b = pair
    with pytest.raises(ValueError, match="negative maxlength"):
        b.recv_bytes(-1)
    a.send_bytes(b"12345")
    a.send_bytes(b"1234567890")
    assert b.recv_bytes(5) == b"12345"
    with pytest.raises(OSError, match="bad message length"):
        b.recv_bytes(9)
    # multiprocessing makes a duplex connection write-only after that.
    assert not b.readable
    assert b.writable
    with pytest.raises(OSError, match="write-only"):
        b.recv_bytes()


def test_recv_bytes_into(pair):
    a, b = pair
    buf = bytearray(10)
    a.send_bytes(b"abc")
    assert b.recv_bytes_into(buf) == 3
    a.send_bytes(b"xyz")
    assert b.recv_bytes_into(buf, 7) == 3
    assert buf == b"abc\0\0\0\0xyz"
    a.send_bytes(b"")
    assert b.recv_bytes_into(buf, 10) == 0
    ints = array.array("i", [0, 0, 0])
    a.send_bytes(array.array("i", [7, 8]))
    assert b.recv_bytes_into(ints, 4) == 8
    assert list(ints) == [0, 7, 8]


def test_recv_bytes_into_too_short(pair):
    a, b = pair
    a.send_bytes(b"0123456789")
    a.send_bytes(b"next")
    with pytest.raises(mp.BufferTooShort) as err:
        b.recv_bytes_into(bytearray(12), 3)
    assert err.value.args[0] == b"0123456789"
    # The message was consumed; the next one is intact.
    assert b.recv_bytes() == b"next"
    assert shmpipe.BufferTooShort is mp.BufferTooShort


@pytest.mark.parametrize("offset, message", [(-1, "negative offset"), (11, "offset too large")])
def test_recv_bytes_into_bad_offset(pair, offset, message):
    _, b = pair
    with pytest.raises(ValueError, match=message):
        b.recv_bytes_into(bytearray(10), offset)


def test_poll(pair):
    a, b = pair
    assert b.poll() is False
    assert b.poll(0.05) is False
    a.send_bytes(b"x")
    assert b.poll() is True
    assert b.poll(None) is True
    assert b.poll(-1) is True
    assert b.recv_bytes() == b"x"
    assert b.poll(0) is False
    t = in_thread(lambda: a.send_bytes(b"later"))
    assert b.poll(None) is True
    t.join()
    assert b.recv_bytes() == b"later"


def test_fileno_and_properties(pair):
    a, b = pair
    assert isinstance(a.fileno(), int) and a.fileno() >= 0
    assert a.readable and a.writable and not a.closed


def test_close(pair):
    a, b = pair
    a.close()
    a.close()
    assert a.closed
    for call in (a.fileno, a.recv_bytes, a.recv, a.poll, lambda: a.send_bytes(b"x"), lambda: a.send(1),
                 lambda: a.recv_bytes_into(bytearray(1))):
        with pytest.raises(OSError, match="handle is closed"):
            call()


def test_context_manager(Pipe):
    a, b = Pipe()
    with a as same:
        assert same is a
    assert a.closed
    with b:
        pass
    assert b.closed


def test_one_way(Pipe):
    r, w = Pipe(duplex=False)
    assert (r.readable, r.writable, w.readable, w.writable) == (True, False, False, True)
    with pytest.raises(OSError, match="read-only"):
        r.send_bytes(b"x")
    with pytest.raises(OSError, match="write-only"):
        w.recv_bytes()
    with pytest.raises(OSError, match="write-only"):
        w.poll()
    w.send_bytes(b"one way")
    assert r.recv_bytes() == b"one way"
    r.close()
    w.close()


def test_eof(pair):
    a, b = pair
    a.send_bytes(b"last")
    a.close()
    assert b.poll(None)
    assert b.recv_bytes() == b"last"
    assert b.poll() is True
    with pytest.raises(EOFError):
        b.recv_bytes()
    with pytest.raises(EOFError):
        b.recv()


def test_broken_pipe(pair):
    a, b = pair
    b.close()
    # Both raise at the first send after the close (test_epipe.py checks
    # that); this loop only asks that it comes before the ring is full.
    with pytest.raises(BrokenPipeError):
        for _ in range(shmpipe.DEFAULT_CAPACITY // 1000 + 2):
            a.send_bytes(b"x" * 1000)


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 3 * 2**20 + 5])
def test_large_messages(pair, size):
    a, b = pair
    msg = bytes(i % 251 for i in range(size))
    t = in_thread(a.send_bytes, msg)
    assert b.recv_bytes() == msg
    t.join()
    t = in_thread(a.send_bytes, msg)
    buf = bytearray(size + 3)
    assert b.recv_bytes_into(buf, 3) == size
    assert buf[3:] == msg
    t.join()


def test_small_capacity_carries_any_size():
    a, b = shmpipe.Pipe(capacity=shmpipe.MIN_CAPACITY)
    msg = bytes(range(256)) * 40
    t = in_thread(a.send_bytes, msg)
    assert b.recv_bytes() == msg
    t.join()
    assert a.capacity == shmpipe.MIN_CAPACITY
    with pytest.raises(ValueError):
        shmpipe.Pipe(capacity=shmpipe.MIN_CAPACITY // 2)
    with pytest.raises(ValueError):
        shmpipe.Pipe(capacity=1000)


def test_close_from_another_thread():
    a, b = shmpipe.Pipe()
    errors = []

    def reader():
        try:
            b.recv_bytes()
        except OSError as e:
            errors.append(e)

    t = in_thread(reader)
    while not t.is_alive():
        pass
    import time

    time.sleep(0.1)
    b.close()
    t.join(30)
    assert not t.is_alive()
    assert errors and "closed" in str(errors[0])
    # Both of b's ends are gone now, the one the reader held too.
    with pytest.raises(EOFError):
        a.recv_bytes()
    with pytest.raises(BrokenPipeError):
        for _ in range(shmpipe.DEFAULT_CAPACITY // 1000 + 2):
            a.send_bytes(b"x" * 1000)


def test_plain_pickle_refuses():
    import pickle

    a, b = shmpipe.Pipe()
    with pytest.raises(TypeError):
        pickle.dumps(a)


def test_gil_released_while_waiting():
    import time

    a, b = shmpipe.Pipe()
    counter = [0]
    stop = [False]

    def spin():
        while not stop[0]:
            counter[0] += 1

    t = in_thread(spin)
    try:
        assert b.poll(0.3) is False  # other Python threads ran meanwhile
        before = counter[0]
        t2 = in_thread(lambda: (time.sleep(0.3), a.send_bytes(b"x")))
        assert b.recv_bytes() == b"x"
        t2.join()
        assert counter[0] > before
    finally:
        stop[0] = True
        t.join()
    assert counter[0] > 1000
