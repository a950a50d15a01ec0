"""CommitEpisodesFiles, the fifth step of the import: per episodes file, all its parts moved into place, or
none. The writer of a file's last part commits it at once (`commit_file`); this step commits the files the
writers could not (a duplicated episode, a strict error, parts on a storage without conditional creates).
"""

from __future__ import annotations

import json
import logging
from typing import Iterable, Iterator, Sequence

import apache_beam as beam

from transforms import quality
from transforms.base import live_counts, stopping, storage
from transforms.base.errors import FailureRecord
from transforms.episode.outcomes import PartResult, failed_file
from transforms.messages import (CommittedFile, DatasetReport, FileInputs, FileQuality, ImportConfig, internal_record)
from transforms.output import journal, paths, safety, writes
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
    outcome = writes.commit_episodes_file(out, root, rel, results, tuple(duplicates) + tuple(strict))
    table = paths.quality_table_path(rel)
    storage.write_atomic(safety.confined(out, table, folder=paths.QUALITY_DIR, what="quality table"),
                         quality.table_bytes(findings))
    checked = FileQuality(rel, json.dumps(quality.summarize(findings), sort_keys=True), table)
    live_counts.add(episodes_files_done=1, episodes_files_failed=int(outcome.status == "failed"))
    if outcome.status == "imported":
        source = sources[0].to_manifest() if sources else None
        # what the file lists goes in too, as the manifest's finish step records it: a file the next run
        # keeps from the journal still counts in the dataset's totals against info.json
        indices = [ep for r in results for ep in r.episode_indices]
        listed = {"episodes": len(indices), "frames": sum(r.frames for r in results),
                  "episode_ranges": [list(r) for r in quality.index_ranges(indices)]}
        entry = {**writes.file_entry(outcome, source, config.run_id),
                 "quality": {"checks": json.loads(checked.checks_json), "table": table, "listed": listed}}
        journal.record_file(out, run_id=config.run_id, options=config.output_options(), dataset=root,
                            episodes_file=rel, entry=entry)
    if outcome.status == "failed":
        primary = [f for f in outcome.failures if f.rule != "file_failed"] or list(outcome.failures)
        # per file: -v shows it; by default the summary says it once, grouped by rule
        _LOG.debug("episodes file %s of %s failed: %s", rel, root, primary[0].message)
    else:
        _LOG.debug("episodes file %s of %s imported: %d episodes, %d frames, %d parts", rel, root,
                   outcome.episodes_written, outcome.frames, len(outcome.parts))
    return CommittedFile(outcome, checked)


def _commit_bug(bad, config: ImportConfig) -> tuple[str, DatasetReport]:
    """A commit that raised: remove what it may have left, and fail the file with rule `internal`."""
    ((root, rel), messages), exc_info = bad
    _LOG.error("committing %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    results = FileInputs.merge(messages).results
    try:
        with stopping.output_work():
            writes.discard_episodes_file(config.output_of(root), rel, results)
    except Exception as ex:  # the net must not tear: the failure below says what happened
        _LOG.error("cleaning up %s of %s failed too: %s", rel, root, ex)
    episodes = tuple(ep for r in results for ep in r.episode_indices)
    bug = internal_record(exc_info, dataset=root, episodes_file=rel)
    return root, DatasetReport(outcomes=(failed_file(root, rel, episodes, [bug]),))
