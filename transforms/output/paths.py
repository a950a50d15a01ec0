"""Every path an import writes, relative to its output root, in one place.

    OUT/episodes/<path under meta/episodes/>                 one Parquet file per episodes file
    OUT/episodes/<stem>.part-NNNN.parquet                     or its ordered parts (read in parts)
    OUT/episodes/chunk-NNN.parquet                            v2.x: one per group (chunk) of episodes
    OUT/media_index/<MP4 folder>.parquet                      one row per MP4 of that dataset folder:
                                                              uri, size, version, MediaIndex
    OUT/quality/<path under meta/episodes/>                  the quality checks' findings of an episodes file
    OUT/quality/dataset.parquet                               and of the dataset as a whole
    OUT/errors.jsonl                                          one JSON object per failure
    OUT/manifest.json                                         what was imported

`media_index/` has one file (a shard) per folder of MP4s, named after the folder's path under the
dataset root: `videos/observation.images.front/chunk-000/file-007.mp4` has its row in
`media_index/videos/observation.images.front/chunk-000.parquet`. A shard's name depends on nothing but
its MP4s' paths, so a run that re-reads a few MP4s rewrites only the shards holding them and leaves every
other shard as it is (same bytes, same mtime); LeRobot caps a chunk folder at `chunks_size` files, which
bounds a shard, and a recording session that appends episodes touches only the last chunk's shards.
Outputs written before this layout (`media_index/part-NNNNN.parquet`, manifests without
`media_index_layout`) are imported again whole, and their old parts removed.

The input side (`meta/info.json`, `meta/episodes/`) belongs to the LeRobot format and lives in
`transforms.lerobot`.
"""

from __future__ import annotations

import posixpath
from typing import Optional

from transforms.base import storage
from transforms.lerobot import layouts

#: Episode parts, mirroring the dataset's `meta/episodes/` tree.
EPISODES_DIR = "episodes"
#: One row per MP4 file with its MediaIndex (the default layout).
MEDIA_INDEX_DIR = "media_index"
MANIFEST = "manifest.json"
ERRORS = "errors.jsonl"
#: The lease a running import holds on its output, and the lock file local leases take it under.
LEASE = ".lease.json"
LEASE_LOCK = LEASE + ".lock"
#: What a run has committed so far, one record per commit (`transforms.episode.journal`).
JOURNAL_DIR = ".journal"
#: The quality checks' findings: one table per episodes file, and the dataset's own.
QUALITY_DIR = "quality"
QUALITY_DATASET = f"{QUALITY_DIR}/dataset.parquet"
#: What an import writes and cleans up under its output root: a dataset placed under one of these
#: would be overwritten or removed by the import itself.
MANAGED = (EPISODES_DIR, MEDIA_INDEX_DIR, MANIFEST, ERRORS, QUALITY_DIR)

def output_part_path(episodes_file: str, part: int, num_parts: int) -> str:
    """`episodes/<path under meta/episodes/>`, with `.part-NNNN` when the file is read in several parts.
    A group of a v2.x dataset's episodes (`meta/episodes.jsonl:chunk-003`) writes `episodes/chunk-003.parquet`."""
    stem = layouts.layout_of(episodes_file).output_stem(episodes_file)
    return f"{EPISODES_DIR}/{stem}.part-{part:04d}.parquet" if num_parts > 1 else f"{EPISODES_DIR}/{stem}.parquet"


def quality_table_path(episodes_file: str) -> str:
    """`quality/<path under meta/episodes/>`: the findings of one episodes file (an episodes file lies in a
    folder under meta/episodes/, so it never meets `quality/dataset.parquet`)."""
    return QUALITY_DIR + output_part_path(episodes_file, 0, 1)[len(EPISODES_DIR):]


def is_part_name(name: str, stem: str) -> bool:
    """`<stem>.part-NNNN.parquet`, compared literally (the stem may hold `*`, `?` or `[`)."""
    if not (name.startswith(stem + ".part-") and name.endswith(".parquet")):
        return False
    number = name[len(stem) + len(".part-"): -len(".parquet")]
    return len(number) >= 4 and number.isdigit()


#: The manifest's `media_index_layout`: shards by MP4 folder, rows carrying each MP4's version.
MEDIA_INDEX_LAYOUT = "mp4-folder/v1"


def media_index_shard_path(video_file: str) -> str:
    """`media_index/<folder of the MP4>.parquet`: the shard holding an MP4's row.

    Args:
        video_file: the MP4's path relative to the dataset root (as the episodes files name it).

    An MP4 at the root has its row in `media_index/_root.parquet`; a folder name starting with `.`
    gets a `_` in front (a leading dot would hide the shard from readers that skip temporaries).
    Two folders mapping to one shard only share it: every step works on the shard's name."""
    folder = posixpath.dirname(video_file.strip("/"))
    parts = [("_" + p if p.startswith(".") else p) for p in folder.split("/") if p] or ["_root"]
    return f"{MEDIA_INDEX_DIR}/{'/'.join(parts)}.parquet"


def placement_problem(dataset_root: str, output_root: str) -> Optional[str]:
    """Why writing an import of `dataset_root` to `output_root` could destroy input, or None.

    An output inside the dataset (or equal to it) would write parts among its files and could
    replace its own episodes files; a dataset inside the output's managed folders would be
    overwritten or removed as stale output."""
    data, out = storage.resolved(dataset_root), storage.resolved(output_root)
    if storage.within(out, data):
        where = "is the dataset root" if out == data else f"is inside the dataset {dataset_root}"
        return (f"the output {output_root} {where}: an import never writes inside its input. "
                "Choose an output folder outside the dataset.")
    if data == out or any(storage.within(data, storage.join(out, m)) for m in MANAGED):
        return (f"the dataset {dataset_root} lies inside the output {output_root}, in a folder the import "
                "writes and cleans up: importing would overwrite or remove it. Choose another output folder.")
    return None
