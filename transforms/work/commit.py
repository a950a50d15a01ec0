"""Committing an episodes file, without Beam: all its parts moved into place or none, its quality table, and
(when it imported) its journal record. The writer of a file's last part calls it at once
(`transforms.work.part_writer`); `CommitEpisodesFiles` calls it for the files the writers could not commit.
"""

from __future__ import annotations

import json
import logging
from typing import Sequence

from transforms import quality
from transforms.base import live_counts, storage
from transforms.base.errors import FailureRecord
from transforms.episode.outcomes import PartResult
from transforms.output import journal, paths, safety, sinks, writes
from transforms.work.messages import CommittedFile, FileQuality, ImportConfig

_LOG = logging.getLogger(__name__)


def commit_file(config: ImportConfig, root: str, rel: str, out: str, results: Sequence[PartResult],
                duplicates: Sequence[FailureRecord], findings: Sequence, sources: Sequence) -> CommittedFile:
    """Commit an episodes file (all its parts or none), write its quality table and, when it imported,
    record it in the journal at once: a run stopped before its end keeps it, and the next run imports
    only the rest.

    Args:
        config: the run's configuration.
        root: the dataset root URI.
        rel: the episodes file, relative to the root.
        out: the dataset's output root.
        results: one per part, as the part writers reported.
        duplicates: the duplicated episodes that fail it.
        findings: what the quality checks found in its parts (a strict check's error fails it).
        sources: what its import is made from (at most one), recorded in its manifest entry.
    """
    strict = [FailureRecord(root, rel, f.episode_index, f.file, "quality", quality.message(f))
              for f in findings if f.severity == quality.ERROR]
    outcome = sinks.sink(config.sink).commit(out, root, rel, results, tuple(duplicates) + tuple(strict))
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
