"""`ImportedFrames` serves the same items whatever the MP4 layout (many episodes per MP4, or one episode per MP4,
as v2.1-style and merged datasets hold them), and its per-item cost does not depend on it: each MP4's MediaIndex
is read once per process into the tables a seek needs, each media_index/ shard is opened once per process, and no
item copies a file's index (the logical record with its index filled in is never built on the frames path)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")
av = pytest.importorskip("av", reason="splitting MP4s needs PyAV: pip install -e '.[video]'")

from tests.bench.synth_dataset import make_dataset  # noqa: E402
from tests.helpers import assert_items_equal, copy_dataset, lerobot_dataset, run_import  # noqa: E402
from tests.test_frames_dataset import _compare, _recorded  # noqa: E402
from transforms.reader import import_reader, seek  # noqa: E402
from transforms.reader import episode as episode_module  # noqa: E402
from transforms.base.errors import LeRobotImportError  # noqa: E402
from transforms.reader.frames import ImportedFrames  # noqa: E402

LENGTHS = [10, 12, 8, 14, 10, 12, 9, 11]


def split_per_episode(root, out):
    """A copy of the LeRobot dataset at `root` whose MP4s hold one episode each: each episode's packets
    stream-copied (no re-encode: the same pictures) into its own file, the episodes metadata pointing at it
    (file_index = episode, from_timestamp 0), as LeRobot v2.1-style and merged datasets are laid out."""
    out = copy_dataset(root, out)
    info = json.loads((out / "meta" / "info.json").read_text())
    fps = info["fps"]
    cams = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    meta = sorted((out / "meta" / "episodes").rglob("*.parquet"))
    for path in meta:
        table = pq.read_table(path)
        for cam in cams:
            cols = {c: table.column(f"videos/{cam}/{c}").to_pylist()
                    for c in ("chunk_index", "file_index", "from_timestamp")}
            for row, ep in enumerate(table.column("episode_index").to_pylist()):
                src = root / info["video_path"].format(video_key=cam, chunk_index=cols["chunk_index"][row],
                                                       file_index=cols["file_index"][row])
                dst = out / info["video_path"].format(video_key=cam, chunk_index=0, file_index=ep)
                length = table.column("length")[row].as_py()
                start = cols["from_timestamp"][row]
                _remux(src, dst.with_suffix(".part"), start, start + length / fps)
            table = table.set_column(table.column_names.index(f"videos/{cam}/chunk_index"),
                                     f"videos/{cam}/chunk_index", pa.array([0] * table.num_rows, pa.int64()))
            table = table.set_column(table.column_names.index(f"videos/{cam}/file_index"),
                                     f"videos/{cam}/file_index", table.column("episode_index").cast(pa.int64()))
            table = table.set_column(table.column_names.index(f"videos/{cam}/from_timestamp"),
                                     f"videos/{cam}/from_timestamp", pa.array([0.0] * table.num_rows))
            to = pa.array([n / fps for n in table.column("length").to_pylist()])
            table = table.set_column(table.column_names.index(f"videos/{cam}/to_timestamp"),
                                     f"videos/{cam}/to_timestamp", to)
        pq.write_table(table, path)
    for cam in cams:
        shutil.rmtree(out / "videos" / cam / "chunk-001", ignore_errors=True)
        for mp4 in (out / "videos" / cam).rglob("*.mp4"):
            mp4.unlink()
        for part in (out / "videos" / cam).rglob("*.part"):
            part.rename(part.with_suffix(".mp4"))
    return out


def _remux(src, dst, start: float, end: float) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4") as outp:
        stream = inp.streams.video[0]
        tb = float(stream.time_base)
        st = outp.add_stream_from_template(stream, opaque=True)
        base = None
        for pkt in inp.demux(stream):
            if pkt.pts is None or not start - 1e-4 <= pkt.pts * tb < end - 1e-4:
                continue
            base = pkt.dts if base is None else base
            assert base != pkt.dts or pkt.is_keyframe  # an episode starts on a keyframe (encoded on its own)
            pkt.pts, pkt.dts = pkt.pts - base, pkt.dts - base
            pkt.stream = st
            outp.mux(pkt)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The same synthetic episodes (g=2 AV1, 2 cameras, 3 episodes files) imported with 4 episodes per MP4 and
    one per MP4."""
    tmp = tmp_path_factory.mktemp("layouts")
    outs = {}
    for name, per in (("many", 4), ("one", 1)):
        root = make_dataset(tmp / f"ds_{name}", episodes=len(LENGTHS), frames=LENGTHS, cameras=2, codec="av1", gop=2,
                            clip_frames=6, episodes_per_mp4=per, state_dim=3, action_dim=3, episodes_per_meta_file=3)
        assert run_import(root, tmp / f"out_{name}") == 0
        outs[name] = str(tmp / f"out_{name}")
    return outs


WINDOWS = {"observation.images.top": [-1 / 30, 0.0], "action": [i / 30 for i in range(4)]}


@pytest.mark.parametrize("windows", [False, True])
def test_layouts_give_the_same_items(layouts, windows):
    kwargs = {"delta_timestamps": WINDOWS} if windows else {}
    many, one = ImportedFrames(layouts["many"], **kwargs), ImportedFrames(layouts["one"], **kwargs)
    assert len(many) == len(one) == sum(LENGTHS)
    uris = {ds.root: {ds._handle(ds._episode(e), "observation.images.top").uri for e in range(ds.num_episodes)}
            for ds in (many, one)}
    assert len(uris[many.root]) == 2 and len(uris[one.root]) == len(LENGTHS)  # the layouts really differ
    for i in np.random.default_rng(0).permutation(len(many)).tolist():
        assert_items_equal(many[i], one[i])


def test_one_episode_per_mp4_items_equal_lerobot(tmp_path):
    """so101_av1 split into one MP4 per episode (the same pictures, stream-copied) still gives LeRobot's
    recorded items, plain and windowed, in a random order."""
    root = split_per_episode(lerobot_dataset("so101_av1"), tmp_path / "split")
    assert len(list((root / "videos" / "observation.images.front").rglob("*.mp4"))) == 4
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    info, runs = _recorded(lerobot_dataset("so101_av1"))
    order = np.random.default_rng(1).permutation(len(info["items"]))
    for run, kwargs in (("plain", {}), ("windows", {"delta_timestamps": info["delta_timestamps"]})):
        ds = ImportedFrames(str(out), **kwargs)
        assert _compare(ds, info, run, runs[run], order.tolist()) == len(ds) == len(info["items"])


class _Counted(ImportedFrames):
    """Items that carry their process's read counters."""

    def __getitem__(self, i):
        item = super().__getitem__(i)
        store = self._reader().media_index
        item["_shards_opened"] = store.shards_opened
        item["_tracks_built"] = store.tracks_built
        item["_built_by_reader"] = _BUILT["n"]
        return item


_BUILT = {"n": 0}


@pytest.fixture
def counted_builds(monkeypatch):
    """Counts TrackTables built from a MediaIndex; the record-filling path (which copies a file's index per
    episode) and Episode.video raise if the frames path reaches them."""
    real = seek.TrackTables.from_media_index.__func__
    _BUILT["n"] = 0

    def counting(cls, index, track_id=None):
        _BUILT["n"] += 1
        return real(cls, index, track_id)

    def refuse(*_, **__):
        raise AssertionError("the frames path built the logical record")

    monkeypatch.setattr(seek.TrackTables, "from_media_index", classmethod(counting))
    monkeypatch.setattr(import_reader, "fill_media_index", refuse)
    monkeypatch.setattr(episode_module.Episode, "video", refuse)


@pytest.mark.parametrize("name", ["one", "many"])
def test_each_shard_opened_and_each_index_read_once_per_process(layouts, name, counted_builds):
    ds = _Counted(layouts[name], delta_timestamps=WINDOWS)
    shards = len(ds._reader().media_index.files)
    files = len({ds._handle(ds._episode(e), c).uri for e in range(ds.num_episodes) for c in ds.cameras})
    assert shards == 2 and files == (4 if name == "many" else 16)
    order = np.random.default_rng(2).permutation(len(ds)).tolist()
    seen = [ds[i] for i in order + order[:20]]
    # one process: every shard opened once, every file's tables built once, whatever the number of items
    assert seen[-1]["_shards_opened"] == shards and seen[-1]["_tracks_built"] == files == _BUILT["n"]
    # each row group read once: the small MP4s of a camera share their shard's one row group
    assert ds._reader().media_index.row_groups_read == shards < files


def test_each_shard_opened_once_per_dataloader_worker(layouts, counted_builds):
    from torch.utils.data import DataLoader

    ds = _Counted(layouts["one"])
    shards = len(ds._reader().media_index.files)
    loader = DataLoader(ds, batch_size=4, num_workers=2, shuffle=True, multiprocessing_context="fork")
    opened, built = [], []
    for batch in loader:
        opened += batch["_shards_opened"].tolist()
        built += batch["_tracks_built"].tolist()
    assert 1 <= max(opened) <= shards  # per worker: each shard at most once
    assert max(built) <= len(LENGTHS) * len(ds.cameras)  # per worker: each file's tables at most once


def test_uint8_cameras_are_lerobots_values_before_the_division(layouts):
    """camera_dtype="uint8" returns the decoded values: `float() / 255` of them is the float32 item, bit for bit,
    batched through default_collate too; every other key is unchanged."""
    from torch.utils.data import default_collate

    plain = ImportedFrames(layouts["one"], delta_timestamps=WINDOWS)
    small = ImportedFrames(layouts["one"], delta_timestamps=WINDOWS, camera_dtype="uint8")
    items = [3, 40, len(plain) - 1]
    for i in items:
        a, b = plain[i], small[i]
        assert set(a) == set(b)
        for key in a:
            if key in plain.cameras:
                assert b[key].dtype == torch.uint8 and b[key].shape == a[key].shape
                assert torch.equal(b[key].to(torch.float32) / 255, a[key])
            elif isinstance(a[key], torch.Tensor):
                assert torch.equal(a[key], b[key]), key
    batch = default_collate([small[i] for i in items])
    want = default_collate([plain[i] for i in items])
    for cam in plain.cameras:  # top has a window of 2 frames, wrist none
        assert batch[cam].dtype == torch.uint8 and torch.equal(batch[cam].float().div_(255), want[cam])
    assert batch["observation.images.wrist"].is_contiguous()


def test_camera_dtype_is_checked(layouts):
    from transforms.reader.frames import FramesError

    with pytest.raises(FramesError, match=r"^camera_dtype='float16' is not one of 'float32', 'uint8'$"):
        ImportedFrames(layouts["one"], camera_dtype="float16")


def test_per_process_caches_stay_within_their_budgets(layouts, monkeypatch):
    """The tables of files and the episode groups a process keeps are bounded in bytes: past the budget the
    least recently used go (and are read again when needed), the items unchanged."""
    from transforms.reader import frames

    want = ImportedFrames(layouts["one"])
    reader = want._reader()
    store = import_reader.MediaIndexStore(reader.media_index.files, cache_track_bytes=1)
    uris = [want._handle(want._episode(e), "observation.images.top").uri for e in range(3)]
    tables = [store.tracks(u) for u in uris + uris[:1]]
    assert store.tracks_built == 4 and len(store._tracks) == 1  # only the newest kept: the first was rebuilt
    assert np.array_equal(tables[0].offset, tables[3].offset) and tables[0] is not tables[3]

    monkeypatch.setattr(frames, "ROW_GROUP_BYTES", 1)
    small, full = ImportedFrames(layouts["many"]), ImportedFrames(layouts["many"])
    assert len(small._row_groups) == 3
    for i in (0, len(small) - 1, 1):
        assert_items_equal(small[i], full[i])
        assert len(small._groups_cache) == 1
    assert small._reader().row_groups_read == 3 + 3  # the scan, then groups 0, 2 and 0 again


def test_a_window_in_one_gop_is_one_read(layouts):
    """The frames of a camera window that share a decode closure are fetched in one read: the item whose
    window [t - 1, t] of top lies in one GOP costs one request per camera, and one decode stream each."""
    from transforms.reader.frames import closure_starts

    ds = ImportedFrames(layouts["many"], delta_timestamps=WINDOWS)
    prep = ds._episode(1)
    h = ds._handle(prep, "observation.images.top")
    samples = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
    firsts = closure_starts(h.track, samples)
    pos = int(np.flatnonzero((firsts[1:] == firsts[:-1]) & (samples[1:] > samples[:-1]))[0]) + 1
    item = ds[ds.episode_bounds[1][0] + pos]
    assert item["observation.images.top"].shape[0] == 2
    assert ds.gop_cache.streams_started == 2 and ds.gop_cache.stats.requests == 2


def test_local_video_files_are_read_with_pread_on_one_descriptor(layouts, tmp_path, monkeypatch):
    """A local MP4 is opened once per process and read by os.pread (no fsspec open per read); other URLs keep
    fsspec's reader. The bytes and the counts are the same either way."""
    import fsspec

    from transforms.mp4 import ranges
    from transforms.reader import gop_cache

    opened = []
    real_open = os.open
    monkeypatch.setattr(ranges.os, "open", lambda path, *a: opened.append(path) or real_open(path, *a))
    ds = ImportedFrames(layouts["many"])
    for i in (0, 5, 1, len(ds) - 1, 2):
        ds[i]
    readers = list(ds.gop_cache._files.values())
    assert readers and all(isinstance(r, ranges.LocalRangeReader) for r in readers)
    assert sorted(p for p in opened if p.endswith(".mp4")) == sorted(r.path for r in readers)  # one descriptor each
    path = readers[0].path
    data = open(path, "rb").read()
    counter = gop_cache.storage.ReadCounter()
    local = ranges.open_uri(f"file://{path}", stats=counter, pread=True)
    assert local.read_ranges([0, 100], [8, 164]) == [data[:8], data[100:164]] and local.size == len(data)
    assert (counter.requests, counter.bytes_read) == (2, 72)
    fsspec.filesystem("memory").pipe("/v/x.mp4", data)
    remote = ranges.open_uri("memory://v/x.mp4", stats=counter, pread=True)
    assert isinstance(remote, ranges.FsspecRangeReader) and remote.read_ranges([100], [164]) == [data[100:164]]
    with pytest.raises(LeRobotImportError, match=r"video file .*nothing\.mp4 does not exist"):
        ranges.open_uri(str(tmp_path / "nothing.mp4"), stats=counter, pread=True).read_ranges([0], [1])
