"""Run a test helper's encode in a child process, so no encoder thread ever lives in the test process.

Encoders start native threads of their own (SVT-AV1 moves the thread that drives it, and every thread that
thread starts afterwards, to real-time priority when it runs as root: tests/scheduling.py), and some of
them outlive the encode. A test worker that encoded in-process ran the rest of its tests beside them, and
twice in ten full runs a thread with no Python frame crashed it (a segfault while the worker moved its
threads back to normal scheduling), which takes every test left on that worker down with it. Encoding in
a child keeps those threads there: the worker's own threads never leave normal scheduling, and a crash
of the child is one test's clear error, not a dead worker.

One child per test process, started on first use (spawn: nothing of the parent's threads or decoders is
copied) and reused by every later call, so a call costs a pickle round trip, not an interpreter start.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import threading
from typing import Any, Callable

__all__ = ["IsolatedError", "run_isolated"]

_lock = threading.Lock()
_pool: concurrent.futures.ProcessPoolExecutor | None = None
_pool_pid = 0


class IsolatedError(RuntimeError):
    """The child process died while it ran a call (a native crash of the encoder, or a kill)."""


def _child_start() -> None:
    """The child's set-up: SVT-AV1 logs errors only."""
    os.environ.setdefault("SVT_LOG", "1")


def _call(path: list[str], module: str, name: str, args: tuple, kwargs: dict) -> Any:
    """In the child: import `module` with the caller's import path (it may have grown since the child
    started) and call its `name`."""
    import importlib

    sys.path[:0] = [p for p in path if p not in sys.path]
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


def _executor() -> concurrent.futures.ProcessPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked child of a test starts its own
        _pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_child_start)
        _pool_pid = os.getpid()
    return _pool


def run_isolated(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`func(*args, **kwargs)` run in this process's encoding child; its result (pickled back).

    Args:
        func: a module-level function (the child imports it by name).
    Raises:
        IsolatedError: the child died meanwhile; the next call starts a new one.
        Whatever `func` raised, as it raised it.
    """
    global _pool
    with _lock:  # one call at a time: the child is one process
        pool = _executor()
        try:
            return pool.submit(_call, list(sys.path), func.__module__, func.__qualname__, args, kwargs).result()
        except concurrent.futures.process.BrokenProcessPool as ex:
            _pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise IsolatedError(f"the child process that ran {func.__module__}.{func.__qualname__} died ({ex}); "
                                "an encoder crashed or the process was killed: run the call again to retry "
                                "in a new child") from None
