"""Type stubs of the extension module (see shmpipe/__init__.py for the
public API)."""

from os import PathLike
from typing import Any, Optional, Tuple, Union


DEFAULT_CAPACITY: int
MIN_CAPACITY: int

_Fds = Optional[Tuple[int, int, int, int]]

class Connection:
    """One end of a shmpipe connection, with the methods and semantics of
    ``multiprocessing.connection.Connection``."""

    @property
    def closed(self) -> bool:
        """True if the connection is closed."""
    @property
    def readable(self) -> bool:
        """True if the connection is readable."""
    @property
    def writable(self) -> bool:
        """True if the connection is writable."""
    @property
    def capacity(self) -> int:
        """Ring capacity in bytes of the receiving (else sending) end."""
    def fileno(self) -> int:
        """A descriptor that polls readable when a message (or end of file)
        is there to be received; ``multiprocessing.connection.wait`` uses it.
        On a ``Client()`` connection not yet accepted, waits for the accept."""
    def close(self) -> None:
        """Closes the connection (the peer sees EOF once every copy of this
        end, in every process, is closed)."""
    def send_bytes(self, buf: Any, offset: int = 0, size: Optional[int] = None) -> None:
        """Sends ``size`` bytes of a bytes-like object from byte ``offset``
        as one message, read in place."""
    def send(self, obj: Any) -> None:
        """Sends a picklable object."""
    def recv_bytes(self, maxlength: Optional[int] = None) -> bytes:
        """Receives one message; ``EOFError`` once the peer is gone and
        nothing is left; ``OSError`` if longer than ``maxlength``."""
    def recv_bytes_into(self, buf: Any, offset: int = 0) -> int:
        """Receives one message into a writable buffer at byte ``offset``;
        ``multiprocessing.BufferTooShort`` if it does not fit."""
    def recv(self) -> Any:
        """Receives an object sent with ``send``."""
    def poll(self, timeout: Optional[float] = 0.0) -> bool:
        """Whether a message (or EOF) is there, waiting up to ``timeout``
        seconds; ``None`` waits for ever."""
    def __enter__(self) -> "Connection": ...
    def __exit__(self, *args: Any) -> None: ...
    def _handoff(self) -> Tuple[_Fds, _Fds]: ...
    @staticmethod
    def _from_fds(rx: _Fds, tx: _Fds) -> "Connection": ...

class Listener:
    def __init__(self, path: Union[str, PathLike[str]]) -> None: ...
    def accept(self) -> Tuple[Connection, Tuple[int, int, int]]: ...
    def close(self) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...

def pipe(duplex: bool = True, capacity: int = ...) -> Tuple[Connection, Connection]: ...
def client(path: Union[str, PathLike[str]]) -> Connection: ...
