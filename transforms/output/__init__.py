"""The output folder: what an import writes where, and what it reads back of it. Pure: no Beam.

    paths               every path an import writes, relative to its output root
    writes              parts, errors.jsonl and manifest.json, written atomically
    safety              the output's own state read back without trust: confinement, the manifest's checks
    index_shards        the media_index/ shards (one row per MP4 with its MediaIndex) and the re-run decision
    journal             what a run has committed, and the parts still being written (resume after a stop)
    damage              the parts and shards of an output no longer as its manifest records them
    lease               a lease on an output root, so that overlapping runs never write one output
"""

from transforms.output import paths
from transforms.output.index_shards import media_index_table, update_media_index_shard
from transforms.output.paths import (ERRORS, EPISODES_DIR, MANIFEST, MEDIA_INDEX_DIR, media_index_shard_path,
                                     output_part_path, placement_problem)
from transforms.output.writes import commit_episodes_file, errors_jsonl, manifest, parquet_bytes, part_table

__all__ = [
    "paths",
    "media_index_table", "update_media_index_shard",
    "commit_episodes_file", "errors_jsonl", "manifest", "parquet_bytes", "part_table",
    "ERRORS", "EPISODES_DIR", "MANIFEST", "MEDIA_INDEX_DIR", "media_index_shard_path", "output_part_path",
    "placement_problem",
]
