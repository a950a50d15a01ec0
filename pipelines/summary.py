"""What a failed import prints on the terminal: its findings grouped by rule, bounded to a screen.

errors.jsonl keeps every row; the terminal gets, per rule, how many rows and episodes files it has,
the first message in full (it names the file, the episode, the cause and the next step) and the files
concerned, so the cause is seen without opening the file. Rows that only say an episode was not
imported because another episode of its file failed (`file_failed`) are counted in one line.
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Optional

#: Rules shown per dataset; the rest are named in one line.
MAX_RULES = 5
#: Files named per rule.
MAX_FILES = 3
#: A message longer than this is cut on the terminal (errors.jsonl has it whole).
MAX_MESSAGE_CHARS = 1200
#: Failed datasets whose findings a bulk run prints; the others get their summary line only.
MAX_DATASETS = 3


def parse_errors(raw: Optional[bytes]) -> list[dict]:
    """errors.jsonl rows (objects), skipping lines that do not parse."""
    rows = []
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("rule"), str):
            rows.append(row)
    return rows


def findings_lines(rows: Iterable[dict], errors_uri: str, *, indent: str = "  ") -> list[str]:
    """The terminal lines of a failed dataset's findings.

    Args:
        rows: its errors.jsonl rows, in the file's order.
        errors_uri: where errors.jsonl is (named in the last line).
        indent: prefix of every line.
    """
    rows = list(rows)
    by_rule: dict[str, list[dict]] = {}
    for row in rows:
        by_rule.setdefault(row["rule"], []).append(row)
    consequences = by_rule.pop("file_failed", [])
    ordered = sorted(by_rule.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = []
    for rule, found in ordered[:MAX_RULES]:
        files_of = sorted({r.get("episodes_file") for r in found if r.get("episodes_file")})
        where = f" in {_count(len(files_of), 'episodes file')}" if files_of else ""
        lines.append(f"{indent}{rule}: {_count(len(found), 'error')}{where}")
        lines.append(f"{indent}  {_cut(str(found[0].get('message', '')))}")
        # the files beyond the one the first message names: each file said once
        named = [f for f in dict.fromkeys(str(r["file"]) for r in found if r.get("file")) if f not in lines[-1]]
        if named:
            more = f" (+{len(named) - MAX_FILES} more)" if len(named) > MAX_FILES else ""
            lines.append(f"{indent}  also: {', '.join(named[:MAX_FILES])}{more}")
    if len(ordered) > MAX_RULES:
        rest = ordered[MAX_RULES:]
        lines.append(f"{indent}... and {_count(sum(len(f) for _, f in rest), 'error')} of "
                     f"{len(rest)} more rules ({', '.join(r for r, _ in rest)})")
    if consequences:
        lines.append(f"{indent}file_failed: {_count(len(consequences), 'more episode')} not imported only because "
                     "another episode of their episodes file failed")
    lines.append(f"{indent}every row: {errors_uri} ({_count(len(rows), 'row')})")
    return lines


def _cut(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return f"{text[:MAX_MESSAGE_CHARS]}… (cut here, the whole message is in errors.jsonl)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def episodes_left_out_line(doc: dict, *, indent: str = "  ") -> Optional[str]:
    """How many episodes a v2.x dataset's imported groups left out (each failed alone, on its own missing or
    broken files), or None when none did."""
    left = [e for e in (doc.get("episodes_files") or {}).values()
            if isinstance(e, dict) and e.get("status") == "imported" and e.get("episodes_failed")]
    if not left:
        return None
    lost = sum(int(e["episodes_failed"]) for e in left)
    written = sum(int(e.get("episodes_written") or 0) for e in left)
    return (f"{indent}{_count(lost, 'episode')} not imported, each on its own missing or broken files (named in "
            f"errors.jsonl); the other {_count(written, 'episode')} of {'its' if len(left) == 1 else 'their'} "
            f"{_count(len(left), 'group')} imported")


#: The note a dataset gets per camera whose MP4s are missing or unusable (`write_outputs.skip_videos_notes`).
_CAMERA_NOTE = re.compile(r"camera `(?P<camera>[^`]+)`: \d+ MP4 files? (is|are) missing or unusable .*--skip-videos")


def notes_lines(notes: Iterable[str], *, indent: str = "  ") -> list[str]:
    """A dataset's notes for the terminal: the per-camera notes of missing or unusable MP4s (whose files the
    findings above name already) in one line with the way out, the others as they are."""
    notes = list(notes)
    cameras = [m.group("camera") for m in map(_CAMERA_NOTE.match, notes) if m]
    lines = [f"{indent}note: {n}" for n in notes if not _CAMERA_NOTE.match(n)][:MAX_RULES]
    if cameras:
        lines.append(f"{indent}note: --skip-videos imports the dataset without its video features (MP4s of "
                     f"{', '.join(f'`{c}`' for c in cameras)} missing or unusable, named above)")
    return lines
