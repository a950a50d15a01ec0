"""`ImportedFrames` arguments checked up front: offsets and episode ids that are NaN, infinite, huge or not
whole numbers are a `FramesError` naming the argument, never a ValueError, OverflowError or IndexError
from deep inside numpy."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="ImportedFrames needs torch: pip install -e '.[torch,video]'")

from tests.helpers import SAMPLE, run_import  # noqa: E402
from transforms.reader import FramesError, ImportedFrames  # noqa: E402

FRONT = "observation.images.front"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("frames_args") / "out"
    assert run_import(SAMPLE, out) == 0
    return str(out)


@pytest.mark.parametrize("delta, message", [
    ({"action": [float("nan")]}, "delta_timestamps['action'] holds nan: offsets are finite seconds within "
                                 "+/-86400 s of the frame"),
    ({"action": [float("inf")]}, "delta_timestamps['action'] holds inf: offsets are finite seconds"),
    ({"action": [1e300]}, "delta_timestamps['action'] holds 1e+300: offsets are finite seconds"),
    ({"action": [10 ** 400]}, "delta_timestamps['action'] holds 1000000000"),
    ({"action": ["soon"]}, "delta_timestamps['action'] holds 'soon', not a number of seconds"),
    ({"action": 0.1}, "delta_timestamps['action'] must be a list of offsets in seconds, not float"),
    ({"action": [0.0] * 100_001}, "delta_timestamps['action'] has 100,001 offsets; at most 100,000"),
    ({"action": [0.05]}, "are outside of the tolerance: offsets must be multiples of 1/30 s"),
])
def test_bad_offsets_are_frames_errors(out, delta, message):
    with pytest.raises(FramesError) as refused:
        ImportedFrames(out, delta_timestamps=delta)
    assert message in str(refused.value), str(refused.value)


@pytest.mark.parametrize("episodes, message", [
    ([float("nan")], "episodes holds nan, not an episode index (a whole number >= 0)"),
    ([1.5], "episodes holds 1.5, not an episode index"),
    ([2 ** 70], "episodes holds 1180591620717411303424, not an episode index"),
    ([-1], "episodes holds -1, not an episode index"),
    ([True], "episodes holds True, not an episode index"),
    (["0"], "episodes holds '0', not an episode index"),
    ([9], "episodes 9 are not in the import at"),
])
def test_bad_episode_ids_are_frames_errors(out, episodes, message):
    with pytest.raises(FramesError) as refused:
        ImportedFrames(out, episodes=episodes)
    assert message in str(refused.value), str(refused.value)


def test_whole_float_episode_ids_and_good_windows_serve(out):
    ds = ImportedFrames(out, episodes=[1.0, 2], delta_timestamps={"action": [-1 / 30, 0.0]})
    assert list(ds.episode_indices) == [1, 2]
    assert ds[0]["action"].shape[0] == 2
