"""Writing a part of wide episodes (a feature tens of thousands of values wide) holds its frames about once:
a data file's read keeps none of its bytes once its rows are typed, the part's `frames` column is a view of
each episode's frames, the Parquet writer works an episode at a time, and a big part's bytes go to an unnamed
local temporary file rather than memory."""

from __future__ import annotations

import errno
import gc
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.base import storage
from transforms.episode.frames import frames_list
from transforms.lerobot import data_files
from transforms.lerobot.dataset import read_info
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.output import paths, sinks, writes
from transforms.work.messages import ImportConfig
from transforms.work.part_writer import COUNTERS, PartWriter
from transforms.work.planner import EpisodesFilePlanner

REPO = Path(__file__).resolve().parents[1]
FILE0 = "meta/episodes/chunk-000/file-000.parquet"


def _wide(tmp_path, width: int, lengths=(40, 40, 40, 40), rows_per_group=None):
    spec = DatasetSpec(lengths=lengths, rows_per_group=rows_per_group,
                       features={"observation.big": {"dtype": "float32", "shape": [width], "names": None}})
    root = write_dataset(tmp_path / "ds", spec)
    (path,) = (root / "data").rglob("*.parquet")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    rel = str(path.relative_to(root))
    rows = [EpisodeRow(position=i, episode_index=i, tasks=(), length=n, data_file=rel, from_index=int(starts[i]),
                       to_index=int(starts[i] + n), videos=()) for i, n in enumerate(lengths)]
    return root, rel, rows


def test_a_data_file_read_keeps_none_of_its_bytes_once_its_rows_are_let_go(tmp_path):
    """pyarrow's Parquet reader keeps the bytes of the column chunks it read last for as long as it lives;
    the data-file reader, kept open between parts, must not keep them (nor a row group no episode needs)."""
    root, rel, rows = _wide(tmp_path, 20_000)  # 4 x 40 frames x 80 KB: 12.8 MB of frames
    info = read_info(str(root))
    pool = pa.default_memory_pool()
    tracemalloc.start()
    try:
        reader = data_files.DataFileReader(str(root), rel, info, storage.ReadCounter())
        before_py, before_arrow = tracemalloc.get_traced_memory()[0], pool.bytes_allocated()
        n_rows = 0
        for batch in reader.read([(r.position, r) for r in rows]):
            n_rows += batch.table.num_rows
            del batch
        gc.collect()
        held_py = tracemalloc.get_traced_memory()[0] - before_py
        held_arrow = pool.bytes_allocated() - before_arrow
    finally:
        tracemalloc.stop()
    assert n_rows == 160
    assert held_py < 1_000_000, f"the reader still holds {held_py} bytes of Python objects"
    assert held_arrow < 1_000_000, f"the reader still holds {held_arrow} bytes of Arrow memory"
    reader.close()


def test_the_row_group_an_unread_episode_begins_in_is_kept_and_not_read_again(tmp_path):
    """One row group for the whole file (LeRobot's first v3 writer): the part after the first begins in the
    row group already read, which is kept for it; a read that ends at its row group's end keeps nothing."""
    root, rel, rows = _wide(tmp_path, 8, lengths=(30, 40, 50), rows_per_group=120)
    info = read_info(str(root))
    counter = storage.ReadCounter()
    reader = data_files.DataFileReader(str(root), rel, info, counter)
    first = list(reader.read([(0, rows[0])]))
    requests = counter.requests
    rest = list(reader.read([(r.position, r) for r in rows[1:]]))
    assert counter.requests == requests  # the second read found its row group kept
    assert [b.table.num_rows for b in first + rest] == [30, 90]
    assert rest[0].table.column("index").to_pylist() == list(range(30, 120))
    assert reader._last is None  # the file's last row is read: nothing is kept
    reader.close()


def test_the_frames_column_is_a_view_of_each_episode_and_encodes_as_one_column():
    rng = np.random.default_rng(7)
    for n_episodes, frames, width in [(200, 30, 16), (3, 5000, 300), (5, 0, 4)]:
        episodes = [pa.StructArray.from_arrays(
            [pa.FixedSizeListArray.from_arrays(pa.array(rng.random(frames * width, dtype=np.float32)), width),
             pa.array(np.arange(frames))], names=["x", "i"]) for _ in range(n_episodes)]
        column = frames_list(episodes, episodes[0].type)
        assert column.num_chunks == n_episodes and [len(c.values) for c in column.chunks] == [frames] * n_episodes
        for chunk, episode in zip(column.chunks, episodes):  # the same values buffer: no copy
            assert chunk.values.field(0).values.buffers()[1].address == episode.field(0).values.buffers()[1].address
        one = pa.ListArray.from_arrays(pa.array(np.arange(n_episodes + 1) * frames, pa.int32()),
                                       pa.concat_arrays(episodes), type=column.type)
        assert writes.parquet_bytes(pa.table({"frames": column})) == writes.parquet_bytes(pa.table({"frames": one}))


def test_a_big_part_s_bytes_are_spooled_to_an_unnamed_file_and_staged_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(sinks, "SPOOL_BYTES", 64 * 1024)
    table = pa.table({"episode_index": pa.array(np.arange(50_000), pa.int64()),
                      "length": pa.array(np.random.default_rng(1).integers(0, 1 << 40, 50_000), pa.int64())})
    expected = writes.parquet_bytes(table)
    assert len(expected) > 256 * 1024
    sink = sinks.sink("parquet")
    encoded = sink.encode(table)
    assert encoded.spilled and encoded.size == len(expected)
    assert encoded.sha256 == hashlib.sha256(expected).hexdigest() and encoded.read() == expected
    out = "file://" + str(tmp_path / "out")
    tmp = sink.stage(out, FILE0, 0, 1, encoded)
    assert Path(tmp.removeprefix("file://")).read_bytes() == expected
    again = io.BytesIO()
    encoded.copy_to(again)  # a retried stage writes every byte again, from the first
    assert again.getvalue() == expected
    encoded.close()
    assert encoded.closed
    assert not (tmp_path / "out" / paths.output_part_path(FILE0, 0, 1)).exists()  # staged, not committed


def test_a_spooled_part_is_staged_whole_on_object_storage(monkeypatch):
    import fsspec
    monkeypatch.setattr(sinks, "SPOOL_BYTES", 64 * 1024)
    table = pa.table({"length": pa.array(np.random.default_rng(2).integers(0, 1 << 40, 300_000), pa.int64())})
    expected = writes.parquet_bytes(table)
    assert len(expected) > 2 * 1024 * 1024  # several of the stage's 1 MiB pieces
    sink = sinks.sink("parquet")
    encoded = sink.encode(table)
    try:
        tmp = sink.stage("memory://spooled/out", FILE0, 0, 1, encoded)
    finally:
        encoded.close()
    memory = fsspec.filesystem("memory")
    try:
        assert encoded.spilled and memory.cat(tmp.removeprefix("memory://")) == expected
    finally:
        memory.rm("/spooled", recursive=True)


def test_a_write_that_passes_the_bound_goes_to_the_file_without_passing_through_memory():
    """A wide episode's Parquet page arrives in one write of tens of MB: the bytes held so far move to the
    file first, and the page is written there alone."""
    encoded = sinks.Encoded(spool_bytes=1000)
    in_memory = encoded._file._file  # the BytesIO SpooledTemporaryFile starts with
    encoded.write(b"a" * 600)
    encoded.write(b"b" * 5000)
    encoded.write(b"c" * 10)
    assert encoded.spilled and in_memory.getvalue() == b"a" * 600
    assert encoded.read() == b"a" * 600 + b"b" * 5000 + b"c" * 10 and encoded.size == 5610
    assert encoded.sha256 == hashlib.sha256(encoded.read()).hexdigest()
    encoded.close()


class _Count:
    def inc(self, n: int = 1) -> None:
        pass


def test_a_full_temporary_folder_fails_the_part_with_disk_full_naming_the_folder(tmp_path, monkeypatch):
    """The worker's own disk filling up while a part's bytes wait there is `disk_full` naming that folder and
    TMPDIR, not an internal error; nothing is staged."""
    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks.Encoded, "write", full)
    root = "file://" + str(write_dataset(tmp_path / "ds", DatasetSpec(lengths=(5, 7))))
    out = "file://" + str(tmp_path / "out")
    config = ImportConfig(targets=((root, out),))
    planned = EpisodesFilePlanner(config).plan(root, FILE0, out)
    writer = PartWriter(config, {name: _Count() for name in COUNTERS})
    try:
        written = list(writer.write_unit((root, FILE0, 0), planned.to_parts)) + [writer.flush()]
    finally:
        writer.close()
    ((_, result),) = [w for w in written if w is not None]
    (failure,) = result.results[0].failures
    assert failure.rule == "disk_full" and failure.episodes_file == FILE0
    assert failure.message.startswith(f"[disk_full] dataset {root}, episodes file {FILE0}: writing a part's bytes "
                                      f"to a temporary file in {tempfile.gettempdir()} failed: No space left on "
                                      "device; ")
    assert "point TMPDIR at a disk with room" in failure.message
    assert not result.results[0].tmp_uri and not list((tmp_path / "out").rglob("*.parquet*"))


def test_a_small_part_s_bytes_stay_in_memory():
    encoded = sinks.sink("parquet").encode(pa.table({"episode_index": pa.array([0, 1], pa.int64())}))
    assert not encoded.spilled and pq.read_table(pa.BufferReader(encoded.read())).num_rows == 2


_PEAKS = textwrap.dedent("""
    import sys, tracemalloc
    import pyarrow as pa
    from tests.dataset_factory import DatasetSpec, write_dataset
    from transforms.output import sinks
    from transforms.work.messages import ImportConfig
    from transforms.work.part_writer import COUNTERS, PartWriter
    from transforms.work.planner import EpisodesFilePlanner

    class Counter:
        def inc(self, n=1):
            pass

    if __name__ == "__main__":
        work, width = sys.argv[1], int(sys.argv[2])
        sinks.SPOOL_BYTES = 1 << 20
        root = "file://" + str(write_dataset(__import__("pathlib").Path(work) / "ds", DatasetSpec(
            lengths=(40, 40, 40, 40), features={"observation.big": {"dtype": "float32", "shape": [width],
                                                                   "names": None}})))
        config = ImportConfig(targets=((root, "file://" + work + "/out"),))
        planned = EpisodesFilePlanner(config).plan(root, "%s", config.targets[0][1])
        writer = PartWriter(config, {c: Counter() for c in COUNTERS})
        tracemalloc.start()
        written = list(writer.write_unit((root, "%s", 0), planned.to_parts)) + [writer.flush()]
        writer.close()
        (_, result), = [w for w in written if w is not None]
        assert result.results[0].tmp_uri and not result.results[0].failures, result
        print(pa.default_memory_pool().max_memory(), tracemalloc.get_traced_memory()[1])
""" % (FILE0, FILE0))


def test_a_part_of_wide_episodes_peaks_at_a_few_times_its_frames(tmp_path):
    """A part of 4 episodes of a 25,000-wide float32 feature (16 MB of frames), written and committed by one
    part writer in a fresh process: Arrow's peak allocation and Python's peak traced memory, against the
    frames' bytes. Holding the frames twice, the data file's bytes beside them, or the Parquet writer's
    levels for the whole part at once each go past these bounds."""
    width = 25_000
    script = tmp_path / "peaks.py"
    script.write_text(_PEAKS)
    done = subprocess.run([sys.executable, str(script), str(tmp_path), str(width)], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    arrow_peak, python_peak = (int(x) for x in done.stdout.split())
    frames = 160 * width * 4
    assert arrow_peak < 4.5 * frames, f"Arrow peaked at {arrow_peak / frames:.2f}x the frames' bytes"
    assert python_peak < 1.5 * frames, f"Python objects peaked at {python_peak / frames:.2f}x the frames' bytes"
