"""`ImportedFrames` over gs:// (the GCS emulator): a dataset uploaded to a bucket, imported bucket to bucket,
read by a shuffling `DataLoader` with two worker processes, gives the same items as the local import."""

from __future__ import annotations

import collections

import fsspec
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

import storage_emulators  # noqa: E402
from tests.helpers import lerobot_dataset, run_import  # noqa: E402
from transforms.reader.frames import ImportedFrames  # noqa: E402

NAME = "h264_multi_file"  # 10 episodes over 5 + 4 MP4s with B-frames, 104 frames: four batches of 32


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """(the gs:// import, the local import) of the same dataset."""
    reason = storage_emulators.missing("gcp_storage_emulator.server", "gcsfs")
    if reason:
        pytest.skip(reason)
    root = lerobot_dataset(NAME)
    local = tmp_path_factory.mktemp("frames-local") / "out"
    assert run_import(root, local) == 0
    with storage_emulators.gcs_emulator():
        fs = fsspec.filesystem("gs")
        fs.mkdir("frames-src")
        fs.mkdir("frames-out")
        files = [p for p in root.rglob("*")
                 if p.is_file() and p.relative_to(root).parts[0] in ("meta", "data", "videos")]
        for path in files:
            fs.put_file(str(path), f"frames-src/{NAME}/{path.relative_to(root)}")
        assert len(files) == 21  # info, stats, tasks, 5 episodes files, 4 data files, 9 MP4s
        assert run_import(f"gs://frames-src/{NAME}", f"gs://frames-out/{NAME}") == 0
        yield f"gs://frames-out/{NAME}", str(local)


def _key(item: dict) -> tuple:
    """An item as a hashable value: every key, tensors by dtype, shape and bytes."""
    return tuple(sorted((k, (str(v.dtype), tuple(v.shape), v.numpy().tobytes()) if isinstance(v, torch.Tensor)
                         else v) for k, v in item.items()))


def _unbatch(batch: dict) -> list[dict]:
    n = len(batch["index"])
    return [{k: v[j] for k, v in batch.items()} for j in range(n)]


def test_shuffled_dataloader_epoch_equals_local_items(imports):
    remote_root, local_root = imports
    windows = {"observation.images.top": [-2 / 15, 0.0], "action": [0.0, 1 / 15]}
    remote = ImportedFrames(remote_root, delta_timestamps=windows)
    local = ImportedFrames(local_root, delta_timestamps=windows)
    assert remote.cameras == local.cameras and len(remote) == len(local) == 104
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(remote, batch_size=32, num_workers=2, shuffle=True)
    batches = list(loader)
    assert [len(b["index"]) for b in batches] == [32, 32, 32, 8]
    order = torch.cat([b["index"] for b in batches]).tolist()
    assert order != sorted(order)  # shuffled
    got = collections.Counter(_key(item) for b in batches for item in _unbatch(b))
    want = collections.Counter(_key(item) for item in _unbatch(torch.utils.data.default_collate(
        [local[i] for i in range(len(local))])))
    assert got == want and sum(got.values()) == 104
    assert remote.bytes_read == 0  # the workers read; the main process fetched no video byte


def test_remote_reads_only_gop_bytes(imports):
    """From the bucket, a sequential pass fetches the same bytes as from disk: the GOPs' samples only."""
    remote_root, local_root = imports
    remote, local = ImportedFrames(remote_root), ImportedFrames(local_root)
    for i in range(len(remote)):
        a, b = remote[i], local[i]
        assert torch.equal(a["observation.images.side"], b["observation.images.side"])
    assert remote.bytes_read == local.bytes_read > 0
    assert remote.gop_cache.streams_started == local.gop_cache.streams_started
    videos = fsspec.filesystem("gs").find(f"frames-src/{NAME}/videos", detail=True)
    assert len(videos) == 9
    assert remote.bytes_read < sum(v["size"] for v in videos.values())  # no moov, no whole file
