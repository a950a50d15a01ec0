"""The episode record: what an import writes, and where. Pure: no Beam.

    spql_types          the spql.* Arrow extension types (Blob, EncodedImage, MediaIndex, ClipRef, ...)
    episode_type        DatasetInfo -> the Arrow type of one episode (episode_schema, frame_type)
    frames              raw data-file rows -> an episode's typed, validated frames
    clips               per camera, each episode's spql.ClipRef into its MP4 and its time_origin
    quirks              warnings: quirks that import fine but matter to readers
    outcomes            a written part, an episodes file's outcome, the failures of a failed file
    output              parts, errors.jsonl and manifest.json, written atomically
    media_index_table   the media_index/ table (one row per MP4 with its MediaIndex)
    damage              the parts and shards of an output no longer as its manifest records them
    paths               every path an import writes, relative to its output root
"""

from transforms.episode import paths, spql_types
from transforms.episode.clips import VideoFile, videos_column
from transforms.episode.episode_type import episode_schema, frame_type
from transforms.episode.frames import convert_frames, typed_frames
from transforms.episode.media_index_table import media_index_table, update_media_index_shard
from transforms.episode.outcomes import FileOutcome, PartFile, PartResult, failed_file
from transforms.episode.output import commit_episodes_file, errors_jsonl, manifest, parquet_bytes, part_table
from transforms.episode.paths import (ERRORS, EPISODES_DIR, MANIFEST, MEDIA_INDEX_DIR, media_index_shard_path,
                                      output_part_path, placement_problem)
from transforms.episode.quirks import ClipSpan, WarningRecord

__all__ = [
    "paths", "spql_types",
    "VideoFile", "videos_column",
    "episode_schema", "frame_type",
    "convert_frames", "typed_frames",
    "media_index_table", "update_media_index_shard",
    "FileOutcome", "PartFile", "PartResult", "failed_file",
    "commit_episodes_file", "errors_jsonl", "manifest", "parquet_bytes", "part_table",
    "ERRORS", "EPISODES_DIR", "MANIFEST", "MEDIA_INDEX_DIR", "media_index_shard_path", "output_part_path",
    "placement_problem",
    "ClipSpan", "WarningRecord",
]
