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

from transforms.episode import frames as frames_lib
from transforms import storage
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.errors import LeRobotImportError

K = TypeVar("K")
#: Row groups read (and converted) together: at most this many uncompressed bytes, so a worker's
#: memory is bounded by this batch or the largest episode, not by the data file.
BATCH_BYTES = 64 * 1024 * 1024
FramesOrError = Union[pa.StructArray, LeRobotImportError]


@dataclasses.dataclass
class _RowGroups:
    """Row offsets of a file's row groups."""

    starts: np.ndarray  # first row of each group, plus the total at the end

    def covering(self, first_row: int, end_row: int) -> tuple[int, int]:
        g0 = bisect.bisect_right(self.starts, first_row) - 1
        g1 = bisect.bisect_left(self.starts, end_row)
        return g0, max(g1, g0 + 1)


class DataFileReader:
    """One open data file: its footer, row groups and checked `index` layout, read once and reused for
    every episode that needs rows of it (a worker keeps a few open)."""

    def __init__(self, root: str, relative: str, info: DatasetInfo, counter: storage.ReadCounter) -> None:
        self.relative = relative
        self._info = info
        self._source = None
        self._error: LeRobotImportError | None = None
        try:
            uri = storage.dataset_file(root, relative)
            self._source = storage.open_counted(uri, counter, what="data file", file=relative)
            self._open()
        except LeRobotImportError as ex:
            self._error = ex
        except (pa.ArrowException, OSError, ValueError) as ex:
            self._error = LeRobotImportError("data_file", f"the data file is not readable Parquet: {ex}",
                                             file=relative)

    def _open(self) -> None:
        pf = pq.ParquetFile(self._source)
        names = set(pf.schema_arrow.names)
        if "index" not in names:
            raise LeRobotImportError("missing_column", "the data file has no `index` column", file=self.relative)
        for feature in self._info.frame_features:
            if feature.name not in names:
                raise LeRobotImportError("missing_column", f"the data file has no `{feature.name}` column",
                                         file=self.relative)
        self._layout = frames_lib.index_layout(pf.read(columns=["index"]).column("index"), file=self.relative)
        md = pf.metadata
        self._groups = _RowGroups(np.concatenate([[0], np.cumsum([md.row_group(i).num_rows
                                                                  for i in range(md.num_row_groups)])]).astype(np.int64))
        self._pf = pf

    def read(self, episodes: Sequence[tuple[K, EpisodeRow]]) -> Iterator[list[tuple[K, EpisodeRow, FramesOrError]]]:
        """Yield, batch by batch, every episode's frames (or the error that stops it)."""
        if self._error is not None:
            ex = self._error
            yield [(key, row, LeRobotImportError(ex.rule, ex.message, file=ex.file or self.relative,
                                                 episode_index=row.episode_index)) for key, row in episodes]
            return
        columns = [f.name for f in self._info.frame_features]
        planned = []
        for key, row in sorted(episodes, key=lambda kr: kr[1].from_index):
            try:
                first, end = self._layout.rows_of(row.from_index, row.to_index, episode_index=row.episode_index,
                                                  file=self.relative)
            except LeRobotImportError as ex:
                yield [(key, row, ex)]
                continue
            planned.append((key, row, first, end))
        for batch in _batches(planned, self._groups, self._pf.metadata):
            yield list(_read_batch(self._pf, self.relative, self._info, columns, self._groups, batch))

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None


def _batches(planned: list, groups: _RowGroups, md) -> Iterator[list]:
    """Consecutive episodes whose row groups hold at most BATCH_BYTES (uncompressed) together."""
    batch, g_lo, g_hi, size = [], None, None, 0
    sizes = [md.row_group(i).total_byte_size for i in range(md.num_row_groups)]
    for item in planned:
        _, _, first, end = item
        g0, g1 = groups.covering(first, end) if end > first else (None, None)
        if batch and g0 is not None and g_hi is not None:
            new_hi = max(g_hi, g1)
            grown = size + sum(sizes[max(g_hi, g0):new_hi])
            if grown > BATCH_BYTES:
                yield batch
                batch, g_lo, g_hi, size = [], None, None, 0
        batch.append(item)
        if g0 is not None:
            if g_lo is None:
                g_lo, g_hi, size = g0, g1, sum(sizes[g0:g1])
            else:
                size += sum(sizes[max(g_hi, g0):max(g_hi, g1)])
                g_hi = max(g_hi, g1)
    if batch:
        yield batch


def _read_batch(pf, relative: str, info: DatasetInfo, columns: list[str], groups: _RowGroups, batch: list
                ) -> Iterator[tuple]:
    """Read the row groups of a batch once, convert its row span once, and slice it per episode.

    A conversion error in the span is pinned to its episode by converting episode by episode."""
    spans = [(first, end) for _, _, first, end in batch if end > first]
    if not spans:
        empty = pa.table({c: pa.array([], pf.schema_arrow.field(c).type) for c in columns})
        for key, row, _, _ in batch:
            yield key, row, _convert(empty, info, row, relative)
        return
    lo, hi = min(f for f, _ in spans), max(e for _, e in spans)
    g0, _ = groups.covering(lo, lo + 1)
    _, g1 = groups.covering(hi - 1, hi)
    try:
        table = pf.read_row_groups(list(range(g0, g1)), columns=columns)
    except (pa.ArrowException, OSError, ValueError) as ex:
        err = LeRobotImportError("data_file", f"reading row groups {g0}..{g1 - 1} of the data file failed: {ex}",
                                 file=relative)
        for key, row, _, _ in batch:
            yield key, row, LeRobotImportError(err.rule, err.message, file=relative, episode_index=row.episode_index)
        return
    base = int(groups.starts[g0])
    span = table.slice(lo - base, hi - lo)
    try:
        converted = frames_lib.convert_frames(span, info, episode_index=None, file=relative, validate=False)
    except LeRobotImportError:
        converted = None  # find which episode breaks the rule
    for key, row, first, end in batch:
        if converted is None:
            yield key, row, _convert(span.slice(first - lo, end - first), info, row, relative)
            continue
        frames = converted.slice(first - lo, end - first)
        try:
            frames_lib.validate_frames(frames, info, episode_index=row.episode_index, file=relative)
        except LeRobotImportError as ex:
            yield key, row, ex.with_context(episode_index=row.episode_index, file=relative)
            continue
        yield key, row, frames


def _convert(table: pa.Table, info: DatasetInfo, row: EpisodeRow, relative: str) -> FramesOrError:
    try:
        return frames_lib.convert_frames(table, info, episode_index=row.episode_index, file=relative)
    except LeRobotImportError as ex:
        return ex.with_context(episode_index=row.episode_index, file=relative)
