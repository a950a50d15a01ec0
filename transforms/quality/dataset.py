"""Run every check on a dataset without importing it: what `lerobot-import check` reports.

It reads only what the checks need: info.json, meta/tasks.parquet, the episodes files, the numeric columns of
the data files (by row group, as the import reads them; never images, strings or language), and each MP4's
head and `moov` (its sample times; no video is decoded). Episodes files and MP4s are read by a few threads,
since remote storage answers slowly and in parallel. What the import itself would refuse (an unreadable
file, a rule an episodes file breaks) is reported as an error beside the findings.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from transforms.base import storage
from transforms.episode.frames import typed_frames
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import data_files
from transforms.lerobot.dataset import check_dataset
from transforms.lerobot.layouts import read_unit_rows
from transforms.lerobot.info import INDEXED_CODECS, INFO_PATH, DatasetInfo
from transforms.mp4 import arrow
from transforms.quality.dataset_checks import dataset_totals, depth_features, info_document
from transforms.quality.findings import ERROR, Finding, with_severity
from transforms.quality.part import check_part, load_tasks
from transforms.quality.video_checks import SampleTimes, presentation_times, sample_window

#: Episodes files (and MP4s) read at once.
THREADS = 8


@dataclasses.dataclass(frozen=True)
class Problem:
    """Something the import would refuse: a rule broken, in which file and episode."""

    episodes_file: Optional[str]
    episode_index: Optional[int]
    file: Optional[str]
    rule: str
    message: str


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What checking a dataset found."""

    dataset: str
    findings: tuple[Finding, ...]
    problems: tuple[Problem, ...]
    episodes_files: int
    episodes: int
    frames: int
    bytes_read: int

    @property
    def errors(self) -> int:
        """Findings made errors by `strict`, and what the import would refuse."""
        return sum(f.severity == ERROR for f in self.findings) + len(self.problems)


@dataclasses.dataclass(frozen=True)
class _FileResult:
    findings: tuple[Finding, ...] = ()
    problems: tuple[Problem, ...] = ()
    counts: Optional[tuple[int, int]] = None  # (episodes, frames) its rows declare, None when unreadable
    indices: tuple[int, ...] = ()  # the episode_index of each row


def checked_info(info: DatasetInfo) -> DatasetInfo:
    """info.json cut to what the checks read: the numeric features and the cameras."""
    return dataclasses.replace(info, features=tuple(f for f in info.features if f.kind in ("numeric", "video")))


def check_dataset_quality(root: str, *, strict: frozenset[str] = frozenset(), skip_videos: bool = False,
                          threads: int = THREADS) -> CheckReport:
    """Every check of a dataset.

    Args:
        root: the dataset root (local path or fsspec URL, hf://datasets/...).
        strict: the checks whose findings count as errors.
        skip_videos: leave the cameras unchecked (the MP4s were not published).
        threads: how many episodes files (then MP4s) are read at once.
    Raises:
        LeRobotImportError: the dataset cannot be checked at all (no root, no info.json, v2.x, ...).
    """
    counter = storage.ReadCounter()
    checked = check_dataset(root, skip_videos=skip_videos)
    uri = checked.root
    full_info = checked.info
    info = checked_info(full_info)
    tasks, task_findings = load_tasks(uri)
    raw_info = storage.read_bytes(storage.dataset_file(uri, INFO_PATH), what="info file", file=INFO_PATH)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        planned = list(pool.map(lambda rel: _rows(uri, rel, full_info), checked.episodes_files))
        mp4s = sorted({c.file for _, rows, _ in planned for r in rows or () for c in r.videos})
        codecs = {f.name: f.video_codec for f in info.video_features}
        cameras = {c.file: c.key for _, rows, _ in planned for r in rows or () for c in r.videos}
        others = frozenset(cameras.values())
        times = dict(zip(mp4s, pool.map(lambda f: _mp4_times(uri, f, codecs.get(cameras[f]), others), mp4s)))
        results = list(pool.map(lambda p: _check_file(uri, p, info, full_info, tasks, times, counter), planned))
    findings = task_findings + [f for r in results for f in r.findings]
    problems = [p for r in results for p in r.problems]
    problems += [Problem(None, None, f, "mp4", message) for f, (_, message) in sorted(times.items()) if message]
    counts = [r.counts for r in results]
    episodes = sum(c[0] for c in counts if c)
    frames = sum(c[1] for c in counts if c)
    if all(c is not None for c in counts):
        indices = np.array([i for r in results for i in r.indices], np.int64)
        findings += dataset_totals(uri, info_document(raw_info), episodes, frames, indices)
    findings += depth_features(uri, info_document(raw_info))
    return CheckReport(uri, tuple(sorted(with_severity(findings, strict), key=Finding.sort_key)), tuple(problems),
                       len(checked.episodes_files), episodes, frames, counter.bytes_read)


def _rows(root: str, rel: str, info: DatasetInfo):
    """(episodes file, its rows or None, the problem reading them)."""
    try:
        return rel, read_unit_rows(root, rel, info), None
    except LeRobotImportError as ex:
        return rel, None, Problem(rel, ex.episode_index, ex.file or rel, ex.rule, ex.message)


def _mp4_times(root: str, rel: str, codec: Optional[str],
               cameras: frozenset = frozenset()) -> tuple[Optional[tuple], str]:
    """((sample times, own fps) of an MP4, or None; why it could not be read, or "")."""
    if codec not in INDEXED_CODECS:
        return None, ""  # the import does not index this codec either: the camera is not checked
    from transforms.mp4 import media_index
    uri = storage.dataset_file(root, rel)
    try:
        fs, path = storage.filesystem(uri)
        result = media_index.read_media_index(fs, path, uri=uri, declared=codec)
        return presentation_times(result.index), ""
    except FileNotFoundError:  # where it is, when a folder on its path has another name (`video/`)
        return None, f"video file {rel} does not exist{_misplaced(root, rel, cameras)}"
    except LeRobotImportError as ex:
        hint = _misplaced(root, rel, cameras) if ex.rule == "file_missing" else ""
        return None, f"[{ex.rule}] {ex.message}{hint}"
    except arrow.InvalidMediaIndex as ex:
        return None, f"the MediaIndex of {rel} is not usable: {ex}"


def _misplaced(root: str, rel: str, cameras: frozenset) -> str:
    from transforms.lerobot import hints
    parts = rel.split("/")
    try:
        return hints.misplaced_hint(root, rel, other_cameras=cameras - set(parts))
    except (OSError, LeRobotImportError):
        return ""


def _check_file(root: str, planned, info: DatasetInfo, declared: DatasetInfo, tasks: Optional[Sequence[str]],
                times: dict, counter: storage.ReadCounter) -> _FileResult:
    rel, rows, problem = planned
    if rows is None:
        return _FileResult(problems=(problem,))
    frames, problems, columns = {}, [], {}
    by_file: dict[str, list] = {}
    for row in rows:
        by_file.setdefault(row.data_file, []).append(row)
    for data_file, episodes in by_file.items():
        reader = data_files.DataFileReader(root, data_file, info, counter)
        try:
            columns[data_file] = reader.columns
            for batch in reader.read([(r.position, r) for r in episodes]):
                for position, row, result in typed_frames(batch, info):
                    if isinstance(result, LeRobotImportError):
                        problems.append(Problem(rel, row.episode_index, result.file or data_file, result.rule,
                                                result.message))
                    else:
                        frames[position] = result
        finally:
            reader.close()
    samples = _windows(rows, times, info.fps)
    findings = check_part(root, rel, info, rows, frames, tasks=tasks, samples=samples, data_columns=columns,
                          declared=declared)
    stopped = [r for r in rows if r.position not in frames]
    if stopped:  # what a structural error leaves checkable (a column missing: the others still are)
        findings += check_what_remains(root, rel, info, stopped, counter, tasks=tasks, samples=samples,
                                       declared=declared, columns=columns)
    return _FileResult(tuple(findings), tuple(problems), (len(rows), sum(r.length for r in rows)),
                       tuple(r.episode_index for r in rows))


def without_missing_columns(info: DatasetInfo, columns: Sequence[str]) -> Optional[DatasetInfo]:
    """`info` without the frame features a data file lacks (its cameras kept), or None when it lacks none."""
    present = set(columns)
    kept = tuple(f for f in info.features if f.kind == "video" or f.name in present)
    return None if len(kept) == len(info.features) else dataclasses.replace(info, features=kept)


def check_what_remains(root: str, rel: str, info: DatasetInfo, rows: Sequence, counter: storage.ReadCounter, *,
                       tasks: Optional[Sequence[str]] = None, samples=None, strict: frozenset[str] = frozenset(),
                       declared: Optional[DatasetInfo] = None,
                       columns: Optional[Mapping[str, Sequence[str]]] = None) -> list[Finding]:
    """The quality findings of episodes a structural error stopped, as far as they can still be checked: the
    episodes of a data file that lacks a declared column are typed again with the columns it has, and
    checked on those (their timestamps, their other features), so one missing column does not hide the
    rest (an error that no missing column explains leaves them unchecked, as before). `columns`: the columns of
    the data files the caller already opened (their footers are not read again)."""
    found: list[Finding] = []
    by_file: dict[str, list] = {}
    for row in rows:
        by_file.setdefault(row.data_file, []).append(row)
    for data_file, episodes in by_file.items():
        names = tuple((columns or {}).get(data_file) or ()) or _columns_of(root, data_file)
        reduced = without_missing_columns(info, names) if names else None
        if reduced is None or not reduced.frame_features:
            continue
        frames = {}
        reader = data_files.DataFileReader(root, data_file, reduced, counter)
        try:
            for batch in reader.read([(r.position, r) for r in episodes]):
                for position, _, result in typed_frames(batch, reduced):
                    if not isinstance(result, LeRobotImportError):
                        frames[position] = result
        finally:
            reader.close()
        found += check_part(root, rel, reduced, episodes, frames, tasks=tasks, samples=samples,
                            data_columns={data_file: names}, strict=strict, declared=declared or info)
    return found


def _columns_of(root: str, data_file: str) -> tuple[str, ...]:
    """The columns a data file's footer names; () when it cannot be read (its own error says why)."""
    import pyarrow.parquet as pq
    try:
        fs, path = storage.filesystem(storage.dataset_file(root, data_file))
        with fs.open(path, "rb") as f:
            return tuple(pq.ParquetFile(f).schema_arrow.names)
    except Exception:  # noqa: BLE001 - any cause: the episodes stay as unchecked as before
        return ()


def _windows(rows: Iterable, times: dict, fps: Optional[float]) -> dict[str, SampleTimes]:
    from transforms.quality.video_checks import clips_window
    spans: dict[str, list] = {}
    for row in rows:
        for clip in row.videos:
            spans.setdefault(clip.file, []).append(_Span(clip.from_timestamp, clip.to_timestamp, row.length))
    out = {}
    for file, found in spans.items():
        known = times.get(file, (None, ""))[0]
        if known is not None:
            start, end = clips_window(found, fps)
            out[file] = sample_window(file, known[0], known[1], start, end)
    return out


@dataclasses.dataclass(frozen=True)
class _Span:
    from_timestamp: float
    to_timestamp: float
    length: int
