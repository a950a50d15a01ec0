"""The import's MP4 step: read each MP4 a dataset's clips use once, and write the media_index/ table.

    clip uses ─► group by MP4 ─► read its head and moov (range reads) ─► per part that uses it:
                                 the file's facts (URI, size, MediaIndex when inline), or the failure
                               ─► (dataset, uri, size, MediaIndex) ─► media_index/ parts, by URI

Each MP4 is read once, whatever the number of episodes in it. The table logic itself is pure and
lives in `transforms.episode.media_index_table`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Iterator, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa

from transforms import storage
from transforms.episode import quirks
from transforms.episode.clips import VideoFile
from transforms.episode.media_index_table import assign_shards, write_media_index_part
from transforms.episode.paths import media_index_part_path
from transforms.errors import LeRobotImportError
from transforms.lerobot import hints
from transforms.lerobot.info import INDEXED_CODECS
from transforms.messages import (ClipUse, DatasetReport, ImportConfig, MediaIndexRow, PartInputs, PartVideo,
                                 VideoFailure, error_record, internal_record)
from transforms.safety_net import counter, guarded

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class VideoFacts:
    """What reading one MP4 learnt: where it is, its size, its MediaIndex and video codec (when the
    declared codec is indexed), and what the reads cost."""

    uri: str
    size: int
    index: Optional[pa.Array]  # length-1 spql.MediaIndex, or None when the codec is not indexed
    reads: storage.ReadCounter = dataclasses.field(default_factory=storage.ReadCounter)
    codec: Optional[str] = None  # the video track's codec as found in the file, when known

    def video_file(self, *, inline_index: bool) -> VideoFile:
        return VideoFile(self.uri, self.size, self.index if inline_index else None)


def read_video_file(root: str, relative: str, *, build_index: bool, declared: Optional[str] = None,
                    listings: Optional[dict] = None) -> VideoFacts:
    """Stat an MP4 and, when its declared codec is indexed, read its MediaIndex from the moov.

    Args:
        root: the dataset root URI.
        relative: the MP4, relative to the root.
        build_index: read the moov (the declared codec is one the MediaIndex covers).
        declared: the codec info.json declares for the file's camera (named when the track differs).
        listings: folder listings kept by the caller, to say where a missing file is.
    Raises:
        LeRobotImportError: the file is missing (saying where it is, when it is nearby) or unusable.
    """
    uri = storage.dataset_file(root, relative)
    try:
        if not build_index:
            return VideoFacts(uri, storage.file_size(uri, what="video file", file=relative), None)
        return _read_index(uri, relative, declared)
    except FileNotFoundError:
        raise _missing(root, relative, uri, listings) from None
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            raise _missing(root, relative, uri, listings) from None
        raise


def _read_index(uri: str, relative: str, declared: Optional[str]) -> VideoFacts:
    from transforms.mp4 import media_index
    fs, path = storage.filesystem(uri)
    try:
        result = media_index.read_media_index(fs, path, uri=uri, declared=declared)
    except LeRobotImportError as ex:
        ex.file = relative  # name the file as the dataset does; the message keeps the URI
        raise
    reads = storage.ReadCounter(requests=result.stats.requests, bytes_read=result.stats.bytes_read)
    codec = getattr(result, "codec", None) or quirks.index_codec(result.index)
    return VideoFacts(uri, result.size, result.index, reads, codec)


def _missing(root: str, relative: str, uri: str, listings: Optional[dict]) -> LeRobotImportError:
    try:
        hint = hints.misplaced_hint(root, relative, listings)
    except (OSError, LeRobotImportError):
        hint = ""
    return LeRobotImportError("file_missing", f"video file {relative} does not exist (expected at {uri}){hint}",
                              file=relative)


class Mp4Facts(NamedTuple):
    """What the MP4 step tells the others, keyed for where each goes."""

    to_parts: beam.PCollection  # (part key, PartInputs): the MP4's facts, or why a part using it fails
    reports: beam.PCollection  # (dataset, DatasetReport): media_index parts, warnings, unusable MP4s


class ReadMp4Facts(beam.PTransform):
    """Read every MP4 the clips use, once each; write the media_index/ table.

    Args:
        config: the run's configuration.

    Input: ((dataset, MP4 path), ClipUse), one per part and MP4. Returns: `Mp4Facts`. An MP4 whose
    reading raised unexpectedly fails the parts that use it with rule `internal`.
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, clip_uses):
        read = (clip_uses
                | "GroupByMp4" >> beam.GroupByKey()
                | "ReadMp4s" >> guarded(_ReadMp4File(self._config), "index_rows", "reports", main="to_parts"))
        bugs = read.bad | "Mp4Bugs" >> beam.FlatMap(_mp4_bug)
        index_files = read.index_rows | "WriteMediaIndex" >> WriteMediaIndex(self._config)
        return Mp4Facts((read.to_parts, bugs) | "Mp4ToParts" >> beam.Flatten(),
                        (read.reports, index_files) | "Mp4Reports" >> beam.Flatten())


class _ReadMp4File(beam.DoFn):
    """((dataset, MP4), its ClipUses) -> the file's facts for each part, or the failure for each part."""

    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def setup(self) -> None:
        self._files, self._bytes, self._requests = counter("mp4_files"), counter("mp4_bytes_read"), \
            counter("mp4_read_requests")

    def start_bundle(self) -> None:
        self._listings: dict = {}  # folder listings, for the hints of missing files

    def process(self, element: tuple[tuple[str, str], Iterable[ClipUse]]) -> Iterator:
        (root, rel), uses = element
        uses = list(uses)
        first_episode: dict[tuple, int] = {}
        for use in uses:
            first_episode[use.part] = min(use.first_episode, first_episode.get(use.part, use.first_episode))
        try:
            facts = read_video_file(root, rel, build_index=any(u.codec in INDEXED_CODECS for u in uses),
                                    declared=uses[0].codec, listings=self._listings)
        except LeRobotImportError as ex:
            for part in sorted(first_episode):
                failure = LeRobotImportError(ex.rule, ex.message, file=ex.file, episode_index=first_episode[part])
                yield part, PartInputs(failures=(error_record(failure, dataset=root, episodes_file=part[1]),))
            unusable = VideoFailure(root, uses[0].camera, rel, ex.rule)
            yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(mp4_failures=(unusable,))))
            return
        self._files.inc()
        self._bytes.inc(facts.reads.bytes_read)
        self._requests.inc(facts.reads.requests)
        inputs = PartInputs(videos=(PartVideo(rel, facts.video_file(inline_index=self._config.inline_index)),))
        for part in sorted(first_episode):
            yield part, inputs
        if facts.index is not None and not self._config.inline_index:
            yield beam.pvalue.TaggedOutput("index_rows", MediaIndexRow(root, facts.uri, facts.size, facts.index))
        warnings = _file_warnings(root, rel, uses, facts)
        if warnings:
            yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(warnings=tuple(warnings))))


def _file_warnings(root: str, rel: str, uses: list[ClipUse], facts: VideoFacts) -> list:
    """Quirks of one MP4 that import fine: clips off its frame timeline, another codec than declared."""
    spans = [c for use in uses for c in use.clips]
    out = quirks.start_drift_warnings(root, rel, spans, uses[0].fps)
    codec = quirks.codec_warning(root, rel, uses[0].camera, uses[0].codec, facts.codec)
    return out + ([codec] if codec else [])


def _mp4_bug(bad) -> Iterator[tuple[tuple, PartInputs]]:
    ((root, rel), uses), exc_info = bad
    _LOG.error("reading video file %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    first: dict[tuple, int] = {}
    for use in uses:
        first[use.part] = min(use.first_episode, first.get(use.part, use.first_episode))
    for part, episode in sorted(first.items()):
        bug = internal_record(exc_info, dataset=root, episodes_file=part[1], file=rel, episode_index=episode)
        yield part, PartInputs(failures=(bug,))


class WriteMediaIndex(beam.PTransform):
    """MediaIndexRow -> (dataset, DatasetReport naming the part written): each dataset's rows in parts by URI.

    Args:
        config: the run's configuration (where each dataset's output goes).
    """

    def __init__(self, config: ImportConfig) -> None:
        super().__init__()
        self._config = config

    def expand(self, index_rows):
        shards = (index_rows
                  | "IndexSizes" >> beam.Map(lambda r: (r.dataset, (r.uri, r.index_bytes)))
                  | "GroupSizesByDataset" >> beam.GroupByKey()
                  | "AssignShards" >> beam.MapTuple(lambda root, sizes: (root, assign_shards(sizes))))
        written = (index_rows
                   | "KeyByShard" >> beam.Map(lambda r, a: ((r.dataset, a[r.dataset][r.uri]), r),
                                              a=beam.pvalue.AsDict(shards))
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShards" >> guarded(_WriteShard(self._config), main="written"))
        bugs = written.bad | "ShardBugs" >> beam.Map(_shard_bug)
        return (written.written, bugs) | "ShardReports" >> beam.Flatten()


def _shard_bug(bad) -> tuple[str, DatasetReport]:
    """A media_index part that could not be written fails its dataset (the episode parts still stand)."""
    ((root, shard), _), exc_info = bad
    _LOG.error("writing media_index part %d of %s failed unexpectedly: %s", shard, root, exc_info[1])
    return root, DatasetReport(failures=(internal_record(exc_info, dataset=root, episodes_file=None,
                                                         file=media_index_part_path(shard)),))


class _WriteShard(beam.DoFn):
    def __init__(self, config: ImportConfig) -> None:
        self._config = config

    def process(self, element: tuple[tuple[str, int], Iterable[MediaIndexRow]]) -> Iterator[tuple[str, DatasetReport]]:
        (root, shard), rows = element
        written = write_media_index_part(self._config.output_of(root), shard, [(r.uri, r.size, r.index) for r in rows])
        yield root, DatasetReport(index_files=(written,))
