"""An MP4's `spql.MediaIndex`, read from its `moov` box alone with a few range reads: the entry point.

    read_media_index(fs, path) = ranges.open_fsspec -> boxes.read_moov -> tables.parse_media_index
                                 -> arrow.media_index_array
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pyarrow as pa

from transforms.mp4.arrow import media_index_array
from transforms.mp4.boxes import read_moov
from transforms.mp4.limits import DEFAULT_LIMITS, Limits
from transforms.mp4.ranges import RangeReader, ReadStats, open_fsspec
from transforms.mp4.tables import NO_TRACK_MESSAGE, parse_media_index

__all__ = ["MediaIndexResult", "NO_TRACK_MESSAGE", "media_index_array", "parse_media_index", "read_media_index",
           "read_media_index_from"]


@dataclasses.dataclass(frozen=True)
class MediaIndexResult:
    """What reading one MP4 learnt.

    Attributes:
        index: the file's MediaIndex, a length-1 `spql.MediaIndex` array.
        size: the file's size in bytes.
        moov_size: the moov box's size in bytes.
        stats: the range requests and bytes the read cost.
        codec: the primary video track's sample-entry type as found in the file (`avc1`, `hvc1`,
            `hev1`, `av01`), to compare with what info.json declares.
    """

    index: pa.ExtensionArray
    size: int
    moov_size: int
    stats: ReadStats
    codec: str


def read_media_index_from(src: RangeReader, *, uri: str, declared: Optional[str] = None,
                          limits: Limits = DEFAULT_LIMITS) -> MediaIndexResult:
    """Find, read and parse the moov of any range reader.

    Args:
        src: the file (`ranges.BytesRangeReader`, `ranges.FsspecRangeReader`, ...).
        uri: names the file in errors.
        declared: the codec info.json declares for the file, named when no track is supported.
        limits: the bounds of the read.
    Returns:
        The index, the file's size and moov's, what the reads cost and the track's codec.
    Raises:
        LeRobotImportError: mp4_structure, mp4_track, mp4_limits, lfs_pointer, file_missing or io.
    """
    moov = read_moov(src, file=uri, limits=limits)
    index = parse_media_index(moov.data, file=uri, file_size=moov.file_size, declared=declared, limits=limits)
    return MediaIndexResult(index=media_index_array(index), size=moov.file_size, moov_size=moov.size,
                            stats=src.stats, codec=index.primary.entry_type)


def read_media_index(fs: Any, path: str, *, uri: Optional[str] = None, size: Optional[int] = None,
                     declared: Optional[str] = None, limits: Limits = DEFAULT_LIMITS) -> MediaIndexResult:
    """The MediaIndex of the MP4 at `path` on fsspec filesystem `fs`, read with a few range requests.

    Args:
        fs, path: where the file is.
        uri: names the file in errors (default: `path`).
        size: the file's size, when known (saves a metadata request).
        declared: the codec info.json declares for the file (`video.codec`), named when the file
            holds no supported track.
        limits: the bounds of the read.
    Returns:
        See `read_media_index_from`.
    """
    uri = uri or path
    return read_media_index_from(open_fsspec(fs, path, uri=uri, size=size), uri=uri, declared=declared,
                                 limits=limits)
