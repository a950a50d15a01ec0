"""Reading an MP4's facts, without Beam: its head and moov read once (range reads), or its row taken from the
old media_index/ shard when it is unchanged since the last run; per part that uses it, the file's facts
(URI, size, MediaIndex when inline) and its sample times around the part's clips, or the failure.
`ReadMp4Facts` hands each worker's `Mp4FactsReader` the MP4s and their clip uses.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Mapping, Optional

import pyarrow as pa

from transforms import quality
from transforms.base import live_counts, storage
from transforms.base.errors import LeRobotImportError
from transforms.episode import quirks, spql_types
from transforms.episode.clips import Mp4File
from transforms.episode.quirks import ClipSpan
from transforms.lerobot import hints
from transforms.lerobot.info import INDEXED_CODECS
from transforms.mp4 import arrow
from transforms.output.index_shards import MediaIndexRow, ShardRows
from transforms.work.counted import Counted
from transforms.work.messages import (ShardRow, ClipUse, DatasetReport, ImportConfig, Mp4Version, PartInputs, PartMp4,
                                      VideoFailure, error_record, load_info)

_LOG = logging.getLogger(__name__)

#: What an MP4 reader counts (each an object with `inc(n)`: Beam's counters in a pipeline).
COUNTERS = ("mp4_files", "mp4_bytes_read", "mp4_read_requests", "media_index_rows_carried")


@dataclasses.dataclass(frozen=True)
class Mp4Result:
    """What one MP4 tells the other steps."""

    to_parts: tuple[tuple[tuple[str, str, int], PartInputs], ...] = ()  # per part: the facts, or why it fails
    index_row: Optional[ShardRow] = None  # the row read for media_index/ (not for a carried row), with its output
    report: Optional[DatasetReport] = None  # warnings, the MP4's token, or the MP4 unusable


class Mp4FactsReader(Counted):
    """Reads MP4s as one worker does, counting what it reads (`COUNTERS`): folder listings (for the hints of
    missing files) and the old shards' footers are kept until `new_bundle`."""

    COUNTERS = COUNTERS

    def __init__(self, config: ImportConfig, counters: Mapping) -> None:
        super().__init__(config, counters)
        self.new_bundle()

    def new_bundle(self) -> None:
        self._listings: dict = {}  # folder listings, for the hints of missing files
        self._shards: dict[str, ShardRows] = {}  # per output root: old shards' footers, read once

    def read(self, root: str, rel: str, values: Iterable) -> Mp4Result:
        """The facts of one MP4 of a dataset for every part using it.

        Args:
            root: the dataset root URI.
            rel: the MP4, relative to the root.
            values: its ClipUses (one per part) and, when the check step knows it, its Mp4Version.
        """
        values = list(values)
        uses = [v for v in values if isinstance(v, ClipUse)]
        if not uses:  # an MP4 only unchanged episodes files use: nothing to tell
            return Mp4Result()
        known = next((v for v in values if isinstance(v, Mp4Version)), Mp4Version(""))
        first_episode: dict[tuple, int] = {}
        for use in uses:
            first_episode[use.part] = min(use.first_episode, first_episode.get(use.part, use.first_episode))
        build_index = any(u.codec in INDEXED_CODECS for u in uses)
        facts = self._carried_facts(root, rel, known.output) if known.carried and build_index else None
        read = facts is None
        try:
            if read:
                facts, reads = read_mp4_file(root, rel, build_index=build_index, declared=uses[0].codec,
                                             listings=self._listings,
                                             other_cameras={u.camera for u in uses} ^ set(_cameras(root)))
        except LeRobotImportError as ex:
            return _unusable(root, rel, uses[0].camera, first_episode, ex)
        if read:
            self._counters["mp4_files"].inc()
            self._counters["mp4_bytes_read"].inc(reads.bytes_read)
            live_counts.add(mp4_bytes=reads.bytes_read)
            self._counters["mp4_read_requests"].inc(reads.requests)
        mismatch = depth_mismatch(rel, uses, facts.index)
        if mismatch is not None:
            return _unusable(root, rel, uses[0].camera, first_episode, mismatch)
        mp4 = facts if self._config.inline_index else facts.without_index()
        to_parts = tuple((part, PartInputs(mp4s=(PartMp4(rel, mp4, samples),)))
                         for part, samples in sorted(part_samples(rel, facts.index, uses).items()))
        row = None
        if read and facts.index is not None and not self._config.inline_index:
            row = ShardRow(MediaIndexRow.of(root, rel, facts.uri, facts.size, known.token, facts.index), uses[0].output)
        report = DatasetReport(warnings=tuple(_file_warnings(root, rel, uses, facts, shared=known.shared)),
                               video_versions=((rel, known.token),) if read else ())
        return Mp4Result(to_parts, row, report if report.warnings or report.video_versions else None)

    def _carried_facts(self, root: str, rel: str, out: str) -> Optional[Mp4File]:
        """The facts of an unchanged MP4 from its row in the old shard of output `out` (no read of the MP4), or
        None when the row is not there (then the MP4 is read, and its shard rewritten with the row)."""
        if self._config.inline_index:
            return None
        shards = self._shards.setdefault(out, ShardRows(out))
        uri = storage.join(root, rel)
        try:
            row = shards.get(root, rel, uri)
        except (OSError, ValueError, pa.ArrowException) as ex:
            _LOG.warning("cannot read the media_index row of %s from the last import (%s); reading the MP4", rel, ex)
            return None
        if row is None:
            return None
        self._counters["media_index_rows_carried"].inc()
        return Mp4File(row.uri, row.size, row.index, codec=quirks.index_codec(row.index))


def read_mp4_file(root: str, relative: str, *, build_index: bool, declared: Optional[str] = None,
                  listings: Optional[dict] = None, other_cameras: Iterable[str] = ()
                  ) -> tuple[Mp4File, storage.ReadCounter]:
    """Stat an MP4 and, when its declared codec is indexed, read its MediaIndex from the moov; with what the
    reads cost.

    Args:
        root: the dataset root URI.
        relative: the MP4, relative to the root.
        build_index: read the moov (the declared codec is one the MediaIndex covers).
        declared: the codec info.json declares for the file's camera (named when the track differs).
        listings: folder listings kept by the caller, to say where a missing file is.
        other_cameras: the dataset's other camera keys (their folders are never where a missing file is).
    Raises:
        LeRobotImportError: the file is missing (saying where it is, when it is nearby) or unusable.
    """
    uri = storage.dataset_file(root, relative)
    try:
        if not build_index:
            return Mp4File(uri, storage.file_size(uri, what="video file", file=relative)), storage.ReadCounter()
        return _read_index(uri, relative, declared)
    except FileNotFoundError:
        raise _missing(root, relative, uri, listings, other_cameras) from None
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            raise _missing(root, relative, uri, listings, other_cameras) from None
        raise


def _read_index(uri: str, relative: str, declared: Optional[str]) -> tuple[Mp4File, storage.ReadCounter]:
    from transforms.mp4 import media_index
    fs, path = storage.filesystem(uri)
    try:
        result = media_index.read_media_index(fs, path, uri=uri, declared=declared)
    except LeRobotImportError as ex:
        ex.file = relative  # name the file as the dataset does; the message keeps the URI
        raise
    reads = storage.ReadCounter(requests=result.stats.requests, bytes_read=result.stats.bytes_read)
    codec = getattr(result, "codec", None) or quirks.index_codec(result.index)
    return Mp4File(uri, result.size, result.index, codec), reads


def _missing(root: str, relative: str, uri: str, listings: Optional[dict],
             other_cameras: Iterable[str]) -> LeRobotImportError:
    try:
        hint = hints.misplaced_hint(root, relative, listings, other_cameras=frozenset(other_cameras))
    except (OSError, LeRobotImportError):
        hint = ""
    return LeRobotImportError("file_missing", f"video file {relative} does not exist (expected at {uri}){hint}",
                              file=relative)


def _cameras(root: str) -> tuple[str, ...]:
    """The dataset's camera keys (info.json is read once per worker); () when it cannot be read."""
    try:
        return tuple(f.name for f in load_info(root).video_features)
    except LeRobotImportError:
        return ()


def _unusable(root: str, rel: str, camera: str, first_episode: dict[tuple, int], ex: LeRobotImportError
              ) -> Mp4Result:
    """An MP4 that cannot be used: the error of each part using it (at the part's first episode with the MP4),
    and the MP4 reported unusable."""
    to_parts = []
    for part in sorted(first_episode):
        failure = LeRobotImportError(ex.rule, ex.message, file=ex.file, episode_index=first_episode[part])
        to_parts.append((part, PartInputs(failures=(error_record(failure, dataset=root, episodes_file=part[1]),))))
    return Mp4Result(tuple(to_parts), report=DatasetReport(mp4_failures=(VideoFailure(root, camera, rel, ex.rule),)))


def _index_picture(index: Optional[pa.Array]):
    """The pictures of a MediaIndex's primary video track (`mp4.picture.PictureFormat`: planes, bit depth), from
    its sample entry; None without an index or when the entry does not say."""
    from transforms.mp4.picture import picture_format
    if index is None or len(index) == 0 or not index.is_valid()[0].as_py():
        return None
    value = spql_types.storage_of(index).slice(0, 1)
    fields = dict(zip((f.name for f in value.type), value.flatten()))
    primary = fields["primary_track_id"][0].as_py()
    tracks = dict(zip((f.name for f in fields["tracks"].type.value_type), fields["tracks"].flatten().flatten()))
    for k, track_id in enumerate(tracks["track_id"].to_pylist()):
        if track_id == primary:
            return picture_format(tracks["sample_entry"][k].as_py(), tracks["codec"][k].as_py())
    return None


def depth_mismatch(rel: str, uses: list[ClipUse], index: Optional[pa.Array]) -> Optional[LeRobotImportError]:
    """The error when info.json and the MP4 disagree on whether the camera is a depth map: a depth camera's MP4
    must hold one-plane pictures of more than 8 bits (LeRobot's depth encoder writes gray12le), a colour
    camera's must not (its frames would be read as colour, or as depth, and a policy would train on them).
    None when they agree, or the MP4's sample entry does not say.

    Args:
        rel: the MP4, relative to the dataset root.
        uses: the clips of the MP4 (their camera and whether info.json declares it a depth map).
        index: the MP4's MediaIndex (None: not read, nothing to compare).
    """
    fmt = _index_picture(index)
    if fmt is None or not uses:
        return None
    camera, depth = uses[0].camera, uses[0].depth
    if depth and not fmt.is_depth_encoding:
        return LeRobotImportError(
            "depth_mismatch", f"feature `{camera}` is declared a depth map (info.json `is_depth_map: true`) but its "
            f"video file {rel} holds {fmt.describe()}, not depth codes (LeRobot's depth encoder writes one-plane "
            "12-bit gray12le HEVC): re-encode the depth frames with LeRobot's depth encoder, or set `is_depth_map` "
            "to false if the camera is a colour camera", file=rel)
    if not depth and fmt.is_depth_encoding:
        return LeRobotImportError(
            "depth_mismatch", f"feature `{camera}` is declared a colour camera (info.json has no `is_depth_map: "
            f"true` for it) but its video file {rel} holds {fmt.describe()}, a depth encoding: add "
            "`\"is_depth_map\": true` and its quantization (`video.depth_min`, `video.depth_max`, `video.shift`, "
            "`video.use_log`) to the feature's `info` in meta/info.json", file=rel)
    return None


def part_samples(rel: str, index: Optional[pa.Array], uses: Iterable[ClipUse]) -> dict:
    """Per part using an MP4: the file's sample times around that part's clips, for its quality checks
    (None for every part when the file has no usable index: its cameras are then not checked).

    Args:
        rel: the MP4, relative to the dataset root.
        index: its MediaIndex (length-1 array), or None.
        uses: the parts' clips in it.
    """
    by_part: dict[tuple, list] = {}
    fps = None
    for use in uses:
        by_part.setdefault(use.part, []).extend(use.clips)
        fps = fps or use.fps
    times = None
    if index is not None:
        try:
            times = quality.presentation_timeline(index)
        except arrow.InvalidMediaIndex as ex:
            _LOG.warning("the MediaIndex of %s is not usable for the quality checks (%s)", rel, ex)
    if times is None:
        return {part: None for part in by_part}
    return {part: quality.sample_window(rel, times[0], times[1], *quality.clips_window(clips, fps), timescale=times[2])
            for part, clips in by_part.items()}


def _file_warnings(root: str, rel: str, uses: list[ClipUse], facts: Mp4File, *, shared: bool = False) -> list:
    """Quirks of one MP4 that import fine: clips off its frame timeline, another codec than declared.

    When episodes files this run leaves alone have clips in the MP4 too (`shared`), the clips seen are
    checked against each other from the first of them on: the frames before it belong to clips not seen
    (whose own warnings the last run recorded and the manifest keeps)."""
    spans = [c for use in uses for c in use.clips]
    fps = uses[0].fps
    if shared and spans and fps and fps > 0:
        first = min(spans, key=lambda c: (c.from_timestamp, c.episode_index))
        before = ClipSpan(first.episodes_file, -1, 0.0, first.from_timestamp, round(first.from_timestamp * fps))
        spans.append(before)  # stands for the clips not seen: the frames before the first one seen
    out = [w for w in quirks.start_drift_warnings(root, rel, spans, fps) if w.episode_index != -1]
    codec = quirks.codec_warning(root, rel, uses[0].camera, uses[0].codec, facts.codec)
    return out + ([codec] if codec else [])
