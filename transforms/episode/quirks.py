"""Quirks that import fine but matter to whoever reads the import: each is a `WarningRecord`, listed in
the manifest's `warnings` and counted in its totals, never an error.

    clip_end_short   a clip ends before its episode's last frame ends: to_timestamp is short of
                     from_timestamp + length / fps (often by exactly one frame: `(length - 1) / fps`)
    start_drift      a clip starts more than half a frame away from where the frames before it in its
                     MP4 end, so frame i of the episode is not the MP4's frame at from_timestamp + i / fps
    codec_mismatch   an MP4's video track holds another codec than info.json declares for its camera
    oversized_episode  an episode's frames alone take more than the part limit: it is a part of its own
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa

from transforms.episode import spql_types
from transforms.lerobot.episodes_files import EpisodeRow, PartPlan

#: warning id -> what it means; the id is what a manifest warning's `what` holds.
WARNINGS: dict[str, str] = {
    "clip_end_short": "a clip ends before its episode's last frame ends (to_timestamp < from_timestamp + length / fps)",
    "start_drift": "a clip starts more than half a frame away from where the frames before it in its MP4 end",
    "codec_mismatch": "an MP4's video track holds another codec than info.json declares for its camera",
    "oversized_episode": "an episode's frames alone take more than the part limit, so it is written as a part alone",
}

#: Sample-entry codes of an MP4 video track -> the codec names info.json uses.
CODEC_FAMILIES = {"avc1": "h264", "avc3": "h264", "h264": "h264", "hvc1": "hevc", "hev1": "hevc", "hevc": "hevc",
                  "h265": "hevc", "av01": "av1", "av1": "av1", "vp09": "vp9", "vp9": "vp9", "mp4v": "mpeg4",
                  "mpeg4": "mpeg4"}
#: Differences below this many seconds are float noise in timestamps written as float32/float64.
_EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class WarningRecord:
    """One entry of the manifest's `warnings`: where, what, and by how much."""

    dataset: str
    episodes_file: Optional[str]
    episode_index: Optional[int]
    file: Optional[str]
    what: str
    by: str
    message: str

    def sort_key(self) -> tuple:
        return (self.episodes_file or "", -1 if self.episode_index is None else self.episode_index,
                self.file or "", self.what, self.message)

    def to_json(self) -> dict[str, Any]:
        """The manifest entry (the dataset is the manifest's own)."""
        return {"episodes_file": self.episodes_file, "episode_index": self.episode_index, "file": self.file,
                "what": self.what, "by": self.by, "message": self.message}


@dataclasses.dataclass(frozen=True)
class ClipSpan:
    """One episode's clip in an MP4, as its episodes file declares it."""

    episodes_file: str
    episode_index: int
    from_timestamp: float
    to_timestamp: float
    length: int


def _frames(seconds: float, fps: float) -> str:
    n = f"{seconds * fps:.3g}"
    return f"{n} frame" + ("" if n in ("1", "-1") else "s")


def clip_end_warnings(dataset: str, episodes_file: str, rows: Sequence[EpisodeRow],
                      fps: Optional[float]) -> list[WarningRecord]:
    """One `clip_end_short` warning per camera of an episodes file whose clips end more than half a frame
    before their episode's last frame ends, with how many do (on real data it is every episode, by the
    same frame: a warning each would bury the others).

    What it says is what holds: the declared clip end is short, but no frame is lost. Readers (this
    import's and LeRobot's) find each frame at from_timestamp + timestamp and read an episode's frames
    past to_timestamp (`transforms.reader.seek`); only a reader that stops at to_timestamp would miss them.

    Args:
        dataset: the dataset root URI.
        episodes_file: the episodes file the rows come from.
        rows: its validated rows.
        fps: info.json's frame rate (no warnings without one).
    """
    if not fps or fps <= 0:
        return []
    short_clips: dict[str, list[tuple[EpisodeRow, Any, float]]] = {}
    clips_of: dict[str, int] = {}
    for row in rows:
        for clip in row.videos:
            clips_of[clip.key] = clips_of.get(clip.key, 0) + 1
            short = clip.from_timestamp + row.length / fps - clip.to_timestamp
            if short > 0.5 / fps + _EPSILON:
                short_clips.setdefault(clip.key, []).append((row, clip, short))
    out = []
    for key, found in short_clips.items():
        row, clip, short = found[0]
        frames = {_frames(s, fps) for _, _, s in found}
        most = max(s for _, _, s in found)
        by = (f"{short:.6g} s ({_frames(short, fps)})" if len(frames) == 1
              else f"up to {most:.6g} s ({_frames(most, fps)})")
        expected = clip.from_timestamp + row.length / fps
        one_frame = frames == {"1 frame"}
        why = (" (to_timestamp = from_timestamp + (length - 1) / fps: the last frame's start, not its end)"
               if one_frame else "")
        episodes = "every episode" if len(found) == clips_of[key] else f"{len(found)} of {clips_of[key]} episodes"
        out.append(WarningRecord(
            dataset, episodes_file, row.episode_index, clip.file, "clip_end_short", by,
            f"camera `{key}`: the clips of {episodes} end {by} before the episode's last frame ends{why}; "
            f"first: episode {row.episode_index} ends its clip at {clip.to_timestamp:.6g} s, its frames at "
            f"{clip.from_timestamp:.6g} + {row.length} / {fps:g} = {expected:.6g} s. No frame is lost: readers find "
            "each frame at from_timestamp + timestamp and read the episode's frames past to_timestamp; only a "
            "reader that stops at to_timestamp would miss them"))
    return out


def start_drift_warnings(dataset: str, file: str, clips: Iterable[ClipSpan],
                         fps: Optional[float]) -> list[WarningRecord]:
    """A `start_drift` warning per clip of one MP4 that starts more than half a frame away from where the
    frames of the clips before it end (clips in time order; the first should start at 0).

    Args:
        dataset: the dataset root URI.
        file: the MP4, relative to the dataset root.
        clips: every clip the dataset's episodes files declare in this MP4.
        fps: info.json's frame rate (no warnings without one).
    """
    if not fps or fps <= 0:
        return []
    out = []
    frames_before = 0
    for clip in sorted(clips, key=lambda c: (c.from_timestamp, c.episode_index)):
        expected = frames_before / fps
        drift = clip.from_timestamp - expected
        if abs(drift) > 0.5 / fps + _EPSILON:
            out.append(WarningRecord(
                dataset, clip.episodes_file, clip.episode_index, file, "start_drift",
                f"{drift:+.6g} s ({_frames(drift, fps)})",
                f"episode {clip.episode_index}: its clip starts at {clip.from_timestamp:.6g} s of {file}, but the "
                f"{frames_before} frames before it in that file end at {expected:.6g} s: off by {drift:+.6g} s "
                f"({_frames(drift, fps)}), so its frames are not the file's frames at from_timestamp + i / fps"))
        frames_before += clip.length
    return out


def codec_family(codec: Optional[str]) -> Optional[str]:
    """A codec name or MP4 sample-entry code as info.json names codecs (`avc1` -> `h264`)."""
    if not codec:
        return None
    code = codec.strip().lower()
    return CODEC_FAMILIES.get(code, code)


def index_codec(index: Optional[pa.Array]) -> Optional[str]:
    """The codec of a MediaIndex's primary video track (`h264`, `h265`, `av1`), None without an index."""
    if index is None or len(index) == 0 or not index.is_valid()[0].as_py():
        return None
    value = spql_types.storage_of(index).slice(0, 1)
    fields = dict(zip((f.name for f in value.type), value.flatten()))  # children cut to the slice
    primary = fields["primary_track_id"][0].as_py()
    tracks = dict(zip((f.name for f in fields["tracks"].type.value_type), fields["tracks"].flatten().flatten()))
    # only the two small fields are turned into Python, never the sample tables
    for track_id, codec in zip(tracks["track_id"].to_pylist(), tracks["codec"].to_pylist()):
        if track_id == primary:
            return codec
    return None


def codec_warning(dataset: str, file: str, camera: str, declared: Optional[str],
                  actual: Optional[str]) -> Optional[WarningRecord]:
    """A `codec_mismatch` warning when the MP4's track holds another codec than info.json declares.

    Args:
        dataset: the dataset root URI.
        file: the MP4, relative to the dataset root.
        camera: the video feature the MP4 belongs to.
        declared: info.json's `video.codec` for the camera.
        actual: the codec found in the MP4 (its sample-entry code or name), None when not known.
    """
    if actual is None or declared is None or codec_family(declared) == codec_family(actual):
        return None
    found = actual if codec_family(actual) == actual.lower() else f"{actual} ({codec_family(actual)})"
    return WarningRecord(dataset, None, None, file, "codec_mismatch", f"declared {declared}, found {found}",
                         f"camera `{camera}`: info.json declares video.codec {declared}, but the video track of "
                         f"{file} is {found}; decoders should trust the file")


def oversized_episode_warnings(dataset: str, episodes_file: str, rows: Sequence[EpisodeRow],
                               parts: Sequence[PartPlan]) -> list[WarningRecord]:
    """An `oversized_episode` warning per episode whose frames alone take more than the part limit: it is
    written as a part of its own (which a reader reads whole to reach any of its frames).

    Args:
        dataset: the dataset root URI.
        episodes_file: the episodes file the rows come from.
        rows: its validated rows.
        parts: its planned parts."""
    by_position = {r.position: r for r in rows}
    out = []
    for plan in parts:
        if not plan.oversized:
            continue
        row = by_position[plan.positions[0]]
        out.append(WarningRecord(
            dataset, episodes_file, row.episode_index, row.data_file, "oversized_episode", f"{plan.data_bytes} bytes",
            f"episode {row.episode_index} takes about {plan.data_bytes:,} bytes of its data file, more than the "
            f"{plan.limit:,} bytes of a part: it is written alone, as part {plan.part}"))
    return out
