"""numpy arrays go through without copies: send_bytes reads the array in
place, recv_bytes_into writes into it in place."""

import threading
import tracemalloc

import pytest

import shmpipe

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float64", "complex128"])
def test_round_trip_in_place(dtype):
    a, b = shmpipe.Pipe(capacity=1 << 20)
    src = (np.arange(100_000) % 1000).astype(dtype)
    dst = np.zeros_like(src)
    address = dst.ctypes.data
    tracemalloc.start()
    try:
        t = threading.Thread(target=a.send_bytes, args=(src,))
        t.start()
        n = b.recv_bytes_into(dst)
        t.join()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == src.nbytes
    assert dst.ctypes.data == address
    assert np.array_equal(src, dst)
    # No copy of the array was made on the way (numpy reports its data
    # allocations to tracemalloc; a copy would show as nbytes or more).
    assert peak < src.nbytes // 4


def test_views_and_offsets():
    a, b = shmpipe.Pipe()
    m = np.arange(64, dtype=np.int64).reshape(8, 8)
    a.send_bytes(m[2:4])  # contiguous rows
    out = np.full(32, -1, dtype=np.int64)
    assert b.recv_bytes_into(out, 8 * 8) == 16 * 8
    assert np.array_equal(out[8:24], np.arange(16, 32))
    assert (out[:8] == -1).all() and (out[24:] == -1).all()
    a.send_bytes(m, 8 * 8, 8 * 8)  # offset and size in bytes
    assert np.array_equal(np.frombuffer(b.recv_bytes(), dtype=np.int64), np.arange(8, 16))


def test_non_contiguous_is_refused():
    a, _ = shmpipe.Pipe()
    m = np.arange(64).reshape(8, 8)
    with pytest.raises(BufferError):
        a.send_bytes(m[:, 0])


def test_read_only_destination_is_refused():
    a, b = shmpipe.Pipe()
    ro = np.zeros(8)
    ro.flags.writeable = False
    a.send_bytes(b"x")
    with pytest.raises(TypeError):
        b.recv_bytes_into(ro)
    assert b.recv_bytes() == b"x"
