"""PlanEpisodesFiles, the second step of the import: each episodes file read and cut into parts of whole
episodes, with their MP4 uses, the dataset-wide duplicate check, and the quirks worth a warning."""

from __future__ import annotations

import logging
from typing import Iterator, NamedTuple

import apache_beam as beam

from transforms.base import live_counts
from transforms.episode.outcomes import failed_file
from transforms.safety_net import ImportDoFn, ImportStep, guarded, in_phase
from transforms.work.messages import DatasetReport, internal_record
from transforms.work.planner import EpisodesFilePlanner, duplicate_episodes

_LOG = logging.getLogger(__name__)


class PlannedFiles(NamedTuple):
    """What planning the episodes files tells the other steps, keyed for where each goes."""

    to_parts: beam.PCollection  # (part key, PartInputs): each part's header, for its writer
    clip_uses: beam.PCollection  # ((root, MP4), ClipUse): for the MP4 step
    to_files: beam.PCollection  # ((root, episodes file), FileInputs): an episode listed twice fails its files
    reports: beam.PCollection  # (root, DatasetReport): files that failed in planning; clips ending short


class PlanEpisodesFiles(ImportStep):
    """Read each episodes file and plan its parts: whole episodes in row order, each part holding at most
    the data-span limit of its episodes' own data, sized from the data files' footers (with `--one-part`:
    one part, or the data_span error).

    Per episode only a few small values leave this step; its full row travels once, in its part's
    header. An episode_index listed by several rows of the dataset's episodes files fails each of
    those files (rule `duplicate_episode`).

    Args:
        config: the run's configuration.

    Input: (root, episodes file, output root), or (root, episodes file, output root, ReadRows) when the check
    step read it (the file is then not read again). Returns: `PlannedFiles`.
    """

    def expand(self, episodes_files):
        planned = (episodes_files
                   | "Spread" >> beam.Reshuffle()
                   | "Plan" >> guarded(_PlanEpisodesFile(self._config), "clip_uses", "episode_ranges", "reports",
                                       main="to_parts"))
        bugs = planned.bad | "PlanBugs" >> beam.Map(_plan_bug)
        duplicates = (planned.episode_ranges
                      | "GroupByDataset" >> beam.GroupByKey()
                      | "FindDuplicates" >> beam.FlatMapTuple(duplicate_episodes))
        reports = (planned.reports, bugs) | "PlanReports" >> beam.Flatten()
        return PlannedFiles(planned.to_parts, planned.clip_uses, duplicates, reports)


class _PlanEpisodesFile(ImportDoFn):
    """Hands each episodes file to the worker's `EpisodesFilePlanner` and its results on, tagged."""

    def setup(self) -> None:
        self._planner = EpisodesFilePlanner(self._config)

    @in_phase("plan", lambda element: f"episodes file {element[1]} of dataset {element[0]}")
    def process(self, element: tuple) -> Iterator:
        root, rel, out = element[:3]
        planned = self._planner.plan(root, rel, out, element[3].rows if len(element) > 3 else None)
        if planned.failed:
            live_counts.add(episodes_files_planned=1, episodes_files_done=1, episodes_files_failed=1)
            yield beam.pvalue.TaggedOutput("reports", (root, planned.report))
            return
        live_counts.add(episodes_files_planned=1, episodes_planned=len(planned.rows),
                        frames_planned=sum(r.length for r in planned.rows))
        for key, inputs in planned.to_parts:
            yield key, inputs
        for tag in ("episode_ranges", "clip_uses"):
            for value in getattr(planned, tag):
                yield beam.pvalue.TaggedOutput(tag, value)
        yield beam.pvalue.TaggedOutput("reports", (root, planned.report))


def _plan_bug(bad) -> tuple[str, DatasetReport]:
    element, exc_info = bad
    root, rel = element[:2]
    _LOG.error("planning %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    bug = internal_record(exc_info, dataset=root, episodes_file=rel, file=rel)
    return root, DatasetReport(outcomes=(failed_file(root, rel, (), [bug]),))
