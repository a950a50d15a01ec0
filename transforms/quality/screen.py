"""Which episodes of a part may have a finding, check by check: each screen runs over the part's frames at
once (numpy over the concatenated columns, per-episode answers by `bincount`), so a clean part costs a few
array passes, not a few dozen numpy calls per episode. The episodes a screen names are then checked one by
one (the per-episode checks, which word the findings); each screen uses its check's own predicate, so
nothing is missed (`tests/test_quality_registry.py` runs both over the same cases).

A screen takes a `PartFrames` and returns a bool per episode. A column with nulls cannot be screened: every
episode is then named, and the per-episode check decides. The numeric features' screens go over blocks of
frames instead of one joined copy (a fixed-size list feature may be millions of dimensions wide).
"""

from __future__ import annotations

import functools
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo
from transforms.quality.episode_checks import TOLERANCE_S, FeaturePlan, row_blocks
from transforms.quality.video_checks import SampleTimes, _nearest_distance


class PartFrames:
    """The typed frames of a part's episodes, concatenated once and shared by every screen.

    Args:
        info: the dataset's info.json.
        rows: the episodes.
        frames: their typed frames, in the same order.
        plan: which features the checks read.
        tasks: meta/tasks.parquet's tasks in row order, or None.
        samples: per MP4, its sample times around these episodes' clips.
    """

    def __init__(self, info: DatasetInfo, rows: Sequence[EpisodeRow], frames: Sequence[pa.StructArray],
                 plan: FeaturePlan, *, tasks: Optional[Sequence[str]] = None,
                 samples: Optional[Mapping[str, SampleTimes]] = None) -> None:
        self.info, self.rows, self.frames, self.plan = info, rows, frames, plan
        self.tasks, self.samples = tasks, samples
        self.n = len(rows)
        self.lengths = np.fromiter((len(f) for f in frames), np.int64, self.n)
        self.total = int(self.lengths.sum())
        self.starts = np.concatenate(([0], np.cumsum(self.lengths)[:-1])) if self.n else np.zeros(0, np.int64)
        self.episode_of = np.repeat(np.arange(self.n), self.lengths)

    def none(self) -> np.ndarray:
        return np.zeros(self.n, bool)

    def every(self) -> np.ndarray:
        return np.ones(self.n, bool)

    def flag(self, frame_mask: np.ndarray, where: Optional[np.ndarray] = None) -> np.ndarray:
        """The episodes holding a frame of `frame_mask` (`where`: each masked position's episode)."""
        flagged = self.none()
        hits = (self.episode_of if where is None else where)[frame_mask]
        if len(hits):
            flagged[np.unique(hits)] = True
        return flagged

    def column(self, name: str) -> Optional[pa.Array]:
        """A frame feature over the whole part, or None when it holds nulls (it cannot be screened)."""
        return self._columns(name)

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one PartFrames per part, dropped with it
    def _columns(self, name: str) -> Optional[pa.Array]:
        joined = pa.concat_arrays([f.field(name) for f in self.frames])
        return None if joined.null_count else joined

    @functools.cached_property
    def timestamps(self) -> Optional[np.ndarray]:
        joined = self.column("timestamp") if "timestamp" in self.plan.names else None
        return None if joined is None else joined.to_numpy(zero_copy_only=False)

    @functools.cached_property
    def frame_index(self) -> Optional[np.ndarray]:
        joined = self.column("frame_index") if "frame_index" in self.plan.names else None
        return None if joined is None else joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    @functools.cached_property
    def positions(self) -> np.ndarray:
        """Each frame's position in its episode."""
        return np.arange(self.total) - self.starts[self.episode_of]

    @property
    def empty(self) -> bool:
        return self.n == 0 or self.total == 0


def _timeline(part: PartFrames, least: int = 1):
    """(timestamps, fps) for the timestamp screens, or the screen's answer when they cannot run: every episode
    (a null timestamp), none (no timestamp feature, no usable fps, fewer than `least` frames)."""
    if "timestamp" not in part.plan.names:
        return part.none()
    if part.timestamps is None:
        return part.every()
    fps = part.info.fps
    if not fps or fps <= 0 or part.total < least:
        return part.none()
    return part.timestamps, fps


def timestamp_grid(part: PartFrames) -> np.ndarray:
    found = _timeline(part)
    if isinstance(found, np.ndarray):
        return found
    ts, fps = found
    where = part.frame_index if part.frame_index is not None else part.positions
    dtype = ts.dtype if np.issubdtype(ts.dtype, np.floating) else np.dtype(np.float64)
    expected = (where / fps).astype(dtype).astype(np.float64)
    return part.flag(~(np.abs(ts.astype(np.float64) - expected) <= TOLERANCE_S))


def timestamp_steps(part: PartFrames) -> np.ndarray:
    found = _timeline(part, least=2)
    if isinstance(found, np.ndarray):
        return found
    ts, fps = found
    values = ts.astype(np.float64)
    spacing = np.spacing(np.abs(ts[1:])).astype(np.float64) if np.issubdtype(ts.dtype, np.floating) else 0.0
    within = part.episode_of[1:] == part.episode_of[:-1]
    return part.flag(within & ~(np.abs(np.diff(values) - 1.0 / fps) <= TOLERANCE_S + 2 * spacing),
                     part.episode_of[1:])


def episode_rows(part: PartFrames) -> np.ndarray:
    flagged = part.none()
    if "frame_index" in part.plan.names:
        if part.frame_index is None:
            return part.every()
        flagged |= part.flag(part.frame_index != part.positions)
    if "episode_index" in part.plan.names:
        joined = part.column("episode_index")
        if joined is None:
            return part.every()
        own = np.fromiter((r.episode_index for r in part.rows), np.int64, part.n)
        flagged |= part.flag(joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                             != own[part.episode_of])
    return flagged


def _feature_blocks(part: PartFrames, name: str) -> Optional[Iterator[tuple[int, int, np.ndarray]]]:
    """A numeric feature as (lo, hi, values of frames lo..hi as (frames, dims)) blocks of at most
    BLOCK_VALUES values (`row_blocks`), None when it holds nulls. The episodes' columns are sliced, never
    joined into one copy: a fixed-size list feature of a million dimensions costs a block beside its frames."""
    columns = [f.field(name) for f in part.frames]
    if any(c.null_count for c in columns):
        return None
    columns = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in columns]
    fixed = pa.types.is_fixed_size_list(columns[0].type)
    width = columns[0].type.list_size if fixed else 1
    joined = pa.chunked_array(columns, type=columns[0].type)

    def blocks() -> Iterator[tuple[int, int, np.ndarray]]:
        for lo, hi in row_blocks(len(joined), width):
            block = joined.slice(lo, hi - lo).combine_chunks()
            values = (block.flatten() if fixed else block).to_numpy(zero_copy_only=False)
            yield lo, hi, values.reshape(hi - lo, width)
    return blocks()


def non_finite(part: PartFrames) -> np.ndarray:
    flagged = part.none()
    for feature in part.plan.floats:
        blocks = _feature_blocks(part, feature.name)
        if blocks is None:
            return part.every()
        for lo, hi, values in blocks:
            bad = ~np.isfinite(values).all(axis=1)
            if bad.any():
                flagged[np.unique(part.episode_of[lo:hi][bad])] = True
    return flagged


def frozen_feature(part: PartFrames) -> np.ndarray:
    """An episode is frozen when no frame of it differs from the frame before it (the same as from its first
    frame, as the check words it); a frame's predecessor across a block's edge is kept."""
    flagged = part.none()
    for feature in part.plan.numerics:
        blocks = _feature_blocks(part, feature.name)
        if blocks is None:
            return part.every()
        moved = part.none()
        previous = None
        for lo, hi, values in blocks:
            where = part.episode_of[lo:hi]
            if previous is not None and where[0] == part.episode_of[lo - 1]:
                moved[where[0]] |= bool(~(values[0] == previous).all())
            if hi - lo > 1:
                step = ~(values[1:] == values[:-1]).all(axis=1) & (where[1:] == where[:-1])
                moved[np.unique(where[1:][step])] = True
            previous = values[-1].copy()
        flagged |= ~moved & (part.lengths >= 2)
    return flagged


def episode_tasks(part: PartFrames) -> np.ndarray:
    tasks = part.tasks
    if tasks is None or "task_index" not in part.plan.names:
        return part.none()
    joined = part.column("task_index")
    if joined is None:
        return part.every()
    flagged = part.none()
    count = len(tasks)
    index = joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    episode_of = part.episode_of
    unknown = (index < 0) | (index >= count)
    if unknown.any():
        flagged[np.unique(episode_of[unknown])] = True
    pairs = np.unique(episode_of[~unknown] * max(count, 1) + index[~unknown])
    episodes, used = pairs // max(count, 1), pairs % max(count, 1)
    bounds = np.searchsorted(episodes, np.arange(part.n + 1))
    for i, row in enumerate(part.rows):
        named = {tasks[int(k)] for k in used[bounds[i]:bounds[i + 1]]}
        if named and named != set(row.tasks):
            flagged[i] = True
    return flagged


def video_samples(part: PartFrames) -> np.ndarray:
    flagged = part.none()
    if not part.samples:
        return flagged
    fps = part.info.fps
    if part.timestamps is not None:
        offsets = part.timestamps.astype(np.float64)
    elif part.frame_index is not None and fps:
        offsets = part.frame_index / fps
    else:
        return flagged
    rows, episode_of, samples = part.rows, part.episode_of, part.samples
    cameras = len(rows[0].videos) if rows else 0
    for k in range(cameras):
        files = [r.videos[k].file if len(r.videos) > k else None for r in rows]
        starts = np.array([r.videos[k].from_timestamp if len(r.videos) > k else 0.0 for r in rows], np.float64)
        t = starts[episode_of] + offsets
        # each frame's file as a number, frames grouped by it once (a v2.x group has an MP4 per episode:
        # comparing every row's file per file would grow with the square of the episodes)
        names = list(dict.fromkeys(f for f in files if f is not None))
        number = {f: i for i, f in enumerate(names)}
        of_frame = np.array([number.get(f, -1) for f in files], np.int64)[episode_of]
        order = np.argsort(of_frame, kind="stable")
        bounds = np.searchsorted(of_frame[order], np.arange(len(names) + 1))
        for i, file in enumerate(names):
            found = samples.get(file)
            if found is None:
                continue
            mine = order[bounds[i]:bounds[i + 1]]
            times = t[mine]
            dist = _nearest_distance(found.times, times)
            bad = ~(dist <= TOLERANCE_S) | (times < found.start) | (times >= found.end)
            hits = episode_of[mine][bad]
            if len(hits):
                flagged[np.unique(hits)] = True
    return flagged
