"""An AV1 encode in a test leaves no thread of the process at real-time priority (tests/scheduling.py), and
runs in the test process's encoding child (tests/isolated.py)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests import mp4_factory as F
from tests.isolated import IsolatedError, run_isolated
from tests.scheduling import restore_normal_scheduling


def _policies() -> set[int]:
    """The scheduling policies of the process's threads (a thread that ends while they are listed is left
    out: the test process runs decoder and runner threads of earlier tests that end on their own)."""
    policies = set()
    for t in os.listdir("/proc/self/task"):
        try:
            policies.add(os.sched_getscheduler(int(t)))
        except ProcessLookupError:
            continue
    return policies


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="no POSIX scheduling policies on this system")
def test_av1_encode_leaves_normal_scheduling(tmp_path):
    F.encode(tmp_path / "a.mp4", codec="libsvtav1", frames=4)
    assert _policies() == {os.SCHED_OTHER}
    seen = []
    t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
    t.start()
    t.join()
    assert seen == [os.SCHED_OTHER]  # a thread started afterwards does not inherit real-time priority


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no POSIX scheduling policies on this system")
def test_restore_moves_a_real_time_thread_back():
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        pytest.skip("this user may not use real-time priority, so nothing can leave it there")
    assert os.SCHED_FIFO in _policies()
    assert restore_normal_scheduling() >= 1
    assert _policies() == {os.SCHED_OTHER}


def test_encodes_run_in_a_child_process_that_is_reused(tmp_path, monkeypatch):
    calls = []

    def recording(func, *args, **kwargs):
        calls.append(func.__name__)
        return run_isolated(func, *args, **kwargs)

    monkeypatch.setattr(F, "run_isolated", recording)
    path = F.encode(tmp_path / "a.mp4", codec="libsvtav1", frames=4)
    assert path.stat().st_size > 0 and calls == ["_encode_here"]  # the encode itself went to the child
    child = run_isolated(os.getpid)
    assert child != os.getpid()
    assert run_isolated(os.getpid) == child  # one child, started once
    assert _policies() == {os.SCHED_OTHER}  # and nothing here was moved to real-time priority


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)  # what a native crash of an encoder does to the child


def test_a_child_that_dies_is_a_clear_error_and_the_next_call_starts_a_new_one():
    died = r"the child process that ran (tests\.)?test_scheduling\._segfault died \(.*\); an encoder crashed or the " \
        r"process was killed: run the call again"
    with pytest.raises(IsolatedError, match=died):
        run_isolated(_segfault)
    assert run_isolated(os.getpid) != os.getpid()
