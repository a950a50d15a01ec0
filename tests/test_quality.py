"""The quality checks (transforms.quality), without Beam: one case per check on a dataset the test writes, each
finding named with its episode and feature; none at all on the bundled sample and the LeRobot-writer corpus.

The cases run through `check_dataset_quality` (what `lerobot-import check` runs), so the data is read as the
import reads it; the import's own pass calls the same `check_part` (tests/test_quality_import.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.dataset_factory import edit_episodes, edit_info, write_dataset
from tests.helpers import REPO, lerobot_corpus, third_party_path
from transforms import quality
from transforms.lerobot.episodes_files import EpisodeRow, VideoSlice
from transforms.lerobot.info import parse_info
from transforms.quality.dataset import check_dataset_quality

LENGTHS = (5, 7, 6)  # the factory's episodes; episode e starts at row sum(LENGTHS[:e]) of the data file
STARTS = np.concatenate([[0], np.cumsum(LENGTHS)])


def _found(root, **kw) -> list[tuple]:
    report = check_dataset_quality(str(root), **kw)
    assert report.problems == ()
    return [(f.check, f.episode_index, f.feature, f.count, f.first_frame) for f in report.findings]


def _only(root, **kw) -> quality.Finding:
    report = check_dataset_quality(str(root), **kw)
    assert len(report.findings) == 1, report.findings
    return report.findings[0]


def _set_column(table: pa.Table, name: str, values) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def _vectors(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy().reshape(len(column), -1).copy()


def _with_vectors(table: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = table.schema.get_field_index(name)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1).astype(np.float32)), values.shape[1])
    return table.set_column(i, table.schema.field(i), column)


def test_a_clean_dataset_has_no_finding(tmp_path):
    assert _found(write_dataset(tmp_path / "ds")) == []


@pytest.mark.parametrize("dataset", [REPO / "tests/data/so101_av1"] + lerobot_corpus(), ids=lambda p: p.name)
def test_lerobot_writer_datasets_have_no_finding(dataset):
    """No false positives: the sample (one clip per camera ending a frame short is not among the checks) and
    every dataset LeRobot's writer wrote, cameras included (their MediaIndex is read)."""
    report = check_dataset_quality(str(dataset))
    assert report.findings == () and report.problems == ()
    assert report.episodes > 0 and report.frames > 0


def test_third_party_datasets_without_finding():
    """Real datasets without a fault (their MP4s were not published: cameras left out)."""
    for name in ("rebot_devarm", "piper_act", "record-test"):
        root = third_party_path(name)  # skips, naming the folder, when the corpus is absent
        assert _found(root, skip_videos=True) == [], name


def test_timestamp_grid_names_wall_clock_timestamps(tmp_path):
    def wall_clock(table, _):
        ts = table.column("timestamp").to_numpy().astype(np.float64)
        ts[STARTS[1]:STARTS[2]] += 2.17  # episode 1 stamped 2.17 s late: steps still 1/fps
        return _set_column(table, "timestamp", ts.astype(np.float32))
    f = _only(write_dataset(tmp_path / "ds", mutate_data=wall_clock))
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("timestamp_grid", 1, "timestamp", 7, 0)
    assert f.detail.startswith("episode 1: 7 of 7 frames have a timestamp more than 0.0001 s off frame_index / fps "
                               "(10); first frame 0: 2.17 s, expected 0 s")
    assert f.detail.endswith("LeRobot's loader will refuse this dataset")


def test_timestamp_steps_names_a_duplicated_frame(tmp_path):
    def duplicate(table, _):
        ts = table.column("timestamp").to_numpy().copy()
        ts[STARTS[2] + 3] = ts[STARTS[2] + 2]  # episode 2: frame 3 repeats frame 2's time
        return _set_column(table, "timestamp", ts)
    found = _found(write_dataset(tmp_path / "ds", mutate_data=duplicate))
    assert found == [("timestamp_grid", 2, "timestamp", 1, 3), ("timestamp_steps", 2, "timestamp", 2, 3)]
    report = check_dataset_quality(str(tmp_path / "ds"))
    steps = [f for f in report.findings if f.check == "timestamp_steps"][0]
    assert steps.detail == ("episode 2: 2 of 5 steps between timestamps are not 1/fps = 0.1 s (1 longer: dropped "
                            "frames, 1 shorter: duplicated or out-of-time frames); first at frame 3: 0.2 s after 0.2 s")


def test_float32_timestamps_of_a_long_episode_are_on_the_grid():
    """LeRobot's float32 timestamps of a 3-hour episode at 30 fps are up to 5e-4 s from frame_index / fps in
    float64: compared in their own dtype they are exact, and their steps within the values' spacing."""
    n = 324_000
    info = parse_info(json.dumps({"codebase_version": "v3.0", "fps": 30, "data_path": "d.parquet", "features": {
        "timestamp": {"dtype": "float32", "shape": [1]}, "frame_index": {"dtype": "int64", "shape": [1]}}}).encode())
    frames = pa.StructArray.from_arrays([pa.array((np.arange(n) / 30).astype(np.float32)),
                                         pa.array(np.arange(n, dtype=np.int64))], names=["timestamp", "frame_index"])
    exact = np.arange(n) / 30
    assert np.abs(exact.astype(np.float32) - exact).max() > 1e-4
    row = EpisodeRow(0, 0, ("t",), n, "d.parquet", 0, n, ())
    ctx = quality.EpisodeContext("ds", "meta/episodes/chunk-000/file-000.parquet", row, frames, info)
    assert quality.check_episode(ctx, None) == []


def test_non_finite_names_the_feature_and_frame(tmp_path):
    def poison(table, _):
        state = _vectors(table, "observation.state")
        state[STARTS[0] + 2, 1] = np.nan
        state[STARTS[0] + 4, 2] = np.inf
        return _with_vectors(table, "observation.state", state)
    f = _only(write_dataset(tmp_path / "ds", mutate_data=poison))
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("non_finite", 0, "observation.state", 2, 2)
    assert f.detail == ("episode 0: `observation.state` holds 2 non-finite values (1 NaN, 1 infinite) in 2 of 5 "
                        "frames, first at frame 2 (dimensions: y, z)")


def test_frozen_feature_names_a_sensor_that_never_moved(tmp_path):
    def freeze(table, _):
        action = _vectors(table, "action")
        action[STARTS[1]:STARTS[2]] = [0.25, -1.0, 3.0]
        return _with_vectors(table, "action", action)
    f = _only(write_dataset(tmp_path / "ds", mutate_data=freeze))
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("frozen_feature", 1, "action", 7, 0)
    assert f.detail == ("episode 1: `action` holds one value ([0.25, -1, 3]) in all 7 frames: a frozen sensor or "
                        "actuator?")


def test_frozen_feature_leaves_one_still_dimension_and_the_bookkeeping_columns_alone(tmp_path):
    """episode_index and task_index are constant through every episode by design; one joint held still (an
    unused gripper) is not a frozen sensor."""
    def hold_one_joint(table, _):
        state = _vectors(table, "observation.state")
        state[:, 0] = 0.0
        return _with_vectors(table, "observation.state", state)
    assert _found(write_dataset(tmp_path / "ds", mutate_data=hold_one_joint)) == []


def test_episode_rows_names_rows_of_another_episode(tmp_path):
    def shifted(table, _):
        ep = table.column("episode_index").to_numpy().copy()
        fi = table.column("frame_index").to_numpy().copy()
        ep[STARTS[1] + 5:STARTS[2]] = 2  # the last two rows of episode 1's range say episode 2
        fi[STARTS[1] + 5:STARTS[2]] = [0, 1]
        return _set_column(_set_column(table, "episode_index", ep), "frame_index", fi)
    found = [x for x in _found(write_dataset(tmp_path / "ds", mutate_data=shifted)) if x[0] == "episode_rows"]
    assert found == [("episode_rows", 1, "episode_index", 2, 5), ("episode_rows", 1, "frame_index", 2, 5)]


def test_episode_tasks_names_contradicting_tasks(tmp_path):
    root = write_dataset(tmp_path / "ds")  # episode e's frames have task_index e % 2
    edit_episodes(root, lambda t: _set_column(t, "tasks", [["pick the cube"], ["pick the cube"], ["pick the cube"]]))
    f = _only(root)
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("episode_tasks", 1, "tasks", 7, 0)
    assert f.detail == ("episode 1: tasks ['pick the cube'] disagree with its frames: its frames' task_index name "
                        "['place the cube'], which its tasks do not list; it lists ['pick the cube'], which no "
                        "frame's task_index names")


def test_episode_tasks_names_a_task_index_with_no_task(tmp_path):
    def unknown(table, _):
        ti = table.column("task_index").to_numpy().copy()
        ti[STARTS[2] + 4] = 9
        return _set_column(table, "task_index", ti)
    f = _only(write_dataset(tmp_path / "ds", mutate_data=unknown))
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("episode_tasks", 2, "task_index", 1, 4)
    assert "task_index 9 at frame 4 names no task (meta/tasks.parquet has 2)" in f.detail


def test_undeclared_columns_are_named(tmp_path):
    root = write_dataset(tmp_path / "ds", mutate_data=lambda t, _: t.append_column(
        "observation.effort", pa.array(np.zeros(t.num_rows))).append_column("__index_level_0__", pa.array(
            np.arange(t.num_rows))))
    f = _only(root)
    assert (f.check, f.episode_index, f.feature, f.count) == ("undeclared_columns", 0, "observation.effort", 1)
    assert f.detail == ("data/chunk-000/file-000.parquet holds 1 column info.json does not declare "
                        "(`observation.effort`): not imported; declare it in info.json `features` to import")


def test_dataset_totals_name_what_info_json_declares(tmp_path):
    root = write_dataset(tmp_path / "ds")

    def inflate(info):
        info.update(total_episodes=105, total_frames=27623, splits={"train": "0:105"})
    edit_info(root, inflate)
    report = check_dataset_quality(str(root))
    assert [(f.check, f.episode_index, f.feature, f.count) for f in report.findings] == [
        ("dataset_totals", None, "splits.train", 102), ("dataset_totals", None, "total_episodes", 102),
        ("dataset_totals", None, "total_frames", 27605)]
    assert [f.detail for f in report.findings] == [
        "info.json split `train` is 0:105 (105 episodes) but the episodes files hold 3 of them; absent: 3, 4, 5, 6, "
        "7, ...",
        "info.json declares total_episodes 105, the episodes files hold 3",
        "info.json declares total_frames 27623, the episodes files hold 18"]


def test_dataset_totals_of_a_real_dataset_whose_split_names_absent_episodes():
    """unitree_g1_av1 keeps its source's episode ids (1, 2, 4, 5) under info.json's split 0:4."""
    root = third_party_path("unitree_g1_av1")
    report = check_dataset_quality(str(root))
    assert [(f.check, f.feature, f.detail) for f in report.findings] == [
        ("dataset_totals", "splits", "2 episodes lie in no split of info.json (4, 5)"),
        ("dataset_totals", "splits.train", "info.json split `train` is 0:4 (4 episodes) but the episodes files hold "
                                           "2 of them; absent: 0, 3")]


# ---- video_samples -------------------------------------------------------------------------------------------


def _episode(length: int, fps: float, from_timestamp: float, timestamps=None):
    info = parse_info(json.dumps({"codebase_version": "v3.0", "fps": fps, "data_path": "d.parquet",
                                  "video_path": "v/{video_key}/{chunk_index}-{file_index}.mp4", "features": {
                                      "timestamp": {"dtype": "float32", "shape": [1]},
                                      "frame_index": {"dtype": "int64", "shape": [1]},
                                      "cam": {"dtype": "video", "shape": [4, 4, 3], "info": {"video.codec": "av1"}}}
                                  }).encode())
    ts = np.arange(length) / fps if timestamps is None else np.asarray(timestamps)
    frames = pa.StructArray.from_arrays([pa.array(ts.astype(np.float32)), pa.array(np.arange(length))],
                                        names=["timestamp", "frame_index"])
    clip = VideoSlice("cam", "v/cam/0-0.mp4", from_timestamp, from_timestamp + length / fps)
    row = EpisodeRow(0, 3, ("t",), length, "d.parquet", 0, length, (clip,))
    return quality.EpisodeContext("ds", "meta/episodes/chunk-000/file-000.parquet", row, frames, info)


def _samples(n: int, fps: float, start: float, end: float) -> dict:
    times = np.arange(n) / fps
    return {"v/cam/0-0.mp4": quality.sample_window("v/cam/0-0.mp4", times, fps, start, end)}


def test_video_samples_of_an_mp4_at_another_frame_rate():
    """A 10 fps episode whose MP4 was encoded at 25 fps: frame i at i/10 s has a sample only when 2.5 i is whole."""
    ctx = _episode(790, 10, 0.0)
    f, = quality.video_samples(ctx, _samples(1975, 25, 0.0, 79.0))
    assert (f.check, f.episode_index, f.feature, f.count, f.first_frame) == ("video_samples", 3, "cam", 395, 1)
    assert f.detail == ("episode 3: camera `cam`: 395 of 790 frames have no video sample within 0.0001 s of "
                        "from_timestamp + timestamp (first: frame 1 at 0.1 s of v/cam/0-0.mp4, the nearest sample is "
                        "0.02 s away); the MP4 holds 1975 samples at 25 fps, info.json says 10 fps; LeRobot's loader "
                        "will refuse this dataset")


def test_video_samples_of_a_short_clip_and_of_wall_clock_timestamps():
    short = _episode(30, 30, 10.0)
    f, = quality.video_samples(short, _samples(325, 30, 10.0, 11.0))  # the file ends 25 frames into the clip
    assert (f.count, f.first_frame) == (5, 25)
    late = _episode(30, 30, 0.0, timestamps=np.arange(30) / 30 + 2.17)  # 2.17 s off: outside its clip's window
    f, = quality.video_samples(late, _samples(900, 30, 0.0, 1.0))
    assert (f.count, f.first_frame) == (30, 0) and "no sample near it" in f.detail


def test_video_samples_of_a_good_clip_and_of_a_clip_one_frame_short():
    """A clip whose to_timestamp stops one frame short still has its last frame's sample: no finding."""
    ctx = _episode(30, 30, 2.0)
    clip = ctx.row.videos[0]
    short = EpisodeRow(0, 3, ("t",), 30, "d.parquet", 0, 30, (VideoSlice(clip.key, clip.file, 2.0, 2.0 + 29 / 30),))
    ctx_short = quality.EpisodeContext(ctx.dataset, ctx.episodes_file, short, ctx.frames, ctx.info)
    for c in (ctx, ctx_short):
        assert quality.video_samples(c, _samples(90, 30, 2.0, 3.0)) == []


def test_video_samples_reads_sample_times_from_the_media_index():
    """The MediaIndex of the sample's front camera: 46 samples at 30 fps, presented at k / 30 s."""
    from transforms.mp4 import media_index
    import fsspec
    path = REPO / "tests/data/so101_av1/videos/observation.images.front/chunk-000/file-000.mp4"
    index = media_index.read_media_index(fsspec.filesystem("file"), str(path)).index
    times, fps = quality.presentation_times(index)
    assert fps == pytest.approx(30.0) and len(times) == 46
    np.testing.assert_allclose(times, np.arange(46) / 30, atol=1e-6)


def test_a_constant_rate_sample_window_crosses_a_shuffle_as_four_numbers():
    """The window a part's writer gets of a constant-rate MP4 pickles as (first tick, step, count) and comes
    back bit for bit; times that are no such run (here one sample moved) travel whole."""
    import pickle
    from apache_beam.coders import PickleCoder
    from transforms.mp4 import media_index
    import fsspec
    path = REPO / "tests/data/so101_av1/videos/observation.images.front/chunk-000/file-000.mp4"
    index = media_index.read_media_index(fsspec.filesystem("file"), str(path)).index
    times, fps, timescale = quality.presentation_timeline(index)
    window = quality.sample_window("v.mp4", times, fps, 0.2, 1.0, timescale=timescale)
    assert len(window.times) == 46 and window.timescale == timescale  # a 1 s margin each side: all of them
    coder = PickleCoder()
    back = coder.decode(coder.encode(window))
    assert back == window and back.times.tobytes() == window.times.tobytes() and back.timescale == timescale
    assert len(pickle.dumps(window)) < len(pickle.dumps(window.times))  # not the 46 floats
    moved = window.times.copy()
    moved[5] += 0.5 / timescale
    odd = quality.SampleTimes("v.mp4", window.start, window.end, moved, 46, fps, timescale)
    again = coder.decode(coder.encode(odd))
    assert again == odd and again.times.tobytes() == moved.tobytes() and again.times[5] != window.times[5]


def test_video_samples_of_a_dataset_whose_info_json_says_another_fps(tmp_path):
    """The sample re-stamped at 20 fps (timestamps and clips as a 20 fps writer puts them), its MP4s at 30 fps."""
    root = tmp_path / "so101"
    shutil.copytree(REPO / "tests/data/so101_av1", root)
    edit_info(root, lambda info: info.update(fps=20))
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    table = _set_column(table, "timestamp", (table.column("frame_index").to_numpy() / 20).astype(np.float32))
    pq.write_table(table, data)
    report = check_dataset_quality(str(root))
    found = {(f.check, f.episode_index, f.feature) for f in report.findings}
    assert found and {c for c, _, _ in found} == {"video_samples"}
    f = report.findings[0]
    assert (f.episode_index, f.feature, f.first_frame) == (0, "observation.images.front", 1)
    assert "the MP4 holds 46 samples at 30 fps, info.json says 20 fps; LeRobot's loader will refuse" in f.detail


# ---- strict, the table, the summary ------------------------------------------------------------------------------


def test_strict_makes_findings_errors_and_names_unknown_checks():
    assert quality.parse_strict("all") == frozenset(quality.CHECKS)
    assert quality.parse_strict(" non_finite, frozen_feature ") == {"non_finite", "frozen_feature"}
    with pytest.raises(ValueError, match="--strict names unknown check[(]s[)] nan; the checks are: timestamp_grid"):
        quality.parse_strict("nan")
    f = quality.Finding("ds", "e", 1, "non_finite", "x", 1, 0, "d")
    assert [g.severity for g in quality.with_severity([f], {"non_finite"})] == ["error"]
    assert [g.severity for g in quality.with_severity([f], {"frozen_feature"})] == ["warning"]


def test_table_and_summary():
    findings = [quality.Finding("ds", "a", 2, "non_finite", "x", 3, 1, "episode 2: x"),
                quality.Finding("ds", "a", 2, "non_finite", "y", 1, 0, "episode 2: y"),
                quality.Finding("ds", "b", 0, "non_finite", "x", 1, 0, "episode 0: x", severity="error"),
                quality.Finding("ds", None, None, "dataset_totals", "total_frames", 9, None, "totals")]
    table = pq.read_table(pa.BufferReader(quality.table_bytes(findings)))
    assert table.schema.names == ["dataset", "episodes_file", "episode_index", "check", "severity", "feature",
                                  "count", "first_frame", "detail"]
    assert table.column("episode_index").to_pylist() == [None, 2, 2, 0]
    assert pc.sum(table.column("count")).as_py() == 14
    summary = quality.summarize(findings)
    assert summary == {"dataset_totals": {"episodes": 0, "findings": 1, "severity": "warning", "example": "totals"},
                       "non_finite": {"episodes": 2, "findings": 3, "severity": "error", "example": "episode 2: x"}}
    merged = quality.merge_summaries([summary, {"non_finite": {"episodes": 1, "findings": 1, "severity": "warning",
                                                               "example": "other"}}])
    assert merged["non_finite"] == {"episodes": 3, "findings": 4, "severity": "error", "example": "episode 2: x"}


def test_a_huge_fixed_size_list_feature_is_checked_in_bounded_blocks():
    """A numeric feature of 200,000 dimensions (61 MB over two episodes of 40 frames): the checks find the NaN
    of one episode and the frozen other, adding a bounded buffer beside the frames (blocks of frames), not
    copies of the feature (the screen joined every episode's column into one, and compared it with a
    second copy of each episode's first frame)."""
    import time
    import tracemalloc
    width, n = 200_000, 40
    info = parse_info(json.dumps({"codebase_version": "v3.0", "fps": 30, "data_path": "d.parquet", "features": {
        "timestamp": {"dtype": "float32", "shape": [1]}, "frame_index": {"dtype": "int64", "shape": [1]},
        "observation.big": {"dtype": "float32", "shape": [width]}}}).encode())
    rows, frames = [], {}
    for e in range(3):
        values = np.random.default_rng(e).random((n, width), dtype=np.float32)
        if e == 0:
            values[3, 17] = np.nan
        if e == 1:
            values[:] = values[0]
        if e == 2:  # frozen but for the last dimension of its last frame, across the blocks' edges
            values[:] = values[0]
            values[-1, -1] += 1
        big = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)
        frames[e] = pa.StructArray.from_arrays([pa.array((np.arange(n) / 30).astype(np.float32)),
                                                pa.array(np.arange(n)), big],
                                               names=["timestamp", "frame_index", "observation.big"])
        rows.append(EpisodeRow(e, e, ("t",), n, "d.parquet", e * n, (e + 1) * n, ()))
        del values, big
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    before = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        found = quality.check_part("ds", "meta/episodes/chunk-000/file-000.parquet", info, rows, frames)
        _, numpy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(before)
    seconds = time.perf_counter() - started
    assert [(f.check, f.episode_index, f.count, f.first_frame) for f in found] == [
        ("non_finite", 0, 1, 3), ("frozen_feature", 1, n, 0)]
    assert "holds 1 non-finite values (1 NaN, 0 infinite) in 1 of 40 frames, first at frame 3 (dimensions: 17)" \
        in found[0].detail
    block = (1 << 21) * 4  # the float32 values of one block of the checks (episode_checks.BLOCK_VALUES)
    assert numpy_peak < 3 * block, f"numpy peak {numpy_peak / 2 ** 20:.0f} MB"  # 76 MB before
    assert pool.max_memory() < 3 * block, f"Arrow peak {pool.max_memory() / 2 ** 20:.0f} MB"  # 92 MB before
    assert seconds < 30
