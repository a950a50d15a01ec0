"""A run being stopped (SIGINT, SIGTERM): the output work in progress ends, none starts after it.

A local run executes its steps on threads of the command's own process, and those keep running while the
command, having met the signal, records what was committed and removes the temporary files. A part
written or an episodes file committed meanwhile would be a temporary left behind or a commit no record
names. So each step wraps what it writes to the output (a part, a commit, a shard, the manifest) in
`output_work()`, and the command calls `stop()` first: it waits for the work already started to finish,
and any step that then reaches `output_work()` waits there until the process exits, without writing,
failing or cleaning anything (a failure path would discard files). Beam-free; per process, as
`transforms.base.live_counts` is (a worker of a remote runner is stopped by its runner instead).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_COND = threading.Condition()
_HELD = threading.local()  # how deep in output work this thread is
_active = 0
_stopping = False


@contextlib.contextmanager
def output_work() -> Iterator[None]:
    """Around one piece of output work: it runs unless the run is stopping, in which case the calling
    thread waits here for good (the command is about to exit)."""
    global _active
    if getattr(_HELD, "depth", 0):  # within work this thread already does: it finishes as a whole
        _HELD.depth += 1
        try:
            yield
        finally:
            _HELD.depth -= 1
        return
    with _COND:
        if _stopping:
            while True:  # for good: a later `reset()` (a new run in this process) must not wake it
                _COND.wait()
        _active += 1
    _HELD.depth = 1
    try:
        yield
    finally:
        _HELD.depth = 0
        with _COND:
            _active -= 1
            _COND.notify_all()


def stop(timeout: float) -> bool:
    """Let no output work start from now on, and wait up to `timeout` seconds for the work in progress to
    end; True when none is left."""
    global _stopping
    with _COND:
        _stopping = True
        return _COND.wait_for(lambda: _active == 0, timeout)


def stopping() -> bool:
    """Whether `stop()` was called in this process."""
    with _COND:
        return _stopping


def reset() -> None:
    """Let output work start again (a new run in this process, e.g. a test's); the threads of the stopped
    run stay where they wait."""
    global _stopping
    with _COND:
        _stopping = False
        _COND.notify_all()
