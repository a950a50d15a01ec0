"""Per camera, the clip of each episode: a spql.ClipRef into the dataset's own MP4 (mapping §4).

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


@dataclasses.dataclass(frozen=True)
class VideoFile:
    """What the import learnt about one MP4: where it is, its size and (maybe) its MediaIndex."""

    uri: str
    size: int
    index: Optional[pa.Array] = None  # length-1 spql.MediaIndex array, or None (null index)


def seconds_to_ns(seconds: np.ndarray) -> np.ndarray:
    """round(s × 1e9), halves away from zero, as the reference rounds."""
    scaled = np.asarray(seconds, np.float64) * 1e9
    return (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int64)


def videos_column(info: DatasetInfo, rows: Sequence[EpisodeRow], files: Mapping[str, VideoFile],
                  *, inline_index: bool) -> pa.StructArray:
    """The `videos` column for `rows`; `files` maps each MP4's relative path to what was learnt of it."""
    entries = []
    for k, feature in enumerate(info.video_features):
        slices = [r.videos[k] for r in rows]
        assert all(s.key == feature.name for s in slices)
        entries.append(_camera_column([files[s.file] for s in slices],
                                      np.array([s.from_timestamp for s in slices], np.float64),
                                      np.array([s.to_timestamp for s in slices], np.float64),
                                      inline_index=inline_index))
    return pa.StructArray.from_arrays(entries, fields=list(episode_type.videos_type(info)))


def _camera_column(files: Sequence[VideoFile], start_s: np.ndarray, end_s: np.ndarray,
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
    start, end = seconds_to_ns(start_s), seconds_to_ns(end_s)

    def durations(ns: np.ndarray) -> pa.Array:
        return pa.ExtensionArray.from_storage(duration_type, pa.array(ns, pa.duration("ns")))

    clip_storage = pa.StructArray.from_arrays(
        [media, pa.nulls(n, clip_type.storage_type.field("stream_indices").type), durations(start), durations(end)],
        fields=list(clip_type.storage_type))
    clip = pa.ExtensionArray.from_storage(clip_type, clip_storage)
    return pa.StructArray.from_arrays([clip, durations(-start)], fields=list(episode_type.video_entry_type()))


def _index_column(files: Sequence[VideoFile], inline_index: bool) -> pa.Array:
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
            arrays.append(f.index.storage if isinstance(f.index, pa.ExtensionArray) else f.index)
        take[i] = distinct[f.uri]
    storage = pa.concat_arrays(arrays).take(pa.array(take, mask=~valid))
    return pa.ExtensionArray.from_storage(index_type, storage)
