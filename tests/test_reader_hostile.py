"""The reader on outputs it should not trust, and reads that match LeRobot's.

An import's output is data: a manifest can be edited to list files outside the import, a clip to
point at any file, a MediaIndex to declare billions of samples. Each case is built here from an import
of the project's sample dataset (tests/data/so101_av1, its last episode's clips one frame short) and
must raise `ReaderError` saying what is wrong, fast and without large allocations. The time and peak
of each case, before and after, are printed by tests/bench/bench_media_hostile.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import SAMPLE, copy_dataset, run_import
from transforms.episode import spql_types  # noqa: F401  (registers spql.* for Parquet reads)
from transforms.reader.import_reader import ImportReader, _ranges_text
from transforms.reader.seek import ReaderError

FRONT_REL = "videos/observation.images.front/chunk-000/file-000.mp4"
CAM = "observation.images.front"
FPS = 30


# ------------------------------------------------------------------------------------------------
# Building and tampering with outputs (also used by tests/bench/bench_media_hostile.py)
# ------------------------------------------------------------------------------------------------

def one_frame_short(root: Path) -> Path:
    """Episode 3 (the last, 10 frames from 1.2 s) gets `to_timestamp = from + (length - 1) / fps`."""
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    for cam in ("front", "wrist"):
        name = f"videos/observation.images.{cam}/to_timestamp"
        values = table.column(name).to_numpy().copy()
        values[3] = 1.2 + 9 / FPS
        table = table.set_column(table.column_names.index(name), name, pa.array(values, pa.float64()))
    pq.write_table(table, path)
    return root


def replace_uris(out: Path, fn: Callable[[str], str]) -> None:
    """Every clip URI of the episode parts and every media_index `uri`, mapped through `fn`."""
    def rebuild(arr: pa.Array, name: str = "") -> pa.Array:
        if isinstance(arr, pa.ExtensionArray):
            return pa.ExtensionArray.from_storage(arr.type, rebuild(arr.storage, name))
        if pa.types.is_struct(arr.type):
            fields = list(arr.type)
            return pa.StructArray.from_arrays([rebuild(arr.field(f.name), f.name) for f in fields], fields=fields,
                                              mask=arr.is_null() if arr.null_count else None)
        if name == "uri" and pa.types.is_string(arr.type):
            return pa.array([None if u is None else fn(u) for u in arr.to_pylist()], arr.type)
        return arr

    for part in sorted(out.glob("episodes/**/*.parquet")) + sorted(out.glob("media_index/**/*.parquet")):
        table = pq.read_table(part)
        for i, name in enumerate(table.column_names):
            if name in ("videos", "uri"):
                table = table.set_column(i, table.schema.field(i), rebuild(table.column(i).combine_chunks(), name))
        in_index = part.relative_to(out).parts[0] == "media_index"
        pq.write_table(table.sort_by("uri") if in_index else table, part, row_group_size=1 if in_index else None)


def edit_index(out: Path, fn: Callable[[dict], None]) -> None:
    """Apply `fn` to the primary track (as a Python dict) of every MediaIndex in media_index/."""
    for part in sorted(out.glob("media_index/**/*.parquet")):
        table = pq.read_table(part)
        index = table.column("index").combine_chunks()
        rows = index.storage.to_pylist()
        for row in rows:
            fn(row["tracks"][0])
        new = pa.ExtensionArray.from_storage(index.type, pa.array(rows, index.storage.type))
        i = table.column_names.index("index")
        pq.write_table(table.set_column(i, table.schema.field(i), new), part, row_group_size=1)


def edit_manifest(out: Path, fn: Callable[[dict], object]) -> None:
    path = out / "manifest.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(fn(doc)))


@pytest.fixture(scope="module")
def imports(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hostile_reader")
    dataset = one_frame_short(copy_dataset(SAMPLE, base / "so101_short"))
    out, skip = base / "out", base / "out_skip"
    assert run_import(dataset, out) == 0
    assert run_import(dataset, skip, "--skip-videos") == 0
    return {"dataset": dataset, "out": out, "skip": skip}


@pytest.fixture()
def out(imports, tmp_path) -> Path:
    """A copy of the default-layout import, free to tamper with."""
    return Path(shutil.copytree(imports["out"], tmp_path / "out"))


def _raises(fn, *words: str, peak_mb: float = 64) -> ReaderError:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ReaderError) as ex:
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5
    assert peak < peak_mb * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MB"
    for w in words:
        assert w in str(ex.value), str(ex.value)
    assert "np.float64" not in str(ex.value)
    return ex.value


def _first_frame(out: Path, **kw) -> np.ndarray:
    return ImportReader(str(out), **kw).episode(0).video(CAM).frame_at(0.0)


# ------------------------------------------------------------------------------------------------
# Reads confined to the import root and the dataset root
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("listed", ["../outside/stolen.parquet", "episodes/../../outside/stolen.parquet",
                                    "/etc/passwd", "file:///etc/passwd", "memory://x/part.parquet", 7, ""])
def test_part_paths_outside_the_import_are_refused(out, listed):
    (out.parent / "outside").mkdir()
    shutil.copyfile(out / "episodes/chunk-000/file-000.parquet", out.parent / "outside/stolen.parquet")

    def edit(doc):
        for entry in doc["episodes_files"].values():
            entry["parts"] = [listed]
        return doc
    edit_manifest(out, edit)
    _raises(lambda: ImportReader(str(out)), "manifest.json", "episode part")


def test_media_index_path_outside_the_import_is_refused(out):
    edit_manifest(out, lambda doc: {**doc, "media_index": ["../../" + doc["media_index"][0]]})
    _raises(lambda: ImportReader(str(out)), "lists the media_index part '../../media_index/", "not inside the "
                                                                                               "import root")


def test_part_symlinked_outside_the_import_is_refused(out, tmp_path):
    part = out / "episodes/chunk-000/file-000.parquet"
    outside = tmp_path / "elsewhere.parquet"
    shutil.move(part, outside)
    part.symlink_to(outside)
    _raises(lambda: ImportReader(str(out)), "not inside the import root")


def test_clip_pointing_outside_the_roots_is_refused_unless_allowed(out, imports, tmp_path):
    secret = tmp_path / "secret" / "secret.mp4"
    secret.parent.mkdir()
    shutil.copyfile(imports["dataset"] / FRONT_REL, secret)
    replace_uris(out, lambda u: "file://" + str(secret) if u.endswith(FRONT_REL) else u)
    ex = _raises(lambda: _first_frame(out), f"its video file file://{secret} is not inside the roots",
                 "allowed_roots=")
    assert str(imports["dataset"].resolve()) in str(ex)
    want = _first_frame(imports["out"])
    assert np.array_equal(_first_frame(out, allowed_roots=[str(secret.parent)]), want)


def test_clip_with_dotdot_is_refused(out, imports):
    dataset = "file://" + str(imports["dataset"])
    replace_uris(out, lambda u: u.replace(dataset, dataset + "/videos/..") if u.endswith(FRONT_REL) else u)
    _raises(lambda: _first_frame(out), "/videos/../videos/", "is not inside the roots")


def test_clip_symlinked_out_of_the_dataset_is_refused(imports, tmp_path):
    dataset = Path(shutil.copytree(imports["dataset"], tmp_path / "ds"))
    out = tmp_path / "out"
    assert run_import(dataset, out) == 0
    moved = tmp_path / "elsewhere.mp4"
    shutil.move(dataset / FRONT_REL, moved)
    (dataset / FRONT_REL).symlink_to(moved)
    _raises(lambda: _first_frame(out), "is not inside the roots")


def test_without_a_manifest_videos_need_their_root_named(out, imports):
    (out / "manifest.json").unlink()
    _raises(lambda: _first_frame(out), "is not inside the roots", "allowed_roots=")
    assert _first_frame(out, allowed_roots=[str(imports["dataset"])]).shape == (48, 64, 3)


# ------------------------------------------------------------------------------------------------
# Manifests and indexes checked before use
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,words", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[1, 2]", "it holds a JSON list, not an object"),
    ('{"episodes_files": [1]}', "`episodes_files` is not an object"),
    ('{"episodes_files": {"a": {"parts": "x"}}}', "`parts` is not a list"),
    ('{"media_index": {"a": 1}}', "`media_index` is not a list"),
    ("{not json", "is not valid JSON"),
])
def test_malformed_manifests(out, text, words):
    (out / "manifest.json").write_text(text)
    _raises(lambda: ImportReader(str(out)), words)


def _runs_of_2_32(t: dict) -> None:
    t["dts_runs"] = [{"count": (1 << 32) - 1, "delta": 512}] * 3  # 96 GiB of int64 if expanded


@pytest.mark.parametrize("tamper,words", [
    (_runs_of_2_32, "dts_runs cover 12,884,901,885 samples, sizes 46"),
    (lambda t: t.update(timescale=0), "has timescale 0"),
    (lambda t: t.update(ctts=[0] * 3), "ctts has 3 values for 46 samples"),
    (lambda t: t.update(flags=t["flags"][:-1]), "flags has 45 values"),
    (lambda t: t.update(chunks=[{"first_sample": 5, "offset": 0}]), "chunks must start at sample 0"),
    (lambda t: t.update(chunks=[{"first_sample": 0, "offset": (1 << 63) - 10}]), "overflow 64 bits"),
    (lambda t: t.update(gops=[]), "gops must increase"),
    (lambda t: t.update(sizes=[], dts_runs=[], flags=[], ctts=None), "has 0 samples"),
    (lambda t: t.update(codec="mpeg4"), "has codec 'mpeg4'"),
    (lambda t: t.update(sample_entry=b"\0\0\0\x08free"), "not an stsd box"),
])
def test_tampered_index_is_refused_before_use(out, tamper, words):
    edit_index(out, tamper)
    ex = _raises(lambda: _first_frame(out), "the MediaIndex of file://", "cannot be used", words)
    assert FRONT_REL in str(ex)


# ------------------------------------------------------------------------------------------------
# Reads that match LeRobot's, and messages for people
# ------------------------------------------------------------------------------------------------

def test_last_frame_of_a_one_frame_short_clip_equals_a_sequential_decode(imports):
    ep = ImportReader(str(imports["out"])).episode(3)
    assert ep.length == 10
    for camera in ep.cameras:
        video = ep.video(camera)
        assert video.clip_end_ns - video.clip_start_ns == 9 * 10 ** 9 // FPS  # one frame short
        with av.open(video.uri[len("file://"):]) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        assert len(frames) == 46
        timestamps = ep["timestamp"]
        assert video.frame_numbers().tolist() == list(range(36, 46))
        np.testing.assert_allclose(video.timestamps(), timestamps, atol=1e-4, rtol=0)
        assert np.array_equal(video.frame_at(float(timestamps[-1])), frames[45])
        batch = video.frames_at(timestamps)
        assert all(np.array_equal(batch[i], frames[36 + i]) for i in range(10))
        _raises(lambda: video.frame_at(float(timestamps[-1]) + 1 / FPS), "is outside the clip")


def test_clip_end_still_bounds_a_full_clip(imports):
    ep = ImportReader(str(imports["out"])).episode(1)
    video = ep.video(CAM)
    assert video.frame_numbers().tolist() == list(range(12, 21))
    ex = _raises(lambda: video.frame_at(ep.length / FPS), "episode time 0.3 s is outside the clip",
                 "the clip covers episode times [0, 0.3) s (stream [0.4, 0.7) s)")
    assert "np." not in str(ex)


def test_messages_print_plain_numbers(imports):
    video = ImportReader(str(imports["out"])).episode(0).video(CAM)
    _raises(lambda: video.frame_at(np.float64(13.1)), "episode time 13.1 s is outside the clip")
    _raises(lambda: video.frame_at(np.float32(0.0) + np.float64(0.5 / FPS)),
            "within 0.0001 s of episode time 0.0166666667 s",
            "(frame 1 of the file, at episode time 0.0333333333 s) is 0.0166667 s away")
    _raises(lambda: video.frame_at(float("nan")), "must be finite numbers, got nan")
    _raises(lambda: video.frame_at(1e300), "episode time 1e+300 s is outside the clip")


def test_missing_episode_says_which_are_there(imports, tmp_path):
    reader = ImportReader(str(imports["out"]))
    _raises(lambda: reader.episode(7), "episode 7 is not in the import", ": episodes 0-3 are")
    assert _ranges_text(np.array([1, 2, 4, 5, 9])) == "1-2, 4-5, 9"
    assert _ranges_text(np.arange(0, 100, 2), max_ranges=3) == "0, 2, 4 and 47 more ranges"


def test_camera_absent_because_of_skip_videos(imports):
    ep = ImportReader(str(imports["skip"])).episode(0)
    assert ep.cameras == []
    _raises(lambda: ep.video(CAM), f"episode 0 has no camera '{CAM}': the import ran with --skip-videos")
    _raises(lambda: ImportReader(str(imports["out"])).episode(0).video("observation.images.top"),
            "(cameras: observation.images.front, observation.images.wrist)")


def test_episode_pickles_with_its_roots(imports):
    import pickle
    ep = ImportReader(str(imports["out"])).episode(0)
    back = pickle.loads(pickle.dumps(ep))
    assert back.access.allowed_roots == ep.access.allowed_roots and back.access.allowed_roots
    assert os.path.basename(back.access.allowed_roots[0]) == "out"


# ------------------------------------------------------------------------------------------------
# Numeric arguments of the reader's API
# ------------------------------------------------------------------------------------------------

BAD_NUMBERS = [float("nan"), float("inf"), -1.0, True, "0.1"]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_reader_numeric_arguments_are_the_readers_own_error(imports, value):
    """NaN, an infinity, a negative, a bool or a string given for a number: a ReaderError naming the argument
    where it is given (a NaN tolerance ended in a ValueError deep inside the seek)."""
    from transforms.reader import MediaIndexStore, VideoAccess
    shown = f"{value!r}"
    _raises(lambda: ImportReader(str(imports["out"]), tolerance=value), f"tolerance={shown} is not a finite number")
    reader = ImportReader(str(imports["out"]))
    episode = reader.episode(0)
    _raises(lambda: episode.video(CAM, tolerance=value), f"tolerance={shown} is not a finite number >= 0")
    _raises(lambda: VideoAccess(tolerance=value), f"tolerance={shown}")
    _raises(lambda: reader.episode(value), f"episode_index={shown} is not a finite whole number >= 0")
    _raises(lambda: MediaIndexStore([], cache_files=value), f"cache_files={shown}")
    _raises(lambda: MediaIndexStore([], cache_track_bytes=value), f"cache_track_bytes={shown}")
    handle = episode.video(CAM)
    if not isinstance(value, str):  # numpy reads "0.1" as the time 0.1
        _raises(lambda: handle.frames_at([0.0, value]), "episode time")
    _raises(lambda: handle.frames_at([0.0, "soon"]), "episode times must be numbers in seconds")
    assert handle.frame_at(0.0).shape[2] == 3  # the handle still reads after a refused request


def test_a_whole_float_episode_index_still_finds_the_episode(imports):
    reader = ImportReader(str(imports["out"]))
    assert reader.episode(1.0).episode_index == reader.episode(1).episode_index == 1
