"""`ImportedFrames` returns LeRobot's items: checked against what LeRobot 0.4.4's `LeRobotDataset.__getitem__`
recorded (video backend pyav) for every frame of every project dataset with recorded items, plain and with
`delta_timestamps` windows that cross episode edges.

Camera frames are compared exactly: LeRobot's pyav backend and our reader decode with the same PyAV
decoders (libdav1d for AV1, FFmpeg's h264) and convert to RGB with the same swscale defaults, then both
divide the uint8 values by 255 in float32, so the tensors are equal bit for bit (the recording stores
the uint8 values; `stored / 255` is LeRobot's tensor exactly, see make_lerobot_items.py).

Also: episode selection, image transforms, recipes (against LeRobot's recorded RenderMessagesStep output),
LeRobot's checks of `delta_timestamps` and of video timestamps, GOP ids, the decode cache's reads and
decodes, pickling.
"""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

from tests.helpers import assert_items_equal, lerobot_dataset, run_import, run_python, third_party_path  # noqa: E402
from transforms.reader import ImportReader  # noqa: E402
from transforms.reader.frames import FramesError, ImportedFrames, closure_starts  # noqa: E402
from transforms.reader.gop_cache import gop_end  # noqa: E402

DATASETS = ("so101_av1", "h264_multi_file", "images_and_tensors")


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """Each dataset imported once (lazily, by name)."""
    done = {}

    def get(name: str, root=None):
        if name not in done:
            out = tmp_path_factory.mktemp(name) / "out"
            assert run_import(root or lerobot_dataset(name), out) == 0
            done[name] = str(out)
        return done[name]
    return get


def _recorded(root) -> tuple[dict, dict[str, dict[int, dict[str, np.ndarray]]]]:
    """items.json and, per run (plain, windows), index -> key -> recorded array."""
    folder = root / "expected_items"
    info = json.loads((folder / "items.json").read_text())
    runs = {}
    for run in ("plain", "windows"):
        items: dict[int, dict[str, np.ndarray]] = {}
        with np.load(folder / f"{run}.npz") as z:
            for name in z.files:
                index, key = name.split("/", 1)
                items.setdefault(int(index), {})[key] = z[name]
        runs[run] = items
    return info, runs


def _compare(ds: ImportedFrames, info: dict, run: str, items: dict[int, dict[str, np.ndarray]],
             order=None) -> int:
    """Every recorded item against ours, key by key (in `order`, default ascending); LeRobot's errors must be
    ours too. Returns the count."""
    compared = 0
    for i in sorted(int(k) for k in info["items"]) if order is None else order:
        entry = info["items"][str(i)]
        error = entry.get(f"error_{run}")
        if error is not None:
            with pytest.raises(FramesError) as got:
                ds[i]
            # LeRobot's video check says "violate the tolerance"; ours "no frame ... within": the same rule
            assert "tolerance" in error and "within" in str(got.value), (i, error, str(got.value))
            compared += 1
            continue
        want = items[i]
        got = ds[i]
        assert got["task"] == entry["task"], i
        assert set(got) - {"task"} == set(want), (i, sorted(set(got) ^ set(want)))
        for key, value in want.items():
            mine = got[key]
            if value.dtype.kind == "U":  # a string feature stays a string
                assert mine == str(value), (i, key)
                continue
            if key in ds.camera_keys:
                value = value.astype(np.float32) / 255
            assert isinstance(mine, torch.Tensor), (i, key)
            mine = mine.numpy()
            assert mine.dtype == value.dtype and mine.shape == value.shape, (i, key, mine.dtype, mine.shape)
            assert np.array_equal(mine, value), (i, key, float(np.abs(mine.astype(np.float64) - value).max()))
        compared += 1
    return compared


@pytest.mark.parametrize("run", ["plain", "windows"])
@pytest.mark.parametrize("name", DATASETS)
def test_items_equal_lerobot(imports, name, run):
    root = lerobot_dataset(name)
    info, runs = _recorded(root)
    kwargs = {"delta_timestamps": info["delta_timestamps"]} if run == "windows" else {}
    ds = ImportedFrames(imports(name), **kwargs)
    total = json.loads((root / "meta" / "info.json").read_text())["total_frames"]
    assert len(ds) == total and len(info["items"]) == total  # every frame was recorded
    assert _compare(ds, info, run, runs[run]) == total
    if run == "windows":  # the windows really cross episode edges (padding on both sides somewhere)
        pads = np.concatenate([runs[run][i][f"{k}_is_pad"] for i in runs[run] for k in info["delta_timestamps"]])
        assert pads.any() and not pads.all()


@pytest.mark.parametrize("name", ["so101_av1", "h264_multi_file"])
def test_random_order_items_equal_lerobot(imports, name):
    """In a shuffled order through a cache of one stream, every camera read is a fresh decode that starts
    from a recycled (flushed) decoder, reads only its frame's decode closure and converts only the frames
    asked for; the items are still LeRobot's, bit for bit."""
    root = lerobot_dataset(name)
    info, runs = _recorded(root)
    ds = ImportedFrames(imports(name), delta_timestamps=info["delta_timestamps"], cache_gops=1)
    order = np.random.default_rng(3).permutation(len(ds)).tolist()
    assert _compare(ds, info, "windows", runs["windows"], order) == len(ds)
    cache = ds.gop_cache
    assert cache.decoders_reused > 0 and cache.decoders_created <= 2 * len(ds.cameras)
    assert cache.decoders_created + cache.decoders_reused == cache.streams_started

    # a cold read of one frame fetches the bytes of its decode closure, not the rest of its GOP
    fresh = ImportedFrames(imports(name))
    camera = fresh.cameras[0]
    prep = fresh._episode(0)
    h = fresh._handle(prep, camera)
    samples = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
    firsts = closure_starts(h.track, samples)
    ends = np.array([gop_end(h.track, f) for f in firsts.tolist()])
    inside = np.flatnonzero(samples < ends)  # not the GOP's last sample
    deepest = inside[np.argmax(samples[inside] - firsts[inside])]
    s, first = int(samples[deepest]), int(firsts[deepest])
    frame = fresh.gop_cache.frames(h.uri, h.track, [s])[0]
    assert frame.shape == (3, h.track.height, h.track.width) and frame.dtype == np.uint8
    closure = int(h.track.size[first:s + 1].sum())
    gop = int(h.track.size[first:gop_end(h.track, first) + 1].sum())
    assert closure < gop
    # h264 with B-frames may hold the frame back until later samples are in: then the rest of the GOP is read
    assert fresh.bytes_read in (closure, gop)
    if name == "so101_av1":  # AV1 outputs each frame as soon as its sample is in
        assert fresh.bytes_read == closure


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_camera_tensors_are_contiguous_channels_first(imports, dtype):
    """A camera tensor is contiguous C x H x W, as LeRobot's (the decoder's planar RGB, no transposing copy),
    with the values of PyAV's packed rgb24 conversion, alone and in windows."""
    import av

    ds = ImportedFrames(imports("so101_av1"), camera_dtype=dtype)
    windows = ImportedFrames(imports("so101_av1"), camera_dtype=dtype,
                             delta_timestamps={c: [-1 / 30, 0.0] for c in ds.cameras})
    for camera in ds.cameras:
        t, w = ds[7][camera], windows[7][camera]
        c, height, width = t.shape
        assert c == 3 and t.is_contiguous() and t.stride() == (height * width, width, 1)
        assert w.shape == (2, 3, height, width) and w.is_contiguous() and torch.equal(w[1], t)
    # the planar conversion's values are packed rgb24's, frame by frame
    prep = ds._episode(0)
    h = ds._handle(prep, ds.cameras[0])
    with av.open(h.uri.removeprefix("file://")) as container:
        packed = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    planar = ds.gop_cache.frames(h.uri, h.track, np.arange(len(packed)))
    assert len(packed) >= 20
    for a, b in zip(packed, planar):
        assert b.shape == (3, *a.shape[:2]) and np.array_equal(b.transpose(1, 2, 0), a)


@pytest.mark.parametrize("run", ["plain", "windows"])
def test_third_party_g1_items_equal_lerobot(imports, run):
    root = third_party_path("unitree_g1_av1")
    if not (root / "expected_items" / "items.json").exists():
        pytest.skip(f"{root} has no expected_items/ (LeRobot's items were never recorded for it; its camera frames "
                    "are checked against PyAV by test_third_party_g1_frames_equal_pyav)")
    info, runs = _recorded(root)
    kwargs = {"delta_timestamps": info["delta_timestamps"]} if run == "windows" else {}
    ds = ImportedFrames(imports("unitree_g1_av1", root), **kwargs)
    assert _compare(ds, info, run, runs[run]) == len(info["items"])


# ------------------------------------------------------------------------------------------------
# Arguments LeRobot also takes
# ------------------------------------------------------------------------------------------------

def test_episodes_selects_and_keeps_global_values(imports):
    out = imports("h264_multi_file")
    info, _ = _recorded(lerobot_dataset("h264_multi_file"))
    windows = info["delta_timestamps"]
    full = ImportedFrames(out, delta_timestamps=windows)
    part = ImportedFrames(out, episodes=[7, 2], delta_timestamps=windows)
    bounds = full.episode_bounds
    assert len(bounds) == 10 and bounds[0][0] == 0 and bounds[-1][1] == len(full) == 104
    # in the import's order (2 before 7), whatever order they were asked in
    lengths = [bounds[2][1] - bounds[2][0], bounds[7][1] - bounds[7][0]]
    assert part.episode_bounds == [(0, lengths[0]), (lengths[0], sum(lengths))] and len(part) == sum(lengths)
    wanted = list(range(*bounds[2])) + list(range(*bounds[7]))
    for j, i in enumerate(wanted):
        assert_items_equal(part[j], full[i])
    assert int(part[0]["episode_index"]) == 2 and int(part[0]["index"]) == bounds[2][0]
    with pytest.raises(FramesError, match=r"episodes 11, 12 are not in the import .* 10 episodes, 0\.\.9"):
        ImportedFrames(out, episodes=[1, 11, 12])


def test_image_transforms_apply_to_every_camera(imports):
    out = imports("images_and_tensors")
    plain = ImportedFrames(out)
    flipped = ImportedFrames(out, image_transforms=lambda x: torch.flip(x, dims=[-1]))
    assert flipped.camera_keys == ["observation.image"]
    a, b = plain[3], flipped[3]
    assert torch.equal(b["observation.image"], torch.flip(a["observation.image"], dims=[-1]))
    assert not torch.equal(a["observation.image"], b["observation.image"])
    assert torch.equal(a["observation.matrix"], b["observation.matrix"])

    video = imports("so101_av1")
    info, _ = _recorded(lerobot_dataset("so101_av1"))
    seen = []
    ds = ImportedFrames(video, delta_timestamps=info["delta_timestamps"],
                        image_transforms=lambda x: seen.append(tuple(x.shape)) or x[..., :8, :8])
    item = ds[5]
    assert sorted(seen) == [(2, 3, 32, 48), (2, 3, 48, 64)]  # windows first, then the transform
    assert item["observation.images.front"].shape == (2, 3, 8, 8) and item["observation.state"].shape == (3, 6)


def test_delta_timestamps_checked_as_lerobot_does(imports):
    out = imports("so101_av1")
    with pytest.raises(FramesError, match=r"outside of the tolerance.*multiples of 1/30 s") as ex:
        ImportedFrames(out, delta_timestamps={"action": [0.0, 0.05]})
    assert "'action': [0.05]" in str(ex.value)
    with pytest.raises(FramesError, match=r"delta_timestamps names 'observation.nope'.*it has: action, episode_index"):
        ImportedFrames(out, delta_timestamps={"observation.nope": [0.0]})
    # within the tolerance: 1/30 s + 50 us is frame 1
    ds = ImportedFrames(out, delta_timestamps={"action": [1 / 30 + 5e-5]})
    assert ds.delta_indices == {"action": [1]}
    assert torch.equal(ds[0]["action"], ImportedFrames(out)[1]["action"].unsqueeze(0))


def test_camera_window_of_one_offset_has_no_window_axis(imports):
    """LeRobot squeezes the first axis of the decoded frames: a one-offset camera window is C x H x W."""
    out = imports("so101_av1")
    ds = ImportedFrames(out, delta_timestamps={"observation.images.front": [-1 / 30], "action": [0.0]})
    plain = ImportedFrames(out)
    item = ds[4]
    assert item["observation.images.front"].shape == (3, 48, 64) and item["action"].shape == (1, 6)
    assert torch.equal(item["observation.images.front"], plain[3]["observation.images.front"])
    assert torch.equal(ds[0]["observation.images.front"], plain[0]["observation.images.front"])  # clamped
    assert ds[0]["observation.images.front_is_pad"].tolist() == [True]


def test_video_timestamps_outside_tolerance_raise(imports):
    """A frame time farther than tolerance_s from every video frame is LeRobot's assertion; ours names the
    item, episode, frame, camera and the distance."""
    out = imports("so101_av1")
    ds = ImportedFrames(out, tolerance_s=1e-12)
    assert float(ds[0]["timestamp"]) == 0.0 and ds[0]["observation.images.front"].shape == (3, 48, 64)
    with pytest.raises(FramesError, match=r"item 13 \(episode 1, frame 1\) .* camera observation\.images\.front: "
                                          r"no frame of .* within 1e-12 s of episode time 0\.0333333"):
        ds[13]


def test_index_out_of_range(imports):
    ds = ImportedFrames(imports("so101_av1"))
    with pytest.raises(IndexError, match="item 46 is out of range: the dataset has 46 items"):
        ds[46]
    assert_items_equal(ds[-1], ds[45])


# ------------------------------------------------------------------------------------------------
# Language
# ------------------------------------------------------------------------------------------------

def test_recipe_messages_equal_lerobot_processor(imports):
    root = lerobot_dataset("language")
    ds = ImportedFrames(imports("language"), recipe=root / "expected" / "recipes" / "subtask_mem_vqa_speech.yaml")
    expected = {row["index"]: row for row in map(json.loads, (root / "expected" / "subtask_mem_vqa_speech.jsonl")
                                                 .read_text().splitlines())}
    assert len(ds) == len(expected) == 35
    targets = 0
    for i in range(len(ds)):
        item = ds[i]
        want = expected[int(item["index"])]
        assert item["task"] == want["task"] and int(item["frame_index"]) == want["frame_index"]
        assert {k: item[k] for k in ("messages", "message_streams", "target_message_indices")} == want["processor"]
        # the language columns stay in the item, as LeRobot 0.6.1's dataset returns them before its processor
        assert isinstance(item["language_persistent"], list) and item[ds.cameras[0]].dtype == torch.float32
        assert len(ds.cameras) == 2
        targets += len(item["target_message_indices"])
    assert targets > 0
    batch = ImportedFrames.collate([ds[0], ds[1], ds[2]])
    assert batch["action"].shape[0] == 3 and len(batch["messages"]) == 3 and batch["task"] == [ds[0]["task"]] * 3


# ------------------------------------------------------------------------------------------------
# GOPs, the decode cache, pickling
# ------------------------------------------------------------------------------------------------

def _closures(out: str, camera: str) -> list[tuple[str, int]]:
    """(file, first decode sample) of every frame of `camera`, through the reader's own seek plan."""
    found = []
    for ep in ImportReader(out):
        video = ep.video(camera)
        for t in ep["timestamp"].astype(np.float64).tolist():
            (closure,) = video.plan([t])
            found.append((video.uri, closure.first))
    return found


@pytest.mark.parametrize("name", ["so101_av1", "h264_multi_file"])
def test_gop_ids_name_the_decode_closure(imports, name):
    out = imports(name)
    ds = ImportedFrames(out)
    for camera in ds.cameras:
        ids = ds.gop_ids(camera)
        closures = _closures(out, camera)
        assert ids.dtype == np.int64 and len(ids) == len(ds) == len(closures)
        # equal ids exactly where the seek plan decodes from the same sample of the same file
        same_id = ids[:, None] == ids[None, :]
        same_closure = np.array([[a == b for b in closures] for a in closures])
        assert np.array_equal(same_id, same_closure)
        assert 1 < len(np.unique(ids)) < len(ds)  # GOPs hold several frames; there are several GOPs
    assert np.array_equal(ds.gop_ids(), ds.gop_ids(ds.cameras[0]))
    assert (ImportedFrames(imports("images_and_tensors")).gop_ids() == -1).all()


def test_sequential_epoch_reads_and_decodes_each_gop_once(imports):
    out = imports("h264_multi_file")
    ds = ImportedFrames(out, cache_gops=8)
    for i in range(len(ds)):
        ds[i]
    cache = ds.gop_cache
    # every GOP of every camera that the epoch touched: its bytes, its samples (these files have closed
    # GOPs: each frame decodes from its own GOP's first sample)
    gops, gop_bytes, gop_samples, file_bytes = 0, 0, 0, 0
    for camera in ds.cameras:
        seen = set()
        for e in range(ds.num_episodes):
            prep = ds._episode(e)
            h = ds._handle(prep, camera)
            samples = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
            firsts = closure_starts(h.track, samples)
            own = h.track.gop_start[np.searchsorted(h.track.gop_start, samples, side="right") - 1]
            assert np.array_equal(firsts, own)
            for first in np.unique(firsts).tolist():
                if (h.uri, first) not in seen:
                    seen.add((h.uri, first))
                    last = gop_end(h.track, first)
                    gop_bytes += int(h.track.size[first:last + 1].sum())
                    gop_samples += last + 1 - first
        gops += len(seen)
        file_bytes += sum(os.path.getsize(uri[len("file://"):]) for uri in {u for u, _ in seen})
    assert cache.streams_started == gops
    assert ds.bytes_read == gop_bytes and cache.samples_decoded == gop_samples
    assert ds.bytes_read < file_bytes  # never the moov, never a whole file

    nocache = ImportedFrames(out, cache_gops=0)
    for i in range(len(nocache)):
        nocache[i]
    assert nocache.gop_cache.streams_started == len(ds) * len(ds.cameras) > gops
    assert nocache.bytes_read > ds.bytes_read


def test_a_cache_whose_reads_never_come_back_lets_go_of_its_streams(imports):
    """Random reads of one frame per GOP: once REUSE_WINDOW requests in a row found no stream an earlier request
    left, the cache keeps none past its request (their pictures freed, their decoders idle). Asking again for a GOP
    it let go of makes it keep streams again. The items are the same either way."""
    import torch

    from transforms.reader.gop_cache import REUSE_WINDOW

    ds = ImportedFrames(imports("so101_av1"), camera_dtype="uint8", decode_threads=1)
    ids = np.stack([ds.gop_ids(cam) for cam in ds.cameras])
    _, one_per_gop = np.unique(ids[0], return_index=True)
    assert len(np.unique(ids[1][one_per_gop])) == len(one_per_gop)  # the second camera's GOPs differ too
    order = np.random.default_rng(3).permutation(one_per_gop).tolist()
    requests = len(order) * len(ds.cameras)
    assert requests > REUSE_WINDOW + 4
    reference = ImportedFrames(imports("so101_av1"), camera_dtype="uint8", cache_gops=0)
    cache = ds.gop_cache
    for k, i in enumerate(order):
        assert_items_equal(ds[i], reference[i])
        if (k + 1) * len(ds.cameras) < REUSE_WINDOW:  # still keeping: the last streams are in the cache
            assert len(cache._streams) == min(8, (k + 1) * len(ds.cameras)) and cache.streams_let_go == 0
    assert cache._streams == {} and cache.streams_started == requests
    # every stream started was let go of: the cache's 8 when the window filled with misses, then each one at once
    assert cache.streams_let_go == min(8, REUSE_WINDOW) + requests - REUSE_WINDOW
    assert len(cache._idle) <= 4 and all(ctx is not None for _, ctx in cache._idle)

    again = order[-1]  # its GOPs were let go of: asked again, they are decoded again and kept from now on
    assert torch.equal(ds[again][ds.cameras[0]], reference[again][ds.cameras[0]])
    assert len(cache._streams) == len(ds.cameras) and cache.streams_started == requests + len(ds.cameras)


def test_letting_go_spares_the_streams_another_thread_s_request_is_still_reading(imports):
    """Once the cache lets go of streams, one thread's request does not take away the stream of another thread's
    request that has decoded the first of its frames and not yet the second: that request finishes on its stream
    (one stream, its GOP decoded once), not on a new one started from the GOP's first sample again."""
    import threading

    from transforms.reader.decoder import PyAVDecoder
    from transforms.reader.gop_cache import REUSE_WINDOW, GopCache

    ds = ImportedFrames(imports("so101_av1"))
    tracks = []
    for e in range(ds.num_episodes):
        prep = ds._episode(e)
        for cam in ds.cameras:
            h = ds._handle(prep, cam)
            tracks.append((h.uri, h.track, h.track.order[h.locate(prep.timestamps.astype(np.float64))]))
    uri, track, samples = tracks[0]
    firsts = closure_starts(track, samples)
    two = next(f for f in np.unique(firsts).tolist() if (firsts == f).sum() >= 2)  # a GOP of two frames or more
    window = samples[firsts == two][:2]
    others = [(u, t, int(s), int(f)) for u, t, ss in tracks for s, f in zip(ss, closure_starts(t, ss))
              if not (u == uri and f == two)]
    others = list({(u, f): (u, t, s, f) for u, t, s, f in others}.values())  # one frame per other GOP
    assert len(others) > REUSE_WINDOW + 1

    entered, release = threading.Event(), threading.Event()
    reader = {}

    class Blocking(PyAVDecoder):
        """PyAV, except that the reading thread's first decode waits until the test lets it go on."""

        def open(self, track, threads):
            session = super().open(track, threads)
            decode = session.decode

            def blocking(*args):
                if threading.get_ident() == reader.get("ident") and not entered.is_set():
                    entered.set()
                    release.wait(10)
                return decode(*args)

            session.decode = blocking
            return session

    cache = GopCache(8, decoder=Blocking())
    for u, t, s, f in others[:REUSE_WINDOW]:  # random reads: none asked again, so the cache lets go from now on
        cache.frame(u, t, s, f)
    assert cache._streams == {} and cache.streams_let_go > 0
    started = cache.streams_started
    got = {}

    def read_window():
        reader["ident"] = threading.get_ident()
        got["frames"] = cache.frames(uri, track, window)

    thread = threading.Thread(target=read_window)
    thread.start()
    assert entered.wait(10)
    u, t, s, f = others[REUSE_WINDOW]
    cache.frame(u, t, s, f)  # answered while the window's request waits in its first decode: lets go of streams
    release.set()
    thread.join(10)
    assert cache.streams_started == started + 2  # the other read's stream and the window's one, not a second
    plain = GopCache(0)
    for frame, sample in zip(got["frames"], window.tolist()):
        assert np.array_equal(frame, plain.frames(uri, track, [sample])[0])
    assert cache._streams == {}  # let go of once its own request was answered


def test_pickles_without_open_files(imports):
    out = imports("so101_av1")
    info, _ = _recorded(lerobot_dataset("so101_av1"))
    ds = ImportedFrames(out, delta_timestamps=info["delta_timestamps"])
    before = ds[20]
    assert ds.bytes_read > 0 and ds.gop_cache._streams
    data = pickle.dumps(ds)
    assert b"CodecContext" not in data and len(data) < 20_000
    copy = pickle.loads(data)
    assert copy.bytes_read == 0 and not copy.gop_cache._streams
    assert_items_equal(copy[20], before)


def test_reader_works_without_torch():
    """Without torch the reader package, and frames.py itself, still import; building a dataset says what to
    install."""
    code = ("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
            "import transforms.reader as r\nfrom transforms.reader.frames import ImportedFrames\n"
            "assert r.ImportedFrames is ImportedFrames\n"
            "try:\n    ImportedFrames('unused')\nexcept ImportError as ex:\n    print(ex)\n")
    assert run_python(code) == ['ImportedFrames needs PyTorch: pip install -e ".[torch]" (or any torch>=2.2)']


def test_gop_cache_keeps_frames_within_its_byte_budget(imports):
    """Streams past `max_bytes` of decoded frames are dropped, oldest first: going back decodes again."""
    from transforms.reader.gop_cache import GopCache

    ds = ImportedFrames(imports("h264_multi_file"))
    prep = ds._episode(0)
    h = ds._handle(prep, "observation.images.top")
    samples = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
    firsts = closure_starts(h.track, samples)
    a, b = int(samples[firsts == firsts.min()][0]), int(samples[firsts > firsts.min()][0])  # two GOPs
    frame_bytes = 48 * 64 * 3
    for budget, starts in ((1 << 20, 2), (frame_bytes, 3)):
        cache = GopCache(8, max_bytes=budget)
        first = cache.frames(h.uri, h.track, [a, b, a])
        assert cache.streams_started == starts, budget
        assert np.array_equal(first[0], first[2]) and first[0].shape == (3, 48, 64)
        assert len(cache._streams) == (2 if budget > frame_bytes else 1)


def test_a_uint8_item_owns_its_frame_and_the_cache_keeps_the_decoded_picture(imports):
    """A random uint8 item takes the converted frame itself (no copy of a cached RGB frame): writing into the
    item leaves the next read of the same frame unchanged, and the cache still holds the decoder's pictures (not
    an RGB copy beside the item's)."""
    import torch

    ds = ImportedFrames(imports("h264_multi_file"), camera_dtype="uint8")
    cam = "observation.images.top"
    first = ds[5][cam]
    want = first.clone()
    first.zero_()
    again = ds[5][cam]
    assert again.dtype == torch.uint8 and again.shape == (3, 48, 64)
    assert torch.equal(again, want) and int(want.sum()) > 0
    assert again.data_ptr() != first.data_ptr()
    stream = next(iter(ds.gop_cache._streams.values()))
    assert not any(isinstance(f, np.ndarray) for f in stream.frames.values())
    assert stream.nbytes == sum(ds.gop_cache.decoder.picture_bytes(f) for f in stream.frames.values())
    float_item = ImportedFrames(imports("h264_multi_file"))[5][cam]
    assert torch.equal((float_item * 255).round().to(torch.uint8), want)


def test_inline_index_layout_gives_the_same_items(imports, tmp_path):
    """The `--inline-index` output (each episode carries its MediaIndex) serves the same items."""
    out = tmp_path / "inline"
    assert run_import(lerobot_dataset("so101_av1"), out, "--inline-index") == 0
    inline, default = ImportedFrames(str(out)), ImportedFrames(imports("so101_av1"))
    assert len(inline) == len(default) == 46
    for i in range(len(inline)):
        assert_items_equal(inline[i], default[i])


def _pyav_frame(path: str, t: float, tolerance: float = 1e-4) -> np.ndarray:
    """The frame LeRobot's pyav backend returns for file time `t`: seek to the key frame at or before it,
    decode forward, take the nearest frame (within the tolerance) as RGB24."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        container.seek(int(t / stream.time_base), stream=stream, backward=True, any_frame=False)
        best = None
        for frame in container.decode(stream):
            dist = abs(float(frame.pts * stream.time_base) - t)
            if best is None or dist < best[0]:
                best = (dist, frame.to_ndarray(format="rgb24"))
            if frame.pts * stream.time_base >= t:
                break
    assert best is not None and best[0] < tolerance, (path, t)
    return best[1]


def test_third_party_g1_frames_equal_pyav(imports):
    """The Unitree G1 dataset (AV1 640x480, one MP4 per episode, published by its authors): camera frames at
    each episode's edges and middle equal what LeRobot's pyav backend decodes from the dataset's own file,
    found through the dataset's own episodes metadata (not through the import)."""
    import pyarrow.parquet as pq

    root = third_party_path("unitree_g1_av1")
    info = json.loads((root / "meta" / "info.json").read_text())
    meta = pq.read_table(sorted((root / "meta" / "episodes").rglob("*.parquet"))[0]).to_pylist()
    camera = "observation.images.cam_high"
    ds = ImportedFrames(imports("unitree_g1_av1", root))
    assert len(ds) == info["total_frames"] and ds.cameras == [camera]
    checked = 0
    # its episodes are 1, 2, 4, 5 and its global indices start at 479: items are positions, values are its own
    assert [ep["episode_index"] for ep in meta] == ds.episode_indices.tolist() == [1, 2, 4, 5]
    for ep, (start, end) in zip(meta, ds.episode_bounds):
        assert end - start == ep["dataset_to_index"] - ep["dataset_from_index"] == ep["length"]
        path = root / info["video_path"].format(video_key=camera, chunk_index=ep[f"videos/{camera}/chunk_index"],
                                                file_index=ep[f"videos/{camera}/file_index"])
        for i in sorted({start, start + 1, (start + end) // 2, end - 2, end - 1}):
            item = ds[i]
            assert int(item["episode_index"]) == ep["episode_index"]
            assert int(item["index"]) == ep["dataset_from_index"] + i - start
            want = _pyav_frame(str(path), ep[f"videos/{camera}/from_timestamp"] + float(item["timestamp"]))
            got = item[camera]
            assert got.dtype == torch.float32 and got.shape == (3, 480, 640)
            assert torch.equal(got, torch.from_numpy(want).permute(2, 0, 1).to(torch.float32) / 255), i
            checked += 1
    assert checked == 20


def test_truncated_video_file_is_a_clear_error(tmp_path):
    """An MP4 cut short after the import: the item names itself, its episode and frame, the camera, the file
    and what went wrong; the frames before the cut still read."""
    from tests.helpers import copy_dataset

    root = copy_dataset(lerobot_dataset("so101_av1"), tmp_path / "so101_av1")
    out = tmp_path / "out"
    assert run_import(root, out) == 0
    mp4 = root / "videos" / "observation.images.wrist" / "chunk-000" / "file-000.mp4"
    data = mp4.read_bytes()
    ds = ImportedFrames(str(out))
    last = len(ds) - 1
    prep = ds._episode(ds.num_episodes - 1)
    h = ds._handle(prep, "observation.images.wrist")
    needed = int(h.track.offset[h.track.order[h.locate([float(prep.timestamps[-1])])][0]])
    mp4.write_bytes(data[:needed])  # the last frame's bytes are gone
    with pytest.raises(FramesError, match=rf"item {last} \(episode 3, frame 9\) .*camera observation\.images\.wrist: "
                                          r"cannot read video file .*file-000\.mp4: .*shorter than expected"):
        ds[last]
    assert ds[0]["observation.images.wrist"].shape == (3, 32, 48)  # frames before the cut still read


def test_the_dataset_loads_the_decoder_modules_so_forked_workers_start_with_them(imports):
    """PyAV is imported when a dataset with cameras is made (its DataLoader workers then inherit it), not by each
    worker's first item."""
    code = ("import sys\nfrom transforms.reader.frames import ImportedFrames\n"
            f"ds = ImportedFrames({str(imports('so101_av1'))!r})\n"
            "print(sorted(m for m in ('av', 'av.video.reformatter') if m in sys.modules))\n")
    assert run_python(code) == ["['av', 'av.video.reformatter']"]
