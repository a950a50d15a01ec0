"""The checks of one episode's frames, vectorised with numpy over the typed frames the import built anyway.

    timestamp_grid    |timestamp - frame_index / fps| > 1e-4 s (LeRobot's tolerance)
    timestamp_steps   consecutive timestamps not 1/fps apart: gaps (dropped frames), repeats (duplicated ones)
    non_finite        NaN / +-Inf in a float feature
    frozen_feature    a numeric feature holding one value (in every dimension) through the episode
    episode_rows      rows of another episode_index in the episode's range, or frame_index not 0..length-1
    episode_tasks     the episode's `tasks` vs the tasks its frames' task_index name in meta/tasks.parquet

Timestamps are compared in their own dtype (LeRobot writes float32): frame_index / fps is rounded to it
before the difference, and a step is allowed the spacing of the values, so float32 rounding of a long
episode's times is never a finding.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo, Feature
from transforms.quality.findings import REFUSED, Finding

#: LeRobot's tolerance between a frame's timestamp and where the fps puts it (its loader's `tolerance_s`).
TOLERANCE_S = 1e-4
#: Columns every LeRobot dataset has that hold one value per episode, or a counter, by design.
BOOKKEEPING = frozenset({"timestamp", "frame_index", "episode_index", "index", "task_index"})
#: Values (frames x dimensions) a check of a numeric feature works on at once: a fixed-size list feature of
#: a million dimensions is checked in blocks of frames, each a few vectorised passes, so the checks add a
#: buffer of this size (a few of them: bools, a comparison) beside the frames, never copies of the feature.
BLOCK_VALUES = 1 << 21


def row_blocks(rows: int, width: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of frames holding at most BLOCK_VALUES values of a `width`-wide feature (one frame at
    least)."""
    step = max(1, BLOCK_VALUES // max(int(width), 1))
    for lo in range(0, rows, step):
        yield lo, min(rows, lo + step)


def numeric_values(frames: pa.StructArray, feature: Feature) -> tuple[np.ndarray, np.ndarray]:
    """(values as (frames, dims), valid rows) of a numeric feature of typed frames; no copy for scalars."""
    column = frames.field(feature.name)
    valid = np.ones(len(column), bool) if not column.null_count else column.is_valid().to_numpy(zero_copy_only=False)
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if pa.types.is_fixed_size_list(column.type):
        width = column.type.list_size
        values = column.flatten().to_numpy(zero_copy_only=False)
        if column.null_count:  # null frames have no values in the flattened array: put them back as zeros
            full = np.zeros((len(column), width), values.dtype)
            full[valid] = values.reshape(-1, width)
            return full, valid
        return values.reshape(len(column), width), valid
    return column.to_numpy(zero_copy_only=False).reshape(-1, 1), valid


def dim_labels(feature: Feature, width: int) -> list[str]:
    """A label per flattened dimension: info.json's names when they are a flat list of that length (also under
    one key, `{"motors": [...]}`, or nested once, `[[...]]`), else the index."""
    names: Any = feature.names
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]
    if isinstance(names, list) and len(names) == width and all(isinstance(n, str) for n in names):
        return list(names)
    return [str(i) for i in range(width)]


class FeaturePlan(NamedTuple):
    """Which features each check reads, decided once per dataset (not per episode)."""

    names: frozenset[str]  # every frame feature
    floats: tuple[Feature, ...]  # float features but the bookkeeping ones: NaN/Inf
    numerics: tuple[Feature, ...]  # numeric features but the bookkeeping ones: frozen

    @classmethod
    def of(cls, info: DatasetInfo) -> "FeaturePlan":
        features = info.frame_features
        numerics = tuple(f for f in features if f.kind == "numeric" and f.name not in BOOKKEEPING)
        return cls(frozenset(f.name for f in features), tuple(f for f in numerics if f.dtype.startswith("float")),
                   numerics)


class EpisodeContext:
    """What every check of one episode needs: who it is and its frames' timeline."""

    def __init__(self, dataset: str, episodes_file: str, row: EpisodeRow, frames: pa.StructArray,
                 info: DatasetInfo, plan: Optional[FeaturePlan] = None) -> None:
        self.dataset, self.episodes_file, self.row, self.frames, self.info = dataset, episodes_file, row, frames, info
        self.plan = plan or FeaturePlan.of(info)
        names = self.plan.names
        self.timestamps = _float_column(frames, "timestamp") if "timestamp" in names else None
        self.frame_index = _int_column(frames, "frame_index") if "frame_index" in names else None
        self._values: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def values(self, feature: Feature) -> tuple[np.ndarray, np.ndarray]:
        """`numeric_values` of a feature, converted once for all the checks of the episode."""
        if feature.name not in self._values:
            self._values[feature.name] = numeric_values(self.frames, feature)
        return self._values[feature.name]

    def finding(self, check: str, feature: Optional[str], count: int, first_frame: Optional[int], detail: str,
                file: Optional[str] = None) -> Finding:
        return Finding(self.dataset, self.episodes_file, self.row.episode_index, check, feature, int(count),
                       None if first_frame is None else int(first_frame),
                       f"episode {self.row.episode_index}: {detail}", file=file or self.row.data_file)


def _float_column(frames: pa.StructArray, name: str) -> np.ndarray:
    return frames.field(name).to_numpy(zero_copy_only=False)


def _int_column(frames: pa.StructArray, name: str) -> np.ndarray:
    column = frames.field(name)
    if column.null_count:
        column = column.fill_null(-1)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _s(x: float) -> str:
    return f"{x:.6g}"


def timestamp_grid(ctx: EpisodeContext) -> list[Finding]:
    fps = ctx.info.fps
    ts = ctx.timestamps
    if ts is None or not fps or fps <= 0 or len(ts) == 0:
        return []
    where = ctx.frame_index if ctx.frame_index is not None else np.arange(len(ts))
    dtype = ts.dtype if np.issubdtype(ts.dtype, np.floating) else np.dtype(np.float64)
    expected = (where / fps).astype(dtype).astype(np.float64)
    off = np.abs(ts.astype(np.float64) - expected)
    bad = ~(off <= TOLERANCE_S)  # NaN counts as off
    if not bad.any():
        return []
    i = int(np.flatnonzero(bad)[0])
    worst = int(np.nanargmax(np.where(bad, off, -1.0)))
    return [ctx.finding("timestamp_grid", "timestamp", bad.sum(), i,
                        f"{int(bad.sum())} of {len(ts)} frames have a timestamp more than {TOLERANCE_S:g} s off "
                        f"frame_index / fps ({fps:g}); first frame {i}: {_s(float(ts[i]))} s, expected "
                        f"{_s(float(expected[i]))} s; worst {_s(float(off[worst]))} s off at frame {worst}; "
                        f"{REFUSED}")]


def timestamp_steps(ctx: EpisodeContext) -> list[Finding]:
    fps = ctx.info.fps
    ts = ctx.timestamps
    if ts is None or not fps or fps <= 0 or len(ts) < 2:
        return []
    values = ts.astype(np.float64)
    steps = np.diff(values)
    spacing = np.spacing(np.abs(ts[1:])).astype(np.float64) if np.issubdtype(ts.dtype, np.floating) else 0.0
    bad = ~(np.abs(steps - 1.0 / fps) <= TOLERANCE_S + 2 * spacing)
    if not bad.any():
        return []
    gaps = int((steps[bad] > 1.0 / fps).sum())
    repeats = int(bad.sum()) - gaps
    i = int(np.flatnonzero(bad)[0])
    return [ctx.finding("timestamp_steps", "timestamp", bad.sum(), i + 1,
                        f"{int(bad.sum())} of {len(steps)} steps between timestamps are not 1/fps = "
                        f"{_s(1.0 / fps)} s ({gaps} longer: dropped frames, {repeats} shorter: duplicated or "
                        f"out-of-time frames); first at frame {i + 1}: {_s(float(values[i + 1]))} s after "
                        f"{_s(float(values[i]))} s")]


def non_finite(ctx: EpisodeContext) -> list[Finding]:
    out = []
    for feature in ctx.plan.floats:
        values, valid = ctx.values(feature)
        width = values.shape[1]
        per_frame = np.zeros(len(values), bool)
        per_dim = np.zeros(width, bool)
        bad_count = nan = 0
        for lo, hi in row_blocks(len(values), width):
            bad_values = ~np.isfinite(values[lo:hi]) & valid[lo:hi, None]
            if not bad_values.any():
                continue
            per_frame[lo:hi] = bad_values.any(axis=1)
            per_dim |= bad_values.any(axis=0)
            bad_count += int(bad_values.sum())
            nan += int(np.isnan(values[lo:hi][bad_values]).sum())
        if not bad_count:
            continue
        i = int(np.flatnonzero(per_frame)[0])
        labels = dim_labels(feature, width)
        dims = sorted({labels[d] for d in np.flatnonzero(per_dim)})
        out.append(ctx.finding("non_finite", feature.name, per_frame.sum(), i,
                               f"`{feature.name}` holds {bad_count} non-finite values ({nan} NaN, "
                               f"{bad_count - nan} infinite) in {int(per_frame.sum())} of {len(values)} "
                               f"frames, first at frame {i} (dimensions: {', '.join(dims[:8])}"
                               f"{', ...' if len(dims) > 8 else ''})"))
    return out


def frozen_feature(ctx: EpisodeContext) -> list[Finding]:
    """A numeric feature whose every frame of an episode (two or more) holds the first frame's value, in every
    dimension: a sensor or actuator that was not recorded. One dimension alone staying put is left alone (an
    unused gripper, a joint held still, a per-episode setting); the bookkeeping columns are constant by design."""
    out = []
    n = len(ctx.frames)
    if n < 2:
        return out
    for feature in ctx.plan.numerics:
        values, valid = ctx.values(feature)
        if not valid.all():
            values = values[valid]
            if len(values) < 2:
                continue
        if not all((values[lo:hi] == values[0]).all() for lo, hi in row_blocks(len(values), values.shape[1])):
            continue
        width = values.shape[1]
        what = (f"`{feature.name}` holds {_s(float(values[0, 0]))} in all {n} frames" if width == 1 else
                f"`{feature.name}` holds one value ({_vector(values[0])}) in all {n} frames")
        out.append(ctx.finding("frozen_feature", feature.name, n, 0, what + ": a frozen sensor or actuator?"))
    return out


def _vector(values: np.ndarray, limit: int = 6) -> str:
    shown = ", ".join(_s(float(v)) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def episode_rows(ctx: EpisodeContext) -> list[Finding]:
    out = []
    n = len(ctx.frames)
    ep = ctx.row.episode_index
    if "episode_index" in ctx.plan.names:
        episode_index = _int_column(ctx.frames, "episode_index")
        other = episode_index != ep
        if other.any():
            i = int(np.flatnonzero(other)[0])
            found = episode_index[i]
            out.append(ctx.finding("episode_rows", "episode_index", other.sum(), i,
                                   f"{int(other.sum())} of its {n} rows (dataset_from_index {ctx.row.from_index} .. "
                                   f"{ctx.row.to_index}) hold another episode_index, first frame {i}: {found}; its "
                                   f"length ({ctx.row.length}) does not match its own rows"))
    if ctx.frame_index is not None:
        wrong = ctx.frame_index != np.arange(n)
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            out.append(ctx.finding("episode_rows", "frame_index", wrong.sum(), i,
                                   f"frame_index is not 0..{n - 1} (its length {ctx.row.length}): {int(wrong.sum())} "
                                   f"frames differ, first frame {i} holds {int(ctx.frame_index[i])}"))
    return out


def episode_tasks(ctx: EpisodeContext, tasks: Optional[Sequence[str]]) -> list[Finding]:
    """The episode's `tasks` list vs the tasks its frames' task_index name (`tasks`: meta/tasks.parquet in row
    order; None when the dataset has none to compare with)."""
    if tasks is None or "task_index" not in ctx.plan.names or len(ctx.frames) == 0:
        return []
    index = _int_column(ctx.frames, "task_index")
    used, first = np.unique(index, return_index=True)
    unknown = used[(used < 0) | (used >= len(tasks))]
    unknown = np.concatenate([unknown, np.array([k for k in used if 0 <= k < len(tasks) and tasks[int(k)] is None],
                                                np.int64)])
    if len(unknown):
        bad = np.isin(index, unknown)
        i = int(np.flatnonzero(bad)[0])
        file = getattr(tasks, "file", "meta/tasks.parquet")
        have = f"has {len(tasks)}" if None not in tasks else f"numbers its {sum(t is not None for t in tasks)} " \
            f"from 0 to {len(tasks) - 1}, leaving this one out"
        return [ctx.finding("episode_tasks", "task_index", bad.sum(), i,
                            f"task_index {int(index[i])} at frame {i} names no task ({file} {have}): "
                            f"{int(bad.sum())} frames", file=file)]
    named = {tasks[int(k)]: int(f) for k, f in zip(used, first)}
    listed = set(ctx.row.tasks)
    if set(named) == listed:
        return []
    missing = sorted(set(named) - listed)
    extra = sorted(listed - set(named))
    first_frame = min((named[t] for t in missing), default=0)
    count = int(np.isin(index, [k for k in used if tasks[int(k)] in missing]).sum()) if missing else 0
    parts = []
    if missing:
        parts.append(f"its frames' task_index name {_quoted(missing)}, which its tasks do not list")
    if extra:
        parts.append(f"it lists {_quoted(extra)}, which no frame's task_index names")
    return [ctx.finding("episode_tasks", "tasks", count, first_frame,
                        f"tasks {_quoted(sorted(listed))} disagree with its frames: " + "; ".join(parts))]


def _quoted(values: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(repr(v if len(v) <= 80 else v[:80] + "…") for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"
