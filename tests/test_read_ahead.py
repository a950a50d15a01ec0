"""Reading ahead a batch's video bytes (`ImportedFrames(read_ahead=...)`): the items are the plain reader's, in
the sampler's order, and the read-ahead never has more requests in flight or bytes held than its bounds. The
dataset's files are served by an in-memory filesystem that answers each read late (a store's round trip)."""

from __future__ import annotations

import threading
import time

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

from tests.helpers import assert_items_equal, lerobot_dataset, run_import  # noqa: E402
from transforms.reader.frames import FramesError, ImportedFrames  # noqa: E402
from transforms.reader import read_ahead as read_ahead_lib  # noqa: E402
from transforms.reader.read_ahead import ReadAhead  # noqa: E402

NAME = "h264_multi_file"  # 10 episodes over 5 + 4 MP4s with B-frames, 104 frames
DELAY = 0.01


class SlowMemoryFileSystem(MemoryFileSystem):
    """memory:// under another protocol, each range read DELAY seconds late; counts reads at once."""

    protocol = ("slowmem",)
    root_marker = "/"
    lock = threading.Lock()
    now = 0
    most = 0
    reads = 0

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("slowmem://"):
            path = path[len("slowmem://"):]
        return MemoryFileSystem._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return "slowmem://" + name

    @classmethod
    def reset(cls) -> None:
        cls.now = cls.most = cls.reads = 0

    def cat_file(self, path, start=None, end=None, **kwargs):
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.reads += 1
            cls.most = max(cls.most, cls.now)
        try:
            time.sleep(DELAY)
            return super().cat_file(path, start=start, end=end, **kwargs)
        finally:
            with cls.lock:
                cls.now -= 1


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """(the import, the slowmem:// root of its dataset)."""
    fsspec.register_implementation("slowmem", SlowMemoryFileSystem, clobber=True)
    root = lerobot_dataset(NAME)
    out = tmp_path_factory.mktemp("read-ahead") / "out"
    assert run_import(root, out) == 0
    fs = SlowMemoryFileSystem()
    for path in root.rglob("*"):
        if path.is_file() and path.relative_to(root).parts[0] in ("meta", "videos"):
            fs.pipe_file(f"/read-ahead/{NAME}/{path.relative_to(root)}", path.read_bytes())
    return str(out), f"slowmem:///read-ahead/{NAME}"


def test_batches_read_ahead_equal_plain_items_in_sampler_order(imports):
    out, remote = imports
    windows = {"observation.images.top": [-2 / 15, 0.0], "action": [0.0, 1 / 15]}
    plain = ImportedFrames(out, delta_timestamps=windows)  # local files, no read-ahead
    ahead = ImportedFrames(out, dataset_root=remote, delta_timestamps=windows, read_ahead=4, cache_gops=2)
    assert ahead.read_ahead is not None and ahead.read_ahead.max_in_flight == 4
    order = torch.randperm(len(plain), generator=torch.Generator().manual_seed(3)).tolist()
    SlowMemoryFileSystem.reset()
    for k in range(0, len(order), 8):
        batch = order[k:k + 8]
        got = ahead.__getitems__(batch)
        assert [int(x["index"]) for x in got] == [int(plain[i]["index"]) for i in batch]
        for i, item in zip(batch, got):
            assert_items_equal(item, plain[i])
        assert ahead.read_ahead.held_bytes == 0  # nothing outlives its batch
    ra = ahead.read_ahead
    assert ra.hits > 0 and ra.requests >= ra.hits
    assert 1 < ra.peak_in_flight <= 4  # several at once, never more than the bound
    assert SlowMemoryFileSystem.most <= 4 + 1  # the bound, plus an item's own read of a range not read ahead
    assert 0 < ra.peak_bytes <= ra.max_bytes


def test_read_ahead_holds_at_most_its_bytes(imports):
    out, remote = imports
    ds = ImportedFrames(out, dataset_root=remote, read_ahead=8, read_ahead_bytes=6000)
    plain = ImportedFrames(out)
    batch = list(range(0, 104, 13))
    got = ds.__getitems__(batch)
    for i, item in zip(batch, got):
        assert_items_equal(item, plain[i])
    assert 0 < ds.read_ahead.peak_bytes <= 6000
    assert ds.read_ahead.requests < 2 * len(batch)  # the bound left the later items' ranges to be read as asked


def test_read_ahead_off_and_default(imports, monkeypatch):
    out, remote = imports
    assert ImportedFrames(out, dataset_root=remote, read_ahead=0).read_ahead is None
    local = ImportedFrames(out)  # default: on, for files not on a local disk only
    planned = []
    real = read_ahead_lib.batch_ranges
    monkeypatch.setattr(read_ahead_lib, "batch_ranges", lambda *a: planned.append(a[1]) or real(*a))
    local.__getitems__([0, 50])
    assert local.read_ahead.requests == 0
    assert planned == []  # a dataset on a local disk: no batch is planned (its items' lookups are not done twice)
    ImportedFrames(out, read_ahead=16).__getitems__([0, 50])  # asked for, on a local disk too
    assert planned == [[0, 50]]
    remote_ds = ImportedFrames(out, dataset_root=remote)
    remote_ds.__getitems__([0, 50])
    assert remote_ds.read_ahead.requests == 4 and remote_ds.read_ahead.max_in_flight == 16


def test_shuffled_two_worker_loader_reads_ahead_the_sampler_order(imports):
    out, remote = imports
    plain = ImportedFrames(out)
    ds = ImportedFrames(out, dataset_root=remote, read_ahead=4)
    def shuffled():  # the shuffle=True sampler, with its own seed
        return torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(5))

    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, sampler=shuffled())
    order = list(shuffled())
    assert order != sorted(order)
    batches = list(loader)
    assert torch.cat([b["index"] for b in batches]).tolist() == [int(plain[i]["index"]) for i in order]
    want = torch.utils.data.default_collate([plain[i] for i in order[:8]])
    for k in ("observation.images.top", "observation.images.side", "action"):
        assert torch.equal(batches[0][k], want[k])


def test_bad_read_ahead_arguments(imports):
    out, _ = imports
    with pytest.raises(FramesError, match=r"read_ahead=-1 is not a whole number >= 0"):
        ImportedFrames(out, read_ahead=-1)
    with pytest.raises(FramesError, match=r"read_ahead_bytes=1.5 is not a whole number of bytes"):
        ImportedFrames(out, read_ahead_bytes=1.5)
    with pytest.raises(ValueError, match="requests in flight must be a whole number >= 1"):
        ReadAhead(0)
