"""Finishing a dataset, without Beam: its manifest.json assembled from everything the import reported, the
quality findings of the dataset as a whole, what the run carries or removes of the files it left alone,
and the pair errors.jsonl + manifest.json written whole or not at all. `FinishDatasets` hands each
dataset's reports to a `DatasetFinisher`.
"""

from __future__ import annotations

import json
import logging
from typing import Iterable, Mapping, Optional, Sequence

from transforms import quality
from transforms.base import live_counts, run_limits, stopping, storage
from transforms.base.errors import FailureRecord, LeRobotImportError, rule_of_repr
from transforms.lerobot.info import INFO_PATH
from transforms.output import journal, paths, safety, sinks, writes
from transforms.output.incremental import KeptFile
from transforms.output.index_shards import final_media_index, stale_media_index_files
from transforms.work.counted import Counted
from transforms.work.messages import DatasetReport, ImportConfig, VideoFailure, internal_record, output_root

_LOG = logging.getLogger(__name__)

#: What a dataset finisher counts (each an object with `inc(n)`: Beam's counters in a pipeline).
COUNTERS = ("errors", "warnings", "datasets_imported", "datasets_failed", "datasets_unfinished")

#: Why a dataset's manifest may not be written, named instead of an `internal` error.
UNFINISHED_RULES = ("disk_full", "output_not_writable")



class DatasetFinisher(Counted):
    """Writes datasets' errors.jsonl and manifest.json and counts what they hold (`COUNTERS`)."""

    COUNTERS = COUNTERS

    def finish(self, root: str, report: DatasetReport) -> Optional[dict]:
        """The dataset's manifest, written with its errors.jsonl; None when they could not be written (the
        command is told why)."""
        with stopping.output_work():  # it removes files too (stale shards, removed files' parts)
            try:
                doc, failures = finish_dataset(self._config, root, report)
            except LeRobotImportError as ex:  # a quality table that does not fit on the disk
                if ex.rule not in UNFINISHED_RULES:
                    raise
                return self._unfinished(root, ex)
            for note in doc["notes"]:  # the summary prints them (-v: here too, as they are found)
                _LOG.debug("%s: %s", root, note)
            return self._write(root, output_root(report.outputs, f"dataset {root}"), doc, failures)

    def finish_after_bug(self, root: str, report: DatasetReport, exc_info) -> Optional[dict]:
        """Finishing the dataset raised: write what is known (every failure, the outcomes as they are) and
        the error itself, without reading the dataset again."""
        error = exc_info[1]
        named = ((error.rule, str(error)) if isinstance(error, LeRobotImportError)
                 else rule_of_repr(exc_info[0], str(error)))
        if named is not None and named[0] in UNFINISHED_RULES:
            return self._unfinished(root, LeRobotImportError(named[0], named[1].split("] ", 1)[-1]))
        _LOG.error("finishing %s failed%s: %s", root, "" if named else " unexpectedly", exc_info[1])
        if len(set(report.outputs)) != 1:  # no output to write to: the error above is all there is to say
            _LOG.error("%s: no single output root reached its finish step (%s)", root, sorted(set(report.outputs)))
            return None
        outcomes = list(report.outcomes)
        failures = list(report.failures) + [internal_record(exc_info, dataset=root, episodes_file=None)]
        doc = writes.manifest(root, None, outcomes, started_at=self._config.started_at,
                              finished_at=writes.now_iso(), dataset_failures=failures, run_id=self._config.run_id,
                              options=self._config.output_options())
        return self._write(root, report.outputs[0], doc,
                           [f for o in outcomes for f in o.failures + o.episode_failures] + failures)

    def _write(self, root: str, out: str, doc: dict, failures: list) -> Optional[dict]:
        # Every text the output holds passes the one redaction (records already did; warnings, notes and
        # the dataset's own strings in the manifest too). errors.jsonl is written row by row as its records
        # are expanded (`writes.write_errors_jsonl`): it may list hundreds of thousands of episodes.
        # The pair is the output's own bookkeeping, not a read of the source: a phase deadline that passes
        # meanwhile must not cut it between its two files (nor leave their temporaries behind).
        with stopping.output_work(), run_limits.outside():
            # Both files are written under temporary names first and moved into place only when both are
            # whole: a disk that fills meanwhile leaves the last run's pair as it was, never a new
            # errors.jsonl beside an old manifest (or a half-written manifest).
            written = []
            try:
                for name, write in ((paths.ERRORS, lambda f: writes.write_errors_jsonl(f, failures)),
                                    (paths.MANIFEST, lambda f: writes.write_manifest(f, doc))):
                    final = storage.join(out, name)
                    written.append((storage.write_tmp(final, write), final))
                for tmp, final in written:
                    storage.commit(tmp, final)
            except LeRobotImportError as ex:
                for tmp, _ in written:
                    storage.remove(tmp)
                if ex.rule not in UNFINISHED_RULES:
                    raise
                return self._unfinished(root, ex)
            try:  # the manifest now holds what they recorded
                journal.clear(out, journal.record_uris(out))
            except (OSError, LeRobotImportError) as ex:  # they stay, and the next run folds what is written
                _LOG.warning("%s: could not clear the output's journal: %s", root, ex)
        self._counters["errors"].inc(doc["totals"]["errors"])
        self._counters["warnings"].inc(doc["totals"]["warnings"])
        self._counters["datasets_imported" if doc["status"] == "imported" else "datasets_failed"].inc()
        return doc

    def _unfinished(self, root: str, ex: LeRobotImportError) -> None:
        """The dataset's manifest could not be written (a full disk, a read-only output): the last run's
        manifest and errors.jsonl stay as they were, and what this run committed stays recorded in the
        output's journal, which the next run folds in. The command is told (`live_counts.unfinished`)."""
        _LOG.error("%s: %s", root, ex)
        self._counters["datasets_unfinished"].inc()
        live_counts.record_unfinished(self._config.run_id, root, str(ex))
        return None


def finish_dataset(config: ImportConfig, root: str, report: DatasetReport) -> tuple[dict, list[FailureRecord]]:
    """A dataset's manifest and errors.jsonl rows from everything its import reported.

    The media_index/ shards it lists are the last run's, updated by the shards this run touched; every
    other file under media_index/ (an emptied shard, an older layout's parts, a temporary left by a
    crash) is removed. Each episodes file entry this run wrote names its `run_id`. Warnings of episodes
    files that failed are left out (their episodes were not imported); a dataset whose totals do not add
    up fails with rule `accounting`.

    Args:
        config: the run's configuration.
        root: the dataset root URI.
        report: everything the steps reported for it.
    """
    outcomes = list(report.outcomes)
    dataset_failures = sorted(report.failures, key=FailureRecord.sort_key)
    out = output_root(report.outputs, f"dataset {root}")
    shards, video_versions = final_media_index(report.index_kept, report.index_files, report.video_versions)
    if config.inline_index:
        shards = []
    # What the import may delete under media_index/: what its last manifest lists, and the shards this
    # run's MP4s map to (a run that died after writing a shard and before its manifest wrote them too).
    last = safety.read_manifest(out).doc
    ours = safety.listed_files(last) | {o.path for o in report.index_files} | {
        paths.media_index_shard_path(rel) for rel, _ in report.video_versions}
    stale, unknown = stale_media_index_files(out, keep=[s.path for s in shards], ours=ours)
    for uri in stale:
        storage.remove(uri)
    imported = {o.episodes_file for o in outcomes if o.status == "imported"} | {
        k.episodes_file for k in report.kept if not k.removed}
    warnings = [w for w in report.warnings if w.episodes_file is None or w.episodes_file in imported]
    sources = [s for s in report.sources if s is not None]
    doc = writes.manifest(root, info_sha256(root), outcomes, started_at=config.started_at,
                        finished_at=writes.now_iso(),
                        dataset_failures=dataset_failures,
                        source=sources[0].to_json() if sources else None, run_id=config.run_id,
                        options=config.output_options(), warnings=warnings,
                        notes=list(report.notes) + skip_videos_notes(report.mp4_failures)
                        + unknown_files_notes(unknown),
                        # a v2.x group's source paths rendered one entry at a time, as the manifest is written
                        file_sources={s.episodes_file: s.to_manifest(rendered=False) for s in report.file_sources})
    doc["media_index_layout"] = paths.MEDIA_INDEX_LAYOUT
    failures = [f for o in outcomes for f in o.failures + o.episode_failures] + dataset_failures
    entries = carry_kept_files(doc["episodes_files"], report.kept, out, sinks.sink(config.sink))
    writes.fill_manifest(doc, entries=entries, shards=[s.to_json() for s in shards], versions=video_versions,
                         errors=doc["totals"]["errors"], warnings=doc["totals"]["warnings"])
    failures += record_quality(config, root, doc, report)
    totals = doc["totals"]
    if totals["episodes"] != totals["episodes_written"] + totals["episodes_failed"]:
        failures.append(LeRobotImportError(
            "accounting", f"episodes read ({totals['episodes']}) != written ({totals['episodes_written']}) + "
                          f"failed ({totals['episodes_failed']}), please report it", dataset=root).to_record())
        doc["status"] = "failed"
        totals["errors"] += 1
    return doc, failures


def record_quality(config: ImportConfig, root: str, doc: dict, report: DatasetReport) -> list[FailureRecord]:
    """Add the quality checks to a manifest being written, and write the dataset's own quality table.

    Each episodes file checked this run gets `quality` in its entry (its findings' summary, its table, and
    what it lists: episodes, frames, episode ranges); an unchanged file keeps the one its import recorded; a
    file that failed before its frames were read, or is gone, loses its table. The dataset's totals and
    splits are compared with info.json when every episodes file's listing is known (quality/dataset.parquet).
    The manifest's `quality` sums every file's and the dataset's findings per check.

    Returns:
        The errors of the strict checks among the dataset's own findings (rule `quality`), counted in the doc.
    """
    out = output_root(report.outputs, f"dataset {root}")
    entries = doc["episodes_files"]
    checked = {q.episodes_file: q for q in report.quality}
    counts = {c.episodes_file: c for c in report.file_counts}
    for rel, entry in entries.items():
        if rel in checked:
            q, c = checked[rel], counts.get(rel)
            entry["quality"] = {"checks": json.loads(q.checks_json), "table": q.table}
            if c is not None:
                entry["quality"]["listed"] = {"episodes": c.episodes, "frames": c.frames,
                                              "episode_ranges": [list(r) for r in c.episode_ranges]}
        elif entry.get("status") in ("failed", "removed"):
            entry.pop("quality", None)
            stale = safety.confined(out, paths.quality_table_path(rel), folder=paths.QUALITY_DIR,
                                          what="quality table")
            if storage.exists(stale):
                storage.remove(stale)
    listed = [(e.get("quality") or {}).get("listed") for e in entries.values() if e.get("status") != "removed"]
    # a tasks file that is there but cannot be read: the tasks check of every part did not run, and says so
    findings: list = quality.with_severity(quality.load_tasks(root)[1], config.strict)
    if listed and all(isinstance(x, dict) for x in listed):
        raw = info_bytes(root)
        episodes = sum(int(x["episodes"]) for x in listed)
        frames = sum(int(x["frames"]) for x in listed)
        indices = quality.indices_of(r for x in listed for r in x["episode_ranges"])
        findings += quality.with_severity(
            quality.dataset_totals(root, quality.info_document(raw or b"{}"), episodes, frames, indices)
            + quality.depth_features(root, quality.info_document(raw or b"{}")), config.strict)
    storage.write_atomic(safety.confined(out, paths.QUALITY_DATASET, folder=paths.QUALITY_DIR,
                                               what="quality table"), quality.table_bytes(findings))
    summaries = [(e.get("quality") or {}).get("checks") for e in entries.values()] + [quality.summarize(findings)]
    checks = quality.merge_summaries(summaries)
    tables = sorted([paths.QUALITY_DATASET] + [str(e["quality"]["table"]) for e in entries.values()
                                               if isinstance(e.get("quality"), dict) and e["quality"].get("table")])
    doc["quality"] = {"checks": checks, "findings": sum(c["findings"] for c in checks.values()), "tables": tables}
    errors = [FailureRecord(root, None, None, f.file, "quality", quality.message(f)) for f in findings
              if f.severity == quality.ERROR]
    if errors:
        doc["status"] = "failed"
        doc["totals"]["errors"] += len(errors)
    return errors


def carry_kept_files(entries: Mapping[str, dict], kept: Iterable[KeptFile], out: str,
                     sink: sinks.EpisodesSink) -> dict[str, dict]:
    """The episodes files of a manifest being written, with those this run left alone added.

    An unchanged file keeps its previous entry (parts, counts and the run that wrote them), marked
    `unchanged`, and counts in the totals as before. A removed file has its parts deleted (listed
    under the output root literally, as a commit lists the parts it replaces) and is recorded as
    `removed`, with no parts, once.

    Args:
        entries: the entries of this run's outcomes.
        kept: the files left alone, as the check step decided.
        out: the dataset's output root.
        sink: where the episodes went (it removes a removed file's parts).
    """
    entries = dict(entries)
    for k in sorted(kept, key=lambda k: k.episodes_file):
        if k.removed:
            sink.remove(out, k.episodes_file, k.entry_json)
            entries[k.episodes_file] = {"status": "removed", "parts": []}
        else:
            entries[k.episodes_file] = {**json.loads(k.entry_json), "status": "unchanged"}
    return entries


def unknown_files_notes(unknown: Sequence[str]) -> list[str]:
    """One note naming the files under media_index/ that the import left because it did not write them."""
    if not unknown:
        return []
    shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    many = len(unknown) > 1
    return [f"{len(unknown)} file{'s' if many else ''} under {paths.MEDIA_INDEX_DIR}/ that this import did not "
            f"write {'were' if many else 'was'} left as {'they are' if many else 'it is'} ({shown}): the import "
            "manages that folder, so keep other files elsewhere"]


def info_bytes(root: str) -> Optional[bytes]:
    """meta/info.json as it is now, None when it cannot be read (that failure is recorded where it was met)."""
    try:
        return storage.read_bytes(storage.dataset_file(root, INFO_PATH), what="info file", file=INFO_PATH)
    except LeRobotImportError:
        return None


def info_sha256(root: str) -> Optional[str]:
    """The digest of meta/info.json as it is now, None when it cannot be read (that failure is recorded
    where it was met). Hashed, not parsed: a file too deep or too large to parse still has a digest."""
    raw = info_bytes(root)
    return None if raw is None else writes.sha256_hex(raw)


def skip_videos_notes(failures: Iterable[VideoFailure]) -> list[str]:
    """One note per camera whose MP4s were missing or unusable, saying once that `--skip-videos`
    imports the rest of the dataset (each failed episodes file has its own rows in errors.jsonl)."""
    by_camera: dict[str, list[VideoFailure]] = {}
    for f in failures:
        by_camera.setdefault(f.camera, []).append(f)
    notes = []
    for camera, found in sorted(by_camera.items()):
        counts = {f.file: f.count for f in found}  # a record of a gone folder stands for `count` MP4s
        files, n = sorted(counts), sum(counts.values())
        rules = ", ".join(sorted({f.rule for f in found}))
        what = "is" if n == 1 else "are"
        notes.append(f"camera `{camera}`: {n} MP4 file{'s' if n > 1 else ''} {what} missing or "
                     f"unusable ({rules}; first: {files[0]}), so the episodes using them were not imported; "
                     "--skip-videos imports the dataset without its video features")
    return notes
