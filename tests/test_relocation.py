"""Relocatable imports: after the dataset moved (or was copied to another bucket), `dataset_root=NEW` reads
the clips there, the same frames as before, once each file has the size the import recorded; a file that
differs or is missing is a clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest

from tests.helpers import SAMPLE, run_import
from transforms.reader import ImportReader
from transforms.reader.seek import ReaderError

pytest.importorskip("av")

FRONT = "observation.images.front"
MP4 = f"videos/{FRONT}/chunk-000/file-000.mp4"


@pytest.fixture()
def moved(tmp_path):
    """An import of a copy of the sample; the frames it gave; then the dataset moved elsewhere."""
    ds = Path(shutil.copytree(SAMPLE, tmp_path / "ds"))
    out = tmp_path / "out"
    assert run_import(ds, out) == 0
    before = {(e, t): ImportReader(str(out)).episode(e).video(FRONT).frame_at(t) for e in (0, 1) for t in (0.0, 0.1)}
    new = tmp_path / "elsewhere" / "ds"
    new.parent.mkdir()
    ds.rename(new)
    return out, new, before


def test_after_the_move_the_reader_fails_and_dataset_root_reads_the_same_frames(moved):
    out, new, before = moved
    with pytest.raises(Exception):
        ImportReader(str(out)).episode(1).video(FRONT).frame_at(0.1)
    reader = ImportReader(str(out), dataset_root=str(new))
    for (e, t), frame in before.items():
        np.testing.assert_array_equal(reader.episode(e).video(FRONT).frame_at(t), frame)


def test_a_copy_in_another_bucket(moved):
    out, new, before = moved
    fs = fsspec.filesystem("memory")
    for path in new.rglob("*"):
        if path.is_file():
            fs.pipe(f"/bucket-b/ds/{path.relative_to(new)}", path.read_bytes())
    try:
        reader = ImportReader(str(out), dataset_root="memory://bucket-b/ds")
        np.testing.assert_array_equal(reader.episode(1).video(FRONT).frame_at(0.1), before[(1, 0.1)])
    finally:
        fs.rm("/bucket-b", recursive=True)


def test_a_file_of_another_size_is_refused_naming_both(moved):
    out, new, _ = moved
    size = (new / MP4).stat().st_size
    with open(new / MP4, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ReaderError) as raised:
        ImportReader(str(out), dataset_root=str(new)).episode(1).video(FRONT)
    assert str(raised.value) == (f"file://{new}/{MP4} has {size + 1} bytes where the import read {size} bytes at "
                                 f"file://{out.parent}/ds/{MP4}: the dataset at file://{new} is not the one imported; "
                                 f"import it again from file://{new}")


def test_a_missing_file_is_named(moved):
    out, new, _ = moved
    (new / MP4).unlink()
    with pytest.raises(ReaderError) as raised:
        ImportReader(str(out), dataset_root=str(new)).episode(0).video(FRONT)
    message = str(raised.value)
    assert message.startswith(f"{MP4} is not where the dataset moved (file://{new}/{MP4}): ")
    assert message.endswith("give the root that holds the imported dataset's files as dataset_root")


def test_imported_frames_read_the_moved_dataset(tmp_path):
    torch = pytest.importorskip("torch")
    from transforms.reader import ImportedFrames
    ds = Path(shutil.copytree(SAMPLE, tmp_path / "ds"))
    out = tmp_path / "out"
    assert run_import(ds, out) == 0
    items = [ImportedFrames(str(out))[i] for i in (0, 7, 20)]
    new = tmp_path / "moved"
    ds.rename(new)
    frames = ImportedFrames(str(out), dataset_root=str(new))
    for i, item in zip((0, 7, 20), items):
        got = frames[i]
        assert got["task"] == item["task"] and got["episode_index"] == item["episode_index"]
        for key in (FRONT, "observation.images.wrist", "observation.state"):
            assert torch.equal(got[key], item[key]), key
    import pickle  # as a DataLoader worker gets it
    assert torch.equal(pickle.loads(pickle.dumps(frames))[20][FRONT], items[2][FRONT])
