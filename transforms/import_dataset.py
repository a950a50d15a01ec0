"""ImportLeRobotDatasets: the Beam story of an import, and the thin DoFns it is told with.

    datasets ─► episodes files ─► reshuffle ─► plan each file: parts of whole episodes, one small
                                               work item per episode (paths and ranges, no data)
       work items ─► group by MP4 ─► read each moov once ─► clip facts (+ MediaIndex) per file
       part plans + clip facts ─► group by part ─► read the part's data-file slices (only the row
                                   groups it needs; open files reused per worker) ─► write the part
                                   under a temporary name
       parts ─► group by episodes file ─► move all parts into place, or none
       outcomes ─► per dataset: errors.jsonl + manifest.json

Only small elements cross a shuffle; frames are read where they are written. Every failure travels
as data (a FailureRecord), so one bad episodes file never stops the others.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Iterable, Iterator, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms import storage
from transforms.lerobot import data_files
from transforms.lerobot import fingerprint as dataset_fingerprint
from transforms.lerobot import episodes_files as episodes_metadata
from transforms.episode import output as sink
from transforms import media_files
from transforms.lerobot.info import INDEXED_CODECS
from transforms.errors import FailureRecord, LeRobotImportError
from transforms.messages import (FileOutcome, ImportConfig, PartHeader, PartResult,
                                    episodes_file_uris, error_record, failed_file, load_info)
from transforms.episode.paths import output_part_path

_LOG = logging.getLogger(__name__)
NAMESPACE = "lerobot_import"


def _counter(name: str):
    return Metrics.counter(NAMESPACE, name)


class ListEpisodesFiles(beam.DoFn):
    """dataset root -> (root, episodes file relative path), one per `meta/episodes/*/*.parquet`."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, root: str) -> Iterator:
        try:
            uris = episodes_file_uris(root)
        except OSError as ex:
            uris, err = [], LeRobotImportError("io", f"cannot list the episodes files: {ex}", file="meta/episodes")
        else:
            err = LeRobotImportError("episodes_file", "the dataset has no meta/episodes/*/*.parquet files",
                                     file="meta/episodes") if not uris else None
        if err is not None:
            rec = error_record(err, dataset=root, episodes_file=None)
            yield beam.pvalue.TaggedOutput("outcomes", failed_file(root, "meta/episodes", (), [rec]))
        for uri in uris:
            yield root, storage.relative_to(root, uri)


class PlanEpisodesFile(beam.DoFn):
    """(root, episodes file) -> part headers (main), the MP4s each part uses ("video_uses"), the
    episode ids for the dataset-wide duplicate check ("episode_ids"), or a failed outcome.

    Per episode only a few small tuples leave this step; the full rows travel once, in the part's header."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._sizes: dict[tuple[str, str], int] = {}

    def _data_file_size(self, root: str, rel: str) -> int:
        """A data file's size, asked of storage once per worker: many episodes files share a data file."""
        key = (root, rel)
        if key not in self._sizes:
            self._sizes[key] = storage.file_size(storage.dataset_file(root, rel), what="data file", file=rel)
        return self._sizes[key]

    def process(self, element: tuple[str, str]) -> Iterator:
        root, rel = element
        raw = None
        try:
            raw = storage.read_bytes(storage.dataset_file(root, rel), what="episodes file", file=rel)
            info = load_info(root, skip_videos=self._config.skip_videos)
            rows = episodes_metadata.read_episode_rows(raw, info, file=rel)
            parts = episodes_metadata.plan_parts(rows, lambda f: self._data_file_size(root, f),
                                                 limit=self._config.data_span_limit,
                                                 in_parts=self._config.read_in_parts, file=rel)
        except LeRobotImportError as ex:
            episodes = episodes_metadata.episode_indices(raw) if raw is not None else ()
            outcome = failed_file(root, rel, episodes, [error_record(ex, dataset=root, episodes_file=rel)])
            _counter("errors").inc(len(outcome.failures))
            yield beam.pvalue.TaggedOutput("outcomes", outcome)
            return
        by_position = {r.position: r for r in rows}
        codecs = tuple(f.video_codec for f in info.video_features)
        for plan in parts:
            key = (root, rel, plan.part)
            part_rows = tuple(by_position[p] for p in plan.positions)
            yield key, ("plan", PartHeader(root, rel, plan, len(parts), part_rows))
            uses: dict[str, tuple] = {}
            for row in part_rows:
                yield beam.pvalue.TaggedOutput("episode_ids", ((root, row.episode_index), rel))
                for video, codec in zip(row.videos, codecs):
                    uses.setdefault(video.file, (key, codec, row.episode_index))
            for file, use in uses.items():  # one use per (MP4, part), naming the part's first episode in it
                yield beam.pvalue.TaggedOutput("video_uses", ((root, file), use))


class ReadVideoFiles(beam.DoFn):
    """(MP4, the parts that use it) -> (part key, ("video", path, VideoFile)) for each part, or failures.

    The file's facts (size, MediaIndex from its moov) are read once, whatever the number of episodes."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, element: tuple[tuple[str, str], Iterable[tuple]]) -> Iterator:
        (root, rel), uses = element
        uses = list(uses)
        first_episode = {}
        for key, _, episode in uses:
            first_episode[key] = min(episode, first_episode.get(key, episode))
        part_keys = sorted(first_episode)
        build_index = any(codec in INDEXED_CODECS for _, codec, _ in uses)
        try:
            facts = media_files.read_video_file(storage.dataset_file(root, rel), rel, build_index=build_index)
        except LeRobotImportError as ex:
            _counter("errors").inc()
            for key in part_keys:
                failure = LeRobotImportError(ex.rule, ex.message, file=ex.file, episode_index=first_episode[key])
                yield key, ("failure", error_record(failure, dataset=root, episodes_file=key[1]))
            return
        _counter("mp4_files").inc()
        _counter("mp4_bytes_read").inc(facts.bytes_read)
        _counter("mp4_read_requests").inc(facts.requests)
        video_file = facts.video_file(inline_index=self._config.inline_index)
        for key in part_keys:
            yield key, ("video", rel, video_file)
        if facts.index is not None and not self._config.inline_index:
            yield beam.pvalue.TaggedOutput("index_rows", (root, facts.uri, facts.size, facts.index))


class WritePart(beam.DoFn):
    """(part key, its plan + MP4 facts + failures) -> (file key, PartResult), written under a temp name.

    The part's frames are read here, from only the row groups its episodes need; a worker keeps its
    last few data files open, so parts sharing a data file read its footer and `index` once. Frames
    never cross a shuffle: only plans, paths and MP4 facts do."""

    MAX_OPEN_FILES = 4

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._readers: OrderedDict[tuple[str, str], data_files.DataFileReader] = OrderedDict()
        self._counter = storage.ReadCounter()

    def teardown(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def _reader(self, root: str, rel: str, info) -> data_files.DataFileReader:
        key = (root, rel)
        if key in self._readers:
            self._readers.move_to_end(key)
        else:
            self._readers[key] = data_files.DataFileReader(root, rel, info, self._counter)
            while len(self._readers) > self.MAX_OPEN_FILES:
                self._readers.popitem(last=False)[1].close()
        return self._readers[key]

    def process(self, element: tuple[tuple, Iterable[tuple]]) -> Iterator:
        (root, rel, part), messages = element
        header, videos, failures = None, {}, []
        for message in messages:
            tag = message[0]
            if tag == "plan":
                header = message[1]
            elif tag == "video":
                videos[message[1]] = message[2]
            else:
                failures.append(message[1])
        assert header is not None, f"part {part} of {rel} has no plan"
        rows = header.rows
        base = dict(dataset=root, episodes_file=rel, part=part, num_parts=header.num_parts,
                    episode_indices=tuple(r.episode_index for r in rows), data_bytes=header.plan.data_bytes,
                    oversized=header.plan.oversized)
        info = load_info(root, skip_videos=self._config.skip_videos)
        frames: dict[int, object] = {}
        before = (self._counter.bytes_read, self._counter.requests)
        if not failures:
            for data_file, episodes in _by_data_file(rows).items():
                for batch in self._reader(root, data_file, info).read([(r.position, r) for r in episodes]):
                    for position, row, result in batch:
                        if isinstance(result, LeRobotImportError):
                            failures.append(error_record(result, dataset=root, episodes_file=rel))
                        else:
                            frames[position] = result
        _counter("data_bytes_read").inc(self._counter.bytes_read - before[0])
        _counter("data_read_requests").inc(self._counter.requests - before[1])
        if failures:
            _counter("errors").inc(len(failures))
            yield (root, rel), PartResult(**base, failures=tuple(sorted(set(failures), key=FailureRecord.sort_key)))
            return
        table = sink.part_table(info, rows, [frames[r.position] for r in rows], videos,
                                inline_index=self._config.inline_index)
        data = sink.parquet_bytes(table)
        out = self._config.output_of(root)
        final = storage.join(out, output_part_path(rel, part, header.num_parts))
        tmp = storage.write_tmp(final, lambda f: f.write(data))
        n_frames = sum(len(frames[r.position]) for r in rows)
        _counter("episodes").inc(len(rows))
        _counter("frames").inc(n_frames)
        _counter("parts_written").inc()
        _counter("output_bytes").inc(len(data))
        yield (root, rel), PartResult(**base, tmp_uri=tmp, frames=n_frames, bytes=len(data))


def _by_data_file(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row.data_file, []).append(row)
    return out


def _duplicate_episodes(element: tuple[tuple[str, int], Iterable[str]]) -> Iterator:
    """An episode_index claimed by several rows of the dataset's episodes files fails each of those files."""
    (root, episode), files = element
    files = sorted(files)
    if len(files) > 1:
        for rel in dict.fromkeys(files):
            others = ", ".join(f for f in dict.fromkeys(files) if f != rel) or "itself"
            err = LeRobotImportError("duplicate_episode", f"episode {episode} is listed {len(files)} times "
                                     f"(also in {others})", episode_index=episode, file=rel)
            yield (root, rel), error_record(err, dataset=root, episodes_file=rel)


class CommitEpisodesFile(beam.DoFn):
    """(file key, its PartResults) -> FileOutcome: every part moved into place, or none."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, element: tuple[tuple[str, str], Iterable]) -> Iterator[FileOutcome]:
        (root, rel), items = element
        items = list(items)
        results = [i for i in items if isinstance(i, PartResult)]
        extra = [i for i in items if isinstance(i, FailureRecord)]
        outcome = sink.commit_episodes_file(self._config.output_of(root), root, rel, results, extra)
        if outcome.status == "failed":
            primary = [f for f in outcome.failures if f.rule != "file_failed"] or list(outcome.failures)
            _LOG.warning("episodes file %s of %s failed: %s", rel, root, primary[0].message)
        else:
            _LOG.info("episodes file %s of %s imported: %d episodes, %d frames, %d parts", rel, root,
                      outcome.episodes, outcome.frames, len(outcome.parts))
        yield outcome


class CheckDataset(beam.DoFn):
    """dataset root -> (root, fingerprint) to import, or ("skipped") when its last import is up to date."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, root: str) -> Iterator:
        try:
            current = dataset_fingerprint.fingerprint(root)
        except OSError as ex:
            _LOG.warning("cannot list %s (%s); importing it anyway", root, ex)
            yield root, None
            return
        if not self._config.force:
            raw = storage.optional_read(storage.join(self._config.output_of(root), "manifest.json"))
            previous = json.loads(raw) if raw else None
            if dataset_fingerprint.up_to_date(previous, current, self._config.output_options()):
                _LOG.info("%s is unchanged since its import of %s: skipped (--force redoes it)", root,
                          previous.get("finished_at"))
                _counter("datasets_skipped").inc()
                yield beam.pvalue.TaggedOutput("skipped", root)
                return
        yield root, current


class FinishDataset(beam.DoFn):
    """(dataset, its outcomes) -> errors.jsonl and manifest.json under the dataset's output; yields the manifest."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, element: tuple[str, Iterable], fingerprints: dict) -> Iterator[dict]:
        root, items = element
        outcomes = [i for i in items if isinstance(i, FileOutcome)]
        media_index_files = sorted(i for i in items if isinstance(i, str))
        out = self._config.output_of(root)
        for stale in media_files.stale_media_index_parts(out, keep=media_index_files):
            storage.remove(stale)
        try:
            info_sha = load_info(root, skip_videos=self._config.skip_videos).sha256
        except LeRobotImportError:
            info_sha = None
        failures = [f for o in outcomes for f in o.failures]
        source = fingerprints.get(root)
        doc = sink.manifest(root, info_sha, outcomes, started_at=self._config.started_at,
                            finished_at=sink.now_iso(), media_index_files=media_index_files,
                            source=source.to_json() if source else None, run_id=self._config.run_id,
                            options=self._config.output_options())
        totals = doc["totals"]
        if totals["episodes"] != totals["episodes_written"] + totals["episodes_failed"]:
            doc["status"] = "failed"
            acc = FailureRecord(root, None, None, None, "accounting",
                                f"episodes read ({totals['episodes']}) != written ({totals['episodes_written']}) + "
                                f"failed ({totals['episodes_failed']})")
            failures.append(acc)
            totals["errors"] += 1
        storage.write_atomic(storage.join(out, "errors.jsonl"), sink.errors_jsonl(failures))
        storage.write_atomic(storage.join(out, "manifest.json"),
                             (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
        _counter("datasets_imported" if doc["status"] == "imported" else "datasets_failed").inc()
        yield doc


# The safety net: an unexpected exception (a bug, or a library failing in a way no rule foresaw) fails
# the one element as rule `internal` and the run goes on; every expected failure is a rule already.
# (Beam's DirectRunner runs pipelines with this guard on the FnApiRunner, never on Prism.)
_GUARD = dict(dead_letter_tag="bad")  # the main output keeps its name (`good` when it has none)


def _bug(exc_info, *, dataset: str, episodes_file: Optional[str], file: Optional[str] = None,
         episode_index: Optional[int] = None) -> FailureRecord:
    _, text, _ = exc_info
    return FailureRecord(dataset, episodes_file, episode_index, file, "internal",
                         f"[internal] unexpected error, please report it: {text}")


def _plan_bug(bad) -> FileOutcome:
    (root, rel), exc_info = bad
    _LOG.error("planning %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    return failed_file(root, rel, (), [_bug(exc_info, dataset=root, episodes_file=rel, file=rel)])


def _video_file_bug(bad) -> Iterator:
    ((root, rel), uses), exc_info = bad
    _LOG.error("reading video file %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    for key, _, episode in uses:
        yield key, ("failure", _bug(exc_info, dataset=root, episodes_file=key[1], file=rel, episode_index=episode))


def _part_bug(bad) -> tuple:
    ((root, rel, part), messages), exc_info = bad
    _LOG.error("writing part %d of %s of %s failed unexpectedly: %s", part, rel, root, exc_info[1])
    header = next((m[1] for m in messages if m[0] == "plan"), None)
    episodes = tuple(r.episode_index for r in header.rows) if header else ()
    return (root, rel), PartResult(root, rel, part, header.num_parts if header else 1, episodes,
                                   failures=(_bug(exc_info, dataset=root, episodes_file=rel),))


class ImportLeRobotDatasets(beam.PTransform):
    """Import LeRobot v3 datasets (a PCollection of root URIs) into `config`'s outputs.

    Returns the PCollection of manifests, one per dataset imported (skipped datasets have none)."""

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, roots):
        config = self._config
        checked = roots | "CheckDatasets" >> beam.ParDo(CheckDataset(config)).with_outputs("skipped", main="todo")
        listed = (checked.todo
                  | "DatasetRoots" >> beam.Keys()
                  | "ListEpisodesFiles" >> beam.ParDo(ListEpisodesFiles(config)).with_outputs("outcomes",
                                                                                              main="files"))
        planned = (listed.files
                   | "SpreadEpisodesFiles" >> beam.Reshuffle()
                   | "PlanEpisodesFiles" >> beam.ParDo(PlanEpisodesFile(config)).with_outputs(
                       "video_uses", "episode_ids", "outcomes", main="headers").with_exception_handling(**_GUARD))
        video_files = (planned.video_uses
                       | "GroupByVideoFile" >> beam.GroupByKey()
                       | "ReadVideoFiles" >> beam.ParDo(ReadVideoFiles(config)).with_outputs(
                           "index_rows", main="facts").with_exception_handling(**_GUARD))
        media_index_files = (video_files.index_rows
                             | "WriteMediaIndex" >> media_files.WriteMediaIndex(config))
        duplicates = (planned.episode_ids
                      | "GroupByEpisodeIndex" >> beam.GroupByKey()
                      | "FindDuplicateEpisodes" >> beam.FlatMap(_duplicate_episodes))
        video_failures = video_files.bad | "VideoFileBugs" >> beam.FlatMap(_video_file_bug)
        parts = ((planned.headers, video_files.facts, video_failures)
                 | "AllPartMessages" >> beam.Flatten()
                 | "GroupByPart" >> beam.GroupByKey()
                 | "WriteParts" >> beam.ParDo(WritePart(config)).with_exception_handling(**_GUARD))
        part_failures = parts.bad | "PartBugs" >> beam.Map(_part_bug)
        committed = ((parts.good, part_failures, duplicates)
                     | "PartsAndDuplicates" >> beam.Flatten()
                     | "GroupByEpisodesFile" >> beam.GroupByKey()
                     | "CommitEpisodesFiles" >> beam.ParDo(CommitEpisodesFile(config)))
        plan_failures = planned.bad | "PlanBugs" >> beam.Map(_plan_bug)
        outcomes = ((listed.outcomes, planned.outcomes, plan_failures, committed)
                    | "AllOutcomes" >> beam.Flatten()
                    | "ByDatasetOutcome" >> beam.Map(lambda o: (o.dataset, o)))
        return ((outcomes, media_index_files)
                | "OutcomesAndIndexFiles" >> beam.Flatten()
                | "GroupByDataset" >> beam.GroupByKey()
                | "FinishDatasets" >> beam.ParDo(FinishDataset(config),
                                                 fingerprints=beam.pvalue.AsDict(checked.todo)))
