"""The import's writing steps: parts, their commit per episodes file, and each dataset's errors.jsonl
and manifest.json.

    (part key, PartInputs: header, MP4 facts, failures) ─► WriteParts ─► a temporary part, or why not
    (episodes file, FileInputs: part results, duplicates) ─► CommitEpisodesFiles ─► all parts or none
    (dataset, DatasetReport: outcomes, failures, warnings, media_index parts, ...) ─► FinishDatasets

What is written and where is the episode record's (`transforms.episode.output`, `.paths`); these
steps decide when, and turn every failure, expected or not, into a record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections import OrderedDict
from concurrent import futures
from typing import Iterable, Iterator, Optional, Sequence

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

from transforms import lease, progress, quality, run_limits, stopping, storage
from transforms.episode import output as sink
from transforms.episode import frames as frames_lib
from transforms.episode import journal, output_state, paths
from transforms.episode.media_index_table import final_media_index, stale_media_index_files
from transforms.episode.outcomes import PartResult, failed_file
from transforms.errors import FailureRecord, LeRobotImportError, redact, rule_of_repr
from transforms.lerobot import data_files
from transforms.lerobot.info import INFO_PATH, DatasetInfo
from transforms.messages import (CommittedFile, DatasetReport, FileInputs, FileQuality, ImportConfig, KeptFile,
                                 PartHeader,
                                 PartInputs, VideoFailure, error_record, internal_record, load_info)
from transforms.safety_net import counter, guarded, in_phase

_LOG = logging.getLogger(__name__)


# ---- WriteParts --------------------------------------------------------------------------------


class WriteParts(beam.PTransform):
    """Write each part under a temporary name: its episodes' frames, typed, with their clips.

    The frames are read here, from only the row groups the part's episodes need. Parts that share a row
    group (one holding rows of several parts: data files written with few, large row groups) form one
    read unit, written one part after the other by one worker, which keeps the row group it read last:
    each row group is read once per run, and a worker holds one part's frames at a time. A worker keeps
    its last few data files open, so parts sharing a data file read its footer and `index` once. Frames
    never cross a shuffle: only plans, paths and MP4 facts do.

    An episodes file is committed as soon as its last part is written, by the worker that wrote it (see
    `transforms.episode.journal`), not after every part of the run: a run stopped halfway keeps the files
    it finished. A file with a duplicated episode or a strict check's error, or whose storage offers no
    conditional create (when it has several parts), is committed by `CommitEpisodesFiles` instead.

    Args:
        config: the run's configuration.
        file_facts: ((root, episodes file), FileInputs) of each file's sources and duplicated episodes,
            what a commit needs besides its parts; None: the parts are left for `CommitEpisodesFiles`.

    Input: (part key, PartInputs), the part key being (root, episodes file, part): its header, the
    facts of the MP4s it uses, failures (an MP4 it needs is unusable). Returns: ((root, episodes
    file), FileInputs) holding each part's PartResult, or the file's outcome once committed.
    """

    def __init__(self, config: ImportConfig, file_facts=None) -> None:
        super().__init__()
        self._config = config
        self._file_facts = file_facts

    def expand(self, inputs):
        facts = {} if self._file_facts is None else {"facts": beam.pvalue.AsMultiMap(self._file_facts)}
        written = (inputs
                   | "GroupByPart" >> beam.GroupByKey()
                   | "ByReadUnit" >> beam.MapTuple(by_read_unit)
                   | "GroupByReadUnit" >> beam.GroupByKey()
                   | "Write" >> guarded(_WriteParts(self._config), main="results", **facts))
        bugs = written.bad | "PartBugs" >> beam.FlatMap(_unit_bug)
        return (written.results, bugs) | "PartResults" >> beam.Flatten()


def read_unit_key(part_key: tuple[str, str, int], inputs: PartInputs) -> tuple[str, str, int]:
    """The read unit of a part: (root, data file, -1) for the parts sharing row groups of that data file,
    else the part's own key."""
    root = part_key[0]
    if len(inputs.headers) == 1 and inputs.headers[0].plan.read_unit:
        return root, inputs.headers[0].plan.read_unit, -1
    return part_key


def by_read_unit(part_key: tuple[str, str, int], messages: Iterable[PartInputs]) -> tuple[tuple, tuple]:
    """(read unit, (part key, the part's merged inputs))."""
    inputs = PartInputs.merge(messages)
    return read_unit_key(part_key, inputs), (part_key, inputs)


def unit_order(unit: tuple[str, str, int], part: tuple[tuple[str, str, int], PartInputs]) -> tuple:
    """Where a part's rows begin in its read unit's data file: its parts are written in that order, so the
    row group two neighbours share is the last one read."""
    key, inputs = part
    if len(inputs.headers) != 1:
        return (-1, key)
    starts = [r.from_index for r in inputs.headers[0].rows if r.data_file == unit[1] and r.length]
    return (min(starts) if starts else -1, key)


class _WriteParts(beam.DoFn):
    MAX_OPEN_FILES = 4

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._readers: OrderedDict[tuple[str, str], data_files.DataFileReader] = OrderedDict()
        self._reads = storage.ReadCounter()
        names = ("data_bytes_read", "data_read_requests", "episodes", "frames", "parts_written", "output_bytes",
                 "quality_findings", "files_committed_early")
        self._counters = {name: counter(name) for name in names}
        self._tasks: dict[str, Optional[list[str]]] = {}  # per dataset: meta/tasks.parquet, read once
        self._columns: dict[str, tuple[str, ...]] = {}  # the columns of the data files the last part read
        self._encoder = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="part-encoder")

    def teardown(self) -> None:
        self._encoder.shutdown(wait=True)
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def _reader(self, root: str, rel: str, info: DatasetInfo) -> data_files.DataFileReader:
        key = (root, rel)
        if key in self._readers:
            self._readers.move_to_end(key)
        else:
            self._readers[key] = data_files.DataFileReader(root, rel, info, self._reads)
            while len(self._readers) > self.MAX_OPEN_FILES:
                self._readers.popitem(last=False)[1].close()
        return self._readers[key]

    def start_bundle(self) -> None:
        self._pending: Optional[tuple[_Encoding, object]] = None  # a part being encoded, and its `facts`

    def process(self, element: tuple[tuple, Iterable[tuple[tuple, PartInputs]]], facts=None
                ) -> Iterator[tuple[tuple[str, str], FileInputs]]:
        """The unit's parts in read order. A part's Parquet bytes are encoded on the encoder thread while
        its frames are checked and the next part (of this unit, or of the bundle's next unit) is read,
        typed and checked here (pyarrow encodes without holding the GIL, so the two share the worker's
        cores); each part is then stored and committed here, in order. The bundle's last part is stored
        when the bundle ends (`finish_bundle`): a unit of one part, the usual one, would otherwise wait
        for its own encoding."""
        unit, parts = element
        for key, inputs in sorted(parts, key=lambda part: unit_order(unit, part)):
            try:
                with self._piece(key):
                    ready = self._prepare_part(key, inputs)
            except Exception:  # noqa: BLE001 - one part's unexpected failure fails that part alone, as the
                # safety net would if the part were an element of its own
                ready = _part_bug(key, inputs, sys.exc_info())
            if self._pending is not None:
                pending, self._pending = self._pending, None
                yield self._finish(*pending)
            if isinstance(ready, _Encoding):
                self._pending = (ready, facts)
            else:
                yield ready

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            yield GlobalWindows.windowed_value(self._finish(*pending))  # `_finish` turns any failure into data

    def _piece(self, key: tuple[str, str, int]):
        root, rel, part = key
        return run_limits.piece(self._config.limits, "write", f"part {part} of episodes file {rel} of dataset {root}")

    def _finish(self, pending: "_Encoding", facts) -> tuple[tuple[str, str], FileInputs]:
        """Store an encoded part under its temporary name and commit its file when it was the last part."""
        root, rel, _ = pending.key
        try:
            with self._piece(pending.key):
                try:
                    written = self._write(pending.header, *pending.data.result(), pending.frames)
                except LeRobotImportError as ex:  # a full disk, a read-only output: the part fails by that rule
                    written = _failed_part(pending.header, [error_record(ex, dataset=root, episodes_file=rel)])
                else:
                    written = dataclasses.replace(written, findings=pending.findings)
                    if facts is not None and written.results and written.results[0].tmp_uri:
                        written = self._commit_if_last((root, rel), written, facts)
            return (root, rel), written
        except Exception:  # noqa: BLE001 - as in `process`: the part fails alone
            return _part_bug(pending.key, pending.inputs, sys.exc_info())

    def _commit_if_last(self, file_key: tuple[str, str], written: FileInputs, facts) -> FileInputs:
        """Commit the part's episodes file when this was its last part to be written: the file's outcome,
        else the part's result (for a later worker, or `CommitEpisodesFiles`)."""
        root, rel = file_key
        known = FileInputs.merge(facts[file_key])  # a multimap: [] for a file with neither
        if known.duplicates or _strict_error(written.findings):
            return written  # the file fails: its commit step says why and removes its parts
        result = written.results[0]
        with stopping.output_work():
            if result.num_parts == 1:
                done = commit_file(self._config, root, rel, written.results, (), written.findings, known.sources)
            else:
                parts = self._all_parts(root, rel, result, written.findings)
                if parts is None:
                    return written
                done = commit_file(self._config, root, rel, parts[0], (), parts[1], known.sources)
        self._counters["files_committed_early"].inc()
        return FileInputs(committed=(done,))

    def _all_parts(self, root: str, rel: str, result: PartResult, findings) -> Optional[tuple[list, list]]:
        """Record a part of a file of several parts; when every part is recorded and this worker wins the
        file's commit claim, (every part's result, every part's findings), else None."""
        out = self._config.output_of(root)
        journal.record_part(out, run_id=self._config.run_id, episodes_file=rel, part=result.part,
                            result=part_record(result, findings))
        recorded = journal.recorded_parts(out, self._config.run_id, rel, result.num_parts)
        if sorted(recorded) != list(range(result.num_parts)):
            return None
        results = [part_from_record(root, rel, r) for _, r in sorted(recorded.items())]
        found = [quality.Finding(**f) for _, r in sorted(recorded.items()) for f in r.get("findings") or ()]
        if _strict_error(found):
            return None
        try:
            won = lease.create_once(journal.commit_claim_uri(out, self._config.run_id, rel), b"{}\n")
        except ValueError:  # no conditional create here: the commit step commits the file
            return None
        return (results, found) if won else None

    def _prepare_part(self, key: tuple[str, str, int], inputs: PartInputs
                      ) -> "_Encoding | tuple[tuple[str, str], FileInputs]":
        """Read and type one part, then check its frames while its Parquet bytes are encoded; a failed
        part's result instead."""
        root, rel, part = key
        header = _header(inputs, part, rel)
        if inputs.failures:
            return (root, rel), _failed_part(header, inputs.failures)
        info = load_info(root, skip_videos=self._config.skip_videos)
        frames, errors = self._read_frames(root, info, header.rows)
        if not errors:
            try:
                table = sink.part_table(info, header.rows, [frames[r.position] for r in header.rows],
                                        {v.file: v.video for v in inputs.videos},
                                        inline_index=self._config.inline_index)
            except LeRobotImportError as ex:  # a clip time that does not fit, found while typing the clips
                errors = [ex.with_context(file=rel)]
        if errors:
            return (root, rel), _failed_part(header, [error_record(e, dataset=root, episodes_file=rel) for e in errors])
        data = self._encoder.submit(_encoded, table)  # encoded (and hashed) while the frames are checked
        del table
        findings = self._check(root, rel, info, header, frames, inputs.videos)
        n_frames = sum(len(f) for f in frames.values())
        return _Encoding(key=key, inputs=inputs, header=header, frames=n_frames, findings=tuple(findings),
                         data=data)

    def _check(self, root: str, rel: str, info: DatasetInfo, header: PartHeader, frames: dict,
               videos) -> list:
        """The quality checks of the part's frames (already typed), its cameras' samples and its data files."""
        if root not in self._tasks:
            self._tasks[root] = quality.read_tasks(root)
        columns = self._columns  # of the data files the part's frames were just read from
        findings = quality.check_part(root, rel, info, header.rows, frames, tasks=self._tasks[root],
                                      samples={v.file: v.samples for v in videos if v.samples is not None},
                                      data_columns=columns, strict=self._config.strict)
        self._counters["quality_findings"].inc(len(findings))
        return findings

    def _read_frames(self, root: str, info: DatasetInfo, rows) -> tuple[dict, list[LeRobotImportError]]:
        """Each episode's typed frames by row position, and the errors met instead."""
        before = (self._reads.bytes_read, self._reads.requests)
        self._progress_bytes = before[0]
        frames, errors = {}, []
        self._columns = {}
        for data_file, episodes in _by_data_file(rows).items():
            reader = self._reader(root, data_file, info)
            self._columns[data_file] = reader.columns  # for the quality checks: what it holds undeclared
            for batch in reader.read([(r.position, r) for r in episodes]):
                typed = n_frames = 0
                for position, _, result in frames_lib.typed_frames(batch, info):
                    if isinstance(result, LeRobotImportError):
                        errors.append(result)
                    else:
                        frames[position] = result
                        typed, n_frames = typed + 1, n_frames + len(result)
                # the live progress line, per batch as it is read (the counters are only read at the end)
                read_now = self._reads.bytes_read
                progress.add(episodes=typed, frames=n_frames, data_bytes=read_now - self._progress_bytes)
                self._progress_bytes = read_now
        self._counters["data_bytes_read"].inc(self._reads.bytes_read - before[0])
        self._counters["data_read_requests"].inc(self._reads.requests - before[1])
        return frames, errors

    def _write(self, header: PartHeader, data: bytes, sha256: str, n_frames: int) -> FileInputs:
        final = storage.join(self._config.output_of(header.dataset),
                             paths.output_part_path(header.episodes_file, header.plan.part, header.num_parts))
        with stopping.output_work():
            tmp = storage.write_tmp(final, lambda f: f.write(data))
        self._counters["episodes"].inc(len(header.rows))
        self._counters["frames"].inc(n_frames)
        self._counters["parts_written"].inc()
        self._counters["output_bytes"].inc(len(data))
        return _part_result(header, tmp_uri=tmp, frames=n_frames, bytes=len(data), sha256=sha256)


def _encoded(table) -> tuple[bytes, str]:
    """A part's Parquet bytes and their sha256, made on the encoder thread (both without the GIL)."""
    data = sink.parquet_bytes(table)
    return data, sink.sha256_hex(data)


@dataclasses.dataclass(frozen=True)
class _Encoding:
    """A part read, typed and checked, whose Parquet bytes and their sha256 (`data`) the encoder thread is making."""
    key: tuple[str, str, int]
    inputs: PartInputs
    header: PartHeader
    frames: int
    findings: tuple
    data: futures.Future


def _strict_error(findings) -> bool:
    return any(f.severity == quality.ERROR for f in findings)


def part_record(result: PartResult, findings) -> dict:
    """What the journal records of a part written under its temporary name (a written part has no failure)."""
    return {"part": result.part, "num_parts": result.num_parts, "episode_indices": list(result.episode_indices),
            "tmp_uri": result.tmp_uri, "frames": result.frames, "bytes": result.bytes,
            "data_bytes": result.data_bytes, "oversized": result.oversized, "sha256": result.sha256,
            "findings": [dataclasses.asdict(f) for f in findings]}


def part_from_record(root: str, rel: str, record: dict) -> PartResult:
    """The PartResult a part record holds (`part_record`)."""
    return PartResult(dataset=root, episodes_file=rel, part=int(record["part"]), num_parts=int(record["num_parts"]),
                      episode_indices=tuple(int(e) for e in record["episode_indices"]), tmp_uri=record["tmp_uri"],
                      frames=int(record["frames"]), bytes=int(record["bytes"]), data_bytes=int(record["data_bytes"]),
                      oversized=bool(record["oversized"]), sha256=str(record["sha256"]))


def _header(inputs: PartInputs, part: int, rel: str) -> PartHeader:
    if len(inputs.headers) != 1:
        raise AssertionError(f"part {part} of {rel} has {len(inputs.headers)} plans, not one")
    return inputs.headers[0]


def _by_data_file(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row.data_file, []).append(row)
    return out


def _part_result(header: PartHeader, **written) -> FileInputs:
    return FileInputs(results=(PartResult(
        dataset=header.dataset, episodes_file=header.episodes_file, part=header.plan.part,
        num_parts=header.num_parts, episode_indices=tuple(r.episode_index for r in header.rows),
        data_bytes=header.plan.data_bytes, oversized=header.plan.oversized, **written),))


def _failed_part(header: PartHeader, failures: Iterable[FailureRecord]) -> FileInputs:
    return _part_result(header, failures=tuple(sorted(set(failures), key=FailureRecord.sort_key)))


def _part_bug(key: tuple[str, str, int], inputs: PartInputs, exc_info) -> tuple[tuple[str, str], FileInputs]:
    root, rel, part = key
    _LOG.error("writing part %d of %s of %s failed unexpectedly: %s", part, rel, root, exc_info[1])
    bug = internal_record(exc_info, dataset=root, episodes_file=rel)
    if inputs.headers:
        return (root, rel), _failed_part(inputs.headers[0], [bug])
    return (root, rel), FileInputs(results=(PartResult(root, rel, part, 1, (), failures=(bug,)),))


def _unit_bug(bad) -> Iterator[tuple[tuple[str, str], FileInputs]]:
    """A read unit whose writing raised outside any one part: each of its parts fails with the error."""
    (_, parts), exc_info = bad
    for key, inputs in parts:
        yield _part_bug(key, inputs, exc_info)


# ---- CommitEpisodesFiles -----------------------------------------------------------------------


class CommitEpisodesFiles(beam.PTransform):
    """Move every part of an episodes file into place, or none: a file with any failure (a part's, or
    a duplicated episode) leaves no part, and errors.jsonl accounts for each of its episodes.

    Args:
        config: the run's configuration.

    Input: ((root, episodes file), FileInputs): its parts' results, and duplicated episodes.
    Returns: (root, DatasetReport) holding each episodes file's FileOutcome.
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, inputs):
        committed = (inputs
                     | "GroupByEpisodesFile" >> beam.GroupByKey()
                     | "Commit" >> guarded(_CommitEpisodesFile(self._config), main="outcomes"))
        bugs = committed.bad | "CommitBugs" >> beam.Map(_commit_bug, self._config)
        return (committed.outcomes, bugs) | "FileOutcomes" >> beam.Flatten()


class _CommitEpisodesFile(beam.DoFn):
    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    @in_phase("finish", lambda element: f"episodes file {element[0][1]} of dataset {element[0][0]}")
    def process(self, element: tuple[tuple[str, str], Iterable[FileInputs]]) -> Iterator[tuple[str, DatasetReport]]:
        (root, rel), messages = element
        inputs = FileInputs.merge(messages)
        if inputs.committed:  # by the writer of its last part
            with stopping.output_work():
                for r in inputs.results:  # an attempt Beam retried after the commit wrote a part again
                    if r.tmp_uri:
                        storage.remove(r.tmp_uri)
            done = inputs.committed[0]
            yield root, DatasetReport(outcomes=(done.outcome,), quality=(done.quality,))
        elif inputs.results or inputs.duplicates:  # else only its sources: it failed in planning, reported there
            with stopping.output_work():
                done = commit_file(self._config, root, rel, inputs.results, inputs.duplicates, inputs.findings,
                                   inputs.sources)
            yield root, DatasetReport(outcomes=(done.outcome,), quality=(done.quality,))


def commit_file(config: ImportConfig, root: str, rel: str, results: Sequence[PartResult],
                duplicates: Sequence[FailureRecord], findings: Sequence, sources: Sequence) -> CommittedFile:
    """Commit an episodes file (all its parts or none), write its quality table and, when it imported,
    record it in the journal at once: a run stopped before its end keeps it, and the next run imports
    only the rest.

    Args:
        config: the run's configuration.
        root: the dataset root URI.
        rel: the episodes file, relative to the root.
        results: one per part, as the part writers reported.
        duplicates: the duplicated episodes that fail it.
        findings: what the quality checks found in its parts (a strict check's error fails it).
        sources: what its import is made from (at most one), recorded in its manifest entry.
    """
    out = config.output_of(root)
    strict = [FailureRecord(root, rel, f.episode_index, f.file, "quality", quality.message(f))
              for f in findings if f.severity == quality.ERROR]
    outcome = sink.commit_episodes_file(out, root, rel, results, tuple(duplicates) + tuple(strict))
    table = paths.quality_table_path(rel)
    storage.write_atomic(output_state.confined(out, table, folder=paths.QUALITY_DIR, what="quality table"),
                         quality.table_bytes(findings))
    checked = FileQuality(rel, json.dumps(quality.summarize(findings), sort_keys=True), table)
    progress.add(episodes_files_done=1, episodes_files_failed=int(outcome.status == "failed"))
    if outcome.status == "imported":
        source = sources[0].to_manifest() if sources else None
        # what the file lists goes in too, as the manifest's finish step records it: a file the next run
        # keeps from the journal still counts in the dataset's totals against info.json
        indices = [ep for r in results for ep in r.episode_indices]
        listed = {"episodes": len(indices), "frames": sum(r.frames for r in results),
                  "episode_ranges": [list(r) for r in quality.index_ranges(indices)]}
        entry = {**sink.file_entry(outcome, source, config.run_id),
                 "quality": {"checks": json.loads(checked.checks_json), "table": table, "listed": listed}}
        journal.record_file(out, run_id=config.run_id, options=config.output_options(), dataset=root,
                            episodes_file=rel, entry=entry)
    if outcome.status == "failed":
        primary = [f for f in outcome.failures if f.rule != "file_failed"] or list(outcome.failures)
        _LOG.warning("episodes file %s of %s failed: %s", rel, root, primary[0].message)
    else:
        _LOG.info("episodes file %s of %s imported: %d episodes, %d frames, %d parts", rel, root,
                  outcome.episodes, outcome.frames, len(outcome.parts))
    return CommittedFile(outcome, checked)


def _commit_bug(bad, config: ImportConfig) -> tuple[str, DatasetReport]:
    """A commit that raised: remove what it may have left, and fail the file with rule `internal`."""
    ((root, rel), messages), exc_info = bad
    _LOG.error("committing %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    results = FileInputs.merge(messages).results
    try:
        with stopping.output_work():
            sink.discard_episodes_file(config.output_of(root), rel, results)
    except Exception as ex:  # the net must not tear: the failure below says what happened
        _LOG.error("cleaning up %s of %s failed too: %s", rel, root, ex)
    episodes = tuple(ep for r in results for ep in r.episode_indices)
    bug = internal_record(exc_info, dataset=root, episodes_file=rel)
    return root, DatasetReport(outcomes=(failed_file(root, rel, episodes, [bug]),))


# ---- FinishDatasets ----------------------------------------------------------------------------


class FinishDatasets(beam.PTransform):
    """Write each dataset's errors.jsonl and manifest.json, always: an unexpected error while finishing
    still writes both, with the error as a rule `internal` record. The `errors` counter is counted
    here, once, from what errors.jsonl holds.

    Args:
        config: the run's configuration.

    Input: (dataset root, DatasetReport), from every other step. Returns: the manifests (dicts).
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, inputs):
        finished = (inputs
                    | "GroupByDataset" >> beam.GroupByKey()
                    | "Finish" >> guarded(_FinishDataset(self._config), main="manifests"))
        rescued = finished.bad | "FinishAfterBug" >> beam.ParDo(_FinishAfterBug(self._config))
        return (finished.manifests, rescued) | "Manifests" >> beam.Flatten()


class _DatasetWriter(beam.DoFn):
    """Writes a dataset's errors.jsonl and manifest.json and counts what they hold."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        names = ("errors", "warnings", "datasets_imported", "datasets_failed", "datasets_unfinished")
        self._counters = {name: counter(name) for name in names}

    def _write(self, root: str, doc: dict, failures: list[FailureRecord]) -> Optional[dict]:
        out = self._config.output_of(root)
        # Every text the output holds passes the one redaction (records already did; warnings, notes and
        # the dataset's own strings in the manifest too).
        rows = sink.errors_jsonl(failures).decode()
        # The pair is the output's own bookkeeping, not a read of the source: a phase deadline that passes
        # meanwhile must not cut it between its two files (nor leave their temporaries behind).
        with stopping.output_work(), run_limits.outside():
            manifest = sink.manifest_bytes(doc)
            # Both files are written under temporary names first and moved into place only when both are
            # whole: a disk that fills meanwhile leaves the last run's pair as it was, never a new
            # errors.jsonl beside an old manifest (or a half-written manifest).
            written = []
            try:
                for name, data in ((paths.ERRORS, redact(rows, shapes=False).encode()), (paths.MANIFEST, manifest)):
                    final = storage.join(out, name)
                    written.append((storage.write_tmp(final, lambda f, data=data: f.write(data)), final))
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
        output's journal, which the next run folds in. The command is told (`progress.unfinished`)."""
        _LOG.error("%s: %s", root, ex)
        self._counters["datasets_unfinished"].inc()
        progress.record_unfinished(self._config.run_id, root, str(ex))
        return None


#: Why a dataset's manifest may not be written, named instead of an `internal` error.
UNFINISHED_RULES = ("disk_full", "output_not_writable")


class _FinishDataset(_DatasetWriter):
    @in_phase("finish", lambda element: f"dataset {element[0]}")
    def process(self, element: tuple[str, Iterable[DatasetReport]]) -> Iterator[dict]:
        root, reports = element
        with stopping.output_work():  # it removes files too (stale shards, removed files' parts)
            try:
                doc, failures = finish_dataset(self._config, root, DatasetReport.merge(reports))
            except LeRobotImportError as ex:  # a quality table that does not fit on the disk
                if ex.rule not in UNFINISHED_RULES:
                    raise
                self._unfinished(root, ex)
                return
            for note in doc["notes"]:
                _LOG.warning("%s: %s", root, note)
            written = self._write(root, doc, failures)
        if written is not None:
            yield written


class _FinishAfterBug(_DatasetWriter):
    """Finishing a dataset raised: write what is known (every failure, the outcomes as they are) and the
    error itself, without reading the dataset again."""

    @in_phase("finish", lambda bad: f"dataset {bad[0][0]}")
    def process(self, bad) -> Iterator[dict]:
        (root, reports), exc_info = bad
        error = exc_info[1]
        named = ((error.rule, str(error)) if isinstance(error, LeRobotImportError)
                 else rule_of_repr(exc_info[0], str(error)))
        if named is not None and named[0] in UNFINISHED_RULES:
            self._unfinished(root, LeRobotImportError(named[0], named[1].split("] ", 1)[-1]))
            return
        _LOG.error("finishing %s failed%s: %s", root, "" if named else " unexpectedly", exc_info[1])
        report = DatasetReport.merge(reports)
        outcomes = list(report.outcomes)
        failures = list(report.failures) + [internal_record(exc_info, dataset=root, episodes_file=None)]
        doc = sink.manifest(root, None, outcomes, started_at=self._config.started_at, finished_at=sink.now_iso(),
                            dataset_failures=failures, run_id=self._config.run_id,
                            options=self._config.output_options())
        written = self._write(root, doc, [f for o in outcomes for f in o.failures] + failures)
        if written is not None:
            yield written


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
    out = config.output_of(root)
    shards, video_versions = final_media_index(report.index_kept, report.index_files, report.video_versions)
    if config.inline_index:
        shards = []
    # What the import may delete under media_index/: what its last manifest lists, and the shards this
    # run's MP4s map to (a run that died after writing a shard and before its manifest wrote them too).
    last = output_state.read_manifest(out).doc
    ours = output_state.listed_files(last) | {o.path for o in report.index_files} | {
        paths.media_index_shard_path(rel) for rel, _ in report.video_versions}
    stale, unknown = stale_media_index_files(out, keep=[s.path for s in shards], ours=ours)
    for uri in stale:
        storage.remove(uri)
    imported = {o.episodes_file for o in outcomes if o.status == "imported"} | {
        k.episodes_file for k in report.kept if not k.removed}
    warnings = [w for w in report.warnings if w.episodes_file is None or w.episodes_file in imported]
    sources = [s for s in report.sources if s is not None]
    doc = sink.manifest(root, info_sha256(root), outcomes, started_at=config.started_at,
                        finished_at=sink.now_iso(), media_index_files=[s.path for s in shards],
                        dataset_failures=dataset_failures,
                        source=sources[0].to_json() if sources else None, run_id=config.run_id,
                        options=config.output_options(), warnings=warnings,
                        notes=list(report.notes) + skip_videos_notes(report.mp4_failures)
                        + unknown_files_notes(unknown),
                        file_sources={s.episodes_file: s.to_manifest() for s in report.file_sources})
    doc["media_index_layout"] = paths.MEDIA_INDEX_LAYOUT
    doc["media_index_files"] = [s.to_json() for s in shards]
    doc["video_versions"] = video_versions
    failures = [f for o in outcomes for f in o.failures] + dataset_failures
    carry_kept_files(doc, report.kept, out)
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
    out = config.output_of(root)
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
            stale = output_state.confined(out, paths.quality_table_path(rel), folder=paths.QUALITY_DIR,
                                          what="quality table")
            if storage.exists(stale):
                storage.remove(stale)
    listed = [(e.get("quality") or {}).get("listed") for e in entries.values() if e.get("status") != "removed"]
    findings: list = []
    if listed and all(isinstance(x, dict) for x in listed):
        raw = info_bytes(root)
        episodes = sum(int(x["episodes"]) for x in listed)
        frames = sum(int(x["frames"]) for x in listed)
        indices = quality.indices_of(r for x in listed for r in x["episode_ranges"])
        findings = quality.with_severity(
            quality.dataset_totals(root, quality.info_document(raw or b"{}"), episodes, frames, indices),
            config.strict)
    storage.write_atomic(output_state.confined(out, paths.QUALITY_DATASET, folder=paths.QUALITY_DIR,
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


def carry_kept_files(doc: dict, kept: Iterable[KeptFile], out: str) -> None:
    """Add the episodes files this run left alone to a manifest being written.

    An unchanged file keeps its previous entry (parts, counts and the run that wrote them), marked
    `unchanged`, and counts in the totals as before. A removed file has its parts deleted (listed
    under the output root literally, as a commit lists the parts it replaces) and is recorded as
    `removed`, with no parts, once.

    Args:
        doc: the manifest of this run's outcomes; its `episodes_files` and `totals` are updated.
        kept: the files left alone, as the check step decided.
        out: the dataset's output root.
    """
    entries, totals = dict(doc["episodes_files"]), doc["totals"]
    for k in sorted(kept, key=lambda k: k.episodes_file):
        if k.removed:
            for uri in removed_file_outputs(out, k) + sink.leftover_tmps(out, k.episodes_file):
                storage.remove(uri)
            entries[k.episodes_file] = {"status": "removed", "parts": []}
            totals["episodes_files_removed"] += 1
            continue
        entry = {**json.loads(k.entry_json), "status": "unchanged"}
        entries[k.episodes_file] = entry
        totals["episodes_files"] += 1
        totals["episodes_files_unchanged"] += 1
        for key in ("episodes", "episodes_written", "frames", "bytes"):
            totals[key] += int(entry.get(key) or 0)
    doc["episodes_files"] = {rel: entries[rel] for rel in sorted(entries)}


def removed_file_outputs(out: str, kept: KeptFile) -> list[str]:
    """The parts of a removed episodes file: those its last manifest entry lists (each confined to
    `episodes/`; the manifest was checked when read), not whatever its name would match."""
    entry = json.loads(kept.entry_json)
    listed = [p for p in entry.get("parts") or [] if isinstance(p, str)]
    return [output_state.confined(out, p, folder=paths.EPISODES_DIR, what="episode part") for p in listed]


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
    return None if raw is None else sink.sha256_hex(raw)


def skip_videos_notes(failures: Iterable[VideoFailure]) -> list[str]:
    """One note per camera whose MP4s were missing or unusable, saying once that `--skip-videos`
    imports the rest of the dataset (each failed episodes file has its own rows in errors.jsonl)."""
    by_camera: dict[str, list[VideoFailure]] = {}
    for f in failures:
        by_camera.setdefault(f.camera, []).append(f)
    notes = []
    for camera, found in sorted(by_camera.items()):
        files = sorted({f.file for f in found})
        rules = ", ".join(sorted({f.rule for f in found}))
        what = "is" if len(files) == 1 else "are"
        notes.append(f"camera `{camera}`: {len(files)} MP4 file{'s' if len(files) > 1 else ''} {what} missing or "
                     f"unusable ({rules}; first: {files[0]}), so the episodes using them were not imported; "
                     "--skip-videos imports the dataset without its video features")
    return notes
