"""CPython's connection tests against shmpipe under the forkserver start method."""

from .common import install

install(globals(), "forkserver")
