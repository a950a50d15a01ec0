"""What a DataLoader worker's first batch costs: a forked worker keeps what the dataset's process read when the
dataset was made (the parts' footers, media_index/'s row groups, the dataset's tasks) and reads none of it again;
its items are the parent's, value for value. Footers of many remote parts are read several at a time.
"""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch", reason="ImportedFrames needs PyTorch: pip install -e '.[torch]'")

from tests.helpers import lerobot_dataset, run_import, run_python  # noqa: E402
from transforms.base import storage  # noqa: E402
from transforms.reader import frames as frames_lib  # noqa: E402
from transforms.reader.frames import ImportedFrames  # noqa: E402
from transforms.reader.import_reader import ParquetFiles  # noqa: E402
from transforms.reader.seek import ReaderError  # noqa: E402


@pytest.fixture(scope="module")
def so101(tmp_path_factory):
    out = tmp_path_factory.mktemp("so101") / "out"
    assert run_import(lerobot_dataset("so101_av1"), out) == 0
    return str(out)


def _in_forked_child(fn):
    """fn() run in a forked child process (as a DataLoader worker is started); what it returned."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def run():
        try:
            send.send(("ok", fn()))
        except BaseException as ex:  # noqa: BLE001 - handed to the test
            send.send(("error", repr(ex)))

    child = ctx.Process(target=run)
    child.start()
    status, got = recv.recv()
    child.join(60)
    assert status == "ok", got
    return got


def test_a_forked_worker_reads_no_footer_no_manifest_and_no_tasks_file_again(so101, monkeypatch):
    """The dataset's process reads every part's footer, media_index/'s footers and the dataset's tasks once; a
    forked worker's items read only the row groups and video bytes they need (no footer parsed, no manifest or
    meta/ file read), and are the parent's items exactly."""
    reads = []
    real_read_bytes = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda uri, **kw: reads.append(uri) or real_read_bytes(uri, **kw))
    tasks_read = []
    real_read_tasks = frames_lib.read_tasks
    monkeypatch.setattr(frames_lib, "read_tasks", lambda root: tasks_read.append(root) or real_read_tasks(root))
    ds = ImportedFrames(so101)
    reader = ds._reader()
    assert reader.parquet.footers_read == len(reader.parts) >= 1
    assert reader.media_index.parquet.footers_read == len(reader.media_index.files) >= 1
    assert len(tasks_read) == 1 and ds._task_names
    positions = [0, len(ds) // 2, len(ds) - 1]

    def child():
        del reads[:], tasks_read[:]
        items = [ds[i] for i in positions]
        r = ds._reader()
        return {"footers": r.parquet.footers_read, "index_footers": r.media_index.parquet.footers_read,
                "row_groups": r.row_groups_read, "reads": list(reads), "tasks": len(tasks_read),
                "items": [{k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in item.items()}
                          for item in items]}

    got = _in_forked_child(child)
    assert got["footers"] == 0 and got["index_footers"] == 0
    assert got["reads"] == [] and got["tasks"] == 0
    assert got["row_groups"] >= 1  # the items' own rows are read in the child
    for i, item in zip(positions, got["items"]):
        mine = ds[i]
        assert sorted(item) == sorted(mine)
        for key, value in mine.items():
            if isinstance(value, torch.Tensor):
                assert item[key].dtype == value.numpy().dtype and np.array_equal(item[key], value.numpy()), key
            else:
                assert item[key] == value, key


def test_a_dataloader_worker_batch_equals_the_items(so101):
    """The shuffled two-worker loader's batches hold the dataset's items (the workers forked from the process that
    made the dataset)."""
    ds = ImportedFrames(so101, camera_dtype="uint8")
    torch.manual_seed(3)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=True)
    batch = next(iter(loader))
    for k, i in enumerate(batch["index"].tolist()):
        item = ds[i]
        for cam in ds.cameras:
            assert torch.equal(batch[cam][k], item[cam])
        assert torch.equal(batch["observation.state"][k], item["observation.state"])
        assert batch["task"][k] == item["task"]


def _memory_parts(n: int, prefix: str) -> list[str]:
    import fsspec
    fs = fsspec.filesystem("memory")
    uris = []
    for k in range(n):
        with fs.open(f"/{prefix}/part-{k}.parquet", "wb") as f:
            pq.write_table(pa.table({"episode_index": pa.array([k, k + 100], pa.int64())}), f)
        uris.append(f"memory:///{prefix}/part-{k}.parquet")
    return uris


def test_remote_footers_are_read_several_at_a_time_in_order():
    """Parts not on a local disk are read by several threads (each footer waits on storage), results in the parts'
    order, footers kept for the next open; a missing part is named."""
    uris = _memory_parts(6, "first-batch-footers")
    files = ParquetFiles()
    threads = set()

    def read(uri, pf):
        threads.add(threading.current_thread().name)
        return uri, pf.read_row_group(0).column("episode_index").to_pylist()

    got = files.read_each(uris, read, threads=4)
    assert got == [(u, [k, k + 100]) for k, u in enumerate(uris)]
    assert files.footers_read == 6 and any(t.startswith("footers") for t in threads)
    assert threading.current_thread().name not in threads
    files.read_each(uris, lambda uri, pf: None, threads=4)
    assert files.footers_read == 6  # kept: opened again, not parsed again
    with pytest.raises(ReaderError, match="part-missing.parquet does not exist"):
        files.read_each(uris[:2] + ["memory:///first-batch-footers/part-missing.parquet"], read, threads=4)


def test_local_parts_are_read_in_the_calling_thread(tmp_path):
    """A local file's reads need the GIL (no waiting on storage to overlap), so local parts are read one after the
    other in the calling thread."""
    uris = []
    for k in range(3):
        pq.write_table(pa.table({"x": [k]}), tmp_path / f"p{k}.parquet")
        uris.append(str(tmp_path / f"p{k}.parquet"))
    names = ParquetFiles().read_each(uris, lambda uri, pf: threading.current_thread().name, threads=4)
    assert names == [threading.current_thread().name] * 3


def test_items_load_no_module_a_worker_would_load_again(so101):
    """Building an item of an import without nulls imports neither numpy.ma (only null values need masked
    arrays) nor pyarrow.dataset (the tasks file is read as one Parquet file): a forked worker would import each on
    its first batch."""
    code = ("import sys\nfrom transforms.reader.frames import ImportedFrames\n"
            f"ds = ImportedFrames({so101!r})\nds[0]; ds[len(ds) - 1]\n"
            "print(sorted(m for m in ('numpy.ma', 'pyarrow.dataset') if m in sys.modules))\n")
    assert run_python(code) == ["[]"]
