"""CPython's own multiprocessing tests, run against shmpipe.

``test._test_multiprocessing`` (CPython's test package) defines the tests
of ``multiprocessing``'s connections once and installs them for a start
method (``install_tests_in_module_dict``). Here they are installed for
fork, spawn and forkserver (one module each: ``fork``, ``spawn``,
``forkserver``, so that children started by spawn and forkserver find the
test classes by name) with ``shmpipe.Pipe``, ``shmpipe.Listener`` and
``shmpipe.Client`` in place of ``multiprocessing``'s. Run all three with
``python -m cpython_mp`` from ``python/tests``, against an installed
shmpipe and a CPython whose ``test`` package is installed (3.11 here).

The tests that cannot pass yet are listed in ``EXPECTED`` with the reason:
an expected failure fails the run the day it starts passing, so the list
cannot go stale.
"""
