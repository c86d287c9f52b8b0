"""Type stubs of the shmpipe package."""

from multiprocessing import BufferTooShort as BufferTooShort
from os import PathLike
from typing import NamedTuple, Optional, Tuple, Union

from ._shmpipe import DEFAULT_CAPACITY as DEFAULT_CAPACITY
from ._shmpipe import MIN_CAPACITY as MIN_CAPACITY
from ._shmpipe import Connection as Connection

__version__: str

def Pipe(duplex: bool = True, *, capacity: int = ...) -> Tuple[Connection, Connection]:
    """A pair of connected ``Connection`` objects: duplex, or
    ``(reader, writer)`` with ``duplex=False``."""

class PeerCredentials(NamedTuple):
    """What the kernel recorded about a connecting process (SO_PEERCRED)."""

    pid: int
    uid: int
    gid: int

_Address = Union[str, bytes, PathLike[str]]

class Listener:
    """Listens for ``Client`` connections at a filesystem path; peers of
    another user are refused."""

    def __init__(
        self,
        address: Optional[_Address] = None,
        family: Optional[str] = None,
        backlog: int = 1,
        authkey: None = None,
    ) -> None: ...
    def accept(self) -> Connection:
        """Waits for a connection."""
    def close(self) -> None:
        """Stops listening; removes the socket file."""
    @property
    def address(self) -> str: ...
    @property
    def last_accepted(self) -> Optional[PeerCredentials]: ...
    def __enter__(self) -> "Listener": ...
    def __exit__(self, *args: object) -> None: ...

def Client(address: _Address, family: Optional[str] = None, authkey: None = None) -> Connection:
    """Connects to a ``Listener`` at ``address``; returns once the kernel
    queued the connection, and the first use waits for the accept. The
    connection cannot be pickled for another process."""
