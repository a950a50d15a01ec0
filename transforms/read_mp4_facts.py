"""The import's MP4 step: read each MP4 a dataset's clips use once, and update the media_index/ shards.

    clip uses + Mp4Version ─► group by MP4 ─► read its head and moov (range reads), or take its row from
                              the old shard when it is unchanged since the last run ─► per part that
                              uses it: the file's facts (URI, size, MediaIndex when inline), or the failure
                            ─► rows read + ShardTouch ─► group by shard ─► rewrite only the shards that
                              gain, change or lose a row

Each MP4 is read once, whatever the number of episodes in it, and not at all when its row is carried.
The table logic itself is pure and lives in `transforms.output.index_shards`.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam

from transforms.base import stopping
from transforms.output import journal
from transforms.output.index_shards import FAILED, ShardOutcome, update_media_index_shard
from transforms.base.errors import LeRobotImportError
from transforms.work.messages import (ClipUse, DatasetReport, PartInputs, ShardRow, ShardTouch, error_record,
                                      internal_record, output_root)
from transforms.work.mp4_facts import Mp4FactsReader
from transforms.safety_net import ImportDoFn, ImportStep, counter, counters, guarded, in_phase

_LOG = logging.getLogger(__name__)


class Mp4Facts(NamedTuple):
    """What the MP4 step tells the others, keyed for where each goes."""

    to_parts: beam.PCollection  # (part key, PartInputs): the MP4's facts, or why a part using it fails
    reports: beam.PCollection  # (dataset, DatasetReport): media_index shards, MP4 tokens, warnings, unusable MP4s


class ReadMp4Facts(ImportStep):
    """Read every MP4 the clips use, once each, unless its media_index/ row is carried; update the shards.

    Args:
        config: the run's configuration.

    Input: ((dataset, MP4 path), ClipUse), one per part and MP4; or the tuple (those clip uses, ((dataset,
    MP4 path), Mp4Version) from the check step, ((dataset, shard), ShardTouch) from the check step). An
    MP4 without an Mp4Version is read (its row carries no token, so the next run reads it again).
    Returns: `Mp4Facts`. An MP4 whose reading raised unexpectedly fails the parts that use it with rule
    `internal`.
    """

    def expand(self, inputs):
        if isinstance(inputs, tuple):
            clip_uses, versions, touches = inputs
            by_mp4 = (clip_uses, versions) | "WithVersions" >> beam.Flatten()
        else:
            by_mp4, touches = inputs, None
        read = (by_mp4
                | "GroupByMp4" >> beam.GroupByKey()
                | "ReadMp4s" >> guarded(_ReadMp4File(self._config), "index_rows", "reports", main="to_parts"))
        bugs = read.bad | "Mp4Bugs" >> beam.FlatMap(_mp4_bug)
        rows = read.index_rows | "KeyByShard" >> beam.Map(lambda r: ((r.row.dataset, r.row.shard), r))
        if touches is not None:
            rows = (rows, touches) | "WithTouches" >> beam.Flatten()
        index_files = rows | "WriteMediaIndex" >> WriteMediaIndex(self._config)
        return Mp4Facts((read.to_parts, bugs) | "Mp4ToParts" >> beam.Flatten(),
                        (read.reports, index_files) | "Mp4Reports" >> beam.Flatten())


class _ReadMp4File(ImportDoFn):
    """((dataset, MP4), its ClipUses and Mp4Version) -> the worker's `Mp4FactsReader`'s result: the file's
    facts (or failure) for each part; the row read for media_index/; the MP4's token, its warnings."""

    def setup(self) -> None:
        self._reader = Mp4FactsReader(self._config, counters(Mp4FactsReader.COUNTERS))

    def start_bundle(self) -> None:
        self._reader.new_bundle()

    @in_phase("plan", lambda element: f"video file {element[0][1]} of dataset {element[0][0]}")
    def process(self, element: tuple[tuple[str, str], Iterable]) -> Iterator:
        (root, rel), values = element
        told = self._reader.read(root, rel, values)
        yield from told.to_parts
        if told.index_row is not None:
            yield beam.pvalue.TaggedOutput("index_rows", told.index_row)
        if told.report is not None:
            yield beam.pvalue.TaggedOutput("reports", (root, told.report))


def _mp4_bug(bad) -> Iterator[tuple[tuple, PartInputs]]:
    ((root, rel), values), exc_info = bad
    _LOG.error("reading video file %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    first: dict[tuple, int] = {}
    for use in values:
        if isinstance(use, ClipUse):
            first[use.part] = min(use.first_episode, first.get(use.part, use.first_episode))
    for part, episode in sorted(first.items()):
        bug = internal_record(exc_info, dataset=root, episodes_file=part[1], file=rel, episode_index=episode)
        yield part, PartInputs(failures=(bug,))


class WriteMediaIndex(ImportStep):
    """((dataset, shard), ShardRow or ShardTouch) -> (dataset, DatasetReport with the ShardOutcome):
    each shard that gains, changes or loses a row is rewritten (its other rows carried from the old file);
    a shard left with no row is reported `emptied` (the finish step removes it).

    Args:
        config: the run's configuration (where each dataset's output goes).
    """

    def expand(self, keyed):
        written = (keyed
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShards" >> guarded(_WriteShard(self._config), main="written"))
        bugs = written.bad | "ShardBugs" >> beam.Map(_shard_bug)
        return (written.written, bugs) | "ShardReports" >> beam.Flatten()


def _shard_bug(bad) -> tuple[str, DatasetReport]:
    """A shard that could not be written fails its dataset (the episode parts still stand); its MP4s are
    left out of the manifest's `video_versions`, so the next run reads them again and rewrites it."""
    ((root, shard), _), exc_info = bad
    _LOG.error("writing media_index shard %s of %s failed unexpectedly: %s", shard, root, exc_info[1])
    return root, DatasetReport(failures=(internal_record(exc_info, dataset=root, episodes_file=None, file=shard),),
                               index_files=(ShardOutcome(shard, FAILED),))


class _WriteShard(ImportDoFn):
    def setup(self) -> None:
        self._written = counter("media_index_shards_written")

    @in_phase("write", lambda element: f"media_index shard {element[0][1]} of dataset {element[0][0]}")
    def process(self, element: tuple[tuple[str, str], Iterable]) -> Iterator[tuple[str, DatasetReport]]:
        (root, shard), values = element
        read = [v for v in values if isinstance(v, ShardRow)]
        rows = [r.row for r in read]
        touch = next((v for v in values if isinstance(v, ShardTouch)), None)
        out = output_root([r.output for r in read] + ([touch.output] if touch is not None else []),
                          f"media_index shard {shard} of {root}")
        with stopping.output_work():
            try:
                outcome = update_media_index_shard(out, shard, rows, touch.keep if touch is not None else None)
            except LeRobotImportError as ex:  # a full disk, a read-only output: the shard fails by that rule
                failure = error_record(ex, dataset=root, episodes_file=None)
                outcome = ShardOutcome(shard, FAILED)
                yield root, DatasetReport(failures=(failure,), index_files=(outcome,))
                return
            if outcome.action in ("written", "emptied"):  # recorded at once, as episodes files are
                journal.record_shard(out, run_id=self._config.run_id, options=self._config.output_options(),
                                      dataset=root, shard=shard, action=outcome.action,
                                      record=outcome.record.to_json() if outcome.record else None,
                                      versions={v.file: v.version for v in rows})
        if outcome.action == "written":
            self._written.inc()
        yield root, DatasetReport(index_files=(outcome,))
