"""The live progress of a local run: one line on a terminal, redrawn every second, or a log line every
30 s when stderr is not a terminal (a CI log, a file).

It reads the counts the import's steps add as they work (`transforms.base.live_counts`): FnApiRunner runs them
in this process, so the line moves while episodes are read, not only when an episodes file commits. On
Dataflow the steps run on workers and Beam's own job messages are the progress; no line is shown. `-q`
shows none either.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Callable, Iterator, Optional, TextIO

from pipelines import console
from transforms.base import live_counts

_LOG = logging.getLogger("pipelines.progress")

#: Seconds between redraws of the line on a terminal, and between log lines otherwise.
TTY_INTERVAL_S = 1.0
LOG_INTERVAL_S = 30.0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def render_line(counts: dict[str, int], elapsed_s: float) -> str:
    """The progress line for `counts` (`transforms.base.live_counts.snapshot()`) after `elapsed_s` seconds.

    "episodes files 2/5 · episodes 120/300 · frames 36,000/90,000 · data 48.0 MB · MP4 1.2 MB ·
    6,000 frames/s · ETA 9s": files committed (or failed) of those to import, episodes and frames typed
    (of those planned), bytes read, the frame rate so far and, once every file is planned, the time left.
    """
    c = counts
    parts = [f"episodes files {c['episodes_files_done']}/{c['episodes_files']}"]
    if c["episodes_files_failed"]:
        parts[0] += f" ({c['episodes_files_failed']} failed)"
    planned = c["episodes_files"] > 0 and c["episodes_files_planned"] >= c["episodes_files"]
    parts.append(f"episodes {c['episodes']:,}" + (f"/{c['episodes_planned']:,}" if planned else ""))
    parts.append(f"frames {c['frames']:,}" + (f"/{c['frames_planned']:,}" if planned else ""))
    parts.append(f"data {_mb(c['data_bytes'])}")
    parts.append(f"MP4 {_mb(c['mp4_bytes'])}")
    rate = c["frames"] / elapsed_s if elapsed_s > 0 else 0.0
    if c["frames"]:
        parts.append(f"{rate:,.0f} frames/s")
    if planned and rate > 0 and c["frames_planned"] >= c["frames"]:
        parts.append(f"ETA {_duration((c['frames_planned'] - c['frames']) / rate)}")
    return f"[{_duration(elapsed_s)}] " + " · ".join(parts)


class ProgressDisplay:
    """A thread that shows the progress line until `stop()`.

    Args:
        stream: where the line goes (stderr).
        tty: draw a live line (default: whether `stream` is a terminal); else log a line per interval.
        interval_s: seconds between redraws or log lines (default TTY_INTERVAL_S / LOG_INTERVAL_S).
        read: where the counts come from (`transforms.base.live_counts.snapshot`).
    """

    def __init__(self, stream: Optional[TextIO] = None, *, tty: Optional[bool] = None,
                 interval_s: Optional[float] = None, read: Callable[[], dict[str, int]] = live_counts.snapshot,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._interval = interval_s or (TTY_INTERVAL_S if self._tty else LOG_INTERVAL_S)
        self._read, self._clock = read, clock
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._shown = ""
        self._started = clock()

    def line(self) -> str:
        return render_line(self._read(), self._clock() - self._started)

    def start(self) -> "ProgressDisplay":
        self._started = self._clock()
        if self._tty:
            console.share_terminal(self._clear, self._redraw)
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._tty:
            console.release_terminal()
            with console.locked():
                self._clear()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            if self._tty:
                with console.locked():
                    self._shown = self._shown or self.line()
                    self._redraw()
            else:
                _LOG.info("progress: %s", self.line())

    def _clear(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def _redraw(self) -> None:
        if self._shown:
            self._shown = self.line()  # after a log line too: never a stale count under fresh news
            self._stream.write("\r\x1b[K" + self._shown)
            self._stream.flush()


@contextlib.contextmanager
def showing(enabled: bool, **kwargs) -> Iterator[Optional[ProgressDisplay]]:
    """Show the progress of the run inside the block (when `enabled`), counting from zero."""
    if not enabled:
        yield None
        return
    live_counts.reset()
    display = ProgressDisplay(**kwargs).start()
    try:
        yield display
    finally:
        display.stop()


def local_run(options) -> bool:
    """The run's steps run in this process (not on Dataflow or a Dask cluster, not in the worker processes of the direct
    runner's multi_processing mode), so their counts reach the line.

    Args:
        options: the run's PipelineOptions.
    """
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__ if runner is not None else ""
    remote = "dataflow" in name.lower() or "dask" in name.lower()  # steps on workers, counts there
    return not remote and options.view_as(DirectOptions).direct_running_mode != "multi_processing"
