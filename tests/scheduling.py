"""Keep the test and benchmark processes at normal scheduling priority.

SVT-AV1 (the `libsvtav1` encoder PyAV uses for AV1) moves the thread that drives it, and every thread
that thread starts afterwards, to real-time SCHED_FIFO priority 99 when it runs as root, as CI does.
A process left that way starves everything else on a small machine: a busy thread at priority 99 never
yields to the child processes it waits for (the reference's oracle, the CLI under test), so a run can
stall for many minutes. Every place that encodes AV1 calls `restore_normal_scheduling()` when it has
finished, and the test session does so after every test.
"""

from __future__ import annotations

import os


def restore_normal_scheduling() -> int:
    """Put every thread of this process back on the normal (SCHED_OTHER) policy; returns how many moved."""
    if not hasattr(os, "sched_setscheduler"):
        return 0
    moved = 0
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            if os.sched_getscheduler(tid) != os.SCHED_OTHER:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                moved += 1
        except OSError:  # the thread ended meanwhile, or the policy may not be changed here
            continue
    return moved
