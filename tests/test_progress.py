"""The live progress of a local run: the line's words and numbers, its redraw on a terminal and log lines
elsewhere, and counts that move while episodes are read (before any episodes file commits)."""

from __future__ import annotations

import io
import logging
import threading
import time

from tests.helpers import lerobot_dataset, read_manifest, run_import
from pipelines import progress as display
from transforms.base import live_counts

COUNTS = dict(episodes_files=5, episodes_files_planned=5, episodes_files_done=2, episodes_files_failed=1,
              episodes_planned=300, frames_planned=90_000, episodes=120, frames=36_000, data_bytes=48_000_000,
              mp4_bytes=1_234_567)


def test_the_line_names_files_episodes_frames_bytes_rate_and_time_left():
    assert display.render_line(COUNTS, 6.0) == (
        "[6s] episodes files 2/5 (1 failed) · episodes 120/300 · frames 36,000/90,000 · data 48.0 MB · "
        "MP4 1.2 MB · 6,000 frames/s · ETA 9s")
    planning = dict(COUNTS, episodes_files_planned=3, episodes_files_failed=0)
    assert display.render_line(planning, 75.0) == (  # totals (and so a time left) once every file is planned
        "[1m15s] episodes files 2/5 · episodes 120 · frames 36,000 · data 48.0 MB · MP4 1.2 MB · 480 frames/s")
    assert display.render_line(dict.fromkeys(live_counts.KEYS, 0), 0.4) == (
        "[0s] episodes files 0/0 · episodes 0 · frames 0 · data 0.0 MB · MP4 0.0 MB")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_redrawn_and_cleared_at_the_end():
    stream = _Terminal()
    shown = display.ProgressDisplay(stream, interval_s=0.02, read=lambda: COUNTS).start()
    time.sleep(0.2)
    shown.stop()
    text = stream.getvalue()
    assert text.count("\r\x1b[K[0s] episodes files 2/5 (1 failed) · episodes 120/300") >= 2
    assert text.endswith("\r\x1b[K")  # the summary that follows starts on a clean line


def test_a_log_record_steps_around_the_line():
    from pipelines import console
    stream = _Terminal()
    shown = display.ProgressDisplay(stream, interval_s=0.02, read=lambda: COUNTS).start()
    time.sleep(0.1)
    handler = console.SharedTerminalHandler()
    handler.setStream(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.emit(logging.LogRecord("transforms", logging.INFO, __file__, 1, "an episodes file imported", (), None))
    shown.stop()
    text = stream.getvalue()
    assert "\r\x1b[Kan episodes file imported\n\r\x1b[K[0s] episodes files 2/5" in text


def test_elsewhere_a_log_line_per_interval(caplog):
    with caplog.at_level(logging.INFO, logger="pipelines.progress"):
        shown = display.ProgressDisplay(io.StringIO(), interval_s=0.05, read=lambda: COUNTS).start()
        time.sleep(0.3)
        shown.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "pipelines.progress"]
    assert len(lines) >= 2 and lines[0].startswith("progress: [0s] episodes files 2/5 (1 failed)")


def test_counts_arrive_while_episodes_are_read_not_only_at_commits(tmp_path):
    """Sampled every few ms during a run: frames and data bytes are counted before the first episodes file
    commits, and the final counts are the manifest's."""
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(live_counts.snapshot())
            time.sleep(0.002)

    spy = threading.Thread(target=sample)
    spy.start()
    try:
        assert run_import(lerobot_dataset("h264_multi_file"), tmp_path / "out") == 0
    finally:
        stop.set()
        spy.join()
    assert any(s["frames"] > 0 and s["data_bytes"] > 0 and s["episodes_files_done"] == 0 for s in samples)
    totals = read_manifest(tmp_path / "out")["totals"]
    final = live_counts.snapshot()
    assert (final["episodes_files"], final["episodes_files_done"], final["episodes_files_failed"]) == (5, 5, 0)
    assert (final["episodes"], final["frames"]) == (totals["episodes"], totals["frames"]) == (10, 104)
    assert final["frames_planned"] == 104 and final["episodes_planned"] == 10
    assert final["data_bytes"] > 0 and final["mp4_bytes"] > 0
