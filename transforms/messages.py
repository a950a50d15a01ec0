"""The small elements that flow through the import pipeline, and the pure steps that make them.

Keys are tuples of primitives (deterministic coders); values are frozen dataclasses holding paths,
ranges and results, never more data than one episode's frames.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Optional, Sequence

from transforms import storage
from transforms.lerobot.info import EPISODES_DIR, INFO_PATH, DatasetInfo, parse_info
from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT, EpisodeRow, PartPlan
from transforms.errors import FailureRecord, LeRobotImportError

PartKey = tuple  # (dataset_uri, episodes_file, part)
FileKey = tuple  # (dataset_uri, episodes_file)


@dataclasses.dataclass(frozen=True)
class ImportConfig:
    """What one pipeline run imports and how; pickled into every DoFn."""

    targets: tuple[tuple[str, str], ...]  # (dataset root URI, output root URI)
    read_in_parts: bool = False
    data_span_limit: int = DATA_SPAN_LIMIT
    inline_index: bool = False
    skip_videos: bool = False
    force: bool = False  # redo datasets whose last import is up to date
    run_id: str = ""
    started_at: str = ""

    def output_options(self) -> dict:
        """The options that change what an import writes (a previous import with others is not reused)."""
        return {"read_in_parts": self.read_in_parts, "data_span_limit": self.data_span_limit,
                "inline_index": self.inline_index, "skip_videos": self.skip_videos}

    def output_of(self, dataset: str) -> str:
        for root, out in self.targets:
            if root == dataset:
                return out
        raise KeyError(dataset)


@functools.lru_cache(maxsize=64)
def _load_info_cached(root: str, skip_videos: bool) -> DatasetInfo:
    try:
        raw = storage.read_bytes(storage.dataset_file(root, INFO_PATH), what="info file", file=INFO_PATH)
    except LeRobotImportError as ex:
        if ex.rule != "file_missing":
            raise
        raise LeRobotImportError("info_json", f"meta/info.json does not exist under {root}: is this the root of "
                                 "a LeRobot v3 dataset?", file=INFO_PATH) from None
    info = parse_info(raw)
    return info.without_videos() if skip_videos else info


def load_info(root: str, *, skip_videos: bool = False) -> DatasetInfo:
    """info.json of a dataset, parsed once per worker process."""
    return _load_info_cached(root, skip_videos)


@dataclasses.dataclass(frozen=True)
class PartHeader:
    """Everything the part writer needs besides frames and MP4 facts."""

    dataset: str
    episodes_file: str
    plan: PartPlan
    num_parts: int
    rows: tuple[EpisodeRow, ...]


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


def episodes_file_uris(root: str) -> list[str]:
    """`meta/episodes/<chunk>/<file>.parquet`, sorted by path. The folders are listed rather than globbed:
    the root and the names are the dataset's, and may hold `*`, `?` or `[`."""
    base = storage.join(root, EPISODES_DIR)
    return sorted(storage.join(base, f"{chunk}/{name}") for chunk in storage.list_dir(base, dirs=True)
                  for name in storage.list_dir(storage.join(base, chunk)) if name.endswith(".parquet"))


def failed_file(dataset: str, episodes_file: str, episode_indices: Sequence[int],
                failures: Sequence[FailureRecord]) -> FileOutcome:
    """The outcome of a failed episodes file. errors.jsonl gets each failure found and, for every other
    row of the file (a duplicated episode_index counts once per row), a `file_failed` row saying why
    it was not imported, so episodes read = episodes written + episodes listed."""
    out = {f.sort_key(): f for f in failures}
    named = Counter(f.episode_index for f in out.values() if f.episode_index is not None)
    rows = Counter(episode_indices)
    first = sorted(out.values(), key=FailureRecord.sort_key)[0] if out else None
    for ep, count in rows.items():
        for k in range(named.get(ep, 0), count):
            occurrence = f" (row {k + 1} of {count} with this episode_index)" if count > 1 else ""
            rec = FailureRecord(dataset=dataset, episodes_file=episodes_file, episode_index=ep,
                                file=first.file if first else None, rule="file_failed",
                                message=f"not imported{occurrence} because its episodes file failed: "
                                        f"{first.message if first else 'unknown reason'}")
            out[rec.sort_key()] = rec
    listed = Counter(f.episode_index for f in out.values() if f.episode_index is not None)
    return FileOutcome(dataset=dataset, episodes_file=episodes_file, status="failed", episodes=len(episode_indices),
                       episodes_failed=sum(min(listed[ep], n) for ep, n in rows.items()),
                       failures=tuple(out[k] for k in sorted(out)))


def error_record(ex: LeRobotImportError, *, dataset: str, episodes_file: Optional[str]) -> FailureRecord:
    return ex.with_context(dataset=dataset, episodes_file=episodes_file).to_record()
