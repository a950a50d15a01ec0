"""A data file's `index` layout: from the footer's statistics when they vouch for a consecutive index (no
whole-column read), else by reading the column whole; either way an index that is not consecutive in the
rows read fails with `index_not_consecutive`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.base import storage
from transforms.lerobot import data_files
from transforms.lerobot.dataset import read_info
from transforms.lerobot.episodes_files import EpisodeRow

LENGTHS = (30, 40, 50)  # frames 0..29, 30..69, 70..119, one row group per episode


@pytest.fixture()
def dataset(tmp_path):
    root = write_dataset(tmp_path / "ds", DatasetSpec(lengths=LENGTHS))
    (path,) = (root / "data").rglob("*.parquet")
    return root, path


def _rewrite(path, *, index=None, statistics=True, rows_per_group=None):
    table = pq.read_table(path)
    if index is not None:
        table = table.set_column(table.schema.get_field_index("index"), "index", pa.array(index, pa.int64()))
    groups = [(0, 30), (30, 40), (70, 50)] if rows_per_group is None else [
        (a, min(rows_per_group, table.num_rows - a)) for a in range(0, table.num_rows, rows_per_group)]
    with pq.ParquetWriter(path, table.schema, write_statistics=statistics) as w:
        for a, n in groups:
            w.write_table(table.slice(a, n))


def _rows(root, path):
    rel = str(path.relative_to(root))
    starts = np.concatenate([[0], np.cumsum(LENGTHS)])
    return rel, [EpisodeRow(position=i, episode_index=i, tasks=(), length=n, data_file=rel, from_index=int(starts[i]),
                            to_index=int(starts[i] + n), videos=()) for i, n in enumerate(LENGTHS)]


def _read(root, path, monkeypatch):
    """Each episode's `index` values (or its error), and how often the `index` column was read whole."""
    whole_reads = []
    real_read = pq.ParquetFile.read

    def read(self, columns=None, **kwargs):
        whole_reads.append(columns)
        return real_read(self, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read", read)
    info = read_info(str(root))
    rel, rows = _rows(root, path)
    reader = data_files.DataFileReader(str(root), rel, info, storage.ReadCounter())
    out = {}
    for batch in reader.read([(r.episode_index, r) for r in rows]):
        for s in batch.slices:
            out[s.key] = s.error if s.error else batch.table.column("index").to_numpy()[s.offset:s.offset + s.length]
    reader.close()
    return out, whole_reads


def test_statistics_give_the_layout_without_reading_the_index_whole(dataset, monkeypatch):
    root, path = dataset
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == 3
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    layout = data_files.index_layout_from_statistics(md, leaf)
    assert (layout.first_index, layout.num_rows) == (0, 120)
    out, whole_reads = _read(root, path, monkeypatch)
    assert whole_reads == []
    assert [list(out[i][[0, -1]]) for i in range(3)] == [[0, 29], [30, 69], [70, 119]]


def test_without_statistics_the_index_is_read_whole_with_the_same_slices(dataset, monkeypatch):
    root, path = dataset
    _rewrite(path, statistics=False)
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    assert data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf) is None
    out, whole_reads = _read(root, path, monkeypatch)
    assert whole_reads == [["index"]]
    assert [list(out[i][[0, -1]]) for i in range(3)] == [[0, 29], [30, 69], [70, 119]]


def test_a_gap_the_statistics_show_is_found_by_reading_the_index_whole(dataset, monkeypatch):
    root, path = dataset
    index = np.arange(120)
    index[45:] += 1  # inside the second row group: its max is one too high
    _rewrite(path, index=index)
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    assert data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf) is None
    out, whole_reads = _read(root, path, monkeypatch)
    assert whole_reads == [["index"]]
    for i in range(3):
        assert out[i].rule == "index_not_consecutive"
        assert "row 45 holds 46 after 44" in out[i].message


def test_a_permutation_the_statistics_hide_fails_the_rows_read_with_the_files_error(dataset, monkeypatch):
    root, path = dataset
    index = np.arange(120)
    index[[40, 41]] = index[[41, 40]]  # min and max of every row group unchanged
    _rewrite(path, index=index)
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    assert data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf) is not None
    out, whole_reads = _read(root, path, monkeypatch)
    assert whole_reads == [["index"]]  # read whole once, to say what is wrong, as without statistics
    for i in range(3):
        assert not isinstance(out[i], np.ndarray)
        assert out[i].rule == "index_not_consecutive"
        assert "row 40 holds 41 after 39" in out[i].message
        assert out[i].episode_index == i


def test_statistics_of_row_groups_that_do_not_follow_on_are_not_trusted(dataset):
    root, path = dataset
    _rewrite(path, index=np.r_[np.arange(0, 30), np.arange(31, 71), np.arange(71, 121)])
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    assert data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf) is None
    _rewrite(path, index=np.arange(5, 125), rows_per_group=7)  # not starting at 0, small row groups: trusted
    layout = data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf)
    assert (layout.first_index, layout.num_rows) == (5, 120)


def test_a_wrong_value_between_the_first_and_last_row_groups_is_found_by_the_batch_check(dataset, monkeypatch):
    root, path = dataset
    index = np.arange(120)
    index[35] = 36  # inside the middle row group; the first and last row groups are as a consecutive index's
    _rewrite(path, index=index)
    leaf = pq.ParquetFile(path).schema_arrow.names.index("index")
    assert data_files.index_layout_from_statistics(pq.ParquetFile(path).metadata, leaf) is not None
    out, whole_reads = _read(root, path, monkeypatch)
    assert whole_reads == [["index"]]
    for i in range(3):
        assert out[i].rule == "index_not_consecutive"
        assert "row 35 holds 36 after 34" in out[i].message
