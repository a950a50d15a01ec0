"""ImportLeRobotDatasets: the Beam story of an import, in six steps.

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

import dataclasses
import json
import logging
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam

from transforms import hub, progress, quality, storage
from transforms.episode import damage as output_damage
from transforms.episode import journal, output_state, paths, quirks
from transforms.episode.media_index_table import MediaIndexPlan, decide_run
from transforms.episode.outcomes import failed_file
from transforms.episode.quirks import ClipSpan, WarningRecord
from transforms.errors import LeRobotImportError
from transforms.lerobot import episodes_files as episodes_metadata
from transforms.lerobot import fingerprint as dataset_fingerprint
from transforms.lerobot import data_files, sources, v2
from transforms.lerobot.dataset import check_dataset, list_episodes_files
from transforms.lerobot.info import EPISODES_DIR, DatasetInfo
from transforms.media_files import ReadMp4Facts
from transforms.messages import (ClipUse, DatasetReport, FileCounts, FileInputs, ImportConfig, KeptFile, Mp4Version,
                                 PartHeader, PartInputs, ReadRows, ShardTouch,
                                 error_record, internal_record, load_info)
from transforms.safety_net import NAMESPACE, counter, guarded, in_phase
from transforms.write_outputs import CommitEpisodesFiles, FinishDatasets, WriteParts

__all__ = ["NAMESPACE", "ImportLeRobotDatasets", "CheckDatasets", "PlanEpisodesFiles"]

_LOG = logging.getLogger(__name__)


def _count_hub_retry() -> None:
    counter("hub_retries").inc()  # counted for the step whose read was retried (a no-op outside a step)


# A Hub request retried (rate limit, server error, timeout) shows as the `hub_retries` counter.
hub.add_retry_listener(_count_hub_retry)


class ImportLeRobotDatasets(beam.PTransform):
    """Import LeRobot v3 datasets into `config`'s outputs.

    Args:
        config: the run's configuration: each dataset's output root and the import options.

    Input: a PCollection of dataset root URIs. Returns: the PCollection of manifests (dicts), one per
    dataset imported; a dataset skipped as up to date has none.
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, roots):
        config = self._config
        datasets = roots | "CheckDatasets" >> CheckDatasets(config)
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


# ---- CheckDatasets -----------------------------------------------------------------------------


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
            output_state.check_output(self._config.output_of(root))  # also when no launcher checked it first
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
                progress.add(episodes_files=1)
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
        found = output_state.read_manifest(self._config.output_of(root))
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
                if f.rows is not None and f.problem is None and not v2.is_group(f.episodes_file)}
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


# ---- PlanEpisodesFiles -------------------------------------------------------------------------


class PlannedFiles(NamedTuple):
    """What planning the episodes files tells the other steps, keyed for where each goes."""

    to_parts: beam.PCollection  # (part key, PartInputs): each part's header, for its writer
    clip_uses: beam.PCollection  # ((root, MP4), ClipUse): for the MP4 step
    to_files: beam.PCollection  # ((root, episodes file), FileInputs): an episode listed twice fails its files
    reports: beam.PCollection  # (root, DatasetReport): files that failed in planning; clips ending short


class PlanEpisodesFiles(beam.PTransform):
    """Read each episodes file and plan its parts: whole episodes in row order, each part holding at most
    the data-span limit of its episodes' own data, sized from the data files' footers (with `--one-part`:
    one part, or the data_span error).

    Per episode only a few small values leave this step; its full row travels once, in its part's
    header. An episode_index listed by several rows of the dataset's episodes files fails each of
    those files (rule `duplicate_episode`).

    Args:
        config: the run's configuration.

    Input: (root, episodes file), or (root, episodes file, ReadRows) when the check step read it (the
    file is then not read again). Returns: `PlannedFiles`.
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, episodes_files):
        planned = (episodes_files
                   | "Spread" >> beam.Reshuffle()
                   | "Plan" >> guarded(_PlanEpisodesFile(self._config), "clip_uses", "episode_ids", "reports",
                                       main="to_parts"))
        bugs = planned.bad | "PlanBugs" >> beam.Map(_plan_bug)
        duplicates = (planned.episode_ids
                      | "GroupByEpisodeIndex" >> beam.GroupByKey()
                      | "FindDuplicates" >> beam.FlatMapTuple(duplicate_episodes))
        reports = (planned.reports, bugs) | "PlanReports" >> beam.Flatten()
        return PlannedFiles(planned.to_parts, planned.clip_uses, duplicates, reports)


class _PlanEpisodesFile(beam.DoFn):
    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._sizes: dict[tuple[str, str], int] = {}
        self._layouts: dict[tuple[str, str], Optional[episodes_metadata.RowGroupLayout]] = {}

    def _data_file_size(self, root: str, rel: str) -> int:
        """A data file's size, asked of storage once per worker: many episodes files share a data file."""
        key = (root, rel)
        if key not in self._sizes:
            self._sizes[key] = storage.file_size(storage.dataset_file(root, rel), what="data file", file=rel)
        return self._sizes[key]

    def _layout(self, root: str, rel: str, info: DatasetInfo) -> Optional[episodes_metadata.RowGroupLayout]:
        """A data file's row-group layout, from its footer read once per worker."""
        key = (root, rel)
        if key not in self._layouts:
            self._layouts[key] = data_files.read_row_group_layout(root, rel, info)
        return self._layouts[key]

    @in_phase("plan", lambda element: f"episodes file {element[1]} of dataset {element[0]}")
    def process(self, element: tuple) -> Iterator:
        root, rel = element[:2]
        planned = self._plan(root, rel, element[2].rows if len(element) > 2 else None)
        if isinstance(planned, DatasetReport):
            progress.add(episodes_files_planned=1, episodes_files_done=1, episodes_files_failed=1)
            yield beam.pvalue.TaggedOutput("reports", (root, planned))
            return
        rows = planned[1]
        progress.add(episodes_files_planned=1, episodes_planned=len(rows), frames_planned=sum(r.length for r in rows))
        yield from _plan_messages(root, rel, *planned)

    def _plan(self, root: str, rel: str, read: Optional[Sequence[episodes_metadata.EpisodeRow]] = None
              ) -> tuple | DatasetReport:
        """(info, rows, parts) of an episodes file, or the report of its failure (every episode accounted).
        `read`: its rows as the check step read them (then the file is not read again)."""
        if v2.is_group(rel):
            return self._plan_v2_group(root, rel)
        source = None
        try:
            if read is None:
                source = episodes_metadata.open_episodes_file(root, rel)
            info = load_info(root, skip_videos=self._config.skip_videos)
            rows = list(read) if read is not None else episodes_metadata.read_episode_rows(source, info, file=rel)
            parts = episodes_metadata.plan_parts(rows, lambda f: self._data_file_size(root, f),
                                                 lambda f: self._layout(root, f, info),
                                                 limit=self._config.data_span_limit,
                                                 one_part=self._config.one_part, file=rel)
            return info, rows, parts
        except LeRobotImportError as ex:
            episodes = (tuple(r.episode_index for r in read) if read is not None else
                        episodes_metadata.episode_indices(source) if source is not None else ())
            return DatasetReport(outcomes=(failed_file(root, rel, episodes,
                                                       [error_record(ex, dataset=root, episodes_file=rel)]),))
        finally:
            if source is not None and not isinstance(source, bytes):
                source.close()


    def _plan_v2_group(self, root: str, rel: str) -> tuple | DatasetReport:
        """A group of a v2.x dataset's episodes (its lines of meta/episodes.jsonl), planned as an episodes
        file is. Each episode is its own data file's rows, so its bytes are the file's size (from one listing
        of the chunk's data folder), and no footer is read to size the parts."""
        info = None
        try:
            info = load_info(root, skip_videos=self._config.skip_videos)
            rows = v2.group_rows(v2.load_episodes(root), info, rel)
            for f, size in v2.listed_sizes(root, rows).items():
                self._sizes.setdefault((root, f), size)
            parts = episodes_metadata.plan_parts(rows, lambda f: self._data_file_size(root, f), lambda f: None,
                                                 limit=self._config.data_span_limit,
                                                 one_part=self._config.one_part, file=rel)
            return info, rows, parts
        except LeRobotImportError as ex:
            episodes = v2.group_episode_indices(root, info, rel)
            return DatasetReport(outcomes=(failed_file(root, rel, episodes,
                                                       [error_record(ex, dataset=root, episodes_file=rel)]),))

def _plan_messages(root: str, rel: str, info: DatasetInfo, rows: Sequence[episodes_metadata.EpisodeRow],
                   parts: Sequence[episodes_metadata.PartPlan]) -> Iterator:
    """Per part: its header (main), its clip uses per MP4, its episode ids; then the file's warnings."""
    by_position = {r.position: r for r in rows}
    for plan in parts:
        key = (root, rel, plan.part)
        part_rows = tuple(by_position[p] for p in plan.positions)
        yield key, PartInputs(headers=(PartHeader(root, rel, plan, len(parts), part_rows),))
        for row in part_rows:
            yield beam.pvalue.TaggedOutput("episode_ids", ((root, row.episode_index), rel))
        for mp4, use in clip_uses(key, part_rows, info):
            yield beam.pvalue.TaggedOutput("clip_uses", ((root, mp4), use))
    warnings = quirks.clip_end_warnings(root, rel, rows, info.fps) + quirks.oversized_episode_warnings(
        root, rel, rows, parts)
    counts = FileCounts(rel, len(rows), sum(r.length for r in rows),
                        tuple(map(tuple, quality.index_ranges([r.episode_index for r in rows]))))
    yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(warnings=tuple(warnings), file_counts=(counts,))))


def clip_uses(part: tuple[str, str, int], rows: Sequence[episodes_metadata.EpisodeRow],
              info: DatasetInfo) -> list[tuple[str, ClipUse]]:
    """(MP4, the part's clips in it) for every MP4 a part's episodes use, in first-use order."""
    features = info.video_features  # a computed property: asked once, not per row
    found: dict[str, tuple] = {}
    for row in rows if features else ():
        for clip, feature in zip(row.videos, features):
            _, _, spans = found.setdefault(clip.file, (feature.name, feature.video_codec, []))
            spans.append(ClipSpan(part[1], row.episode_index, clip.from_timestamp, clip.to_timestamp, row.length))
    return [(mp4, ClipUse(part, camera, codec, info.fps, tuple(spans)))
            for mp4, (camera, codec, spans) in found.items()]


def duplicate_episodes(key: tuple[str, int], files: Iterable[str]) -> Iterator[tuple[tuple[str, str], FileInputs]]:
    """An episode_index claimed by several rows of a dataset's episodes files fails each of those files.

    Args:
        key: (dataset root, episode_index).
        files: the episodes file of every row that claims it.
    """
    root, episode = key
    files = sorted(files)
    if len(files) < 2:
        return
    for rel in dict.fromkeys(files):
        others = ", ".join(f for f in dict.fromkeys(files) if f != rel) or "itself"
        err = LeRobotImportError("duplicate_episode", f"episode {episode} is listed {len(files)} times "
                                 f"(also in {others})", episode_index=episode, file=rel)
        yield (root, rel), FileInputs(duplicates=(error_record(err, dataset=root, episodes_file=rel),))


def _plan_bug(bad) -> tuple[str, DatasetReport]:
    (root, rel), exc_info = bad
    _LOG.error("planning %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    bug = internal_record(exc_info, dataset=root, episodes_file=rel, file=rel)
    return root, DatasetReport(outcomes=(failed_file(root, rel, (), [bug]),))
