"""What a run prints and leaves for its operator: each dataset's summary line, a failed dataset's findings
grouped by rule and bounded to a screen, the quality line, the run's counters, and a bulk run's report.

errors.jsonl keeps every row; the terminal gets, per rule, how many rows and episodes files it has,
the first message in full (it names the file, the episode, the cause and the next step) and the files
concerned, so the cause is seen without opening the file. Rows that only say an episode was not
imported because another episode of its file failed (`file_failed`) are counted in one line.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

if TYPE_CHECKING:
    from pipelines.targets import RunTargets
    from transforms.work.messages import ImportConfig


BULK_REPORT = "bulk_report.json"


def write_bulk_report(output: str, config: ImportConfig, planned: RunTargets, targets,
                      outcomes: dict[str, str]) -> None:
    """OUT/bulk_report.json of a run over several datasets: each dataset's outcome (imported, failed,
    unchanged, held by another run, refused as no dataset) and the folders skipped as not datasets, so a
    scheduler reads one file instead of every dataset's manifest. Each run replaces it."""
    from transforms.base import storage
    from transforms.output import writes

    rows = [{"dataset": root, "output": out, "outcome": outcomes.get(root, "held")} for root, out in targets]
    rows += [{"dataset": root, "output": out, "outcome": "refused", "reason": why}
             for root, out, why in planned.refused]
    doc = {"run_id": config.run_id, "started_at": config.started_at, "finished_at": writes.now_iso(),
           "datasets": sorted(rows, key=lambda r: r["dataset"]), "not_datasets": list(planned.not_datasets)}
    try:
        storage.write_atomic(storage.join(storage.normalize_root(output), BULK_REPORT),
                             (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    except OSError as ex:  # the datasets' own outputs are written: the report only sums them up
        print(f"warning: could not write {BULK_REPORT} under {output}: {ex}")


def left_out_lines(planned: RunTargets) -> list[str]:
    """One line per root the run leaves out before writing anything: a named root that is not a dataset
    (a failure of the run), a folder a glob matched that holds no meta/info.json (a note)."""
    lines = [f"{root}: FAILED - {why} (nothing written to {out})" for root, out, why in planned.refused]
    lines += [f"{folder}: skipped - not a dataset (no meta/info.json)" for folder in planned.not_datasets]
    return lines


def summarize(result, config: ImportConfig, outcomes: Optional[dict[str, str]] = None, *,
              metrics: bool = True) -> int:
    """Print each dataset's outcome (a failed one's findings grouped by rule) and, with `metrics` (-v), the
    run's counters; 1 when any dataset failed. `outcomes` is filled in: root -> imported, failed, unchanged."""
    from apache_beam.metrics.metric import MetricsFilter

    from transforms.base import live_counts, storage
    from transforms.output import safety
    from transforms.import_dataset import NAMESPACE
    counters: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        # one counter per step that counts it (hub_retries in any step that reads): the run's total is the sum
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    outcomes = {} if outcomes is None else outcomes
    status = shown = 0
    unfinished = live_counts.unfinished(config.run_id)
    for root, out in config.targets:
        if root in unfinished or (counters.get("datasets_unfinished") and len(config.targets) == 1):
            why = unfinished.get(root) or "its manifest could not be written (see the run's log)"
            print(f"{root}: FAILED - {why} (manifest.json and errors.jsonl left as the last run wrote them) -> {out}")
            status, outcomes[root] = 1, "failed"
            continue
        doc = safety.read_manifest(out, listings=False).doc  # its counts: not a path per episode of a v2.x group
        if doc is None:
            print(f"{root}: FAILED - no manifest was written -> {out}")
            status, outcomes[root] = 1, "failed"
            continue
        if doc.get("run_id") != config.run_id:
            print(f"{root}: skipped - unchanged since its import of {doc.get('finished_at')} (--force redoes it)")
            outcomes[root] = "unchanged"
            continue
        print(f"{root}: {summary_line(doc)} -> {out}")
        outcomes[root] = doc["status"]
        found = quality_line(doc)
        if found:
            print(f"  {found}: {storage.join(out, 'quality')}")
        if doc["status"] != "imported":
            status = 1
            errors_uri = storage.join(out, "errors.jsonl")
            if shown < MAX_DATASETS:
                shown += 1
                left_out = episodes_left_out_line(doc)
                if left_out:
                    print(left_out)
                rows = _read_errors(errors_uri)
                for line in findings_lines(rows, errors_uri, rows_total=lambda: rows.total):
                    print(line)
            else:
                print(f"  errors: {errors_uri}")
        if shown <= MAX_DATASETS:
            for line in notes_lines(doc.get("notes") or []):
                print(line)
    if counters and metrics:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    return status


def _read_errors(uri: str) -> _ErrorRows:
    """errors.jsonl for the terminal summary (`_ErrorRows`)."""
    return _ErrorRows(uri)


class _ErrorRows:
    """errors.jsonl's rows for the terminal summary, read a piece at a time (`ERRORS_PIECE`) and each row parsed
    as it is read: what is held at once is a piece and the line it ends, not the file (hundreds of megabytes
    for hundreds of thousands of failed episodes). The rows parsed are those of its first `MAX_ERRORS_READ` bytes
    (whole lines; all of them when the file is no larger); a larger file's other rows are counted, not parsed.
    No rows when it cannot be read (a FIFO, a link, storage refused it): the summary says where it is.

    `total`, once the rows have been gone through: how many rows the whole file has when it is larger than
    what is parsed, else None."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.total: Optional[int] = None

    def __iter__(self) -> Iterator[dict]:
        return _rows(self._lines())

    def _lines(self) -> Iterator[bytes]:
        """The lines to parse, without their newlines."""
        from transforms.base import storage
        from transforms.base.errors import LeRobotImportError

        self.total = None
        try:
            f = storage.open_state_file(self.uri, what="errors file", file="errors.jsonl")
        except (LeRobotImportError, OSError):
            return
        if f is None:
            return
        with f:
            try:
                left, rest, rows = MAX_ERRORS_READ, [], 0  # rest: the pieces of the line not ended yet
                while left:
                    piece = f.read(min(left, ERRORS_PIECE))
                    if not piece:
                        break
                    left -= len(piece)
                    lines = piece.split(b"\n")
                    rest.append(lines.pop())
                    if lines:
                        lines[0] = b"".join(rest[:-1]) + lines[0]
                        rest = rest[-1:]
                        rows += len(lines)
                        yield from lines
                more = f.read(ERRORS_PIECE)
                if not more:  # the file ends within the bound: its last line too, newline or not
                    last = b"".join(rest)
                    if last:
                        yield last
                    return
                # a larger file: its rows past the bound (from the first line not read whole) are counted
                while more:
                    rows += more.count(b"\n")
                    more = f.read(ERRORS_PIECE)
                self.total = rows
            except OSError:
                return


#: The terminal summary parses errors.jsonl's rows up to this size (about 100,000 rows); a larger file's other rows
#: are counted, not parsed.
MAX_ERRORS_READ = 64 << 20
#: errors.jsonl is read this many bytes at a time by the terminal summary.
ERRORS_PIECE = 1 << 20


def summary_line(doc: dict) -> str:
    """A dataset's outcome in one line, every number taken from its manifest's totals (so the line, the
    manifest and errors.jsonl agree). A dataset that failed before its episodes files were listed has
    "0 episodes files", not "0/0"."""
    t = doc["totals"]
    files = (f"{t['episodes_files_imported']}/{t['episodes_files']} episodes files" if t["episodes_files"]
             else "0 episodes files")
    line = (f"{doc['status']} - {t['episodes_written']}/{t['episodes']} episodes, {t['frames']} frames, {files}, "
            f"{_count(t['errors'], 'error')}")
    kept = [f"{t[k]} {word}" for k, word in (("episodes_files_unchanged", "unchanged"),
                                              ("episodes_files_removed", "removed")) if t.get(k)]
    if kept:  # an incremental run: what it left alone and what it removed
        line += f" ({', '.join(kept)})"
    if t.get("warnings"):
        line += f", {_count(t['warnings'], 'warning')}"
    checks = (doc.get("quality") or {}).get("checks") or {}
    if checks:
        line += f", {_count(sum(int(c.get('findings') or 0) for c in checks.values()), 'quality finding')}"
    return line


def quality_line(doc: dict) -> str:
    """What the quality checks found, per check, and whether LeRobot's loader refuses the dataset ("" when
    nothing was found)."""
    from transforms import quality

    checks = (doc.get("quality") or {}).get("checks") or {}
    if not checks:
        return ""
    shown = ", ".join(f"{name} ({c.get('episodes') or c.get('findings')} "
                      f"{'episodes' if c.get('episodes') else 'findings'}"
                      f"{', error' if c.get('severity') == quality.ERROR else ''})" for name, c in checks.items())
    blocking = sorted(set(checks) & quality.LEROBOT_BLOCKING)
    refusal = f"; {quality.REFUSED} ({', '.join(blocking)})" if blocking else ""
    return f"quality: {shown}{refusal}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


#: Rules shown per dataset; the rest are named in one line.
MAX_RULES = 5


#: Files named per rule.
MAX_FILES = 3


#: A message longer than this is cut on the terminal (errors.jsonl has it whole).
MAX_MESSAGE_CHARS = 1200


#: Failed datasets whose findings a bulk run prints; the others get their summary line only.
MAX_DATASETS = 3


def _rows(lines: Iterable[bytes]) -> Iterator[dict]:
    """errors.jsonl rows (objects) of its lines (split at newlines), skipping lines that do not parse; one line
    decoded at a time."""
    for chunk in lines:
        for line in chunk.decode("utf-8", "replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("rule"), str):
                yield row


def findings_lines(rows: Iterable[dict], errors_uri: str, *, indent: str = "  ",
                   rows_total: Optional[int] | Callable[[], Optional[int]] = None) -> list[str]:
    """The terminal lines of a failed dataset's findings.

    Args:
        rows: its errors.jsonl rows, in the file's order (the first of them, when `rows_total` is given).
        errors_uri: where errors.jsonl is (named in the last line).
        indent: prefix of every line.
        rows_total: the rows of the whole file, when `rows` are only its first (or what tells it once the rows
            have been gone through: a reader that counts the file's rows as it reads them).
    """
    # per rule, what its lines say (counted as the rows go by: the rows themselves are not kept)
    by_rule: dict[str, _RuleRows] = {}
    total = 0
    for row in rows:
        total += 1
        found = by_rule.get(row["rule"])
        if found is None:
            found = by_rule[row["rule"]] = _RuleRows(str(row.get("message", "")))
        found.count += 1
        if row.get("episodes_file"):
            found.episodes_files.add(row.get("episodes_file"))
        if row.get("file"):
            found.files[str(row["file"])] = None
    if callable(rows_total):
        rows_total = rows_total()
    consequences = by_rule.pop("file_failed", None)
    ordered = sorted(by_rule.items(), key=lambda kv: (-kv[1].count, kv[0]))
    lines = []
    for rule, found in ordered[:MAX_RULES]:
        files_of = found.episodes_files
        where = f" in {_count(len(files_of), 'episodes file')}" if files_of else ""
        lines.append(f"{indent}{rule}: {_count(found.count, 'error')}{where}")
        lines.append(f"{indent}  {_cut(found.first_message)}")
        # the files beyond the one the first message names: each file said once
        named = [f for f in found.files if f not in lines[-1]]
        if named:
            more = f" (+{len(named) - MAX_FILES} more)" if len(named) > MAX_FILES else ""
            lines.append(f"{indent}  also: {', '.join(named[:MAX_FILES])}{more}")
    if len(ordered) > MAX_RULES:
        rest = ordered[MAX_RULES:]
        lines.append(f"{indent}... and {_count(sum(f.count for _, f in rest), 'error')} of "
                     f"{len(rest)} more rules ({', '.join(r for r, _ in rest)})")
    if consequences:
        lines.append(f"{indent}file_failed: {_count(consequences.count, 'more episode')} not imported only because "
                     "another episode of their episodes file failed")
    if rows_total is not None and rows_total > total:
        lines.append(f"{indent}every row: {errors_uri} ({_count(rows_total, 'row')}; the lines above count its "
                     f"first {total:,})")
    else:
        lines.append(f"{indent}every row: {errors_uri} ({_count(total, 'row')})")
    return lines


class _RuleRows:
    """What the terminal says of one rule's rows: how many, the first one's message, the episodes files and
    the files they name (each once, in order)."""

    def __init__(self, first_message: str) -> None:
        self.first_message = first_message
        self.count = 0
        self.episodes_files: set = set()
        self.files: dict[str, None] = {}


def _cut(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return f"{text[:MAX_MESSAGE_CHARS]}… (cut here, the whole message is in errors.jsonl)"


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


#: The note a dataset gets per camera whose MP4s are missing or unusable (`finish_datasets.skip_videos_notes`).
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
