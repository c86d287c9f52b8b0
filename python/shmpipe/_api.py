"""The package's API, kept apart so that ``shmpipe``'s namespace holds only
the names it exports (``dir(shmpipe)`` lists no ``os`` or ``tempfile``)."""

import os
import tempfile
from collections import namedtuple

from ._shmpipe import DEFAULT_CAPACITY
from ._shmpipe import Listener as _RawListener
from ._shmpipe import client as _client
from ._shmpipe import pipe as _pipe


def Pipe(duplex=True, *, capacity=DEFAULT_CAPACITY):
    """Returns a pair of connected ``Connection`` objects.

    With ``duplex=True`` (the default) both can send and receive (two
    message pipes, one each way); with ``duplex=False`` it returns
    ``(reader, writer)``, as ``multiprocessing.Pipe`` does.

    ``capacity`` is each ring's size in bytes (a power of two, at least
    ``MIN_CAPACITY``). Messages of any length pass; those of a quarter ring
    or more travel in pieces.
    """
    return _pipe(bool(duplex), capacity)


PeerCredentials = namedtuple("PeerCredentials", "pid uid gid")
PeerCredentials.__doc__ = "What the kernel recorded about a connecting process (SO_PEERCRED)."


def _check_family_authkey(family, authkey):
    if family not in (None, "AF_UNIX"):
        raise ValueError("shmpipe connects by filesystem path only (family 'AF_UNIX')")
    if authkey is not None:
        raise ValueError(
            "shmpipe checks the peer's credentials (same user) instead of an authkey"
        )


def _check_path(address):
    if address.startswith("\0"):
        raise ValueError(
            "shmpipe listens at filesystem paths only, which the kernel guards "
            "with the file's mode (0600); an abstract socket name ('\\0...') "
            "has no permissions, so it is not supported"
        )
    return address


class Listener:
    """Listens for ``Client`` connections at a filesystem path, shaped like
    ``multiprocessing.connection.Listener``.

    The socket file is created mode 0600 and peers of another user are
    refused (the kernel's ``SO_PEERCRED``), as shmpipe's Rust ``Listener``
    does; ``authkey`` is not used. With ``address=None`` a fresh path in a
    private temporary directory is chosen.
    """

    def __init__(self, address=None, family=None, backlog=1, authkey=None):
        _check_family_authkey(family, authkey)
        self._tmpdir = None
        if address is None:
            self._tmpdir = tempfile.mkdtemp(prefix="shmpipe-")
            address = os.path.join(self._tmpdir, "listener")
        self._address = _check_path(os.fsdecode(address))
        self._listener = _RawListener(self._address)
        self._last_accepted = None

    def accept(self):
        """Waits for a connection and returns a ``Connection``, which cannot
        be pickled for another process (its memory is sealed to this one)."""
        if self._listener is None:
            raise OSError("listener is closed")
        conn, peer = self._listener.accept()
        self._last_accepted = PeerCredentials(*peer)
        return conn

    def close(self):
        """Stops listening; removes the socket file."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._tmpdir is not None:
            try:
                os.rmdir(self._tmpdir)
            except OSError:
                pass
            self._tmpdir = None

    @property
    def address(self):
        """The path listened at."""
        return self._address

    @property
    def last_accepted(self):
        """``PeerCredentials(pid, uid, gid)`` of the last accepted peer."""
        return self._last_accepted

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, exc_tb):
        self.close()

    def __repr__(self):
        return f"<shmpipe.Listener {self._address!r}>"


def Client(address, family=None, authkey=None):
    """Connects to a ``Listener`` at ``address`` and returns a
    ``Connection``; the listener must run as the same user (or root).

    Returns once the kernel has queued the connection, as
    ``multiprocessing.connection.Client`` does: the handshake completes on
    the connection's first use, which waits for the listener to accept.
    A listener that closes without accepting shows as end of file (or a
    broken pipe). Like one from ``Listener.accept()``, the connection
    cannot be pickled for another process (its memory is sealed to this
    one): connect from the process that uses it."""
    _check_family_authkey(family, authkey)
    return _client(_check_path(os.fsdecode(address)))


for _name in ("Pipe", "Listener", "Client", "PeerCredentials"):
    globals()[_name].__module__ = "shmpipe"
del _name
