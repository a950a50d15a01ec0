"""Camera frames by episode time, decoded from only the bytes of each frame's decode closure.

A `VideoHandle` is one camera of one episode: the clip (file URI, `[start, end)` on the file's own
clock), the episode's `time_origin` and the file's `spql.MediaIndex` as `TrackTables`. Nothing here
reads the MP4's `moov`: every sample's time, size, file offset and GOP comes from the index, so a seek
is one batch of range reads of the samples it decodes, then a PyAV decode of those samples alone.

Timeline (decided, and checked against PyAV on every corpus file by tests/test_reader.py):
episode time `t` -> stream time `t - time_origin` -> ticks of the primary track's timescale. A frame
is presented at `pts / timescale` seconds, with `pts = dts + ctts - min(dts + ctts)` exactly as the
index stores it. The edit list is NOT applied on top: for files FFmpeg writes (LeRobot's), the edit
list's `media_time` is exactly that minimum composition time, so the index's pts already equals the
pts FFmpeg, PyAV and torchcodec report (first frame at 0); applying it again would shift B-frame
files by the reorder delay. A file whose edit list trims frames or starts with an empty edit is read
on the index's timeline (frame 0 at stream time 0), not FFmpeg's.

Which times a clip answers, as LeRobot's reader does: LeRobot asks its decoder for `from_timestamp +
timestamp` of each frame and takes the file's frame within a tolerance of it; it never compares with
`to_timestamp`. So an episode's frames are the frames from its clip start on, up to the clip end or
the episode's length in frames, whichever reaches further: a clip whose `to_timestamp` is one frame
short (`(length - 1) / fps`) still gives the episode's last frame. A time before the clip, or past
both, is refused (it would be another episode's frame).
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.base.errors import LeRobotImportError
from transforms.mp4 import arrow as mp4_arrow
from transforms.mp4 import ranges
from transforms.mp4.boxes import Box, BoxWalk, full_box, parse_box_header
from transforms.mp4.tables import MediaTrack

__all__ = ["CONFIG_BOX", "DEFAULT_TOLERANCE", "Closure", "ReaderError", "TrackTables", "VideoHandle", "codec_config",
           "seconds"]

#: Default largest distance (seconds) between a requested time and the frame returned (LeRobot's
#: default `tolerance_s`).
DEFAULT_TOLERANCE = 1e-4
#: MediaIndex codec name -> the codec-configuration box inside its sample entry.
CONFIG_BOX = {"h264": b"avcC", "h265": b"hvcC", "av1": b"av1C"}
#: MediaIndex codec name -> PyAV decoders to try, in order (FFmpeg's native "av1" decoder needs a
#: hardware accelerator; libdav1d is also what `av.open` picks, so pixels match a container decode).
DECODERS = {"h264": ("h264",), "h265": ("hevc",), "av1": ("libdav1d", "libaom-av1", "av1")}
#: Codecs whose FFmpeg decoder honours `skip_frame = NONREF` packet by packet (libdav1d reads it
#: once, at open).
SKIP_NONREF = {"h264": True, "h265": True, "av1": False}
#: A visual sample entry's fixed fields after its 8-byte header, before its child boxes.
_VISUAL_ENTRY_FIXED = 78
#: Episode times beyond this many seconds cannot be nanoseconds in int64 (292 years).
_MAX_SECONDS = 9.2e9


class ReaderError(Exception):
    """Reading an import back failed: a bad request (time outside a clip, no frame near it, unknown
    episode) or an output that cannot be read (missing index, truncated file, undecodable frame, an
    output edited to point outside its roots)."""


def checked_number(value: Any, name: str, *, whole: bool = False, minimum: float = 0) -> Any:
    """A numeric argument of the reader's API, checked where it is given: a finite number (a whole one when
    `whole`) >= `minimum`. NaN, an infinity, a negative, a bool or a non-number is the reader's own error
    naming the argument, not a ValueError from deep inside a seek.

    Raises:
        ReaderError: naming the argument and its value.
    """
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not (number and math.isfinite(value) and value >= minimum and (not whole or float(value).is_integer())):
        kind = "whole number" if whole else "number"
        raise ReaderError(f"{name}={value!r:.100} is not a finite {kind} >= {minimum:g}")
    return value


def seconds(x: float) -> str:
    """A time for messages: a plain number, 9 significant digits (never `np.float64(...)`)."""
    return f"{float(x):.9g}"


# ------------------------------------------------------------------------------------------------
# The index of one track, as numpy
# ------------------------------------------------------------------------------------------------

def codec_config(sample_entry: bytes, codec: str) -> bytes:
    """The payload of avcC/hvcC/av1C inside an `stsd` box: the decoder's extradata.

    Args:
        sample_entry: the whole `stsd` box, as the MediaIndex stores it.
        codec: the MediaIndex codec name (h264, h265, av1).
    Returns:
        The configuration box's payload.
    Raises:
        ReaderError: the box is not an stsd holding a visual sample entry with that configuration.
    """
    want = CONFIG_BOX[codec]
    try:
        walk = BoxWalk(bytes(sample_entry), file="sample_entry", where="sample entry")
        stsd = walk.root()
        if stsd.type != b"stsd":
            raise ReaderError(f"sample_entry is a {stsd.name!r} box, not an stsd box")
        _, pos = full_box(walk.buf, stsd, 4, walk.file, versions=tuple(range(256)))
        entry = Box(parse_box_header(walk.buf, pos + 4, stsd.end, file=walk.file, where="sample entry"))
        config = next((c for c in walk.children(entry, entry.payload + _VISUAL_ENTRY_FIXED) if c.type == want), None)
    except LeRobotImportError as ex:
        raise ReaderError(f"sample_entry is not an stsd box holding a visual sample entry: {ex.message}") from None
    if config is None:
        raise ReaderError(f"the {codec} sample entry has no {want.decode()} box")
    return bytes(walk.buf[config.payload:config.end])


def _sample_offsets(t: MediaTrack) -> np.ndarray:
    """Absolute file offset of every sample: its chunk's offset plus the sizes before it in the chunk."""
    n = len(t.sizes)
    first = t.chunks.first_sample.astype(np.int64)
    csum = np.zeros(n + 1, np.int64)
    np.cumsum(t.sizes, out=csum[1:])
    chunk_of = np.searchsorted(first, np.arange(n), side="right") - 1
    return t.chunks.offset.astype(np.int64)[chunk_of] + csum[:-1] - csum[first[chunk_of]]


@dataclasses.dataclass(frozen=True, eq=False)
class TrackTables:
    """One track's per-sample tables (decode order), expanded once from the MediaIndex with numpy."""

    track_id: int
    codec: str
    timescale: int
    width: Optional[int]
    height: Optional[int]
    extradata: bytes
    dts: np.ndarray          # int64 ticks
    pts: np.ndarray          # int64 ticks, min 0 (the index's timeline)
    duration: np.ndarray     # int64 ticks (dts_runs deltas)
    offset: np.ndarray       # int64 absolute file offsets
    size: np.ndarray         # int64 bytes
    sync: np.ndarray         # bool
    gop_start: np.ndarray    # int64 decode index of each GOP's first sample, ascending
    order: np.ndarray        # int64 decode index of each frame, in presentation order
    sorted_pts: np.ndarray   # int64 pts in presentation order (= pts[order])

    @property
    def num_samples(self) -> int:
        return len(self.size)

    @classmethod
    def from_media_index(cls, index: pa.Array, track_id: Optional[int] = None) -> "TrackTables":
        """The tables of one track, its index checked before anything is expanded.

        Args:
            index: a length-1 spql.MediaIndex array (or its storage).
            track_id: the track (default: the primary track).
        Returns:
            The expanded tables.
        Raises:
            ReaderError: the index is null, lacks the track, or its tables disagree with each other.
        """
        try:
            track = mp4_arrow.read_track(index, track_id)
        except mp4_arrow.InvalidMediaIndex as ex:
            raise ReaderError(str(ex)) from None
        deltas, dts, pts = mp4_arrow.decode_times(track)
        # The reference drops samples before the first sync sample from the per-sample lists but
        # keeps the GOPs' original numbering: renumber from the first GOP.
        gop_start = track.gops.decode_start.astype(np.int64)
        gop_start = gop_start - gop_start[0]
        order = np.argsort(pts, kind="stable")
        return cls(track_id=track.track_id, codec=track.codec, timescale=int(track.timescale),
                   width=track.width, height=track.height, extradata=codec_config(track.sample_entry, track.codec),
                   dts=dts, pts=pts, duration=deltas, offset=_sample_offsets(track),
                   size=track.sizes.astype(np.int64), sync=(track.flags & 1).astype(bool), gop_start=gop_start,
                   order=order, sorted_pts=pts[order])

    def closure_start(self, sample: int) -> int:
        """First decode index needed to decode `sample`: its GOP's first sample, or the previous
        GOP's when `sample` is a leading picture (presented before its GOP's sync sample: open-GOP
        RASL/B frames reference the previous GOP)."""
        g = max(int(np.searchsorted(self.gop_start, sample, side="right")) - 1, 0)
        start = int(self.gop_start[g])
        if g > 0 and self.pts[sample] < self.pts[start]:
            return int(self.gop_start[g - 1])
        return start

    def custom_frame_mappings(self) -> str:
        """torchcodec's `custom_frame_mappings` JSON (ffprobe `-show_frames` shape): every frame of the
        file in presentation order, `pts`/`duration` in ticks of 1/timescale, `key_frame` 0/1."""
        o = self.order
        frames = [{"media_type": "video", "key_frame": int(k), "pts": int(p), "duration": int(d)}
                  for k, p, d in zip(self.sync[o].tolist(), self.pts[o].tolist(), self.duration[o].tolist())]
        return json.dumps({"frames": frames})


#: Needles beyond int64's range are clamped into it (no pts reaches these).
_TICK_LIMIT = float(2 ** 62)


def _whole_ticks(ticks):
    """ceil(ticks) as int64 (a scalar or an array), clamped into int64: the needle for a searchsorted over
    integer pts that finds the same index as the float would."""
    return np.ceil(np.clip(ticks, -_TICK_LIMIT, _TICK_LIMIT)).astype(np.int64)


def _first_at_or_after(sorted_pts: np.ndarray, timescale: int, x: float) -> int:
    """The first presentation index whose time `pts / timescale` (float64 seconds) is >= `x`: the
    searchsorted of the times in seconds, found in ticks and settled on the seconds' own comparison
    near the boundary, so a lookup costs O(log n), not a pass over a file's tables."""
    n = len(sorted_pts)
    # searched with a whole tick: pts are integers, so `pts >= x * timescale` holds exactly when `pts >=
    # ceil(x * timescale)`; a float needle would make numpy cast the whole table to float64 at every call
    # (~0.1 ms a lookup on an MP4 of 150,000 samples, every episode's first use)
    k = int(np.searchsorted(sorted_pts, _whole_ticks(x * timescale), side="left"))
    while k > 0 and sorted_pts[k - 1] / timescale >= x:
        k -= 1
    while k < n and sorted_pts[k] / timescale < x:
        k += 1
    return k


# ------------------------------------------------------------------------------------------------
# Seeking
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Closure:
    """One decode: samples `first..last` (decode order) give the frames `targets` (decode indices)."""

    first: int
    last: int
    targets: tuple[int, ...]

    def byte_ranges(self, track: TrackTables) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the byte-contiguous runs holding the closure's samples."""
        off = track.offset[self.first:self.last + 1]
        end = off + track.size[self.first:self.last + 1]
        breaks = np.flatnonzero(off[1:] != end[:-1]) + 1
        return off[np.concatenate(([0], breaks))], end[np.concatenate((breaks - 1, [len(off) - 1]))]


@dataclasses.dataclass
class VideoHandle:
    """One camera of one episode: frames by episode time (seconds on the episode's `timestamp`).

    Attributes:
        uri: the MP4.
        clip_start_ns, clip_end_ns: the clip on the file's clock.
        time_origin_ns: the episode time of stream time 0.
        track: the file's primary track tables.
        source: the range reader of the file (opened on first use; its `stats` count the reads).
        tolerance: the largest distance (s) between a requested time and the frame returned.
        threads: decoder threads.
        frame_count: the episode's length in frames, when known: the clip then covers that many
            frames from its start even when its end falls short (see the module docstring).
    """

    uri: str
    clip_start_ns: int
    clip_end_ns: int
    time_origin_ns: int
    track: TrackTables
    source: Optional[ranges.RangeReader] = None
    tolerance: float = DEFAULT_TOLERANCE
    threads: int = 1
    frame_count: Optional[int] = None

    def __post_init__(self) -> None:
        checked_number(self.tolerance, "tolerance")
        checked_number(self.threads, "threads", whole=True, minimum=1)
        if self.frame_count is not None:
            checked_number(self.frame_count, "frame_count", whole=True)

    # -- time mapping --------------------------------------------------------------------------

    def _frame_span(self) -> tuple[int, int]:
        """[lo, hi): presentation indices of the clip's frames. A frame belongs to the clip when its time
        lies in [start - tolerance, end - tolerance) (the stored bounds drift by a few ns from the
        frames, and each boundary frame goes to one clip), extended to `frame_count` frames."""
        sp = self.track.sorted_pts
        lo = _first_at_or_after(sp, self.track.timescale, self.clip_start_ns / 1e9 - self.tolerance)
        hi = _first_at_or_after(sp, self.track.timescale, self.clip_end_ns / 1e9 - self.tolerance)
        if self.frame_count is not None:
            hi = max(hi, min(lo + int(self.frame_count), len(sp)))
        return lo, max(lo, hi)

    def _episode_time(self, stream_ns: float) -> str:
        return seconds((stream_ns + self.time_origin_ns) / 1e9)

    def locate(self, times: Sequence[float]) -> np.ndarray:
        """Presentation index (frame number in the file) of the frame nearest each episode time.

        Args:
            times: episode times in seconds.
        Returns:
            int64 frame numbers.
        Raises:
            ReaderError: a time outside the clip, or farther than `tolerance` from every frame.
        """
        try:
            t = np.asarray(times, np.float64).reshape(-1)
        except (TypeError, ValueError) as ex:
            raise ReaderError(f"episode times must be numbers in seconds: {ex}") from None
        if not np.all(np.isfinite(t)):
            raise ReaderError(f"episode times must be finite numbers, got {seconds(t[~np.isfinite(t)][0])}")
        ts = self.track.timescale
        sp = self.track.sorted_pts
        lo, hi = self._frame_span()
        end_ns = self.clip_end_ns
        if hi > lo:  # the last frame of a clip whose end falls short of it
            end_ns = max(end_ns, int(sp[hi - 1] * 1e9 / ts + self.tolerance * 1e9))
        s_ns = np.where(np.abs(t) < _MAX_SECONDS, np.rint(np.clip(t, -_MAX_SECONDS, _MAX_SECONDS) * 1e9), 0)
        s_ns = s_ns.astype(np.int64) - self.time_origin_ns
        outside = (np.abs(t) >= _MAX_SECONDS) | (s_ns < self.clip_start_ns) | (s_ns >= end_ns)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise ReaderError(f"episode time {seconds(t[i])} s is outside the clip of {self.uri}: the clip covers "
                              f"episode times [{self._episode_time(self.clip_start_ns)}, {self._episode_time(end_ns)})"
                              f" s (stream [{seconds(self.clip_start_ns / 1e9)}, {seconds(end_ns / 1e9)}) s)")
        target = s_ns / 1e9 * ts  # ticks, float64
        k = np.searchsorted(sp, _whole_ticks(target), side="left")  # as `_first_at_or_after` does (integer pts)
        below, above = np.clip(k - 1, 0, len(sp) - 1), np.clip(k, 0, len(sp) - 1)
        pick = np.where(np.abs(sp[above] - target) < np.abs(target - sp[below]), above, below).astype(np.int64)
        dist = np.abs(sp[pick] / ts - s_ns / 1e9)
        bad = dist > self.tolerance
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ReaderError(f"no frame of {self.uri} within {self.tolerance:g} s of episode time {seconds(t[i])} s: "
                              f"the nearest frame (frame {int(pick[i])} of the file, at episode time "
                              f"{self._episode_time(sp[pick[i]] * 1e9 / ts)} s) is {dist[i]:.6g} s away")
        return pick

    def timestamps(self) -> np.ndarray:
        """Episode time (float64 seconds) of every frame presented in the clip, in order."""
        lo, hi = self._frame_span()
        return self.track.sorted_pts[lo:hi] / self.track.timescale + self.time_origin_ns / 1e9

    def frame_numbers(self) -> np.ndarray:
        """Presentation index in the file of every frame `timestamps()` lists."""
        lo, hi = self._frame_span()
        return np.arange(lo, hi, dtype=np.int64)

    # -- decoding -------------------------------------------------------------------------------

    def plan(self, times: Sequence[float]) -> list[Closure]:
        """The decodes `frames_at(times)` runs: one per closure start, covering every target in it."""
        samples = self.track.order[self.locate(times)]
        groups: dict[int, set[int]] = {}
        for s in samples.tolist():
            groups.setdefault(self.track.closure_start(s), set()).add(s)
        return [Closure(first, max(targets), tuple(sorted(targets))) for first, targets in sorted(groups.items())]

    def frame_at(self, t: float) -> np.ndarray:
        """The frame presented nearest episode time `t` (seconds): RGB uint8, H×W×3."""
        return self.frames_at([t])[0]

    def frames_at(self, times: Sequence[float]) -> np.ndarray:
        """Frames nearest each episode time (seconds), N×H×W×3 RGB uint8 (each closure decoded once)."""
        samples = self.track.order[self.locate(times)]
        decoded: dict[int, np.ndarray] = {}
        for closure in self.plan(times):
            decoded.update(self._decode(closure))
        return np.stack([decoded[s] for s in samples.tolist()]) if len(samples) else np.zeros((0, 0, 0, 3), np.uint8)

    def _read(self, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        try:
            if self.source is None:
                self.source = ranges.open_uri(self.uri)
            return self.source.read_ranges(starts.tolist(), ends.tolist())
        except LeRobotImportError as ex:
            raise ReaderError(f"cannot read video file {self.uri}: {ex.message}") from None

    def _decode(self, closure: Closure) -> dict[int, np.ndarray]:
        import av

        tr = self.track
        starts, ends = closure.byte_ranges(tr)
        runs = self._read(starts, ends)
        # Sample k of the closure lies in run r at (offset - run start).
        idx = np.arange(closure.first, closure.last + 1)
        run_of = np.searchsorted(starts, tr.offset[idx], side="right") - 1
        rel = tr.offset[idx] - starts[run_of]
        ctx = _codec_context(tr, self.threads)
        time_base = Fraction(1, tr.timescale)
        want = {int(tr.pts[s]): s for s in closure.targets}
        out: dict[int, np.ndarray] = {}

        def take(frames) -> None:
            for fr in frames:
                s = want.get(fr.pts)
                if s is not None and s not in out:
                    out[s] = fr.to_ndarray(format="rgb24")

        # Non-reference frames that are not targets are never needed: let the decoder skip them
        # (H.264/HEVC read the NAL header's reference flag; the pixels of every target are unchanged).
        skip = SKIP_NONREF.get(tr.codec, False)
        targets = set(closure.targets)
        try:
            for i, s in enumerate(idx.tolist()):
                pkt = av.Packet(bytes(memoryview(runs[run_of[i]])[rel[i]:rel[i] + tr.size[s]]))
                pkt.pts, pkt.dts, pkt.time_base = int(tr.pts[s]), int(tr.dts[s]), time_base
                if tr.sync[s]:
                    pkt.is_keyframe = True
                if skip:
                    ctx.skip_frame = "DEFAULT" if s in targets else "NONREF"
                take(ctx.decode(pkt))
            take(ctx.decode(None))
        except av.error.FFmpegError as ex:
            raise ReaderError(f"decoding samples {closure.first}..{closure.last} of {self.uri} failed: {ex}") from None
        missing = [s for s in closure.targets if s not in out]
        if missing:
            raise ReaderError(f"decoding samples {closure.first}..{closure.last} of {self.uri} did not output the "
                              f"frame(s) of sample(s) {', '.join(map(str, missing))}")
        return out

    def custom_frame_mappings(self) -> str:
        """The file's frames as torchcodec `VideoDecoder(custom_frame_mappings=...)` JSON."""
        return self.track.custom_frame_mappings()


def _codec_context(track: TrackTables, threads: int):
    import av

    last: Optional[Exception] = None
    for name in DECODERS[track.codec]:
        try:
            ctx = av.CodecContext.create(name, "r")
        except (av.error.FFmpegError, ValueError, KeyError) as ex:  # decoder not built in
            last = ex
            continue
        ctx.extradata = track.extradata
        if threads:
            ctx.thread_count = threads
        return ctx
    raise ReaderError(f"no PyAV decoder for {track.codec} ({', '.join(DECODERS[track.codec])}): {last}")

