"""ImportLeRobotDatasets: the Beam story of an import, in six steps, each a module of this package named
after it (check_datasets, plan_episodes_files, read_mp4_facts, write_parts, commit_episodes_files,
finish_datasets).

    dataset roots
      ─► CheckDatasets       skip an unchanged dataset; list its episodes files (or fail it as a whole)
      ─► PlanEpisodesFiles   read each episodes file: parts of whole episodes, their MP4 uses, the
                             dataset-wide duplicate check, and quirks worth a warning
      ─► ReadMp4Facts        read each new or changed MP4's moov once (an unchanged one's row is
                             carried): its facts for every part that uses it; update only the
                             media_index/ shards that gain, change or lose a row
      ─► WriteParts          per part: read only the data-file row groups its episodes need, type
                             the frames, write the part under a temporary name; the writer of an
                             episodes file's last part commits the file at once (all its parts)
      ─► CommitEpisodesFiles per episodes file: move all its parts into place, or none (the files
                             the writers could not commit: duplicates, strict errors)
      ─► FinishDatasets      per dataset: errors.jsonl and manifest.json

Only small elements cross a shuffle (paths, ranges, ids, MP4 facts); frames are read where they are
written. Every failure travels as data (a FailureRecord), so one bad episodes file never stops the
others, and every step turns an unexpected exception into a record too (`transforms.safety_net`).
"""

from __future__ import annotations

import logging

import apache_beam as beam

from transforms.base import hub
from transforms.check_datasets import CheckDatasets
from transforms.commit_episodes_files import CommitEpisodesFiles
from transforms.finish_datasets import FinishDatasets
from transforms.plan_episodes_files import PlanEpisodesFiles
from transforms.read_mp4_facts import ReadMp4Facts
from transforms.safety_net import NAMESPACE, ImportStep, counter
from transforms.write_parts import WriteParts

__all__ = ["NAMESPACE", "ImportLeRobotDatasets", "CheckDatasets", "PlanEpisodesFiles"]

_LOG = logging.getLogger(__name__)


def _count_hub_retry() -> None:
    counter("hub_retries").inc()  # counted for the step whose read was retried (a no-op outside a step)


# A Hub request retried (rate limit, server error, timeout) shows as the `hub_retries` counter.
hub.add_retry_listener(_count_hub_retry)


class ImportLeRobotDatasets(ImportStep):
    """Import LeRobot v3 datasets into `config`'s outputs.

    Args:
        config: the run's configuration: each dataset's output root and the import options.

    Input: a PCollection of (dataset root URI, output root) pairs (`config.targets`); each step hands the output
    root on with the elements that need it. Returns: the PCollection of manifests (dicts), one per
    dataset imported; a dataset skipped as up to date has none.
    """

    def expand(self, targets):
        config = self._config
        datasets = targets | "CheckDatasets" >> CheckDatasets(config)
        plans = datasets.episodes_files | "PlanEpisodesFiles" >> PlanEpisodesFiles(config)
        mp4s = ((plans.clip_uses, datasets.mp4_versions, datasets.shard_touches)
                | "ReadMp4Facts" >> ReadMp4Facts(config))
        file_facts = (plans.to_files, datasets.file_sources) | "FileFacts" >> beam.Flatten()
        parts = ((plans.to_parts, mp4s.to_parts)
                 | "ToParts" >> beam.Flatten()
                 | "WriteParts" >> WriteParts(config, file_facts))
        files = ((parts, plans.to_files, datasets.file_sources)
                 | "ToEpisodesFiles" >> beam.Flatten()
                 | "CommitEpisodesFiles" >> CommitEpisodesFiles(config))
        return ((datasets.reports, plans.reports, mp4s.reports, files)
                | "ToDatasets" >> beam.Flatten()
                | "FinishDatasets" >> FinishDatasets(config))






