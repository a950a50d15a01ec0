"""video_samples: every frame of every camera has a video sample within 1e-4 s of its time, from the MediaIndex
alone (no video is decoded).

LeRobot's loader asks each camera's decoder for the frame at `from_timestamp + timestamp` and refuses one
farther than 1e-4 s from the nearest frame of the file; so does the import's reader. An MP4 encoded at
another frame rate than info.json's, wall-clock timestamps and a clip holding fewer samples than its episode
has frames all show here. The MP4 step cuts each file's sample times to the window a part's clips span
(`SampleTimes`), so what travels to the part's writer is about as long as its frames, not the whole file.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.mp4 import arrow
from transforms.quality.episode_checks import TOLERANCE_S, EpisodeContext
from transforms.quality.findings import REFUSED, Finding

#: Seconds of samples kept on each side of a part's clips: a frame time farther out than this from every
#: clip of its part is a finding whatever the file holds there (another episode's frames, or nothing).
WINDOW_MARGIN_S = 1.0


@dataclasses.dataclass(frozen=True)
class SampleTimes:
    """The presentation times (seconds on the file's clock, ascending) of an MP4's video samples in
    [start, end), and what the whole file holds: its sample count and its own frame rate."""

    file: str
    start: float
    end: float
    times: np.ndarray
    samples: int
    fps: Optional[float]
    #: the file's track timescale when `times` are its ticks divided by it (lets a constant-rate window
    #: travel as four numbers)
    timescale: Optional[int] = None

    def __eq__(self, other) -> bool:  # numpy arrays do not compare as one value
        return (isinstance(other, SampleTimes) and (self.file, self.start, self.end, self.samples, self.fps)
                == (other.file, other.start, other.end, other.samples, other.fps)
                and np.array_equal(self.times, other.times))

    __hash__ = None

    def __reduce__(self):
        # Across a shuffle a constant-rate window (ticks first + k * step, the usual MP4) travels as its first
        # tick, step and count, rebuilt bit for bit; any other travels whole.
        run = _tick_run(self.times, self.timescale)
        if run is None:
            return SampleTimes, (self.file, self.start, self.end, self.times, self.samples, self.fps, self.timescale)
        return _sample_times_from_run, (self.file, self.start, self.end, run, self.samples, self.fps, self.timescale)


def _run_times(first: int, step: int, count: int, timescale: int) -> np.ndarray:
    return (first + step * np.arange(count, dtype=np.int64)) / timescale


def _tick_run(times: np.ndarray, timescale: Optional[int]) -> Optional[tuple[int, int, int]]:
    """(first tick, step, count) when `times` are exactly `_run_times` of them, else None."""
    if not timescale or len(times) < 3 or times.dtype != np.float64:
        return None
    first = int(round(float(times[0]) * timescale))
    step = int(round(float(times[1]) * timescale)) - first
    run = (first, step, len(times))
    return run if np.array_equal(_run_times(*run, timescale), times) else None


def _sample_times_from_run(file: str, start: float, end: float, run: tuple[int, int, int], samples: int,
                           fps: Optional[float], timescale: int) -> SampleTimes:
    return SampleTimes(file, start, end, _run_times(*run, timescale), samples, fps, timescale)


def presentation_times(index: pa.Array) -> tuple[np.ndarray, Optional[float]]:
    """(every sample's presentation time in seconds, ascending; the file's own frame rate, from its most
    common sample duration) of the primary video track of a length-1 spql.MediaIndex.

    Raises:
        arrow.InvalidMediaIndex: the index is null or inconsistent.
    """
    times, fps, _ = presentation_timeline(index)
    return times, fps


def presentation_timeline(index: pa.Array) -> tuple[np.ndarray, Optional[float], int]:
    """`presentation_times` and the track's timescale (the times are its ticks divided by it).

    Raises:
        arrow.InvalidMediaIndex: the index is null or inconsistent.
    """
    track = arrow.read_track(index)
    deltas, _, pts = arrow.decode_times(track)
    timescale = int(track.timescale)
    if len(pts) > 1 and not (pts[1:] >= pts[:-1]).all():  # B-frames: presented in another order than decoded
        pts = np.sort(pts)
    times = pts / timescale
    fps = None
    positive = deltas[deltas > 0]
    if len(positive) and positive.min() == positive.max():  # a constant frame rate: no need to count
        fps = timescale / float(positive[0])
    elif len(positive):
        values, counts = np.unique(positive, return_counts=True)
        fps = timescale / float(values[int(np.argmax(counts))])
    return times, fps, timescale


def sample_window(file: str, times: np.ndarray, fps: Optional[float], start: float, end: float, *,
                  timescale: Optional[int] = None) -> SampleTimes:
    """The samples of a file in [start - margin, end + margin) (`timescale`: the track's, when `times`
    are its ticks divided by it)."""
    lo, hi = start - WINDOW_MARGIN_S, end + WINDOW_MARGIN_S
    a, b = np.searchsorted(times, [lo, hi], side="left")
    return SampleTimes(file, lo, hi, np.ascontiguousarray(times[a:b]), len(times), fps, timescale)


def clips_window(spans: Sequence, fps: Optional[float]) -> tuple[float, float]:
    """[first start, last end) of some clips (objects with from_timestamp, to_timestamp, length), the end
    reaching each episode's last frame even when its clip ends short of it."""
    start = min(c.from_timestamp for c in spans)
    ends = [c.to_timestamp for c in spans]
    if fps and fps > 0:
        ends += [c.from_timestamp + c.length / fps for c in spans]
    return start, max(ends)


def video_samples(ctx: EpisodeContext, samples: Mapping[str, SampleTimes]) -> list[Finding]:
    """One finding per camera of the episode with frames that have no sample within 1e-4 s of their time
    (a camera whose MP4 has no index, e.g. an unindexed codec, is not checked)."""
    fps = ctx.info.fps
    n = len(ctx.frames)
    if n == 0:
        return []
    if ctx.timestamps is not None:
        offsets = ctx.timestamps.astype(np.float64)
    elif ctx.frame_index is not None and fps:
        offsets = ctx.frame_index / fps
    else:
        return []
    out = []
    for clip in ctx.row.videos:
        found = samples.get(clip.file)
        if found is None:
            continue
        t = clip.from_timestamp + offsets
        dist = _nearest_distance(found.times, t)
        outside = (t < found.start) | (t >= found.end)
        dist = np.where(outside, np.inf, dist)
        bad = ~(dist <= TOLERANCE_S)
        if not bad.any():
            continue
        i = int(np.flatnonzero(bad)[0])
        near = "no sample near it" if not np.isfinite(dist[i]) else f"the nearest sample is {dist[i]:.6g} s away"
        own = f"at {found.fps:.6g} fps" if found.fps else "at an unknown frame rate"
        declared = f"info.json says {fps:g} fps" if fps else "info.json declares no fps"
        out.append(ctx.finding(
            "video_samples", clip.key, bad.sum(), i,
            f"camera `{clip.key}`: {int(bad.sum())} of {n} frames have no video sample within {TOLERANCE_S:g} s of "
            f"from_timestamp + timestamp (first: frame {i} at {t[i]:.6g} s of {clip.file}, {near}); the MP4 holds "
            f"{found.samples} samples {own}, {declared}; {REFUSED}", file=clip.file))
    return out


def _nearest_distance(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The distance from each of `t` to the nearest of the ascending `times` (inf when there is none)."""
    if len(times) == 0:
        return np.full(len(t), np.inf)
    k = np.searchsorted(times, t)
    below = times[np.clip(k - 1, 0, len(times) - 1)]
    above = times[np.clip(k, 0, len(times) - 1)]
    return np.minimum(np.abs(t - below), np.abs(above - t))
