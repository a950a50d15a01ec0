"""Per camera, the clip of each episode: a spql.ClipRef into the dataset's own MP4, [from_timestamp,
to_timestamp) of the file in nanoseconds, and the episode's time_origin (-from_timestamp), so that
episode time t is file time t - time_origin.

Built for a whole part at once: one column per camera, vectorised over the part's episodes.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.episode import episode_type
from transforms.episode import spql_types
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.base.errors import LeRobotImportError

#: The largest time in seconds whose nanoseconds fit in an int64 (about 292 years).
MAX_SECONDS = float(2 ** 63 - 1024) / 1e9


@dataclasses.dataclass(frozen=True)
class Mp4File:
    """What the import learnt about one MP4: where it is, its size, its MediaIndex (when its codec is one the
    MediaIndex covers, and the episodes hold it inline) and the video codec found in it."""

    uri: str
    size: int
    index: Optional[pa.Array] = None  # length-1 spql.MediaIndex array, or None (null index)
    codec: Optional[str] = None  # the video track's codec as found in the file, when known

    def without_index(self) -> "Mp4File":
        """The same MP4 as the episodes refer to it when its MediaIndex lives under media_index/."""
        return dataclasses.replace(self, index=None)


def seconds_to_ns(seconds: np.ndarray) -> np.ndarray:
    """round(s × 1e9), halves away from zero, as the reference rounds.

    A time whose nanoseconds do not fit in an int64 (beyond about 292 years, or not finite) is refused
    with rule `timestamps`: cast, it would wrap to a negative time without a word."""
    scaled = np.asarray(seconds, np.float64) * 1e9
    bad = ~(np.abs(scaled) < 2.0 ** 63)  # also true for NaN and infinities
    if bad.any():
        value = float(np.asarray(seconds, np.float64).reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])])
        raise LeRobotImportError("timestamps", f"the time {value!r} s does not fit in nanoseconds as a 64-bit "
                                 f"integer (at most {MAX_SECONDS:.6g} s): check the episodes file's timestamps")
    return (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int64)


def clip_times_ns(slices: Sequence, episode_indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The [from, to) nanoseconds of one camera's clips; a time that does not fit names its episode."""
    start_s = np.array([s.from_timestamp for s in slices], np.float64)
    end_s = np.array([s.to_timestamp for s in slices], np.float64)
    for values in (start_s, end_s):
        bad = np.flatnonzero(~(np.abs(values * 1e9) < 2.0 ** 63))
        if len(bad):
            i = int(bad[0])
            raise LeRobotImportError(
                "timestamps", f"episode {episode_indices[i]}: camera `{slices[i].key}` clip spans "
                f"{slices[i].from_timestamp!r}..{slices[i].to_timestamp!r} s, beyond the {MAX_SECONDS:.6g} s a clip "
                "time can hold in nanoseconds as a 64-bit integer", episode_index=episode_indices[i])
    return seconds_to_ns(start_s), seconds_to_ns(end_s)


def videos_column(info: DatasetInfo, rows: Sequence[EpisodeRow], files: Mapping[str, Mp4File],
                  *, inline_index: bool) -> pa.StructArray:
    """The `videos` column for `rows`; `files` maps each MP4's relative path to what was learnt of it."""
    entries = []
    episode_indices = [r.episode_index for r in rows]
    for k, feature in enumerate(info.video_features):
        slices = [r.videos[k] for r in rows]
        assert all(s.key == feature.name for s in slices)
        start, end = clip_times_ns(slices, episode_indices)
        entries.append(_camera_column([files[s.file] for s in slices], start, end, inline_index=inline_index))
    return pa.StructArray.from_arrays(entries, fields=list(episode_type.videos_type(info)))


def _camera_column(files: Sequence[Mp4File], start: np.ndarray, end: np.ndarray,
                   *, inline_index: bool) -> pa.StructArray:
    n = len(files)
    blob_type, media_type, clip_type = spql_types.blob(), spql_types.encoded_media(), spql_types.clip_ref()
    duration_type = spql_types.duration()
    blob_children = []
    for f in blob_type.storage_type:
        if f.name == "uri":
            blob_children.append(pa.array([v.uri for v in files], pa.utf8()))
        elif f.name == "size":
            blob_children.append(pa.array(np.array([v.size for v in files], np.uint64)))
        else:
            blob_children.append(pa.nulls(n, f.type))
    source = pa.ExtensionArray.from_storage(blob_type, pa.StructArray.from_arrays(
        blob_children, fields=list(blob_type.storage_type)))
    media = pa.ExtensionArray.from_storage(media_type, pa.StructArray.from_arrays(
        [source, pa.array(["mp4"] * n, pa.utf8()), _index_column(files, inline_index)],
        fields=list(media_type.storage_type)))

    def durations(ns: np.ndarray) -> pa.Array:
        return pa.ExtensionArray.from_storage(duration_type, pa.array(ns, pa.duration("ns")))

    clip_storage = pa.StructArray.from_arrays(
        [media, pa.nulls(n, clip_type.storage_type.field("stream_indices").type), durations(start), durations(end)],
        fields=list(clip_type.storage_type))
    clip = pa.ExtensionArray.from_storage(clip_type, clip_storage)
    return pa.StructArray.from_arrays([clip, durations(-start)], fields=list(episode_type.video_entry_type()))


def _index_column(files: Sequence[Mp4File], inline_index: bool) -> pa.Array:
    """Each episode's clip.media.index: its file's index taken per row, or all null (default layout)."""
    index_type = spql_types.media_index()
    n = len(files)
    if not inline_index or not any(f.index is not None for f in files):
        return spql_types.null_media_index(n)
    distinct: dict[str, int] = {}
    arrays = []
    take = np.empty(n, np.int64)
    valid = np.ones(n, bool)
    for i, f in enumerate(files):
        if f.index is None:
            valid[i] = False
            take[i] = 0
            continue
        if f.uri not in distinct:
            distinct[f.uri] = len(arrays)
            arrays.append(spql_types.storage_of(f.index))
        take[i] = distinct[f.uri]
    taken = pa.concat_arrays(arrays).take(pa.array(take, mask=~valid))
    return pa.ExtensionArray.from_storage(index_type, taken)
