"""Every path an import writes, relative to its output root, in one place.

    OUT/episodes/<path under meta/episodes/>                 one Parquet file per episodes file
    OUT/episodes/<stem>.part-NNNN.parquet                     or its ordered parts (read in parts)
    OUT/media_index/part-NNNNN.parquet                        one row per MP4: uri, size, MediaIndex
    OUT/errors.jsonl                                          one JSON object per failure
    OUT/manifest.json                                         what was imported

The input side (`meta/info.json`, `meta/episodes/`) belongs to the LeRobot format and lives in
`transforms.lerobot`.
"""

from __future__ import annotations

from typing import Optional

from transforms import storage

#: Episode parts, mirroring the dataset's `meta/episodes/` tree.
EPISODES_DIR = "episodes"
#: One row per MP4 file with its MediaIndex (the default layout).
MEDIA_INDEX_DIR = "media_index"
MANIFEST = "manifest.json"
ERRORS = "errors.jsonl"
#: What an import writes and cleans up under its output root: a dataset placed under one of these
#: would be overwritten or removed by the import itself.
MANAGED = (EPISODES_DIR, MEDIA_INDEX_DIR, MANIFEST, ERRORS)

_INPUT_EPISODES_DIR = "meta/episodes"


def output_part_path(episodes_file: str, part: int, num_parts: int) -> str:
    """`episodes/<path under meta/episodes/>`, with `.part-NNNN` when the file is read in several parts."""
    prefix = _INPUT_EPISODES_DIR + "/"
    rel = episodes_file[len(prefix):] if episodes_file.startswith(prefix) else episodes_file
    if num_parts > 1:
        stem = rel[: -len(".parquet")] if rel.endswith(".parquet") else rel
        rel = f"{stem}.part-{part:04d}.parquet"
    return f"{EPISODES_DIR}/{rel}"


def is_part_name(name: str, stem: str) -> bool:
    """`<stem>.part-NNNN.parquet`, compared literally (the stem may hold `*`, `?` or `[`)."""
    if not (name.startswith(stem + ".part-") and name.endswith(".parquet")):
        return False
    number = name[len(stem) + len(".part-"): -len(".parquet")]
    return len(number) >= 4 and number.isdigit()


def media_index_part_path(shard: int) -> str:
    return f"{MEDIA_INDEX_DIR}/part-{shard:05d}.parquet"


def is_media_index_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


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
