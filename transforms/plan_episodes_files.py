"""PlanEpisodesFiles, the second step of the import: each episodes file read and cut into parts of whole
episodes, with their MP4 uses, the dataset-wide duplicate check, and the quirks worth a warning."""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence

import apache_beam as beam

from transforms import quality
from transforms.base import live_counts, storage
from transforms.base.errors import LeRobotImportError
from transforms.episode import quirks
from transforms.episode.outcomes import FilesMissing, failed_file, index_ranges
from transforms.episode.quirks import ClipSpan
from transforms.lerobot import data_files, layouts
from transforms.lerobot import episodes_files as episodes_metadata
from transforms.lerobot.dataset import check_dataset
from transforms.lerobot.depth import is_depth
from transforms.lerobot.info import DatasetInfo
from transforms.messages import (ClipUse, DatasetReport, FileCounts, FileInputs, PartHeader, PartInputs,
                                 VideoFailure, error_record, internal_record, load_info)
from transforms.safety_net import ImportDoFn, ImportStep, guarded, in_phase

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

    Input: (root, episodes file), or (root, episodes file, ReadRows) when the check step read it (the
    file is then not read again). Returns: `PlannedFiles`.
    """

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


class _PlanEpisodesFile(ImportDoFn):
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
            live_counts.add(episodes_files_planned=1, episodes_files_done=1, episodes_files_failed=1)
            yield beam.pvalue.TaggedOutput("reports", (root, planned))
            return
        rows = planned[1]
        live_counts.add(episodes_files_planned=1, episodes_planned=len(rows),
                        frames_planned=sum(r.length for r in rows))
        yield from _plan_messages(root, rel, *planned)

    def _plan(self, root: str, rel: str, read: Optional[Sequence[episodes_metadata.EpisodeRow]] = None
              ) -> tuple | DatasetReport:
        """(info, rows, parts) of an episodes file, or the report of its failure (every episode accounted).
        `read`: its rows as the check step read them (then the file is not read again). A v2.x group's
        episodes are each their own data file's rows: sized by the file (one listing of the chunk's data
        folder), no footer read."""
        layout = layouts.layout_of(rel)
        info = None
        try:
            info = load_info(root, skip_videos=self._config.skip_videos)
            if layouts.layout_for(info) is not layout:
                # a unit of another layout than info.json's version gives: the dataset's layout is what is wrong
                check_dataset(root, skip_videos=self._config.skip_videos)
            rows = list(read) if read is not None else layout.read_rows(root, rel, info)
            for f, size in layout.data_file_sizes(root, rows).items():
                self._sizes.setdefault((root, f), size)
            row_groups = (lambda f: self._layout(root, f, info)) if layout.sized_by_footers else (lambda f: None)
            parts = episodes_metadata.plan_parts(rows, lambda f: self._data_file_size(root, f), row_groups,
                                                 limit=self._config.data_span_limit,
                                                 one_part=self._config.one_part, file=rel)
            return info, rows, parts, layout.left_out(root, rows, info)
        except LeRobotImportError as ex:
            episodes = (tuple(r.episode_index for r in read) if read is not None else
                        layout.failed_episodes(root, rel, info))
            return DatasetReport(outcomes=(failed_file(root, rel, episodes,
                                                       [error_record(ex, dataset=root, episodes_file=rel)]),))


def _plan_messages(root: str, rel: str, info: DatasetInfo, rows: Sequence[episodes_metadata.EpisodeRow],
                   parts: Sequence[episodes_metadata.PartPlan], left_out: Optional[Mapping[int, tuple]] = None
                   ) -> Iterator:
    """Per part: its header (main), its clip uses per MP4, its episode ids; then the file's warnings. The
    episodes `left_out` (v2.x: their own files lie in folders that do not exist) are in their part's plan but
    not its rows, and have no clip use: their part's header holds their failures, one record per part."""
    by_position = {r.position: r for r in rows}
    left_out = left_out or {}
    for plan in parts:
        key = (root, rel, plan.part)
        part_rows = tuple(by_position[p] for p in plan.positions)
        kept = tuple(r for r in part_rows if r.position not in left_out)
        lost = files_missing(root, rel, [r for r in part_rows if r.position in left_out], left_out)
        yield key, PartInputs(headers=(PartHeader(root, rel, plan, len(parts), kept, lost),))
        for row in part_rows:
            yield beam.pvalue.TaggedOutput("episode_ids", ((root, row.episode_index), rel))
        for mp4, use in clip_uses(key, kept, info):
            yield beam.pvalue.TaggedOutput("clip_uses", ((root, mp4), use))
    warnings = quirks.clip_end_warnings(root, rel, rows, info.fps) + quirks.oversized_episode_warnings(
        root, rel, rows, parts)
    counts = FileCounts(rel, len(rows), sum(r.length for r in rows),
                        tuple(map(tuple, quality.index_ranges([r.episode_index for r in rows]))))
    yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(warnings=tuple(warnings), file_counts=(counts,),
                                                                   mp4_failures=gone_mp4s(root, rows, left_out))))


def gone_mp4s(root: str, rows: Sequence[episodes_metadata.EpisodeRow],
              left_out: Mapping[int, tuple]) -> tuple[VideoFailure, ...]:
    """The MP4s of the rows left out, per camera: one record for all of them (its first file and how many), as
    the MP4 step reports each MP4 it cannot use."""
    found: dict[str, list[str]] = {}
    for row in rows:
        gone = {own.video_key for own in left_out.get(row.position, ())}
        for clip in row.videos:
            if clip.key in gone:
                found.setdefault(clip.key, []).append(clip.file)
    return tuple(VideoFailure(root, camera, min(files), "file_missing", len(files))
                 for camera, files in sorted(found.items()))


def files_missing(root: str, rel: str, rows: Sequence[episodes_metadata.EpisodeRow],
                  left_out: Mapping[int, tuple]) -> tuple[FilesMissing, ...]:
    """The failures of rows left out at planning: one record per set of files named, the episodes as ranges."""
    by_files: dict[tuple, list[int]] = {}
    for row in rows:
        by_files.setdefault(left_out[row.position], []).append(row.episode_index)
    return tuple(FilesMissing(root, rel, index_ranges(eps), files) for files, eps in by_files.items())


def clip_uses(part: tuple[str, str, int], rows: Sequence[episodes_metadata.EpisodeRow],
              info: DatasetInfo) -> list[tuple[str, ClipUse]]:
    """(MP4, the part's clips in it) for every MP4 a part's episodes use, in first-use order."""
    features = info.video_features  # a computed property: asked once, not per row
    found: dict[str, tuple] = {}
    depth: dict[str, bool] = {}
    for row in rows if features else ():
        for clip, feature in zip(row.videos, features):
            _, _, spans = found.setdefault(clip.file, (feature.name, feature.video_codec, []))
            if feature.name not in depth:
                depth[feature.name] = is_depth(feature.info)
            spans.append(ClipSpan(part[1], row.episode_index, clip.from_timestamp, clip.to_timestamp, row.length))
    return [(mp4, ClipUse(part, camera, codec, info.fps, tuple(spans), depth=depth[camera]))
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
