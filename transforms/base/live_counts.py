"""What the import's steps have done so far in this process, for the command's live progress line.

Beam's counters are read when a run ends; a local run (FnApiRunner runs the steps in the launching
process) shows its progress while it runs, so each step also adds its work here as it goes: episodes
files listed, planned and done, episodes and frames typed, data-file and MP4 bytes read. A thread of the
command (`pipelines.progress`) reads `snapshot()`. On Dataflow the workers add to their own copies, which
nobody reads: a few additions under a lock per batch, no cost worth a switch. Beam-free.
"""

from __future__ import annotations

import threading

#: Every count, in the order the progress line names them.
KEYS = ("episodes_files", "episodes_files_planned", "episodes_files_done", "episodes_files_failed",
        "episodes_planned", "frames_planned", "episodes", "frames", "data_bytes", "mp4_bytes")

_LOCK = threading.Lock()
_COUNTS = dict.fromkeys(KEYS, 0)
#: (run id, dataset root) -> why its manifest could not be written (a full disk, a read-only output).
_UNFINISHED: dict[tuple[str, str], str] = {}


def add(**counts: int) -> None:
    """Add to the counts named (see `KEYS`)."""
    with _LOCK:
        for key, n in counts.items():
            _COUNTS[key] += n


def snapshot() -> dict[str, int]:
    """The counts now."""
    with _LOCK:
        return dict(_COUNTS)


def record_unfinished(run_id: str, root: str, why: str) -> None:
    """A dataset of run `run_id` whose manifest could not be written, and why (the command says so: the
    output itself cannot, and its last manifest still names the last run)."""
    with _LOCK:
        _UNFINISHED[(run_id, root)] = why


def unfinished(run_id: str) -> dict[str, str]:
    """dataset root -> why its manifest could not be written, for the datasets of run `run_id`."""
    with _LOCK:
        return {root: why for (run, root), why in _UNFINISHED.items() if run == run_id}


def reset() -> None:
    """Start counting again from zero (a new run in this process)."""
    with _LOCK:
        for key in KEYS:
            _COUNTS[key] = 0
