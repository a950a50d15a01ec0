"""Querying an import: the README's snippets run as written on the Quick start's output, and what DuckDB and
Polars answer through `transforms.reader.query` equals what pyarrow answers from the raw records; tensors keep
their shapes ([2, 3] stays [2, 3]) and clip times stay durations."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import REPO, SAMPLE, lerobot_dataset, run_import

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

from transforms.reader import query  # noqa: E402


def _section(title: str) -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index(f"## {title}\n")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end > 0 else None]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture(scope="module")
def sample_import(tmp_path_factory) -> Path:
    """The Quick start's command, in a scratch folder: out/so101_av1 there."""
    work = tmp_path_factory.mktemp("quickstart")
    assert run_import(SAMPLE, work / "out" / "so101_av1") == 0
    return work


def _truth(out: Path) -> dict:
    """The answers from the raw Parquet records with pyarrow alone (not transforms.reader.query)."""
    table = pq.read_table(sorted((out / "episodes").rglob("*.parquet")))
    per_task: dict[str, int] = {}
    for tasks in table["tasks"].to_pylist():
        for task in tasks:
            per_task[task] = per_task.get(task, 0) + 1
    states = {}
    for ep, frames in zip(table["episode_index"].to_pylist(), table["frames"].to_pylist()):
        states[ep] = np.array([f["observation.state"] for f in frames], np.float32)
    clips = {}
    videos = table["videos"].combine_chunks()
    for camera in [f.name for f in table.schema.field("videos").type]:
        clip = videos.field(camera).field("clip").storage
        starts = clip.field("start").storage.cast(pa.int64()).to_pylist()
        ends = clip.field("end").storage.cast(pa.int64()).to_pylist()
        clips[camera] = [(s / 1e9, e / 1e9) for s, e in zip(starts, ends)]
    return {"episodes": table["episode_index"].to_pylist(), "per_task": per_task, "states": states,
            "clips": clips}


def test_readme_query_snippets_run_and_agree_with_pyarrow(sample_import, monkeypatch):
    blocks = _python_blocks(_section("Querying an import"))
    assert len(blocks) == 3  # pyarrow, DuckDB, Polars
    monkeypatch.chdir(sample_import)
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), ns)  # noqa: S102 - the README's own snippets
    truth = _truth(sample_import / "out" / "so101_av1")
    episodes = truth["episodes"]
    assert episodes == [0, 1, 2, 3]
    # episodes per task
    assert truth["per_task"] == {"Pick up the red cube.": 3, "Put the cube in the bin.": 2}
    assert ns["per_task"] == ns["per_task_sql"] == ns["per_task_pl"] == truth["per_task"]
    # per-episode mean of observation.state
    expected = np.stack([truth["states"][e].astype(np.float64).mean(axis=0) for e in episodes])
    np.testing.assert_allclose(ns["mean_state"], expected, rtol=1e-5)
    assert [row[0] for row in ns["mean_state_sql"]] == episodes
    np.testing.assert_allclose(np.array([row[1] for row in ns["mean_state_sql"]]), expected, rtol=1e-5)
    assert ns["mean_state_pl"]["episode_index"].to_list() == episodes
    np.testing.assert_allclose(ns["mean_state_pl"][:, 1].to_numpy(), expected, rtol=1e-5)
    # each camera's clip start and end in seconds
    assert ns["clips"] == truth["clips"]
    assert truth["clips"]["observation.images.front"][1] == (0.4, 0.7)
    assert ns["clips_sql"] == [(e, camera, *truth["clips"][camera][i]) for camera in sorted(truth["clips"])
                               for i, e in enumerate(episodes)]
    assert ns["clips_pl"]["episode_index"].to_list() == episodes
    np.testing.assert_allclose(np.array(ns["clips_pl"].select("start_s", "end_s").rows()),
                               np.array(truth["clips"]["observation.images.front"]), rtol=0, atol=1e-9)
    # the frames of episode 2 as numpy
    for name in ("state_2", "state_2_sql", "state_2_pl"):
        assert ns[name].shape == (15, 6) and ns[name].dtype == np.float32, name
        np.testing.assert_array_equal(ns[name], truth["states"][2])


def test_tensors_keep_their_shape_and_durations_their_unit(tmp_path):
    """A [2, 3] float32 feature: DuckDB's `frames` view types it FLOAT[3][2] (x[i][j] is element i-1, j-1),
    Polars `Array(Float32, (2, 3))`, `plain` a fixed-size list of fixed-size lists, values unchanged."""
    out = tmp_path / "out"
    assert run_import(lerobot_dataset("images_and_tensors"), out) == 0
    table = query.read_episodes(str(out))
    truth = np.concatenate([np.array([f["observation.matrix"] for f in frames], np.float32).reshape(-1, 2, 3)
                            for frames in table["frames"].to_pylist()])
    con = duckdb.connect()
    assert query.duckdb_views(con, str(out)) == ["episodes", "frames"]  # no cameras: no clips
    types = dict((row[0], row[1]) for row in con.sql("DESCRIBE frames").fetchall())
    assert types["observation.matrix"] == "FLOAT[3][2]" and types["observation.counts"] == "INTEGER[2]"
    assert types["observation.pose64"] == "DOUBLE[3]"
    rows = con.sql('SELECT "observation.matrix" FROM frames ORDER BY "index"').fetchall()
    np.testing.assert_array_equal(np.array([r[0] for r in rows], np.float32), truth)
    (one,) = con.execute('SELECT "observation.matrix"[2][3] FROM frames ORDER BY "index" LIMIT 1').fetchone()
    assert one == pytest.approx(float(truth[0, 1, 2]))

    df = query.polars_episodes(str(out))
    frames = df.select("frames").explode("frames").unnest("frames")
    assert frames.schema["observation.matrix"] == pl.Array(pl.Float32, (2, 3))
    np.testing.assert_array_equal(frames["observation.matrix"].to_numpy(), truth)
    plain = query.plain(table)
    matrix_type = plain.schema.field("frames").type.value_type.field("observation.matrix").type
    assert matrix_type == pa.list_(pa.list_(pa.float32(), 3), 2)


def test_clip_times_are_durations(sample_import):
    out = str(sample_import / "out" / "so101_av1")
    con = duckdb.connect()
    query.duckdb_views(con, out)
    types = dict((row[0], row[1]) for row in con.sql("DESCRIBE clips").fetchall())
    assert types["start"] == types["end"] == types["time_origin"] == "INTERVAL" and types["start_s"] == "DOUBLE"
    import datetime
    assert con.execute("SELECT time_origin, time_origin_s FROM clips WHERE episode_index = 1 LIMIT 1").fetchone() == (
        -datetime.timedelta(seconds=0.4), -0.4)
    camera = "observation.images.front"
    df = query.polars_episodes(out)
    assert df.schema["videos"].to_schema()[camera].to_schema()["time_origin"] == pl.Duration("ns")
    table = query.read_episodes(out)
    origin = query.plain(table)["videos"].combine_chunks().field(camera).field("time_origin")
    assert origin.type == pa.duration("ns")
    assert origin.to_pylist() == table["videos"].combine_chunks().field(camera).field("time_origin").storage.to_pylist()


def test_plain_of_sliced_and_null_values():
    """Slices and nulls survive `plain` (a tensor column of a row subset, a null list)."""
    tensor = pa.fixed_shape_tensor(pa.float32(), [2, 2])
    flat = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 4)
    arr = pa.ExtensionArray.from_storage(tensor, flat)
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 3]), arr, mask=pa.array([False, False]))
    sliced = lists.slice(1)
    out = query.plain(sliced)
    assert out.type == pa.list_(pa.list_(pa.list_(pa.float32(), 2), 2))
    assert out.to_pylist() == [[[[4.0, 5.0], [6.0, 7.0]], [[8.0, 9.0], [10.0, 11.0]]]]
    with_null = pa.ListArray.from_arrays(pa.array([0, 1, 1]), arr.slice(0, 1), mask=pa.array([False, True]))
    assert query.plain(with_null).to_pylist() == [[[[0.0, 1.0], [2.0, 3.0]]], None]


def test_the_query_helper_leaves_the_output_as_it_is(sample_import):
    out = sample_import / "out" / "so101_av1"
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    query.duckdb_views(duckdb.connect(), str(out))
    query.polars_episodes(str(out))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_the_glossarys_time_origin_formula_is_what_a_seek_decodes(sample_import):
    """The glossary's `file time = ...` evaluated for episode 1 (time_origin -0.4 s) names the MP4 frame that
    `frame_at(episode time)` returns, decoded here straight from the file with PyAV."""
    av = pytest.importorskip("av")
    glossary = _section("Glossary")
    formula = re.search(r"`file time = ([^`]+)`", glossary).group(1)
    assert formula == "episode time - time_origin"
    from transforms.reader import ImportReader
    out = sample_import / "out" / "so101_av1"
    camera = "observation.images.front"
    episode = ImportReader(str(out)).episode(1)
    record = episode.to_arrow()
    time_origin = record["videos"].combine_chunks().field(camera).field("time_origin").storage.cast(pa.int64())[0]
    time_origin_s = time_origin.as_py() / 1e9
    assert time_origin_s == pytest.approx(-0.4)
    with av.open(str(SAMPLE / "videos" / camera / "chunk-000" / "file-000.mp4")) as container:
        decoded = {round(float(f.time), 4): f.to_ndarray(format="rgb24") for f in container.decode(video=0)}
    for episode_time in (0.0, 0.1, 0.2):
        file_time = eval(formula.replace("episode time", "episode_time"),  # noqa: S307 - the README's formula
                         {"episode_time": episode_time, "time_origin": time_origin_s})
        np.testing.assert_array_equal(episode.video(camera).frame_at(episode_time), decoded[round(file_time, 4)])
    assert round(0.1 - time_origin_s, 4) in decoded and round(0.1 + time_origin_s, 4) not in decoded
