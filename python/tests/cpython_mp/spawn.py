"""CPython's connection tests against shmpipe under the spawn start method."""

from .common import install

install(globals(), "spawn")
