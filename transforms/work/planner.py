"""Planning an episodes file, without Beam: its rows read and cut into parts of whole episodes, with their
MP4 uses and the quirks worth a warning (`PlanEpisodesFiles` hands each worker's planner its files), and the
dataset-wide duplicate check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from transforms import quality
from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.episode import quirks
from transforms.episode.outcomes import FilesMissing, failed_file, index_ranges
from transforms.episode.quirks import ClipSpan
from transforms.lerobot import data_files, episodes_files, layouts
from transforms.lerobot.dataset import check_dataset
from transforms.lerobot.depth import is_depth
from transforms.lerobot.info import DatasetInfo
from transforms.work.messages import (ClipUse, DatasetReport, FileCounts, FileInputs, ImportConfig, PartHeader,
                                      PartInputs, VideoFailure, error_record, load_info)


@dataclasses.dataclass(frozen=True)
class PlannedFile:
    """An episodes file planned: what goes to each step (`rows` empty and `report` its failure when it failed)."""

    rows: tuple[episodes_files.EpisodeRow, ...] = ()
    to_parts: tuple[tuple[tuple[str, str, int], PartInputs], ...] = ()  # each part's header, for its writer
    #: (root, (episodes file, its episode indices as [start, end) runs)): one claim per file, for the
    #: dataset-wide duplicate check (`duplicate_episodes`)
    episode_ranges: tuple[tuple[str, tuple[str, tuple[tuple[int, int], ...]]], ...] = ()
    clip_uses: tuple[tuple[tuple[str, str], ClipUse], ...] = ()  # ((root, MP4), the part's clips in it)
    report: DatasetReport = DatasetReport()  # its warnings and counts, or its failure
    failed: bool = False  # it failed as a whole: `report` holds its outcome


class EpisodesFilePlanner:
    """Plans episodes files as one worker does: data-file sizes and row-group layouts asked once each.

    Args:
        config: the run's configuration.
    """

    def __init__(self, config: ImportConfig) -> None:
        self._config = config
        self._sizes: dict[tuple[str, str], int] = {}
        self._layouts: dict[tuple[str, str], Optional[episodes_files.RowGroupLayout]] = {}

    def plan(self, root: str, rel: str, out: str, read: Optional[Sequence[episodes_files.EpisodeRow]] = None
             ) -> PlannedFile:
        """An episodes file planned, or its failure (every episode accounted).

        Args:
            root: the dataset root URI.
            rel: the episodes file (or v2.x group), relative to the root.
            out: the dataset's output root (its parts' headers and clip uses carry it on).
            read: its rows as the check step read them (then the file is not read again).
        """
        planned = self._plan(root, rel, read)
        if isinstance(planned, DatasetReport):
            return PlannedFile(report=planned, failed=True)
        return planned_file(root, rel, out, *planned)

    def _data_file_size(self, root: str, rel: str) -> int:
        """A data file's size, asked of storage once per worker: many episodes files share a data file."""
        key = (root, rel)
        if key not in self._sizes:
            self._sizes[key] = storage.file_size(storage.dataset_file(root, rel), what="data file", file=rel)
        return self._sizes[key]

    def _layout(self, root: str, rel: str, info: DatasetInfo) -> Optional[episodes_files.RowGroupLayout]:
        """A data file's row-group layout, from its footer read once per worker."""
        key = (root, rel)
        if key not in self._layouts:
            self._layouts[key] = data_files.read_row_group_layout(root, rel, info)
        return self._layouts[key]

    def _plan(self, root: str, rel: str, read: Optional[Sequence[episodes_files.EpisodeRow]] = None
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
            parts = episodes_files.plan_parts(rows, lambda f: self._data_file_size(root, f), row_groups,
                                                 limit=self._config.data_span_limit,
                                                 one_part=self._config.one_part, file=rel)
            return info, rows, parts, layout.left_out(root, rows, info)
        except LeRobotImportError as ex:
            episodes = (tuple(r.episode_index for r in read) if read is not None else
                        layout.failed_episodes(root, rel, info))
            return DatasetReport(outcomes=(failed_file(root, rel, episodes,
                                                       [error_record(ex, dataset=root, episodes_file=rel)]),))


def planned_file(root: str, rel: str, out: str, info: DatasetInfo, rows: Sequence[episodes_files.EpisodeRow],
                 parts: Sequence[episodes_files.PartPlan],
                 left_out: Optional[Mapping[int, tuple]] = None) -> PlannedFile:
    """Per part: its header, its clip uses per MP4, its episode ids; the file's warnings and counts. The
    episodes `left_out` (v2.x: their own files lie in folders that do not exist) are in their part's plan but
    not its rows, and have no clip use: their part's header holds their failures, one record per part."""
    by_position = {r.position: r for r in rows}
    left_out = left_out or {}
    to_parts, uses = [], []
    for plan in parts:
        key = (root, rel, plan.part)
        part_rows = tuple(by_position[p] for p in plan.positions)
        kept = tuple(r for r in part_rows if r.position not in left_out)
        lost = files_missing(root, rel, [r for r in part_rows if r.position in left_out], left_out)
        if lost:  # the data files of the episodes left out are not read: not listed in what goes to the writer
            read = {r.data_file for r in kept}
            plan = dataclasses.replace(plan, data_files=tuple(f for f in plan.data_files if f in read))
        to_parts.append((key, PartInputs(headers=(PartHeader(root, rel, plan, len(parts), kept, out, lost),))))
        uses.extend(((root, mp4), use) for mp4, use in clip_uses(key, kept, info, out))
    warnings = quirks.clip_end_warnings(root, rel, rows, info.fps) + quirks.oversized_episode_warnings(
        root, rel, rows, parts)
    ranges = tuple(map(tuple, quality.index_ranges([r.episode_index for r in rows])))
    counts = FileCounts(rel, len(rows), sum(r.length for r in rows), ranges)
    # a file's rows are in increasing episode_index order (`check_order`): each index once, so its runs say them all
    return PlannedFile(tuple(rows), tuple(to_parts), ((root, (rel, ranges)),), tuple(uses),
                       DatasetReport(warnings=tuple(warnings), file_counts=(counts,),
                                     mp4_failures=gone_mp4s(root, rows, left_out)))


def gone_mp4s(root: str, rows: Sequence[episodes_files.EpisodeRow],
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


def files_missing(root: str, rel: str, rows: Sequence[episodes_files.EpisodeRow],
                  left_out: Mapping[int, tuple]) -> tuple[FilesMissing, ...]:
    """The failures of rows left out at planning: one record per set of files named, the episodes as ranges."""
    by_files: dict[tuple, list[int]] = {}
    for row in rows:
        by_files.setdefault(left_out[row.position], []).append(row.episode_index)
    return tuple(FilesMissing(root, rel, index_ranges(eps), files) for files, eps in by_files.items())


def clip_uses(part: tuple[str, str, int], rows: Sequence[episodes_files.EpisodeRow],
              info: DatasetInfo, out: str) -> list[tuple[str, ClipUse]]:
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
    return [(mp4, ClipUse(part, camera, codec, info.fps, tuple(spans), depth=depth[camera], output=out))
            for mp4, (camera, codec, spans) in found.items()]


def duplicate_episodes(root: str, claims: Iterable[tuple[str, Sequence[tuple[int, int]]]]
                       ) -> Iterator[tuple[tuple[str, str], FileInputs]]:
    """An episode_index claimed by several rows of a dataset's episodes files fails each of those files.

    The claims are ranges, one element per episodes file (not one per episode): the indices claimed more
    than once are found from the ranges' bounds, and only those are looked at one by one.

    Args:
        root: the dataset root.
        claims: per episodes file planned, (the file, its episode indices as [start, end) runs, each index
            once: a file's rows are in increasing episode_index order).
    """
    files, starts, ends = [], [], []
    for rel, ranges in claims:
        for start, end in ranges:
            files.append(rel)
            starts.append(int(start))
            ends.append(int(end))
    if len(files) < 2:
        return
    lo, hi = np.array(starts, np.int64), np.array(ends, np.int64)
    # the covered stretches between consecutive bounds: each is covered by the same runs throughout
    bounds = np.unique(np.concatenate([lo, hi]))
    coverage = np.cumsum(np.bincount(np.searchsorted(bounds, lo), minlength=len(bounds))
                         - np.bincount(np.searchsorted(bounds, hi), minlength=len(bounds)))[:-1]
    if not (coverage > 1).any():
        return
    # some index is claimed twice: sweep the bounds in order, keeping the files whose runs cover the stretch
    opening = np.searchsorted(bounds, lo).tolist()
    closing = np.searchsorted(bounds, hi).tolist()
    by_bound: dict[int, list[tuple[int, str]]] = {}
    for j, rel in enumerate(files):
        by_bound.setdefault(opening[j], []).append((1, rel))
        by_bound.setdefault(closing[j], []).append((-1, rel))
    active: Counter = Counter()
    for k in range(len(bounds) - 1):
        for step, rel in by_bound.get(k, ()):
            active[rel] += step
        if coverage[k] > 1:
            claiming = sorted(active.elements())
            for episode in range(int(bounds[k]), int(bounds[k + 1])):
                yield from _duplicate(root, episode, claiming)


def _duplicate(root: str, episode: int, files: list[str]) -> Iterator[tuple[tuple[str, str], FileInputs]]:
    """The `duplicate_episode` failure of each file (sorted, once per row) claiming `episode`."""
    for rel in dict.fromkeys(files):
        others = ", ".join(f for f in dict.fromkeys(files) if f != rel) or "itself"
        err = LeRobotImportError("duplicate_episode", f"episode {episode} is listed {len(files)} times "
                                 f"(also in {others})", episode_index=episode, file=rel)
        yield (root, rel), FileInputs(duplicates=(error_record(err, dataset=root, episodes_file=rel),))
