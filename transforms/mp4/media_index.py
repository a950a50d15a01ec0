"""Build an MP4's `spql.MediaIndex` from its `moov` box alone, exactly as mapping §5 says.

Every box is bounds-checked against its parent, and every count read from a box is checked against
the box's size before anything is allocated, so arbitrary bytes raise `LeRobotImportError` and
nothing else. The per-sample tables are expanded with numpy (no per-sample Python loops): a 1M-sample
moov parses in a fraction of a second.

The index, as `parse_media_index` returns it, is a plain dict shaped like the Arrow value:
`{"primary_track_id": int, "tracks": [track, ...]}` where a track holds the scalar fields and, for each
list field, a numpy array (`sizes`, `ctts` or None, `flags`) or a dict of numpy arrays, one per struct
field (`dts_runs`, `edit_list` or None, `chunks`, `gops`). `media_index_array` turns it into Arrow.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from transforms.episode import spql_types
from transforms.errors import LeRobotImportError
from transforms.mp4.boxes import BoxHeader, ReadStats, RangeSource, open_ranged, parse_box_header, read_moov

#: Sample-entry type -> codec name. avc3 (parameter sets in-band) is not accepted, like the reference.
CODECS: dict[bytes, str] = {b"avc1": "h264", b"hvc1": "h265", b"hev1": "h265", b"av01": "av1"}
NO_TRACK_MESSAGE = "no supported H.264, H.265, or AV1 video track found"
#: Refuse to expand more samples than this per track: a constant-size `stsz` can declare billions of
#: samples in 20 bytes. 2**24 samples is over 150 hours at 30 fps.
MAX_SAMPLES = 1 << 24
#: The reference fails on `stz2` (compact sample sizes) with "stsz not found"; so do we, unless this
#: is set (the parser handles 4-, 8- and 16-bit entries).
ACCEPT_STZ2 = False
#: Flags when sample data is not read (mapping §5): sync+referenced+intra, or referenced only.
FLAG_SYNC, FLAG_OTHER = 7, 2

_I32_MAX = (1 << 31) - 1
_U32_MAX = (1 << 32) - 1
_I64_MAX = (1 << 63) - 1


def _error(file: str, message: str) -> LeRobotImportError:
    return LeRobotImportError("mp4_structure", message, file=file)


@dataclasses.dataclass(frozen=True)
class _Box:
    """A box inside moov: its header plus the payload range, in moov coordinates."""

    h: BoxHeader

    @property
    def type(self) -> bytes:
        return self.h.type

    @property
    def payload(self) -> int:
        return self.h.start + self.h.header_size

    @property
    def end(self) -> int:
        return self.h.end


def _children(buf: bytes, box: _Box, file: str) -> list[_Box]:
    """The child boxes of a container box; each must end inside its parent."""
    out: list[_Box] = []
    pos = box.payload
    where = f"`{box.type.decode('latin-1')}` child (moov-relative)"
    while pos < box.end:
        h = parse_box_header(buf, pos, box.end, file=file, where=where)
        out.append(_Box(h))
        pos = h.end
    return out


def _child(buf: bytes, box: Optional[_Box], type_: bytes, file: str) -> Optional[_Box]:
    if box is None:
        return None
    for c in _children(buf, box, file):
        if c.type == type_:
            return c
    return None


def _full_box(buf: bytes, box: _Box, fixed: int, file: str, *, versions: tuple[int, ...] = (0, 1)) -> tuple[int, int]:
    """(version, position after version/flags) of a FullBox whose payload has at least `fixed` bytes
    after version/flags."""
    name = box.type.decode("latin-1")
    if box.end - box.payload < 4:
        raise _error(file, f"`{name}` box at moov byte {box.h.start} is too small for its version and flags")
    version = buf[box.payload]
    if version not in versions:
        raise _error(file, f"`{name}` box has unsupported version {version}")
    pos = box.payload + 4
    if box.end - pos < fixed:
        raise _error(file, f"`{name}` box at moov byte {box.h.start} holds {box.end - pos} bytes after its "
                           f"version and flags, fewer than the {fixed} its fields need")
    return version, pos


def _table(buf: bytes, box: _Box, pos: int, count: int, dtype: np.dtype, file: str, what: str) -> np.ndarray:
    """`count` entries of `dtype` at `pos`, after checking that the box holds them."""
    need = count * dtype.itemsize
    if need > box.end - pos:
        raise _error(file, f"`{box.type.decode('latin-1')}` box declares {count} {what} ({need} bytes) but holds "
                           f"only {max(0, box.end - pos)} bytes")
    return np.frombuffer(buf, dtype=dtype, count=count, offset=pos)


def _counted_table(buf: bytes, box: _Box, dtype: np.dtype, file: str, what: str = "entries") -> np.ndarray:
    """A FullBox holding `entry_count u32` then that many entries."""
    _, pos = _full_box(buf, box, 4, file, versions=(0, 1))
    (count,) = struct.unpack_from(">I", buf, pos)
    return _table(buf, box, pos + 4, count, dtype, file, what)


_U32 = np.dtype(">u4")
_PAIR_U32 = np.dtype([("count", ">u4"), ("value", ">u4")])
_PAIR_I32 = np.dtype([("count", ">u4"), ("value", ">i4")])
_STSC = np.dtype([("first_chunk", ">u4"), ("per_chunk", ">u4"), ("desc", ">u4")])
_ELST0 = np.dtype([("duration", ">u4"), ("media_time", ">i4"), ("rate", ">i4")])
_ELST1 = np.dtype([("duration", ">i8"), ("media_time", ">i8"), ("rate", ">i4")])


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


@dataclasses.dataclass(frozen=True)
class _TrackBoxes:
    """The boxes of one accepted video track."""

    track_id: int
    codec: str
    trak: _Box
    tkhd: _Box
    mdhd: _Box
    stbl: _Box
    stsd: _Box


def _accepted_track(buf: bytes, trak: _Box, file: str) -> Optional[_TrackBoxes]:
    """The track's boxes if its first sample entry is avc1/hvc1/hev1/av01. Like the reference, the
    sample entry alone decides (the `hdlr` type is not looked at)."""
    mdia = _child(buf, trak, b"mdia", file)
    stbl = _child(buf, _child(buf, mdia, b"minf", file), b"stbl", file)
    stsd = _child(buf, stbl, b"stsd", file)
    if stsd is None:
        return None
    _, pos = _full_box(buf, stsd, 4, file, versions=tuple(range(256)))
    (entries,) = struct.unpack_from(">I", buf, pos)
    if entries == 0 or pos + 4 >= stsd.end:
        return None
    entry = parse_box_header(buf, pos + 4, stsd.end, file=file, where="sample entry")
    codec = CODECS.get(entry.type)
    if codec is None:
        return None
    tkhd = _child(buf, trak, b"tkhd", file)
    mdhd = _child(buf, mdia, b"mdhd", file)
    for name, box in ((b"tkhd", tkhd), (b"mdhd", mdhd)):
        if box is None:
            raise _error(file, f"a {codec} video track has no `{name.decode()}` box")
    version, pos = _full_box(buf, tkhd, 20, file)
    track_id = struct.unpack_from(">I", buf, pos + (16 if version == 1 else 8))[0]
    return _TrackBoxes(track_id=track_id, codec=codec, trak=trak, tkhd=tkhd, mdhd=mdhd, stbl=stbl, stsd=stsd)


def _tkhd_size(buf: bytes, tkhd: _Box, file: str) -> tuple[int, int]:
    """tkhd width and height, integer part of 16.16."""
    version = buf[tkhd.payload] if tkhd.end - tkhd.payload >= 4 else 0
    version, pos = _full_box(buf, tkhd, 92 if version == 1 else 80, file)
    at = pos + (84 if version == 1 else 72)
    w, h = struct.unpack_from(">II", buf, at)
    return w >> 16, h >> 16


def _mdhd(buf: bytes, mdhd: _Box, file: str) -> tuple[int, int, str]:
    """(timescale, duration as i64, language) from mdhd."""
    version = buf[mdhd.payload] if mdhd.end - mdhd.payload >= 4 else 0
    version, pos = _full_box(buf, mdhd, 32 if version == 1 else 20, file)
    if version == 1:
        timescale, duration, lang = struct.unpack_from(">IqH", buf, pos + 16)
    else:
        timescale, duration, lang = struct.unpack_from(">IIH", buf, pos + 8)
    language = "".join(chr(((lang >> s) & 31) + 0x60) for s in (10, 5, 0))
    return timescale, duration, language


def _movie_timescale(buf: bytes, moov: _Box, file: str) -> int:
    mvhd = _child(buf, moov, b"mvhd", file)
    if mvhd is None:
        raise _error(file, "moov has no `mvhd` box")
    version = buf[mvhd.payload] if mvhd.end - mvhd.payload >= 4 else 0
    version, pos = _full_box(buf, mvhd, 20 if version == 1 else 12, file)
    return struct.unpack_from(">I", buf, pos + (16 if version == 1 else 8))[0]


def _edit_list(buf: bytes, trak: _Box, file: str) -> Optional[dict[str, np.ndarray]]:
    """elst entries verbatim; None without an `edts` box."""
    edts = _child(buf, trak, b"edts", file)
    if edts is None:
        return None
    elst = _child(buf, edts, b"elst", file)
    if elst is None:
        raise _error(file, "an `edts` box has no `elst` box")  # the reference fails here too
    version, _ = _full_box(buf, elst, 4, file)
    entries = _counted_table(buf, elst, _ELST1 if version == 1 else _ELST0, file, "edits")
    return {"duration": entries["duration"].astype(np.int64), "media_time": entries["media_time"].astype(np.int64),
            "rate": entries["rate"].astype(np.int32)}


def _sample_sizes(buf: bytes, stbl: _Box, file: str, track: str, file_size: Optional[int]) -> np.ndarray:
    """Per-sample sizes (u32) from stsz (constant size expanded) or stz2 (4/8/16-bit entries)."""
    stsz = _child(buf, stbl, b"stsz", file)
    if stsz is not None:
        _, pos = _full_box(buf, stsz, 8, file)
        constant, count = struct.unpack_from(">II", buf, pos)
        if count > MAX_SAMPLES:
            raise _error(file, f"{track} declares {count} samples, more than the {MAX_SAMPLES} indexed per track")
        if constant and file_size is not None and constant * count > file_size:
            # A constant size is the one count not bounded by its box: bound it by the file, before
            # anything per-sample is allocated (a 20-byte stsz could otherwise declare 16M samples).
            raise _error(file, f"{track} declares {count} samples of {constant} bytes, more than the file's "
                               f"{file_size} bytes")
        if constant:
            return np.full(count, constant, dtype=np.uint32)
        return _table(buf, stsz, pos + 8, count, _U32, file, "sample sizes").astype(np.uint32)
    stz2 = _child(buf, stbl, b"stz2", file)
    if stz2 is None or not ACCEPT_STZ2:
        raise _error(file, f"{track} has no `stsz` box" + (" (compact `stz2` sample sizes are not read: the "
                                                           "reference rejects them)" if stz2 is not None else ""))
    _, pos = _full_box(buf, stz2, 8, file)
    field_size = buf[pos + 3]
    (count,) = struct.unpack_from(">I", buf, pos + 4)
    if count > MAX_SAMPLES:
        raise _error(file, f"{track} declares {count} samples, more than the {MAX_SAMPLES} indexed per track")
    if field_size == 16:
        return _table(buf, stz2, pos + 8, count, np.dtype(">u2"), file, "sample sizes").astype(np.uint32)
    if field_size == 8:
        return _table(buf, stz2, pos + 8, count, np.dtype("u1"), file, "sample sizes").astype(np.uint32)
    if field_size == 4:
        packed = _table(buf, stz2, pos + 8, (count + 1) // 2, np.dtype("u1"), file, "sample sizes")
        nibbles = np.empty(2 * len(packed), dtype=np.uint32)
        nibbles[0::2] = packed >> 4
        nibbles[1::2] = packed & 15
        return nibbles[:count]
    raise _error(file, f"`stz2` has field size {field_size}; only 4, 8 and 16 are defined")


def _sample_offsets(buf: bytes, stbl: _Box, sizes: np.ndarray, file: str, track: str) -> np.ndarray:
    """Absolute byte offset (int64) of every sample, from stsc + stco/co64 + sizes."""
    n = len(sizes)
    stco = _child(buf, stbl, b"stco", file)
    if stco is not None:
        chunk_offsets = _counted_table(buf, stco, _U32, file, "chunk offsets").astype(np.int64)
    else:
        co64 = _child(buf, stbl, b"co64", file)
        if co64 is None:
            raise _error(file, f"{track} has neither `stco` nor `co64`")
        raw = _counted_table(buf, co64, np.dtype(">u8"), file, "chunk offsets")
        if len(raw) and int(raw.max()) > _I64_MAX:
            raise _error(file, f"`co64` of {track} has a chunk offset beyond 2**63")
        chunk_offsets = raw.astype(np.int64)
    stsc_box = _child(buf, stbl, b"stsc", file)
    if stsc_box is None:
        raise _error(file, f"{track} has no `stsc` box")
    stsc = _counted_table(buf, stsc_box, _STSC, file)
    nchunks = len(chunk_offsets)
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
    chunk_offsets = chunk_offsets[:used]
    nchunks = used
    chunk_first = _exclusive_cumsum(chunk_samples, nchunks)
    size_sum = _exclusive_cumsum(sizes, n + 1)
    if nchunks and int(chunk_offsets.max()) > _I64_MAX - int(size_sum[-1]):
        raise _error(file, f"chunk offsets of {track} overflow 64 bits")
    base = chunk_offsets - size_sum[chunk_first]
    return np.repeat(base, chunk_samples) + size_sum[:n]


def _rle(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts, values) of runs of equal neighbours."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.uint32), values[:0]
    starts = np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))
    counts = np.diff(np.append(starts, len(values)))
    return counts.astype(np.uint32), values[starts]


def _track(buf: bytes, boxes: _TrackBoxes, movie_timescale: int, file: str,
           file_size: Optional[int] = None) -> dict[str, Any]:
    """One MediaTrack (mapping §5), every table vectorised."""
    track = f"track {boxes.track_id}"
    width, height = _tkhd_size(buf, boxes.tkhd, file)
    timescale, duration, language = _mdhd(buf, boxes.mdhd, file)
    stbl = boxes.stbl

    sizes = _sample_sizes(buf, stbl, file, track, file_size)
    n = len(sizes)
    if n == 0:
        raise _error(file, f"video track {boxes.track_id} contains no samples")
    stts_box = _child(buf, stbl, b"stts", file)
    if stts_box is None:
        raise _error(file, f"{track} has no `stts` box")
    stts = _counted_table(buf, stts_box, _PAIR_U32, file)
    deltas = _expand_runs(stts["count"], stts["value"].astype(np.uint32), n, max(n - 1, 0), "stts", file)
    dts = _exclusive_cumsum(deltas, n)

    ctts_box = _child(buf, stbl, b"ctts", file)
    ctts_out: Optional[np.ndarray] = None
    pts = dts
    if ctts_box is not None:
        # Offsets are signed whatever the box version (v0 boxes with negative values exist).
        ctts_tab = _counted_table(buf, ctts_box, _PAIR_I32, file)
        offsets = _expand_runs(ctts_tab["count"], ctts_tab["value"].astype(np.int64), n, n, "ctts", file)
        pts = dts + offsets
        shifted = offsets + max(0, -int(offsets.min()))
        if int(shifted.max()) > _I32_MAX:
            raise _error(file, f"`ctts` offsets of {track} span more than 32 bits")
        ctts_out = shifted.astype(np.int32)
    pts = pts - pts.min()  # normalise so the earliest frame is at 0; the edit list shifts nothing

    stss_box = _child(buf, stbl, b"stss", file)
    if stss_box is None:
        sync_idx = np.arange(n, dtype=np.int64)
    else:
        numbers = _counted_table(buf, stss_box, _U32, file, "sync samples").astype(np.int64)
        # The reference walks stss with one pointer while counting samples up: it keeps the longest
        # prefix of strictly increasing sample numbers within 1..n and ignores everything after.
        bad = np.flatnonzero((numbers < 1) | (numbers > n) | np.append(False, np.diff(numbers) <= 0))
        sync_idx = numbers[:int(bad[0]) if len(bad) else len(numbers)] - 1
    if len(sync_idx) == 0:
        raise _error(file, f"video track {boxes.track_id} contains no sync samples")
    flags = np.full(n, FLAG_OTHER, dtype=np.uint8)
    flags[sync_idx] = FLAG_SYNC

    offsets_abs = _sample_offsets(buf, stbl, sizes, file, track)
    ends = offsets_abs + sizes

    # GOPs: one per sync sample, in the track's original numbering. pts_start is the earliest pts of
    # the GOP's samples (leading frames included), frame_start that frame's presentation rank.
    rank = np.arange(n, dtype=np.int64)
    if np.any(pts[1:] < pts[:-1]):
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(pts, kind="stable")] = np.arange(n, dtype=np.int64)
    starts = sync_idx
    gop_offset = np.minimum.reduceat(offsets_abs, starts)
    gops = {
        "decode_start": starts.astype(np.uint32),
        "frame_start": np.minimum.reduceat(rank, starts).astype(np.uint32),
        "pts_start": np.minimum.reduceat(pts, starts).astype(np.int64),
        "byte_offset": gop_offset.astype(np.uint64),
        "byte_length": (np.maximum.reduceat(ends, starts) - gop_offset).astype(np.uint64),
        "sample_count": np.diff(np.append(starts, n)).astype(np.uint32),
    }

    # The reference drops the samples before the first sync sample from every per-sample list (but
    # not from gops): copy that.
    kept = slice(int(sync_idx[0]), n)
    k_sizes, k_offsets, k_ends = sizes[kept], offsets_abs[kept], ends[kept]
    nk = len(k_sizes)

    durations = deltas[kept].astype(np.int64)
    # The last sample lasts to the end of the media (mdhd duration), not its stts delta.
    durations[-1] = max(0, duration - int(dts[-1]))
    if durations[-1] > _U32_MAX:
        raise _error(file, f"mdhd duration of {track} leaves a last sample longer than 32 bits of ticks")
    run_counts, run_deltas = _rle(durations)

    new_chunk = np.ones(nk, dtype=bool)
    new_chunk[1:] = k_offsets[1:] != k_ends[:-1]
    chunk_first = np.flatnonzero(new_chunk)

    return {
        "track_id": boxes.track_id, "kind": "video", "codec": boxes.codec, "language": language,
        "width": width, "height": height, "timescale": timescale, "movie_timescale": movie_timescale,
        "duration_ticks": duration,
        "sample_entry": bytes(buf[boxes.stsd.h.start:boxes.stsd.end]),
        "dts_runs": {"count": run_counts, "delta": run_deltas.astype(np.uint32)},
        "edit_list": _edit_list(buf, boxes.trak, file),
        "chunks": {"first_sample": chunk_first.astype(np.uint32), "offset": k_offsets[chunk_first].astype(np.uint64)},
        "gops": gops,
        "sizes": k_sizes.astype(np.uint32),
        "ctts": None if ctts_out is None else ctts_out[kept],
        "flags": flags[kept],
    }


def parse_media_index(moov: bytes, *, file: str, file_size: Optional[int] = None) -> dict[str, Any]:
    """The MediaIndex of the file whose whole `moov` box (header included) is `moov`.

    Raises LeRobotImportError: mp4_structure for malformed or fragmented moov, mp4_track when no
    track is H.264 (avc1), H.265 (hvc1/hev1) or AV1 (av01) video.
    """
    try:
        return _parse(moov, file, file_size)
    except LeRobotImportError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, TypeError, MemoryError) as ex:
        # Safety net: every check above is meant to make this unreachable; the fuzz test asserts it.
        raise _error(file, f"malformed moov (internal: {type(ex).__name__}: {ex})") from None


def _parse(moov: bytes, file: str, file_size: Optional[int] = None) -> dict[str, Any]:
    buf = moov
    top = parse_box_header(buf, 0, len(buf), file=file)
    if top.type != b"moov":
        raise _error(file, f"expected a `moov` box, found `{top.type.decode('latin-1')}`")
    if top.size != len(buf):
        raise _error(file, f"moov box says {top.size} bytes but {len(buf)} were given")
    root = _Box(top)
    children = _children(buf, root, file)
    if any(c.type == b"mvex" for c in children):
        raise _error(file, "fragmented MP4 is not supported (moov has an `mvex` box; samples are in moof fragments)")
    movie_timescale = _movie_timescale(buf, root, file)
    accepted = [t for t in (_accepted_track(buf, c, file) for c in children if c.type == b"trak") if t is not None]
    if not accepted:
        raise LeRobotImportError("mp4_track", NO_TRACK_MESSAGE, file=file)
    # The reference keys tracks by track_ID, lists the highest ID first (the primary track) and then
    # the others in ascending ID order.
    by_id: dict[int, _TrackBoxes] = {}
    for t in accepted:
        if t.track_id in by_id:
            # The reference mixes the two traks (sample entry of the first, tables and size of the
            # last); an invalid file, so we refuse it instead of copying that.
            raise _error(file, f"two video tracks have the same track_ID {t.track_id}")
        by_id[t.track_id] = t
    ids = sorted(by_id)
    order = [ids[-1]] + ids[:-1]
    tracks = [_track(buf, by_id[i], movie_timescale, file, file_size) for i in order]
    return {"primary_track_id": ids[-1], "tracks": tracks}


# ------------------------------------------------------------------------------------------------
# Arrow
# ------------------------------------------------------------------------------------------------

_NUMPY: dict[pa.DataType, type] = {pa.uint8(): np.uint8, pa.uint32(): np.uint32, pa.int32(): np.int32,
                                   pa.int64(): np.int64, pa.uint64(): np.uint64}


def _concat(parts: list[np.ndarray], type_: pa.DataType) -> pa.Array:
    """The parts, concatenated, as an Arrow array of `type_` (no Python objects per value)."""
    dtype = _NUMPY[type_]
    values = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    return pa.array(values, type_)


def _list_array(type_: pa.ListType, per_track: list[Optional[Any]], build_values) -> pa.Array:
    """One list per track; `None` entries are null lists (edit_list, ctts)."""
    lengths = [0 if v is None else build_values.length(v) for v in per_track]
    offsets = np.zeros(len(per_track) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(lengths)
    values = build_values(type_.value_type, [v for v in per_track if v is not None])
    mask = None
    if any(v is None for v in per_track):
        mask = pa.array([v is None for v in per_track], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=type_, mask=mask)


class _Primitive:
    @staticmethod
    def length(v: np.ndarray) -> int:
        return len(v)

    def __call__(self, value_type: pa.DataType, parts: list[np.ndarray]) -> pa.Array:
        return _concat(parts, value_type)


class _Struct:
    @staticmethod
    def length(v: dict[str, np.ndarray]) -> int:
        return len(next(iter(v.values())))

    def __call__(self, value_type: pa.StructType, parts: list[dict[str, np.ndarray]]) -> pa.Array:
        fields = [value_type.field(i) for i in range(value_type.num_fields)]
        arrays = [_concat([p[f.name] for p in parts], f.type) for f in fields]
        return pa.StructArray.from_arrays(arrays, fields=fields)


def media_index_array(index: dict[str, Any]) -> pa.ExtensionArray:
    """A length-1 `spql.MediaIndex` array holding `index` (as `parse_media_index` returns it)."""
    ext = spql_types.media_index()
    track_type: pa.StructType = spql_types.media_track_type()
    tracks = index["tracks"]
    columns: list[pa.Array] = []
    for i in range(track_type.num_fields):
        f = track_type.field(i)
        values = [t[f.name] for t in tracks]
        if pa.types.is_list(f.type):
            builder = _Struct() if pa.types.is_struct(f.type.value_type) else _Primitive()
            columns.append(_list_array(f.type, values, builder))
        else:
            columns.append(pa.array(values, f.type))
    track_array = pa.StructArray.from_arrays(columns, fields=[track_type.field(i) for i in range(track_type.num_fields)])
    tracks_type = ext.storage_type.field("tracks").type
    tracks_list = pa.ListArray.from_arrays(pa.array([0, len(tracks)], pa.int32()), track_array, type=tracks_type)
    storage = pa.StructArray.from_arrays(
        [pa.array([index["primary_track_id"]], pa.uint32()), tracks_list],
        fields=[ext.storage_type.field(0), ext.storage_type.field(1)])
    return pa.ExtensionArray.from_storage(ext, storage)


# ------------------------------------------------------------------------------------------------
# Reading a file
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class MediaIndexResult:
    """A file's index (length-1 spql.MediaIndex array), its size, its moov's size and the read cost."""

    index: pa.ExtensionArray
    size: int
    moov_size: int
    stats: ReadStats


def read_media_index_from(src: RangeSource, *, uri: str) -> MediaIndexResult:
    """Locate and parse moov of any range source (see `mp4_boxes.RangeSource`)."""
    moov = read_moov(src, file=uri)
    index = parse_media_index(moov.data, file=uri, file_size=moov.file_size)
    stats = getattr(src, "stats", None) or ReadStats()
    return MediaIndexResult(index=media_index_array(index), size=moov.file_size, moov_size=moov.size, stats=stats)


def read_media_index(fs: Any, path: str, *, uri: Optional[str] = None, size: Optional[int] = None) -> MediaIndexResult:
    """The MediaIndex of the MP4 at `path` on fsspec filesystem `fs`, read with a few range requests.

    `uri` names the file in errors (default: `path`); `size`, when known, saves a metadata request.
    """
    uri = uri or path
    src = open_ranged(fs, path, uri=uri, size=size)
    return read_media_index_from(src, uri=uri)
