"""LeRobot v2.0 / v2.1 datasets, read as they are: no conversion to v3.0 first.

A v2.x dataset lists its episodes in `meta/episodes.jsonl` (one JSON object per line: `episode_index`,
`tasks`, `length`), its tasks in `meta/tasks.jsonl`, and keeps one data file and one MP4 per camera per
episode, placed by `data_path` / `video_path` with `episode_chunk` (episode_index // chunks_size) and
`episode_index`. This module turns that into the same `EpisodeRow`s a v3.0 episodes file gives, so
everything after planning (typing, clips, MediaIndex, writing, the manifest, the reader) is the v3.0 path:

* the episodes are planned in **groups**, one per chunk folder (`meta/episodes.jsonl:chunk-000`: the
  episodes with episode_index // chunks_size == 0, 1,000 by default), which act as the v3.0 episodes
  files do: each is planned, written, committed, listed in the manifest and re-imported on its own. A
  chunk is LeRobot's own unit of a v2.x dataset: its data files and MP4s share folders (so its MP4s
  share a media_index/ shard), and appending episodes touches only the last chunk;
* an episode's frames are its data file's rows, all of them (`EpisodeRow.whole_file`): the file must
  hold `length` frames (rule `v2_layout`), its `index` consecutive; `from_index`..`to_index` is where
  the episode lies in the dataset's frame order, the running sum of the lengths before it in
  episodes.jsonl (LeRobot v2.x locates an episode's frames so, and its v3.0 converter writes the same
  `dataset_from_index`);
* each camera's clip is the whole of the episode's own MP4 from 0 to `length / fps`. LeRobot's v2.1 ->
  v3.0 converter sets `to_timestamp = from_timestamp + ` the MP4 stream's duration (PyAV's
  `stream.duration * time_base`); its v2.x writer encodes one sample of 1 / fps per frame, so that
  duration is `length / fps` for every MP4 it writes (checked on the corpus), and no LeRobot reader
  locates frames by `to_timestamp` (frames are looked up at from_timestamp + timestamp). Taking
  `length / fps` keeps the clip known at planning, so each MP4 is still read once (its moov, by the MP4
  step) and never before.

Pure: no Beam; reads go through `storage`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import posixpath
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from transforms.base import storage
from transforms.base.errors import LeRobotImportError, quote, shorten
from transforms.lerobot.episodes_files import EpisodeRow, VideoSlice, check_order
from transforms.lerobot.fingerprint import VERSION_KEYS
from transforms.lerobot.info import DatasetInfo, PathTemplate

EPISODES_JSONL = "meta/episodes.jsonl"
TASKS_JSONL = "meta/tasks.jsonl"
#: A group of a v2.x dataset's episodes is named `meta/episodes.jsonl:chunk-NNN` wherever an episodes
#: file is named (errors.jsonl, the manifest, messages).
GROUP_PREFIX = EPISODES_JSONL + ":"
#: episodes.jsonl is read whole: a line takes about 100 bytes, so this is over a million episodes.
MAX_EPISODES_JSONL_BYTES = 256 * 1024 * 1024
#: tasks.jsonl is read whole by the reader.
MAX_TASKS_JSONL_BYTES = 64 * 1024 * 1024
#: A task_index of tasks.jsonl is below this (the data files' task_index column holds it; LeRobot numbers
#: the tasks from 0).
MAX_TASK_INDEX = 2 ** 31
#: One line of episodes.jsonl (LeRobot writes about 100 bytes; a long instruction or many tasks stay far below):
#: a longer line is refused before it is parsed, so one line cannot fill a worker with its task strings.
MAX_EPISODES_LINE_BYTES = 1024 * 1024
#: The tasks one episode may list (LeRobot lists the distinct tasks of its frames: one, or a few).
MAX_TASKS_PER_EPISODE = 1024
#: The frames of a dataset: the running sum of the lengths (where each episode starts in the dataset's frame
#: order) stays exact as an int64 and as a float64 (2**53), whoever reads it.
MAX_TOTAL_FRAMES = 2 ** 53

_SCHEMA = pa.schema([("episode_index", pa.int64()), ("tasks", pa.list_(pa.utf8())), ("length", pa.int64())])


def is_group(episodes_file: str) -> bool:
    """Does an episodes-file name stand for a group of a v2.x dataset's episodes?"""
    return episodes_file.startswith(GROUP_PREFIX)


def group_name(chunk: int) -> str:
    return f"{GROUP_PREFIX}chunk-{chunk:03d}"


def group_output_stem(episodes_file: str) -> str:
    """`chunk-000` for `meta/episodes.jsonl:chunk-000`: the name of the group's output part."""
    return episodes_file[len(GROUP_PREFIX):]


@dataclasses.dataclass(frozen=True)
class V2Episodes:
    """meta/episodes.jsonl, validated line by line, in the file's order."""

    episode_index: np.ndarray  # int64 per line
    length: np.ndarray  # int64 per line
    tasks: tuple[tuple[str, ...], ...]
    start: np.ndarray  # int64 per line: the frames of the episodes before it (the running sum of lengths)
    # groups() by chunks_size, worked out once: every group's rows ask for it (one sort of all episodes)
    _groups: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.episode_index)

    def groups(self, chunks_size: int) -> dict[str, np.ndarray]:
        """Group name -> the lines (positions) of its episodes, in file order; names sorted by chunk (the
        same mapping each call: not to be changed by the caller)."""
        found = self._groups.get(chunks_size)
        if found is None:
            chunk = self.episode_index // chunks_size
            order = np.argsort(chunk, kind="stable")
            values, first = np.unique(chunk[order], return_index=True)
            bounds = list(first[1:]) + [len(order)]
            found = {group_name(int(c)): order[lo:hi] for c, lo, hi in zip(values, first, bounds)}
            self._groups[chunks_size] = found
        return found


def parse_episodes_jsonl(raw: bytes) -> V2Episodes:
    """Validate episodes.jsonl: each non-blank line a JSON object with an integer `episode_index` >= 0, a
    list of strings `tasks` and an integer `length` >= 0 (other keys are LeRobot's or the author's and
    are not read). The first bad line is named.

    Raises:
        LeRobotImportError: rule `episodes_file`, naming the line and what is wrong with it.
    """
    _check_line_lengths(raw)
    table = _fast_parse(raw)
    if table is None:
        table = _slow_parse(raw)
    index = table.column("episode_index").to_numpy().astype(np.int64)
    length = table.column("length").to_numpy().astype(np.int64)
    counts = pa.compute.list_value_length(table.column("tasks")).to_numpy(zero_copy_only=False)
    if len(counts) and counts.max() > MAX_TASKS_PER_EPISODE:
        row = int(np.argmax(counts > MAX_TASKS_PER_EPISODE))
        raise _line_error(_line_of_row(raw, row), f"lists {int(counts[row])} tasks for episode {int(index[row])}, "
                          f"above the {MAX_TASKS_PER_EPISODE} one episode may list (LeRobot lists the distinct "
                          "tasks of its frames)")
    # Each length is below MAX_TOTAL_FRAMES (else the sum is past it at that line), so the running sum cannot
    # wrap before it first passes the bound: the first line past it is found exactly.
    ends = np.cumsum(np.minimum(length, MAX_TOTAL_FRAMES + 1))
    if (ends > MAX_TOTAL_FRAMES).any():
        row = int(np.argmax(ends > MAX_TOTAL_FRAMES))
        raise _line_error(_line_of_row(raw, row), f"has `length` {int(length[row])}, which brings the frames of the "
                          f"episodes up to it past {MAX_TOTAL_FRAMES} (2**53), more than any dataset holds")
    tasks = _task_lists(table.column("tasks"))
    start = np.concatenate([[0], ends[:-1]]).astype(np.int64) if len(length) else length
    return V2Episodes(index, length, tasks, start)


def _task_lists(column: pa.ChunkedArray) -> tuple[tuple[str, ...], ...]:
    """Each line's tasks, one tuple per distinct list, converted a slice of lines at a time: the parse is kept
    (once per worker, `load_episodes`) for the whole run, and the episodes of a dataset list a few distinct
    tasks, so 300,000 lines hold 300,000 references to a handful of tuples, not 300,000 tuples and strings."""
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    lists: list[tuple[str, ...]] = []
    for at in range(0, len(column), TASK_LISTS_SLICE):
        lists.extend(seen.setdefault(t, t) for t in map(tuple, column.slice(at, TASK_LISTS_SLICE).to_pylist()))
    return tuple(lists)


#: Lines of episodes.jsonl whose tasks are converted to Python at once (`_task_lists`).
TASK_LISTS_SLICE = 65536


def _check_line_lengths(raw: bytes) -> None:
    """Refuse a line longer than MAX_EPISODES_LINE_BYTES, before any parse; newlines found block by block
    (vectorised, and no buffer the size of the file beside it)."""
    view = np.frombuffer(raw, np.uint8)
    block = 16 * 1024 * 1024
    line_start, lines = 0, 0  # where the current line starts; the lines ended before it
    for at in range(0, len(view), block):
        ends = np.flatnonzero(view[at:at + block] == 10) + at
        if len(ends):
            longest = np.diff(np.concatenate([[line_start], ends + 1])) - 1
            if longest.max() > MAX_EPISODES_LINE_BYTES:
                _long_line(lines + 1 + int(np.argmax(longest > MAX_EPISODES_LINE_BYTES)))
            lines += len(ends)
            line_start = int(ends[-1]) + 1
    if len(view) - line_start > MAX_EPISODES_LINE_BYTES:
        _long_line(lines + 1)


def _long_line(number: int) -> None:
    raise _line_error(number, f"is longer than {MAX_EPISODES_LINE_BYTES} bytes (LeRobot writes about 100 per "
                      "episode); is a task string or the tasks list damaged?")


def _line_of_row(raw: bytes, row: int) -> int:
    """The line number (from 1) of the `row`-th object (from 0) of episodes.jsonl: blank lines hold none."""
    seen = -1
    for number, line in enumerate(raw.split(b"\n"), 1):
        if line.strip():
            seen += 1
            if seen == row:
                return number
    return row + 1


def _fast_parse(raw: bytes) -> Optional[pa.Table]:
    """Arrow's JSON reader, when every line is as LeRobot writes it; None sends the file to the line-by-line
    parse that names what is wrong."""
    if not raw.strip():
        return pa.table({n: pa.array([], t) for n, t in zip(_SCHEMA.names, _SCHEMA.types)})
    try:
        table = pa_json.read_json(pa.BufferReader(raw), parse_options=pa_json.ParseOptions(
            explicit_schema=_SCHEMA, unexpected_field_behavior="ignore", newlines_in_values=False))
        table = table.select(_SCHEMA.names).combine_chunks()
    except (pa.ArrowException, ValueError, KeyError):
        return None
    if any(c.null_count for c in table.columns) or table.column("tasks").combine_chunks().values.null_count:
        return None
    if (pa.compute.min(table.column("episode_index")).as_py() or 0) < 0 or \
            (pa.compute.min(table.column("length")).as_py() or 0) < 0:
        return None
    return table


def _slow_parse(raw: bytes) -> pa.Table:
    index, length, tasks = [], [], []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as ex:
            raise _line_error(number, f"is not JSON ({shorten(str(ex), 120)})") from None
        if not isinstance(doc, dict):
            raise _line_error(number, "is not a JSON object")
        for key in ("episode_index", "length"):
            value = doc.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 2 ** 62:
                raise _line_error(number, f"has `{key}` {quote(value, 40)}; it must be an integer >= 0")
        value = doc.get("tasks")
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise _line_error(number, f"has `tasks` {quote(value, 80)}; it must be a list of task strings")
        index.append(doc["episode_index"])
        length.append(doc["length"])
        tasks.append(value)
    return pa.table({"episode_index": pa.array(index, pa.int64()), "tasks": pa.array(tasks, pa.list_(pa.utf8())),
                     "length": pa.array(length, pa.int64())})


def _line_error(number: int, what: str) -> LeRobotImportError:
    return LeRobotImportError("episodes_file", f"line {number} of {EPISODES_JSONL} {what}; LeRobot writes one "
                              "object per line: {\"episode_index\": ..., \"tasks\": [...], \"length\": ...}",
                              file=EPISODES_JSONL)


def _token(root: str, rel: str) -> str:
    """What changes when the file is rewritten (size and storage version), "" when it cannot be told."""
    fs, path = storage.filesystem(storage.join(root, rel))
    try:
        detail = storage.with_retries(lambda: fs.info(path))
    except OSError:
        return ""
    version = next((f"{k}={detail[k]}" for k in VERSION_KEYS + ("created",) if detail.get(k) is not None), "")
    return f"{detail.get('size')}:{version}" if version else ""


@functools.lru_cache(maxsize=8)
def _load(root: str, token: str) -> V2Episodes:
    raw = storage.read_bytes(storage.dataset_file(root, EPISODES_JSONL), what="episodes file",
                             file=EPISODES_JSONL, max_bytes=MAX_EPISODES_JSONL_BYTES)
    return parse_episodes_jsonl(raw)


def load_episodes(root: str) -> V2Episodes:
    """meta/episodes.jsonl of a v2.x dataset, read and parsed once per worker while the file is unchanged
    (every group of the dataset planned by a worker takes its lines from the one parse)."""
    token = _token(root, EPISODES_JSONL)
    if not token:
        return _load.__wrapped__(root, token)
    return _load(root, token)


def group_rows(episodes: V2Episodes, info: DatasetInfo, name: str,
               positions: Optional[np.ndarray] = None) -> list[EpisodeRow]:
    """The EpisodeRows of one group, as a v3.0 episodes file's rows: positions 0.. in episodes.jsonl order.

    Raises:
        LeRobotImportError: a path that cannot be rendered, or the group's episodes out of order
            (`episode_order`) or listed twice (`duplicate_episode`), naming the group.
    """
    if positions is None:
        positions = episodes.groups(info.chunks_size).get(name, np.array([], np.int64))
    videos = info.video_features
    fps = info.fps
    rows = []
    for at, line in enumerate(positions.tolist()):
        ep, length, start = int(episodes.episode_index[line]), int(episodes.length[line]), int(episodes.start[line])
        chunk = ep // info.chunks_size
        try:
            data_file = info.data_path.render(episode_chunk=chunk, episode_index=ep)
            slices = tuple(VideoSlice(f.name, info.video_path.render(episode_chunk=chunk, video_key=f.name,
                                                                     episode_index=ep), 0.0, length / fps)
                           for f in videos)
        except LeRobotImportError as ex:
            raise ex.with_context(episode_index=ep, file=EPISODES_JSONL)
        rows.append(EpisodeRow(position=at, episode_index=ep, tasks=episodes.tasks[line], length=length,
                               data_file=data_file, from_index=start, to_index=start + length, videos=slices,
                               whole_file=True))
    check_order(rows, file=name)
    return rows


def group_episode_indices(root: str, info: Optional[DatasetInfo], name: str) -> tuple[int, ...]:
    """The episode_index values of a group that failed, so its episodes are accounted for; () when
    episodes.jsonl itself cannot be read."""
    try:
        episodes = load_episodes(root)
        size = info.chunks_size if info is not None else 1000
        return tuple(int(episodes.episode_index[p]) for p in episodes.groups(size).get(name, ()))
    except (LeRobotImportError, OSError):
        return ()


def group_digest(episodes: V2Episodes, positions: np.ndarray) -> str:
    """The digest of a group's lines (what its output is made from in episodes.jsonl): its episodes, their
    tasks and lengths, and where they start in the dataset's frame order."""
    h = hashlib.sha256()
    for array in (episodes.episode_index[positions], episodes.length[positions], episodes.start[positions]):
        h.update(np.ascontiguousarray(array, np.int64).tobytes())
    h.update(json.dumps([episodes.tasks[p] for p in positions.tolist()]).encode())
    return h.hexdigest()


def listed_sizes(root: str, rows: Sequence[EpisodeRow]) -> dict[str, int]:
    """The sizes of the rows' data files from one listing per folder (a chunk's 1,000 data files cost one
    request, not 1,000); files the listing does not show are left out (asked one by one, which names
    a missing one as any missing data file is named)."""
    folders = sorted({posixpath.dirname(r.data_file) for r in rows})
    fs, base = storage.filesystem(root)
    base = base.rstrip("/")
    sizes: dict[str, int] = {}
    for folder in folders:
        try:
            entries = storage.with_retries(lambda: fs.ls(f"{base}/{folder}" if folder else base, detail=True))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.get("type") == "file" and entry.get("size") is not None:
                name = posixpath.basename(str(entry["name"]).rstrip("/"))
                sizes[f"{folder}/{name}" if folder else name] = int(entry["size"])
    return sizes


@dataclasses.dataclass(frozen=True)
class OwnFile:
    """One of the files each episode of a v2.x group has of its own (its data file, or one camera's MP4),
    as its path template renders it for an episode."""

    what: str  # "data file" or "video file", as the message names it
    template: PathTemplate
    chunks_size: int
    video_key: Optional[str] = None

    def path(self, episode: int) -> str:
        values = {"episode_chunk": episode // self.chunks_size, "episode_index": episode}
        if self.video_key is not None:
            values["video_key"] = self.video_key
        return self.template.render(**values)

    def paths(self, start: int, end: int) -> list[str]:
        """`path(episode)` of the episodes start..end-1, in that order."""
        return self.template.render_many(start, end, self.chunks_size, self.video_key)


class OwnPaths(Sequence[str]):
    """The paths of one or more kinds of a v2.x group's own files (its data files, or its MP4s), sorted and
    distinct as `sources.references` lists them, held as what renders them: the path templates and the
    group's episodes as [start, end) runs. A group's sources cross the pipeline in this form (a few hundred
    bytes, not a path per episode and camera), and the paths are rendered where they are read."""

    def __init__(self, files: Sequence[OwnFile], episodes: Sequence[tuple[int, int]]) -> None:
        self.files = tuple(files)
        self.episodes = tuple((int(a), int(b)) for a, b in episodes)

    @classmethod
    def of(cls, files: Sequence[OwnFile], indices: Sequence[int]) -> "OwnPaths":
        """The paths `files` take for the episodes `indices` (any order, repeats counted once)."""
        values = np.unique(np.asarray(indices, np.int64))
        runs = np.split(values, np.flatnonzero(np.diff(values) != 1) + 1)
        return cls(files, [(int(run[0]), int(run[-1]) + 1) for run in runs if len(run)])

    def _paths(self) -> list[str]:
        return sorted({p for f in self.files for a, b in self.episodes for p in f.paths(a, b)})

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths())

    def __len__(self) -> int:
        return len(self._paths()) if self.files and self.episodes else 0

    def __getitem__(self, k):
        return self._paths()[k]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OwnPaths):
            return (self.files, self.episodes) == (other.files, other.episodes) or tuple(self) == tuple(other)
        return isinstance(other, (tuple, list)) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash((self.files, self.episodes))

    def __repr__(self) -> str:
        return f"OwnPaths({self.files!r}, {self.episodes!r})"

    def __reduce__(self):
        return (OwnPaths, (self.files, self.episodes))


def own_paths(info: DatasetInfo, indices: Sequence[int]) -> tuple[OwnPaths, OwnPaths]:
    """(data files, MP4s) the episodes `indices` of a v2.x dataset own, as `OwnPaths`."""
    data = OwnFile("data file", info.data_path, info.chunks_size)
    videos = [OwnFile("video file", info.video_path, info.chunks_size, f.name) for f in info.video_features]
    return OwnPaths.of([data], indices), OwnPaths.of(videos, indices)


#: A group whose own files spread over more folders than this (a template placing each episode in a folder of
#: its own) is not checked folder by folder: its missing files are found one by one, as they are read.
MAX_OWN_FOLDERS = 64


def left_out_episodes(root: str, rows: Sequence[EpisodeRow], info: DatasetInfo) -> dict[int, tuple]:
    """The rows of a group whose own files lie in folders that do not exist (a chunk folder that is gone, a
    camera's folder never written), by position -> the files each one's errors.jsonl rows name
    (`outcomes.OwnFile`): its missing MP4s, or its data file when none of its MP4s is missing (an episode's
    MP4s are read before its data file, and an MP4 that fails stops it there).

    One request per folder of the group (its data folder and each camera's), not one per file: hundreds of
    thousands of episodes of gone chunk folders are left out at planning, and their failures cross the
    pipeline as one record per group and part. A folder that does not exist but whose first file is found
    elsewhere (a renamed folder: the message says where) is left to the file's reader, which says so
    file by file.
    """
    cameras = [f.name for f in info.video_features]
    data = OwnFile("data file", info.data_path, info.chunks_size)
    videos = {c: OwnFile("video file", info.video_path, info.chunks_size, c) for c in cameras}
    first: dict[str, tuple[str, Optional[str]]] = {}  # folder -> its first file, and the camera it is of
    for row in rows:
        first.setdefault(posixpath.dirname(row.data_file), (row.data_file, None))
        for clip in row.videos:
            first.setdefault(posixpath.dirname(clip.file), (clip.file, clip.key))
        if len(first) > MAX_OWN_FOLDERS:
            return {}
    gone = set()
    for folder, (rel, camera) in first.items():
        if not folder or _folder_exists(root, folder):
            continue
        if camera is not None and _misplaced(root, rel, set(cameras) - {camera}):
            continue
        gone.add(folder)
    if not gone:
        return {}
    out = {}
    for row in rows:
        missing = tuple(videos[c.key] for c in row.videos if posixpath.dirname(c.file) in gone)
        if not missing and posixpath.dirname(row.data_file) in gone:
            missing = (data,)
        if missing:
            out[row.position] = missing
    return out


def _folder_exists(root: str, folder: str) -> bool:
    """Whether a folder of the dataset exists (one request); True when storage cannot tell (its files are then
    read one by one, and each says why it cannot be)."""
    fs, base = storage.filesystem(root)
    try:
        detail = storage.with_retries(lambda: fs.info(f"{base.rstrip('/')}/{folder}"))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return detail.get("type") == "directory"


def _misplaced(root: str, rel: str, other_cameras: set) -> bool:
    from transforms.lerobot import hints
    try:
        return bool(hints.misplaced_hint(root, rel, other_cameras=frozenset(other_cameras)))
    except (OSError, LeRobotImportError):
        return True


def parse_tasks_jsonl(raw: bytes) -> dict[int, str]:
    """meta/tasks.jsonl: task_index -> task (LeRobot v2.x keys its tasks by `task_index`).

    Raises:
        LeRobotImportError: rule `episodes_file`, naming the first line that is not `{"task_index": int,
            "task": str}` with 0 <= task_index < MAX_TASK_INDEX, or a task_index listed twice.
    """
    tasks: dict[int, str] = {}
    lines: dict[int, int] = {}
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            doc: Any = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as ex:
            raise _tasks_error(number, f"is not JSON ({shorten(str(ex), 120)})") from None
        index = doc.get("task_index") if isinstance(doc, dict) else None
        task = doc.get("task") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(task, str):
            raise _tasks_error(number, "is not {\"task_index\": int, \"task\": str}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_TASK_INDEX:
            raise _tasks_error(number, f"has `task_index` {quote(index, 40)}; it must be an integer from 0 to "
                               f"{MAX_TASK_INDEX - 1}")
        if index in tasks:
            raise _tasks_error(number, f"lists task_index {index} again (line {lines[index]} names it first)")
        tasks[index], lines[index] = task, number
    return tasks


def _tasks_error(number: int, what: str) -> LeRobotImportError:
    return LeRobotImportError("episodes_file", f"line {number} of {TASKS_JSONL} {what}; LeRobot writes one task per "
                              "line: {\"task_index\": 0, \"task\": \"...\"}", file=TASKS_JSONL)


#: v3.0's path templates, as LeRobot writes them.
V3_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def layout_problem(root: str, names: Mapping[str, bool], info: Optional[DatasetInfo] = None) -> Optional[str]:
    """Why a dataset whose info.json says v2.x is not laid out as v2.x, or None. `names` says which of
    meta/episodes.jsonl and meta/episodes/ exist. The advice is one that leads to an import: a template
    that still places files by episode (v2.x's placeholders) is named with the v3.0 value to give it."""
    if names.get(EPISODES_JSONL):
        return None
    if names.get("meta/episodes"):
        fix = ['set codebase_version to "v3.0"']
        for template, v3 in ((info.data_path if info else None, V3_DATA_PATH),
                             (info.video_path if info and info.video_features else None, V3_VIDEO_PATH)):
            if template is not None and any(f"{{{name}" in template.template
                                            for name in ("episode_chunk", "episode_index")):
                fix.append(f"{template.key} to {json.dumps(v3)} (its {quote(shorten(template.template, 120))} places "
                           "files by episode, as v2.x does)")
        if len(fix) == 1:
            fix[0] += " (its data_path and video_path already place files by chunk and file, as v3.0 does)"
        return ("its info.json says v2.x, but it has no meta/episodes.jsonl and has meta/episodes/, the v3.0 layout: "
                f"if the files are v3.0, in meta/info.json {', and '.join(fix)}")
    return (f"its info.json says v2.x, but it has no {EPISODES_JSONL}, where a v2.x dataset lists its episodes "
            "(one JSON object per line): is the dataset complete?")
