"""Reading an episodes file as the import does: a large one by range (its footer and the columns the import
uses, never LeRobot's per-episode statistics), a footer too large to parse refused from its length alone,
and the same rows either way."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.dataset_factory import DatasetSpec, write_dataset
from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import episodes_files
from transforms.lerobot.dataset import read_info

REL = "meta/episodes/chunk-000/file-000.parquet"


@pytest.fixture(scope="module")
def with_stats(tmp_path_factory):
    """300 episodes whose episodes file also holds 40 `stats/...` columns of 64 doubles a row (~6 MB)."""
    root = write_dataset(tmp_path_factory.mktemp("stats") / "ds", DatasetSpec(lengths=(2,) * 300))
    table = pq.read_table(root / REL)
    rng = np.random.default_rng(0)
    for i in range(40):
        values = pa.array(list(rng.standard_normal((table.num_rows, 64))), pa.list_(pa.float64()))
        table = table.append_column(f"stats/feature_{i}/q{i:02d}", values)
    pq.write_table(table, root / REL)
    return root


def test_a_large_episodes_file_is_read_by_range_with_the_same_rows(with_stats):
    info = read_info(str(with_stats))
    uri = storage.dataset_file(str(with_stats), REL)
    size = (with_stats / REL).stat().st_size
    counter = storage.ReadCounter()
    with storage.open_counted(uri, counter, what="episodes file", file=REL) as source:
        ranged = episodes_files.read_episode_rows(source, info, file=REL)
    whole = episodes_files.read_episode_rows((with_stats / REL).read_bytes(), info, file=REL)
    assert ranged == whole and len(ranged) == 300
    assert [r.episode_index for r in ranged] == list(range(300))
    # the footer, and the chunks of the columns the import uses: not the statistics (~98% of the file)
    assert size > 5_000_000 and counter.bytes_read < 0.05 * size


def test_open_episodes_file_reads_small_files_whole_and_large_ones_by_range(with_stats, monkeypatch):
    root = str(with_stats)
    assert (with_stats / REL).stat().st_size <= episodes_files.WHOLE_READ_BYTES
    assert episodes_files.open_episodes_file(root, REL) == (with_stats / REL).read_bytes()  # one request
    monkeypatch.setattr(episodes_files, "WHOLE_READ_BYTES", 1_000_000)
    source = episodes_files.open_episodes_file(root, REL)
    try:
        assert isinstance(source, storage.CountingFile)
    finally:
        source.close()


def test_a_footer_over_the_limit_is_refused_unparsed(with_stats, monkeypatch):
    footer = pq.ParquetFile(with_stats / REL).metadata.serialized_size
    monkeypatch.setattr(episodes_files, "MAX_EPISODES_FOOTER_BYTES", footer - 1)
    with pytest.raises(LeRobotImportError) as raised:
        episodes_files.read_episodes_file(str(with_stats), REL, read_info(str(with_stats)))
    assert raised.value.rule == "limit"
    assert raised.value.message == (
        f"the episodes file's footer (its Parquet metadata) takes {footer:,} bytes, more than the "
        f"{footer - 1:,} read from one episodes file (very many row groups or columns); rewrite it with larger "
        "row groups (e.g. pyarrow's default) or split it into several episodes files")


def test_task_strings_the_footer_bounds_are_read_decoded_at_once(with_stats, monkeypatch):
    """LeRobot's task strings: their footer bounds them far inside the limit, so the file is opened once and
    read decoded in one pass, with the same rows; a dictionary that repeats a long string in every row is not
    bounded by its footer, and is still refused by its decoded size."""
    from tests.hostile_datasets import dictionary_bomb_tasks
    info = read_info(str(with_stats))
    raw = (with_stats / REL).read_bytes()
    opened = []
    real = episodes_files._parquet
    monkeypatch.setattr(episodes_files, "_parquet", lambda *a, **k: opened.append(k) or real(*a, **k))
    rows = episodes_files.read_episode_rows(raw, info, file=REL)
    assert opened == [{}]  # no second reader with read_dictionary
    assert [(r.episode_index, r.tasks, r.length) for r in rows[:2]] == [(0, ("pick the cube",), 2),
                                                                        (1, ("place the cube",), 2)]
    monkeypatch.undo()

    def rows_of(root):
        return episodes_files.read_episode_rows((root / REL).read_bytes(), read_info(str(root)), file=REL)
    bomb = write_dataset(with_stats.parent / "bomb", DatasetSpec(lengths=(2,) * 300))
    dictionary_bomb_tasks(REL, 300, 1 << 18)(bomb, bomb)
    md = pq.ParquetFile(bomb / REL).metadata
    leaves = [j for j in range(md.num_columns) if md.schema.column(j).path == "tasks.list.element"]
    assert episodes_files._text_bound(md, leaves) > episodes_files.MAX_EPISODES_BYTES
    with pytest.raises(LeRobotImportError) as ex:
        rows_of(bomb)
    assert ex.value.rule == "limit" and "once decompressed and decoded" in ex.value.message
