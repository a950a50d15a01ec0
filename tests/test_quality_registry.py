"""The quality checks' registry: one entry per check, and what is derived from it or held to it.

* every episode check's vectorised screen and its per-episode check agree over the same cases (only the
  episodes a screen names reach the per-episode checks, so a screen that misses a case would hide it);
* the names and descriptions the CLI's `--strict` help, `lerobot-import check`, the Flex Template's help text
  and the README's table give are the registry's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms import quality
from transforms.lerobot.episodes_files import EpisodeRow, VideoSlice
from transforms.lerobot.info import DatasetInfo, parse_info
from transforms.quality import checks, screen
from transforms.quality.episode_checks import EpisodeContext, FeaturePlan
from transforms.quality.video_checks import SampleTimes

REPO = Path(__file__).resolve().parents[1]
FPS = 10.0
TASKS = ["pick", "place", "wave"]


def _info() -> DatasetInfo:
    return parse_info(json.dumps({
        "codebase_version": "v3.0", "fps": FPS, "total_episodes": 0, "total_frames": 0,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [3], "names": ["a", "b", "c"]},
            "reward": {"dtype": "float64", "shape": [1], "names": None},
            "observation.images.front": {"dtype": "video", "shape": [4, 4, 3], "names": ["h", "w", "c"],
                                         "info": {"video.codec": "av1", "video.fps": FPS}},
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            "episode_index": {"dtype": "int64", "shape": [1], "names": None},
            "index": {"dtype": "int64", "shape": [1], "names": None},
            "task_index": {"dtype": "int64", "shape": [1], "names": None},
        }}).encode())


DEFECTS = ("clean", "timestamp_off", "timestamp_repeat", "nan", "inf", "frozen_state", "frozen_all",
           "other_episode", "frame_index_shift", "unknown_task", "task_mismatch", "video_short", "video_offgrid")


def _episode(rng: np.random.Generator, episode: int, length: int, defect: str, start: float):
    """(row, typed frames) of one episode with `defect` put in at a random frame."""
    frame_index = np.arange(length, dtype=np.int64)
    timestamps = (frame_index / FPS).astype(np.float32)
    state = rng.normal(size=(length, 3)).astype(np.float32)
    reward = rng.normal(size=length)
    episode_index = np.full(length, episode, np.int64)
    task_index = np.full(length, episode % 2, np.int64)
    tasks = (TASKS[episode % 2],)
    at = int(rng.integers(0, length))
    if defect == "timestamp_off":
        timestamps[at] += np.float32(0.003)
    elif defect == "timestamp_repeat" and length > 1:
        at = max(at, 1)
        timestamps[at:] -= np.float32(1 / FPS)
    elif defect == "nan":
        state[at, int(rng.integers(0, 3))] = np.nan
    elif defect == "inf":
        reward[at] = -np.inf
    elif defect == "frozen_state":
        state[:] = state[0]
    elif defect == "frozen_all":
        state[:] = state[0]
        reward[:] = reward[0]
    elif defect == "other_episode":
        episode_index[at] = episode + 1000
    elif defect == "frame_index_shift":
        frame_index[at:] += 1
    elif defect == "unknown_task":
        task_index[at] = 7
    elif defect == "task_mismatch":
        task_index[at] = 2
    state_type = pa.list_(pa.float32(), 3)
    frames = pa.StructArray.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 3).cast(state_type), pa.array(reward),
         pa.array(timestamps), pa.array(frame_index), pa.array(episode_index),
         pa.array(np.arange(length, dtype=np.int64)), pa.array(task_index)],
        names=["observation.state", "reward", "timestamp", "frame_index", "episode_index", "index", "task_index"])
    duration = length / FPS
    video = VideoSlice("observation.images.front", "videos/front.mp4", start, start + duration)
    row = EpisodeRow(position=episode, episode_index=episode, tasks=tasks, length=length, data_file="data/x.parquet",
                     from_index=0, to_index=length, videos=(video,))
    return row, frames


def _samples(rows, defects) -> dict:
    """The MP4's sample times: every frame's time, less where an episode's defect drops or moves them."""
    times = []
    for row, defect in zip(rows, defects):
        own = row.videos[0].from_timestamp + np.arange(row.length) / FPS
        if defect == "video_short":
            own = own[: max(row.length // 2, 0)]
        elif defect == "video_offgrid":
            own = own + 0.004
        times.append(own)
    all_times = np.sort(np.concatenate(times))
    end = rows[-1].videos[0].to_timestamp + 1.0
    return {"videos/front.mp4": SampleTimes("videos/front.mp4", -1.0, end, all_times, len(all_times), FPS)}


def _part(seed: int, n: int = 12):
    rng = np.random.default_rng(seed)
    rows, frames, defects = [], [], []
    start = 0.0
    for episode in range(n):
        defect = DEFECTS[int(rng.integers(0, len(DEFECTS)))]
        length = int(rng.integers(1, 30))
        row, f = _episode(rng, episode, length, defect, start)
        rows.append(row)
        frames.append(f)
        defects.append(defect)
        start += length / FPS + 1.0
    return rows, frames, defects


EPISODE_CHECKS = [c for c in checks.REGISTRY if c.scope == checks.EPISODE]


@pytest.mark.parametrize("check", EPISODE_CHECKS, ids=lambda c: c.name)
def test_each_screen_agrees_with_its_per_episode_check(check):
    """Over 40 parts of random episodes with every kind of defect: an episode has a finding of the check exactly
    when the check's screen names it."""
    info = _info()
    plan = FeaturePlan.of(info)
    found_any = 0
    for seed in range(40):
        rows, frames, defects = _part(seed)
        samples = _samples(rows, defects)
        part = screen.PartFrames(info, rows, frames, plan, tasks=TASKS, samples=samples)
        flagged = check.screen(part)
        for row, f, flag in zip(rows, frames, flagged):
            ctx = EpisodeContext("ds", "meta/episodes/chunk-000/file-000.parquet", row, f, info, plan)
            findings = check.check(ctx, TASKS, samples)
            assert all(x.check == check.name for x in findings)
            assert bool(findings) == bool(flag), (
                f"seed {seed}, episode {row.episode_index} ({defects[row.position]}): screen says {bool(flag)}, "
                f"the per-episode check found {[x.detail for x in findings]}")
            found_any += bool(findings)
    assert found_any >= 5, f"the cases never make {check.name} find anything"


def test_the_agreement_fails_for_a_screen_that_misses_cases():
    """The agreement above is no formality: a screen that names nothing disagrees with the per-episode check
    on these cases (episodes with NaN or infinite values it would hide)."""
    info = _info()
    plan = FeaturePlan.of(info)
    rows, frames, defects = _part(3, n=30)
    check = checks.BY_NAME["non_finite"]
    part = screen.PartFrames(info, rows, frames, plan, tasks=TASKS)
    hidden = [row.episode_index for row, f, flag in zip(rows, frames, part.none())
              if check.check(EpisodeContext("ds", "f", row, f, info, plan), TASKS, {}) and not flag]
    assert hidden and all(defects[i] in ("nan", "inf") for i in hidden)


def test_a_null_column_makes_its_screens_name_every_episode():
    """A feature with a null frame cannot be screened: its checks' screens name every episode, and the
    per-episode checks decide."""
    info = _info()
    plan = FeaturePlan.of(info)
    rows, frames, defects = _part(5, n=4)
    names = list(frames[1].type.names)
    reward = frames[1].field("reward").to_pylist()
    arrays = [pa.array([None] + reward[1:], pa.float64()) if name == "reward" else frames[1].field(name)
              for name in names]
    frames[1] = pa.StructArray.from_arrays(arrays, names=names)
    part = screen.PartFrames(info, rows, frames, plan, tasks=TASKS)
    assert screen.non_finite(part).all() and screen.frozen_feature(part).all()
    # the other checks still screen: only the episodes with a wrong row are named
    assert list(screen.episode_rows(part)) == [d in ("other_episode", "frame_index_shift") for d in defects]


def test_suspects_is_every_screen_together():
    info = _info()
    plan = FeaturePlan.of(info)
    rows, frames, defects = _part(11, n=20)
    samples = _samples(rows, defects)
    part = screen.PartFrames(info, rows, frames, plan, tasks=TASKS, samples=samples)
    union = np.zeros(len(rows), bool)
    for check in EPISODE_CHECKS:
        union |= check.screen(part)
    assert np.array_equal(checks.suspects(info, rows, frames, plan, tasks=TASKS, samples=samples), union)
    assert union.any() and not union.all()


def test_registry_names_are_unique_and_wired():
    names = [c.name for c in checks.REGISTRY]
    assert len(names) == len(set(names)) == 9
    assert list(quality.CHECKS) == names
    assert quality.LEROBOT_BLOCKING == {"timestamp_grid", "video_samples"}
    for c in checks.REGISTRY:
        assert (c.screen is not None) == (c.check is not None) == (c.scope == checks.EPISODE), c.name
        assert c.description and not c.description.endswith(".")


def _listed_names(text: str) -> list[str]:
    return re.findall(r"[a-z]+(?:_[a-z]+)+", text)


def test_strict_help_of_the_import_names_the_registry_checks():
    from pipelines.command_line import import_help
    text = " ".join(import_help().split())
    listed = text[text.index("The checks:"):]
    assert _listed_names(listed)[:len(quality.CHECKS)] == list(quality.CHECKS)


def test_flex_template_help_names_the_registry_checks():
    doc = json.loads((REPO / "deploy" / "flex-template" / "metadata.json").read_text())
    strict, = [p for p in doc["parameters"] if p["name"] == "strict"]
    listed = strict["helpText"].split("(rule quality):", 1)[1]
    assert _listed_names(listed) == list(quality.CHECKS)


def test_readme_quality_table_is_the_registry():
    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| ", text[text.index("| check | finds |"):], re.MULTILINE)
    assert rows[:len(quality.CHECKS)] == list(quality.CHECKS)


def test_check_command_help_names_the_registry_checks(capsys):
    from pipelines import check
    with pytest.raises(SystemExit):
        check.run(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ", ".join(quality.CHECKS) in out
