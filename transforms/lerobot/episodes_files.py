"""An episodes metadata file -> small per-episode work items, planned into parts.

A work item holds paths, ranges and timestamps, never data: it is what crosses the shuffle before
the workers read data files and MP4s. An episodes file is looked at before it is read: its footer says
how many rows it has and how many bytes its columns take once decompressed, and a file beyond what
real datasets hold (`MAX_EPISODES_ROWS`, `MAX_EPISODES_BYTES`) is refused without being decoded.
"""

from __future__ import annotations

import dataclasses
from typing import BinaryIO, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.lerobot.info import DatasetInfo
from transforms.base.errors import LeRobotImportError, quote, shorten
from transforms.lerobot.span import DATA_SPAN_LIMIT  # noqa: F401 - the rule's limit, exported here as before
#: Rows (episodes) per episodes file. LeRobot starts a new episodes file at about 100 MB, and a row with
#: its per-feature statistics takes kilobytes, so real files hold thousands to tens of thousands.
MAX_EPISODES_ROWS = 100_000
#: Decompressed bytes of the columns the import reads from one episodes file (ids, ranges, timestamps
#: and task strings: a few hundred bytes per episode in real files).
MAX_EPISODES_BYTES = 64 * 1024 * 1024
#: Bytes of an episodes file's footer (its Parquet metadata, parsed whole before any column is read): LeRobot's
#: files, flushed every 10 episodes, need about 1.6 KB per row group and column, tens of MB at most.
MAX_EPISODES_FOOTER_BYTES = 64 * 1024 * 1024
#: An episodes file up to this size is read whole, in one request; a larger one (LeRobot's per-episode
#: statistics take kilobytes a row) is read by range: its footer and the columns the import uses only.
WHOLE_READ_BYTES = 8 * 1024 * 1024
#: Video timestamps (seconds into an MP4) at or above this do not fit the int64 nanoseconds a clip
#: holds once offsets are added (2**62 ns, about 146 years).
MAX_TIMESTAMP_S = 2.0 ** 62 / 1e9


@dataclasses.dataclass(frozen=True)
class VideoSlice:
    """Where one camera of an episode lies: its MP4 (relative path) and the [from, to) seconds in it."""

    key: str
    file: str
    from_timestamp: float
    to_timestamp: float


@dataclasses.dataclass(frozen=True)
class EpisodeRow:
    """One row of an episodes file, validated, with its files resolved."""

    position: int  # row position in the episodes file
    episode_index: int
    tasks: tuple[str, ...]
    length: int
    data_file: str  # relative to the dataset root
    from_index: int
    to_index: int
    videos: tuple[VideoSlice, ...]
    #: v2.x: the data file holds this episode's frames and nothing else (its rows, whatever its `index`
    #: values; from_index..to_index is then where the episode lies in the dataset's frame order)
    whole_file: bool = False


@dataclasses.dataclass(frozen=True)
class PartPlan:
    """The rows of one output part: whole episodes, in row order.

    `data_bytes` is what the part's episodes take of their data files (their share of the row groups
    holding their rows). `read_unit` is the data file whose row groups the part shares with other parts
    (a row group holding rows of several parts), "" when it shares none: the parts of one read unit are
    written one after the other by one worker, so each row group is read once."""

    part: int
    positions: tuple[int, ...]
    data_files: tuple[str, ...]
    data_bytes: int
    limit: int = DATA_SPAN_LIMIT
    read_unit: str = ""
    #: what the same rows take once decoded (`RowGroupLayout.decoded_bytes`, pro rata by rows): unlike their
    #: bytes on disk, it does not depend on how the data files were encoded (one row group per episode or
    #: one per file), so `plan` estimates the output from it
    decoded_bytes: int = 0

    @property
    def oversized(self) -> bool:
        """One episode whose frames alone take more than the limit: a part of its own, reported."""
        return self.data_bytes > self.limit and len(self.positions) == 1


@dataclasses.dataclass(frozen=True)
class RowGroupLayout:
    """Where a data file's bytes lie, from its footer alone: the `index` of its first row, the first row of
    each row group (and the row count at the end) and each row group's bytes on disk (the columns the
    import reads), enough to size a part by its episodes' own bytes without reading a page."""

    first_index: int
    starts: np.ndarray  # int64, one per row group plus the total row count
    group_bytes: np.ndarray  # int64, one per row group
    #: per row group, the bytes its columns take decoded (values times their width; strings as stored
    #: uncompressed); None: taken as `group_bytes`
    decoded_bytes: Optional[np.ndarray] = None

    def rows(self, from_index: np.ndarray, to_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The [first, end) rows of frame ranges, clamped into the file (an estimate: the write step
        checks the ranges)."""
        total = int(self.starts[-1])
        first = np.clip(np.asarray(from_index, np.int64) - self.first_index, 0, total)
        return first, np.clip(np.asarray(to_index, np.int64) - self.first_index, first, total)

    def bytes_of(self, first: np.ndarray, end: np.ndarray, *, decoded: bool = False) -> np.ndarray:
        """Bytes of the rows [first, end) on disk (or `decoded`): whole row groups, and a row group's bytes
        pro rata by rows where a range holds only some of its rows."""
        per_group = self.decoded_bytes if decoded and self.decoded_bytes is not None else self.group_bytes
        cumulative = np.concatenate([[0], np.cumsum(per_group)]).astype(np.float64)
        return np.interp(end, self.starts, cumulative) - np.interp(first, self.starts, cumulative)

    def shares(self, first: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per range of rows: whether its first row group begins before it, and whether its last row group
        ends after it (the row group then holds rows of a neighbour too)."""
        starts = self.starts
        nonempty = end > first
        g0 = np.searchsorted(starts, first, side="right") - 1
        g1 = np.searchsorted(starts, end, side="left")
        before = nonempty & (starts[np.clip(g0, 0, len(starts) - 1)] < first)
        after = nonempty & (starts[np.clip(g1, 0, len(starts) - 1)] > end)
        return before, after


def _required_columns(info: DatasetInfo) -> list[str]:
    cols = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
            "dataset_from_index", "dataset_to_index"]
    for f in info.video_features:
        cols += [f"videos/{f.name}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    return cols


def open_episodes_file(root: str, rel: str) -> bytes | storage.CountingFile:
    """An episodes file to give `read_episode_rows`: its bytes when it is small, else the file open for
    range reads (close it after use).

    Args:
        root: the dataset root URI.
        rel: the episodes file, relative to the root."""
    uri = storage.dataset_file(root, rel)
    if storage.file_size(uri, what="episodes file", file=rel) <= WHOLE_READ_BYTES:
        return storage.read_bytes(uri, what="episodes file", file=rel)
    return storage.open_counted(uri, storage.ReadCounter(), what="episodes file", file=rel)


def read_episodes_file(root: str, rel: str, info: DatasetInfo) -> list[EpisodeRow]:
    """The validated rows of an episodes file, reading only its footer and the columns the import uses
    when it is large.

    Args:
        root: the dataset root URI.
        rel: the episodes file, relative to the root.
        info: the dataset's info.json model."""
    source = open_episodes_file(root, rel)
    try:
        return read_episode_rows(source, info, file=rel)
    finally:
        if not isinstance(source, bytes):
            source.close()


def read_episode_rows(raw: pa.Table | bytes | BinaryIO, info: DatasetInfo, *, file: str) -> list[EpisodeRow]:
    """Validate an episodes table (or Parquet file) and resolve each row's files.

    Reads only the columns the import uses (the stats/* columns stay on disk: from an open file, only
    the footer and those columns' chunks are read), and only once the footer shows they fit the limits.
    Row checks are vectorised; the first row that breaks a rule (in row order) is the one reported.

    Args:
        raw: the episodes file, open for random reads (`storage.open_counted`) or as bytes, or a table
            already read.
        info: the dataset's info.json model.
        file: the episodes file's path relative to the root, for messages.
    Returns:
        One EpisodeRow per row, in row order."""
    needed = _required_columns(info)
    table = raw if isinstance(raw, pa.Table) else _read_table(raw, needed, file)
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise LeRobotImportError("episodes_file", f"the episodes file has no `{missing[0]}` column", file=file)
    _check_unique(table.column_names, needed, file)

    ints = {c: _numeric_column(table, c, file, pa.int64()) for c in needed
            if c.endswith(("_index", "length")) or c in ("dataset_from_index", "dataset_to_index")}
    floats = {c: _numeric_column(table, c, file, pa.float64()) for c in needed if c.endswith("_timestamp")}
    tasks = _tasks_column(table, file)
    first_bad = _first_bad_row(ints, floats, info)
    paths = _PathCache(info)

    # Plain Python values, column by column (a numpy scalar per value costs more than the row itself).
    n = min(table.num_rows, first_bad)
    col = {c: v[:n].tolist() for c, v in (*ints.items(), *floats.items())}
    cameras = [(f.name, col[f"videos/{f.name}/chunk_index"], col[f"videos/{f.name}/file_index"],
                col[f"videos/{f.name}/from_timestamp"], col[f"videos/{f.name}/to_timestamp"])
               for f in info.video_features]
    episode, length = col["episode_index"], col["length"]
    data_chunk, data_number = col["data/chunk_index"], col["data/file_index"]
    first, end = col["dataset_from_index"], col["dataset_to_index"]
    rows = []
    for i in range(n):
        try:
            data_file = paths.data_file(data_chunk[i], data_number[i])
            videos = tuple([VideoSlice(name, paths.video_file(name, chunk[i], number[i]), start[i], stop[i])
                            for name, chunk, number, start, stop in cameras])
        except LeRobotImportError as ex:
            raise ex.with_context(episode_index=episode[i], file=file)
        rows.append(EpisodeRow(i, episode[i], tasks[i], length[i], data_file, first[i], end[i], videos))
    if first_bad < table.num_rows:
        raise _row_error(first_bad, ints, floats, info, file)
    check_order(rows, file=file)
    return rows


def _parquet(raw: bytes | BinaryIO, **options) -> pq.ParquetFile:
    """A Parquet reader over an episodes file's bytes or an open file (read from its start)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return pq.ParquetFile(pa.BufferReader(raw), **options)
    raw.seek(0)
    return pq.ParquetFile(raw, **options)


def _read_table(raw: bytes | BinaryIO, needed: list[str], file: str) -> pa.Table:
    """The needed columns of an episodes file, after its footer shows they fit the limits."""
    try:
        _check_footer_size(raw, file)
        pf = _parquet(raw)
        names = pf.schema_arrow.names
        missing = [c for c in needed if c not in names]
        if missing:
            raise LeRobotImportError("episodes_file", f"the episodes file has no `{missing[0]}` column", file=file)
        _check_unique(names, needed, file)
        check_footer(pf, needed, file=file)
        leaves = leaf_columns(pf.schema_arrow, needed, pf.metadata.num_columns)
        text_leaves = [j for j in leaves if pf.schema.column(j).physical_type == "BYTE_ARRAY"]
        bounded = _text_bound(pf.metadata, text_leaves) <= MAX_EPISODES_BYTES
        if not bounded:  # strings stay dictionary-encoded until their decoded size is known to fit (the
            # footer, tens of KB per row group of LeRobot's stats columns, is parsed once)
            pf = _parquet(raw, read_dictionary=[pf.schema.column(j).path for j in text_leaves], metadata=pf.metadata)
        table = _read_columns(pf, raw, needed)
        decoded = table.nbytes if bounded else sum(_decoded_bytes(chunk) for column in table.columns
                                                    for chunk in column.chunks)
        if decoded > MAX_EPISODES_BYTES:
            raise LeRobotImportError("limit", f"the columns the import reads from the episodes file take {decoded:,} "
                                     "bytes once decompressed and decoded (their strings repeat a dictionary's), "
                                     "more than the "
                                     f"{MAX_EPISODES_BYTES:,} bytes read from one episodes file; real episodes files "
                                     "need a few hundred bytes per episode", file=file)
        return table.cast(pa.schema([f.with_type(_dense_type(f.type)) for f in table.schema]))
    except LeRobotImportError:
        raise
    except (pa.ArrowException, OSError, ValueError) as ex:
        raise LeRobotImportError("episodes_file", f"the episodes file is not readable Parquet: {ex}",
                                 file=file) from None


def _text_bound(md: pq.FileMetaData, text_leaves: Sequence[int]) -> int:
    """At most how many bytes the string columns `text_leaves` take once decoded, from the footer alone: no
    value is longer than its column chunk's uncompressed pages, where its bytes are (plain, in the
    dictionary page, or as the prefixes and suffixes of a delta encoding), so a chunk decodes to at most
    its values times that size. LeRobot's task strings are far inside any limit by this bound; a chunk
    whose dictionary repeats a long string in every row is not, and is then read dictionary-encoded."""
    total = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        for j in text_leaves:
            chunk = group.column(j)
            total += max(0, chunk.num_values) * (max(0, chunk.total_uncompressed_size) + 8)
    return total


def _check_footer_size(raw: bytes | BinaryIO, file: str) -> None:
    """Refuse a footer over `MAX_EPISODES_FOOTER_BYTES` from its length field alone (the file's last 8
    bytes), before Arrow parses it: parsing takes memory and time in proportion to it."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        tail, total = bytes(raw[-8:]), len(raw)
    else:
        try:
            total = raw.seek(-8, 2) + 8
            tail = raw.read(8)
        except (OSError, ValueError):  # shorter than 8 bytes: Arrow says what is wrong with it
            return
    if len(tail) == 8 and tail[4:] == b"PAR1":
        size = int.from_bytes(tail[:4], "little")
        # a length the file cannot hold is no footer: Arrow reports the file as unreadable
        if MAX_EPISODES_FOOTER_BYTES < size <= total - 12:
            raise LeRobotImportError("limit", f"the episodes file's footer (its Parquet metadata) takes {size:,} "
                                     f"bytes, more than the {MAX_EPISODES_FOOTER_BYTES:,} read from one episodes "
                                     "file (very many row groups or columns); rewrite it with larger row groups "
                                     "(e.g. pyarrow's default) or split it into several episodes files", file=file)


def _read_columns(pf: pq.ParquetFile, raw: bytes | BinaryIO, needed: list[str]) -> pa.Table:
    """Read `needed`, keeping dictionaries where Arrow can. Arrow cannot return a nested dictionary column
    (`tasks`, a list of strings) that spans pages as one chunk; row group by row group it can, and when even
    that fails the column is read decoded (its size then bounded by the footer check alone)."""
    try:
        return pf.read(columns=needed)
    except pa.ArrowNotImplementedError:
        pass
    try:
        groups = [pf.read_row_group(i, columns=needed) for i in range(pf.metadata.num_row_groups)]
        return pa.concat_tables(groups) if groups else pf.schema_arrow.empty_table().select(needed)
    except pa.ArrowNotImplementedError:
        return _parquet(raw).read(columns=needed)


def _check_unique(names: Sequence[str], needed: Sequence[str], file: str) -> None:
    check_unique_columns(names, needed, what="episodes file", file=file, rule="episodes_file")


def check_unique_columns(names: Sequence[str], needed: Sequence[str], *, what: str, file: str, rule: str) -> None:
    """A column the import reads must appear once in a Parquet file: with two of the same name, which one
    LeRobot would read is undefined (and Arrow refuses to pick).

    Args:
        names: the file's top-level column names (`ParquetFile.schema_arrow.names`).
        needed: the columns the import reads.
        what: "episodes file", "data file", for the message.
        file: the file, relative to the dataset root.
        rule: the rule a duplicate breaks (`episodes_file`, `data_file`)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    for name in needed:
        if counts.get(name, 0) > 1:
            raise LeRobotImportError(rule, f"the {what} has {counts[name]} columns named `{name}`; a column name "
                                     "must appear once", file=file)


def check_footer(pf: pq.ParquetFile, columns: Sequence[str], *, file: str, max_rows: int = MAX_EPISODES_ROWS,
                 max_bytes: int = MAX_EPISODES_BYTES) -> None:
    """Refuse an episodes file whose footer declares more rows, or more decompressed bytes in `columns`,
    than the limits, before any page is decompressed (a few kilobytes of zstd can decompress to
    gigabytes)."""
    md = pf.metadata
    if md.num_rows > max_rows:
        raise LeRobotImportError("limit", f"the episodes file has {md.num_rows:,} rows; an episodes file is read "
                                 f"only up to {max_rows:,} episodes (LeRobot's own files hold far fewer): split "
                                 "it into several episodes files", file=file)
    leaves = leaf_columns(pf.schema_arrow, columns, md.num_columns)
    total = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        total += sum(max(0, group.column(j).total_uncompressed_size) for j in leaves)
        if total > max_bytes:
            raise LeRobotImportError("limit", f"the columns the import reads from the episodes file take more than "
                                     f"{max_bytes:,} bytes once decompressed (row groups 0..{g} alone: {total:,}); "
                                     "real episodes files need a few hundred bytes per episode", file=file)


def leaf_columns(schema: pa.Schema, columns: Sequence[str], num_leaves: int) -> list[int]:
    """The Parquet leaf-column positions of the top-level `columns` (every leaf when the Arrow schema
    does not map one to one onto the file's leaves)."""
    wanted, out, at = set(columns), [], 0
    for field in schema:
        n = _leaf_count(field.type)
        if field.name in wanted:
            out += range(at, at + n)
        at += n
    return out if at == num_leaves else list(range(num_leaves))


def _leaf_count(t: pa.DataType) -> int:
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_count(t.value_type)
    return 1


def _decoded_bytes(arr: pa.Array) -> int:
    """Bytes `arr` takes once its dictionary-encoded strings are decoded: a dictionary of one 60 MB string
    referenced by every row decodes to 60 MB per row, which no page size in the footer shows."""
    t = arr.type
    if pa.types.is_dictionary(t):
        lengths = pc.binary_length(arr.dictionary) if _is_text(t.value_type) else None
        if lengths is None:
            return arr.nbytes
        per_row = pc.take(lengths, arr.indices)
        return int(pc.sum(per_row).as_py() or 0) + 8 * len(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _decoded_bytes(arr.values) + 8 * len(arr)
    if pa.types.is_struct(t):
        return sum(_decoded_bytes(arr.field(i)) for i in range(t.num_fields))
    return arr.nbytes


def _is_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _dense_type(t: pa.DataType) -> pa.DataType:
    """`t` with every dictionary type replaced by its value type (field names kept)."""
    if pa.types.is_dictionary(t):
        return t.value_type
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_dense_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_dense_type(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_dense_type(t.value_type)), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_dense_type(f.type)) for f in t])
    return t


class _PathCache:
    """Rendered data/video paths by (chunk, file): an episodes file names few distinct files."""

    def __init__(self, info: DatasetInfo) -> None:
        self._info = info
        self._paths: dict[tuple, str] = {}

    def data_file(self, chunk: int, file: int) -> str:
        key = ("", int(chunk), int(file))
        if key not in self._paths:
            self._paths[key] = self._info.data_file(key[1], key[2])
        return self._paths[key]

    def video_file(self, video_key: str, chunk: int, file: int) -> str:
        key = (video_key, int(chunk), int(file))
        if key not in self._paths:
            self._paths[key] = self._info.video_file(video_key, key[1], key[2])
        return self._paths[key]


def _row_problems(ints: dict, floats: dict, info: DatasetInfo) -> list[tuple[str, np.ndarray]]:
    """(problem, rows that have it), in the order a row's problems are reported."""
    frm, to, length = ints["dataset_from_index"], ints["dataset_to_index"], ints["length"]
    problems = [("length", (to - frm) != length), ("negative", (frm < 0) | (length < 0))]
    for f in info.video_features:
        start = floats[f"videos/{f.name}/from_timestamp"]
        end = floats[f"videos/{f.name}/to_timestamp"]
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(start) & np.isfinite(end)) | (end < start) | (start < 0) | (end >= MAX_TIMESTAMP_S)
        problems.append((f.name, bad))
    return problems


def _first_bad_row(ints: dict, floats: dict, info: DatasetInfo) -> int:
    """The first row breaking a row rule, or the number of rows when none does."""
    n = len(ints["episode_index"])
    bad = np.zeros(n, bool)
    for _, rows in _row_problems(ints, floats, info):
        bad |= rows
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else n


def _row_error(i: int, ints: dict, floats: dict, info: DatasetInfo, file: str) -> LeRobotImportError:
    """The error of row `i`'s first problem."""
    ep = int(ints["episode_index"][i])
    frm, to, length = int(ints["dataset_from_index"][i]), int(ints["dataset_to_index"][i]), int(ints["length"][i])
    problem = next(name for name, rows in _row_problems(ints, floats, info) if rows[i])
    if problem == "length":
        return LeRobotImportError("length_mismatch", f"episode {ep} spans frames {frm}..{to} but has length "
                                  f"{length}", episode_index=ep, file=file)
    if problem == "negative":
        return LeRobotImportError("length_mismatch", f"episode {ep} has a negative frame range {frm}..{to}",
                                  episode_index=ep, file=file)
    start = float(floats[f"videos/{problem}/from_timestamp"][i])
    end = float(floats[f"videos/{problem}/to_timestamp"][i])
    return LeRobotImportError("timestamps", f"camera `{problem}` spans {quote(start)}..{quote(end)} s "
                              "of its video file; a clip needs finite times from 0 up to "
                              f"{MAX_TIMESTAMP_S:.4g} s (what int64 nanoseconds hold) with to_timestamp >= "
                              "from_timestamp", episode_index=ep, file=file)


def check_order(rows: Sequence[EpisodeRow], *, file: str) -> None:
    """Rows in increasing episode_index order, with frame ranges that do not overlap: LeRobot's writers
    always write them so, and its reader finds an episode by position, so anything else is a broken file."""
    episodes = np.fromiter((r.episode_index for r in rows), np.int64, len(rows))
    for k in np.flatnonzero(np.diff(episodes) <= 0)[:1].tolist():
        prev, row = rows[k], rows[k + 1]
        what = "twice" if row.episode_index == prev.episode_index else f"after episode {prev.episode_index}"
        raise LeRobotImportError("duplicate_episode" if row.episode_index == prev.episode_index
                                 else "episode_order",
                                 f"episode {row.episode_index} appears {what} (row {row.position}); episodes "
                                 "must be in increasing episode_index order", episode_index=row.episode_index,
                                 file=file)
    framed = [r for r in rows if r.length]
    starts = np.fromiter((r.from_index for r in framed), np.int64, len(framed))
    ends = np.fromiter((r.to_index for r in framed), np.int64, len(framed))
    order = np.argsort(starts, kind="stable")  # as a stable sort by from_index orders them
    for k in np.flatnonzero(starts[order][1:] < ends[order][:-1])[:1].tolist():
        prev, row = framed[order[k]], framed[order[k + 1]]
        raise LeRobotImportError("episode_order", f"episode {row.episode_index} spans frames {row.from_index}.."
                                 f"{row.to_index}, overlapping episode {prev.episode_index}'s "
                                 f"{prev.from_index}..{prev.to_index}", episode_index=row.episode_index,
                                 file=file)


def episode_indices(raw: bytes | BinaryIO) -> tuple[int, ...]:
    """The episode_index values of an episodes file that failed, so its episodes are still accounted
    for in errors.jsonl; () when even that column cannot be read, or when the file is beyond the limits
    (it was refused unread, so none of its episodes was read)."""
    try:
        pf = _parquet(raw)
        if pf.schema_arrow.names.count("episode_index") != 1:
            return ()
        check_footer(pf, ["episode_index"], file="")
        col = pf.read(columns=["episode_index"]).column("episode_index")
        return tuple(int(v) for v in col.cast(pa.int64()).to_pylist() if v is not None)
    except (pa.ArrowException, OSError, ValueError, TypeError, LeRobotImportError):
        return ()


def _numeric_column(table: pa.Table, name: str, file: str, target: pa.DataType) -> np.ndarray:
    """A non-null column as `target`; like the reference, any column that casts without loss is accepted
    (pandas-written files hold floats or even strings here)."""
    col = table.column(name)
    if col.null_count:
        raise LeRobotImportError("episodes_file", f"column `{name}` holds nulls", file=file)
    try:
        return col.cast(target, safe=True).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as ex:
        raise LeRobotImportError("episodes_file", f"column `{name}` ({col.type}) does not convert to {target}: "
                                 f"{shorten(str(ex).splitlines()[0], 300)}", file=file) from None


def _tasks_column(table: pa.Table, file: str) -> list[tuple[str, ...]]:
    col = table.column("tasks")
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or not (
            pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)):
        raise LeRobotImportError("episodes_file", f"column `tasks` is {col.type}, not a list of strings", file=file)
    try:
        col.validate(full=True)
        values = col.to_pylist()
    except (pa.ArrowInvalid, UnicodeDecodeError) as ex:
        raise LeRobotImportError("episodes_file", f"column `tasks` holds a string that is not UTF-8: {ex}",
                                 file=file) from None
    if col.null_count or pc.list_flatten(col).null_count:
        for i, tasks in enumerate(values):
            if tasks is None or any(t is None for t in tasks):
                raise LeRobotImportError("episodes_file", f"row {i}: `tasks` holds a null", file=file)
    return [tuple(t) for t in values]


def plan_parts(rows: Sequence[EpisodeRow], data_file_size: Callable[[str], int],
               layout: Callable[[str], Optional[RowGroupLayout]], *, limit: int = DATA_SPAN_LIMIT,
               one_part: bool = False, file: str) -> list[PartPlan]:
    """Split an episodes file's rows into ordered parts of whole episodes, each holding at most `limit`
    bytes of its episodes' own data (their share of the row groups holding their rows, from the data
    files' footers); the one sizing of the import and of `plan`.

    An episode over the limit alone forms a part (`PartPlan.oversized`). A part crosses from one data
    file into the next only where neither file has a row group shared by two of its episodes, so a part
    that shares row groups with other parts shares them in one data file, its read unit.

    With `one_part` (the reference's behaviour) the whole file is one part, and episodes spanning more than
    `limit` bytes of data files, counted as whole files from their sizes like the reference does, are the
    data_span error.

    Args:
        rows: the episodes file's validated rows, in row order.
        data_file_size: a data file's size in bytes (relative path -> size).
        layout: a data file's row-group layout, or None when its footer cannot be read (the file's size is
            then spread over its rows here; the write step reports what is wrong with it).
        limit: the bytes of data one part may hold.
        one_part: write the file as one part, refusing it past `limit` (the reference's rule).
        file: the episodes file, for messages.
    Returns:
        The parts, numbered from 0 (one empty part for a file without rows)."""
    sizes: dict[str, int] = {}
    for r in rows:
        if r.data_file not in sizes:
            try:
                sizes[r.data_file] = data_file_size(r.data_file)
            except LeRobotImportError as ex:
                raise ex.with_context(episode_index=r.episode_index, file=r.data_file)
    if one_part:
        span = sum(sizes.values())
        if span > limit:
            raise LeRobotImportError(
                "data_span", f"these episodes' frames span {span} bytes of data files ({len(sizes)} files), above "
                f"the {limit} bytes one part may read (the reference's rule, kept by --one-part); import without "
                "--one-part to write this episodes file in parts", file=file)
    sized = _episode_sizes(rows, sizes, layout)
    if one_part:
        positions = tuple(r.position for r in rows)
        return [PartPlan(0, positions, tuple(sizes), int(round(sum(s.bytes for s in sized))), limit,
                         _read_unit(sized), int(round(sum(s.decoded for s in sized))))]
    parts: list[PartPlan] = []
    current: list[_Sized] = []
    for s in sized:
        if current and (_bytes(current) + s.bytes > limit or _crosses_shared_file(current, s)):
            parts.append(_part(len(parts), current, limit))
            current = []
        current.append(s)
    if current or not parts:
        parts.append(_part(len(parts), current, limit))
    return parts


@dataclasses.dataclass(frozen=True)
class _Sized:
    """One episode as the part sizing sees it."""

    row: EpisodeRow
    bytes: float
    before: bool  # its first row group holds rows before it
    after: bool  # its last row group holds rows after it
    aligned: bool  # its data file has no row group shared by two episodes of this episodes file
    decoded: float = 0.0  # its bytes once decoded


def _episode_sizes(rows: Sequence[EpisodeRow], sizes: dict[str, int],
                   layout: Callable[[str], Optional[RowGroupLayout]]) -> list[_Sized]:
    """Each row's bytes and row-group sharing, vectorised per data file."""
    out: dict[int, _Sized] = {}
    by_file: dict[str, list[EpisodeRow]] = {}
    for r in rows:
        by_file.setdefault(r.data_file, []).append(r)
    for data_file, file_rows in by_file.items():
        found = layout(data_file)
        if found is None:  # the file's size spread over the rows read from it; its read fails anyway
            each = sizes[data_file] / len(file_rows)
            out.update((r.position, _Sized(r, each, False, False, True, each)) for r in file_rows)
            continue
        first, end = found.rows(np.array([r.from_index for r in file_rows]), np.array([r.to_index for r in file_rows]))
        nbytes = found.bytes_of(first, end)
        decoded = found.bytes_of(first, end, decoded=True)
        before, after = found.shares(first, end)
        aligned = not (before.any() or after.any())
        out.update((r.position, _Sized(r, float(b), bool(x), bool(y), aligned, float(d)))
                   for r, b, x, y, d in zip(file_rows, nbytes, before, after, decoded))
    return [out[r.position] for r in rows]


def _bytes(part: Sequence[_Sized]) -> float:
    return sum(s.bytes for s in part)


def _data_file(part: Sequence[_Sized]) -> Optional[str]:
    """The data file of a part's last episode that has frames (an empty episode reads no row group)."""
    return next((s.row.data_file for s in reversed(part) if s.row.length), None)


def _crosses_shared_file(part: Sequence[_Sized], new: _Sized) -> bool:
    """Whether adding `new` takes the part into another data file while either file shares row groups."""
    last = _data_file(part)
    if not new.row.length or last is None or new.row.data_file == last:
        return False
    last_aligned = next(s.aligned for s in reversed(part) if s.row.length)
    return not (last_aligned and new.aligned)


def _read_unit(part: Sequence[_Sized]) -> str:
    """The first data file in which a part shares a row group with rows outside it, or ""."""
    first_of: dict[str, _Sized] = {}
    last_of: dict[str, _Sized] = {}
    for s in part:
        if s.row.length:
            first_of.setdefault(s.row.data_file, s)
            last_of[s.row.data_file] = s
    return next((f for f in first_of if first_of[f].before or last_of[f].after), "")


def _part(number: int, part: Sequence[_Sized], limit: int) -> PartPlan:
    files = tuple(dict.fromkeys(s.row.data_file for s in part))
    return PartPlan(number, tuple(s.row.position for s in part), files, int(round(_bytes(part))), limit,
                    _read_unit(part), int(round(sum(s.decoded for s in part))))
