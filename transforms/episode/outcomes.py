"""How the pieces of an import ended: a written part, an episodes file's outcome, and the failures that
account for every episode of a file that did not import.

Plain frozen records: the Beam layer passes them between its steps, and the output writer
(`transforms.output.writes`) turns them into files, errors.jsonl rows and manifest entries.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from transforms.base.errors import (MAX_FILE_CHARS, MAX_MESSAGE_CHARS, FailureRecord, LeRobotImportError, redactor,
                                     shorten)
from transforms.lerobot.info import PathTemplate
from transforms.lerobot.v2 import OwnFile


def index_ranges(indices: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted distinct episode indices as [start, end) runs."""
    runs: list[list[int]] = []
    for ep in sorted(set(indices)):
        if runs and runs[-1][1] == ep:
            runs[-1][1] = ep + 1
        else:
            runs.append([ep, ep + 1])
    return tuple((a, b) for a, b in runs)


def _in_ranges(ranges: Sequence[tuple[int, int]]) -> Iterator[int]:
    for start, end in ranges:
        yield from range(start, end)


@dataclasses.dataclass(frozen=True)
class FilesMissing:
    """The `file_missing` rows of the episodes of a v2.x group whose own files lie in folders that do not
    exist (a chunk folder that is gone): one record for all of them, however many episodes, expanded to
    one row per episode and file only as errors.jsonl is written. Each row is the one the file's reader
    would have written, naming the episode and its file."""

    dataset: str
    episodes_file: str
    episodes: tuple[tuple[int, int], ...]  # [start, end) runs of the episodes
    files: tuple[OwnFile, ...]  # per episode, the files named (an MP4 missing hides the data file, as reads go)
    rule: str = "file_missing"

    @property
    def rows(self) -> int:
        return sum(end - start for start, end in self.episodes) * len(self.files)

    def episode_indices(self) -> Iterator[int]:
        return _in_ranges(self.episodes)

    def records(self) -> Iterator[FailureRecord]:
        from transforms.base import storage
        base = storage.join(self.dataset, "")
        # The row's text is the one LeRobotImportError(...).to_record() makes, put together here without the
        # exception: its parts other than the path are the same for every row, and this runs once per
        # missing file (hundreds of thousands of times for a dataset whose chunk folders are gone).
        head = f"[file_missing] dataset {self.dataset}, episodes file {self.episodes_file}, episode "
        clean, clean_path = redactor(), redactor(shapes=False)
        for ep in self.episode_indices():
            for what, rel in sorted(((f.what, f.path(ep)) for f in self.files), key=lambda x: x[1]):
                message = shorten(clean(f"{what} {rel} does not exist (expected at {base}{rel})"), MAX_MESSAGE_CHARS)
                file = shorten(clean_path(rel), MAX_FILE_CHARS)
                where = f", file {file}" if file != self.episodes_file else ""
                yield FailureRecord.cleaned(self.dataset, self.episodes_file, ep, file, "file_missing",
                                            clean(f"{head}{ep}{where}: {message}"))

    def first(self) -> FailureRecord:
        return next(self.records())

    def sort_key(self) -> tuple:
        return self.first().sort_key()


@dataclasses.dataclass(frozen=True)
class FileFailed:
    """The `file_failed` rows of the episodes of a failed episodes file that have no error of their own, each
    listed once in it: one record however many episodes, expanded row by row as errors.jsonl is written."""

    dataset: str
    episodes_file: str
    episodes: tuple[tuple[int, int], ...]  # [start, end) runs
    cause: Optional[FailureRecord]  # the failure the rows point to (the file's first)
    rule: str = "file_failed"

    @property
    def rows(self) -> int:
        return sum(end - start for start, end in self.episodes)

    def episode_indices(self) -> Iterator[int]:
        return _in_ranges(self.episodes)

    def records(self) -> Iterator[FailureRecord]:
        for ep in self.episode_indices():
            yield _file_failed_row(self.dataset, self.episodes_file, ep, self.cause, "")

    def first(self) -> FailureRecord:
        return next(self.records())

    def sort_key(self) -> tuple:
        return self.first().sort_key()


#: A record that stands for many errors.jsonl rows of one episodes file.
EpisodeFailures = Union[FilesMissing, FileFailed]


def episode_failures_json(f: EpisodeFailures) -> dict[str, Any]:
    """A record of many rows as JSON (the journal's part records hold it)."""
    doc: dict[str, Any] = {"dataset": f.dataset, "episodes_file": f.episodes_file,
                           "episodes": [list(r) for r in f.episodes]}
    if isinstance(f, FilesMissing):
        return {**doc, "kind": "files_missing", "files": [
            {"what": o.what, "key": o.template.key, "template": o.template.template,
             "allowed": list(o.template.allowed), "chunks_size": o.chunks_size, "video_key": o.video_key}
            for o in f.files]}
    return {**doc, "kind": "file_failed", "cause": f.cause.to_json_dict() if f.cause is not None else None}


def episode_failures_from_json(doc: dict[str, Any]) -> EpisodeFailures:
    """The record `episode_failures_json` wrote."""
    episodes = tuple((int(a), int(b)) for a, b in doc["episodes"])
    if doc["kind"] == "files_missing":
        files = tuple(OwnFile(str(o["what"]), PathTemplate(str(o["key"]), str(o["template"]), tuple(o["allowed"])),
                              int(o["chunks_size"]), o.get("video_key")) for o in doc["files"])
        return FilesMissing(str(doc["dataset"]), str(doc["episodes_file"]), episodes, files)
    cause = FailureRecord(**doc["cause"]) if doc.get("cause") else None
    return FileFailed(str(doc["dataset"]), str(doc["episodes_file"]), episodes, cause)


def row_count(failures: Iterable[Union[FailureRecord, EpisodeFailures]]) -> int:
    """How many errors.jsonl rows the failures make."""
    return sum(1 if isinstance(f, FailureRecord) else f.rows for f in failures)


def failure_rows(failures: Iterable[Union[FailureRecord, EpisodeFailures]]) -> Iterator[FailureRecord]:
    """Every errors.jsonl row of the failures, in errors.jsonl's order (`FailureRecord.sort_key`), identical
    rows once; records standing for many rows are expanded one row at a time (never all held at once)."""
    single, many = [], []
    for f in failures:
        (single if isinstance(f, FailureRecord) else many).append(f)
    streams = [sorted(set(single), key=FailureRecord.sort_key)] + [f.records() for f in dict.fromkeys(many)]
    last = None
    for row in heapq.merge(*streams, key=FailureRecord.sort_key):
        key = row.sort_key()
        if key != last:
            yield row
        last = key


@dataclasses.dataclass(frozen=True)
class PartFile:
    """A part moved into place: its path under the output root, size, rows and content digest, so a
    later check can tell the file is the one this import wrote."""

    path: str
    bytes: int
    rows: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PartResult:
    """A written (temporary) part, or why it could not be written."""

    dataset: str
    episodes_file: str
    part: int
    num_parts: int
    episode_indices: tuple[int, ...]
    tmp_uri: Optional[str] = None
    frames: int = 0
    bytes: int = 0
    data_bytes: int = 0
    oversized: bool = False
    failures: tuple[FailureRecord, ...] = ()
    sha256: str = ""
    #: v2.x: episodes left out of the written part because their own files are missing or broken (each
    #: failure names its episode); the part and its episodes file still import.
    dropped: tuple[FailureRecord, ...] = ()
    #: v2.x: the same, for episodes whose own files lie in folders that do not exist (left out at planning)
    episode_failures: tuple[EpisodeFailures, ...] = ()


@dataclasses.dataclass(frozen=True)
class FileOutcome:
    """How one episodes file ended: imported (with its parts) or failed (every episode accounted for)."""

    dataset: str
    episodes_file: str
    status: str  # "imported" | "failed"
    parts: tuple[str, ...] = ()  # output paths relative to the output root
    episodes: int = 0  # episodes (rows) read from the episodes file
    episodes_written: int = 0
    episodes_failed: int = 0  # rows of a failed file that errors.jsonl lists
    frames: int = 0
    bytes: int = 0
    data_bytes: int = 0
    failures: tuple[FailureRecord, ...] = ()
    notes: tuple[str, ...] = ()
    part_files: tuple[PartFile, ...] = ()
    #: failures of many episodes held as one record each (`FilesMissing`, `FileFailed`): their rows count
    #: and are written like `failures`' (`rows`)
    episode_failures: tuple[EpisodeFailures, ...] = ()

    @property
    def failure_count(self) -> int:
        """How many errors.jsonl rows the file has."""
        return len(self.failures) + row_count(self.episode_failures)

    def rows(self) -> Iterator[FailureRecord]:
        """The file's errors.jsonl rows, in order."""
        return failure_rows(self.failures + self.episode_failures)


def _because(first: Optional[FailureRecord], episode: int) -> str:
    """Why an episode without an error of its own was not imported: the episode whose error failed its
    file (its own errors.jsonl row has the cause in full), or the file-level cause."""
    if first is None:
        return "because its episodes file failed for a reason that was not recorded (rule accounting)"
    where = f" in {first.file}" if first.file and first.file != first.episodes_file else ""
    if first.episode_index is not None and first.episode_index != episode:
        return (f"because episode {first.episode_index} of the same episodes file failed ([{first.rule}]{where}; "
                f"its row says why): an episodes file imports all its episodes or none, so fixing episode "
                f"{first.episode_index} imports this one too")
    return f"because its episodes file failed: {first.message}"


def _file_failed_row(dataset: str, episodes_file: str, episode: int, first: Optional[FailureRecord],
                     occurrence: str) -> FailureRecord:
    return LeRobotImportError("file_failed", f"not imported{occurrence} {_because(first, episode)}", dataset=dataset,
                              episodes_file=episodes_file, episode_index=episode, file=episodes_file).to_record()


def failed_file(dataset: str, episodes_file: str, episode_indices: Sequence[int],
                failures: Sequence[FailureRecord], episode_failures: Sequence[EpisodeFailures] = ()) -> FileOutcome:
    """The outcome of a failed episodes file.

    errors.jsonl gets each failure found and, for every other row of the file (a duplicated
    episode_index counts once per row), a `file_failed` row saying why it was not imported (the
    episode whose error failed its file, or the file-level cause) and naming the episodes file itself,
    so episodes read = episodes written + episodes listed. The `file_failed` rows of episodes listed once
    are one `FileFailed` record, however many they are: a file of 300,000 episodes whose data files are
    gone crosses the pipeline as a few records, and its rows are made as errors.jsonl is written.

    Args:
        dataset: the dataset root URI.
        episodes_file: the episodes file, relative to the dataset root.
        episode_indices: the episode_index of every row of the file (what could be read of it).
        failures: what went wrong, in any order, duplicates allowed.
        episode_failures: failures of many episodes held as one record each (their episodes are named).
    """
    out = {f.sort_key(): f for f in failures}
    many = tuple(dict.fromkeys(episode_failures))
    named = Counter(f.episode_index for f in out.values() if f.episode_index is not None)
    for m in many:
        per_episode = len(m.files) if isinstance(m, FilesMissing) else 1
        for ep in m.episode_indices():
            named[ep] += per_episode
    firsts = list(out.values()) + [m.first() for m in many]
    first = min(firsts, key=FailureRecord.sort_key) if firsts else None
    rows = Counter(episode_indices)
    once = []
    for ep, count in rows.items():
        if count == 1 and not named.get(ep):
            once.append(ep)
            continue
        for k in range(named.get(ep, 0), count):
            occurrence = f" (row {k + 1} of {count} with this episode_index)" if count > 1 else ""
            rec = _file_failed_row(dataset, episodes_file, ep, first, occurrence)
            out[rec.sort_key()] = rec
    if once:
        many += (FileFailed(dataset, episodes_file, index_ranges(once), first),)
    # every row of the file is listed: by its own failure, or by a file_failed row
    return FileOutcome(dataset=dataset, episodes_file=episodes_file, status="failed", episodes=len(episode_indices),
                       episodes_failed=len(episode_indices), failures=tuple(out[k] for k in sorted(out)),
                       episode_failures=many)
