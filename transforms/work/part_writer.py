"""Writing parts, without Beam: per part, read only the data-file row groups its episodes need, type the
frames, run the quality checks, and write the part under a temporary name; the writer of an episodes
file's last part commits the file at once (all its parts).

`PartWriter` is what one worker holds between parts (its open data files, the tasks of each dataset, the
encoder thread, the part being encoded); `WriteParts` hands it each read unit and what it returns on.
What is written and where is the output folder's (`transforms.output.writes`, `.paths`); this module
decides when, and turns every failure, expected or not, into a record.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections import OrderedDict
from concurrent import futures
from typing import Iterable, Iterator, Mapping, Optional, Sequence

from transforms import quality
from transforms.base import live_counts, run_limits, stopping, storage
from transforms.base.errors import FailureRecord, LeRobotImportError
from transforms.episode import frames
from transforms.episode.outcomes import PartResult, episode_failures_from_json, episode_failures_json
from transforms.lerobot import data_files, layouts
from transforms.lerobot.info import DatasetInfo
from transforms.output import journal, lease, sinks, writes
from transforms.work.commit import commit_file
from transforms.work.counted import Counted
from transforms.work.messages import (FileInputs, ImportConfig, PartHeader, PartInputs, error_record,
                                      internal_record, load_info)

_LOG = logging.getLogger(__name__)

#: What a part writer counts (each an object with `inc(n)`: Beam's counters in a pipeline).
COUNTERS = ("data_bytes_read", "data_read_requests", "episodes", "frames", "parts_written", "output_bytes",
            "quality_findings", "files_committed_early")

#: A part written (or failed): ((root, episodes file), FileInputs) for the file's commit.
Written = tuple[tuple[str, str], FileInputs]


class PartWriter(Counted):
    """Writes the parts of read units, one after the other, as one worker does.

    A part's Parquet bytes are encoded on the encoder thread while its frames are checked and the next part
    (of this unit, or of the next unit) is read, typed and checked (pyarrow encodes without holding the
    GIL, so the two share the worker's cores); each part is then stored and committed, in order. The last
    part handed in stays pending until `flush`: a unit of one part, the usual one, would otherwise wait for
    its own encoding.

    It counts what it reads and writes (`COUNTERS`).
    """

    MAX_OPEN_FILES = 4
    COUNTERS = COUNTERS

    def __init__(self, config: ImportConfig, counters: Mapping) -> None:
        super().__init__(config, counters)
        self._readers: OrderedDict[tuple[str, str], data_files.DataFileReader] = OrderedDict()
        self._reads = storage.ReadCounter()
        self._tasks: dict[str, Optional[list[str]]] = {}  # per dataset: meta/tasks.parquet, read once
        self._columns: dict[str, tuple[str, ...]] = {}  # the columns of the data files the last part read
        self._sink = sinks.sink(config.sink)
        self._encoder = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="part-encoder")
        self._pending: Optional[tuple[_Encoding, object]] = None  # a part being encoded, and its `facts`

    def new_bundle(self) -> None:
        """Forget a part still pending from a bundle that failed before `flush` (the runner retries that
        bundle whole, so the part is written again there)."""
        if self._pending is not None:
            _let_go(self._pending[0])
        self._pending = None

    def close(self) -> None:
        self.new_bundle()  # a part still pending here is not stored either
        self._encoder.shutdown(wait=True)
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def write_unit(self, unit: tuple[str, str, int], parts: Iterable[tuple[tuple, PartInputs]], facts=None
                   ) -> Iterator[Written]:
        """The unit's parts in read order: each part's result once it is stored (the part before it as it is
        prepared; the last one by `flush`).

        Args:
            unit: the read unit's key (`read_unit_key`).
            parts: (part key, PartInputs) of each of its parts.
            facts: per (root, episodes file), the FileInputs of its sources and duplicated episodes (a
                mapping to lists); None: the parts are left for `CommitEpisodesFiles`.
        """
        for key, inputs in sorted(parts, key=lambda part: unit_order(unit, part)):
            try:
                with self._piece(key):
                    ready = self._prepare_part(key, inputs)
            except Exception:  # noqa: BLE001 - one part's unexpected failure fails that part alone, as the
                # safety net would if the part were an element of its own
                ready = _part_bug(key, inputs, sys.exc_info())
            done = self.flush()
            if done is not None:
                yield done
            if isinstance(ready, _Encoding):
                self._pending = (ready, facts)
            else:
                yield ready

    def flush(self) -> Optional[Written]:
        """Store the pending part (and commit its file when it was the last part); None when none is pending."""
        if self._pending is None:
            return None
        pending, self._pending = self._pending, None
        return self._finish(*pending)  # `_finish` turns any failure into data

    def _reader(self, root: str, rel: str, info: DatasetInfo) -> data_files.DataFileReader:
        key = (root, rel)
        if key in self._readers:
            self._readers.move_to_end(key)
        else:
            self._readers[key] = data_files.DataFileReader(root, rel, info, self._reads)
            while len(self._readers) > self.MAX_OPEN_FILES:
                self._readers.popitem(last=False)[1].close()
        return self._readers[key]

    def _piece(self, key: tuple[str, str, int]):
        root, rel, part = key
        return run_limits.piece(self._config.limits, "write", f"part {part} of episodes file {rel} of dataset {root}")

    def _finish(self, pending: "_Encoding", facts) -> Written:
        """Store an encoded part under its temporary name and commit its file when it was the last part."""
        root, rel, _ = pending.key
        try:
            with self._piece(pending.key):
                try:
                    written = self._write(pending.header, pending.data.result(), pending.frames, pending.dropped)
                except LeRobotImportError as ex:  # a full disk, a read-only output: the part fails by that rule
                    written = _failed_part(pending.header, [error_record(ex, dataset=root, episodes_file=rel)])
                else:
                    written = dataclasses.replace(written, findings=pending.findings)
                    if facts is not None and written.results and written.results[0].tmp_uri:
                        written = self._commit_if_last((root, rel), pending.header.output, written, facts)
            return (root, rel), written
        except Exception:  # noqa: BLE001 - as in `write_unit`: the part fails alone
            return _part_bug(pending.key, pending.inputs, sys.exc_info())

    def _commit_if_last(self, file_key: tuple[str, str], out: str, written: FileInputs, facts) -> FileInputs:
        """Commit the part's episodes file when this was its last part to be written: the file's outcome,
        else the part's result (for a later worker, or `CommitEpisodesFiles`)."""
        root, rel = file_key
        known = FileInputs.merge(facts[file_key])  # a multimap: [] for a file with neither
        if known.duplicates or _strict_error(written.findings):
            return written  # the file fails: its commit step says why and removes its parts
        result = written.results[0]
        with stopping.output_work():
            if result.num_parts == 1:
                done = commit_file(self._config, root, rel, out, written.results, (), written.findings,
                                   known.sources)
            else:
                parts = self._all_parts(root, rel, out, result, written.findings)
                if parts is None:
                    return written
                done = commit_file(self._config, root, rel, out, parts[0], (), parts[1], known.sources)
        self._counters["files_committed_early"].inc()
        return FileInputs(committed=(done,))

    def _all_parts(self, root: str, rel: str, out: str, result: PartResult, findings
                   ) -> Optional[tuple[list, list]]:
        """Record a part of a file of several parts; when every part is recorded and this worker wins the
        file's commit claim, (every part's result, every part's findings), else None."""
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

    def _prepare_part(self, key: tuple[str, str, int], inputs: PartInputs) -> "_Encoding | Written":
        """Read and type one part, then check its frames while its Parquet bytes are encoded; a failed
        part's result instead."""
        root, rel, part = key
        header = planned = _header(inputs, part, rel)
        dropped: tuple[FailureRecord, ...] = ()
        if inputs.failures:
            header, dropped, failures = drop_failed_episodes(header, inputs.failures)
            if failures:
                return (root, rel), _failed_part(planned, inputs.failures)
        info = load_info(root, skip_videos=self._config.skip_videos)
        typed, errors = self._read_frames(root, info, header.rows)
        if errors:
            records = [error_record(e, dataset=root, episodes_file=rel) for e in errors]
            kept, more, failures = drop_failed_episodes(header, records)
            if failures:
                failed = _failed_part(planned, records + list(dropped))
                return (root, rel), dataclasses.replace(failed, findings=tuple(self._check_remains(
                    root, rel, info, header, typed)))
            header, dropped, errors = kept, dropped + more, []
            typed = {r.position: typed[r.position] for r in header.rows}
        if not errors:
            try:
                table = writes.part_table(info, header.rows, [typed[r.position] for r in header.rows],
                                          {v.file: v.mp4 for v in inputs.mp4s},
                                          inline_index=self._config.inline_index)
            except LeRobotImportError as ex:  # a clip time that does not fit, found while typing the clips
                errors = [ex.with_context(file=rel)]
        if errors:
            failed = _failed_part(planned, [error_record(e, dataset=root, episodes_file=rel) for e in errors]
                                  + list(dropped))
            return (root, rel), dataclasses.replace(failed, findings=tuple(self._check_remains(root, rel, info,
                                                                                                header, typed)))
        data = self._encoder.submit(self._sink.encode, table)  # encoded (and hashed) while the frames are checked
        del table
        findings = self._check(root, rel, info, header, typed, inputs.mp4s)
        n_frames = sum(len(f) for f in typed.values())
        return _Encoding(key=key, inputs=inputs, header=header, frames=n_frames, findings=tuple(findings),
                         data=data, dropped=dropped)

    def _check_remains(self, root: str, rel: str, info: DatasetInfo, header: PartHeader, typed: dict) -> list:
        """The quality findings a failed part's episodes still give (`check_what_remains`): reported with
        the error, so a missing column does not hide, say, timestamps off the frame grid."""
        from transforms.quality.dataset import check_what_remains
        if root not in self._tasks:
            self._tasks[root] = quality.ordered_tasks(root)
        rows = [r for r in header.rows if r.position in typed]
        try:
            found = quality.check_part(root, rel, info, rows, typed, tasks=self._tasks[root],
                                       data_columns=self._columns)
            return found + check_what_remains(root, rel, info, [r for r in header.rows if r.position not in typed],
                                              self._reads, tasks=self._tasks[root], columns=self._columns)
        except (LeRobotImportError, OSError) as ex:  # the part fails with its own error anyway
            _LOG.debug("the quality checks of failed part %s of %s: %s", header.plan.part, rel, ex)
            return []

    def _check(self, root: str, rel: str, info: DatasetInfo, header: PartHeader, typed: dict,
               mp4s) -> list:
        """The quality checks of the part's frames (already typed), its cameras' samples and its data files."""
        if root not in self._tasks:
            self._tasks[root] = quality.ordered_tasks(root)
        columns = self._columns  # of the data files the part's frames were just read from
        findings = quality.check_part(root, rel, info, header.rows, typed, tasks=self._tasks[root],
                                      samples={v.file: v.samples for v in mp4s if v.samples is not None},
                                      data_columns=columns, strict=self._config.strict)
        self._counters["quality_findings"].inc(len(findings))
        return findings

    def _read_frames(self, root: str, info: DatasetInfo, rows) -> tuple[dict, list[LeRobotImportError]]:
        """Each episode's typed frames by row position, and the errors met instead."""
        before = (self._reads.bytes_read, self._reads.requests)
        self._progress_bytes = before[0]
        typed, errors = {}, []
        self._columns = {}
        for data_file, episodes in _by_data_file(rows).items():
            reader = self._reader(root, data_file, info)
            self._columns[data_file] = reader.columns  # for the quality checks: what it holds undeclared
            for batch in reader.read([(r.position, r) for r in episodes]):
                n_typed = n_frames = 0
                for position, _, result in frames.typed_frames(batch, info):
                    if isinstance(result, LeRobotImportError):
                        errors.append(result)
                    else:
                        typed[position] = result
                        n_typed, n_frames = n_typed + 1, n_frames + len(result)
                # the live progress line, per batch as it is read (the counters are only read at the end)
                read_now = self._reads.bytes_read
                live_counts.add(episodes=n_typed, frames=n_frames, data_bytes=read_now - self._progress_bytes)
                self._progress_bytes = read_now
        self._counters["data_bytes_read"].inc(self._reads.bytes_read - before[0])
        self._counters["data_read_requests"].inc(self._reads.requests - before[1])
        return typed, errors

    def _write(self, header: PartHeader, encoded: sinks.Encoded, n_frames: int,
               dropped: tuple[FailureRecord, ...] = ()) -> FileInputs:
        try:
            with stopping.output_work():
                tmp = self._sink.stage(header.output, header.episodes_file, header.plan.part, header.num_parts,
                                       encoded)
        finally:
            encoded.close()  # stored or failed, its bytes are not needed again
        self._counters["episodes"].inc(len(header.rows))
        self._counters["frames"].inc(n_frames)
        self._counters["parts_written"].inc()
        self._counters["output_bytes"].inc(encoded.size)
        return _part_result(header, tmp_uri=tmp, frames=n_frames, bytes=encoded.size, sha256=encoded.sha256,
                            dropped=dropped)


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


@dataclasses.dataclass(frozen=True)
class _Encoding:
    """A part read, typed and checked, whose bytes and their sha256 (`data`: the sink's `Encoded`) the encoder
    thread is making (Parquet encodes and hashes without the GIL)."""
    key: tuple[str, str, int]
    inputs: PartInputs
    header: PartHeader
    frames: int
    findings: tuple
    data: futures.Future
    dropped: tuple = ()  # v2.x: the failures of the episodes left out of the part


def _let_go(pending: _Encoding) -> None:
    """Close a part's encoded bytes that will not be stored, once its encoding ends."""
    def close(done: futures.Future) -> None:
        if not done.cancelled() and done.exception() is None:
            done.result().close()
    pending.data.add_done_callback(close)


def _strict_error(findings) -> bool:
    return any(f.severity == quality.ERROR for f in findings)


def part_record(result: PartResult, findings) -> dict:
    """What the journal records of a part written under its temporary name (a written part has no failure)."""
    return {"part": result.part, "num_parts": result.num_parts, "episode_indices": list(result.episode_indices),
            "tmp_uri": result.tmp_uri, "frames": result.frames, "bytes": result.bytes,
            "data_bytes": result.data_bytes, "oversized": result.oversized, "sha256": result.sha256,
            "findings": [dataclasses.asdict(f) for f in findings],
            "dropped": [f.to_json_dict() for f in result.dropped],
            "episode_failures": [episode_failures_json(f) for f in result.episode_failures]}


def part_from_record(root: str, rel: str, record: dict) -> PartResult:
    """The PartResult a part record holds (`part_record`)."""
    return PartResult(dataset=root, episodes_file=rel, part=int(record["part"]), num_parts=int(record["num_parts"]),
                      episode_indices=tuple(int(e) for e in record["episode_indices"]), tmp_uri=record["tmp_uri"],
                      frames=int(record["frames"]), bytes=int(record["bytes"]), data_bytes=int(record["data_bytes"]),
                      oversized=bool(record["oversized"]), sha256=str(record["sha256"]),
                      dropped=tuple(FailureRecord(**f) for f in record.get("dropped") or ()),
                      episode_failures=tuple(episode_failures_from_json(f)
                                             for f in record.get("episode_failures") or ()))


def drop_failed_episodes(header: PartHeader, failures: Sequence[FailureRecord]
                         ) -> tuple[PartHeader, tuple[FailureRecord, ...], list[FailureRecord]]:
    """(the part without the episodes whose own files failed, their failures, the failures that fail the part).

    In a v2.x group every episode has its own data file and MP4s: a failure naming one of them is that
    episode's alone, and the rest of its part (and group) imports without it. A failure of anything else
    (or of a v3.0 episodes file, whose files episodes share) fails the part as before: nothing is dropped.
    A part left without episodes is written empty, so that the group's other parts keep their places.
    """
    if not layouts.layout_of(header.episodes_file).episodes_own_files:
        return header, (), list(failures)
    owner: dict[str, int] = {}
    for row in header.rows:
        for file in (row.data_file, *(clip.file for clip in row.videos)):
            owner[file] = row.position
    by_position = {r.position: r for r in header.rows}
    lost: dict[int, list[FailureRecord]] = {}
    for f in failures:
        position = owner.get(f.file or "")
        if position is None:
            return header, (), list(failures)
        ep = by_position[position].episode_index
        lost.setdefault(position, []).append(f if f.episode_index == ep else dataclasses.replace(f, episode_index=ep))
    kept = tuple(r for r in header.rows if r.position not in lost)
    dropped = tuple(f for fs in lost.values() for f in fs)
    return dataclasses.replace(header, rows=kept), dropped, []


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
        data_bytes=header.plan.data_bytes, oversized=header.plan.oversized,
        episode_failures=header.episode_failures, **written),), outputs=(header.output,))


def _failed_part(header: PartHeader, failures: Iterable[FailureRecord]) -> FileInputs:
    return _part_result(header, failures=tuple(sorted(set(failures), key=FailureRecord.sort_key)))


def _part_bug(key: tuple[str, str, int], inputs: PartInputs, exc_info) -> Written:
    root, rel, part = key
    _LOG.error("writing part %d of %s of %s failed unexpectedly: %s", part, rel, root, exc_info[1])
    bug = internal_record(exc_info, dataset=root, episodes_file=rel)
    if inputs.headers:
        return (root, rel), _failed_part(inputs.headers[0], [bug])
    return (root, rel), FileInputs(results=(PartResult(root, rel, part, 1, (), failures=(bug,)),))


def unit_bug(parts: Iterable[tuple[tuple, PartInputs]], exc_info) -> Iterator[Written]:
    """A read unit whose writing raised outside any one part: each of its parts fails with the error."""
    for key, inputs in parts:
        yield _part_bug(key, inputs, exc_info)
