"""CommitEpisodesFiles, the fifth step of the import: per episodes file, all its parts moved into place, or
none. The writer of a file's last part commits it at once (`commit_file`); this step commits the files the
writers could not (a duplicated episode, a strict error, parts on a storage without conditional creates).
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator

import apache_beam as beam

from transforms.base import stopping, storage
from transforms.episode.outcomes import failed_file
from transforms.output import sinks
from transforms.work.commit import commit_file
from transforms.work.messages import DatasetReport, FileInputs, ImportConfig, internal_record, output_root
from transforms.safety_net import ImportDoFn, ImportStep, guarded, in_phase

_LOG = logging.getLogger(__name__)


class CommitEpisodesFiles(ImportStep):
    """Move every part of an episodes file into place, or none: a file with any failure (a part's, or
    a duplicated episode) leaves no part, and errors.jsonl accounts for each of its episodes.

    Args:
        config: the run's configuration.

    Input: ((root, episodes file), FileInputs): its parts' results, and duplicated episodes.
    Returns: (root, DatasetReport) holding each episodes file's FileOutcome.
    """

    def expand(self, inputs):
        committed = (inputs
                     | "GroupByEpisodesFile" >> beam.GroupByKey()
                     | "Commit" >> guarded(_CommitEpisodesFile(self._config), main="outcomes"))
        bugs = committed.bad | "CommitBugs" >> beam.Map(_commit_bug, self._config)
        return (committed.outcomes, bugs) | "FileOutcomes" >> beam.Flatten()


class _CommitEpisodesFile(ImportDoFn):
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
                out = output_root(inputs.outputs, f"episodes file {rel} of {root}")
                done = commit_file(self._config, root, rel, out, inputs.results, inputs.duplicates, inputs.findings,
                                   inputs.sources)
            yield root, DatasetReport(outcomes=(done.outcome,), quality=(done.quality,))


def _commit_bug(bad, config: ImportConfig) -> tuple[str, DatasetReport]:
    """A commit that raised: remove what it may have left, and fail the file with rule `internal`."""
    ((root, rel), messages), exc_info = bad
    _LOG.error("committing %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    merged = FileInputs.merge(messages)
    results = merged.results
    try:
        with stopping.output_work():
            sinks.sink(config.sink).discard(output_root(merged.outputs, f"episodes file {rel} of {root}"), rel,
                                            results)
    except Exception as ex:  # the net must not tear: the failure below says what happened
        _LOG.error("cleaning up %s of %s failed too: %s", rel, root, ex)
    episodes = tuple(ep for r in results for ep in r.episode_indices)
    bug = internal_record(exc_info, dataset=root, episodes_file=rel)
    return root, DatasetReport(outcomes=(failed_file(root, rel, episodes, [bug]),))
