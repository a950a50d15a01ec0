"""Read one data file once for all the episodes that need it: only their row groups (mapping §3).

The `index` column is read whole (it is small) to check it is consecutive and to turn each
episode's index range into row offsets; then only the row groups covering those rows are read,
with only the feature columns, each row group at most once.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Iterator, Sequence, TypeVar, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms import frames as frames_lib
from transforms import storage
from transforms.dataset_info import DatasetInfo
from transforms.episodes_metadata import EpisodeRow
from transforms.errors import LeRobotImportError

K = TypeVar("K")
FramesOrError = Union[pa.StructArray, LeRobotImportError]


@dataclasses.dataclass
class _RowGroups:
    """Row offsets of a file's row groups."""

    starts: np.ndarray  # first row of each group, plus the total at the end

    def covering(self, first_row: int, end_row: int) -> tuple[int, int]:
        g0 = bisect.bisect_right(self.starts, first_row) - 1
        g1 = bisect.bisect_left(self.starts, end_row)
        return g0, max(g1, g0 + 1)


def read_data_file(uri: str, relative: str, info: DatasetInfo, episodes: Sequence[tuple[K, EpisodeRow]],
                   counter: storage.ReadCounter) -> Iterator[tuple[K, EpisodeRow, FramesOrError]]:
    """Yield every episode's frames (or the error that stops it), reading the file once."""
    try:
        source = storage.open_counted(uri, counter, what="data file", file=relative)
    except LeRobotImportError as ex:
        for key, row in episodes:
            yield key, row, ex
        return
    try:
        yield from _read(source, relative, info, episodes)
    finally:
        source.close()


def _read(source, relative: str, info: DatasetInfo, episodes: Sequence[tuple[K, EpisodeRow]]
          ) -> Iterator[tuple[K, EpisodeRow, FramesOrError]]:
    try:
        pf = pq.ParquetFile(source)
        names = set(pf.schema_arrow.names)
        if "index" not in names:
            raise LeRobotImportError("missing_column", "the data file has no `index` column", file=relative)
        for feature in info.frame_features:
            if feature.name not in names:
                raise LeRobotImportError("missing_column", f"the data file has no `{feature.name}` column",
                                         file=relative)
        layout = frames_lib.index_layout(pf.read(columns=["index"]).column("index"), file=relative)
        md = pf.metadata
        groups = _RowGroups(np.concatenate([[0], np.cumsum([md.row_group(i).num_rows
                                                            for i in range(md.num_row_groups)])]).astype(np.int64))
    except LeRobotImportError as ex:
        for key, row in episodes:
            yield key, row, ex.with_context(episode_index=row.episode_index)
        return
    except (pa.ArrowException, OSError, ValueError) as ex:
        err = LeRobotImportError("data_file", f"the data file is not readable Parquet: {ex}", file=relative)
        for key, row in episodes:
            yield key, row, err
        return

    columns = [f.name for f in info.frame_features]
    cached: tuple[int, int, pa.Table] | None = None
    for key, row in sorted(episodes, key=lambda kr: kr[1].from_index):
        try:
            first, end = layout.rows_of(row.from_index, row.to_index, episode_index=row.episode_index, file=relative)
            if end == first:
                table = pa.table({c: pa.array([], pf.schema_arrow.field(c).type) for c in columns})
            else:
                g0, g1 = groups.covering(first, end)
                if cached is None or not (cached[0] <= g0 and g1 <= cached[1]):
                    try:
                        cached = (g0, g1, pf.read_row_groups(list(range(g0, g1)), columns=columns))
                    except (pa.ArrowException, OSError, ValueError) as ex:
                        raise LeRobotImportError("data_file", f"reading row groups {g0}..{g1 - 1} of the data file "
                                                 f"failed: {ex}", file=relative) from None
                base = int(groups.starts[cached[0]])
                table = cached[2].slice(first - base, end - first)
            yield key, row, frames_lib.convert_frames(table, info, episode_index=row.episode_index, file=relative)
        except LeRobotImportError as ex:
            yield key, row, ex.with_context(episode_index=row.episode_index, file=relative)
