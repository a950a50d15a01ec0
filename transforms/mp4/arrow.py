"""MediaIndex tables <-> Arrow `spql.MediaIndex` values.

`media_index_array` writes a `tables.MediaIndex` as a length-1 `spql.MediaIndex` array, every list
built from numpy buffers (no Python object per value). `read_track` reads one track back for a reader,
and checks the tables against each other BEFORE anything is expanded from them: an index is read
from an import's output, which anyone may have edited, and its run-length `dts_runs` could otherwise
ask for any number of samples (four runs of 2^32 - 1 are 128 GiB of int64).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pyarrow as pa

from transforms.episode import spql_types
from transforms.mp4.limits import DEFAULT_LIMITS, Limits
from transforms.mp4.tables import CODECS, Chunks, DtsRuns, EditList, Gops, MediaIndex, MediaTrack

__all__ = ["InvalidMediaIndex", "decode_times", "media_index_array", "read_track", "storage_of"]

_NUMPY: dict[pa.DataType, type] = {pa.uint8(): np.uint8, pa.uint32(): np.uint32, pa.int32(): np.int32,
                                   pa.int64(): np.int64, pa.uint64(): np.uint64}
_I64_MAX = (1 << 63) - 1

#: The extension-storage unwrap (a spql.* value is a struct underneath), shared by mp4 and the reader.
storage_of = spql_types.storage_of


# ------------------------------------------------------------------------------------------------
# Tables -> Arrow
# ------------------------------------------------------------------------------------------------

def _concat(parts: list[np.ndarray], type_: pa.DataType) -> pa.Array:
    """The parts, concatenated, as an Arrow array of `type_` (no Python objects per value)."""
    dtype = _NUMPY[type_]
    values = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    return pa.array(values, type_)


def _list_array(type_: pa.ListType, per_track: list[Any]) -> pa.Array:
    """One list per track, from numpy arrays or table dataclasses; `None` entries are null lists."""
    value_type = type_.value_type
    present = [v for v in per_track if v is not None]
    if pa.types.is_struct(value_type):
        fields = list(value_type)
        lengths = [0 if v is None else len(getattr(v, fields[0].name)) for v in per_track]
        values = pa.StructArray.from_arrays([_concat([getattr(p, f.name) for p in present], f.type) for f in fields],
                                            fields=fields)
    else:
        lengths = [0 if v is None else len(v) for v in per_track]
        values = _concat(present, value_type)
    offsets = np.zeros(len(per_track) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(lengths)
    mask = pa.array([v is None for v in per_track], pa.bool_()) if len(present) < len(per_track) else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=type_, mask=mask)


def media_index_array(index: MediaIndex) -> pa.ExtensionArray:
    """A length-1 `spql.MediaIndex` array holding `index`.

    Args:
        index: the tables `tables.parse_media_index` built.
    Returns:
        The Arrow value, of the `spql.MediaIndex` extension type.
    """
    ext = spql_types.media_index()
    track_type: pa.StructType = spql_types.media_track_type()
    fields = list(track_type)
    columns = []
    for f in fields:
        values = [getattr(t, f.name) for t in index.tracks]
        columns.append(_list_array(f.type, values) if pa.types.is_list(f.type) else pa.array(values, f.type))
    track_array = pa.StructArray.from_arrays(columns, fields=fields)
    tracks_type = ext.storage_type.field("tracks").type
    tracks_list = pa.ListArray.from_arrays(pa.array([0, len(index.tracks)], pa.int32()), track_array,
                                           type=tracks_type)
    storage = pa.StructArray.from_arrays([pa.array([index.primary_track_id], pa.uint32()), tracks_list],
                                         fields=[ext.storage_type.field(0), ext.storage_type.field(1)])
    return pa.ExtensionArray.from_storage(ext, storage)


# ------------------------------------------------------------------------------------------------
# Arrow -> one track, checked
# ------------------------------------------------------------------------------------------------

class InvalidMediaIndex(ValueError):
    """A MediaIndex value whose tables cannot be true (edited, or not written by an importer)."""


def _list_values(list_array: pa.ListArray, row: int) -> pa.Array:
    """The values of one list entry, zero-copy."""
    start, end = list_array.offsets[row].as_py(), list_array.offsets[row + 1].as_py()
    return list_array.values.slice(start, end - start)


def _np(arr: pa.Array) -> np.ndarray:
    return arr.to_numpy(zero_copy_only=False)


def _struct(cls, arr: pa.Array):
    return cls(**{name: _np(arr.field(name)) for name in cls.__dataclass_fields__})


def _pick_track(index: pa.Array, track_id: Optional[int]) -> tuple[pa.StructArray, int, int]:
    """(the tracks' struct array, the row of the wanted track, its id)."""
    st = storage_of(index)
    if len(st) != 1 or not st.is_valid()[0].as_py():
        raise InvalidMediaIndex("expected one non-null MediaIndex")
    wanted = st.field("primary_track_id")[0].as_py() if track_id is None else track_id
    tracks = _list_values(st.field("tracks"), 0)
    ids = _np(tracks.field("track_id"))
    hits = np.flatnonzero(ids == wanted)
    if not len(hits):
        raise InvalidMediaIndex(f"the MediaIndex has no track {wanted} (tracks: {', '.join(map(str, ids.tolist()))})")
    return tracks, int(hits[0]), int(wanted)


def read_track(index: pa.Array, track_id: Optional[int] = None, *, limits: Limits = DEFAULT_LIMITS) -> MediaTrack:
    """One track of a length-1 spql.MediaIndex array (or its storage), its tables checked.

    Args:
        index: the MediaIndex value.
        track_id: the track to read (default: the primary track).
        limits: `max_samples` bounds the track's sample count.
    Returns:
        The track's tables, numpy views of the Arrow buffers where the types allow.
    Raises:
        InvalidMediaIndex: the value is null, lacks the track, or its tables disagree with each other.
    """
    tracks, k, tid = _pick_track(index, track_id)

    def col(name: str) -> pa.Array:
        return _list_values(tracks.field(name), k)

    def scalar(name: str):
        return tracks.field(name)[k].as_py()

    def optional(name: str, build):
        return build(col(name)) if tracks.field(name).is_valid()[k].as_py() else None

    track = MediaTrack(
        track_id=tid, kind=scalar("kind"), codec=scalar("codec"), language=scalar("language"),
        width=scalar("width"), height=scalar("height"), timescale=scalar("timescale"),
        movie_timescale=scalar("movie_timescale"), duration_ticks=scalar("duration_ticks"),
        sample_entry=scalar("sample_entry"), dts_runs=_struct(DtsRuns, col("dts_runs")),
        edit_list=optional("edit_list", lambda a: _struct(EditList, a)), chunks=_struct(Chunks, col("chunks")),
        gops=_struct(Gops, col("gops")), sizes=_np(col("sizes")), ctts=optional("ctts", _np), flags=_np(col("flags")))
    check_track(track, limits)
    return track


def check_track(t: MediaTrack, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise InvalidMediaIndex unless the track's tables agree with each other (sizes first: nothing is
    expanded here, so a lie costs nothing)."""
    name = f"track {t.track_id}"
    n = len(t.sizes)
    if t.codec not in set(CODECS.values()):
        raise InvalidMediaIndex(f"{name} has codec {t.codec!r}, not one of {', '.join(sorted(set(CODECS.values())))}")
    if not t.timescale:
        raise InvalidMediaIndex(f"{name} has timescale 0: its times cannot be turned into seconds")
    if n == 0 or n > limits.max_samples:
        raise InvalidMediaIndex(f"{name} has {n:,} samples (a track has 1 to {limits.max_samples:,})")
    runs = int(t.dts_runs.count.sum(dtype=np.uint64))
    if runs != n:
        raise InvalidMediaIndex(f"{name}: dts_runs cover {runs:,} samples, sizes {n:,}")
    for what, arr in (("flags", t.flags), ("ctts", t.ctts)):
        if arr is not None and len(arr) != n:
            raise InvalidMediaIndex(f"{name}: {what} has {len(arr):,} values for {n:,} samples")
    first = t.chunks.first_sample.astype(np.int64)
    if not len(first) or first[0] != 0 or first[-1] >= n or np.any(np.diff(first) <= 0):
        raise InvalidMediaIndex(f"{name}: chunks must start at sample 0 and increase below {n:,}")
    if int(t.chunks.offset.max()) > _I64_MAX - int(t.sizes.sum(dtype=np.uint64)):
        raise InvalidMediaIndex(f"{name}: chunk offsets overflow 64 bits")
    starts = t.gops.decode_start.astype(np.int64)
    if not len(starts) or np.any(np.diff(starts) <= 0) or starts[-1] - starts[0] >= n:
        raise InvalidMediaIndex(f"{name}: gops must increase and lie within the {n:,} samples")


def decode_times(t: MediaTrack) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(durations, dts, pts) in ticks per sample, decode order; pts with its minimum at 0 (the timeline
    FFmpeg, PyAV and torchcodec report for the files LeRobot writes, as the reader seeks on it)."""
    n = len(t.sizes)
    deltas = np.repeat(t.dts_runs.delta.astype(np.int64), t.dts_runs.count.astype(np.int64))
    dts = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(deltas[:-1], out=dts[1:])
    cts = dts + t.ctts.astype(np.int64) if t.ctts is not None else dts.copy()
    return deltas, dts, cts - (cts.min() if n else 0)
