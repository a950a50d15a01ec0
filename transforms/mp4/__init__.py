"""MP4 media: range reads, the box walk, and the moov box turned into a spql.MediaIndex. Pure: no Beam.

    ranges.py       the one range-reader protocol (in memory, fsspec) and its read counts
    boxes.py        the one box-header parser, the box walk, finding moov in a file
    tables.py       moov -> typed per-track tables (numpy), as the reference builds them
    arrow.py        tables <-> Arrow spql.MediaIndex (read back checked, for readers)
    limits.py       the bounds of one read (moov size, samples, boxes, requests)
    media_index.py  the entry point: `read_media_index(fs, path)`
    picture.py      what pictures a track holds (planes, bit depth) from its sample entry: depth or colour
"""

from transforms.mp4.arrow import InvalidMediaIndex, media_index_array, read_track
from transforms.mp4.limits import DEFAULT_LIMITS, Limits
from transforms.mp4.media_index import NO_TRACK_MESSAGE, MediaIndexResult, read_media_index, read_media_index_from
from transforms.mp4.ranges import BytesRangeReader, FsspecRangeReader, RangeReader, ReadStats, open_fsspec, open_uri
from transforms.mp4.tables import MediaIndex, MediaTrack, parse_media_index

__all__ = ["BytesRangeReader", "DEFAULT_LIMITS", "FsspecRangeReader", "InvalidMediaIndex", "Limits", "MediaIndex",
           "MediaIndexResult", "MediaTrack", "NO_TRACK_MESSAGE", "RangeReader", "ReadStats", "media_index_array",
           "open_fsspec", "open_uri", "parse_media_index", "read_media_index", "read_media_index_from",
           "read_track"]
