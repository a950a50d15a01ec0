"""LeRobot v2.0 / v2.1 datasets import as they are, to the same typed episodes as their v3.0 form.

The cases are the LeRobot-writer corpus datasets repacked into v2.1 layout by `tests/v21_repack.py`
(one data file and one MP4 per episode, the MP4s cut out of the v3.0 files by stream copy): their v3.0
originals import to the episodes the v2.1 copies must equal (schema, frames value for value, clip
lengths, each clip's samples byte for byte in the MediaIndex), and their recorded LeRobot items are what
`ImportedFrames` must return for every frame of the v2.1 import.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import lerobot_dataset, read_errors, read_manifest, run_import
from tests.v21_repack import repack_v21
from transforms.episode import spql_types
from transforms.lerobot import v2
from transforms.lerobot.dataset import check_dataset
from transforms.reader import ImportReader
from transforms.reader.seek import TrackTables

DATASETS = ("so101_av1", "h264_multi_file", "images_and_tensors", "language")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """name -> (v2.1 root, v3.0 import, v2.1 import), each made once per module (inline MediaIndex, so the
    clips' indexes can be compared record by record)."""
    done = {}

    def get(name: str):
        if name not in done:
            base = tmp_path_factory.mktemp(name)
            root = repack_v21(lerobot_dataset(name), base / "v21")
            assert run_import(lerobot_dataset(name), base / "out_v30", "--inline-index") == 0
            assert run_import(root, base / "out_v21", "--inline-index") == 0
            done[name] = (root, base / "out_v30", base / "out_v21")
        return done[name]
    return get


def _episodes(out: Path) -> pa.Table:
    manifest = read_manifest(out)
    parts = [out / p for e in manifest["episodes_files"].values() for p in e["parts"]]
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    return table.take(np.argsort(table.column("episode_index").to_numpy()))


def _clip(table: pa.Table, camera: str, i: int) -> dict:
    entry = table.column("videos").combine_chunks().field(camera)
    clip = spql_types.storage_of(entry.field("clip"))
    media = spql_types.storage_of(clip.field("media"))
    ns = [int(spql_types.storage_of(clip.field(k)).cast(pa.int64())[i].as_py()) for k in ("start", "end")]
    origin = int(spql_types.storage_of(entry.field("time_origin")).cast(pa.int64())[i].as_py())
    uri = spql_types.storage_of(media.field("source")).field("uri")[i].as_py()
    return {"uri": uri, "start": ns[0], "end": ns[1], "origin": origin,
            "tables": TrackTables.from_media_index(media.field("index").slice(i, 1))}


def _samples(clip: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """The clip's samples (decode order): presentation seconds from the clip's start, sizes, keyframe flags,
    and their bytes read from the MP4 at the MediaIndex's offsets."""
    t = clip["tables"]
    seconds = t.pts / t.timescale
    start, end = clip["start"] / 1e9, clip["end"] / 1e9
    half = 0.5 * float(np.median(np.diff(np.sort(seconds)))) if len(seconds) > 1 else 0.0
    inside = (seconds >= start - half) & (seconds < end - half)
    path = clip["uri"][len("file://"):]
    with open(path, "rb") as f:
        data = [(f.seek(int(o)), f.read(int(s)))[1] for o, s in zip(t.offset[inside], t.size[inside])]
    return seconds[inside] - start, t.size[inside], t.sync[inside], data


@pytest.mark.parametrize("name", DATASETS)
def test_v21_imports_to_the_v30_episodes(pair, name):
    root, out_v30, out_v21 = pair(name)
    a, b = _episodes(out_v30), _episodes(out_v21)
    assert b.schema == a.schema  # the same episode type, extension types and metadata included
    for column in ("episode_index", "tasks", "length", "frames"):
        assert b.column(column).combine_chunks().equals(a.column(column).combine_chunks()), column
    info = json.loads((root / "meta" / "info.json").read_text())
    cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    compared = 0
    for camera in cameras:
        for i in range(a.num_rows):
            old, new = _clip(a, camera, i), _clip(b, camera, i)
            ep = a.column("episode_index")[i].as_py()
            assert new["start"] == 0 and new["origin"] == 0 and old["origin"] == -old["start"]
            assert new["end"] == round(a.column("length")[i].as_py() / info["fps"] * 1e9)
            assert abs(new["end"] - (old["end"] - old["start"])) <= 1  # each end of a v3.0 clip rounds to ns
            assert new["uri"].endswith(f"/videos/chunk-{ep // info['chunks_size']:03d}/{camera}/episode_{ep:06d}.mp4")
            old_s, new_s = _samples(old), _samples(new)
            assert len(new_s[0]) == new["tables"].num_samples == a.column("length")[i].as_py()
            assert np.allclose(new_s[0], old_s[0], atol=1e-6)  # each frame at the same episode time
            assert np.array_equal(new_s[1], old_s[1]) and np.array_equal(new_s[2], old_s[2])
            assert new_s[3] == old_s[3]  # the samples' bytes: stream-copied, never re-encoded
            compared += 1
    assert compared == a.num_rows * len(cameras)


def test_groups_follow_the_chunks(pair):
    root, _, out_v21 = pair("h264_multi_file")  # chunks_size 2: five chunks of two episodes
    assert check_dataset(str(root)).episodes_files == tuple(f"meta/episodes.jsonl:chunk-{c:03d}" for c in range(5))
    manifest = read_manifest(out_v21)
    assert {rel: (e["status"], e["episodes"], e["parts"])
            for rel, e in manifest["episodes_files"].items()} == {
        f"meta/episodes.jsonl:chunk-{c:03d}": ("imported", 2, [f"episodes/chunk-{c:03d}.parquet"]) for c in range(5)}
    assert manifest["totals"]["episodes"] == 10 and manifest["totals"]["frames"] == 104


def test_default_layout_reader_and_frames(pair, tmp_path):
    root, _, _ = pair("so101_av1")
    out = tmp_path / "out"
    assert run_import(root, out) == 0  # the default layout: the MediaIndex in media_index/, by MP4 folder
    shards = sorted(p.relative_to(out).as_posix() for p in (out / "media_index").rglob("*.parquet"))
    assert shards == ["media_index/videos/chunk-000/observation.images.front.parquet",
                      "media_index/videos/chunk-000/observation.images.wrist.parquet"]
    reader = ImportReader(str(out))
    ep = reader.episode(2)
    assert ep.length == 15 and ep["observation.state"].shape == (15, 6)
    assert ep.video("observation.images.front").frame_at(14 / 30).shape == (48, 64, 3)


# ---- layout rules --------------------------------------------------------------------------------

@pytest.fixture
def h264(tmp_path):
    return repack_v21(lerobot_dataset("h264_multi_file"), tmp_path / "v21")  # five groups of two episodes


def _data_file(root: Path, ep: int) -> Path:
    return root / "data" / f"chunk-{ep // 2:03d}" / f"episode_{ep:06d}.parquet"


def _set_index(root: Path, ep: int, edit) -> None:
    table = pq.read_table(_data_file(root, ep))
    index = pa.array(edit(table.column("index").to_numpy().copy()), pa.int64())
    pq.write_table(table.set_column(table.column_names.index("index"), "index", index), _data_file(root, ep))


def test_each_broken_group_fails_alone_with_its_rule(h264, tmp_path):
    """One import, one cause per group: each group fails with its own rule, naming its file and episode,
    and chunk-000, whose `index` values do not follow the running sum (as in a published subset of a
    longer recording: they start past 0 and skip the episodes left out), imports: each data file is its
    episode."""
    for ep in (0, 1):
        _set_index(h264, ep, lambda index, ep=ep: index + 1000 + 37 * ep)
    table = pq.read_table(_data_file(h264, 3))
    pq.write_table(table.slice(0, table.num_rows - 1), _data_file(h264, 3))  # chunk-001: one frame short

    def skip(index):
        index[5] += 1
        return index
    _set_index(h264, 4, skip)  # chunk-002: a gap inside the file
    _data_file(h264, 6).unlink()  # chunk-003: a data file missing
    mp4 = h264 / "videos" / "chunk-004" / "observation.images.top" / "episode_000009.mp4"
    mp4.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 4702\n")
    out = tmp_path / "out"
    assert run_import(h264, out) == 1
    errors = {e["episodes_file"]: (e["rule"], e["episode_index"], e["file"], e["message"].split(": ", 1)[1])
              for e in read_errors(out) if e["rule"] != "file_failed"}
    assert {k: v[:3] for k, v in errors.items()} == {
        "meta/episodes.jsonl:chunk-001": ("v2_layout", 3, "data/chunk-001/episode_000003.parquet"),
        "meta/episodes.jsonl:chunk-002": ("index_not_consecutive", 4, "data/chunk-002/episode_000004.parquet"),
        "meta/episodes.jsonl:chunk-003": ("file_missing", 6, "data/chunk-003/episode_000006.parquet"),
        "meta/episodes.jsonl:chunk-004": ("lfs_pointer", 9,
                                          "videos/chunk-004/observation.images.top/episode_000009.mp4"),
    }
    assert errors["meta/episodes.jsonl:chunk-001"][3] == (
        "episode 3's data file holds 13 frames, but meta/episodes.jsonl gives it length 14; a v2.x data file holds "
        "its episode's frames and no others: fix the episode's `length` line or its data file")
    assert sorted(e["episode_index"] for e in read_errors(out) if e["rule"] == "file_failed") == [2, 5, 7, 8]
    manifest = read_manifest(out)
    assert {rel: e["status"] for rel, e in manifest["episodes_files"].items()} == {
        "meta/episodes.jsonl:chunk-000": "imported",
        **{f"meta/episodes.jsonl:chunk-{c:03d}": "failed" for c in (1, 2, 3, 4)}}
    frames = _episodes(out).column("frames")
    assert [f["index"] for f in frames[0].as_py()[:2]] == [1000, 1001]
    assert [f["index"] for f in frames[1].as_py()[:1]] == [1000 + 37 + 8]


def _raises(root: Path, rule: str) -> str:
    from transforms.base.errors import LeRobotImportError
    with pytest.raises(LeRobotImportError) as raised:
        check_dataset(str(root))
    assert raised.value.rule == rule, str(raised.value)
    return str(raised.value)


@pytest.mark.parametrize("line, words", [
    ("not json", "line 3 of meta/episodes.jsonl is not JSON"),
    ('{"episode_index": 2, "tasks": ["x"], "length": "9"}', "line 3 of meta/episodes.jsonl has `length` '9'; it "
                                                           "must be an integer >= 0"),
    ('{"episode_index": 2, "tasks": "x", "length": 9}', "line 3 of meta/episodes.jsonl has `tasks` 'x'; it must "
                                                       "be a list of task strings"),
    ('{"episode_index": -2, "tasks": [], "length": 9}', "line 3 of meta/episodes.jsonl has `episode_index` -2"),
    ('[2]', "line 3 of meta/episodes.jsonl is not a JSON object"),
])
def test_a_bad_episodes_line_is_named(h264, line, words):
    path = h264 / "meta" / "episodes.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = line
    path.write_text("\n".join(lines) + "\n")
    v2._load.cache_clear()
    message = _raises(h264, "episodes_file")
    assert words in message and "file meta/episodes.jsonl" in message


def test_a_bad_episodes_line_fails_the_dataset_end_to_end(h264, tmp_path):
    path = h264 / "meta" / "episodes.jsonl"
    path.write_text(path.read_text().replace('"length": 9}', '"length": 9.5}', 1))
    out = tmp_path / "out"
    assert run_import(h264, out) == 1
    (error,) = read_errors(out)
    assert (error["rule"], error["episodes_file"], error["file"]) == ("episodes_file", None, "meta/episodes.jsonl")
    assert "line 3 of meta/episodes.jsonl has `length` 9.5; it must be an integer >= 0" in error["message"]


def test_episodes_out_of_order_or_twice_fail_their_group(h264):
    info = check_dataset(str(h264)).info
    lines = (h264 / "meta" / "episodes.jsonl").read_text().splitlines()
    swapped = lines[:4] + [lines[5], lines[4]] + lines[6:]  # episodes 5 then 4, both of chunk-002
    episodes = v2.parse_episodes_jsonl("\n".join(swapped).encode())
    from transforms.base.errors import LeRobotImportError
    with pytest.raises(LeRobotImportError) as raised:
        v2.group_rows(episodes, info, "meta/episodes.jsonl:chunk-002")
    assert (raised.value.rule, raised.value.episode_index, raised.value.file) == (
        "episode_order", 4, "meta/episodes.jsonl:chunk-002")
    assert "episode 4 appears after episode 5 (row 1)" in raised.value.message
    assert len(v2.group_rows(episodes, info, "meta/episodes.jsonl:chunk-001")) == 2  # the other groups plan
    twice = v2.parse_episodes_jsonl("\n".join(lines[:5] + [lines[4]]).encode())
    with pytest.raises(LeRobotImportError) as raised:
        v2.group_rows(twice, info, "meta/episodes.jsonl:chunk-002")
    assert raised.value.rule == "duplicate_episode"


def test_v20_and_layout_mismatches_are_checked(h264, tmp_path):
    info = json.loads((h264 / "meta" / "info.json").read_text())
    (h264 / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.0"}))
    checked = check_dataset(str(h264))
    assert checked.info.codebase_version == "v2.0" and len(checked.episodes_files) == 5
    root = Path(shutil.copytree(lerobot_dataset("so101_av1"), tmp_path / "ds"))
    v3 = json.loads((root / "meta" / "info.json").read_text())
    (root / "meta" / "info.json").write_text(json.dumps({**v3, "codebase_version": "v2.1"}))
    assert "places files by `chunk_index` and `file_index`, as v3.0 does" in _raises(root, "codebase_version")
    (root / "meta" / "info.json").write_text(json.dumps({**v3, **{k: info[k] for k in ("data_path", "video_path")},
                                                         "codebase_version": "v2.1"}))
    assert "no meta/episodes.jsonl and has meta/episodes/, the v3.0 layout" in _raises(root, "codebase_version")
    (root / "meta" / "info.json").write_text(json.dumps({**info, "fps": None}))
    assert "a v2.1 dataset's clips end at length / fps" in _raises(root, "info_json")


def test_tasks_come_from_tasks_jsonl_by_task_index(pair, tmp_path):
    from transforms.lerobot.tasks import read_tasks
    root = Path(shutil.copytree(pair("so101_av1")[0], tmp_path / "ds"))
    assert read_tasks(str(root)) == dict(enumerate(json.loads(line)["task"] for line in
                                                   (root / "meta" / "tasks.jsonl").read_text().splitlines()))
    (root / "meta" / "tasks.jsonl").write_text('{"task_index": 7, "task": "b"}\n{"task_index": 3, "task": "a"}\n')
    assert read_tasks(str(root)) == {7: "b", 3: "a"}


def test_parse_episodes_jsonl_groups_by_chunk():
    raw = b"".join(json.dumps({"episode_index": i, "tasks": ["t"], "length": 10 + i, "extra": 1}).encode() + b"\n"
                   for i in (0, 1, 2, 1000, 1001, 2500))
    episodes = v2.parse_episodes_jsonl(raw + b"\n")
    assert episodes.start.tolist() == [0, 10, 21, 33, 1043, 2054]
    groups = episodes.groups(1000)
    assert {k: v.tolist() for k, v in groups.items()} == {
        "meta/episodes.jsonl:chunk-000": [0, 1, 2], "meta/episodes.jsonl:chunk-001": [3, 4],
        "meta/episodes.jsonl:chunk-002": [5]}


@pytest.mark.parametrize("run", ["plain", "windows"])
@pytest.mark.parametrize("name", ["so101_av1", "h264_multi_file", "images_and_tensors"])
def test_imported_frames_equal_lerobot_items(pair, name, run):
    """`ImportedFrames` over the v2.1 import returns the items LeRobot recorded for the v3.0 original, for
    every frame, camera frames bit for bit (the MP4s hold the same samples, decoded by the same decoders)."""
    pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")
    from tests.test_frames_dataset import _compare, _recorded
    from transforms.reader.frames import ImportedFrames
    _, _, out_v21 = pair(name)
    info, runs = _recorded(lerobot_dataset(name))
    ds = ImportedFrames(str(out_v21), **({"delta_timestamps": info["delta_timestamps"]} if run == "windows" else {}))
    total = json.loads((lerobot_dataset(name) / "meta" / "info.json").read_text())["total_frames"]
    assert len(ds) == total == len(info["items"])
    assert _compare(ds, info, run, runs[run]) == total


def test_quality_checks_read_the_v2_files(pair, tmp_path):
    """The data-quality checks run on a v2.x dataset as on v3.0: clean as its v3.0 original, and the tasks
    check names episodes whose tasks disagree with tasks.jsonl."""
    from transforms.quality.dataset import check_dataset_quality
    root = Path(shutil.copytree(pair("so101_av1")[0], tmp_path / "ds"))
    clean = check_dataset_quality(str(root))
    assert (clean.findings, clean.problems, clean.episodes_files, clean.episodes, clean.frames) == ((), (), 1, 4, 46)
    lines = (root / "meta" / "tasks.jsonl").read_text().splitlines()
    tasks = [json.loads(line) for line in lines]
    swapped = [{"task_index": t["task_index"], "task": tasks[1 - t["task_index"]]["task"]} for t in tasks]
    (root / "meta" / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in swapped))
    found = check_dataset_quality(str(root)).findings
    # episode 2 lists both tasks (it switches at frame 7), so swapping their names still agrees with it
    assert {f.check for f in found} == {"episode_tasks"} and {f.episode_index for f in found} == {0, 1, 3}


# ---- bounds of episodes.jsonl, and the tasks file --------------------------------------------------------

def _episodes_jsonl(docs) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def _line(i: int, length: int = 5, tasks=("t",)) -> dict:
    return {"episode_index": i, "tasks": list(tasks), "length": length}


@pytest.mark.parametrize("docs, words", [
    ([_line(0), _line(1, 2 ** 52), _line(2, 2 ** 52), _line(3)],
     "line 3 of meta/episodes.jsonl has `length` 4503599627370496, which brings the frames of the episodes "
     "up to it past 9007199254740992"),
    ([_line(0), _line(1, 2 ** 63 - 1)], "line 2 of meta/episodes.jsonl has `length` 9223372036854775807"),
    ([_line(0), _line(1, tasks=["pick the cube %06d" % k for k in range(80_000)])],
     "line 2 of meta/episodes.jsonl is longer than 1048576 bytes"),
    ([_line(0), _line(1), _line(2, tasks=["t%d" % k for k in range(1025)])],
     "line 3 of meta/episodes.jsonl lists 1025 tasks for episode 2, above the 1024 one episode may list"),
])
def test_episodes_jsonl_bounds_name_the_line(docs, words):
    """Lengths whose running sum passes 2**53 (it wrapped the int64 range: rule `internal`), one line of
    megabytes of task strings, or thousands of tasks for one episode are refused, naming the line."""
    from transforms.base.errors import LeRobotImportError
    with pytest.raises(LeRobotImportError) as raised:
        v2.parse_episodes_jsonl(_episodes_jsonl(docs))
    assert raised.value.rule == "episodes_file" and raised.value.file == "meta/episodes.jsonl"
    assert words in raised.value.message, raised.value.message


def test_a_long_line_is_found_across_blocks_and_at_the_end():
    """The line scan reads the file in blocks: a long line that straddles a block, or ends the file without
    a newline, is found and numbered like any other; 1 MiB exactly is still a line."""
    from transforms.base.errors import LeRobotImportError
    short = _episodes_jsonl([_line(i) for i in range(3)])
    long_line = json.dumps(_line(3, tasks=["x" * (v2.MAX_EPISODES_LINE_BYTES - 60)])).encode()
    assert len(long_line) <= v2.MAX_EPISODES_LINE_BYTES
    assert len(v2.parse_episodes_jsonl(short + long_line + b"\n")) == 4
    padding = b"\n" * (16 * 1024 * 1024 - len(short) - 10)  # the next line starts just before the block's end
    too_long = json.dumps(_line(3, tasks=["x" * v2.MAX_EPISODES_LINE_BYTES])).encode()
    for raw, number in ((short + padding + too_long + b"\n", short.count(b"\n") + len(padding) + 1),
                        (short + too_long, 4)):
        with pytest.raises(LeRobotImportError) as raised:
            v2.parse_episodes_jsonl(raw)
        assert f"line {number} of meta/episodes.jsonl is longer than" in raised.value.message


def test_lengths_past_the_integer_range_fail_the_dataset_with_their_line(h264, tmp_path):
    path = h264 / "meta" / "episodes.jsonl"
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    for k in (3, 5, 7):
        docs[k]["length"] = 2 ** 62 - 1
    path.write_bytes(_episodes_jsonl(docs))
    out = tmp_path / "out"
    assert run_import(h264, out) == 1
    (error,) = read_errors(out)
    assert (error["rule"], error["file"]) == ("episodes_file", "meta/episodes.jsonl")
    assert "line 4 of meta/episodes.jsonl has `length` 4611686018427387903" in error["message"]


def test_a_missing_chunk_folder_costs_one_request(tmp_path, monkeypatch):
    """The source listing asks storage once for a folder it does not show, and the files under a folder that
    does not exist are missing without a request each (hundreds of thousands of episodes whose chunk
    folders are gone took one request per file)."""
    from transforms.lerobot import sources
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000" / "episode_000000.parquet").write_bytes(b"x")
    asked = []
    real_stat, real_folder = sources._stat, sources._is_folder
    monkeypatch.setattr(sources, "_stat", lambda r, rel: asked.append(rel) or real_stat(r, rel))
    monkeypatch.setattr(sources, "_is_folder", lambda r, rel: asked.append(rel + "/") or real_folder(r, rel))
    listing = sources.list_sources(str(root))
    for chunk in (1, 2):
        for ep in range(chunk * 1000, chunk * 1000 + 1000):
            rel = f"data/chunk-{chunk:03d}/episode_{ep:06d}.parquet"
            assert listing.get(rel) is None and listing.token(rel) == "missing"
    assert listing.get("data/chunk-000/episode_000000.parquet").size == 1
    assert listing.get("data/chunk-000/episode_000001.parquet") is None  # a folder it shows: the file is asked
    assert sorted(asked) == ["data/chunk-000/episode_000001.parquet", "data/chunk-001/", "data/chunk-002/"]


@pytest.fixture
def so101_v21(pair, tmp_path):
    return Path(shutil.copytree(pair("so101_av1")[0], tmp_path / "ds"))


def test_v2_tasks_come_from_tasks_jsonl_never_a_stray_tasks_parquet(so101_v21):
    """A v2.x dataset with a meta/tasks.parquet left by a half-finished conversion (here naming the tasks the
    other way round) reads its tasks from tasks.jsonl: its episodes are clean."""
    from transforms.lerobot.tasks import read_tasks
    from transforms.quality.dataset import check_dataset_quality
    jsonl = {json.loads(x)["task_index"]: json.loads(x)["task"]
             for x in (so101_v21 / "meta" / "tasks.jsonl").read_text().splitlines()}
    pq.write_table(pa.table({"task_index": [0, 1], "task": [jsonl[1], jsonl[0]]}), so101_v21 / "meta" / "tasks.parquet")
    assert read_tasks(str(so101_v21)) == jsonl
    report = check_dataset_quality(str(so101_v21))
    assert (report.findings, report.problems) == ((), ())


@pytest.mark.parametrize("line, words", [
    ('{"task_index": NaN, "task": "x"}', "line 2 of meta/tasks.jsonl has `task_index` nan; it must be an integer "
                                         "from 0 to 2147483647"),
    ('{"task_index": 1e400, "task": "x"}', "line 2 of meta/tasks.jsonl has `task_index` inf"),
    ('{"task_index": 99999999999999, "task": "x"}', "line 2 of meta/tasks.jsonl has `task_index` 99999999999999"),
    ('{"task_index": -1, "task": "x"}', "line 2 of meta/tasks.jsonl has `task_index` -1"),
    ("[" * 100_000, "line 2 of meta/tasks.jsonl is not JSON"),
    ("not json", "line 2 of meta/tasks.jsonl is not JSON"),
    ('{"task_index": 0, "task": "again"}', "line 2 of meta/tasks.jsonl lists task_index 0 again (line 1 names it "
                                           "first)"),
], ids=["nan", "inf", "huge", "negative", "nested", "not_json", "twice"])
def test_an_unreadable_tasks_jsonl_is_a_dataset_finding_naming_the_line(so101_v21, line, words, capsys):
    """The tasks check does not skip in silence: a tasks.jsonl that is there but cannot be read is one
    dataset-level `episode_tasks` finding naming the file and the line; `check` prints it, and exits 1
    when the check is strict."""
    from pipelines import check
    from transforms.quality.dataset import check_dataset_quality
    path = so101_v21 / "meta" / "tasks.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], line] + lines[1:]) + "\n")
    (finding,) = check_dataset_quality(str(so101_v21)).findings
    assert (finding.check, finding.episodes_file, finding.episode_index, finding.file) == (
        "episode_tasks", None, None, "meta/tasks.jsonl")
    assert finding.detail.startswith("meta/tasks.jsonl cannot be read, so no episode's tasks were checked")
    assert words in finding.detail, finding.detail
    assert check.run([str(so101_v21)]) == 0
    printed = capsys.readouterr().out
    assert "episode_tasks (warning, 1 findings)" in printed and words in printed
    assert check.run([str(so101_v21), "--strict", "episode_tasks"]) == 1


def test_an_unreadable_tasks_jsonl_is_reported_by_the_import(so101_v21, tmp_path):
    path = so101_v21 / "meta" / "tasks.jsonl"
    path.write_text(path.read_text() + '{"task_index": NaN, "task": "x"}\n')
    out = tmp_path / "out"
    assert run_import(so101_v21, out) == 0  # the episodes themselves import: their tasks are in episodes.jsonl
    quality = read_manifest(out)["quality"]
    assert quality["checks"]["episode_tasks"]["findings"] == 1
    assert "line 3 of meta/tasks.jsonl has `task_index` nan" in quality["checks"]["episode_tasks"]["example"]
    (row,) = pq.read_table(out / "quality" / "dataset.parquet").to_pylist()
    assert (row["check"], row["episodes_file"], row["severity"]) == ("episode_tasks", None, "warning")
    strict = tmp_path / "strict"
    assert run_import(so101_v21, strict, "--strict", "episode_tasks") == 1
    assert [e["rule"] for e in read_errors(strict)] == ["quality"]


def test_task_index_numbers_left_out_of_tasks_jsonl_are_checked(so101_v21):
    """LeRobot v2.x keys its tasks by task_index, so tasks.jsonl may leave numbers out; the tasks check runs
    on such a file (it was skipped) and names a frame whose task_index has no line."""
    from transforms.quality.dataset import check_dataset_quality
    path = so101_v21 / "meta" / "tasks.jsonl"
    tasks = [json.loads(x) for x in path.read_text().splitlines()]
    assert [t["task_index"] for t in tasks] == [0, 1]
    path.write_text(json.dumps({"task_index": 0, "task": tasks[0]["task"]}) + "\n" +
                    json.dumps({"task_index": 7, "task": tasks[1]["task"]}) + "\n")
    found = check_dataset_quality(str(so101_v21)).findings
    assert found and {f.check for f in found} == {"episode_tasks"}
    assert all(f.file == "meta/tasks.jsonl" for f in found)
    assert "task_index 1 at frame" in found[0].detail
    assert "(meta/tasks.jsonl numbers its 2 from 0 to 7, leaving this one out)" in found[0].detail
