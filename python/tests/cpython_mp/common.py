"""Installs CPython's connection tests with shmpipe swapped in (see the
package's docstring)."""

import functools
import signal
import types
import unittest

import multiprocessing
import multiprocessing.connection

import test._test_multiprocessing as mp_tests

import shmpipe

# The classes of test._test_multiprocessing whose every test runs here
# (processes flavour), and the tests run from other classes: each of
# these uses a Pipe as its channel.
WHOLE = [
    "_TestConnection",
    "_TestListener",
    "_TestListenerClient",
    "_TestPoll",
    "_TestPicklingConnections",
    "TestWait",
    "TestCloseFds",
    "TestIgnoreEINTR",
]
SINGLE = {
    "_TestProcess": ["test_recursion"],
    "_TestLogging": ["test_level"],
    "_TestBarrier": ["test_thousand"],
}

FILENO_IS_SOCKET = (
    "by design (python/README.md): the test sends descriptors over "
    "conn.fileno() as an AF_UNIX socket; a shmpipe connection's fileno() is "
    "a readiness descriptor, its data never passes through a socket"
)
SEALED = (
    "by design, issue 23 item 12 (python/README.md): a connection made by "
    "Listener/Client is sealed to its process and cannot be pickled"
)
PATHS_ONLY = (
    "by design (python/README.md): shmpipe listens at filesystem paths, "
    "whose mode 0600 the kernel checks; an abstract name has no permissions"
)

# (class, test[, start method]) -> (outcome, reason[, watchdog seconds]).
EXPECTED = {
    ("_TestConnection", "test_fd_transfer"): ("skip", FILENO_IS_SOCKET),
    ("_TestConnection", "test_large_fd_transfer"): ("skip", FILENO_IS_SOCKET),
    ("_TestConnection", "test_missing_fd_transfer"): ("skip", FILENO_IS_SOCKET),
    ("_TestPicklingConnections", "test_pickling"): ("skip", SEALED),
    ("_TestListener", "test_abstract_socket"): ("skip", PATHS_ONLY),
    # (test_recursion, test_level and _TestBarrier.test_thousand, where
    # processes take turns on one end, pass: docs/shared-ends.md.)
}

# A test that hangs is failed by this watchdog instead of stalling the run
# (SIGALRM raises in the main thread; shmpipe's waits let signals through).
WATCHDOG_SECONDS = 60


class _Watchdog:
    def run(self, result=None):
        seconds = getattr(getattr(self, self._testMethodName), "watchdog", WATCHDOG_SECONDS)

        def expired(signum, frame):
            raise TimeoutError(f"watchdog: test still running after {seconds} s")

        old = signal.signal(signal.SIGALRM, expired)
        signal.alarm(seconds)
        try:
            return super().run(result)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)


class _Connection(types.ModuleType):
    """``multiprocessing.connection`` with shmpipe's ``Listener`` and
    ``Client``; everything else (``wait``, ``families``...) its own."""

    Listener = staticmethod(shmpipe.Listener)
    Client = staticmethod(shmpipe.Client)

    def __getattr__(self, name):
        return getattr(multiprocessing.connection, name)


class _Multiprocessing(types.ModuleType):
    """``multiprocessing`` as the test module sees it: ``Pipe`` is
    shmpipe's, ``connection`` the module above."""

    Pipe = staticmethod(shmpipe.Pipe)

    def __getattr__(self, name):
        return getattr(multiprocessing, name)


CONNECTION = _Connection("multiprocessing.connection")
CONNECTION.families = ["AF_UNIX"]  # shmpipe listens on paths only


def _swap():
    """Points the test module at shmpipe; runs in every process that
    imports a harness module (spawn's and forkserver's children too)."""
    if isinstance(mp_tests.multiprocessing, _Multiprocessing):
        return
    proxy = _Multiprocessing("multiprocessing")
    proxy.connection = CONNECTION
    mp_tests.multiprocessing = proxy
    mp_tests.ProcessesMixin.Pipe = staticmethod(shmpipe.Pipe)
    mp_tests.ProcessesMixin.connection = CONNECTION


def _mark(fn, outcome, reason, watchdog=WATCHDOG_SECONDS):
    @functools.wraps(fn)
    def marked(*args, **kwargs):
        return fn(*args, **kwargs)

    marked.watchdog = watchdog
    if outcome == "skip":
        return unittest.skip(reason)(marked)
    # unittest prints no reason for an expected failure: keep it on the
    # test's docstring, which the verbose runner shows.
    marked.__doc__ = f"expected failure: {reason}"
    return unittest.expectedFailure(marked)


def install(globs, start_method):
    """Puts the selected test classes for `start_method` into `globs`, a
    harness module's namespace, with setUpModule/tearDownModule."""
    _swap()
    scratch = {"__name__": globs["__name__"]}
    mp_tests.install_tests_in_module_dict(scratch, start_method)
    globs["setUpModule"] = scratch["setUpModule"]
    globs["tearDownModule"] = scratch["tearDownModule"]
    for base, only in [(n, None) for n in WHOLE] + list(SINGLE.items()):
        name = "WithProcesses" + base[1:] if base.startswith("_") else base
        installed = scratch[name]
        body = {"__module__": globs["__name__"], "__qualname__": name}
        tests = [t for t in dir(installed) if t.startswith("test")]
        for test in tests:
            if only is not None and test not in only:
                body[test] = None  # not run here
                continue
            mark = EXPECTED.get((base, test, start_method)) or EXPECTED.get((base, test))
            if mark:
                body[test] = _mark(getattr(installed, test), *mark)
        cls = type(name, (_Watchdog, installed), body)
        globs[name] = cls
