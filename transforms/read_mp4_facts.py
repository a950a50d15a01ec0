"""The import's MP4 step: read each MP4 a dataset's clips use once, and update the media_index/ shards.

    clip uses + Mp4Version ─► group by MP4 ─► read its head and moov (range reads), or take its row from
                              the old shard when it is unchanged since the last run ─► per part that
                              uses it: the file's facts (URI, size, MediaIndex when inline), or the failure
                            ─► rows read + ShardTouch ─► group by shard ─► rewrite only the shards that
                              gain, change or lose a row

Each MP4 is read once, whatever the number of episodes in it, and not at all when its row is carried.
The table logic itself is pure and lives in `transforms.output.index_shards`.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa

from transforms.base import live_counts, stopping, storage
from transforms import quality
from transforms.output import journal
from transforms.episode import quirks
from transforms.episode.clips import Mp4File
from transforms.episode import spql_types
from transforms.episode.quirks import ClipSpan
from transforms.output.index_shards import (FAILED, MediaIndexRow, ShardOutcome, ShardRows,
                                           update_media_index_shard)
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import hints
from transforms.lerobot.info import INDEXED_CODECS
from transforms.mp4 import arrow as mp4_arrow
from transforms.work.messages import (ClipUse, DatasetReport, Mp4Version, PartInputs,
                                 PartMp4, ShardTouch, VideoFailure, error_record, internal_record, load_info)
from transforms.safety_net import ImportDoFn, ImportStep, counter, guarded, in_phase

_LOG = logging.getLogger(__name__)


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


class Mp4Facts(NamedTuple):
    """What the MP4 step tells the others, keyed for where each goes."""

    to_parts: beam.PCollection  # (part key, PartInputs): the MP4's facts, or why a part using it fails
    reports: beam.PCollection  # (dataset, DatasetReport): media_index shards, MP4 tokens, warnings, unusable MP4s


class ReadMp4Facts(ImportStep):
    """Read every MP4 the clips use, once each, unless its media_index/ row is carried; update the shards.

    Args:
        config: the run's configuration.

    Input: ((dataset, MP4 path), ClipUse), one per part and MP4; or the tuple (those clip uses, ((dataset,
    MP4 path), Mp4Version) from the check step, ((dataset, shard), ShardTouch) from the check step). An
    MP4 without an Mp4Version is read (its row carries no token, so the next run reads it again).
    Returns: `Mp4Facts`. An MP4 whose reading raised unexpectedly fails the parts that use it with rule
    `internal`.
    """

    def expand(self, inputs):
        if isinstance(inputs, tuple):
            clip_uses, versions, touches = inputs
            by_mp4 = (clip_uses, versions) | "WithVersions" >> beam.Flatten()
        else:
            by_mp4, touches = inputs, None
        read = (by_mp4
                | "GroupByMp4" >> beam.GroupByKey()
                | "ReadMp4s" >> guarded(_ReadMp4File(self._config), "index_rows", "reports", main="to_parts"))
        bugs = read.bad | "Mp4Bugs" >> beam.FlatMap(_mp4_bug)
        rows = read.index_rows | "KeyByShard" >> beam.Map(lambda r: ((r.dataset, r.shard), r))
        if touches is not None:
            rows = (rows, touches) | "WithTouches" >> beam.Flatten()
        index_files = rows | "WriteMediaIndex" >> WriteMediaIndex(self._config)
        return Mp4Facts((read.to_parts, bugs) | "Mp4ToParts" >> beam.Flatten(),
                        (read.reports, index_files) | "Mp4Reports" >> beam.Flatten())


class _ReadMp4File(ImportDoFn):
    """((dataset, MP4), its ClipUses and Mp4Version) -> the file's facts for each part, or the failure for
    each part; the row read for media_index/ (not for a carried row); the MP4's token."""

    def setup(self) -> None:
        self._files, self._bytes, self._requests = counter("mp4_files"), counter("mp4_bytes_read"), \
            counter("mp4_read_requests")
        self._carried = counter("media_index_rows_carried")

    def start_bundle(self) -> None:
        self._listings: dict = {}  # folder listings, for the hints of missing files
        self._shards: dict[str, ShardRows] = {}  # per output root: old shards' footers, read once

    @in_phase("plan", lambda element: f"video file {element[0][1]} of dataset {element[0][0]}")
    def process(self, element: tuple[tuple[str, str], Iterable]) -> Iterator:
        (root, rel), values = element
        uses = [v for v in values if isinstance(v, ClipUse)]
        if not uses:
            # An MP4 only unchanged episodes files use: nothing to tell. (A bare `return` alone on its line:
            # Beam reads a `return` followed by anything as a generator returning a value, and warns.)
            return
        known = next((v for v in values if isinstance(v, Mp4Version)), Mp4Version(""))
        first_episode: dict[tuple, int] = {}
        for use in uses:
            first_episode[use.part] = min(use.first_episode, first_episode.get(use.part, use.first_episode))
        build_index = any(u.codec in INDEXED_CODECS for u in uses)
        facts = self._carried_facts(root, rel) if known.carried and build_index else None
        read = facts is None
        try:
            if read:
                facts, reads = read_mp4_file(root, rel, build_index=build_index, declared=uses[0].codec,
                                        listings=self._listings,
                                        other_cameras={u.camera for u in uses} ^ set(_cameras(root)))
        except LeRobotImportError as ex:
            yield from _unusable(root, rel, uses[0].camera, first_episode, ex)
            return
        if read:
            self._files.inc()
            self._bytes.inc(reads.bytes_read)
            live_counts.add(mp4_bytes=reads.bytes_read)
            self._requests.inc(reads.requests)
        mismatch = depth_mismatch(rel, uses, facts.index)
        if mismatch is not None:
            yield from _unusable(root, rel, uses[0].camera, first_episode, mismatch)
            return
        mp4 = facts if self._config.inline_index else facts.without_index()
        for part, samples in sorted(part_samples(rel, facts.index, uses).items()):
            yield part, PartInputs(mp4s=(PartMp4(rel, mp4, samples),))
        if read and facts.index is not None and not self._config.inline_index:
            yield beam.pvalue.TaggedOutput("index_rows", MediaIndexRow.of(root, rel, facts.uri, facts.size, known.token,
                                                                          facts.index))
        report = DatasetReport(warnings=tuple(_file_warnings(root, rel, uses, facts, shared=known.shared)),
                               video_versions=((rel, known.token),) if read else ())
        if report.warnings or report.video_versions:
            yield beam.pvalue.TaggedOutput("reports", (root, report))

    def _carried_facts(self, root: str, rel: str) -> Optional[Mp4File]:
        """The facts of an unchanged MP4 from its row in the old shard (no read of the MP4), or None when
        the row is not there (then the MP4 is read, and its shard rewritten with the row)."""
        if self._config.inline_index:
            return None
        out = self._config.output_of(root)
        shards = self._shards.setdefault(out, ShardRows(out))
        uri = storage.join(root, rel)
        try:
            row = shards.get(root, rel, uri)
        except (OSError, ValueError, pa.ArrowException) as ex:
            _LOG.warning("cannot read the media_index row of %s from the last import (%s); reading the MP4", rel, ex)
            return None
        if row is None:
            return None
        self._carried.inc()
        return Mp4File(row.uri, row.size, row.index, codec=quirks.index_codec(row.index))


def _unusable(root: str, rel: str, camera: str, first_episode: dict[tuple, int], ex: LeRobotImportError) -> Iterator:
    """An MP4 that cannot be used: the error of each part using it (at the part's first episode with the MP4),
    and the MP4 reported unusable."""
    for part in sorted(first_episode):
        failure = LeRobotImportError(ex.rule, ex.message, file=ex.file, episode_index=first_episode[part])
        yield part, PartInputs(failures=(error_record(failure, dataset=root, episodes_file=part[1]),))
    yield beam.pvalue.TaggedOutput("reports", (root, DatasetReport(mp4_failures=(VideoFailure(root, camera, rel,
                                                                                               ex.rule),))))


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
        except mp4_arrow.InvalidMediaIndex as ex:
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


def _mp4_bug(bad) -> Iterator[tuple[tuple, PartInputs]]:
    ((root, rel), values), exc_info = bad
    _LOG.error("reading video file %s of %s failed unexpectedly: %s", rel, root, exc_info[1])
    first: dict[tuple, int] = {}
    for use in values:
        if isinstance(use, ClipUse):
            first[use.part] = min(use.first_episode, first.get(use.part, use.first_episode))
    for part, episode in sorted(first.items()):
        bug = internal_record(exc_info, dataset=root, episodes_file=part[1], file=rel, episode_index=episode)
        yield part, PartInputs(failures=(bug,))


class WriteMediaIndex(ImportStep):
    """((dataset, shard), MediaIndexRow or ShardTouch) -> (dataset, DatasetReport with the ShardOutcome):
    each shard that gains, changes or loses a row is rewritten (its other rows carried from the old file);
    a shard left with no row is reported `emptied` (the finish step removes it).

    Args:
        config: the run's configuration (where each dataset's output goes).
    """

    def expand(self, keyed):
        written = (keyed
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShards" >> guarded(_WriteShard(self._config), main="written"))
        bugs = written.bad | "ShardBugs" >> beam.Map(_shard_bug)
        return (written.written, bugs) | "ShardReports" >> beam.Flatten()


def _shard_bug(bad) -> tuple[str, DatasetReport]:
    """A shard that could not be written fails its dataset (the episode parts still stand); its MP4s are
    left out of the manifest's `video_versions`, so the next run reads them again and rewrites it."""
    ((root, shard), _), exc_info = bad
    _LOG.error("writing media_index shard %s of %s failed unexpectedly: %s", shard, root, exc_info[1])
    return root, DatasetReport(failures=(internal_record(exc_info, dataset=root, episodes_file=None, file=shard),),
                               index_files=(ShardOutcome(shard, FAILED),))


class _WriteShard(ImportDoFn):
    def setup(self) -> None:
        self._written = counter("media_index_shards_written")

    @in_phase("write", lambda element: f"media_index shard {element[0][1]} of dataset {element[0][0]}")
    def process(self, element: tuple[tuple[str, str], Iterable]) -> Iterator[tuple[str, DatasetReport]]:
        (root, shard), values = element
        rows = [v for v in values if isinstance(v, MediaIndexRow)]
        touch = next((v for v in values if isinstance(v, ShardTouch)), None)
        out = self._config.output_of(root)
        with stopping.output_work():
            try:
                outcome = update_media_index_shard(out, shard, rows, touch.keep if touch is not None else None)
            except LeRobotImportError as ex:  # a full disk, a read-only output: the shard fails by that rule
                failure = error_record(ex, dataset=root, episodes_file=None)
                outcome = ShardOutcome(shard, FAILED)
                yield root, DatasetReport(failures=(failure,), index_files=(outcome,))
                return
            if outcome.action in ("written", "emptied"):  # recorded at once, as episodes files are
                journal.record_shard(out, run_id=self._config.run_id, options=self._config.output_options(),
                                      dataset=root, shard=shard, action=outcome.action,
                                      record=outcome.record.to_json() if outcome.record else None,
                                      versions={v.file: v.version for v in values if isinstance(v, MediaIndexRow)})
        if outcome.action == "written":
            self._written.inc()
        yield root, DatasetReport(index_files=(outcome,))
