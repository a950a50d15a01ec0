"""An episodes metadata file -> small per-episode work items, planned into parts.

A work item holds paths, ranges and timestamps, never data: it is what crosses the shuffle before
the workers read data files and MP4s. An episodes file is looked at before it is read: its footer says
how many rows it has and how many bytes its columns take once decompressed, and a file beyond what
real datasets hold (`MAX_EPISODES_ROWS`, `MAX_EPISODES_BYTES`) is refused without being decoded.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.lerobot.info import DatasetInfo
from transforms.errors import LeRobotImportError, quote, shorten
from transforms.lerobot.span import DATA_SPAN_LIMIT  # noqa: F401 - the rule's limit, exported here as before
#: Rows (episodes) per episodes file. LeRobot starts a new episodes file at about 100 MB, and a row with
#: its per-feature statistics takes kilobytes, so real files hold thousands to tens of thousands.
MAX_EPISODES_ROWS = 100_000
#: Decompressed bytes of the columns the import reads from one episodes file (ids, ranges, timestamps
#: and task strings: a few hundred bytes per episode in real files).
MAX_EPISODES_BYTES = 64 * 1024 * 1024
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


@dataclasses.dataclass(frozen=True)
class PartPlan:
    """The rows of one output part: whole episodes, in row order."""

    part: int
    positions: tuple[int, ...]
    data_files: tuple[str, ...]
    data_bytes: int
    limit: int = DATA_SPAN_LIMIT

    @property
    def oversized(self) -> bool:
        """One episode whose data files alone pass the limit: a part of its own, reported."""
        return self.data_bytes > self.limit and len(self.positions) == 1


def _required_columns(info: DatasetInfo) -> list[str]:
    cols = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
            "dataset_from_index", "dataset_to_index"]
    for f in info.video_features:
        cols += [f"videos/{f.name}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    return cols


def read_episode_rows(raw: pa.Table | bytes, info: DatasetInfo, *, file: str) -> list[EpisodeRow]:
    """Validate an episodes table (or Parquet bytes) and resolve each row's files.

    Reads only the columns the import uses (the stats/* columns stay on disk), and only once the
    footer shows they fit the limits. Row checks are vectorised; the first row that breaks a rule
    (in row order) is the one reported.

    Args:
        raw: the episodes file's bytes, or a table already read.
        info: the dataset's info.json model.
        file: the episodes file's path relative to the root, for messages.
    Returns:
        One EpisodeRow per row, in row order."""
    needed = _required_columns(info)
    table = _read_table(raw, needed, file) if isinstance(raw, (bytes, bytearray, memoryview)) else raw
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

    rows = []
    for i in range(min(table.num_rows, first_bad)):
        ep = int(ints["episode_index"][i])
        try:
            data_file = paths.data_file(ints["data/chunk_index"][i], ints["data/file_index"][i])
            videos = tuple(
                VideoSlice(f.name, paths.video_file(f.name, ints[f"videos/{f.name}/chunk_index"][i],
                                                    ints[f"videos/{f.name}/file_index"][i]),
                           float(floats[f"videos/{f.name}/from_timestamp"][i]),
                           float(floats[f"videos/{f.name}/to_timestamp"][i]))
                for f in info.video_features)
        except LeRobotImportError as ex:
            raise ex.with_context(episode_index=ep, file=file)
        rows.append(EpisodeRow(position=i, episode_index=ep, tasks=tasks[i], length=int(ints["length"][i]),
                               data_file=data_file, from_index=int(ints["dataset_from_index"][i]),
                               to_index=int(ints["dataset_to_index"][i]), videos=videos))
    if first_bad < table.num_rows:
        raise _row_error(first_bad, ints, floats, info, file)
    check_order(rows, file=file)
    return rows


def _read_table(raw: bytes, needed: list[str], file: str) -> pa.Table:
    """The needed columns of an episodes file, after its footer shows they fit the limits."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(raw))
        names = pf.schema_arrow.names
        missing = [c for c in needed if c not in names]
        if missing:
            raise LeRobotImportError("episodes_file", f"the episodes file has no `{missing[0]}` column", file=file)
        _check_unique(names, needed, file)
        check_footer(pf, needed, file=file)
        leaves = _leaf_columns(pf.schema_arrow, needed, pf.metadata.num_columns)
        text = [pf.schema.column(j).path for j in leaves if pf.schema.column(j).physical_type == "BYTE_ARRAY"]
        if text:  # strings stay dictionary-encoded until their decoded size is known to fit
            pf = pq.ParquetFile(pa.BufferReader(raw), read_dictionary=text)
        table = _read_columns(pf, raw, needed)
        decoded = sum(_decoded_bytes(chunk) for column in table.columns for chunk in column.chunks)
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


def _read_columns(pf: pq.ParquetFile, raw: bytes, needed: list[str]) -> pa.Table:
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
        return pq.ParquetFile(pa.BufferReader(raw)).read(columns=needed)


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
    leaves = _leaf_columns(pf.schema_arrow, columns, md.num_columns)
    total = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        total += sum(max(0, group.column(j).total_uncompressed_size) for j in leaves)
        if total > max_bytes:
            raise LeRobotImportError("limit", f"the columns the import reads from the episodes file take more than "
                                     f"{max_bytes:,} bytes once decompressed (row groups 0..{g} alone: {total:,}); "
                                     "real episodes files need a few hundred bytes per episode", file=file)


def _leaf_columns(schema: pa.Schema, columns: Sequence[str], num_leaves: int) -> list[int]:
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
    for prev, row in zip(rows, rows[1:]):
        if row.episode_index <= prev.episode_index:
            what = "twice" if row.episode_index == prev.episode_index else f"after episode {prev.episode_index}"
            raise LeRobotImportError("duplicate_episode" if row.episode_index == prev.episode_index
                                     else "episode_order",
                                     f"episode {row.episode_index} appears {what} (row {row.position}); episodes "
                                     "must be in increasing episode_index order", episode_index=row.episode_index,
                                     file=file)
    by_range = sorted((r for r in rows if r.length), key=lambda r: r.from_index)
    for prev, row in zip(by_range, by_range[1:]):
        if row.from_index < prev.to_index:
            raise LeRobotImportError("episode_order", f"episode {row.episode_index} spans frames {row.from_index}.."
                                     f"{row.to_index}, overlapping episode {prev.episode_index}'s "
                                     f"{prev.from_index}..{prev.to_index}", episode_index=row.episode_index,
                                     file=file)


def episode_indices(raw: bytes) -> tuple[int, ...]:
    """The episode_index values of an episodes file that failed, so its episodes are still accounted
    for in errors.jsonl; () when even that column cannot be read, or when the file is beyond the limits
    (it was refused unread, so none of its episodes was read)."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(raw))
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
    for i, tasks in enumerate(values):
        if tasks is None or any(t is None for t in tasks):
            raise LeRobotImportError("episodes_file", f"row {i}: `tasks` holds a null", file=file)
    return [tuple(t) for t in values]


def plan_parts(rows: Sequence[EpisodeRow], data_file_size: Callable[[str], int], *, limit: int = DATA_SPAN_LIMIT,
               in_parts: bool, file: str) -> list[PartPlan]:
    """Split an episodes file's rows into ordered parts of at most `limit` bytes of distinct data files.

    Without `in_parts` the whole file is one part and a span over the limit is the 64 MiB error.
    The span is decided from file sizes alone, like the reference."""
    sizes: dict[str, int] = {}
    for r in rows:
        if r.data_file not in sizes:
            try:
                sizes[r.data_file] = data_file_size(r.data_file)
            except LeRobotImportError as ex:
                raise ex.with_context(episode_index=r.episode_index, file=r.data_file)
    if not in_parts:
        span = sum(sizes.values())
        if span > limit:
            raise LeRobotImportError(
                "data_span", f"these episodes' frames span {span} bytes of data files ({len(sizes)} files), above "
                f"the {limit} bytes one part may read; rerun with --read-in-parts to import this episodes file in "
                "several parts", file=file)
        return [PartPlan(0, tuple(r.position for r in rows), tuple(sizes), span, limit)]
    parts: list[PartPlan] = []
    positions: list[int] = []
    files: dict[str, None] = {}
    span = 0
    for r in rows:
        extra = 0 if r.data_file in files else sizes[r.data_file]
        if positions and span + extra > limit:
            parts.append(PartPlan(len(parts), tuple(positions), tuple(files), span, limit))
            positions, files, span, extra = [], {}, 0, sizes[r.data_file]
        positions.append(r.position)
        files[r.data_file] = None
        span += extra
    if positions or not parts:
        parts.append(PartPlan(len(parts), tuple(positions), tuple(files), span, limit))
    return parts


