"""MP4 files of a dataset: their facts for the clips (URI, size, MediaIndex) and the media_index/ table.

Each MP4 is read once (its head and moov, by range reads), whatever the number of episodes in it.
By default each file's MediaIndex is written once, to `OUT/media_index/part-NNNNN.parquet` (one row
per file, sorted by URI, one row group per file so a reader fetches only the rows it needs), and the
episode parts leave `clip.media.index` null (mapping §5, §9).
"""

from __future__ import annotations

import dataclasses
import io
from typing import Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

from transforms import storage
from transforms.episode import spql_types
from transforms.errors import LeRobotImportError
from transforms.episode.clips import VideoFile

MEDIA_INDEX_DIR = "media_index"
#: A media_index part holds files until their indexes reach this many bytes.
SHARD_TARGET_BYTES = 128 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class VideoFacts:
    uri: str
    size: int
    index: Optional[pa.Array]  # length-1 spql.MediaIndex, or None when the codec is not indexed
    requests: int = 0
    bytes_read: int = 0

    def video_file(self, *, inline_index: bool) -> VideoFile:
        return VideoFile(self.uri, self.size, self.index if inline_index else None)


def read_video_file(uri: str, relative: str, *, build_index: bool) -> VideoFacts:
    """Stat an MP4 and, when its declared codec is indexed, read its MediaIndex from the moov."""
    fs, path = storage.filesystem(uri)
    if not build_index:
        return VideoFacts(uri, storage.file_size(uri, what="video file", file=relative), None)
    from transforms.mp4 import media_index
    try:
        result = media_index.read_media_index(fs, path, uri=uri)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            raise LeRobotImportError("file_missing", f"video file {relative} does not exist (expected at {uri})",
                                     file=relative) from None
        ex.file = relative  # name the file as the dataset does; the message keeps the URI
        raise
    except FileNotFoundError:
        raise LeRobotImportError("file_missing", f"video file {relative} does not exist (expected at {uri})",
                                 file=relative) from None
    return VideoFacts(uri, result.size, result.index, result.stats.requests, result.stats.bytes_read)


def media_index_schema() -> pa.Schema:
    return pa.schema([pa.field("uri", pa.utf8(), nullable=False), pa.field("size", pa.uint64(), nullable=False),
                      pa.field("index", spql_types.media_index())])


def assign_shards(sizes: Iterable[tuple[str, int]], target: int = SHARD_TARGET_BYTES) -> dict[str, int]:
    """uri -> part number: URIs in sorted order, a new part when the indexes pass `target` bytes."""
    out, shard, filled = {}, 0, 0
    for uri, nbytes in sorted(sizes):
        if filled and filled + nbytes > target:
            shard, filled = shard + 1, 0
        out[uri] = shard
        filled += nbytes
    return out


def media_index_table(rows: Iterable[tuple[str, int, pa.Array]]) -> pa.Table:
    rows = sorted(rows, key=lambda r: r[0])
    index = pa.concat_arrays([r[2] for r in rows]) if rows else pa.array([], spql_types.media_index())
    return pa.Table.from_arrays([pa.array([r[0] for r in rows], pa.utf8()),
                                 pa.array([r[1] for r in rows], pa.uint64()), index], schema=media_index_schema())


def write_media_index_part(out_root: str, shard: int, rows: Iterable[tuple[str, int, pa.Array]]) -> str:
    rel = f"{MEDIA_INDEX_DIR}/part-{shard:05d}.parquet"
    table = media_index_table(rows)
    final = storage.join(out_root, rel)
    sink = io.BytesIO()  # one write request per part, whatever the Parquet writer's call pattern
    pq.write_table(table, sink, row_group_size=1, compression="zstd", use_compliant_nested_type=False)
    data = sink.getvalue()
    tmp = storage.write_tmp(final, lambda f: f.write(data))
    storage.commit(tmp, final)
    return rel


class WriteMediaIndex(beam.PTransform):
    """(dataset, uri, size, index) -> (dataset, written media_index part path), parts sorted by URI."""

    def __init__(self, config) -> None:
        super().__init__()
        self._config = config

    def expand(self, index_rows):
        config = self._config
        shards = (index_rows
                  | "IndexSizes" >> beam.Map(lambda r: (r[0], (r[1], r[3].nbytes)))
                  | "GroupSizesByDataset" >> beam.GroupByKey()
                  | "AssignShards" >> beam.MapTuple(lambda root, sizes: (root, assign_shards(sizes))))
        return (index_rows
                | "KeyByShard" >> beam.Map(lambda r, a: ((r[0], a[r[0]][r[1]]), (r[1], r[2], r[3])),
                                           a=beam.pvalue.AsDict(shards))
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(_WriteShard(config)))


class _WriteShard(beam.DoFn):
    def __init__(self, config) -> None:
        self._config = config

    def process(self, element) -> Iterator[tuple[str, str]]:
        (root, shard), rows = element
        yield root, write_media_index_part(self._config.output_of(root), shard, rows)


def stale_media_index_parts(out_root: str, keep: Iterable[str]) -> list[str]:
    keep_uris = {storage.join(out_root, k) for k in keep}
    folder = storage.join(out_root, MEDIA_INDEX_DIR)
    found = [storage.join(folder, n) for n in storage.list_dir(folder)
             if (n.startswith("part-") and n.endswith(".parquet")) or (n.startswith(".part-") and storage.TMP_MARK in n)]
    return [u for u in found if u not in keep_uris]
