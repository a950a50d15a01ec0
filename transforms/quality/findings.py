"""The data-quality checks' findings and severities, the per-episode table and the manifest summary (the
checks themselves, their names and descriptions: `transforms.quality.checks`).

A finding is one check that one episode (or one episodes file, or the dataset) fails, with the feature
concerned, how many frames (or values) it touches, the first frame and a one-line detail. Every check is a
warning unless the run names it in `--strict`, which makes its findings errors of their episodes files.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, Iterable, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

WARNING = "warning"
ERROR = "error"

#: What a finding of a check LeRobot's loader refuses (`checks.LEROBOT_BLOCKING`) adds.
REFUSED = "LeRobot's loader will refuse this dataset"

#: The table each `quality/...parquet` file holds.
SCHEMA = pa.schema([
    pa.field("dataset", pa.utf8(), nullable=False),
    pa.field("episodes_file", pa.utf8()),
    pa.field("episode_index", pa.int64()),
    pa.field("check", pa.utf8(), nullable=False),
    pa.field("severity", pa.utf8(), nullable=False),
    pa.field("feature", pa.utf8()),
    pa.field("count", pa.int64(), nullable=False),
    pa.field("first_frame", pa.int64()),
    pa.field("detail", pa.utf8(), nullable=False),
])


@dataclasses.dataclass(frozen=True)
class Finding:
    """One check failed by one episode (episode_index None: by an episodes file or the dataset)."""

    dataset: str
    episodes_file: Optional[str]
    episode_index: Optional[int]
    check: str
    feature: Optional[str]
    count: int
    first_frame: Optional[int]
    detail: str
    severity: str = WARNING
    file: Optional[str] = None  # the data file or MP4 concerned, for the error a strict check makes

    def sort_key(self) -> tuple:
        return (self.episodes_file or "", -1 if self.episode_index is None else self.episode_index, self.check,
                self.feature or "", self.detail)


def with_severity(findings: Iterable[Finding], strict: Iterable[str]) -> list[Finding]:
    """The findings, those of the `strict` checks made errors."""
    strict = frozenset(strict)
    return [dataclasses.replace(f, severity=ERROR) if f.check in strict else f for f in findings]


def table(findings: Sequence[Finding]) -> pa.Table:
    """The findings as the quality table, in a stable order."""
    rows = sorted(findings, key=Finding.sort_key)
    columns = {name: [getattr(f, name) for f in rows] for name in SCHEMA.names}
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def table_bytes(findings: Sequence[Finding]) -> bytes:
    """The quality table as Parquet bytes (deterministic: the same findings give the same bytes)."""
    sink = io.BytesIO()
    pq.write_table(table(findings), sink, compression="zstd")
    return sink.getvalue()


def summarize(findings: Iterable[Finding]) -> dict[str, dict[str, Any]]:
    """`{check: {"episodes": N, "findings": M, "severity": ..., "example": detail}}` of some findings: N counts
    the distinct episodes with a finding (0 for a check of the dataset or a file), the example is the first."""
    out: dict[str, dict[str, Any]] = {}
    episodes: dict[str, set] = {}
    for f in sorted(findings, key=Finding.sort_key):
        entry = out.setdefault(f.check, {"episodes": 0, "findings": 0, "severity": f.severity, "example": f.detail})
        entry["findings"] += 1
        if f.severity == ERROR:
            entry["severity"] = ERROR
        if f.episode_index is not None:
            episodes.setdefault(f.check, set()).add((f.episodes_file, f.episode_index))
    for check, seen in episodes.items():
        out[check]["episodes"] = len(seen)
    return {check: out[check] for check in sorted(out)}


def merge_summaries(summaries: Iterable[Optional[Mapping[str, Mapping[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Several summaries (per episodes file, and the dataset's own) as one: counts added, the first example
    kept, an error wherever one file's findings are errors."""
    out: dict[str, dict[str, Any]] = {}
    for summary in summaries:
        for check, entry in (summary or {}).items():
            if not isinstance(entry, Mapping):
                continue
            have = out.setdefault(check, {"episodes": 0, "findings": 0, "severity": WARNING,
                                          "example": entry.get("example", "")})
            have["episodes"] += int(entry.get("episodes") or 0)
            have["findings"] += int(entry.get("findings") or 0)
            if entry.get("severity") == ERROR:
                have["severity"] = ERROR
    return {check: out[check] for check in sorted(out)}


def message(f: Finding) -> str:
    """The errors.jsonl message of a finding a strict check made an error."""
    return f"quality check `{f.check}` (--strict): {f.detail}"
