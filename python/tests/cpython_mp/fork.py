"""CPython's connection tests against shmpipe under the fork start method."""

from .common import install

install(globals(), "fork")
