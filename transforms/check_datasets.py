"""CheckDatasets, the first step of the import: which datasets (and which of their episodes files) to import,
what the run does with their MP4s' media_index/ rows, and the sources of each file to import."""

from __future__ import annotations

import logging
from typing import Iterator, NamedTuple

import apache_beam as beam

from transforms.work.messages import DatasetReport, internal_record
from transforms.work.checker import check_to_import
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

    Input: (dataset root URI, output root), as `ImportConfig.targets` pairs them. Returns: `CheckedDatasets`.
    """

    def expand(self, targets):
        checked = targets | "Check" >> guarded(_CheckDataset(self._config), "reports", "mp4_versions", "shard_touches",
                                             "file_sources", main="episodes_files")
        bugs = checked.bad | "CheckBugs" >> beam.Map(_check_bug)
        return CheckedDatasets(checked.episodes_files, (checked.reports, bugs) | "CheckReports" >> beam.Flatten(),
                               checked.mp4_versions, checked.shard_touches, checked.file_sources)


class _CheckDataset(ImportDoFn):
    """Hands each dataset to `check_to_import` and its results on, tagged."""

    def setup(self) -> None:
        self._skipped = counter("datasets_skipped")

    @in_phase("check", lambda target: f"dataset {target[0]}")
    def process(self, target: tuple[str, str]) -> Iterator:
        root, out = target
        checked = check_to_import(self._config, root, out)
        if checked.skipped:
            self._skipped.inc()
        for report in checked.reports:
            yield beam.pvalue.TaggedOutput("reports", (root, report))
        yield from checked.episodes_files
        for tag in ("file_sources", "mp4_versions", "shard_touches"):
            for value in getattr(checked, tag):
                yield beam.pvalue.TaggedOutput(tag, value)


def _check_bug(bad) -> tuple[str, DatasetReport]:
    (root, out), exc_info = bad
    _LOG.error("checking %s failed unexpectedly: %s", root, exc_info[1])
    return root, DatasetReport(failures=(internal_record(exc_info, dataset=root, episodes_file=None),),
                               outputs=(out,))
