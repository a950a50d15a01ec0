"""Ctrl-C (SIGINT) and SIGTERM at any moment of the command (the import and its subcommands): one line, exit
128 + the signal.

While the command runs, both signals raise `Interrupted` in the main thread (never a raw
`KeyboardInterrupt` traceback), and the signal is also remembered: a library that swallows the exception
on its way up does not lose it, since the command looks again (`checkpoint`) before each step that takes
time (taking the leases, starting the pipeline). The first signal makes later ones ignored, so the
clean-up it starts (a manifest of what was committed, the leases released) is never cut short.

A step that must not be cut in the middle (a lease created but not yet handed to its keeper, the leases
being released, a render's files moved into place) runs `deferred()`: a signal met there is raised as it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the command (raised in the main thread only)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_pending: Optional[int] = None
_handled = False
_deferred = 0
_installed = 0
_early = False


def handler(signum, _frame) -> None:
    """The command's handler of SIGINT and SIGTERM: the first signal is raised (or, inside `deferred`,
    kept for its end); any later one, or one once the command is stopping anyway (`handled`), is
    ignored."""
    global _pending
    if _pending is not None or _handled:
        return
    _pending = signum
    for s in SIGNALS:  # cleaning up is short; a second signal must not cut it
        signal.signal(s, signal.SIG_IGN)
    if not _deferred:
        raise Interrupted(signum)


def _remember(signum, _frame) -> None:
    global _pending
    if _pending is None:
        _pending = signum


def early() -> None:
    """For the process's own command, as its first step (before Beam and the rest load): a signal from
    here on is remembered, and raised by the command's first `checkpoint` inside `handling`."""
    global _early, _pending, _handled
    if _early or threading.current_thread() is not threading.main_thread():
        return  # already (`python -m pipelines.import_lerobot`, then the command it runs): what was met stays
    _early, _pending, _handled = True, None, False
    for s in SIGNALS:
        signal.signal(s, _remember)


def pending() -> Optional[int]:
    """The signal met so far (None when none was)."""
    return _pending


def checkpoint() -> None:
    """Raise `Interrupted` when a signal was met and not yet handled (even inside `deferred`: the caller
    says it is safe here)."""
    if _pending is not None and not _handled:
        raise Interrupted(_pending)


def handled() -> None:
    """The signal met has been answered (its line printed): no later checkpoint raises it again."""
    global _handled
    _handled = True


def sleep(seconds: float) -> None:
    """`time.sleep` that ends at a signal: a wait for a lease is where a user presses Ctrl-C most."""
    end = time.monotonic() + seconds
    while True:
        checkpoint()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run a block that must not be cut in the middle: a signal met inside is raised when it ends."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
    if not _deferred:
        checkpoint()


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Install the handler for the block (main thread only; nested blocks share it), and restore the
    handlers found when the outermost block ends. A signal met before stays met for the whole block."""
    global _installed, _pending, _handled, _early
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = None
    if not _installed:
        if not _early:  # else a signal met since `early` stays met
            _pending, _handled = None, False
        _early = False
        previous = {s: signal.signal(s, handler) for s in SIGNALS}
    _installed += 1
    try:
        yield
    finally:
        _installed -= 1
        if previous is not None:
            for s, old in previous.items():
                signal.signal(s, old)


def name(signum: int) -> str:
    return signal.Signals(signum).name


def status(signum: int) -> int:
    """The command's exit status after `signum`: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum
