"""An episodes metadata file -> small per-episode work items, planned into parts (mapping §1, §3, §7).

A work item holds paths, ranges and timestamps, never data: it is what crosses the shuffle before
the workers read data files and MP4s.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.lerobot.info import DatasetInfo
from transforms.errors import LeRobotImportError

#: The 64 MiB rule: an episodes file may span at most this many bytes of data files.
DATA_SPAN_LIMIT = 64 * 1024 * 1024


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

    Reads only the columns the mapping uses; the stats/* columns stay on disk."""
    needed = _required_columns(info)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            pf = pq.ParquetFile(pa.BufferReader(raw))
            present = set(pf.schema_arrow.names)
            missing = [c for c in needed if c not in present]
            if missing:
                raise LeRobotImportError("episodes_file", f"the episodes file has no `{missing[0]}` column",
                                         file=file)
            table = pf.read(columns=needed)
        except LeRobotImportError:
            raise
        except (pa.ArrowException, OSError, ValueError) as ex:
            raise LeRobotImportError("episodes_file", f"the episodes file is not readable Parquet: {ex}",
                                     file=file) from None
    else:
        table = raw
        missing = [c for c in needed if c not in table.column_names]
        if missing:
            raise LeRobotImportError("episodes_file", f"the episodes file has no `{missing[0]}` column", file=file)

    ints = {c: _numeric_column(table, c, file, pa.int64()) for c in needed
            if c.endswith(("_index", "length")) or c in ("dataset_from_index", "dataset_to_index")}
    floats = {c: _numeric_column(table, c, file, pa.float64()) for c in needed if c.endswith("_timestamp")}
    tasks = _tasks_column(table, file)

    rows = []
    for i in range(table.num_rows):
        ep = int(ints["episode_index"][i])
        frm, to, length = int(ints["dataset_from_index"][i]), int(ints["dataset_to_index"][i]), int(ints["length"][i])
        if to - frm != length:
            raise LeRobotImportError("length_mismatch", f"episode {ep} spans frames {frm}..{to} but has length "
                                     f"{length}", episode_index=ep, file=file)
        if frm < 0 or length < 0:
            raise LeRobotImportError("length_mismatch", f"episode {ep} has a negative frame range {frm}..{to}",
                                     episode_index=ep, file=file)
        try:
            data_file = info.data_file(ints["data/chunk_index"][i], ints["data/file_index"][i])
            videos = []
            for f in info.video_features:
                p = f"videos/{f.name}/"
                start, end = float(floats[p + "from_timestamp"][i]), float(floats[p + "to_timestamp"][i])
                if not (np.isfinite(start) and np.isfinite(end)) or end < start or start < 0:
                    raise LeRobotImportError("timestamps", f"episode {ep}: camera `{f.name}` spans {start!r}.."
                                             f"{end!r} s of its video file; a clip needs finite, non-negative "
                                             "times with to_timestamp >= from_timestamp")
                videos.append(VideoSlice(f.name, info.video_file(f.name, ints[p + "chunk_index"][i],
                                                                 ints[p + "file_index"][i]), start, end))
        except LeRobotImportError as ex:
            raise ex.with_context(episode_index=ep, file=file)
        rows.append(EpisodeRow(position=i, episode_index=ep, tasks=tasks[i], length=length, data_file=data_file,
                               from_index=frm, to_index=to, videos=tuple(videos)))
    check_order(rows, file=file)
    return rows


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
    for in errors.jsonl; () when even that column cannot be read."""
    try:
        col = pq.read_table(pa.BufferReader(raw), columns=["episode_index"]).column("episode_index")
        return tuple(int(v) for v in col.cast(pa.int64()).to_pylist() if v is not None)
    except (pa.ArrowException, OSError, ValueError, TypeError):
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
                                 f"{str(ex).splitlines()[0]}", file=file) from None


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


