"""The decode threads of an item's cameras, chosen by timing items (`transforms.reader.threads.ThreadChoice`)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import lerobot_dataset, run_import
from transforms.reader.threads import ThreadChoice


def _serve(choice: ThreadChoice, items: int, cost: dict[int, float]) -> list[int]:
    """Serve `items` items, each taking `cost[threads]` seconds; the threads each was decoded with."""
    used = []
    for _ in range(items):
        t = choice.threads()
        used.append(t)
        choice.record(t, cost[t])
    return used


def test_it_times_both_settings_alternately_and_keeps_the_faster():
    choice = ThreadChoice(2, probe=3, keep=5)
    # a busy machine: the second thread gets no core of its own, and costs more than it saves
    used = _serve(choice, 6, {1: 0.010, 2: 0.011})
    assert used == [1, 2, 1, 2, 1, 2] and choice.rounds == 1 and choice.chosen == 1
    assert _serve(choice, 5, {1: 0.010, 2: 0.011}) == [1] * 5
    # the machine went quiet: the next round of timing finds two threads faster, and keeps them
    used = _serve(choice, 6 + 5, {1: 0.010, 2: 0.006})
    assert used == [1, 2] * 3 + [2] * 5 and choice.rounds == 2 and choice.chosen == 2


def test_medians_decide_not_one_slow_item():
    choice = ThreadChoice(3, probe=5, keep=100)
    times = {1: iter([0.010, 0.010, 0.500, 0.010, 0.010]), 3: iter([0.008] * 5)}
    for _ in range(10):
        t = choice.threads()
        choice.record(t, next(times[t]))
    assert choice.chosen == 3  # one slow item (a long GOP) with one thread does not decide it
    choice = ThreadChoice(3, probe=5, keep=100)
    times = {1: iter([0.010] * 5), 3: iter([0.002, 0.012, 0.012, 0.012, 0.012])}
    for _ in range(10):
        t = choice.threads()
        choice.record(t, next(times[t]))
    assert choice.chosen == 1


def test_items_are_timed_per_sample_decoded():
    choice = ThreadChoice(2, probe=2, keep=10)
    # one thread: 10 ms for 2 samples, 15 ms for 3; two threads: 12 ms for 4 samples, 9 ms for 3
    for t, seconds, samples in ((1, 0.010, 2), (2, 0.012, 4), (1, 0.015, 3), (2, 0.009, 3)):
        assert choice.threads() == t
        choice.record(t, seconds, samples)
    assert choice.chosen == 2  # 3 ms a sample against 5, though its items took as long
    choice = ThreadChoice(2, probe=1, keep=10)
    choice.record(1, 0.001, 0)  # served from frames already decoded: says nothing of the threads
    assert choice.threads() == 1 and choice.rounds == 0


def test_a_record_the_plan_did_not_ask_for_is_not_counted():
    choice = ThreadChoice(2, probe=1, keep=10)
    assert choice.threads() == 1
    choice.record(2, 0.001)  # another caller's item, not the one timed with one thread
    assert choice.threads() == 1 and choice.rounds == 0
    choice.record(1, 0.010)
    choice.record(2, 0.020)
    assert choice.rounds == 1 and choice.chosen == 1


def test_one_camera_or_one_cpu_never_times_anything():
    choice = ThreadChoice(1)
    assert _serve(choice, 50, {1: 0.01}) == [1] * 50 and choice.rounds == 0


@pytest.fixture(scope="module")
def so101(tmp_path_factory):
    out = tmp_path_factory.mktemp("threads") / "out"
    assert run_import(lerobot_dataset("so101_av1"), out) == 0
    return str(out)


def test_the_dataset_s_default_times_items_and_returns_the_same_items(so101, monkeypatch):
    """With `decode_threads` left to its default, items are decoded with one thread and with one per camera in
    turn (the choice's plan), and the items are those of a fixed setting."""
    import torch

    from transforms.reader.frames import ImportedFrames

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    auto = ImportedFrames(so101, camera_dtype="uint8")
    fixed = ImportedFrames(so101, camera_dtype="uint8", decode_threads=1)
    seen = []
    for i in np.random.default_rng(5).permutation(len(auto))[:30].tolist():
        seen.append(auto._threads())
        a, b = auto[i], fixed[i]
        for cam in auto.cameras:
            assert torch.equal(a[cam], b[cam])
    choice = auto._thread_choice
    assert choice is not None and choice.most == 2 and choice.rounds == 1 and seen[:4] == [1, 2, 1, 2]
    assert fixed._thread_choice is None  # a fixed setting times nothing
