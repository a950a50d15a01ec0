"""The reader decodes through one seam (`transforms.reader.decoder`): a decoder injected as
`ImportedFrames(decoder=...)` gives every camera frame of the items, matched to samples by presentation time,
through pickling (a DataLoader worker's copy) too; PyAV is the default, chosen in one place; a decoder's
failure is the item's error, naming the file and its samples."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

from tests.helpers import lerobot_dataset, run_import, run_python  # noqa: E402
from transforms.reader.decoder import DecodeFailed, PyAVDecoder, default_decoder  # noqa: E402
from transforms.reader.frames import FramesError, ImportedFrames  # noqa: E402

CAMERA = "observation.images.front"
CAMERAS = (CAMERA, "observation.images.wrist")


class _Session:
    """Holds each picture back until the next sample (as a reordering decoder does), so pictures come out one
    call late and the cache must match them to samples by presentation time, not by call."""

    def __init__(self, owner: "FakeDecoder") -> None:
        self.owner, self.held = owner, []

    def decode(self, data, pts=0, dts=0, keyframe=False):
        if self.owner.fail:
            raise DecodeFailed("the fake decoder refuses these bytes")
        out, self.held = self.held, ([] if data is None else [(pts, ("picture", pts, len(data)))])
        self.owner.samples += data is not None
        return out

    def flush(self):
        self.held = []


class FakeDecoder:
    """A picture's pixels are its presentation time mod 251, 3 x 4 x 6."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.sessions, self.samples = fail, 0, 0

    def open(self, track, threads):
        self.sessions += 1
        return _Session(self)

    def pixels(self, picture):
        return np.full((3, 4, 6), picture[1] % 251, np.uint8)

    def picture_bytes(self, picture):
        return 72

    def preload(self):
        pass

    def new_process(self):
        pass


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("seam") / "out"
    assert run_import(lerobot_dataset("so101_av1"), out) == 0
    return str(out)


def _expected_pts(ds: ImportedFrames, i: int, camera: str = CAMERA) -> int:
    """The presentation time of the sample the reader's seek finds for item `i` (the MediaIndex's tables; no
    decoder involved)."""
    e, pos = ds._locate(i)
    prep = ds._episode(e)
    h = ds._handle(prep, camera)
    sample = h.track.order[h.locate(prep.timestamps[pos:pos + 1].astype(np.float64))][0]
    return int(h.track.pts[sample])


def test_an_injected_decoder_gives_every_camera_frame(imported):
    fake = FakeDecoder()
    ds = ImportedFrames(imported, decoder=fake, camera_dtype="uint8")
    real = ImportedFrames(imported)
    assert ds.gop_cache.decoder is fake
    pts = {cam: [_expected_pts(ds, i, cam) for i in range(len(ds))] for cam in CAMERAS}
    assert len(set(pts[CAMERA])) == len(ds) == 46  # every item its own picture
    for i in [5, 0, 45, 17, 16, 30]:
        item, want = ds[i], real[i]
        for cam in CAMERAS:
            assert item[cam].dtype == torch.uint8 and tuple(item[cam].shape) == (3, 4, 6)
            assert torch.equal(item[cam], torch.full((3, 4, 6), pts[cam][i] % 251, dtype=torch.uint8)), (i, cam)
        assert {k for k in item} == {k for k in want}
        for k, v in want.items():  # everything but the cameras is the reader's own, the same as with PyAV
            if k not in CAMERAS:
                assert (v == item[k]) if isinstance(v, str) else torch.equal(v, item[k]), (i, k)
    assert fake.sessions >= 2 and fake.samples >= 12


def test_the_decoder_survives_pickling_and_windows(imported):
    """A DataLoader worker's copy decodes with its own copy of the injected decoder; windows go through it."""
    ds = ImportedFrames(imported, decoder=FakeDecoder(), delta_timestamps={CAMERA: [-1 / 30, 0.0]})
    copy = pickle.loads(pickle.dumps(ds))
    assert isinstance(copy.gop_cache.decoder, FakeDecoder) and copy.gop_cache.decoder is not ds.gop_cache.decoder
    item = copy[10]
    assert item[CAMERA].dtype == torch.float32 and tuple(item[CAMERA].shape) == (2, 3, 4, 6)
    for k, j in enumerate((9, 10)):
        assert torch.equal(item[CAMERA][k], torch.full((3, 4, 6), (_expected_pts(copy, j) % 251) / 255))


def test_pyav_is_the_default_decoder(imported):
    assert isinstance(default_decoder(), PyAVDecoder)
    assert isinstance(ImportedFrames(imported).gop_cache.decoder, PyAVDecoder)


def test_a_decoder_failure_is_the_items_error(imported):
    ds = ImportedFrames(imported, decoder=FakeDecoder(fail=True))
    with pytest.raises(FramesError) as got:
        ds[3]
    message = str(got.value)
    assert message.startswith(f"item 3 (episode 0, frame 3) of the import at file://{imported}, camera {CAMERA}: "
                              "decoding samples ")
    assert message.endswith("so101_av1/videos/observation.images.front/chunk-000/file-000.mp4 failed: the fake "
                            "decoder refuses these bytes")


def test_item_building_never_touches_pyav_with_another_decoder(imported):
    """Everything PyAV-specific is behind the seam: with another decoder, no item imports av."""
    code = ("import sys\n"
            "from tests.test_decoder_seam import FakeDecoder\n"
            "from transforms.reader.frames import ImportedFrames\n"
            f"ds = ImportedFrames({imported!r}, decoder=FakeDecoder())\n"
            "x = [ds[i]['observation.images.front'].shape for i in (0, 20, 40)]\n"
            "print(tuple(x[0]), 'av' in sys.modules)\n")
    assert run_python(code) == ["(3, 4, 6) False"]
