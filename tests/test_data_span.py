"""The 64 MiB rule (an episodes file may span at most 64 MiB of data files): fails by default with the span;
--read-in-parts imports ordered parts."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import read_errors, read_manifest, run_import
from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT, EpisodeRow, plan_parts

# 12 episodes of 800 frames with an 8 KiB incompressible vector per frame, 4 episodes per data file:
# three data files of about 26 MB, 78 MB in all, in ONE episodes file.
BIG = DatasetSpec(lengths=(800,) * 12, episodes_per_data_file=4, features={
    "observation.big": {"dtype": "float32", "shape": [2048], "names": None},
    "action": {"dtype": "float32", "shape": [4], "names": None},
})


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("big") / "ds", BIG)


def _data_sizes(root):
    return sorted(p.stat().st_size for p in (root / "data").rglob("*.parquet"))


def test_over_64_mib_fails_by_default_with_the_span(big_dataset, tmp_path):
    sizes = _data_sizes(big_dataset)
    assert sum(sizes) > DATA_SPAN_LIMIT and max(sizes) + sorted(sizes)[-2] <= DATA_SPAN_LIMIT
    out = tmp_path / "out"
    assert run_import(big_dataset, out) == 1
    errors = read_errors(out)
    span = [e for e in errors if e["rule"] == "data_span"]
    assert len(span) == 1
    assert f"span {sum(sizes)} bytes of data files" in span[0]["message"]
    assert "--read-in-parts" in span[0]["message"]
    assert {e["episode_index"] for e in errors if e["episode_index"] is not None} == set(range(12))
    assert not (out / "episodes").exists() or not list((out / "episodes").rglob("*.parquet"))


def test_read_in_parts_equals_one_part_import(big_dataset, tmp_path):
    parts_out, whole_out = tmp_path / "parts", tmp_path / "whole"
    assert run_import(big_dataset, parts_out, "--read-in-parts") == 0
    assert run_import(big_dataset, whole_out, "--data-span-limit", str(1 << 30)) == 0
    manifest = read_manifest(parts_out)
    entry = manifest["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]
    assert entry["parts"] == ["episodes/chunk-000/file-000.part-0000.parquet",
                              "episodes/chunk-000/file-000.part-0001.parquet"]
    sizes = {p.name: p.stat().st_size for p in (big_dataset / "data" / "chunk-000").iterdir()}
    tables = [pq.read_table(parts_out / p) for p in entry["parts"]]
    # Each part holds whole episodes, in order, spanning at most 64 MiB of data files.
    assert [t.column("episode_index").to_pylist() for t in tables] == [list(range(8)), list(range(8, 12))]
    assert sizes["file-000.parquet"] + sizes["file-001.parquet"] <= DATA_SPAN_LIMIT
    whole = pq.read_table(whole_out / "episodes" / "chunk-000" / "file-000.parquet")
    assert pa.concat_tables(tables).equals(whole)
    assert not (parts_out / "episodes" / "chunk-000" / "file-000.parquet").exists()


def _row(position: int, data_file: str) -> EpisodeRow:
    return EpisodeRow(position=position, episode_index=position, tasks=("t",), length=1, data_file=data_file,
                      from_index=position, to_index=position + 1, videos=())


def test_plan_parts_groups_whole_episodes_and_isolates_an_oversized_one():
    sizes = {"a": 40, "b": 30, "c": 120, "d": 10}
    rows = [_row(0, "a"), _row(1, "a"), _row(2, "b"), _row(3, "c"), _row(4, "d"), _row(5, "d")]
    parts = plan_parts(rows, sizes.__getitem__, limit=100, in_parts=True, file="f")
    assert [p.positions for p in parts] == [(0, 1, 2), (3,), (4, 5)]
    assert [p.data_bytes for p in parts] == [70, 120, 10]
    assert [p.oversized for p in parts] == [False, True, False]
    with pytest.raises(Exception, match="span 200 bytes"):
        plan_parts(rows, sizes.__getitem__, limit=100, in_parts=False, file="f")
    assert plan_parts([], sizes.__getitem__, limit=100, in_parts=True, file="f")[0].positions == ()


def test_oversized_episode_is_reported(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=(50, 50, 50), episodes_per_data_file=1))
    size = (root / "data" / "chunk-000" / "file-000.parquet").stat().st_size
    out = tmp_path / "out"
    assert run_import(root, out, "--read-in-parts", "--data-span-limit", str(size - 1)) == 0
    entry = read_manifest(out)["episodes_files"]["meta/episodes/chunk-000/file-000.parquet"]
    assert len(entry["parts"]) == 3
    assert len(entry["notes"]) == 3 and "over the part limit" in entry["notes"][0]
