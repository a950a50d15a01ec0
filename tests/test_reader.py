"""The reader: episodes back from an import, frames by episode time through the MediaIndex.

(1) every frame of every episode of every video dataset (AV1, H.264 with B-frames, HEVC with open
GOPs) seeks to the pixels of a sequential PyAV decode; (2) a seek reads only its decode closure's
sample bytes and never the moov; (3) frame fields equal the data files'; (4) the logical episodes
read from the default layout equal the --inline-index records; plus errors, torchcodec mappings and
the Beam transform.
"""

from __future__ import annotations

import functools
from fractions import Fraction
import json
import struct
from pathlib import Path

import av
import apache_beam as beam
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

import dataset_factory as DF
import mp4_factory as MF
from tests.helpers import corpus_path, run_import
from transforms.episode import spql_types  # noqa: F401  (registers spql.* for Parquet reads)
from transforms.reader.import_reader import Episode, ImportReader
from transforms.read_episodes import ReadImportedEpisodes
from transforms.mp4 import ranges
from transforms.reader.seek import ReaderError

CORPUS_DATASETS = ["so101_av1", "language", "h264_multi_file", "images_and_tensors"]
VIDEO_DATASETS = ["so101_av1", "language", "h264_multi_file", "hevc_open_gop"]


# ------------------------------------------------------------------------------------------------
# Fixtures: each dataset imported once in both layouts
# ------------------------------------------------------------------------------------------------

def _hevc_dataset(root: Path) -> Path:
    """Three episodes in one HEVC file from x265 (B-frames, open GOP: CRA with leading pictures)."""
    mp4 = MF.encode(root.parent / "hevc.mp4", codec="libx265", frames=60, width=64, height=48, fps=30,
                    options={"g": "12"})
    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
        "observation.images.cam": {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channels"],
                                   "info": {"video.codec": "hevc", "video.fps": 30, "video.pix_fmt": "yuv420p"}},
    }
    return DF.write_dataset(root, DF.DatasetSpec(lengths=(20, 25, 15), fps=30, features=features,
                                                 video_files={"observation.images.cam": mp4}))


@pytest.fixture(scope="session")
def imported(tmp_path_factory) -> dict[str, tuple[Path, Path, Path]]:
    """name -> (dataset root, default-layout output, inline-layout output)."""
    base = tmp_path_factory.mktemp("reader")
    roots = {name: corpus_path("lerobot", name) for name in CORPUS_DATASETS}
    roots["hevc_open_gop"] = _hevc_dataset(base / "hevc_open_gop")
    out = {}
    for name, root in roots.items():
        default, inline = base / f"{name}.out", base / f"{name}.inline"
        assert run_import(root, default) == 0
        assert run_import(root, inline, "--inline-index") == 0
        out[name] = (Path(root), default, inline)
    return out


@functools.lru_cache(maxsize=None)
def sequential_frames(path: str) -> tuple[np.ndarray, ...]:
    """Every frame of the file, decoded from the start by PyAV, in presentation order."""
    with av.open(path) as c:
        return tuple(f.to_ndarray(format="rgb24") for f in c.decode(video=0))


def local_path(uri: str) -> str:
    assert uri.startswith("file://"), uri
    return uri[len("file://"):]


def info_of(root: Path) -> dict:
    return json.loads((root / "meta" / "info.json").read_text())


# ------------------------------------------------------------------------------------------------
# (1) frame_at(timestamp_i) == frame round(from_timestamp * fps) + i of a sequential decode
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", VIDEO_DATASETS)
def test_every_frame_matches_sequential_decode(imported, name):
    root, default, _ = imported[name]
    fps = info_of(root)["fps"]
    checked = 0
    for ep in ImportReader(str(default)):
        timestamps = ep["timestamp"]
        for camera in ep.cameras:
            video = ep.video(camera)
            frames = sequential_frames(local_path(video.uri))
            first = round(video.clip_start_ns / 1e9 * fps)
            want = np.arange(first, first + len(timestamps))
            assert video.locate(timestamps).tolist() == want.tolist()
            for i, t in enumerate(timestamps):
                got = video.frame_at(float(t))
                assert got.dtype == np.uint8 and got.shape == frames[want[i]].shape
                assert np.array_equal(got, frames[want[i]]), (name, ep.episode_index, camera, i)
            batch = video.frames_at(timestamps)
            assert all(np.array_equal(batch[i], frames[want[i]]) for i in range(len(want)))
            # The episode's own frames, on its timeline.
            assert video.frame_numbers().tolist() == want.tolist()
            np.testing.assert_allclose(video.timestamps(), timestamps, atol=1e-4, rtol=0)
            checked += len(timestamps)
    assert checked > 0


def test_hevc_file_has_leading_pictures(imported):
    """The HEVC case must exercise open-GOP leading pictures (decoded from the previous GOP)."""
    _, default, _ = imported["hevc_open_gop"]
    video = ImportReader(str(default)).episode(0).video("observation.images.cam")
    tr = video.track
    assert tr.codec == "h265" and tr.dts.tolist() != tr.pts.tolist()
    leading = [s for s in range(tr.num_samples) if tr.closure_start(s) < tr.gop_start[
        np.searchsorted(tr.gop_start, s, side="right") - 1]]
    assert leading, "x265 wrote no leading pictures: the open-GOP path is not tested"


def test_h264_corpus_reorders_frames(imported):
    _, default, _ = imported["h264_multi_file"]
    tr = ImportReader(str(default)).episode(0).video("observation.images.top").track
    assert tr.codec == "h264" and (tr.pts != tr.dts - tr.dts.min()).any()


# ------------------------------------------------------------------------------------------------
# (2) a seek reads its closure's samples only, never the moov
# ------------------------------------------------------------------------------------------------

def top_level_boxes(path: str) -> dict[bytes, tuple[int, int]]:
    data = Path(path).read_bytes()
    out, pos = {}, 0
    while pos + 8 <= len(data):
        size, type_ = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
        elif size == 0:
            size = len(data) - pos
        out[type_] = (pos, pos + size)
        pos += size
    return out


class Recorder:
    """Opens video files as the reader does (`ranges.open_uri`), counting every read in one `stats` and
    remembering every range fetched."""

    def __init__(self) -> None:
        self.stats = ranges.ReadStats()
        self.ranges: list[tuple[str, int, int]] = []

    def __call__(self, uri: str) -> ranges.RangeReader:
        src = ranges.open_uri(uri, stats=self.stats)
        read = src.read_ranges

        def recorded(starts, ends):
            self.ranges.extend((uri, s, e) for s, e in zip(starts, ends))
            return read(starts, ends)
        src.read_ranges = recorded
        return src

    @property
    def bytes_read(self) -> int:
        return self.stats.bytes_read


@pytest.mark.parametrize("name", VIDEO_DATASETS)
def test_seek_reads_only_its_closure(imported, name, monkeypatch):
    _, default, _ = imported[name]
    fs_reads: list[tuple[str, int, int]] = []
    local = type(fsspec.filesystem("file"))
    original = local.cat_file

    def counting_cat_file(self, path, start=None, end=None, **kw):
        data = original(self, path, start=start, end=end, **kw)
        if str(path).endswith(".mp4"):
            fs_reads.append((str(path), start, end if end is not None else len(data)))
        return data

    monkeypatch.setattr(local, "cat_file", counting_cat_file)
    recorder = Recorder()
    reader = ImportReader(str(default), open_file=recorder)
    for ep in reader:
        for camera in ep.cameras:
            video = ep.video(camera)
            path = local_path(video.uri)
            moov = top_level_boxes(path)[b"moov"]
            for t in ep["timestamp"]:
                before, before_fs = recorder.bytes_read, len(fs_reads)
                video.frame_at(float(t))
                (closure,) = video.plan([float(t)])
                sample_bytes = int(video.track.size[closure.first:closure.last + 1].sum())
                read = recorder.bytes_read - before
                assert read <= sample_bytes + 64 * 1024
                assert read == sample_bytes  # exactly the samples, in byte-contiguous runs
                new = fs_reads[before_fs:]
                assert sum(e - s for _, s, e in new) == read  # nothing else touched the MP4
                for _, s, e in new:
                    assert e <= moov[0] or s >= moov[1], f"read {s}..{e} overlaps moov {moov}"


def test_gop_frames_requested_together_decode_once(imported):
    _, default, _ = imported["h264_multi_file"]
    ep = ImportReader(str(default)).episode(0)
    video = ep.video("observation.images.top")
    plans = video.plan(ep["timestamp"])
    assert len(plans) == len({video.track.closure_start(s) for c in plans for s in c.targets})
    assert sum(len(c.targets) for c in plans) == ep.length


# ------------------------------------------------------------------------------------------------
# (3) frame fields equal the data files'
# ------------------------------------------------------------------------------------------------

_NP = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8, "int16": np.int16,
       "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
       "uint64": np.uint64, "bool": np.bool_}


@pytest.mark.parametrize("name", CORPUS_DATASETS + ["hevc_open_gop"])
def test_frame_fields_equal_data_files(imported, name):
    root, default, _ = imported[name]
    info = info_of(root)
    data = pa.concat_tables([pq.read_table(p) for p in sorted(root.glob("data/*/*.parquet"))],
                            promote_options="permissive")
    index = data.column("index").to_numpy()
    compared = set()
    for ep in ImportReader(str(default)):
        rows = data.filter(pa.array((index >= ep["index"][0]) & (index <= ep["index"][-1])))
        assert rows.num_rows == ep.length
        for feature, spec in info["features"].items():
            if spec["dtype"] == "video":
                continue
            got = ep[feature]
            want = rows.column(feature).to_pylist()
            if spec["dtype"] in _NP:
                shape = tuple(spec["shape"])
                want_arr = np.array(want, dtype=_NP[spec["dtype"]])
                expect_shape = (ep.length,) if shape == (1,) else (ep.length, *shape)
                assert got.shape == expect_shape and got.dtype == want_arr.dtype, feature
                assert np.array_equal(got, want_arr.reshape(expect_shape), equal_nan=got.dtype.kind == "f"), feature
                if shape != (1,):
                    assert not got.flags.owndata, f"{feature}: tensor was copied, not viewed"
            elif spec["dtype"] == "string":
                assert got.tolist() == want
            elif spec["dtype"] == "image":
                assert got == [None if w is None else w["bytes"] for w in want]
            else:  # language annotations: imported (normalised) lists, one per frame
                assert len(got) == ep.length
            compared.add(feature)
    assert compared >= {"timestamp", "index", "frame_index", "episode_index", "task_index"}


# ------------------------------------------------------------------------------------------------
# (4) logical episodes from the default layout == the --inline-index records
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CORPUS_DATASETS + ["hevc_open_gop"])
def test_logical_episodes_equal_inline_output(imported, name):
    _, default, inline = imported[name]
    reader = ImportReader(str(default))
    manifest = json.loads((inline / "manifest.json").read_text())
    order = []
    for rel, entry in sorted(manifest["episodes_files"].items()):
        for part in entry["parts"]:
            want = pq.read_table(inline / part)
            for i in range(want.num_rows):
                row = want.slice(i, 1)
                got = reader.episode(row.column("episode_index")[0].as_py()).to_arrow()
                assert got.schema.equals(row.schema, check_metadata=True)
                assert got.equals(row), (name, part, i)
                order.append(row.column("episode_index")[0].as_py())
    assert [ep.episode_index for ep in ImportReader(str(default))] == order
    # Inline parts read back unchanged; each row group holding an MP4's index was fetched once.
    assert all(ep.to_arrow().equals(ImportReader(str(inline)).episode(ep.episode_index).to_arrow())
               for ep in ImportReader(str(inline)))
    if name != "images_and_tensors":
        uris = {ep.video(c).uri for ep in ImportReader(str(default)) for c in ep.cameras}
        groups = {g for u in uris for g in reader.media_index._candidates(u)}
        assert reader.media_index.row_groups_read == len(groups) <= len(uris)  # small MP4s share row groups


def test_episode_lookup_reads_one_row_group(tmp_path):
    root = DF.write_dataset(tmp_path / "many", DF.DatasetSpec(lengths=[2] * 150, fps=10))
    out = tmp_path / "many.out"
    assert run_import(root, out) == 0
    reader = ImportReader(str(out))
    assert len(reader.row_groups()) == 3  # 64-episode row groups
    ep = reader.episode(130)
    assert ep.episode_index == 130 and reader.row_groups_read == 1
    assert ep["index"].tolist() == [260, 261]
    with pytest.raises(ReaderError, match="episode 150 is not in the import") as ex:
        reader.episode(150)
    assert str(ex.value).endswith(": episodes 0-149 are")


def test_reader_without_manifest(imported, tmp_path):
    import shutil
    _, default, _ = imported["so101_av1"]
    copy = shutil.copytree(default, tmp_path / "copy")
    (copy / "manifest.json").unlink()
    got = [ep.to_arrow() for ep in ImportReader(str(copy))]
    want = [ep.to_arrow() for ep in ImportReader(str(default))]
    assert len(got) == len(want) and all(a.equals(b) for a, b in zip(got, want))
    # ... and through an fsspec URL.
    assert [e.episode_index for e in ImportReader("file://" + str(copy))] == [e.episode_index for e in
                                                                             ImportReader(str(default))]


# ------------------------------------------------------------------------------------------------
# Errors, tolerance, mappings, pickling
# ------------------------------------------------------------------------------------------------

def test_tolerance_and_out_of_clip_errors(imported):
    _, default, _ = imported["h264_multi_file"]
    ep = ImportReader(str(default)).episode(3)
    video = ep.video("observation.images.top")
    fps = 15
    with pytest.raises(ReaderError, match=r"within 0.0001 s .* is 0.0333\d* s away"):
        video.frame_at(float(ep["timestamp"][2]) + 0.5 / fps)
    assert video.frame_at(float(ep["timestamp"][2]) + 5e-5).shape == (48, 64, 3)  # within tolerance
    loose = ep.video("observation.images.top", tolerance=0.5 / fps)
    assert np.array_equal(loose.frame_at(float(ep["timestamp"][2]) + 0.4 / fps), video.frame_at(ep["timestamp"][2]))
    with pytest.raises(ReaderError, match="outside the clip"):
        video.frame_at(-0.01)
    with pytest.raises(ReaderError, match="outside the clip"):
        video.frame_at(ep.length / fps)
    with pytest.raises(ReaderError, match="outside the clip"):
        video.frames_at([0.0, 1e6])
    with pytest.raises(ReaderError, match="no camera"):
        ep.video("observation.images.nope")
    with pytest.raises(ReaderError, match="no frame field"):
        ep["nope"]


def test_custom_frame_mappings_match_pyav(imported):
    for name in VIDEO_DATASETS:
        _, default, _ = imported[name]
        seen = set()
        for ep in ImportReader(str(default)):
            for camera in ep.cameras:
                video = ep.video(camera)
                if video.uri in seen:
                    continue
                seen.add(video.uri)
                doc = json.loads(video.custom_frame_mappings())
                with av.open(local_path(video.uri)) as c:
                    s = c.streams.video[0]
                    assert s.time_base == Fraction(1, video.track.timescale)
                    packets = sorted(((p.pts, p.duration, int(p.is_keyframe)) for p in c.demux(s) if p.size))
                    decoded = [f.pts for f in av.open(local_path(video.uri)).decode(video=0)]
                assert [f["pts"] for f in doc["frames"]] == decoded
                assert [(f["pts"], f["duration"], f["key_frame"]) for f in doc["frames"]][:-1] == packets[:-1]


def test_episode_pickles(imported):
    import pickle
    _, default, _ = imported["so101_av1"]
    ep = ImportReader(str(default)).episode(2)
    back = pickle.loads(pickle.dumps(ep))
    assert back.to_arrow().equals(ep.to_arrow())
    cam = ep.cameras[0]
    assert np.array_equal(back.video(cam).frame_at(0.0), ep.video(cam).frame_at(0.0))


# ------------------------------------------------------------------------------------------------
# Beam
# ------------------------------------------------------------------------------------------------

def test_read_imported_episodes_beam(imported):
    _, default, _ = imported["h264_multi_file"]
    expected = []
    for ep in ImportReader(str(default)):
        expected.append((ep.episode_index, ep.length, tuple(ep.tasks),
                         int(ep.video("observation.images.side").frame_at(float(ep["timestamp"][-1])).sum()),
                         float(ep["observation.state"].sum())))

    def summary(ep: Episode):
        return (ep.episode_index, ep.length, tuple(ep.tasks),
                int(ep.video("observation.images.side").frame_at(float(ep["timestamp"][-1])).sum()),
                float(ep["observation.state"].sum()))

    with BeamTestPipeline(runner="FnApiRunner") as p:
        got = p | ReadImportedEpisodes(str(default)) | beam.Map(summary)
        assert_that(got, equal_to(expected))


def test_reader_over_fsspec_url(imported):
    """An output on another filesystem (memory://) reads the same, both layouts."""
    import os
    mem = fsspec.filesystem("memory")
    for layout in (1, 2):
        src = imported["so101_av1"][layout]
        for dirpath, _, names in os.walk(src):
            for n in names:
                p = os.path.join(dirpath, n)
                mem.pipe(f"/reader-test-{layout}/{os.path.relpath(p, src)}", Path(p).read_bytes())
        got = [e.to_arrow() for e in ImportReader(f"memory://reader-test-{layout}")]
        want = [e.to_arrow() for e in ImportReader(str(src))]
        assert len(got) == len(want) and all(a.equals(b) for a, b in zip(got, want))


def test_frame_lookups_search_whole_ticks_and_find_what_the_seconds_say():
    """Lookups search integer pts with integer needles (a float needle makes numpy cast a file's whole table to
    float64 at each call) and find the same frames as comparing the times in seconds."""
    from transforms.reader.seek import _first_at_or_after, _whole_ticks

    rng = np.random.default_rng(7)
    timescale = 15360
    pts = np.cumsum(rng.integers(1, 1024, 5000)).astype(np.int64)  # uneven steps, as real files can have
    seconds = np.concatenate((pts[:200] / timescale, pts[:200] / timescale + 1e-9, pts[:200] / timescale - 1e-9,
                              rng.uniform(-1, pts[-1] / timescale + 1, 600)))
    for x in seconds.tolist():
        want = int(np.flatnonzero(pts / timescale >= x)[0]) if (pts / timescale >= x).any() else len(pts)
        assert _first_at_or_after(pts, timescale, x) == want
    ticks = seconds * timescale
    assert _whole_ticks(ticks).dtype == np.int64
    np.testing.assert_array_equal(np.searchsorted(pts, _whole_ticks(ticks)), np.searchsorted(pts, ticks))
    assert _whole_ticks(1e30) == 2 ** 62 and _whole_ticks(-1e30) == -2 ** 62  # clamped, not overflowed
