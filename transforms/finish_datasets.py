"""FinishDatasets, the last step of the import: per dataset, its errors.jsonl and manifest.json, the quality
findings of the dataset as a whole, and what the run carries or removes of the files it left alone.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from transforms.work.messages import DatasetReport
from transforms.work.finish import DatasetFinisher
from transforms.safety_net import ImportDoFn, ImportStep, counters, guarded, in_phase


class FinishDatasets(ImportStep):
    """Write each dataset's errors.jsonl and manifest.json, always: an unexpected error while finishing
    still writes both, with the error as a rule `internal` record. The `errors` counter is counted
    here, once, from what errors.jsonl holds.

    Args:
        config: the run's configuration.

    Input: (dataset root, DatasetReport), from every other step. Returns: the manifests (dicts).
    """

    def expand(self, inputs):
        finished = (inputs
                    | "GroupByDataset" >> beam.GroupByKey()
                    | "Finish" >> guarded(_FinishDataset(self._config), main="manifests"))
        rescued = finished.bad | "FinishAfterBug" >> beam.ParDo(_FinishAfterBug(self._config))
        return (finished.manifests, rescued) | "Manifests" >> beam.Flatten()


class _DatasetWriter(ImportDoFn):
    """A DoFn over the worker's `DatasetFinisher`."""

    def setup(self) -> None:
        self._finisher = DatasetFinisher(self._config, counters(DatasetFinisher.COUNTERS))


class _FinishDataset(_DatasetWriter):
    @in_phase("finish", lambda element: f"dataset {element[0]}")
    def process(self, element: tuple[str, Iterable[DatasetReport]]) -> Iterator[dict]:
        root, reports = element
        written = self._finisher.finish(root, DatasetReport.merge(reports))
        if written is not None:
            yield written


class _FinishAfterBug(_DatasetWriter):
    """Finishing a dataset raised: write what is known and the error itself (`finish_after_bug`)."""

    @in_phase("finish", lambda bad: f"dataset {bad[0][0]}")
    def process(self, bad) -> Iterator[dict]:
        (root, reports), exc_info = bad
        written = self._finisher.finish_after_bug(root, DatasetReport.merge(reports), exc_info)
        if written is not None:
            yield written
