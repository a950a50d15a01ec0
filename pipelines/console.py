"""What every subcommand shares at the terminal: exit statuses and the usage error, the -q/-v flags and log
levels by verbosity, a handler that shares the terminal with the live progress line (`pipelines.progress`),
and the end of the process once its command is done.

By default a user sees the project's own log lines (an episodes file imported or failed, a lease taken
over, a Hub retry) and every library's errors, and nothing they cannot act on: Beam's warnings and type-hint
notes, per-request HTTP logs (httpx, urllib3, the Hub client, gcsfs, botocore), and Python warnings of
libraries are hidden. `-v` shows Beam's and the libraries' warnings and the project's debug lines, `-vv`
every library's debug log; `-q` only errors. On Dataflow, the runner's own job messages (the job's URL,
its state) are kept at every level but `-q`.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from typing import Callable, Optional

#: Loggers of the project.
OWN = ("transforms", "pipelines", "lerobot_import", "launcher")
#: Libraries whose INFO lines are per request or per step: chatter, not news.
LIBRARIES = ("apache_beam", "fsspec", "gcsfs", "s3fs", "urllib3", "google", "httpx", "httpcore",
             "huggingface_hub", "filelock", "botocore", "aiobotocore", "boto3", "requests", "asyncio")
#: Beam's type-hint notes ("Converting string literal type hint to Any") are INFO lines per DoFn.
TYPE_HINTS = "apache_beam.typehints"
DATAFLOW = "apache_beam.runners.dataflow"
#: huggingface_hub announces the retries it makes itself only by a WARNING on this logger, which the Hub
#: reader counts (`transforms.base.hub`, the `hub_retries` counter): the logger stays at WARNING at every
#: verbosity so the count holds, and its lines go no further than that count when the libraries' level
#: would hide them.
HUB_RETRIES = "huggingface_hub.utils._http"
FORMAT = "%(levelname)s %(name)s: %(message)s"

_LOCK = threading.Lock()
#: Called with the lock held before and after a log record is written (the live line clears and redraws).
_around_emit: Optional[tuple[Callable[[], None], Callable[[], None]]] = None


class SharedTerminalHandler(logging.StreamHandler):
    """A stderr handler that lets the live progress line step aside while a record is written."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        with _LOCK:
            hooks = _around_emit
            if hooks:
                hooks[0]()
            super().emit(record)
            if hooks:
                hooks[1]()


def levels(verbosity: int, *, dataflow: bool = False) -> dict[str, int]:
    """The level of each logger ("" is the root) at `verbosity` (-1 quiet, 0 default, 1 -v, 2 -vv)."""
    out = _levels(verbosity, dataflow=dataflow)
    out[HUB_RETRIES] = min(out["huggingface_hub"], logging.WARNING)
    return out


def _levels(verbosity: int, *, dataflow: bool) -> dict[str, int]:
    if verbosity < 0:
        out = {"": logging.ERROR, "py.warnings": logging.ERROR}
        out.update({name: logging.ERROR for name in OWN + LIBRARIES})
        return out
    if verbosity >= 2:
        return {"": logging.DEBUG, "py.warnings": logging.WARNING,
                **{name: logging.DEBUG for name in OWN + LIBRARIES}}
    library = logging.WARNING if verbosity == 1 else logging.ERROR
    out = {"": logging.WARNING, "py.warnings": library, TYPE_HINTS: logging.ERROR}
    out.update({name: logging.DEBUG if verbosity == 1 else logging.INFO for name in OWN})
    out.update({name: library for name in LIBRARIES})
    if dataflow:
        out[DATAFLOW] = logging.INFO  # the job's URL and state: Beam's own progress on Dataflow
    return out


def configure_logging(verbosity: int = 0, *, dataflow: bool = False) -> None:
    """Set up the process's logging for a command at `verbosity` (idempotent: a second call replaces the
    first's handler and levels)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, SharedTerminalHandler):
            root.removeHandler(handler)
    handler = SharedTerminalHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    chosen = levels(verbosity, dataflow=dataflow)
    handler.addFilter(_LibraryOnRoot(chosen["apache_beam"]))
    root.addHandler(handler)
    logging.captureWarnings(True)
    for name, level in chosen.items():
        logging.getLogger(name or None).setLevel(level)
    # Its retry lines reach the Hub reader's counter (a handler on that logger itself) at every verbosity,
    # and any terminal (ours, or the library's own handler) only where the libraries' level shows them.
    logging.getLogger(HUB_RETRIES).propagate = chosen["huggingface_hub"] <= logging.WARNING


class _LibraryOnRoot(logging.Filter):
    """Beam logs a few notices on the root logger rather than its own (at import, without its Google Cloud
    libraries: "apitools not found, and bigquery client libraries are not available"): they are Beam's
    lines all the same, shown only where Beam's own are."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "root" or "apache_beam" not in record.pathname.replace("\\", "/").split("/"):
            return True
        return record.levelno >= self._level


def share_terminal(before: Callable[[], None], after: Callable[[], None]) -> None:
    """Have `before()` and `after()` called around every log record written (the live line's clear and
    redraw), until `release_terminal()`."""
    global _around_emit
    with _LOCK:
        _around_emit = (before, after)


def release_terminal() -> None:
    global _around_emit
    with _LOCK:
        _around_emit = None


def locked() -> threading.Lock:
    """The lock log records are written under (the live line writes under it too)."""
    return _LOCK


#: Exit statuses of every command (`EXIT_STATUS` tells them).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(SystemExit):
    """A wrong command line: exit status 2, the message (`str()`) printed on stderr by `main`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = EXIT_USAGE


def add_verbosity_arguments(parser) -> None:
    """-q/--quiet and -v/--verbose (every subcommand takes them; `main` reads them before anything else)."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="Print only errors and the summary: no progress, no warnings.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="Also print a line per episodes file, the run's metrics, each step's log lines and "
                             "Beam's warnings; -vv prints every library's debug log too.")


def end_process(code) -> None:
    """End the process with SystemExit's `code` (None, a status, or a message for stderr) the way Python
    would, minus its teardown: the other threads are waited for, the exit handlers run (logging's among
    them) and the output is flushed, but the modules and objects a run loaded are not taken apart one by
    one, which costs a process that ran a Beam pipeline a few tenths of a second after its work is done.
    For the process's own command only: a caller that goes on after the command must not use it."""
    met: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):  # met while the process ends: said once it has, never cut short
        signal.signal(s, lambda signum, _frame: met.append(signum))
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        _say(str(code), sys.stderr)
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    if met and status not in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        _say(f"interrupted by {signal.Signals(met[0]).name} after the command ended: its outcome is as printed "
             "above", sys.stdout)
        status = 128 + met[0]
    for stream in (sys.stdout, sys.stderr):
        _say("", stream)
    os._exit(status)


def _say(line: str, stream) -> None:
    """Write a line (none when empty) and flush; a stream that cannot be written (closed, a full disk)
    loses it: the status says how the command ended."""
    try:
        if line:
            print(line, file=stream)
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


# ---- a terminal that cannot be written -----------------------------------------------------------


class _KeptStream:
    """stdout or stderr of the command, whose writes never fail it: a closed terminal, a pipe whose reader
    left, a log file on a full disk lose the text, not the import. The first failure is kept (`lost`)."""

    def __init__(self, stream, name: str) -> None:
        self._stream = stream
        self.name = name
        self.lost: Optional[str] = None if stream is not None else "it was closed when the command started"

    def _failed(self, ex: BaseException) -> None:
        if self.lost is None:
            self.lost = str(ex) or type(ex).__name__

    def write(self, text: str) -> int:
        if self._stream is not None and self.lost is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as ex:  # ValueError: a closed file
                self._failed(ex)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._stream is not None and self.lost is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as ex:
                self._failed(ex)

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self.lost is None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, attr: str):  # encoding, fileno, buffer...: the stream's own
        if self._stream is None:
            raise AttributeError(attr)
        return getattr(self._stream, attr)


class kept_streams:
    """Within the block, sys.stdout and sys.stderr are `_KeptStream`s; at its end, when text was lost, one
    line says so on whichever of the two still writes (nothing, when neither does), and the streams found
    are put back. The command's exit status stays the import's: only its terminal text was lost."""

    def __enter__(self) -> "kept_streams":
        self._saved = (sys.stdout, sys.stderr)
        # inside another such block (the command, then the import it runs): that one's streams, and its end
        self._outer = isinstance(sys.stdout, _KeptStream) and isinstance(sys.stderr, _KeptStream)
        if self._outer:
            return self
        self.out = _KeptStream(sys.stdout, "stdout")
        self.err = _KeptStream(sys.stderr, "stderr")
        sys.stdout, sys.stderr = self.out, self.err
        return self

    def __exit__(self, *exc) -> None:
        if self._outer:
            return
        self.out.flush()
        self.err.flush()
        lost = [s for s in (self.out, self.err) if s.lost is not None]
        if lost:
            line = ("warning: the command's output to " + " and ".join(f"{s.name} ({s.lost})" for s in lost)
                    + " was lost; the import went on regardless: each output's manifest.json and errors.jsonl "
                    "say how it ended\n")
            for stream in (self.err, self.out):
                if stream.lost is None:
                    stream.write(line)
                    stream.flush()
                    break
        sys.stdout, sys.stderr = self._saved
