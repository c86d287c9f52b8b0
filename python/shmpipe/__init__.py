"""shmpipe: ``multiprocessing.Pipe`` over shared-memory rings.

Switching is a one-line change::

    import shmpipe
    a, b = shmpipe.Pipe()          # instead of multiprocessing.Pipe()
    a.send_bytes(b"x")
    assert b.recv_bytes() == b"x"

Connections have the methods and semantics of
``multiprocessing.connection.Connection`` (``send_bytes``, ``recv_bytes``,
``recv_bytes_into``, ``send``, ``recv``, ``poll``, ``fileno``, ``close``,
``closed``/``readable``/``writable``, context manager), travel to child
processes under every start method, and mix with ``multiprocessing``'s own
connections in ``multiprocessing.connection.wait``. While both sides are
busy a message costs no system call. ``Listener``/``Client`` connect
unrelated processes of the same user by a filesystem path.
"""

from multiprocessing import BufferTooShort

from . import _reduction  # teaches multiprocessing to pickle connections
from ._api import Client, Listener, PeerCredentials, Pipe
from ._shmpipe import DEFAULT_CAPACITY, MIN_CAPACITY, Connection

__all__ = [
    "Pipe",
    "Connection",
    "Listener",
    "Client",
    "PeerCredentials",
    "BufferTooShort",
    "DEFAULT_CAPACITY",
    "MIN_CAPACITY",
]

__version__ = "0.1.0"

# The submodules stay importable (and in sys.modules, where pickling
# finds them); only the package's namespace loses them.
del _api, _reduction, _shmpipe
