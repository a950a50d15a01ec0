"""Which episodes of a part may have a finding: every frame check at once over the part's frames (numpy over
the concatenated columns, per-episode answers by `bincount`), so a clean part costs a few array passes, not a
few dozen numpy calls per episode. The episodes it names are then checked one by one (`check_episode`,
`video_samples`), which words the findings; the predicates here are the same ones, so nothing is missed.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo
from transforms.quality.episode_checks import TOLERANCE_S, FeaturePlan, row_blocks
from transforms.quality.video_checks import SampleTimes, _nearest_distance


def suspects(info: DatasetInfo, rows: Sequence[EpisodeRow], frames: Sequence[pa.StructArray], plan: FeaturePlan,
             *, tasks: Optional[Sequence[str]] = None,
             samples: Optional[Mapping[str, SampleTimes]] = None) -> np.ndarray:
    """A bool per episode (`rows[i]` with typed `frames[i]`): True where some check may find something.

    Args:
        info: the dataset's info.json.
        rows: the episodes.
        frames: their typed frames, in the same order.
        plan: which features the checks read.
        tasks: meta/tasks.parquet's tasks in row order, or None.
        samples: per MP4, its sample times around these episodes' clips.
    """
    n = len(rows)
    lengths = np.fromiter((len(f) for f in frames), np.int64, n)
    total = int(lengths.sum())
    flagged = np.zeros(n, bool)
    if n == 0 or total == 0:
        return flagged
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    episode_of = np.repeat(np.arange(n), lengths)

    def mark(frame_mask: np.ndarray, where: Optional[np.ndarray] = None) -> None:
        hits = (episode_of if where is None else where)[frame_mask]
        if len(hits):
            flagged[np.unique(hits)] = True

    def column(name: str) -> Optional[pa.Array]:
        joined = pa.concat_arrays([f.field(name) for f in frames])
        return None if joined.null_count else joined

    fps = info.fps
    ts = frame_index = None
    if "timestamp" in plan.names:
        joined = column("timestamp")
        ts = None if joined is None else joined.to_numpy(zero_copy_only=False)
        if ts is None:
            flagged[:] = True
    if "frame_index" in plan.names:
        joined = column("frame_index")
        if joined is None:
            flagged[:] = True
        else:
            frame_index = joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            mark(frame_index != np.arange(total) - starts[episode_of])
    if ts is not None and fps and fps > 0:
        where = frame_index if frame_index is not None else np.arange(total) - starts[episode_of]
        dtype = ts.dtype if np.issubdtype(ts.dtype, np.floating) else np.dtype(np.float64)
        expected = (where / fps).astype(dtype).astype(np.float64)
        values = ts.astype(np.float64)
        mark(~(np.abs(values - expected) <= TOLERANCE_S))
        if total > 1:
            spacing = np.spacing(np.abs(ts[1:])).astype(np.float64) if np.issubdtype(ts.dtype, np.floating) else 0.0
            within = episode_of[1:] == episode_of[:-1]
            mark(within & ~(np.abs(np.diff(values) - 1.0 / fps) <= TOLERANCE_S + 2 * spacing), episode_of[1:])
    if "episode_index" in plan.names:
        joined = column("episode_index")
        if joined is None:
            flagged[:] = True
        else:
            own = np.fromiter((r.episode_index for r in rows), np.int64, n)
            mark(joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False) != own[episode_of])
    for feature in plan.numerics:
        _screen_numeric(feature, frames, episode_of, lengths, flagged)
    if tasks is not None and "task_index" in plan.names:
        _screen_tasks(rows, column("task_index"), episode_of, len(tasks), tasks, flagged)
    if samples:
        if ts is not None:
            _screen_videos(rows, ts.astype(np.float64), episode_of, samples, flagged)
        elif frame_index is not None and fps:
            _screen_videos(rows, frame_index / fps, episode_of, samples, flagged)
    return flagged


def _screen_numeric(feature, frames: Sequence[pa.StructArray], episode_of: np.ndarray, lengths: np.ndarray,
                    flagged: np.ndarray) -> None:
    """Non-finite values and frozen episodes of one numeric feature, over the part's frames in blocks of
    frames (`row_blocks`): the episodes' columns are not joined into one copy, and no block holds more than
    BLOCK_VALUES values beside its bools. An episode is frozen when no frame of it differs from the frame
    before it (the same as from its first frame); a frame's predecessor across a block's edge is kept."""
    columns = [f.field(feature.name) for f in frames]
    if any(c.null_count for c in columns):
        flagged[:] = True
        return
    columns = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in columns]
    fixed = pa.types.is_fixed_size_list(columns[0].type)
    width = columns[0].type.list_size if fixed else 1
    joined = pa.chunked_array(columns, type=columns[0].type)
    floats = feature.dtype.startswith("float")
    moved = np.zeros(len(lengths), bool)
    previous = None
    for lo, hi in row_blocks(len(joined), width):
        block = joined.slice(lo, hi - lo).combine_chunks()
        values = (block.flatten() if fixed else block).to_numpy(zero_copy_only=False).reshape(hi - lo, width)
        where = episode_of[lo:hi]
        if floats:
            bad = ~np.isfinite(values).all(axis=1)
            if bad.any():
                flagged[np.unique(where[bad])] = True
        if previous is not None:
            differs = ~(values[0] == previous).all() and where[0] == episode_of[lo - 1]
            moved[where[0]] |= bool(differs)
        if hi - lo > 1:
            step = ~(values[1:] == values[:-1]).all(axis=1) & (where[1:] == where[:-1])
            moved[np.unique(where[1:][step])] = True
        previous = values[-1].copy()
    flagged |= ~moved & (lengths >= 2)


def _screen_tasks(rows: Sequence[EpisodeRow], joined: Optional[pa.Array], episode_of: np.ndarray, count: int,
                  tasks: Sequence[str], flagged: np.ndarray) -> None:
    if joined is None:
        flagged[:] = True
        return
    index = joined.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    unknown = (index < 0) | (index >= count)
    if unknown.any():
        flagged[np.unique(episode_of[unknown])] = True
    pairs = np.unique(episode_of[~unknown] * max(count, 1) + index[~unknown])
    episodes, used = pairs // max(count, 1), pairs % max(count, 1)
    bounds = np.searchsorted(episodes, np.arange(len(rows) + 1))
    for i, row in enumerate(rows):
        named = {tasks[int(k)] for k in used[bounds[i]:bounds[i + 1]]}
        if named and named != set(row.tasks):
            flagged[i] = True


def _screen_videos(rows: Sequence[EpisodeRow], offsets: np.ndarray, episode_of: np.ndarray,
                   samples: Mapping[str, SampleTimes], flagged: np.ndarray) -> None:
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
