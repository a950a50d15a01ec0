"""The episode record: the Arrow type of one episode and how raw rows become it. Pure: no Beam.

    spql_types          the spql.* Arrow extension types (Blob, EncodedImage, MediaIndex, ClipRef, ...)
    episode_type        DatasetInfo -> the Arrow type of one episode (episode_schema, frame_type)
    frames              raw data-file rows -> an episode's typed, validated frames
    clips               per camera, each episode's spql.ClipRef into its MP4 and its time_origin
    quirks              warnings: quirks that import fine but matter to readers
    outcomes            a written part, an episodes file's outcome, the failures of a failed file

Where the records go (the output folder: parts, manifest, media_index/ shards, journal) is
`transforms.output`.
"""

from transforms.episode import spql_types
from transforms.episode.clips import Mp4File, videos_column
from transforms.episode.episode_type import episode_schema, frame_type
from transforms.episode.frames import convert_frames, typed_frames
from transforms.episode.outcomes import FileOutcome, PartFile, PartResult, failed_file
from transforms.episode.quirks import ClipSpan, WarningRecord

__all__ = [
    "spql_types",
    "Mp4File", "videos_column",
    "episode_schema", "frame_type",
    "convert_frames", "typed_frames",
    "FileOutcome", "PartFile", "PartResult", "failed_file",
    "ClipSpan", "WarningRecord",
]
