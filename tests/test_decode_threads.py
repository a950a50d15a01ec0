"""The decode threads of an item's cameras, chosen by timing items (`transforms.reader.threads.ThreadChoice`)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import assert_items_equal, lerobot_dataset, run_import
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


def _time(choice: ThreadChoice, timed: dict[int, list[tuple[float, int]]]) -> None:
    """Serve the items of one round of timing: `timed[threads]`, (seconds, samples) each, in plan order."""
    left = {t: iter(v) for t, v in timed.items()}
    while choice.rounds == 0:
        t = choice.threads()
        choice.record(t, *next(left[t]))


def test_one_slow_item_does_not_decide_and_items_weigh_by_their_samples():
    choice = ThreadChoice(3, probe=5, keep=100)
    _time(choice, {1: [(0.010, 1), (0.010, 1), (0.500, 1), (0.010, 1), (0.010, 1)], 3: [(0.008, 1)] * 5})
    assert choice.chosen == 3  # the one item descheduled for half a second is left out
    # with three threads, three items of one sample at 3 ms and two of four samples at 5 ms each: 4.1 ms a
    # sample over the items kept, though the median item took 3 ms a sample; one thread: 3.5 ms
    choice = ThreadChoice(3, probe=5, keep=100)
    _time(choice, {1: [(0.0035, 1)] * 5, 3: [(0.003, 1), (0.020, 4), (0.003, 1), (0.020, 4), (0.003, 1)]})
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
    from transforms.reader.frames import ImportedFrames

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    auto = ImportedFrames(so101, camera_dtype="uint8")
    fixed = ImportedFrames(so101, camera_dtype="uint8", decode_threads=1)
    seen = []
    for i in np.random.default_rng(5).permutation(len(auto))[:30].tolist():
        seen.append(auto._threads())
        assert_items_equal(auto[i], fixed[i])
    choice = auto._thread_choice
    assert choice is not None and choice.most == 2 and choice.rounds == 1 and seen[:4] == [1, 2, 1, 2]
    assert fixed._thread_choice is None  # a fixed setting times nothing


def test_camera_threads_each_take_the_next_camera_and_the_first_camera_s_error_is_raised(so101, monkeypatch):
    """With two threads, a thread done with its camera takes the next one not taken (the third camera goes to
    whichever thread is not on the slow second camera); every thread finishes before the item returns or
    raises, and the error raised is the first failing camera's."""
    import threading
    import time

    from transforms.reader.frames import FramesError, ImportedFrames

    import torch

    ds = ImportedFrames(so101, camera_dtype="uint8", decode_threads=2)
    a, b = ds.cameras
    want = ImportedFrames(so101, camera_dtype="uint8", decode_threads=1)[3]
    real = ImportedFrames._camera
    taken, slow, failing = [], set(), set()
    running = []

    def camera(self, prep, cam, rows, where):
        running.append(cam)
        try:
            time.sleep(0.3 if cam in slow else 0.05)  # long enough for both threads to start on a camera
            taken.append((threading.get_ident(), cam))
            if cam in failing:
                raise FramesError(f"{cam} failed")
            return real(self, prep, cam, rows, where)
        finally:
            running.remove(cam)

    monkeypatch.setattr(ImportedFrames, "_camera", camera)
    ds.cameras = [a, b, a]  # three cameras' worth of work on two threads
    slow.add(b)
    item = ds[3]
    by_thread: dict = {}
    for thread, cam in taken:
        by_thread.setdefault(thread, []).append(cam)
    # the thread on the slow camera did that one; the other took both of the others
    assert sorted(by_thread.values()) == [[a, a], [b]]
    assert torch.equal(item[a], want[a]) and torch.equal(item[b], want[b])
    failing.update((a, b))
    with pytest.raises(FramesError, match=f"^{a} failed$"):
        ds[4]
    assert running == []  # the slow camera's thread was waited for
    failing.discard(a)
    with pytest.raises(FramesError, match=f"^{b} failed$"):
        ds[5]
