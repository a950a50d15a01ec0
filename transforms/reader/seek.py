"""Camera frames by episode time, decoded from only the bytes of each frame's decode closure.

A `VideoHandle` is one camera of one episode: the clip (file URI, `[start, end)` on the file's own
clock), the episode's `time_origin` and the file's `spql.MediaIndex`. Nothing here reads the MP4's
`moov`: every sample's time, size, file offset and GOP comes from the index, so a seek is one batch of
range reads of the samples it decodes, then a PyAV decode of those samples alone.

Timeline (decided, and checked against PyAV on every corpus file by tests/test_reader.py):
episode time `t` -> stream time `t - time_origin` -> ticks of the primary track's timescale. A frame
is presented at `pts / timescale` seconds, with `pts = dts + ctts - min(dts + ctts)` exactly as the
index stores it. The edit list is NOT applied on top: for files FFmpeg writes (LeRobot's), the edit
list's `media_time` is exactly that minimum composition time, so the index's pts already equals the
pts FFmpeg, PyAV and torchcodec report (first frame at 0); applying it again would shift B-frame
files by the reorder delay. A file whose edit list trims frames or starts with an empty edit is read
on the index's timeline (frame 0 at stream time 0), not FFmpeg's.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from fractions import Fraction
from typing import Optional, Protocol, Sequence

import numpy as np
import pyarrow as pa

from transforms import storage

#: Default largest distance (seconds) between a requested time and the frame returned.
DEFAULT_TOLERANCE = 1e-4
#: MediaIndex codec name -> the codec-configuration box inside its sample entry.
CONFIG_BOX = {"h264": b"avcC", "h265": b"hvcC", "av1": b"av1C"}
#: MediaIndex codec name -> PyAV decoders to try, in order (FFmpeg's native "av1" decoder needs a
#: hardware accelerator; libdav1d is also what `av.open` picks, so pixels match a container decode).
DECODERS = {"h264": ("h264",), "h265": ("hevc",), "av1": ("libdav1d", "libaom-av1", "av1")}
#: Codecs whose FFmpeg decoder honours `skip_frame = NONREF` packet by packet (libdav1d reads it
#: once, at open).
SKIP_NONREF = {"h264": True, "h265": True, "av1": False}
#: Visual sample entry: 8-byte box header + 78 bytes of fixed fields before its child boxes.
_VISUAL_ENTRY_FIXED = 8 + 78


class ReaderError(Exception):
    """Reading an import back failed: a bad request (time outside a clip, no frame near it, unknown
    episode) or an output that cannot be read (missing index, truncated file, undecodable frame)."""


# ------------------------------------------------------------------------------------------------
# Byte ranges
# ------------------------------------------------------------------------------------------------

class RangeReader(Protocol):
    """Reads byte ranges `[start, end)` of one file; one call is one batch of range requests."""

    def read_ranges(self, uri: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]: ...


@dataclasses.dataclass
class FsspecRangeReader:
    """Range reads through fsspec (`cat_ranges`: exact ranges, no read-ahead; concurrent on remote
    filesystems). Counts what reached storage so callers can check a seek's cost."""

    requests: int = 0
    bytes_read: int = 0

    def read_ranges(self, uri: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        if not len(starts):
            return []
        fs, path = storage.filesystem(uri)
        try:
            out = fs.cat_ranges([path] * len(starts), [int(s) for s in starts], [int(e) for e in ends],
                                on_error="raise")
        except FileNotFoundError:
            raise ReaderError(f"video file {uri} does not exist") from None
        except OSError as ex:
            raise ReaderError(f"cannot read video file {uri}: {ex}") from None
        for data, s, e in zip(out, starts, ends):
            if isinstance(data, BaseException):
                raise ReaderError(f"cannot read bytes {s}..{e} of {uri}: {data}")
            if len(data) != e - s:
                raise ReaderError(f"video file {uri} is truncated: bytes {s}..{e} gave {len(data)} bytes")
        self.requests += len(out)
        self.bytes_read += sum(len(d) for d in out)
        return out


# ------------------------------------------------------------------------------------------------
# The index of one track, as numpy
# ------------------------------------------------------------------------------------------------

def _storage(a):
    return a.storage if isinstance(a, pa.ExtensionArray) else a


def _list_values(list_array: pa.ListArray, row: int) -> pa.Array:
    """The values of one list entry, zero-copy."""
    start, end = list_array.offsets[row].as_py(), list_array.offsets[row + 1].as_py()
    return list_array.values.slice(start, end - start)


def codec_config(sample_entry: bytes, codec: str) -> bytes:
    """The payload of avcC/hvcC/av1C inside an `stsd` box: the decoder's extradata."""
    want = CONFIG_BOX[codec]
    if len(sample_entry) < 16 + _VISUAL_ENTRY_FIXED or sample_entry[4:8] != b"stsd":
        raise ReaderError("sample_entry is not an stsd box holding a visual sample entry")
    entry_start = 16
    entry_size = struct.unpack_from(">I", sample_entry, entry_start)[0]
    end = min(len(sample_entry), entry_start + entry_size)
    pos = entry_start + _VISUAL_ENTRY_FIXED
    while pos + 8 <= end:
        size, type_ = struct.unpack_from(">I4s", sample_entry, pos)
        header = 8
        if size == 1 and pos + 16 <= end:
            size, header = struct.unpack_from(">Q", sample_entry, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        if size < header or pos + size > end:
            break
        if type_ == want:
            return bytes(sample_entry[pos + header:pos + size])
        pos += size
    raise ReaderError(f"the {codec} sample entry has no {want.decode()} box")


@dataclasses.dataclass(frozen=True)
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
        """From a length-1 spql.MediaIndex array (or its storage); default: the primary track."""
        st = _storage(index)
        if len(st) != 1 or not st.is_valid()[0].as_py():
            raise ReaderError("expected one non-null MediaIndex")
        primary = st.field("primary_track_id")[0].as_py() if track_id is None else track_id
        tracks = st.field("tracks")
        tr = _list_values(tracks, 0)
        ids = tr.field("track_id").to_numpy(zero_copy_only=False)
        hits = np.flatnonzero(ids == primary)
        if not len(hits):
            raise ReaderError(f"the MediaIndex has no track {primary} (tracks {ids.tolist()})")
        k = int(hits[0])

        def col(name: str) -> pa.Array:
            return _list_values(tr.field(name), k)

        def scalar(name: str):
            return tr.field(name)[k].as_py()

        codec = scalar("codec")
        if codec not in CONFIG_BOX:
            raise ReaderError(f"track {primary} has codec {codec!r}, not one of {sorted(CONFIG_BOX)}")
        sizes = col("sizes").to_numpy(zero_copy_only=False).astype(np.int64)
        n = len(sizes)
        runs = col("dts_runs")
        deltas = np.repeat(runs.field("delta").to_numpy(zero_copy_only=False).astype(np.int64),
                           runs.field("count").to_numpy(zero_copy_only=False).astype(np.int64))
        if len(deltas) != n:
            raise ReaderError(f"track {primary}: dts_runs cover {len(deltas)} samples, sizes {n}")
        dts = np.zeros(n, np.int64)
        if n > 1:
            np.cumsum(deltas[:-1], out=dts[1:])
        ctts_arr = tr.field("ctts")
        if ctts_arr.is_valid()[k].as_py():
            cts = dts + col("ctts").to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            cts = dts.copy()
        pts = cts - (cts.min() if n else 0)
        chunks = col("chunks")
        first = chunks.field("first_sample").to_numpy(zero_copy_only=False).astype(np.int64)
        chunk_off = chunks.field("offset").to_numpy(zero_copy_only=False).astype(np.int64)
        if n and (not len(first) or first[0] != 0):
            raise ReaderError(f"track {primary}: chunks do not start at sample 0")
        csum = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=csum[1:])
        chunk_of = np.searchsorted(first, np.arange(n), side="right") - 1
        offset = chunk_off[chunk_of] + csum[:-1] - csum[first[chunk_of]]
        flags = col("flags").to_numpy(zero_copy_only=False)
        gops = col("gops")
        gop_start = gops.field("decode_start").to_numpy(zero_copy_only=False).astype(np.int64)
        # The reference drops samples before the first sync sample from the per-sample lists but
        # keeps the GOPs' original numbering (mapping §5, "Oddity"): renumber from the first GOP.
        if len(gop_start):
            gop_start = gop_start - gop_start[0]
        else:
            gop_start = np.zeros(1, np.int64)
        order = np.argsort(pts, kind="stable")
        sample_entry = scalar("sample_entry")
        return cls(track_id=int(primary), codec=codec, timescale=int(scalar("timescale")),
                   width=scalar("width"), height=scalar("height"),
                   extradata=codec_config(sample_entry, codec), dts=dts, pts=pts, duration=deltas,
                   offset=offset, size=sizes, sync=(flags & 1).astype(bool), gop_start=gop_start,
                   order=order, sorted_pts=pts[order])

    def closure_start(self, sample: int) -> int:
        """First decode index needed to decode `sample`: its GOP's first sample, or the previous
        GOP's when `sample` is a leading picture (presented before its GOP's sync sample: open-GOP
        RASL/B frames reference the previous GOP)."""
        g = int(np.searchsorted(self.gop_start, sample, side="right")) - 1
        g = max(g, 0)
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
    """One camera of one episode: frames by episode time (seconds on the episode's `timestamp`)."""

    uri: str
    clip_start_ns: int
    clip_end_ns: int
    time_origin_ns: int
    track: TrackTables
    reader: RangeReader = dataclasses.field(default_factory=FsspecRangeReader)
    tolerance: float = DEFAULT_TOLERANCE
    threads: int = 1

    # -- time mapping --------------------------------------------------------------------------

    def _stream_ns(self, times: Sequence[float]) -> np.ndarray:
        t = np.asarray(times, np.float64).reshape(-1)
        if not np.all(np.isfinite(t)):
            raise ReaderError(f"episode times must be finite, got {t[~np.isfinite(t)][:3].tolist()}")
        return np.rint(t * 1e9).astype(np.int64) - self.time_origin_ns

    def locate(self, times: Sequence[float]) -> np.ndarray:
        """Presentation index (frame number in the file) of the frame nearest each episode time.

        Raises ReaderError for a time outside the clip or farther than `tolerance` from every frame."""
        t = np.asarray(times, np.float64).reshape(-1)
        s_ns = self._stream_ns(t)
        outside = (s_ns < self.clip_start_ns) | (s_ns >= self.clip_end_ns)
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            lo_t = (self.clip_start_ns + self.time_origin_ns) / 1e9
            hi_t = (self.clip_end_ns + self.time_origin_ns) / 1e9
            raise ReaderError(f"episode time {t[i]!r} s is outside the clip of {self.uri}: the clip covers "
                              f"episode times [{lo_t:.9g}, {hi_t:.9g}) s (stream [{self.clip_start_ns / 1e9:.9g}, "
                              f"{self.clip_end_ns / 1e9:.9g}) s)")
        ts = self.track.timescale
        sp = self.track.sorted_pts
        if not len(sp):
            raise ReaderError(f"{self.uri} has no frames")
        target = s_ns / 1e9 * ts  # ticks, float64
        k = np.searchsorted(sp, target, side="left")
        lo = np.clip(k - 1, 0, len(sp) - 1)
        hi = np.clip(k, 0, len(sp) - 1)
        pick = np.where(np.abs(sp[hi] - target) < np.abs(target - sp[lo]), hi, lo).astype(np.int64)
        dist = np.abs(sp[pick] / ts - s_ns / 1e9)
        bad = dist > self.tolerance
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            nearest_t = (sp[pick[i]] / ts) + self.time_origin_ns / 1e9
            raise ReaderError(f"no frame of {self.uri} within {self.tolerance:g} s of episode time {t[i]!r} s: "
                              f"the nearest frame (frame {int(pick[i])} of the file, at episode time "
                              f"{nearest_t:.9g} s) is {dist[i]:.6g} s away")
        return pick

    def timestamps(self) -> np.ndarray:
        """Episode time (float64 seconds) of every frame presented in the clip, in order. A frame
        belongs to the clip when its time lies in [start - tolerance, end - tolerance): the stored
        clip bounds drift by a few ns from the frames, and each boundary frame goes to one clip."""
        sp_s = self.track.sorted_pts / self.track.timescale
        start_s, end_s = self.clip_start_ns / 1e9, self.clip_end_ns / 1e9
        keep = (sp_s >= start_s - self.tolerance) & (sp_s < end_s - self.tolerance)
        return sp_s[keep] + self.time_origin_ns / 1e9

    def frame_numbers(self) -> np.ndarray:
        """Presentation index in the file of every frame `timestamps()` lists."""
        sp_s = self.track.sorted_pts / self.track.timescale
        start_s, end_s = self.clip_start_ns / 1e9, self.clip_end_ns / 1e9
        return np.flatnonzero((sp_s >= start_s - self.tolerance) & (sp_s < end_s - self.tolerance))

    # -- decoding -------------------------------------------------------------------------------

    def plan(self, times: Sequence[float]) -> list[Closure]:
        """The decodes `frames_at(times)` runs: one per closure start, covering every target in it."""
        samples = self.track.order[self.locate(times)]
        groups: dict[int, set[int]] = {}
        for s in samples.tolist():
            groups.setdefault(self.track.closure_start(s), set()).add(s)
        return [Closure(first, max(targets), tuple(sorted(targets))) for first, targets in sorted(groups.items())]

    def frame_at(self, t: float) -> np.ndarray:
        """The frame presented nearest episode time `t`: RGB uint8, H×W×3."""
        return self.frames_at([t])[0]

    def frames_at(self, times: Sequence[float]) -> np.ndarray:
        """Frames nearest each episode time, N×H×W×3 RGB uint8 (each closure decoded once)."""
        samples = self.track.order[self.locate(times)]
        decoded: dict[int, np.ndarray] = {}
        for closure in self.plan(times):
            decoded.update(self._decode(closure))
        return np.stack([decoded[s] for s in samples.tolist()]) if len(samples) else np.zeros((0, 0, 0, 3), np.uint8)

    def _decode(self, closure: Closure) -> dict[int, np.ndarray]:
        import av

        tr = self.track
        starts, ends = closure.byte_ranges(tr)
        runs = self.reader.read_ranges(self.uri, starts.tolist(), ends.tolist())
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
                buf = memoryview(runs[run_of[i]])[rel[i]:rel[i] + tr.size[s]]
                pkt = av.Packet(bytes(buf))
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
                              f"frame(s) of sample(s) {missing}")
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
