"""`lerobot-import verify OUT [--sources]`: check an import against its manifest.

    lerobot-import verify out/so101              one dataset's output
    lerobot-import verify gs://bucket/imports    a bulk output: every OUT/<name>/ that has a manifest
    lerobot-import verify OUT --sources          also: which episodes files are stale against the dataset

What holds for a sound import, each checked and each failure named by its file:
  * every part the manifest lists exists, with the size and sha256 it records (`part_files`), opens as
    Parquet, and holds the recorded number of rows (episodes); a manifest that records no
    `part_files` is checked for existence, readability and the episodes it counts;
  * every media_index shard listed exists, with the size, sha256 and rows it records
    (`media_index_files`; an older manifest without them: exists and opens as Parquet);
  * errors.jsonl holds one row per error the manifest counts;
  * no file under `episodes/` or `media_index/` that the manifest does not list, and no temporary
    file (`.<name>.tmp-*`) left anywhere in the output by a write that never finished;
  * with `--sources`: every episodes file is as the dataset has it now (none new, changed, gone, or
    failed last time), as the next run would decide; the dataset's info.json is one an import accepts
    and its last import did not fail as a whole; no episodes file the next run would import references
    a data file or MP4 that is not there (`would_fail`, an MP4's with the `--skip-videos` hint).

Exit status 0 when all holds, 1 with the list of problems, and, when the import repairs them, the command
that does (`repair_command`): the same import again (with --verify-output when only a checksum shows the
damage, with --force when nothing the next run checks would).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import shlex
import sys
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.output import journal, paths, safety
from transforms.output.incremental import decide_run
from transforms.base.errors import LeRobotImportError, quote
from transforms.output.lease import LEASE_NAME
from transforms.lerobot import sources
from transforms.lerobot.layouts import layout_of

#: Files of an output that no manifest lists and that are not leftovers: the lease and its lock file.
_RUN_FILES = (LEASE_NAME, LEASE_NAME + ".lock")
#: Parts checked at once (reads from an object store overlap).
CHECK_THREADS = 8
_BLOCK = 8 * 1024 * 1024

#: Why the next run would import or remove an episodes file, as a verify problem says it.
STALE_REASONS = {
    "new": "a new episodes file of the dataset, not imported yet",
    "sources changed": "its sources changed since it was imported (info.json, the episodes file, or a data file "
                       "or MP4 it references)",
    "failed last run": "its last import failed (errors.jsonl says why); the next run imports it again",
    sources.EPISODES_FAILED_REASON: "some of its episodes failed last run (errors.jsonl names them); the next run "
                                    "imports it again",
    "no recorded sources": "the manifest records no source fingerprint for it (an import that did not record "
                           "one): the next run imports it again",
    "gone": "no longer in the dataset; the next run removes its output",
    "MP4 index not recorded": "an MP4 it uses has no current row in media_index/ (new, changed, or its shard "
                              "failed to write): the next run imports it again, reading that MP4",
    "older media_index layout": "the output was written in an older media_index/ layout: the next run imports "
                                "the dataset again whole",
}


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing that does not hold, named by its file (relative to the output root, or for a stale
    episodes file its path in the dataset)."""

    path: str
    kind: str  # manifest | interrupted | failed | missing | size | checksum | unreadable | rows | unlisted | tmp |
    #            errors | stale | would_fail | sources
    message: str

    def __str__(self) -> str:
        return f"{self.path}: [{self.kind}] {self.message}"


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """The verification of one dataset's output."""

    output: str
    problems: tuple[Problem, ...]
    parts: int = 0  # parts checked
    checksums: int = 0  # of them, checked against a recorded size and sha256
    media_index_files: int = 0
    sources_checked: bool = False
    dataset: Optional[str] = None  # the dataset the manifest names
    options: Optional[dict] = None  # the options it was imported with

    def repair_command(self, output: Optional[str] = None) -> Optional[str]:
        """The line saying which command repairs the problems found, or None when no import does.

        Args:
            output: the output root as the user wrote it (default: this report's URI).
        """
        return repair_command(self, output)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if not self.ok:
            return f"{self.output}: {len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"
        sums = f"{self.checksums} checksums" if self.checksums else "no checksums recorded"
        return (f"{self.output}: ok - {self.parts} parts ({sums}), {self.media_index_files} media_index files"
                + (", sources current" if self.sources_checked else ""))


@dataclasses.dataclass(frozen=True)
class _PartCheck:
    path: str
    problems: tuple[Problem, ...]
    rows: Optional[int]  # rows read from the footer, when it opens
    checksum: bool  # checked against a recorded sha256


def verify(output: str, *, check_sources: bool = False) -> list[VerifyReport]:
    """Verify a dataset output, or every dataset output under a bulk output root.

    Args:
        output: the output root (local path or fsspec URL).
        check_sources: also compare each episodes file's recorded sources with the dataset now.
    Returns:
        One report per dataset output (a bulk root with no dataset output: one report with the problem).
    """
    out = storage.normalize_root(output)
    if storage.exists(storage.join(out, paths.MANIFEST)):
        return [verify_output(out, check_sources=check_sources)]
    subs = [storage.join(out, name) for name in storage.list_dir(out, dirs=True)
            if storage.exists(storage.join(out, f"{name}/{paths.MANIFEST}"))]
    if not subs:
        return [VerifyReport(out, (Problem(paths.MANIFEST, "manifest", f"no {paths.MANIFEST} in {out}, nor in any "
                                           "folder under it: is this an import's output?"),))]
    return [verify_output(sub, check_sources=check_sources) for sub in subs]


def verify_output(out: str, *, check_sources: bool = False) -> VerifyReport:
    """Verify one dataset output against its manifest (see the module docstring for what is checked)."""
    out = storage.normalize_root(out)
    try:
        safety.check_output(out)  # nothing is read through a link or from a FIFO or device
    except LeRobotImportError as ex:
        return VerifyReport(out, (Problem(ex.file or ".", "confinement", ex.message),))
    manifest, problem = _read_manifest(out)
    if manifest is None:
        return VerifyReport(out, (problem,))
    entries = {rel: e for rel, e in (manifest.get("episodes_files") or {}).items() if isinstance(e, dict)}
    problems: list[Problem] = []
    checks = _check_parts(out, entries)
    for check in checks:
        problems += check.problems
    problems += _check_rows_without_records(entries, {c.path: c for c in checks})
    media_index = [p for p in manifest.get("media_index") or [] if isinstance(p, str)]
    records = {r.get("path"): r for r in manifest.get("media_index_files") or [] if isinstance(r, dict)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        index_checks = list(pool.map(lambda path: _check_media_index(out, path, records.get(path)), media_index))
    problems += [p for found in index_checks for p in found]
    interrupted = manifest.get("status") == journal.INTERRUPTED
    if interrupted:
        problems.append(_interrupted_problem(out, manifest))
    # errors.jsonl is written when a run finishes: a stopped run's output has none yet, and that is no damage.
    if not interrupted or storage.exists(storage.join(out, paths.ERRORS)):
        problems += _check_errors_file(out, manifest)
    listed = {c.path for c in checks} | set(media_index)
    problems += _check_listing(out, listed)
    if check_sources:  # which files failed last time, and whether they would again
        problems += stale_episodes_files(manifest)
    else:
        problems += _failed_imports(out, manifest, entries)
    dataset = manifest.get("dataset") if isinstance(manifest.get("dataset"), str) else None
    options = manifest.get("options") if isinstance(manifest.get("options"), dict) else None
    return VerifyReport(out, tuple(sorted(set(problems))), parts=len(checks),
                        checksums=sum(c.checksum for c in checks), media_index_files=len(media_index),
                        sources_checked=check_sources, dataset=dataset, options=options)


def _interrupted_problem(out: str, manifest: dict) -> Problem:
    """The manifest records a run that was stopped (Ctrl-C, SIGTERM, a deadline) before it finished."""
    committed = sum(isinstance(e, dict) and e.get("status") in ("imported", "unchanged")
                    for e in (manifest.get("episodes_files") or {}).values())
    noun = "episodes file was" if committed == 1 else "episodes files were"
    return Problem(paths.MANIFEST, "interrupted", f"the last import was interrupted before it finished: {committed} "
                   f"{noun} committed and recorded, the rest of the dataset is not imported yet ({paths.ERRORS} "
                   "is written when a run finishes)")


#: errors.jsonl lines read to name the rules that failed an episodes file (its first lines say enough).
_ERROR_LINES_READ = 10_000


def _failed_imports(out: str, manifest: dict, entries: dict[str, dict]) -> list[Problem]:
    """What the last import failed: an episodes file whose status is `failed` (its episodes are not in the
    output), or the dataset as a whole (a manifest of status `failed` without any episodes file). The
    files are sound, but the output does not hold the dataset: verify does not call that ok."""
    failed = {rel: e for rel, e in entries.items() if e.get("status") == "failed"
              or (e.get("status") == "imported" and _int(e.get("episodes_failed")))}
    if not failed:
        if manifest.get("status") == "failed" and not entries:
            return [Problem(paths.MANIFEST, "failed", f"the last import failed as a whole, before any episodes file "
                            f"was imported ({paths.ERRORS} says why)")]
        return []
    rules = _error_rules(out)
    problems = []
    for rel, entry in sorted(failed.items()):
        episodes, lost = entry.get("episodes"), entry.get("episodes_failed")
        count = f"{quote(lost)} of {quote(episodes)} episodes" if episodes is not None else "its episodes"
        why = ", ".join(f"{rule} ({n})" for rule, n in sorted(rules.get(rel, {}).items()))
        what = "its last import failed" if entry.get("status") == "failed" else "imported without some episodes"
        problems.append(Problem(rel, "failed", f"{what}: {count} not in the output"
                                + (f"; {paths.ERRORS}: {why}" if why else f" ({paths.ERRORS} says why)")
                                + "; fix the cause, then run the import again"))
    return problems


def _error_rules(out: str) -> dict[str, dict[str, int]]:
    """{episodes file: {rule: rows}} of the first lines of errors.jsonl (none when it cannot be read)."""
    found: dict[str, dict[str, int]] = {}
    try:
        fs, full = storage.filesystem(safety.confined(out, paths.ERRORS, folder=None, what="errors file"))
        with fs.open(full, "rb") as f:
            for _, line in zip(range(_ERROR_LINES_READ), f):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("episodes_file"), str):
                    rules = found.setdefault(row["episodes_file"], {})
                    rule = str(row.get("rule") or "?")
                    rules[rule] = rules.get(rule, 0) + 1
    except (OSError, LeRobotImportError):
        return {}
    return found


def _read_manifest(out: str) -> tuple[Optional[dict], Optional[Problem]]:
    found = safety.read_manifest(out)
    if found.doc is not None:
        return found.doc, None
    if found.problem is None:
        return None, Problem(paths.MANIFEST, "manifest", f"no {paths.MANIFEST} in {out}")
    kind = "confinement" if found.confinement else "manifest"
    return None, Problem(paths.MANIFEST, kind, found.problem.message)


def _check_parts(out: str, entries: dict[str, dict]) -> list[_PartCheck]:
    """Check every part every episodes file lists, several at once."""
    work = []
    for entry in entries.values():
        records = {r.get("path"): r for r in entry.get("part_files") or [] if isinstance(r, dict)}
        work += [(part, records.get(part)) for part in entry.get("parts") or [] if isinstance(part, str)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        return list(pool.map(lambda item: _check_part(out, *item), work))


def _check_part(out: str, path: str, record: Optional[dict]) -> _PartCheck:
    """One part: exists; size and sha256 as recorded; opens as Parquet; rows as recorded."""
    folder = path.split("/", 1)[0] if path.startswith(paths.MEDIA_INDEX_DIR + "/") else paths.EPISODES_DIR
    try:
        uri = safety.confined(out, path, folder=folder, what="file")
    except LeRobotImportError as ex:
        return _PartCheck(path, (Problem(path, "confinement", ex.message),), None, False)
    fs, full = storage.filesystem(uri)
    try:
        size, digest = _size_and_digest(fs, full)
    except FileNotFoundError:
        return _PartCheck(path, (Problem(path, "missing", "listed in the manifest but not in the output"),), None,
                          False)
    problems = []
    if record is not None and int(record.get("bytes", -1)) != size:
        problems.append(Problem(path, "size", f"{size} bytes, the manifest records {record.get('bytes')}: "
                                "truncated or rewritten since the import"))
    elif record is not None and record.get("sha256") and record["sha256"] != digest:
        problems.append(Problem(path, "checksum", f"sha256 {digest[:16]}..., the manifest records "
                                f"{str(record['sha256'])[:16]}...: the content changed since the import"))
    rows, unreadable = _parquet_rows(fs, full)
    if unreadable:
        problems.append(Problem(path, "unreadable", f"does not open as Parquet: {unreadable}"))
    elif record is not None and record.get("rows") is not None and int(record["rows"]) != rows:
        problems.append(Problem(path, "rows", f"holds {rows} rows, the manifest records {record['rows']}"))
    return _PartCheck(path, tuple(problems), rows, record is not None and bool(record.get("sha256")))


def _size_and_digest(fs, full: str) -> tuple[int, str]:
    sha, size = hashlib.sha256(), 0
    with fs.open(full, "rb") as f:
        while block := f.read(_BLOCK):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


def _parquet_rows(fs, full: str) -> tuple[Optional[int], Optional[str]]:
    """(rows, None), or (None, why the file does not open as Parquet)."""
    try:
        with fs.open(full, "rb") as f:
            return pq.ParquetFile(f).metadata.num_rows, None
    except FileNotFoundError:
        return None, "it does not exist"
    except (pa.ArrowException, OSError, ValueError) as ex:
        return None, str(ex).splitlines()[0] if str(ex) else type(ex).__name__


def _check_media_index(out: str, path: str, record: Optional[dict]) -> list[Problem]:
    """A media_index shard: as a part is checked when the manifest records its size, sha256 and rows
    (`media_index_files`), else only that it exists and opens as Parquet."""
    if record is None:
        return _check_readable(out, path, "media_index part")
    found = _check_part(out, path, record).problems
    return [dataclasses.replace(p, message=f"media_index shard: {p.message}") for p in found]


def _check_readable(out: str, path: str, what: str) -> list[Problem]:
    try:
        uri = safety.confined(out, path, folder=paths.MEDIA_INDEX_DIR, what=what)
    except LeRobotImportError as ex:
        return [Problem(path, "confinement", ex.message)]
    fs, full = storage.filesystem(uri)
    if not fs.exists(full):
        return [Problem(path, "missing", f"{what} listed in the manifest but not in the output")]
    _, unreadable = _parquet_rows(fs, full)
    return [Problem(path, "unreadable", f"{what} does not open as Parquet: {unreadable}")] if unreadable else []


def _check_rows_without_records(entries: dict[str, dict], checks: dict[str, _PartCheck]) -> list[Problem]:
    """Without recorded `part_files`, the parts of an imported episodes file must still hold the episodes
    the manifest counts for it (one row per episode)."""
    problems = []
    for rel, entry in entries.items():
        parts = [p for p in entry.get("parts") or [] if isinstance(p, str)]
        if entry.get("part_files") or not parts or entry.get("episodes_written") is None:
            continue
        rows = [checks[p].rows for p in parts if p in checks]
        if any(r is None for r in rows):
            continue  # missing or unreadable: already a problem of its own
        if sum(rows) != int(entry["episodes_written"]):
            problems.append(Problem(parts[0], "rows", f"the parts of {rel} hold {sum(rows)} rows, the manifest "
                                    f"counts {entry['episodes_written']} episodes written"))
    return problems


def _check_errors_file(out: str, manifest: dict) -> list[Problem]:
    expected = (manifest.get("totals") or {}).get("errors")
    fs, full = storage.filesystem(safety.confined(out, paths.ERRORS, folder=None, what="errors file"))
    if not fs.exists(full):
        return [Problem(paths.ERRORS, "missing", "listed by every import but not in the output")]
    rows = _count_rows(fs, full)
    if expected is not None and rows != _int(expected):
        return [Problem(paths.ERRORS, "errors", f"holds {rows} rows, the manifest counts {quote(expected)} errors")]
    return []


def _count_rows(fs, full: str) -> int:
    """Non-blank lines of a file, counted block by block: however long errors.jsonl is (or one line of it),
    the memory is one block."""
    rows, content = 0, False  # content: the line being read so far holds more than whitespace
    with fs.open(full, "rb") as f:
        while block := f.read(_BLOCK):
            pieces = block.split(b"\n")
            for piece in pieces[:-1]:  # each ends a line
                if content or piece.strip():
                    rows += 1
                content = False
            content = content or bool(pieces[-1].strip())
    return rows + content


def _int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _check_listing(out: str, listed: set[str]) -> list[Problem]:
    """Unlisted files under the managed folders, and temporary files anywhere in the output."""
    problems = []
    for rel in _output_files(out):
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") and storage.TMP_MARK in name:
            problems.append(Problem(rel, "tmp", "a temporary file left by a write that never finished (a crashed "
                                    "or killed run); no reader takes it for output, it can be removed"))
        elif rel.split("/", 1)[0] in (paths.EPISODES_DIR, paths.MEDIA_INDEX_DIR) and rel not in listed:
            problems.append(Problem(rel, "unlisted", "in the output but not listed in the manifest: not written by "
                                    "this import (another run, a copy, or a removed episodes file's leftover)"))
    return problems


def _output_files(out: str) -> Iterable[str]:
    fs, base = storage.filesystem(out)
    base = base.rstrip("/")
    try:
        found = storage.with_retries(lambda: fs.find(base))
    except FileNotFoundError:
        return []
    rels = (p[len(base) + 1:] for p in found if p.startswith(base + "/"))
    return sorted(r for r in rels if r not in _RUN_FILES)


def stale_episodes_files(manifest: dict) -> list[Problem]:
    """The episodes files the next run would import or remove, as problems (the dataset and the
    options are the manifest's)."""
    dataset, options = manifest.get("dataset"), manifest.get("options")
    if not dataset or not isinstance(options, dict):
        return [Problem(paths.MANIFEST, "sources", "the manifest names no dataset or options to compare with")]
    try:
        scanned = sources.scan_dataset(dataset, options, previous_manifest=manifest)
    except (OSError, LeRobotImportError) as ex:
        return [Problem(paths.MANIFEST, "sources", f"the dataset {dataset} cannot be read: {ex}")]
    unreadable = scanned.unreadable()
    if unreadable is not None:  # the next run fails it and removes nothing: its files are not "gone"
        if scanned.info_problem is not None and _exists(storage.join(dataset, "meta/info.json")):
            # it is there, but its info.json is not one an import takes
            return [Problem(paths.MANIFEST, "sources", f"the dataset {dataset} cannot be imported: "
                            f"{scanned.info_problem}; the next run fails it and removes none of this output")]
        where = ("moved or removed" if dataset.startswith("file://")
                 else "moved, removed or not reachable with these credentials")
        return [Problem(paths.MANIFEST, "sources", f"the dataset {dataset} cannot be read ({unreadable}): {where}; "
                        "the next run fails it and removes none of this output")]
    problems = []
    if scanned.info_problem is not None:  # every episodes file fails on it: the dataset does, as a whole
        problems.append(Problem(paths.MANIFEST, "sources", f"the dataset {dataset} cannot be imported: "
                                f"{scanned.info_problem}"))
    elif manifest.get("status") == "failed" and not manifest.get("episodes_files"):
        problems.append(Problem(paths.MANIFEST, "sources", "the last import failed as a whole, before any episodes "
                                f"file ({paths.ERRORS} says why); the next run tries the dataset again"))
    decisions, _ = decide_run(scanned.files, manifest, scanned.listing.token,
                              dataset_file=lambda rel: storage.join(dataset, rel),
                              inline_index=bool(options.get("inline_index")))
    for d in decisions:
        if d.action == sources.UNCHANGED:
            continue
        problems.append(Problem(d.episodes_file, "stale", STALE_REASONS.get(d.reason, d.reason)))
        failing = None if d.sources is None or scanned.info_problem else (
            d.sources.problem or sources.missing_source(d.sources, scanned.listing, dataset))
        if failing is not None:
            # a v2.x group: the episode whose own file this is fails alone, the others import
            what = "would leave an episode out" if layout_of(d.episodes_file).episodes_own_files else "would fail"
            problems.append(Problem(d.episodes_file, "would_fail", f"its next import {what}: {failing}"))
    return problems


def _exists(uri: str) -> bool:
    try:
        return storage.exists(uri)
    except OSError:
        return False


#: Problems of a part or shard that the next import finds by sizes alone, and repairs (`damage.find_damage`).
_FOUND_BY_SIZE = ("missing", "size")
#: Problems it finds only with --verify-output.
_FOUND_BY_CHECKSUM = ("checksum",)
#: Problems that no check of the next import sees (the bytes are as recorded): only --force rewrites them.
_FOUND_BY_NONE = ("unreadable", "rows")


def repair_command(report: VerifyReport, output: Optional[str] = None) -> Optional[str]:
    """"run `lerobot-import --dataset D --output O ...` again: ..." for the problems an import repairs, with the
    dataset and options the manifest records and the output as the user named it; None when there are none.
    A damaged part or shard is imported again by the next run; a stale episodes file (`--sources`) too."""
    if not report.dataset or report.options is None:
        return None
    by_path: dict[str, set[str]] = {}
    for p in report.problems:
        if p.path.split("/", 1)[0] in (paths.EPISODES_DIR, paths.MEDIA_INDEX_DIR):
            by_path.setdefault(p.path, set()).add(p.kind)
    sized = {path for path, kinds in by_path.items() if kinds & set(_FOUND_BY_SIZE)}
    summed = {path for path, kinds in by_path.items() if path not in sized and kinds & set(_FOUND_BY_CHECKSUM)}
    unseen = {path for path, kinds in by_path.items() if path not in sized | summed and kinds & set(_FOUND_BY_NONE)}
    # A stale file that failed last time, or would fail, needs its cause fixed first: running again is no repair.
    failing = {p.path for p in report.problems if p.kind == "would_fail"}
    # Nor is it while the dataset as a whole cannot be imported (its info.json, its root).
    stale = not any(p.kind == "sources" for p in report.problems) and any(
        p.kind == "stale" and p.path not in failing
        and p.message not in (STALE_REASONS["failed last run"], STALE_REASONS[sources.EPISODES_FAILED_REASON])
        for p in report.problems)
    interrupted = any(p.kind == "interrupted" for p in report.problems)
    if not (sized or summed or unseen or stale or interrupted):
        return None
    words = ["lerobot-import", "--dataset", _shown_dataset(report.dataset), "--output", output or report.output]
    words += _option_words(report.options)
    if unseen:
        words.append("--force")
        what = "it imports the dataset again whole, rewriting the damaged files"
    elif summed:
        words.append("--verify-output")
        what = "it re-imports the damaged files (--verify-output: a damage of the same size shows only in the sha256)"
    elif sized:
        what = "it re-imports the damaged files"
    elif stale:
        what = "it imports the stale episodes files"
    else:
        what = "it finishes the interrupted import (the committed episodes files are kept, not read again)"
    if stale and (sized or summed) and not unseen:
        what += " and the stale episodes files"
    if interrupted and (sized or summed or stale) and not unseen:
        what += ", and finishes the interrupted import"
    return f"repair: run `{' '.join(shlex.quote(w) for w in words)}` again: {what}"


def _shown_dataset(uri: str) -> str:
    """A local dataset as a path (relative when under the working folder), any other URI as it is."""
    if not uri.startswith("file://"):
        return uri
    path = uri[len("file://"):]
    here = os.getcwd()
    return os.path.relpath(path, here) if path.startswith(here.rstrip("/") + "/") else path


def _option_words(options: dict) -> list[str]:
    """The command-line options that give the import's recorded `options` (`ImportConfig.output_options`)."""
    from transforms.lerobot.span import DATA_SPAN_LIMIT

    words = [flag for key, flag in (("one_part", "--one-part"), ("inline_index", "--inline-index"),
                                    ("skip_videos", "--skip-videos")) if options.get(key) is True]
    limit = _int(options.get("data_span_limit"))
    if limit is not None and limit != DATA_SPAN_LIMIT:
        words += ["--data-span-limit", str(limit)]
    strict = options.get("strict")
    if isinstance(strict, list) and strict:
        words += ["--strict", ",".join(str(s) for s in strict)]
    return words


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

EXIT_STATUS = """\
exit status:
  0  every check holds
  1  a check failed (one line per problem, naming its file, and the command that repairs them)
  2  the command line is wrong
"""


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Verify the outputs of the command line, print the reports; 0 when every check holds, else 1."""
    from pipelines.console import add_verbosity_arguments

    ap = argparse.ArgumentParser(prog="lerobot-import verify", description="Check an import against its manifest.",
                                 epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", help="An import's output root, or a bulk output root (OUT/<name>/...).")
    ap.add_argument("--sources", action="store_true", help="Also report episodes files stale against the dataset.")
    ap.add_argument("--json", action="store_true", help="Print the reports as JSON.")
    add_verbosity_arguments(ap)
    args = ap.parse_args(argv)
    reports = verify(args.output, check_sources=args.sources)
    shown = {r.output: _user_output(args.output, r.output) for r in reports}
    if args.json:
        print(json.dumps([_report_json(r, shown[r.output]) for r in reports], indent=2))
    else:
        for report in reports:
            print(report.summary())
            for problem in report.problems:
                print(f"  {problem}")
            repair = report.repair_command(shown[report.output])
            if repair:
                print(f"  {repair}")
        if len(reports) > 1:
            bad = sum(not r.ok for r in reports)
            print(f"{len(reports)} dataset outputs verified, {bad} with problems")
    return 0 if all(r.ok for r in reports) else 1


def _user_output(given: str, output: str) -> str:
    """A dataset output's root as the user named it: `given` itself, or `given`/<name> under a bulk root."""
    root = storage.normalize_root(given)
    if output == root:
        return given
    if output.startswith(root.rstrip("/") + "/"):
        return given.rstrip("/") + "/" + output[len(root.rstrip("/")) + 1:]
    return output


def _report_json(report: VerifyReport, shown_output: Optional[str] = None) -> dict[str, Any]:
    return {"output": report.output, "ok": report.ok, "parts": report.parts, "checksums": report.checksums,
            "media_index_files": report.media_index_files, "sources_checked": report.sources_checked,
            "problems": [dataclasses.asdict(p) for p in report.problems],
            "repair": report.repair_command(shown_output)}


if __name__ == "__main__":  # `python -m pipelines.verify ...`: `lerobot-import verify ...`
    from pipelines import cli
    cli.main(["verify", *sys.argv[1:]])
