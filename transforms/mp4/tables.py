"""An MP4's `moov` box -> its MediaIndex as typed per-track tables (numpy), exactly as the reference builds it.

Every box is bounds-checked against its parent and every count read from a box is checked against the
box's size before anything is allocated; the one count a box does not bound (a constant-size `stsz`
declares its sample count in 4 bytes) is bounded by the file's size and by `Limits.max_samples`,
summed over the file's indexed tracks, before any per-sample table exists. Arbitrary bytes therefore
raise `LeRobotImportError` (mp4_structure, mp4_track, mp4_limits) and nothing else. The per-sample
tables are expanded with numpy (no per-sample Python loops): a 1M-sample moov parses in tens of ms.

A track's tables, as the reference writes them:
* `sizes`, `ctts`, `flags`: one value per sample in decode order, from the first sync sample on;
* `dts_runs`: run-length sample durations (the last sample lasts to the end of the media);
* `chunks`: the first sample and file offset of each byte-contiguous run of samples;
* `gops`: one per sync sample, numbered in the track's original sample numbering;
* pts are `dts + ctts` shifted so the earliest frame is at 0; the edit list is kept verbatim and
  shifts nothing.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Optional

import numpy as np

from transforms.base.errors import LeRobotImportError
from transforms.mp4.boxes import Box, BoxWalk, fourcc, full_box, parse_box_header
from transforms.mp4.limits import DEFAULT_LIMITS, Limits, limit_error

__all__ = ["CODECS", "NO_TRACK_MESSAGE", "Chunks", "DtsRuns", "EditList", "Gops", "MediaIndex", "MediaTrack",
           "codec_name", "parse_media_index"]

#: Sample-entry type -> codec name. avc3 (parameter sets in-band) is not accepted, like the reference.
CODECS: dict[bytes, str] = {b"avc1": "h264", b"hvc1": "h265", b"hev1": "h265", b"av01": "av1"}
NO_TRACK_MESSAGE = "no supported H.264, H.265 or AV1 video track"
#: What other sample-entry types hold, to name what a file has instead of a supported track.
OTHER_CODECS: dict[bytes, str] = {
    b"mp4v": "MPEG-4 Part 2", b"avc3": "H.264 with in-band parameter sets", b"avc2": "H.264 (avc2)",
    b"avc4": "H.264 (avc4)", b"vp08": "VP8", b"vp09": "VP9", b"s263": "H.263", b"h263": "H.263",
    b"jpeg": "Motion JPEG", b"mjpa": "Motion JPEG", b"mjpb": "Motion JPEG", b"mjp2": "Motion JPEG 2000",
    b"apcn": "Apple ProRes", b"apch": "Apple ProRes", b"apcs": "Apple ProRes", b"apco": "Apple ProRes",
    b"ap4h": "Apple ProRes 4444", b"dvh1": "Dolby Vision HEVC", b"dvhe": "Dolby Vision HEVC",
    b"dvav": "Dolby Vision H.264", b"dva1": "Dolby Vision H.264", b"encv": "encrypted video",
    b"vvc1": "H.266/VVC", b"vvi1": "H.266/VVC", b"mp4a": "audio (AAC or MPEG audio)", b"Opus": "Opus audio",
    b"fLaC": "FLAC audio", b"ac-3": "AC-3 audio", b"ec-3": "E-AC-3 audio", b"tx3g": "timed text",
    b"wvtt": "WebVTT text", b"stpp": "TTML text", b"text": "text", b"tmcd": "timecode",
}
#: The reference fails on `stz2` (compact sample sizes) with "stsz not found"; so do we, unless this
#: is set (the parser handles 4-, 8- and 16-bit entries).
ACCEPT_STZ2 = False
#: Flags when sample data is not read: sync+referenced+intra, or referenced only.
FLAG_SYNC, FLAG_OTHER = 7, 2

_I32_MAX = (1 << 31) - 1
_U32_MAX = (1 << 32) - 1
_I64_MAX = (1 << 63) - 1

_U32 = np.dtype(">u4")
_PAIR_U32 = np.dtype([("count", ">u4"), ("value", ">u4")])
_PAIR_I32 = np.dtype([("count", ">u4"), ("value", ">i4")])
_STSC = np.dtype([("first_chunk", ">u4"), ("per_chunk", ">u4"), ("desc", ">u4")])
_ELST0 = np.dtype([("duration", ">u4"), ("media_time", ">i4"), ("rate", ">i4")])
_ELST1 = np.dtype([("duration", ">i8"), ("media_time", ">i8"), ("rate", ">i4")])


def codec_name(entry_type: bytes) -> str:
    """A sample-entry type as a person reads it: `mp4v (MPEG-4 Part 2)`, `av01 (av1)`."""
    name = CODECS.get(entry_type) or OTHER_CODECS.get(entry_type)
    code = fourcc(entry_type).strip("`")
    return f"{code} ({name})" if name else code


# ------------------------------------------------------------------------------------------------
# The typed tables
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class DtsRuns:
    """Sample durations, run-length encoded: `count` samples of `delta` ticks each (u32, u32)."""

    count: np.ndarray
    delta: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class EditList:
    """The `elst` entries verbatim (i64, i64, i32 16.16)."""

    duration: np.ndarray
    media_time: np.ndarray
    rate: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Chunks:
    """Byte-contiguous runs of samples: first sample (u32) and file offset (u64) of each."""

    first_sample: np.ndarray
    offset: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Gops:
    """One entry per sync sample: decode index, presentation rank and pts of its earliest frame, its
    bytes in the file and its sample count."""

    decode_start: np.ndarray
    frame_start: np.ndarray
    pts_start: np.ndarray
    byte_offset: np.ndarray
    byte_length: np.ndarray
    sample_count: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class MediaTrack:
    """One indexed video track (the fields of `spql.MediaTrack`, plus its sample-entry type)."""

    track_id: int
    kind: str
    codec: str
    language: str
    width: int
    height: int
    timescale: int
    movie_timescale: int
    duration_ticks: int
    sample_entry: bytes
    dts_runs: DtsRuns
    edit_list: Optional[EditList]
    chunks: Chunks
    gops: Gops
    sizes: np.ndarray
    ctts: Optional[np.ndarray]
    flags: np.ndarray
    #: The sample entry's four-character code as found in the file (`avc1`, `hev1`, `av01` ...).
    entry_type: str = ""


@dataclasses.dataclass(frozen=True, eq=False)
class MediaIndex:
    """A file's MediaIndex: the primary track (highest track_ID) first, then the others by ID."""

    primary_track_id: int
    tracks: tuple[MediaTrack, ...]

    @property
    def primary(self) -> MediaTrack:
        return self.tracks[0]


# ------------------------------------------------------------------------------------------------
# Reading tables out of boxes
# ------------------------------------------------------------------------------------------------

def _error(file: str, message: str) -> LeRobotImportError:
    return LeRobotImportError("mp4_structure", message, file=file)


def _table(buf: bytes, box: Box, pos: int, count: int, dtype: np.dtype, file: str, what: str) -> np.ndarray:
    """`count` entries of `dtype` at `pos`, after checking that the box holds them."""
    need = count * dtype.itemsize
    if need > box.end - pos:
        raise _error(file, f"{fourcc(box.type)} box declares {count:,} {what} ({need:,} bytes) but holds "
                           f"only {max(0, box.end - pos):,} bytes")
    return np.frombuffer(buf, dtype=dtype, count=count, offset=pos)


def _counted_table(buf: bytes, box: Box, dtype: np.dtype, file: str, what: str = "entries") -> np.ndarray:
    """A FullBox holding `entry_count u32` then that many entries."""
    _, pos = full_box(buf, box, 4, file)
    (count,) = struct.unpack_from(">I", buf, pos)
    return _table(buf, box, pos + 4, count, dtype, file, what)


def _exclusive_cumsum(a: np.ndarray, n_out: int) -> np.ndarray:
    """int64 running sum starting at 0, `n_out` values (len(a) or len(a)+1)."""
    out = np.zeros(n_out, dtype=np.int64)
    if n_out > 1:
        np.cumsum(a[:n_out - 1], dtype=np.int64, out=out[1:])
    return out


def _expand_runs(counts: np.ndarray, values: np.ndarray, n: int, need: int, name: str, file: str) -> np.ndarray:
    """Run-length table -> one value per sample for the first `n` samples.

    Like the reference, entries past the samples are ignored; the runs must cover at least `need`
    samples (stts: all but the last sample, whose duration comes from mdhd; ctts: all)."""
    total = int(counts.sum(dtype=np.uint64)) if len(counts) else 0
    if total < need or (n and not len(counts)):
        raise _error(file, f"`{name}` covers {total} samples but the track has {n}")
    clipped = np.minimum(np.cumsum(counts, dtype=np.int64), n)
    out = np.repeat(values, np.diff(clipped, prepend=0))
    if len(out) < n:  # stts one short: the last sample's delta is never used (mdhd gives it)
        out = np.append(out, np.zeros(n - len(out), dtype=out.dtype))
    return out


def _rle(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts, values) of runs of equal neighbours."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.uint32), values[:0]
    starts = np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))
    counts = np.diff(np.append(starts, len(values)))
    return counts.astype(np.uint32), values[starts]


# ------------------------------------------------------------------------------------------------
# Tracks: which ones, and their header fields
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _TrackBoxes:
    """The boxes of one accepted video track."""

    track_id: int
    codec: str
    entry_type: bytes
    trak: Box
    tkhd: Box
    mdhd: Box
    stbl: Box
    stsd: Box


def _first_entry_type(walk: BoxWalk, stsd: Optional[Box]) -> Optional[bytes]:
    """The type of the first sample entry of `stsd`; None when it has none."""
    if stsd is None:
        return None
    buf, file = walk.buf, walk.file
    _, pos = full_box(buf, stsd, 4, file, versions=tuple(range(256)))
    (entries,) = struct.unpack_from(">I", buf, pos)
    if entries == 0 or pos + 4 >= stsd.end:
        return None
    return parse_box_header(buf, pos + 4, stsd.end, file=file, where="sample entry").type


def _accepted_track(walk: BoxWalk, trak: Box) -> tuple[Optional[_TrackBoxes], Optional[bytes]]:
    """(the track's boxes if its first sample entry is avc1/hvc1/hev1/av01, the entry's type). Like the
    reference, the sample entry alone decides (the `hdlr` type is not looked at)."""
    buf, file = walk.buf, walk.file
    mdia = walk.child(trak, b"mdia")
    stbl = walk.path(mdia, b"minf", b"stbl")
    stsd = walk.child(stbl, b"stsd")
    entry_type = _first_entry_type(walk, stsd)
    codec = CODECS.get(entry_type) if entry_type else None
    if codec is None:
        return None, entry_type
    tkhd = walk.child(trak, b"tkhd")
    mdhd = walk.child(mdia, b"mdhd")
    for name, box in ((b"tkhd", tkhd), (b"mdhd", mdhd)):
        if box is None:
            raise _error(file, f"a {codec} video track has no `{name.decode()}` box")
    version, pos = full_box(buf, tkhd, 20, file)
    track_id = struct.unpack_from(">I", buf, pos + (16 if version == 1 else 8))[0]
    return _TrackBoxes(track_id, codec, entry_type, trak, tkhd, mdhd, stbl, stsd), entry_type


def _no_track_error(file: str, found: list[Optional[bytes]], declared: Optional[str]) -> LeRobotImportError:
    """mp4_track, naming the sample entries the file holds instead (and what info.json declared)."""
    names = [codec_name(t) for t in found if t is not None]
    if names:
        what = "found " + ", ".join(dict.fromkeys(names))
    else:
        what = f"found {len(found)} track(s) without a sample description" if found else "the file has no tracks"
    said = f", where info.json declares {declared}" if declared else ""
    return LeRobotImportError("mp4_track", f"{NO_TRACK_MESSAGE}: {what}{said}. Re-encode the video as H.264, "
                                           "H.265 or AV1 (LeRobot encodes AV1) to import it", file=file)


def _tkhd_size(buf: bytes, tkhd: Box, file: str) -> tuple[int, int]:
    """tkhd width and height, integer part of 16.16."""
    version = buf[tkhd.payload] if tkhd.end - tkhd.payload >= 4 else 0
    version, pos = full_box(buf, tkhd, 92 if version == 1 else 80, file)
    w, h = struct.unpack_from(">II", buf, pos + (84 if version == 1 else 72))
    return w >> 16, h >> 16


def _mdhd(buf: bytes, mdhd: Box, file: str, track: str) -> tuple[int, int, str]:
    """(timescale, duration as i64, language) from mdhd; a timescale of 0 is an error."""
    version = buf[mdhd.payload] if mdhd.end - mdhd.payload >= 4 else 0
    version, pos = full_box(buf, mdhd, 32 if version == 1 else 20, file)
    if version == 1:
        timescale, duration, lang = struct.unpack_from(">IqH", buf, pos + 16)
    else:
        timescale, duration, lang = struct.unpack_from(">IIH", buf, pos + 8)
    if timescale == 0:
        raise _error(file, f"the `mdhd` box of {track} has timescale 0: its sample times (in ticks of "
                           "1/timescale s) cannot be turned into seconds")
    language = "".join(chr(((lang >> s) & 31) + 0x60) for s in (10, 5, 0))
    return timescale, duration, language


def _movie_timescale(walk: BoxWalk, moov: Box) -> int:
    buf, file = walk.buf, walk.file
    mvhd = walk.child(moov, b"mvhd")
    if mvhd is None:
        raise _error(file, "moov has no `mvhd` box")
    version = buf[mvhd.payload] if mvhd.end - mvhd.payload >= 4 else 0
    version, pos = full_box(buf, mvhd, 20 if version == 1 else 12, file)
    timescale = struct.unpack_from(">I", buf, pos + (16 if version == 1 else 8))[0]
    if timescale == 0:
        raise _error(file, "the `mvhd` box has timescale 0: the movie's durations cannot be turned into seconds")
    return timescale


def _edit_list(walk: BoxWalk, trak: Box) -> Optional[EditList]:
    """elst entries verbatim; None without an `edts` box."""
    buf, file = walk.buf, walk.file
    edts = walk.child(trak, b"edts")
    if edts is None:
        return None
    elst = walk.child(edts, b"elst")
    if elst is None:
        raise _error(file, "an `edts` box has no `elst` box")  # the reference fails here too
    version, _ = full_box(buf, elst, 4, file)
    entries = _counted_table(buf, elst, _ELST1 if version == 1 else _ELST0, file, "edits")
    return EditList(entries["duration"].astype(np.int64), entries["media_time"].astype(np.int64),
                    entries["rate"].astype(np.int32))


# ------------------------------------------------------------------------------------------------
# Per-sample tables
# ------------------------------------------------------------------------------------------------

def _declared_samples(walk: BoxWalk, stbl: Box) -> int:
    """The samples `stsz` (or `stz2`) would give, before anything is expanded: a constant size's count
    as declared, a table's count as far as the box holds entries (a count larger than its box is a
    structure error, which the full parse reports); 0 when unreadable."""
    box = walk.child(stbl, b"stsz") or walk.child(stbl, b"stz2")
    if box is None or box.end - box.payload < 12:
        return 0
    constant, count = struct.unpack_from(">II", walk.buf, box.payload + 4)
    room = box.end - (box.payload + 12)
    if box.type == b"stz2":
        return min(count, 2 * room)  # 4-bit entries at the densest
    return count if constant else min(count, room // 4)


def _check_sample_budget(walk: BoxWalk, tracks: list[_TrackBoxes], limits: Limits) -> None:
    """All indexed tracks together may not declare more than `limits.max_samples` samples."""
    counts = [(t.track_id, _declared_samples(walk, t.stbl)) for t in tracks]
    total = sum(c for _, c in counts)
    if total > limits.max_samples:
        each = ", ".join(f"track {i}: {c:,}" for i, c in counts)
        raise limit_error(walk.file, f"the video tracks declare {total:,} samples ({each}), more than one file may "
                                       "hold", "max_samples", limits)


def _sample_sizes(walk: BoxWalk, stbl: Box, track: str, file_size: Optional[int]) -> np.ndarray:
    """Per-sample sizes (u32) from stsz (constant size expanded) or stz2 (4/8/16-bit entries)."""
    buf, file = walk.buf, walk.file
    stsz = walk.child(stbl, b"stsz")
    if stsz is not None:
        _, pos = full_box(buf, stsz, 8, file)
        constant, count = struct.unpack_from(">II", buf, pos)
        if constant and file_size is not None and constant * count > file_size:
            # A constant size is the one count not bounded by its box: bound it by the file, before
            # anything per-sample is allocated.
            raise _error(file, f"{track} declares {count} samples of {constant} bytes, more than the file's "
                               f"{file_size} bytes")
        if constant:
            return np.full(count, constant, dtype=np.uint32)
        return _table(buf, stsz, pos + 8, count, _U32, file, "samples").astype(np.uint32)
    stz2 = walk.child(stbl, b"stz2")
    if stz2 is None or not ACCEPT_STZ2:
        raise _error(file, f"{track} has no `stsz` box" + (" (compact `stz2` sample sizes are not read: the "
                                                           "reference rejects them)" if stz2 is not None else ""))
    return _compact_sizes(buf, stz2, file)


def _compact_sizes(buf: bytes, stz2: Box, file: str) -> np.ndarray:
    _, pos = full_box(buf, stz2, 8, file)
    field_size = buf[pos + 3]
    (count,) = struct.unpack_from(">I", buf, pos + 4)
    if field_size == 16:
        return _table(buf, stz2, pos + 8, count, np.dtype(">u2"), file, "samples").astype(np.uint32)
    if field_size == 8:
        return _table(buf, stz2, pos + 8, count, np.dtype("u1"), file, "samples").astype(np.uint32)
    if field_size == 4:
        packed = _table(buf, stz2, pos + 8, (count + 1) // 2, np.dtype("u1"), file, "pairs of samples")
        nibbles = np.empty(2 * len(packed), dtype=np.uint32)
        nibbles[0::2] = packed >> 4
        nibbles[1::2] = packed & 15
        return nibbles[:count]
    raise _error(file, f"`stz2` has field size {field_size}; only 4, 8 and 16 are defined")


@dataclasses.dataclass(frozen=True, eq=False)
class _Timing:
    """Per-sample times in decode order: stts deltas, dts, pts (earliest at 0), shifted ctts or None."""

    deltas: np.ndarray
    dts: np.ndarray
    pts: np.ndarray
    ctts: Optional[np.ndarray]


def _timing(walk: BoxWalk, stbl: Box, n: int, track: str) -> _Timing:
    buf, file = walk.buf, walk.file
    stts_box = walk.child(stbl, b"stts")
    if stts_box is None:
        raise _error(file, f"{track} has no `stts` box")
    stts = _counted_table(buf, stts_box, _PAIR_U32, file)
    deltas = _expand_runs(stts["count"], stts["value"].astype(np.uint32), n, max(n - 1, 0), "stts", file)
    dts = _exclusive_cumsum(deltas, n)
    ctts_box = walk.child(stbl, b"ctts")
    if ctts_box is None:
        return _Timing(deltas, dts, dts - dts.min(), None)
    # Offsets are signed whatever the box version (v0 boxes with negative values exist).
    table = _counted_table(buf, ctts_box, _PAIR_I32, file)
    offsets = _expand_runs(table["count"], table["value"].astype(np.int64), n, n, "ctts", file)
    pts = dts + offsets
    shifted = offsets + max(0, -int(offsets.min()))
    if int(shifted.max()) > _I32_MAX:
        raise _error(file, f"`ctts` offsets of {track} span more than 32 bits")
    return _Timing(deltas, dts, pts - pts.min(), shifted.astype(np.int32))


def _sync_samples(walk: BoxWalk, stbl: Box, n: int, track_id: int) -> np.ndarray:
    """Decode indices of the sync samples (every sample without `stss`)."""
    stss_box = walk.child(stbl, b"stss")
    if stss_box is None:
        return np.arange(n, dtype=np.int64)
    numbers = _counted_table(walk.buf, stss_box, _U32, walk.file, "sync samples").astype(np.int64)
    # The reference walks stss with one pointer while counting samples up: it keeps the longest
    # prefix of strictly increasing sample numbers within 1..n and ignores everything after.
    bad = np.flatnonzero((numbers < 1) | (numbers > n) | np.append(False, np.diff(numbers) <= 0))
    sync = numbers[:int(bad[0]) if len(bad) else len(numbers)] - 1
    if len(sync) == 0:
        raise _error(walk.file, f"video track {track_id} contains no sync samples")
    return sync


def _chunk_offsets(walk: BoxWalk, stbl: Box, track: str) -> np.ndarray:
    buf, file = walk.buf, walk.file
    stco = walk.child(stbl, b"stco")
    if stco is not None:
        return _counted_table(buf, stco, _U32, file, "chunk offsets").astype(np.int64)
    co64 = walk.child(stbl, b"co64")
    if co64 is None:
        raise _error(file, f"{track} has neither `stco` nor `co64`")
    raw = _counted_table(buf, co64, np.dtype(">u8"), file, "chunk offsets")
    if len(raw) and int(raw.max()) > _I64_MAX:
        raise _error(file, f"`co64` of {track} has a chunk offset beyond 2**63")
    return raw.astype(np.int64)


def _samples_per_chunk(walk: BoxWalk, stbl: Box, nchunks: int, n: int, track: str) -> np.ndarray:
    """Samples in each chunk that holds any of the `n` samples (chunks past the last are dropped)."""
    file = walk.file
    stsc_box = walk.child(stbl, b"stsc")
    if stsc_box is None:
        raise _error(file, f"{track} has no `stsc` box")
    stsc = _counted_table(walk.buf, stsc_box, _STSC, file)
    if len(stsc) == 0:
        raise _error(file, f"`stsc` of {track} is empty but the track has {n} samples")
    # As in the reference, the first entry applies from chunk 1 whatever its first_chunk says, each
    # later entry from its first_chunk on; chunks and stsc runs past the last sample are ignored.
    first = stsc["first_chunk"][1:].astype(np.int64)
    if len(first) and (first[0] < 2 or np.any(np.diff(first) <= 0)):
        raise _error(file, f"`stsc` of {track} has first_chunk values that do not increase")
    per_chunk = stsc["per_chunk"].astype(np.int64)
    chunk_samples = per_chunk[np.searchsorted(first, np.arange(1, nchunks + 1, dtype=np.int64), side="right")]
    placed = np.cumsum(chunk_samples)
    if nchunks == 0 or int(placed[-1]) < n:
        raise _error(file, f"`stsc` and the {nchunks} chunk offsets of {track} place "
                           f"{int(placed[-1]) if nchunks else 0} samples but `stsz` has {n}")
    used = int(np.searchsorted(placed, n, side="left")) + 1
    chunk_samples = chunk_samples[:used].copy()
    if np.any(chunk_samples == 0):
        raise _error(file, f"`stsc` of {track} gives a chunk no samples")
    chunk_samples[-1] -= int(placed[used - 1]) - n
    return chunk_samples


def _sample_offsets(walk: BoxWalk, stbl: Box, sizes: np.ndarray, track: str) -> np.ndarray:
    """Absolute byte offset (int64) of every sample, from stsc + stco/co64 + sizes."""
    n = len(sizes)
    chunk_offsets = _chunk_offsets(walk, stbl, track)
    chunk_samples = _samples_per_chunk(walk, stbl, len(chunk_offsets), n, track)
    nchunks = len(chunk_samples)
    chunk_offsets = chunk_offsets[:nchunks]
    chunk_first = _exclusive_cumsum(chunk_samples, nchunks)
    size_sum = _exclusive_cumsum(sizes, n + 1)
    if nchunks and int(chunk_offsets.max()) > _I64_MAX - int(size_sum[-1]):
        raise _error(walk.file, f"chunk offsets of {track} overflow 64 bits")
    base = chunk_offsets - size_sum[chunk_first]
    return np.repeat(base, chunk_samples) + size_sum[:n]


def _gops(pts: np.ndarray, offsets: np.ndarray, ends: np.ndarray, sync: np.ndarray) -> Gops:
    """One GOP per sync sample, in the track's original numbering. pts_start is the earliest pts of the
    GOP's samples (leading frames included), frame_start that frame's presentation rank."""
    n = len(pts)
    rank = np.arange(n, dtype=np.int64)
    if np.any(pts[1:] < pts[:-1]):
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(pts, kind="stable")] = np.arange(n, dtype=np.int64)
    offset = np.minimum.reduceat(offsets, sync)
    return Gops(decode_start=sync.astype(np.uint32),
                frame_start=np.minimum.reduceat(rank, sync).astype(np.uint32),
                pts_start=np.minimum.reduceat(pts, sync).astype(np.int64),
                byte_offset=offset.astype(np.uint64),
                byte_length=(np.maximum.reduceat(ends, sync) - offset).astype(np.uint64),
                sample_count=np.diff(np.append(sync, n)).astype(np.uint32))


def _durations(timing: _Timing, kept: slice, duration: int, file: str, track: str) -> DtsRuns:
    """Run-length durations of the kept samples; the last lasts to the end of the media (mdhd duration)."""
    durations = timing.deltas[kept].astype(np.int64)
    durations[-1] = max(0, duration - int(timing.dts[-1]))
    if durations[-1] > _U32_MAX:
        raise _error(file, f"mdhd duration of {track} leaves a last sample longer than 32 bits of ticks")
    counts, deltas = _rle(durations)
    return DtsRuns(counts, deltas.astype(np.uint32))


def _chunks(offsets: np.ndarray, ends: np.ndarray) -> Chunks:
    """A new chunk wherever a sample does not start where the previous one ended."""
    new_chunk = np.ones(len(offsets), dtype=bool)
    new_chunk[1:] = offsets[1:] != ends[:-1]
    first = np.flatnonzero(new_chunk)
    return Chunks(first.astype(np.uint32), offsets[first].astype(np.uint64))


def _track(walk: BoxWalk, boxes: _TrackBoxes, movie_timescale: int, file_size: Optional[int]) -> MediaTrack:
    """One MediaTrack, every table vectorised."""
    buf, file = walk.buf, walk.file
    track = f"track {boxes.track_id}"
    width, height = _tkhd_size(buf, boxes.tkhd, file)
    timescale, duration, language = _mdhd(buf, boxes.mdhd, file, track)
    sizes = _sample_sizes(walk, boxes.stbl, track, file_size)
    if len(sizes) == 0:
        raise _error(file, f"video track {boxes.track_id} contains no samples")
    timing = _timing(walk, boxes.stbl, len(sizes), track)
    sync = _sync_samples(walk, boxes.stbl, len(sizes), boxes.track_id)
    flags = np.full(len(sizes), FLAG_OTHER, dtype=np.uint8)
    flags[sync] = FLAG_SYNC
    offsets = _sample_offsets(walk, boxes.stbl, sizes, track)
    ends = offsets + sizes
    gops = _gops(timing.pts, offsets, ends, sync)
    # The reference drops the samples before the first sync sample from every per-sample list (but
    # not from gops): copy that.
    kept = slice(int(sync[0]), len(sizes))
    return MediaTrack(
        track_id=boxes.track_id, kind="video", codec=boxes.codec, language=language, width=width, height=height,
        timescale=timescale, movie_timescale=movie_timescale, duration_ticks=duration,
        sample_entry=bytes(buf[boxes.stsd.start:boxes.stsd.end]),
        dts_runs=_durations(timing, kept, duration, file, track), edit_list=_edit_list(walk, boxes.trak),
        chunks=_chunks(offsets[kept], ends[kept]), gops=gops, sizes=sizes[kept].astype(np.uint32),
        ctts=None if timing.ctts is None else timing.ctts[kept], flags=flags[kept],
        entry_type=boxes.entry_type.decode("latin-1"))


# ------------------------------------------------------------------------------------------------
# The whole moov
# ------------------------------------------------------------------------------------------------

def parse_media_index(moov: bytes, *, file: str, file_size: Optional[int] = None, declared: Optional[str] = None,
                      limits: Limits = DEFAULT_LIMITS) -> MediaIndex:
    """The MediaIndex of the file whose whole `moov` box (header included) is `moov`.

    Args:
        moov: the moov box's bytes.
        file: names the file in errors.
        file_size: the file's size, which bounds what a constant-size `stsz` may declare.
        declared: the codec info.json declares for the file, named when no track is supported.
        limits: the bounds of the read.
    Returns:
        The MediaIndex, its primary track (highest track_ID) first.
    Raises:
        LeRobotImportError: mp4_structure for malformed or fragmented moov, mp4_track when no track is
        H.264 (avc1), H.265 (hvc1/hev1) or AV1 (av01) video, mp4_limits past a bound of `limits`.
    """
    try:
        return _parse(moov, file, file_size, declared, limits)
    except LeRobotImportError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, TypeError, MemoryError) as ex:
        # Safety net: every check above is meant to make this unreachable; the fuzz test asserts it.
        raise _error(file, f"malformed moov (internal: {type(ex).__name__}: {ex})") from None


def _parse(moov: bytes, file: str, file_size: Optional[int], declared: Optional[str], limits: Limits) -> MediaIndex:
    walk = BoxWalk(moov, file=file, limits=limits)
    root = walk.root()
    if root.type != b"moov":
        raise _error(file, f"expected a `moov` box, found {fourcc(root.type)}")
    children = walk.children(root)
    if any(c.type == b"mvex" for c in children):
        raise _error(file, "fragmented MP4 is not supported (moov has an `mvex` box; samples are in moof fragments)")
    movie_timescale = _movie_timescale(walk, root)
    found = [_accepted_track(walk, c) for c in children if c.type == b"trak"]
    by_id = _tracks_by_id([t for t, _ in found if t is not None], file)
    if not by_id:
        raise _no_track_error(file, [entry for _, entry in found], declared)
    _check_sample_budget(walk, list(by_id.values()), limits)
    # The reference keys tracks by track_ID, lists the highest ID first (the primary track) and then
    # the others in ascending ID order.
    ids = sorted(by_id)
    order = [ids[-1]] + ids[:-1]
    return MediaIndex(ids[-1], tuple(_track(walk, by_id[i], movie_timescale, file_size) for i in order))


def _tracks_by_id(accepted: list[_TrackBoxes], file: str) -> dict[int, _TrackBoxes]:
    by_id: dict[int, _TrackBoxes] = {}
    for t in accepted:
        if t.track_id in by_id:
            # The reference mixes the two traks (sample entry of the first, tables and size of the
            # last); an invalid file, so we refuse it instead of copying that.
            raise _error(file, f"two video tracks have the same track_ID {t.track_id}")
        by_id[t.track_id] = t
    return by_id
