"""CheckDatasets, the first step of the import: which datasets (and which of their episodes files) to import,
what the run does with their MP4s' media_index/ rows, and the sources of each file to import."""

from __future__ import annotations

import logging
from typing import Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam

from transforms.base import hub, live_counts, storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import fingerprint as dataset_fingerprint
from transforms.lerobot.dataset import check_dataset, list_episodes_files
from transforms.lerobot.info import META_EPISODES_DIR
from transforms.messages import (DatasetReport, FileInputs, Mp4Version,
                                 ReadRows, ShardTouch, error_record, internal_record)
from transforms.output import damage as output_damage
from transforms.output import incremental, safety
from transforms.output.index_shards import MediaIndexPlan
from transforms.safety_net import ImportDoFn, ImportStep, counter, guarded, in_phase

_LOG = logging.getLogger(__name__)


class CheckedDatasets(NamedTuple):
    """The datasets to import."""

    episodes_files: beam.PCollection  # (root, episodes file): the episodes files of those datasets
    reports: beam.PCollection  # (root, DatasetReport): each dataset imported (its fingerprint), or why it
    #                            failed before its episodes files were read
    mp4_versions: beam.PCollection  # ((root, MP4), Mp4Version): each MP4 the files to import use
    shard_touches: beam.PCollection  # ((root, media_index shard), ShardTouch): the shards that may change
    file_sources: beam.PCollection  # ((root, episodes file), FileInputs): the sources of each file to import


class CheckDatasets(ImportStep):
    """Decide which datasets to import and list their episodes files.

    A dataset whose last import succeeded with the same options from the same files is skipped (it
    appears in no output); `--force` imports it anyway. Of the others, only the episodes files whose
    sources changed since the output's last import (or that are new, or failed then) go on to be
    planned; the unchanged and the removed ones are reported to the finish step, which carries or
    deletes their output. It also decides, per MP4, whether its media_index/ row is carried (unchanged
    since the last run) or read again, and which shards may change: the MP4 step and the shard writer
    are told (`mp4_versions`, `shard_touches`). The datasets are checked as a person would (the
    root exists, holds meta/info.json, which parses, says v3.x, and episodes files are listed). A
    dataset that fails before any episodes file is found (no root, no episodes files, v2.x, an
    unexpected error) fails as a whole: one failure, "0 episodes files".

    Args:
        config: the run's configuration.

    Input: dataset root URIs. Returns: `CheckedDatasets`.
    """

    def expand(self, roots):
        checked = roots | "Check" >> guarded(_CheckDataset(self._config), "reports", "mp4_versions", "shard_touches",
                                             "file_sources", main="episodes_files")
        bugs = checked.bad | "CheckBugs" >> beam.Map(_check_bug)
        return CheckedDatasets(checked.episodes_files, (checked.reports, bugs) | "CheckReports" >> beam.Flatten(),
                               checked.mp4_versions, checked.shard_touches, checked.file_sources)


class _CheckDataset(ImportDoFn):
    def setup(self) -> None:
        self._skipped = counter("datasets_skipped")

    @in_phase("check", lambda root: f"dataset {root}")
    def process(self, root: str) -> Iterator:
        if storage.hub_repo(root) and not storage.hub_commit(root):
            # A Hub root the run could not pin at a commit (missing, private, gated, no such revision):
            # ask once more here so the dataset fails with the Hub's own answer, alone.
            try:
                hub.pin(root)
            except LeRobotImportError as ex:
                failure = error_record(ex, dataset=root, episodes_file=None)
                yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(failures=(failure,))))
                return
        config, out = self._config, self._config.output_of(root)
        options = config.output_options()
        source = _fingerprint(root)
        try:
            safety.check_output(out)  # also when no launcher checked it first
            previous = incremental.previous_manifest(root, out, options)
            damage = incremental.find_output_damage(root, out, previous, force=config.force,
                                                    checksums=config.verify_output)
        except LeRobotImportError as ex:  # the output's state names paths outside it: touch nothing of it
            failure = error_record(ex, dataset=root, episodes_file=None)
            yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(failures=(failure,))))
            return
        if source is not None and not config.force and not damage and incremental.up_to_date(root, source, previous,
                                                                                              options):
            self._skipped.inc()
            incremental.sweep_journal(root, out, config.run_id)
            return
        previous = output_damage.without_damage(previous, damage)
        yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(sources=(source,), notes=tuple(damage.notes()))))
        try:
            files = episodes_files(root, skip_videos=config.skip_videos)
        except LeRobotImportError as ex:
            # A dataset whose episodes files can be listed still has each of them planned: planning
            # meets the same cause in info.json and fails each file with every one of its episodes
            # accounted for. Without any, the dataset fails as a whole ("0 episodes files").
            files = _listed_anyway(root)
            if not files:
                failure = error_record(ex, dataset=root, episodes_file=None)
                yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(failures=(failure,))))
                return
        decided = incremental.decide(root, previous, options, inline_index=config.inline_index, force=config.force,
                                     damaged=damage.shards)
        yield beam.pvalue.TaggedOutput("reports", (root, _report(decided)))
        yield from _file_messages(root, files, decided)
        if decided.media is not None:
            yield from _media_messages(root, decided.media)


def _report(decided: incremental.RunDecision) -> DatasetReport:
    return DatasetReport(file_sources=decided.file_sources, kept=decided.kept, warnings=decided.warnings,
                         index_kept=decided.index_kept, video_versions=decided.video_versions)


def _file_messages(root: str, files: Sequence[str], decided: incremental.RunDecision) -> Iterator:
    """Each episodes file to import, to planning (with its rows when they were read to tell what changed:
    planning does not read it again), and its sources to the commit (which records the file's manifest
    entry, sources included, at once)."""
    known = {s.episodes_file: s for s in decided.file_sources}
    for rel in files:
        if rel in decided.leave:
            continue
        live_counts.add(episodes_files=1)
        yield (root, rel, ReadRows(decided.read[rel])) if rel in decided.read else (root, rel)
        if rel in known:
            yield beam.pvalue.TaggedOutput("file_sources", ((root, rel), FileInputs(sources=(known[rel],))))


def _media_messages(root: str, media: MediaIndexPlan) -> Iterator:
    """To the MP4 step: each MP4 an imported file uses, with its token and whether its row is carried;
    to the shard writer: each shard that may change, with the URIs whose old rows stay."""
    for rel in sorted(media.used):
        if media.tokens[rel] == "missing":  # nothing to carry nor record: not one message per MP4 of a gone folder
            continue
        known = Mp4Version(media.tokens[rel], rel in media.carried, rel in media.shared)
        yield beam.pvalue.TaggedOutput("mp4_versions", ((root, rel), known))
    for shard, keep in media.touched.items():
        yield beam.pvalue.TaggedOutput("shard_touches", ((root, shard), ShardTouch(keep)))


def _fingerprint(root: str) -> Optional[dataset_fingerprint.Fingerprint]:
    try:
        return dataset_fingerprint.fingerprint(root)
    except OSError as ex:
        _LOG.warning("cannot list %s (%s); importing it anyway", root, ex)
        return None


def episodes_files(root: str, *, skip_videos: bool = False) -> tuple[str, ...]:
    """The episodes files of a dataset (relative to its root, sorted), once the dataset-level checks pass:
    the root exists, holds a meta/info.json that parses, of codebase version v3.x, listing episodes.

    Raises:
        LeRobotImportError: the first check that fails (or rule `io` when storage cannot be listed).
    """
    try:
        return check_dataset(root, skip_videos=skip_videos).episodes_files
    except OSError as ex:
        raise LeRobotImportError("io", f"cannot list the dataset's files: {ex}", file=META_EPISODES_DIR) from None


def _listed_anyway(root: str) -> tuple[str, ...]:
    """The episodes files of a dataset that failed its checks, or () when there are none to list."""
    try:
        return list_episodes_files(root)
    except (OSError, LeRobotImportError):
        return ()


def _check_bug(bad) -> tuple[str, DatasetReport]:
    root, exc_info = bad
    _LOG.error("checking %s failed unexpectedly: %s", root, exc_info[1])
    return root, DatasetReport(failures=(internal_record(exc_info, dataset=root, episodes_file=None),))
