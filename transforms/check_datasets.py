"""CheckDatasets, the first step of the import: which datasets (and which of their episodes files) to import,
what the run does with their MP4s' media_index/ rows, and the sources of each file to import."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam

from transforms.base import hub, live_counts, storage
from transforms.base.errors import LeRobotImportError
from transforms.episode.quirks import WarningRecord
from transforms.lerobot import layouts, sources
from transforms.lerobot import fingerprint as dataset_fingerprint
from transforms.lerobot.dataset import check_dataset, list_episodes_files
from transforms.lerobot.info import EPISODES_DIR
from transforms.messages import (DatasetReport, FileInputs, ImportConfig, KeptFile, Mp4Version,
                                 ReadRows, ShardTouch, error_record, internal_record)
from transforms.output import damage as output_damage
from transforms.output import journal, paths, safety
from transforms.output.index_shards import MediaIndexPlan, decide_run
from transforms.safety_net import counter, guarded, in_phase

_LOG = logging.getLogger(__name__)


class CheckedDatasets(NamedTuple):
    """The datasets to import."""

    episodes_files: beam.PCollection  # (root, episodes file): the episodes files of those datasets
    reports: beam.PCollection  # (root, DatasetReport): each dataset imported (its fingerprint), or why it
    #                            failed before its episodes files were read
    mp4_versions: beam.PCollection  # ((root, MP4), Mp4Version): each MP4 the files to import use
    shard_touches: beam.PCollection  # ((root, media_index shard), ShardTouch): the shards that may change
    file_sources: beam.PCollection  # ((root, episodes file), FileInputs): the sources of each file to import


class CheckDatasets(beam.PTransform):
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

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, roots):
        checked = roots | "Check" >> guarded(_CheckDataset(self._config), "reports", "mp4_versions", "shard_touches",
                                             "file_sources", main="episodes_files")
        bugs = checked.bad | "CheckBugs" >> beam.Map(_check_bug)
        return CheckedDatasets(checked.episodes_files, (checked.reports, bugs) | "CheckReports" >> beam.Flatten(),
                               checked.mp4_versions, checked.shard_touches, checked.file_sources)


class _CheckDataset(beam.DoFn):
    def __init__(self, config: ImportConfig) -> None:
        self._config = config

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
        source = _fingerprint(root)
        try:
            safety.check_output(self._config.output_of(root))  # also when no launcher checked it first
            previous = self._previous_manifest(root)
            damage = self._damage(root, previous)
        except LeRobotImportError as ex:  # the output's state names paths outside it: touch nothing of it
            failure = error_record(ex, dataset=root, episodes_file=None)
            yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(failures=(failure,))))
            return
        if (source is not None and not self._config.force and not damage
                and self._up_to_date(root, source, previous)):
            self._skipped.inc()
            self._sweep_journal(root)
            return
        previous = output_damage.without_damage(previous, damage)
        notes = tuple(damage.notes())
        yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(sources=(source,), notes=notes)))
        try:
            files = episodes_files(root, skip_videos=self._config.skip_videos)
        except LeRobotImportError as ex:
            # A dataset whose episodes files can be listed still has each of them planned: planning
            # meets the same cause in info.json and fails each file with every one of its episodes
            # accounted for. Without any, the dataset fails as a whole ("0 episodes files").
            files = _listed_anyway(root)
            if not files:
                failure = error_record(ex, dataset=root, episodes_file=None)
                yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(failures=(failure,))))
                return
        report, leave, media, read = self._decide(root, previous, damage.shards)
        yield beam.pvalue.TaggedOutput("reports", (root, report))
        known = {s.episodes_file: s for s in report.file_sources}
        for rel in files:
            if rel not in leave:
                live_counts.add(episodes_files=1)
                # the rows read to tell what changed go with the file: planning does not read it again
                yield (root, rel, ReadRows(read[rel])) if rel in read else (root, rel)
                if rel in known:  # the commit records the file's manifest entry, sources included, at once
                    yield beam.pvalue.TaggedOutput("file_sources", ((root, rel), FileInputs(sources=(known[rel],))))
        if media is not None:
            yield from _media_messages(root, media)

    def _previous_manifest(self, root: str) -> Optional[dict]:
        """The output's manifest when it was written with the options of this run from this dataset root,
        else None (an unreadable manifest is no proof of anything: everything is imported again).

        Raises:
            LeRobotImportError: rule `output_confinement`, the manifest names paths outside the output's
                folders: the dataset fails before its output is written or cleaned up.
        """
        found = safety.read_manifest(self._config.output_of(root))
        if found.confinement:
            raise found.problem
        if found.problem is not None:
            _LOG.warning("%s: the output's manifest cannot be used (%s); importing everything again", root,
                         found.problem)
        previous = found.doc
        if not isinstance(previous, dict) or previous.get("options") != self._config.output_options():
            previous = None
        # What an interrupted or killed run committed after its last manifest (its journal) is folded in.
        records, _ = journal.read_records(self._config.output_of(root), self._config.output_options(), dataset=root)
        previous = journal.fold(previous, records, dataset=root, options=self._config.output_options())
        if previous is None:
            return None
        if previous.get("dataset") is not None and not storage.same_dataset(str(previous["dataset"]), root):
            return None  # the output names another dataset's files (its clips' URIs): nothing carries over
        return previous

    def _damage(self, root: str, previous: Optional[dict]) -> output_damage.OutputDamage:
        """The parts and shards of the output that are not as `previous` records them (sizes; with
        --verify-output, sha256s): what this run repairs. None are looked for with --force (all is redone).

        Raises:
            LeRobotImportError: rule `output_confinement` (a listed path outside the output).
        """
        if previous is None or self._config.force:
            return output_damage.OutputDamage()
        try:
            return output_damage.find_damage(self._config.output_of(root), previous,
                                             checksums=self._config.verify_output)
        except OSError as ex:  # the output cannot be listed: the run's own writes meet it and say so
            _LOG.warning("%s: cannot check the output against its manifest (%s)", root, ex)
            return output_damage.OutputDamage()

    def _decide(self, root: str, previous: Optional[dict], damaged: Sequence[str] = ()
                ) -> tuple[DatasetReport, frozenset[str], Optional[MediaIndexPlan], dict]:
        """The sources of each episodes file, which ones this run leaves alone (unchanged or removed),
        what it does with the MP4s and media_index/ shards (None: it cannot tell, and imports all), and
        the validated rows of the v3 episodes files read to find their sources (by path).
        `damaged`: the shards found damaged, rebuilt with their MP4s read again."""
        try:
            scanned = sources.scan_dataset(root, self._config.output_options(), previous_manifest=previous)
        except Exception as ex:  # noqa: BLE001 - knowing what changed only saves work: the import itself
            # meets whatever broke here (an info.json too deep to parse, an unreadable file) and reports it
            _LOG.warning("cannot tell which episodes files of %s changed (%s); importing them all", root, ex)
            return DatasetReport(), frozenset(), None, {}
        current = tuple(dataclasses.replace(f, rows=None) for f in scanned.files)
        decisions, media = decide_run(
            current, previous, scanned.listing.token, dataset_file=lambda rel: storage.join(root, rel),
            inline_index=self._config.inline_index, force=self._config.force, damaged=damaged)
        kept = []
        for d in decisions:
            if d.action == sources.IMPORT:
                continue
            entry = {"run_id": previous.get("run_id"), **d.previous}  # one without was written by that run
            kept.append(KeptFile(d.episodes_file, d.action == sources.REMOVED, json.dumps(entry)))
        if kept:
            _LOG.info("%s: %d episodes files unchanged or removed since the last import", root, len(kept))
        carried = tuple((rel, media.tokens[rel]) for rel in sorted(media.carried))
        report = DatasetReport(file_sources=current, kept=tuple(kept), warnings=_kept_warnings(root, previous, kept),
                               index_kept=media.kept_shards, video_versions=carried)
        read = {f.episodes_file: f.rows for f in scanned.files
                if f.rows is not None and f.problem is None and layouts.layout_of(f.episodes_file).sized_by_footers}
        return report, frozenset(k.episodes_file for k in kept), media, read

    def _sweep_journal(self, root: str) -> None:
        """An output found up to date holds no commit its manifest lacks (one would have made the fold
        `interrupted`): whatever a dead run left in its journal (part records, claims, records of other
        options or datasets, forged ones) is removed in one sweep, as a finished run removes its own."""
        out = self._config.output_of(root)
        own = storage.join(out, f"{journal.PROGRESS_DIR}/{self._config.run_id}/")
        try:
            journal.clear(out, [u for u in journal.record_uris(out) if not u.startswith(own)])
        except (OSError, LeRobotImportError) as ex:  # they stay, for a later run to remove
            _LOG.warning("%s: could not clear the output's journal: %s", root, ex)

    def _up_to_date(self, root: str, source: dataset_fingerprint.Fingerprint, previous: Optional[dict]) -> bool:
        if previous is None or not dataset_fingerprint.up_to_date(previous, source, self._config.output_options()):
            return False
        if previous.get("media_index") and previous.get("media_index_layout") != paths.MEDIA_INDEX_LAYOUT:
            return False  # an output of an older media_index/ layout is imported again once
        _LOG.info("%s is unchanged since its import of %s: skipped (--force redoes it)", root,
                  previous.get("finished_at"))
        return True


def _media_messages(root: str, media: MediaIndexPlan) -> Iterator:
    """To the MP4 step: each MP4 an imported file uses, with its token and whether its row is carried;
    to the shard writer: each shard that may change, with the URIs whose old rows stay."""
    for rel in sorted(media.used):
        known = Mp4Version(media.tokens[rel], rel in media.carried, rel in media.shared)
        yield beam.pvalue.TaggedOutput("mp4_versions", ((root, rel), known))
    for shard, keep in media.touched.items():
        yield beam.pvalue.TaggedOutput("shard_touches", ((root, shard), ShardTouch(keep)))


def _kept_warnings(root: str, previous: Optional[dict], kept: Sequence[KeptFile]) -> tuple[WarningRecord, ...]:
    """The warnings the last import recorded for the episodes files left unchanged: still true of them."""
    unchanged = {k.episodes_file for k in kept if not k.removed}
    fields = ("episodes_file", "episode_index", "file", "what", "by", "message")
    return tuple(WarningRecord(root, *(w.get(f) for f in fields)) for w in (previous or {}).get("warnings") or ()
                 if isinstance(w, dict) and w.get("episodes_file") in unchanged)


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
        raise LeRobotImportError("io", f"cannot list the dataset's files: {ex}", file=EPISODES_DIR) from None


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
