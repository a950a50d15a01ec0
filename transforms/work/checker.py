"""Checking a dataset before its import, without Beam: whether to import it at all (its last import is up to
date), which of its episodes files to import, what the run does with their MP4s' media_index/ rows, and
the sources of each file to import. `CheckDatasets` hands each dataset to `check_to_import`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from transforms.base import hub, live_counts, storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import fingerprint
from transforms.lerobot.dataset import check_dataset, list_episodes_files
from transforms.lerobot.info import META_EPISODES_DIR
from transforms.output import damage, incremental, safety
from transforms.work.messages import (DatasetReport, FileInputs, ImportConfig, Mp4Version, ReadRows, ShardTouch,
                                      error_record)

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CheckedDataset:
    """What checking a dataset tells the other steps (all empty but `skipped` for a dataset up to date)."""

    reports: tuple[DatasetReport, ...] = ()  # to its finish step: its output root, fingerprint and decisions, or
    #                                           why it failed
    episodes_files: tuple[tuple, ...] = ()  # (root, episodes file, output root[, ReadRows]) of each file to import
    file_sources: tuple[tuple[tuple[str, str], FileInputs], ...] = ()  # each file's sources, to its commit
    mp4_versions: tuple[tuple[tuple[str, str], Mp4Version], ...] = ()  # each MP4 the files use, to the MP4 step
    shard_touches: tuple[tuple[tuple[str, str], ShardTouch], ...] = ()  # the shards that may change
    skipped: bool = False  # its last import is up to date: nothing to do


def check_to_import(config: ImportConfig, root: str, out: str) -> CheckedDataset:
    """Whether and what of a dataset to import.

    Args:
        config: the run's configuration.
        root: the dataset root URI.
        out: its output root.
    """
    if storage.hub_repo(root) and not storage.hub_commit(root):
        # A Hub root the run could not pin at a commit (missing, private, gated, no such revision):
        # ask once more here so the dataset fails with the Hub's own answer, alone.
        try:
            hub.pin(root)
        except LeRobotImportError as ex:
            return _failed(root, out, ex)
    options = config.output_options()
    source = _fingerprint(root)
    try:
        safety.check_output(out)  # also when no launcher checked it first
        previous = incremental.previous_manifest(root, out, options)
        damaged = incremental.find_output_damage(root, out, previous, force=config.force,
                                                 checksums=config.verify_output)
    except LeRobotImportError as ex:  # the output's state names paths outside it: touch nothing of it
        return _failed(root, out, ex)
    if source is not None and not config.force and not damaged and incremental.up_to_date(root, source, previous,
                                                                                           options):
        incremental.sweep_journal(root, out, config.run_id)
        return CheckedDataset(skipped=True)
    previous = damage.without_damage(previous, damaged)
    found = DatasetReport(sources=(source,), notes=tuple(damaged.notes()), outputs=(out,))
    try:
        files = episodes_files(root, skip_videos=config.skip_videos)
    except LeRobotImportError as ex:
        # A dataset whose episodes files can be listed still has each of them planned: planning
        # meets the same cause in info.json and fails each file with every one of its episodes
        # accounted for. Without any, the dataset fails as a whole ("0 episodes files").
        files = _listed_anyway(root)
        if not files:
            return CheckedDataset(reports=(found, DatasetReport(failures=(error_record(ex, dataset=root,
                                                                                       episodes_file=None),))))
    decided = incremental.decide(root, previous, options, inline_index=config.inline_index, force=config.force,
                                 damaged=damaged.shards)
    known = {s.episodes_file: s for s in decided.file_sources}
    to_plan, sources = [], []
    for rel in files:
        if rel in decided.leave:
            continue
        live_counts.add(episodes_files=1)
        # with its rows when they were read to tell what changed: planning does not read it again
        to_plan.append((root, rel, out, ReadRows(decided.read[rel])) if rel in decided.read else (root, rel, out))
        if rel in known:  # the commit records the file's manifest entry, sources included, at once
            sources.append(((root, rel), FileInputs(sources=(known[rel],), outputs=(out,))))
    versions, touches = [], []
    if decided.media is not None:  # each MP4's token and whether its row is carried; the shards that may change
        media = decided.media
        versions = [((root, rel), Mp4Version(media.tokens[rel], rel in media.carried, rel in media.shared, out))
                    for rel in sorted(media.used)
                    if media.tokens[rel] != "missing"]  # nothing to carry nor record: not one per MP4 of a gone folder
        touches = [((root, shard), ShardTouch(keep, out)) for shard, keep in media.touched.items()]
    decisions = DatasetReport(file_sources=decided.file_sources, kept=decided.kept, warnings=decided.warnings,
                              index_kept=decided.index_kept, video_versions=decided.video_versions)
    return CheckedDataset((found, decisions), tuple(to_plan), tuple(sources), tuple(versions), tuple(touches))


def _failed(root: str, out: str, ex: LeRobotImportError) -> CheckedDataset:
    failure = error_record(ex, dataset=root, episodes_file=None)
    return CheckedDataset(reports=(DatasetReport(failures=(failure,), outputs=(out,)),))


def _fingerprint(root: str) -> Optional[fingerprint.Fingerprint]:
    try:
        return fingerprint.fingerprint(root)
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
