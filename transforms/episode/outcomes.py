"""How the pieces of an import ended: a written part, an episodes file's outcome, and the failures that
account for every episode of a file that did not import.

Plain frozen records: the Beam layer passes them between its steps, and the output writer
(`transforms.output.writes`) turns them into files, errors.jsonl rows and manifest entries.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Optional, Sequence

from transforms.base.errors import FailureRecord, LeRobotImportError


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


def failed_file(dataset: str, episodes_file: str, episode_indices: Sequence[int],
                failures: Sequence[FailureRecord]) -> FileOutcome:
    """The outcome of a failed episodes file.

    errors.jsonl gets each failure found and, for every other row of the file (a duplicated
    episode_index counts once per row), a `file_failed` row saying why it was not imported (the
    episode whose error failed the file, or the file-level cause) and naming the episodes file itself,
    so episodes read = episodes written + episodes listed.

    Args:
        dataset: the dataset root URI.
        episodes_file: the episodes file, relative to the dataset root.
        episode_indices: the episode_index of every row of the file (what could be read of it).
        failures: what went wrong, in any order, duplicates allowed.
    """
    out = {f.sort_key(): f for f in failures}
    named = Counter(f.episode_index for f in out.values() if f.episode_index is not None)
    rows = Counter(episode_indices)
    first = sorted(out.values(), key=FailureRecord.sort_key)[0] if out else None
    for ep, count in rows.items():
        for k in range(named.get(ep, 0), count):
            occurrence = f" (row {k + 1} of {count} with this episode_index)" if count > 1 else ""
            rec = LeRobotImportError("file_failed", f"not imported{occurrence} {_because(first, ep)}",
                                     dataset=dataset, episodes_file=episodes_file, episode_index=ep,
                                     file=episodes_file).to_record()
            out[rec.sort_key()] = rec
    listed = Counter(f.episode_index for f in out.values() if f.episode_index is not None)
    return FileOutcome(dataset=dataset, episodes_file=episodes_file, status="failed", episodes=len(episode_indices),
                       episodes_failed=sum(min(listed[ep], n) for ep, n in rows.items()),
                       failures=tuple(out[k] for k in sorted(out)))
