"""Datasets written by LeRobot 0.6.1: depth cameras (as video and as 16-bit TIFF images) and language columns.

`ImportedFrames` over their imports returns what LeRobot 0.6.1's `LeRobotDataset.__getitem__` returned for every
frame (recorded in `expected_items/`, see tests/data/lerobot061/make_lerobot061_items.py), in its three modes:
float32 (plain), `return_uint8=True` (`camera_dtype="uint8"`) and `delta_timestamps` windows. Depth comes back as
LeRobot de-quantizes it, `(1, H, W)` float32 millimetres; the comparison allows 1 mm where torch's and numpy's
float32 `exp` differ in the last bit and that moves a rounding, and is exact for every other key.

Also: the depth clip's picture format read from its sample entry, the reader's frame access (de-quantized depth
and raw codes, against PyAV's own decode), `depth_unit="m"`, and the language columns of the language dataset.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

from tests.helpers import lerobot061_dataset, lerobot_dataset, run_import  # noqa: E402
from transforms.lerobot import depth as depth_lib  # noqa: E402
from transforms.reader import ImportReader  # noqa: E402
from transforms.reader.frames import FramesError, ImportedFrames  # noqa: E402

DEPTH = "observation.images.depth"
RUNS = ("plain", "uint8", "windows")


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """Each dataset imported once (lazily, by name)."""
    done = {}

    def get(name: str):
        if name not in done:
            root = lerobot_dataset(name) if name == "language" else lerobot061_dataset(name)
            out = tmp_path_factory.mktemp(name) / "out"
            assert run_import(root, out) == 0, (out / "errors.jsonl").read_text()
            done[name] = (root, str(out))
        return done[name]
    return get


def _frames(root, run: str, **extra) -> ImportedFrames:
    info = json.loads((root / "expected_items" / "items.json").read_text())
    kwargs = {"plain": {}, "uint8": {"camera_dtype": "uint8"},
              "windows": {"delta_timestamps": info["delta_timestamps"]}}[run]
    return info, kwargs | extra


def _compare(ds: ImportedFrames, root, info: dict, run: str) -> dict:
    """Every recorded item of `run` against ours; returns {depth pixels compared, pixels 1 mm off}."""
    counts = {"pixels": 0, "off": 0}
    with np.load(root / "expected_items" / f"{run}.npz") as z:
        recorded: dict[int, dict[str, np.ndarray]] = {}
        for name in z.files:
            index, key = name.split("/", 1)
            recorded.setdefault(int(index), {})[key] = z[name]
    assert len(ds) == len(info["items"]) == len(recorded)
    for i in range(len(ds)):
        got = ds[i]
        entry = info["items"][str(i)]
        values = entry.get("values", {}).get(run, {})
        assert got["task"] == entry["task"], i
        assert set(got) == set(recorded[i]) | set(values) | {"task"}, (i, sorted(set(got) ^ set(recorded[i])))
        for key, value in values.items():  # language columns: lists of row dicts
            assert got[key] == value, (i, key)
        for key, want in recorded[i].items():
            if run != "uint8" and key in info["rgb_uint8"]:
                want = want.astype(np.float32) / 255  # LeRobot's float32 tensor, bit for bit
            mine = got[key]
            assert isinstance(mine, torch.Tensor), (i, key)
            mine = mine.numpy()
            assert mine.dtype == want.dtype and mine.shape == want.shape, (i, key, mine.dtype, mine.shape, want.shape)
            if key == DEPTH:
                diff = np.abs(mine.astype(np.float64) - want)
                assert diff.max() <= 1, (i, key, diff.max())
                counts["pixels"] += diff.size
                counts["off"] += int(np.count_nonzero(diff))
            else:
                assert np.array_equal(mine, want), (i, key)
    return counts


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", ["depth_video", "depth_image"])
def test_depth_items_equal_lerobot061(imports, name, run):
    root, out = imports(name)
    info, kwargs = _frames(root, run)
    ds = ImportedFrames(out, **kwargs)
    assert ds.depth[DEPTH].stored == ("video" if name == "depth_video" else "image")
    counts = _compare(ds, root, info, run)
    assert counts["pixels"] >= len(ds) * 96 * 128
    assert counts["off"] <= counts["pixels"] // 1000  # a last-bit difference of exp, now and then
    item = ds[5]
    assert item[DEPTH].dtype == torch.float32 and tuple(item[DEPTH].shape[-3:]) == (1, 96, 128)
    # RGB from video is uint8 with return_uint8; an image feature stays float32 as LeRobot returns it
    front = item["observation.images.front"]
    assert front.dtype == (torch.uint8 if run == "uint8" and name == "depth_video" else torch.float32)


@pytest.mark.parametrize("name", ["depth_video", "depth_image"])
def test_depth_in_metres(imports, name):
    """depth_unit="m" (LeRobot's depth_output_unit): metres, not rounded; the millimetre item is the same depth."""
    root, out = imports(name)
    metres = ImportedFrames(out, depth_unit="m")
    mm = ImportedFrames(out)
    for i in (0, 30, len(mm) - 1):
        m, d = metres[i][DEPTH].numpy(), mm[i][DEPTH].numpy()
        assert m.dtype == np.float32 and m.shape == d.shape
        assert np.abs(m * 1000 - d).max() <= 0.5 + 1e-3  # mm is the metres value rounded to whole millimetres
        assert not np.array_equal(m * 1000, np.rint(m * 1000)) or name == "depth_image"
        if name == "depth_image":  # the TIFF holds whole millimetres: metres are them / 1000
            assert np.array_equal(m, d / np.float32(1000))
    with pytest.raises(FramesError, match=r"^depth_unit='cm' is not one of 'mm', 'm' \(LeRobot's depth_output_unit\)$"):
        ImportedFrames(out, depth_unit="cm")


def test_depth_clip_is_hevc_12_bit_one_plane():
    """The depth MP4's sample entry (hev1) says what LeRobot's depth encoder wrote: monochrome 12-bit pictures;
    the RGB camera's av01 entry says colour 8-bit."""
    import fsspec

    from transforms.mp4 import read_media_index
    from transforms.mp4.picture import picture_format

    root = lerobot061_dataset("depth_video")
    fs = fsspec.filesystem("file")
    found = {}
    for cam in (DEPTH, "observation.images.front"):
        result = read_media_index(fs, str(root / "videos" / cam / "chunk-000" / "file-000.mp4"))
        track = result.index.storage.field("tracks")[0][0].as_py()
        found[cam] = (result.codec, track["codec"], picture_format(track["sample_entry"], track["codec"]))
    assert found[DEPTH][:2] == ("hev1", "h265")
    assert found[DEPTH][2].monochrome and found[DEPTH][2].bit_depth == 12 and found[DEPTH][2].is_depth_encoding
    assert found["observation.images.front"][:2] == ("av01", "av1")
    fmt = found["observation.images.front"][2]
    assert not fmt.monochrome and fmt.bit_depth == 8 and not fmt.is_depth_encoding


def test_reader_gives_depth_and_raw_codes(imports):
    """`ImportReader`'s frame access: a depth camera's frames are de-quantized depth (H x W x 1 float32 mm, equal
    to LeRobot's item), and with raw=True the 12-bit codes PyAV decodes from the file (gray12le, not RGB)."""
    import av

    root, out = imports("depth_video")
    reader = ImportReader(out)
    ep = reader.episode(1)
    spec = ep.depth_specs[DEPTH]
    assert (spec.stored, spec.unit, spec.depth_min, spec.depth_max, spec.shift, spec.use_log, spec.pix_fmt) == \
        ("video", "mm", 0.01, 10.0, 3.5, True, "gray12le")
    assert set(ep.depth_specs) == {DEPTH}  # the RGB camera is no depth map
    handle = ep.video(DEPTH)
    times = ep["timestamp"][[0, 7]].astype(np.float64)
    depth = handle.frames_at(times)
    codes = handle.frames_at(times, raw=True)
    assert depth.dtype == np.float32 and depth.shape == (2, 96, 128, 1)
    assert codes.dtype == np.uint16 and codes.shape == (2, 96, 128, 1) and codes.max() <= depth_lib.QMAX
    first = len(ImportedFrames(out, episodes=[0]))  # item of episode 1's frame 0
    with np.load(root / "expected_items" / "plain.npz") as z:
        want = np.stack([z[f"{first}/{DEPTH}"], z[f"{first + 7}/{DEPTH}"]])[:, 0, :, :, None]
    assert np.abs(depth - want).max() <= 1
    with av.open(str(root / "videos" / DEPTH / "chunk-000" / "file-000.mp4")) as c:
        decoded = [f for f in c.decode(video=0)]
    assert decoded[0].format.name == "gray12le"
    start = first  # the MP4 holds the episodes one after the other
    assert np.array_equal(codes[0, :, :, 0], decoded[start].to_ndarray())
    assert np.array_equal(codes[1, :, :, 0], decoded[start + 7].to_ndarray())
    # the RGB camera of the same episode is still RGB
    assert ep.video("observation.images.front").frame_at(float(times[0])).shape == (96, 128, 3)


def test_dequantize_follows_lerobots_formula():
    """Codes 0, QMAX and the middle against LeRobot's formula written out (float64 here): the bounds exactly,
    linear quantization too."""
    spec = depth_lib.DepthSpec(stored="video", depth_min=0.01, depth_max=10.0, shift=3.5, use_log=True)
    codes = np.array([0, 2048, depth_lib.QMAX], np.uint16)
    lo, hi = math.log(0.01 + 3.5), math.log(10.0 + 3.5)
    want = [min(max(math.exp(lo + c / 4095 * (hi - lo)) - 3.5, 0.01), 10.0) for c in codes.tolist()]
    assert np.allclose(depth_lib.dequantize(codes, spec, "m"), want, rtol=1e-6)
    assert depth_lib.dequantize(codes, spec, "mm").tolist() == [10.0, round(want[1] * 1000), 10000.0]
    linear = depth_lib.DepthSpec(stored="video", depth_min=0.5, depth_max=4.595, use_log=False)
    assert depth_lib.dequantize(np.array([0, 4095], np.uint16), linear, "mm").tolist() == [500.0, 4595.0]


def test_language_columns_in_items_equal_lerobot061(imports):
    """LeRobot 0.6.1 returns `language_persistent` and `language_events` in every item (lists of row dicts;
    event rows without timestamp; tool calls parsed), in all three modes; `collate` keeps them as lists."""
    root, out = imports("language")
    for run in RUNS:
        info, kwargs = _frames(root, run)
        ds = ImportedFrames(out, **kwargs)
        _compare(ds, root, info, run)
    ds = ImportedFrames(out)
    some = [i for i in range(len(ds)) if ds[i]["language_events"]]
    assert some and any(row.get("tool_calls") for i in some for row in ds[i]["language_events"])
    batch = ImportedFrames.collate([ds[0], ds[some[0]]])
    assert batch["language_events"] == [ds[0]["language_events"], ds[some[0]]["language_events"]]
    assert batch["observation.state"].shape[0] == 2


def _edited(tmp_path, name: str, edit) -> Path:
    from tests.helpers import copy_dataset

    root = copy_dataset(lerobot061_dataset(name), tmp_path / name)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    edit(info["features"])
    info_path.write_text(json.dumps(info, indent=4))
    return root


@pytest.mark.parametrize("declared", ["depth_as_colour", "colour_as_depth"])
def test_depth_declared_against_the_mp4_is_a_clear_error(tmp_path, declared):
    """info.json declaring a depth map over a colour MP4 (or a colour camera over the depth MP4) fails the
    episodes file with rule depth_mismatch, naming the feature, the file and what it holds; nothing is written."""
    def edit(features):
        if declared == "depth_as_colour":
            features[DEPTH]["info"]["is_depth_map"] = False
        else:
            features["observation.images.front"]["info"]["is_depth_map"] = True

    root = _edited(tmp_path, "depth_video", edit)
    out = tmp_path / "out"
    assert run_import(root, out) != 0
    errors = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    mismatches = [e for e in errors if e["rule"] == "depth_mismatch"]
    assert mismatches and all(e["episodes_file"] == "meta/episodes/chunk-000/file-000.parquet" for e in errors)
    e = mismatches[0]
    if declared == "depth_as_colour":
        assert e["file"] == f"videos/{DEPTH}/chunk-000/file-000.mp4"
        assert f"feature `{DEPTH}` is declared a colour camera" in e["message"]
        assert "one-plane (monochrome) 12-bit pictures, a depth encoding" in e["message"]
        assert "`\"is_depth_map\": true`" in e["message"]
    else:
        assert e["file"] == "videos/observation.images.front/chunk-000/file-000.mp4"
        assert "feature `observation.images.front` is declared a depth map" in e["message"]
        assert "holds colour (YUV) 8-bit pictures, not depth codes" in e["message"]
    assert not list((out / "episodes").rglob("*.parquet")) if (out / "episodes").exists() else True


def test_episode_schema_carries_the_depth_facts(imports):
    """The depth facts are in the episode schema's metadata (not in its fields, which equal the reference's);
    an import without depth cameras has no such metadata."""
    import pyarrow.parquet as pq

    for name, stored in (("depth_video", "video"), ("depth_image", "image")):
        _, out = imports(name)
        part = next((Path(out) / "episodes").rglob("*.parquet"))
        schema = pq.read_schema(part)
        doc = json.loads(schema.metadata[depth_lib.DEPTH_METADATA_KEY])
        assert list(doc) == [DEPTH]
        want = {"stored": stored, "unit": "mm", "depth_min": 0.01, "depth_max": 10.0, "shift": 3.5, "use_log": True,
                "pix_fmt": "gray12le"} if stored == "video" else \
            {"stored": stored, "unit": "mm", "depth_min": None, "depth_max": None, "shift": None, "use_log": None,
             "pix_fmt": None}  # a TIFF holds the depth itself: no quantization
        assert doc[DEPTH] == want
        assert all(not f.metadata or depth_lib.DEPTH_METADATA_KEY not in f.metadata for f in schema)
    _, out = imports("language")
    part = next((Path(out) / "episodes").rglob("*.parquet"))
    assert depth_lib.DEPTH_METADATA_KEY not in (pq.read_schema(part).metadata or {})


@pytest.mark.parametrize("name", ["depth_video", "depth_image"])
def test_lerobot061_fields_import_without_a_complaint(imports, name):
    """video.extra_options, video.preset null, has_audio, is_depth_map false: no warning, no quality finding."""
    from tests.helpers import read_manifest

    _, out = imports(name)
    manifest = read_manifest(Path(out))
    assert manifest["warnings"] == [] and manifest["quality"]["findings"] == 0
    assert not (Path(out) / "errors.jsonl").exists() or (Path(out) / "errors.jsonl").read_text() == ""


def test_import_names_a_depth_camera_without_its_quantization(tmp_path):
    """The import's quality pass names it too (and still imports it, de-quantizing with LeRobot's defaults)."""
    from tests.helpers import read_manifest

    def edit(features):
        for key in ("video.depth_min", "video.depth_max", "video.shift", "video.use_log"):
            del features[DEPTH]["info"][key]

    out = tmp_path / "out"
    assert run_import(_edited(tmp_path, "depth_video", edit), out) == 0
    checks = read_manifest(out)["quality"]["checks"]
    assert list(checks) == ["depth_features"] and checks["depth_features"]["findings"] == 1
    assert "lacks `video.depth_min`, `video.depth_max`, `video.shift`, `video.use_log`" in \
        checks["depth_features"]["example"]
    item = ImportedFrames(str(out))[5]  # the corpus used LeRobot's defaults, so the depth is still right
    with np.load(lerobot061_dataset("depth_video") / "expected_items" / "plain.npz") as z:
        assert np.abs(item[DEPTH].numpy() - z[f"5/{DEPTH}"]).max() <= 1


def test_depth_declared_over_colour_images_is_a_clear_error(tmp_path):
    """A depth map declared over an image feature that holds colour PNGs: the item names the feature, what its
    image is, and the rule (never a channel of colour returned as depth)."""
    def edit(features):
        features["observation.images.front"]["info"] = {"is_depth_map": True, "depth_unit": "mm"}

    out = tmp_path / "out"
    assert run_import(_edited(tmp_path, "depth_image", edit), out) == 0
    ds = ImportedFrames(str(out))
    with pytest.raises(FramesError, match=r"^item 3 \(episode 0, frame 3\) of the import at .*, "
                                          r"observation\.images\.front: the feature is declared a depth map "
                                          r"\(info\.json `is_depth_map: true`\) but its image is RGB \(3 channels\), "
                                          r"not one channel of depth$"):
        ds[3]


def test_reader_gives_depth_images(imports):
    """`Episode.depth_images`: a depth camera stored as 16-bit TIFF, as LeRobot returns it (mm, or metres), or the
    stored values; a colour or unknown feature is refused, naming the depth cameras."""
    from transforms.reader import ReaderError

    root, out = imports("depth_image")
    ep = ImportReader(out).episode(0)
    depth = ep.depth_images(DEPTH)
    assert depth.dtype == np.float32 and depth.shape == (ep.length, 96, 128, 1)
    with np.load(root / "expected_items" / "plain.npz") as z:
        want = np.stack([z[f"{i}/{DEPTH}"] for i in range(ep.length)])[:, 0, :, :, None]
    assert np.array_equal(depth, want)
    raw = ep.depth_images(DEPTH, raw=True)
    assert raw.dtype == np.uint16 and np.array_equal(raw.astype(np.float32), want)
    assert np.array_equal(ep.depth_images(DEPTH, depth_unit="m"), want / np.float32(1000))
    with pytest.raises(ReaderError, match=r"^episode 0: 'observation\.images\.front' is no depth camera stored as "
                                          r"images \(depth cameras: observation\.images\.depth\)$"):
        ep.depth_images("observation.images.front")


def test_import_without_depth_in_its_schema_reads_depth_from_info(imports, tmp_path):
    """An output written before the episode schema carried the depth facts (its parts' schema without them):
    the depth camera's codes are de-quantized with the dataset's info.json, not returned as colour."""
    import shutil

    import pyarrow.parquet as pq

    root, out = imports("depth_video")
    old = tmp_path / "old"
    shutil.copytree(out, old)
    for part in (old / "episodes").rglob("*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.replace_schema_metadata(None), part)
    ds = ImportedFrames(str(old))
    assert ds.depth == {}
    with np.load(root / "expected_items" / "plain.npz") as z:
        assert np.abs(ds[5][DEPTH].numpy() - z[f"5/{DEPTH}"]).max() <= 1
    assert ds.depth[DEPTH].depth_max == 10.0
