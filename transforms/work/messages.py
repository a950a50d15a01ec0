"""The run's configuration and the small typed elements that flow between the import's steps.

Keys are tuples of primitives (deterministic coders): a dataset is its root URI, an episodes file
`(root, episodes file)`, a part `(root, episodes file, part number)`, an MP4 `(root, MP4 path)`. A dataset
enters the import with its output root (`(root, output root)`, as `ImportConfig.targets` pairs them), and
every element a step needs to write with carries that output root on: no step looks it up.
Values are frozen records holding paths, ranges and results, never more data than one episode's
frames. What a step receives from several others is one record type whose fields are tuples
(`PartInputs`, `FileInputs`, `DatasetReport`): each sender fills the field it knows, and the receiver
merges everything sent to one key. The records that outlive the pipeline (part results, file outcomes,
warnings) belong to the episode record package (`transforms.episode.outcomes`, `.quirks`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable, Optional


from transforms.episode.clips import Mp4File
from transforms.output.incremental import KeptFile
from transforms.output.sinks import DEFAULT_SINK
from transforms.output.index_shards import MediaIndexRow, ShardOutcome, ShardRecord
from transforms.episode.outcomes import EpisodeFailures, FileOutcome, PartResult
from transforms.episode.quirks import ClipSpan, WarningRecord
from transforms.lerobot.fingerprint import Fingerprint
from transforms.lerobot.sources import EpisodesFileSources
from transforms.lerobot.dataset import read_info
from transforms.lerobot.info import DatasetInfo
from transforms.lerobot.episodes_files import DATA_SPAN_LIMIT, EpisodeRow, PartPlan
from transforms.base.errors import FailureRecord, LeRobotImportError, rule_of_repr
from transforms.quality import Finding, SampleTimes
from transforms.base.run_limits import RunLimits

#: Internal messages longer than this are cut: an exception's text can hold a whole input.
MAX_MESSAGE_CHARS = 2000


@dataclasses.dataclass(frozen=True)
class ImportConfig:
    """What one pipeline run imports and how; pickled into every DoFn."""

    targets: tuple[tuple[str, str], ...]  # (dataset root URI, output root URI)
    one_part: bool = False  # the reference's one part per episodes file (else ordered parts)
    data_span_limit: int = DATA_SPAN_LIMIT
    inline_index: bool = False
    skip_videos: bool = False
    force: bool = False  # redo datasets whose last import is up to date
    verify_output: bool = False  # the up-to-date check compares the output's sha256s too (not sizes only)
    run_id: str = ""
    started_at: str = ""
    strict: frozenset[str] = frozenset()  # the quality checks whose findings fail their episodes files
    limits: RunLimits = RunLimits()  # each phase's deadline, the Hub listings' bounds
    sink: str = DEFAULT_SINK  # where the episodes go (`transforms.output.sinks.SINKS`)

    def output_options(self) -> dict:
        """The options that change what an import writes (a previous import with others is not reused).
        `--strict` is one when given: which episodes files fail depends on it."""
        options = {"one_part": self.one_part, "data_span_limit": self.data_span_limit,
                   "inline_index": self.inline_index, "skip_videos": self.skip_videos}
        if self.strict:
            options["strict"] = sorted(self.strict)
        return options


@functools.lru_cache(maxsize=64)
def _load_info_cached(root: str, skip_videos: bool) -> DatasetInfo:
    return read_info(root, skip_videos=skip_videos)


def load_info(root: str, *, skip_videos: bool = False) -> DatasetInfo:
    """info.json of a dataset, read and parsed once per worker process (as the dataset checks read it)."""
    return _load_info_cached(root, skip_videos)


@dataclasses.dataclass(frozen=True)
class PartHeader:
    """Everything the part writer needs besides frames and MP4 facts."""

    dataset: str
    episodes_file: str
    plan: PartPlan
    num_parts: int
    rows: tuple[EpisodeRow, ...]
    output: str  # the dataset's output root
    #: v2.x: the part's episodes left out at planning (their own files lie in folders that do not exist), one
    #: record for all of them; they are in `plan` but not in `rows`, and go on to the file's commit as failed
    episode_failures: tuple[EpisodeFailures, ...] = ()


@dataclasses.dataclass(frozen=True)
class ClipUse:
    """The clips one part has in one MP4: what the MP4's reader needs to answer that part."""

    part: tuple[str, str, int]  # the part's key
    camera: str
    codec: Optional[str]  # as info.json declares it
    fps: Optional[float]  # info.json's frame rate
    clips: tuple[ClipSpan, ...]
    depth: bool = False  # info.json declares the camera a depth map (`is_depth_map`)
    output: str = ""  # the dataset's output root (its media_index/ shards; "" where nothing is written)

    @property
    def first_episode(self) -> int:
        return min(c.episode_index for c in self.clips)


@dataclasses.dataclass(frozen=True)
class PartMp4:
    """What a part's writer learns of one MP4 it uses."""

    file: str  # relative to the dataset root
    mp4: Mp4File
    samples: Optional[SampleTimes] = None  # its sample times around the part's clips (for the quality checks)


@dataclasses.dataclass(frozen=True)
class Mp4Version:
    """What the check step knows of an MP4 an imported episodes file uses, sent to the MP4's reader:
    its storage token when listed, whether its media_index/ row is carried (unchanged since the last
    run: the row is taken from the old shard instead of reading the MP4), and whether episodes files this
    run leaves alone have clips in it too (`shared`: the clips the MP4's step sees are not all of them)."""

    token: str
    carried: bool = False
    shared: bool = False
    output: str = ""  # the dataset's output root (where the carried row's shard is)


@dataclasses.dataclass(frozen=True)
class ReadRows:
    """The validated rows of an episodes file the check step read, going with it to planning. One record,
    so a shuffle pickles it at once: a bare tuple of rows is pickled row by row."""

    rows: tuple[EpisodeRow, ...]


@dataclasses.dataclass(frozen=True)
class ShardTouch:
    """A media_index shard this run may change: the URIs whose old rows stay in it (the others go, or are
    replaced by the rows read this run)."""

    keep: frozenset[str]
    output: str  # the dataset's output root


@dataclasses.dataclass(frozen=True)
class ShardRow:
    """A media_index/ row read this run, going to its shard's writer with the output root it is written to."""

    row: MediaIndexRow
    output: str


@dataclasses.dataclass(frozen=True)
class VideoFailure:
    """An MP4 that could not be used, kept per dataset so the manifest says once what to do about it."""

    dataset: str
    camera: str
    file: str
    rule: str
    #: how many MP4s of the camera it stands for, `file` the first of them: the MP4s of episodes left out at
    #: planning (their folder does not exist) are reported one record per folder
    count: int = 1


class _Merged:
    """A record whose fields are tuples: many of them, each holding a few values, merge into one.

    The steps send each other such records keyed by who receives them (a part, an episodes file, a
    dataset); the receiver groups them by key and merges them into everything it was told."""

    @classmethod
    def merge(cls, records: Iterable):
        fields = {f.name: [] for f in dataclasses.fields(cls)}
        for record in records:
            for name, values in fields.items():
                values.extend(getattr(record, name))
        return cls(**{name: tuple(values) for name, values in fields.items()})


def output_root(outputs: Iterable[str], what: str) -> str:
    """The one output root merged records name (`FileInputs.outputs`, `DatasetReport.outputs`).

    Raises:
        LeRobotImportError: none names one (rule `internal`: a step dropped it), naming `what`.
    """
    found = set(outputs)
    if len(found) != 1:
        raise LeRobotImportError("internal", f"{what}: {len(found)} output roots reached it ({sorted(found)}), "
                                 "not one; please report it")
    return found.pop()


@dataclasses.dataclass(frozen=True)
class PartInputs(_Merged):
    """What a part's writer is told: its plan, the facts of the MP4s it uses, or why it cannot be written."""

    headers: tuple[PartHeader, ...] = ()
    mp4s: tuple[PartMp4, ...] = ()
    failures: tuple[FailureRecord, ...] = ()


@dataclasses.dataclass(frozen=True)
class FileQuality:
    """The quality checks' summary of one episodes file whose frames were read, for the manifest."""

    episodes_file: str
    checks_json: str  # `quality.summarize` of its findings, JSON
    table: str  # its quality table, relative to the output root


@dataclasses.dataclass(frozen=True)
class CommittedFile:
    """An episodes file the part writer committed as its last part was written: how it ended."""

    outcome: FileOutcome
    quality: FileQuality


@dataclasses.dataclass(frozen=True)
class FileInputs(_Merged):
    """What an episodes file's commit is told: its parts' results and the duplicates that fail it, or that
    the part writer committed it already."""

    results: tuple[PartResult, ...] = ()
    duplicates: tuple[FailureRecord, ...] = ()
    findings: tuple[Finding, ...] = ()  # what the quality checks found in its parts
    sources: tuple[EpisodesFileSources, ...] = ()  # what its import is made from (recorded as it commits)
    committed: tuple[CommittedFile, ...] = ()  # committed by the writer of its last part
    outputs: tuple[str, ...] = ()  # the dataset's output root, as each sender knows it


@dataclasses.dataclass(frozen=True)
class FileCounts:
    """What an episodes file lists, as planning read it: for the dataset's totals against info.json."""

    episodes_file: str
    episodes: int
    frames: int  # the sum of its episodes' lengths
    episode_ranges: tuple[tuple[int, int], ...]  # its episode indices as [start, end) runs


@dataclasses.dataclass(frozen=True)
class DatasetReport(_Merged):
    """What a dataset's finish step is told by the others."""

    sources: tuple[Optional[Fingerprint], ...] = ()  # one per dataset imported: its fingerprint (or None)
    failures: tuple[FailureRecord, ...] = ()  # failures of the dataset as a whole
    outcomes: tuple[FileOutcome, ...] = ()  # one per episodes file
    warnings: tuple[WarningRecord, ...] = ()
    index_files: tuple[ShardOutcome, ...] = ()  # what this run did with each media_index shard it touched
    index_kept: tuple[ShardRecord, ...] = ()  # the shards of the last run (those not touched stay as they are)
    video_versions: tuple[tuple[str, str], ...] = ()  # (MP4, token) of every MP4 carried or read this run
    mp4_failures: tuple[VideoFailure, ...] = ()  # MP4s that could not be used
    file_sources: tuple[EpisodesFileSources, ...] = ()  # per episodes file: what its import is made from
    kept: tuple[KeptFile, ...] = ()  # episodes files left unchanged or removed by this run
    file_counts: tuple[FileCounts, ...] = ()  # per episodes file planned: what it lists
    quality: tuple[FileQuality, ...] = ()  # per episodes file checked: its findings' summary
    notes: tuple[str, ...] = ()  # dataset-level notes for the manifest (what the run found damaged and repairs)
    outputs: tuple[str, ...] = ()  # the dataset's output root (from the check step)


def error_record(ex: LeRobotImportError, *, dataset: str, episodes_file: Optional[str]) -> FailureRecord:
    """The errors.jsonl row of an error, with the dataset and episodes file it was met in."""
    return ex.with_context(dataset=dataset, episodes_file=episodes_file).to_record()


def internal_record(exc_info: tuple, *, dataset: str, episodes_file: Optional[str], file: Optional[str] = None,
                    episode_index: Optional[int] = None) -> FailureRecord:
    """The errors.jsonl row of an unexpected exception (exc_info as Beam's safety net reports it)."""
    if isinstance(exc_info[1], LeRobotImportError):  # a rule met where no step expected it: still that rule
        return exc_info[1].with_context(dataset=dataset, episodes_file=episodes_file, file=file,
                                        episode_index=episode_index).to_record()
    named = rule_of_repr(exc_info[0], str(exc_info[1]))  # the same, handed on by Beam as type and repr
    if named is not None:
        return FailureRecord(dataset, episodes_file, episode_index, file, named[0], named[1])
    text = str(exc_info[1])
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + f"... ({len(text) - MAX_MESSAGE_CHARS} more characters)"
    return FailureRecord(dataset, episodes_file, episode_index, file, "internal",
                         f"[internal] unexpected error, please report it: {text}")
