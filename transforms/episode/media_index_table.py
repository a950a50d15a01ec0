"""The media_index/ table: one row per MP4 file (uri, size, spql.MediaIndex), sorted by URI.

By default each file's MediaIndex is written once, here, and the episode parts leave
`clip.media.index` null: a reader joins the index back by the clip's URI. Rows are spread over parts
of about `SHARD_TARGET_BYTES` of indexes, in URI order, one row group per file so a reader fetches
only the rows it needs.
"""

from __future__ import annotations

import io
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from transforms import storage
from transforms.episode import paths, spql_types

#: A media_index part holds files until their indexes reach this many bytes.
SHARD_TARGET_BYTES = 128 * 1024 * 1024


def media_index_schema() -> pa.Schema:
    return pa.schema([pa.field("uri", pa.utf8(), nullable=False), pa.field("size", pa.uint64(), nullable=False),
                      pa.field("index", spql_types.media_index())])


def assign_shards(sizes: Iterable[tuple[str, int]], target: int = SHARD_TARGET_BYTES) -> dict[str, int]:
    """uri -> part number: URIs in sorted order, a new part when the indexes pass `target` bytes.

    Args:
        sizes: (uri, bytes of its MediaIndex) of every MP4 of a dataset.
        target: the bytes of indexes a part holds before the next one starts.
    """
    out, shard, filled = {}, 0, 0
    for uri, nbytes in sorted(sizes):
        if filled and filled + nbytes > target:
            shard, filled = shard + 1, 0
        out[uri] = shard
        filled += nbytes
    return out


def media_index_table(rows: Iterable[tuple[str, int, pa.Array]]) -> pa.Table:
    """(uri, size, length-1 spql.MediaIndex array) rows -> the table, sorted by URI."""
    rows = sorted(rows, key=lambda r: r[0])
    index = pa.concat_arrays([r[2] for r in rows]) if rows else pa.array([], spql_types.media_index())
    return pa.Table.from_arrays([pa.array([r[0] for r in rows], pa.utf8()),
                                 pa.array([r[1] for r in rows], pa.uint64()), index], schema=media_index_schema())


def write_media_index_part(out_root: str, shard: int, rows: Iterable[tuple[str, int, pa.Array]]) -> str:
    """Write one media_index part atomically; returns its path relative to `out_root`."""
    rel = paths.media_index_part_path(shard)
    table = media_index_table(rows)
    final = storage.join(out_root, rel)
    sink = io.BytesIO()  # one write request per part, whatever the Parquet writer's call pattern
    pq.write_table(table, sink, row_group_size=1, compression="zstd", use_compliant_nested_type=False)
    data = sink.getvalue()
    tmp = storage.write_tmp(final, lambda f: f.write(data))
    storage.commit(tmp, final)
    return rel


def stale_media_index_parts(out_root: str, keep: Iterable[str]) -> list[str]:
    """media_index parts (and their temporaries) under `out_root` that this run did not write.

    Args:
        out_root: the dataset's output root.
        keep: the parts this run wrote, relative to `out_root`.
    """
    keep_uris = {storage.join(out_root, k) for k in keep}
    folder = storage.join(out_root, paths.MEDIA_INDEX_DIR)
    found = [storage.join(folder, n) for n in storage.list_dir(folder)
             if paths.is_media_index_part(n) or (n.startswith(".part-") and storage.TMP_MARK in n)]
    return [u for u in found if u not in keep_uris]
