"""Parts: by default an episodes file is written in ordered parts of whole episodes, each holding at most
64 MiB of its episodes' own data (sized from the data files' row groups); --one-part keeps the reference's
64 MiB rule (an episodes file may span at most 64 MiB of data files, else it fails with the span)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import read_errors, read_manifest, run_import
from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.episode.quirks import oversized_episode_warnings
from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT, EpisodeRow, RowGroupLayout, plan_parts

# 12 episodes of 800 frames with an 8 KiB incompressible vector per frame, 4 episodes per data file:
# three data files of about 26 MB, 78 MB in all, in ONE episodes file.
BIG = DatasetSpec(lengths=(800,) * 12, episodes_per_data_file=4, features={
    "observation.big": {"dtype": "float32", "shape": [2048], "names": None},
    "action": {"dtype": "float32", "shape": [4], "names": None},
})


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("big") / "ds", BIG)


def _episode_bytes(root):
    """Each episode's bytes on disk, where every row group holds one episode: its row group's column chunks."""
    out = []
    for path in sorted((root / "data").rglob("*.parquet")):
        md = pq.ParquetFile(path).metadata
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            out.append(sum(group.column(j).total_compressed_size for j in range(group.num_columns)))
    return out


def _data_sizes(root):
    return sorted(p.stat().st_size for p in (root / "data").rglob("*.parquet"))


def test_over_64_mib_fails_with_one_part_with_the_span(big_dataset, tmp_path):
    sizes = _data_sizes(big_dataset)
    assert sum(sizes) > DATA_SPAN_LIMIT and max(sizes) + sorted(sizes)[-2] <= DATA_SPAN_LIMIT
    out = tmp_path / "out"
    assert run_import(big_dataset, out, "--one-part") == 1
    errors = read_errors(out)
    span = [e for e in errors if e["rule"] == "data_span"]
    assert len(span) == 1
    assert f"span {sum(sizes)} bytes of data files" in span[0]["message"]
    assert "import without --one-part to write this episodes file in parts" in span[0]["message"]
    assert {e["episode_index"] for e in errors if e["episode_index"] is not None} == set(range(12))
    assert not (out / "episodes").exists() or not list((out / "episodes").rglob("*.parquet"))


def test_parts_by_default_equal_the_one_part_import(big_dataset, tmp_path):
    parts_out, whole_out = tmp_path / "parts", tmp_path / "whole"
    assert run_import(big_dataset, parts_out) == 0
    assert run_import(big_dataset, whole_out, "--one-part", "--data-span-limit", str(1 << 30)) == 0
    manifest = read_manifest(parts_out)
    entry = manifest["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]
    assert entry["parts"] == ["episodes/chunk-000/file-000.part-0000.parquet",
                              "episodes/chunk-000/file-000.part-0001.parquet"]
    tables = [pq.read_table(parts_out / p) for p in entry["parts"]]
    # Each part holds whole episodes, in order, at most 64 MiB of their own data (one row group each here):
    # nine episodes of ~7.2 MB fit, crossing data files (no row group holds two episodes).
    own = _episode_bytes(big_dataset)
    assert sum(own[:9]) <= DATA_SPAN_LIMIT < sum(own[:10])
    assert [t.column("episode_index").to_pylist() for t in tables] == [list(range(9)), [9, 10, 11]]
    assert entry["data_bytes"] == sum(own)
    whole = pq.read_table(whole_out / "episodes" / "chunk-000" / "file-000.parquet")
    assert pa.concat_tables(tables).equals(whole)
    assert not (parts_out / "episodes" / "chunk-000" / "file-000.parquet").exists()


def _row(position: int, data_file: str, from_index: int = None, length: int = 1) -> EpisodeRow:
    start = position if from_index is None else from_index
    return EpisodeRow(position=position, episode_index=position, tasks=("t",), length=length, data_file=data_file,
                      from_index=start, to_index=start + length, videos=())


def _layout(first_index: int, group_rows: list[int], group_bytes: list[int]) -> RowGroupLayout:
    return RowGroupLayout(first_index, np.concatenate([[0], np.cumsum(group_rows)]).astype(np.int64),
                          np.array(group_bytes, np.int64))


def test_parts_on_row_groups_shared_by_episodes():
    # Data file "a": ONE row group of 1,000 rows and 100,000 bytes (rows 0..999: 100 bytes a row), holding
    # this file's episodes 0..3 (rows 100..899, 200 rows each) and rows of other episodes files around
    # them; data file "b": row groups of 300 rows, 30,000 bytes each, from index 1000.
    layouts = {"a": _layout(0, [1000], [100_000]), "b": _layout(1000, [300, 300, 300], [30_000] * 3)}
    rows = [_row(i, "a", 100 + 200 * i, 200) for i in range(4)] + [_row(4, "b", 1000, 150), _row(5, "b", 1150, 250)]
    parts = plan_parts(rows, {"a": 10**9, "b": 10**9}.__getitem__, layouts.get, limit=45_000, file="f")
    # Pro rata by rows: 20,000 bytes per episode of "a"; 15,000 and 25,000 for those of "b" (the second
    # covers half of group 0 and a sixth of group 1: 15,000 + 5,000... by rows, 250 rows * 100 bytes).
    assert [p.positions for p in parts] == [(0, 1), (2, 3), (4, 5)]
    assert [p.data_bytes for p in parts] == [40_000, 40_000, 40_000]
    # Parts 0 and 1 share a's one row group with each other and with rows outside this file; so does part 2
    # with the rows after it in b's row group 1: each is in the read unit of its data file.
    assert [p.read_unit for p in parts] == ["a", "a", "b"]
    assert not any(p.oversized for p in parts)


def test_a_part_does_not_cross_into_a_data_file_whose_row_groups_are_shared():
    # Episodes 0..1 end data file "a" (one row group per episode); episodes 2..3 begin "b", whose one row
    # group they share with each other: the part stops at the file boundary although 40 bytes would fit
    # (the sizing sees only this episodes file, so a file whose row groups hold several episodes is
    # never crossed into). The second part holds b's row group whole: it shares it with no other part.
    layouts = {"a": _layout(0, [10, 10], [10, 10]), "b": _layout(20, [20], [20])}
    rows = [_row(0, "a", 0, 10), _row(1, "a", 10, 10), _row(2, "b", 20, 10), _row(3, "b", 30, 10)]
    parts = plan_parts(rows, {"a": 20, "b": 20}.__getitem__, layouts.get, limit=100, file="f")
    assert [(p.positions, p.data_bytes, p.read_unit) for p in parts] == [((0, 1), 20, ""), ((2, 3), 20, "")]


def test_parts_on_one_row_group_per_episode_files():
    # LeRobot's recording writer: one row group per episode. Sizes are each episode's own row group, parts
    # cross data files freely, and no part shares a row group (no read unit).
    layouts = {"a": _layout(0, [5, 7, 6], [40, 30, 25]), "b": _layout(18, [4, 4], [50, 10])}
    rows = [_row(0, "a", 0, 5), _row(1, "a", 5, 7), _row(2, "a", 12, 6), _row(3, "b", 18, 4), _row(4, "b", 22, 4)]
    parts = plan_parts(rows, {"a": 95, "b": 60}.__getitem__, layouts.get, limit=100, file="f")
    assert [p.positions for p in parts] == [(0, 1, 2), (3, 4)]
    assert [p.data_bytes for p in parts] == [95, 60]
    assert [p.data_files for p in parts] == [("a",), ("b",)]
    assert [p.read_unit for p in parts] == ["", ""]
    crossing = plan_parts(rows, {"a": 95, "b": 60}.__getitem__, layouts.get, limit=150, file="f")
    assert [(p.positions, p.data_files, p.data_bytes) for p in crossing] == [((0, 1, 2, 3), ("a", "b"), 145),
                                                                            ((4,), ("b",), 10)]


def test_an_episode_bigger_than_64_mib_is_a_part_of_its_own():
    big = 80 * 1024 * 1024
    layouts = {"a": _layout(0, [100, 100, 100], [1_000_000, big, 2_000_000])}
    rows = [_row(0, "a", 0, 100), _row(1, "a", 100, 100), _row(2, "a", 200, 100)]
    parts = plan_parts(rows, {"a": big + 3_000_000}.__getitem__, layouts.get, file="f")
    assert [(p.positions, p.data_bytes, p.oversized) for p in parts] == [
        ((0,), 1_000_000, False), ((1,), big, True), ((2,), 2_000_000, False)]
    warnings = oversized_episode_warnings("ds", "f", rows, parts)
    assert [(w.episode_index, w.what, w.by) for w in warnings] == [(1, "oversized_episode", f"{big} bytes")]
    assert warnings[0].message == (f"episode 1 takes about {big:,} bytes of its data file, more than the "
                                   f"{DATA_SPAN_LIMIT:,} bytes of a part: it is written alone, as part 1")


def test_one_part_keeps_the_reference_rule_on_whole_file_sizes():
    sizes = {"a": 40, "b": 30, "c": 120, "d": 10}
    rows = [_row(0, "a"), _row(1, "a"), _row(2, "b"), _row(3, "c"), _row(4, "d"), _row(5, "d")]
    with pytest.raises(Exception, match="span 200 bytes of data files \\(4 files\\), above the 100 bytes"):
        plan_parts(rows, sizes.__getitem__, lambda f: None, limit=100, one_part=True, file="f")
    (only,) = plan_parts(rows[:3], sizes.__getitem__, lambda f: None, limit=100, one_part=True, file="f")
    assert only.positions == (0, 1, 2) and only.data_bytes == 70  # unreadable footers: whole files
    assert plan_parts([], sizes.__getitem__, lambda f: None, limit=100, file="f")[0].positions == ()


def test_oversized_episode_is_reported(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(50, 50, 50), episodes_per_data_file=1))
    size = (root / "data" / "chunk-000" / "file-000.parquet").stat().st_size
    out = tmp_path / "out"
    assert run_import(root, out, "--data-span-limit", str(size // 2)) == 0
    manifest = read_manifest(out)
    entry = manifest["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]
    assert len(entry["parts"]) == 3
    assert len(entry["notes"]) == 3 and "over the part limit" in entry["notes"][0]
    warnings = [w for w in manifest["warnings"] if w["what"] == "oversized_episode"]
    assert [(w["episode_index"], w["file"]) for w in warnings] == [
        (i, f"data/chunk-000/file-{i:03d}.parquet") for i in range(3)]


def _metrics(stdout: str) -> dict[str, int]:
    line = next(line for line in stdout.splitlines() if line.startswith("metrics: "))
    return {k: int(v) for k, v in (kv.split("=") for kv in line[len("metrics: "):].split(", "))}


def _padded(table: pa.Table, file_number: int) -> pa.Table:
    """The data file with a column of ~12.5 KB of random bytes per frame that info.json does not declare:
    the file takes ~100 MB on disk, which its episodes' own data (the columns the import reads) does not."""
    raw = np.random.default_rng(file_number).bytes(table.num_rows * 12_500)
    offsets = pa.array(np.arange(0, len(raw) + 1, 12_500, dtype=np.int32))
    return table.append_column("padding", pa.BinaryArray.from_buffers(pa.binary(), table.num_rows,
                                                                      [None, offsets.buffers()[1], pa.py_buffer(raw)]))


def test_a_100_mb_data_file_imports_by_default_in_one_part_per_episodes_file(tmp_path, capsys):
    # LeRobot's first v3 writer rewrote a data file whole at each episode: ONE row group holding all its
    # episodes. Here 40 episodes in one ~100 MB data file, listed by two episodes files of 20.
    spec = DatasetSpec(lengths=(200,) * 40, episodes_per_meta_file=20, rows_per_group=1 << 20)
    root = write_dataset(tmp_path / "ds", spec, mutate_data=_padded)
    data = root / "data" / "chunk-000" / "file-000.parquet"
    md = pq.ParquetFile(data).metadata
    assert md.num_row_groups == 1 and data.stat().st_size > 100_000_000
    assert run_import(root, tmp_path / "strict", "--one-part") == 1  # the reference's rule: whole files
    assert {e["rule"] for e in read_errors(tmp_path / "strict")} == {"data_span", "file_failed"}
    capsys.readouterr()

    out = tmp_path / "out"
    assert run_import(root, out) == 0
    metrics = _metrics(capsys.readouterr().out)
    manifest = read_manifest(out)
    entries = manifest["episodes_files"]
    assert [len(e["parts"]) for e in entries.values()] == [1, 1]
    assert [e["episodes_written"] for e in entries.values()] == [20, 20]
    # Each part's own bytes: half of the row group's bytes in the columns the import reads.
    names = pq.ParquetFile(data).schema_arrow.names
    read = [j for j, name in enumerate(names) if name != "padding"]
    own = sum(md.row_group(0).column(j).total_compressed_size for j in read)
    assert [e["data_bytes"] for e in entries.values()] == [round(own / 2), round(own / 2)]
    # The row group both parts need is read once (one read unit), and only the columns the import reads.
    index = names.index("index")
    once = own + md.row_group(0).column(index).total_compressed_size  # `index` is also read whole on opening
    assert once <= metrics["data_bytes_read"] <= once + 70_000 and metrics["parts_written"] == 2
