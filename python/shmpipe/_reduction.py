"""Pickling of connections for ``multiprocessing``, as it does for its own
(``multiprocessing.reduction.reduce_connection``): each end's descriptors
travel as ``DupFd`` objects, which under ``spawn`` and ``forkserver`` hand
them to the child being started, and otherwise go through
``multiprocessing``'s resource sharer. The child rebuilds the ends from
them, checking them as it would a stranger's."""

import os
from multiprocessing import reduction

from ._shmpipe import Connection


def _dup(fds):
    return None if fds is None else tuple(reduction.DupFd(fd) for fd in fds)


def reduce_connection(conn):
    """``ForkingPickler`` reducer for ``shmpipe.Connection``."""
    rx, tx = conn._handoff()
    return rebuild_connection, (_dup(rx), _dup(tx))


def rebuild_connection(rx, tx):
    """Rebuilds a connection from the ``DupFd`` objects of its ends."""
    taken = []

    def detach(dfs):
        if dfs is None:
            return None
        for df in dfs:
            taken.append(df.detach())
        return taken[-len(dfs):]

    try:
        return Connection._from_fds(detach(rx), detach(tx))
    finally:
        for fd in taken:
            os.close(fd)


reduction.register(Connection, reduce_connection)
