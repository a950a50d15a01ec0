"""Read one data file once for all the episodes that need it: only their row groups, as raw Arrow.

The `index` column's layout (consecutive, and where it starts) turns each episode's index range into
row offsets: from the footer's statistics when they vouch for it (each batch read then checks its own
`index` values), else by reading the column whole; then only the row groups covering those rows are read,
with only the feature columns, each row group at most once. Rows come back as the file stores them:
typing them as info.json declares is the episode record's job (`transforms.episode.frames`).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Generic, Iterator, Optional, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.episodes_files import EpisodeRow, RowGroupLayout, check_unique_columns, leaf_columns
from transforms.base.errors import LeRobotImportError

K = TypeVar("K")
#: Row groups read together: at most this many uncompressed bytes, so a worker's memory is bounded
#: by this batch or the largest episode, not by the data file.
BATCH_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class IndexLayout:
    """Where each global frame `index` lies in a data file whose `index` column is consecutive."""

    first_index: int
    num_rows: int

    def rows_of(self, from_index: int, to_index: int, *, episode_index: int, file: str) -> tuple[int, int]:
        """The [first, end) rows of the frames from_index..to_index, or `frames_outside_file`."""
        last = self.first_index + self.num_rows
        if from_index < self.first_index or to_index > last:
            raise LeRobotImportError(
                "frames_outside_file", f"episode {episode_index} spans frames {from_index}..{to_index}, outside its "
                f"data file's {self.first_index}..{last}", episode_index=episode_index, file=file)
        return from_index - self.first_index, to_index - self.first_index

    def whole_file_rows(self, row: EpisodeRow, *, file: str) -> tuple[int, int]:
        """Every row of a v2.x episode's own data file, which must hold exactly the episode's `length` frames."""
        if self.num_rows != row.length:
            raise LeRobotImportError(
                "v2_layout", f"episode {row.episode_index}'s data file holds {self.num_rows} frames, but "
                f"meta/episodes.jsonl gives it length {row.length}; a v2.x data file holds its episode's frames "
                "and no others: fix the episode's `length` line or its data file", episode_index=row.episode_index,
                file=file)
        return 0, self.num_rows


def index_layout(index: pa.Array | pa.ChunkedArray, *, file: str) -> IndexLayout:
    """Check that a data file's `index` column is consecutive and say where it starts."""
    if isinstance(index, pa.ChunkedArray):
        index = index.combine_chunks()
    if index.null_count:
        raise LeRobotImportError("index_not_consecutive", "the data file's `index` column holds nulls", file=file)
    if not pa.types.is_integer(index.type):
        try:
            index = index.cast(pa.int64(), safe=True)
        except pa.ArrowException:
            raise LeRobotImportError("column_type", f"the data file's `index` column is {index.type}, not integers",
                                     file=file) from None
    values = index.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if len(values) == 0:
        return IndexLayout(0, 0)
    steps = np.diff(values)
    bad = np.flatnonzero(steps != 1)
    if len(bad):
        i = int(bad[0])
        raise LeRobotImportError("index_not_consecutive", f"the data file's `index` column is not consecutive: row "
                                 f"{i + 1} holds {values[i + 1]} after {values[i]}", file=file)
    return IndexLayout(int(values[0]), len(values))


def index_layout_from_statistics(md: pq.FileMetaData, leaf: int) -> Optional[IndexLayout]:
    """The layout of a consecutive `index` as the footer's statistics tell it: the first row group's
    minimum is where it starts, and the last row group's maximum is where a consecutive index of the
    file's rows ends (integers both, no null in either group). None when a statistic is missing or
    disagrees (the column must then be read to tell).

    The statistics cannot vouch for the rows in between (nor for any order inside a row group): the
    reader checks the `index` of every batch it reads against this layout, and a file whose index is
    not what it promises is then read whole to say what is wrong (`DataFileReader._check_batch_index`).
    Only two row groups' statistics are read: a LeRobot data file has thousands.

    Args:
        md: the data file's footer.
        leaf: the Parquet leaf column of `index`."""
    groups = range(md.num_row_groups)
    first_group = next((g for g in groups if md.row_group(g).num_rows), None)
    if first_group is None:
        return IndexLayout(0, 0) if md.num_rows == 0 else None
    last_group = next(g for g in reversed(groups) if md.row_group(g).num_rows)
    bounds = []
    for g in (first_group, last_group):
        stats = md.row_group(g).column(leaf).statistics
        if (stats is None or not stats.has_min_max or not stats.has_null_count or stats.null_count
                or type(stats.min) is not int or type(stats.max) is not int):
            return None
        bounds.append((stats.min, stats.max))
    first, last = bounds[0][0], bounds[1][1]
    if last != first + md.num_rows - 1 or bounds[0][1] < first or bounds[1][0] > last:
        return None
    return IndexLayout(first, md.num_rows)


def row_group_layout(pf: pq.ParquetFile, columns: Sequence[str], *, file: str) -> RowGroupLayout:
    """A data file's row-group layout from its footer: rows and on-disk bytes (of `columns` and `index`)
    per row group, and the first row's `index` (from the column's statistics; without them, from the
    first row group's `index` column alone).

    Args:
        pf: the open data file.
        columns: the feature columns the import reads.
        file: the data file, relative to the dataset root, for messages."""
    md = pf.metadata
    leaves = leaf_columns(pf.schema_arrow, ["index", *columns], md.num_columns)
    groups = [md.row_group(g) for g in range(md.num_row_groups)]
    rows = np.array([g.num_rows for g in groups], np.int64)
    group_bytes = np.array([sum(max(0, g.column(j).total_compressed_size) for j in leaves) for g in groups], np.int64)
    decoded = np.array([sum(_decoded_size(g.column(j)) for j in leaves) for g in groups], np.int64)
    first_index = 0
    first_group = next((g for g in range(len(groups)) if rows[g]), None)
    if first_group is not None:
        index_leaf = leaf_columns(pf.schema_arrow, ["index"], md.num_columns)
        stats = groups[first_group].column(index_leaf[0]).statistics if len(index_leaf) == 1 else None
        if stats is not None and stats.has_min_max and isinstance(stats.min, int):
            first_index = int(stats.min)
        else:
            index = pf.read_row_group(first_group, columns=["index"]).column("index")
            try:
                first_index = int(index[0].as_py())
            except (TypeError, ValueError):
                raise LeRobotImportError("column_type", f"the data file's `index` column is {index.type}, not "
                                         "integers", file=file) from None
    return RowGroupLayout(first_index, np.concatenate([[0], np.cumsum(rows)]).astype(np.int64), group_bytes, decoded)


#: Bytes per value of Parquet's fixed-width physical types.
_VALUE_BYTES = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def _decoded_size(chunk: pq.ColumnChunkMetaData) -> int:
    """A column chunk's bytes once decoded, from the footer: its values times their width (whatever the
    encoding: a dictionary or plain pages, snappy or zstd), or its uncompressed size for strings."""
    width = _VALUE_BYTES.get(chunk.physical_type)
    if width is None:
        return max(0, chunk.total_uncompressed_size)
    return max(0, chunk.num_values) * width


def read_row_group_layout(root: str, relative: str, info: DatasetInfo) -> Optional[RowGroupLayout]:
    """The row-group layout of a data file, reading only its footer (and, without statistics, the first
    row group's `index`); None when the file cannot be read as Parquet with an `index` column (the
    import's read of the file reports why).

    Args:
        root: the dataset root URI.
        relative: the data file, relative to the root.
        info: the dataset's info.json (which feature columns the import reads)."""
    try:
        source = storage.open_counted(storage.dataset_file(root, relative), storage.ReadCounter(),
                                      what="data file", file=relative)
    except LeRobotImportError:
        return None
    try:
        pf = pq.ParquetFile(source)
        if "index" not in pf.schema_arrow.names:
            return None
        return row_group_layout(pf, [f.name for f in info.frame_features], file=relative)
    except (LeRobotImportError, pa.ArrowException, OSError, ValueError, IndexError):
        return None
    finally:
        source.close()


@dataclasses.dataclass(frozen=True)
class EpisodeSlice(Generic[K]):
    """One episode's rows in its batch's table ([offset, offset + length)), or why they cannot be read."""

    key: K
    row: EpisodeRow
    offset: int = 0
    length: int = 0
    error: Optional[LeRobotImportError] = None


@dataclasses.dataclass(frozen=True)
class SliceBatch(Generic[K]):
    """Episodes of one data file read together: the raw rows spanning them (the feature columns, as
    stored; None when nothing could be read) and where each episode lies in those rows."""

    file: str
    table: Optional[pa.Table]
    slices: tuple[EpisodeSlice[K], ...]


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
    every episode that needs rows of it (a worker keeps a few open).

    Args:
        root: the dataset root URI.
        relative: the data file, relative to the root.
        info: the dataset's info.json (which feature columns to read).
        counter: what the reads cost, added up across files.
    """

    def __init__(self, root: str, relative: str, info: DatasetInfo, counter: storage.ReadCounter) -> None:
        self.relative = relative
        self._columns = [f.name for f in info.frame_features]
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
        check_unique_columns(pf.schema_arrow.names, ["index", *self._columns], what="data file",
                             file=self.relative, rule="data_file")
        names = set(pf.schema_arrow.names)
        for name in ["index", *self._columns]:
            if name not in names:
                raise LeRobotImportError("missing_column", f"the data file has no `{name}` column", file=self.relative)
        md = pf.metadata
        # A data file's `index` is read whole only when its footer cannot vouch for it: a LeRobot data file
        # has thousands of row groups, and reading the column whole costs one read per row group before
        # any frame is read. With statistics that match a consecutive index, each batch's own `index`
        # (a feature column, read anyway) is checked when it is read (`_check_batch_index`).
        layout = None
        if "index" in self._columns:
            leaves = leaf_columns(pf.schema_arrow, ["index"], md.num_columns)
            layout = index_layout_from_statistics(md, leaves[0]) if len(leaves) == 1 else None
        self._index_checked_per_batch = layout is not None
        self._pf = pf
        self._layout = layout if layout is not None else index_layout(self._read(columns=["index"]).column("index"),
                                                                      file=self.relative)
        rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        self._groups = _RowGroups(np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
        # The last row group read, kept: the next episodes read (of this part or the next part of its
        # read unit) begin in it when it holds rows of both, and it is then not read again.
        self._last: Optional[tuple[int, pa.Table]] = None

    def _read(self, row_groups: Optional[Sequence[int]] = None, *, columns: Sequence[str]) -> pa.Table:
        """Read row groups (None: all) through a reader made for this read alone, from the footer already
        read: pyarrow's reader keeps the bytes of the column chunks it read last for as long as it lives,
        and a kept reader would hold a wide batch's bytes beside the frames typed from them."""
        pf = pq.ParquetFile(self._source, metadata=self._pf.metadata)
        return pf.read(columns=columns) if row_groups is None else pf.read_row_groups(row_groups, columns=columns)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the data file holds (its footer's schema), () when it could not be opened."""
        return tuple(self._pf.schema_arrow.names) if self._error is None else ()

    def read(self, episodes: Sequence[tuple[K, EpisodeRow]]) -> Iterator[SliceBatch[K]]:
        """Yield, batch by batch, the raw rows of every episode (or the error that stops it).

        Args:
            episodes: (key, row) of each episode wanted from this file; the key comes back with it.
        """
        if self._error is not None:
            yield self._failed(episodes)
            return
        planned = []
        for key, row in sorted(episodes, key=lambda kr: kr[1].from_index):
            try:
                first, end = (self._layout.whole_file_rows(row, file=self.relative) if row.whole_file else
                              self._layout.rows_of(row.from_index, row.to_index, episode_index=row.episode_index,
                                                   file=self.relative))
            except LeRobotImportError as ex:
                yield SliceBatch(self.relative, None, (EpisodeSlice(key, row, error=ex),))
                continue
            planned.append((key, row, first, end))
        for batch in _batches(planned, self._groups, self._pf.metadata):
            # an earlier batch may have found the file's `index` wrong: the rest fail with it
            yield self._failed([(key, row) for key, row, _, _ in batch]) if self._error else self._read_batch(batch)

    def _failed(self, episodes: Sequence[tuple[K, EpisodeRow]],
                ex: Optional[LeRobotImportError] = None) -> SliceBatch:
        """`ex` (default: the file's error), for each of `episodes`."""
        ex = ex or self._error
        return SliceBatch(self.relative, None, tuple(
            EpisodeSlice(key, row, error=LeRobotImportError(ex.rule, ex.message, file=ex.file or self.relative,
                                                            episode_index=row.episode_index))
            for key, row in episodes))

    def _read_batch(self, batch: list) -> SliceBatch:
        """Read the row groups of a batch once and cut the rows its episodes span."""
        pf, relative, columns, groups = self._pf, self.relative, self._columns, self._groups
        spans = [(first, end) for _, _, first, end in batch if end > first]
        if not spans:
            empty = pa.table({c: pa.array([], pf.schema_arrow.field(c).type) for c in columns})
            return SliceBatch(relative, empty, tuple(EpisodeSlice(key, row) for key, row, _, _ in batch))
        lo, hi = min(f for f, _ in spans), max(e for _, e in spans)
        g0, _ = groups.covering(lo, lo + 1)
        _, g1 = groups.covering(hi - 1, hi)
        try:
            table = self._row_groups(g0, g1, hi)
        except (pa.ArrowException, OSError, ValueError) as ex:
            return self._failed([(key, row) for key, row, _, _ in batch], LeRobotImportError(
                "data_file", f"reading row groups {g0}..{g1 - 1} of the data file failed: {ex}", file=relative))
        span = table.slice(lo - int(groups.starts[g0]), hi - lo)
        if self._index_checked_per_batch and self._check_batch_index(span, lo) is not None:
            return self._failed([(key, row) for key, row, _, _ in batch])
        # An episode without frames may lie outside the span: it gets an empty slice at its edge.
        return SliceBatch(relative, span, tuple(
            EpisodeSlice(key, row, min(max(first - lo, 0), hi - lo), end - first) for key, row, first, end in batch))

    def _check_batch_index(self, span: pa.Table, first_row: int) -> Optional[LeRobotImportError]:
        """None when the rows read hold the `index` values the footer's statistics promised; else the file's
        error as reading its `index` whole finds it (the error a file without statistics gets), kept for
        every later read of the file."""
        column = span.column("index")
        values = column.to_numpy(zero_copy_only=False) if not column.null_count else None
        expected = self._layout.first_index + first_row
        if values is not None and np.array_equal(values, np.arange(expected, expected + len(values))):
            return None
        try:
            index_layout(self._read(columns=["index"]).column("index"), file=self.relative)
            self._error = LeRobotImportError(  # the statistics disagree with the column itself
                "index_not_consecutive", f"the data file's `index` column does not hold {expected}.."
                f"{expected + span.num_rows - 1} in rows {first_row}..{first_row + span.num_rows - 1}, as its "
                "row groups' statistics say", file=self.relative)
        except LeRobotImportError as ex:
            self._error = ex
        except (pa.ArrowException, OSError, ValueError) as ex:
            self._error = LeRobotImportError("data_file", f"the data file is not readable Parquet: {ex}",
                                             file=self.relative)
        return self._error

    def _row_groups(self, g0: int, g1: int, end_row: int) -> pa.Table:
        """Row groups g0..g1-1 (the feature columns), the first taken from the last read when it is that one.
        The last of them is kept for the next read when rows of it lie past `end_row` (the end of what this
        read wants): the next episodes begin there. One read to its end keeps nothing, so a wide batch is
        not held while its frames are typed and written."""
        starts = self._groups.starts
        if self._last is not None and self._last[0] == g0:
            kept = self._last[1]
            table = kept if g1 == g0 + 1 else pa.concat_tables(
                [kept, self._read(list(range(g0 + 1, g1)), columns=self._columns)])
        else:
            self._last = None  # freed before the next read, not after it
            table = self._read(list(range(g0, g1)), columns=self._columns)
        rest = end_row < int(starts[g1])
        self._last = (g1 - 1, table.slice(int(starts[g1 - 1] - starts[g0]))) if rest else None
        return table

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
            # Only a batch that would read more row groups is cut: episodes inside the row groups already
            # read (one row group holding the whole file, over the budget alone) stay in one batch.
            if new_hi > g_hi and grown > BATCH_BYTES:
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
