"""What each episodes file's import is made from, in one digest per episodes file, so a scheduled run
imports only the episodes files whose sources changed, removes the output of those that are gone and
leaves the rest alone.

An episodes file's output is a function of: what the import uses of `meta/info.json` (features, path
templates, codebase version, fps; not the totals, which change whenever episodes are appended), the
episodes file itself, every data file and MP4 its rows reference, and the options that change what an
import writes. Each
file is known by its size and the version storage gives it (GCS generation, local mtime, S3 ETag, ...),
so one listing of the dataset's `meta/`, `data/` and `videos/` trees is all it takes to fingerprint
every episodes file whose references are already known. The references themselves (which data files
and MP4s the rows name) only change when info.json, the episodes file or the options do; a previous
manifest records them with that `basis`, and only episodes files whose basis changed are read again.

Pure: no Beam.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import posixpath
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import fsspec

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import v2
from transforms.lerobot.episodes_files import EpisodeRow, read_episodes_file
from transforms.lerobot.fingerprint import SOURCE_DIRS, VERSION_KEYS
from transforms.lerobot.info import META_EPISODES_DIR, INFO_JSON_MAX_BYTES, INFO_PATH, DatasetInfo, parse_info

#: Listing keys that change when an object is rewritten; `created` is all the in-memory store gives.
_VERSION_KEYS = VERSION_KEYS + ("created",)
#: The decisions: what a run does with an episodes file.
IMPORT, UNCHANGED, REMOVED = "import", "unchanged", "removed"
#: Manifest statuses of an episodes file whose output is complete and current for its recorded sources.
GOOD_STATUSES = ("imported", "unchanged")
#: The status a run gives, in the manifest it decides from, an episodes file whose output it found damaged
#: (`transforms.output.damage`): imported again, for `DAMAGED_REASON`.
DAMAGED, DAMAGED_REASON = "damaged", "output damaged"
#: Episodes files fetched at once from an object store.
READ_THREADS = 16


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One file of the dataset as the listing shows it: size and the version storage gives."""

    size: int
    version: str

    @property
    def token(self) -> str:
        """What changes when the file is rewritten (`size:version`)."""
        return f"{self.size}:{self.version}"


def version_of(detail: Mapping[str, Any]) -> str:
    """The first rewrite-sensitive key of a listing entry (`generation=...`, `mtime=...`), plus a local
    symlink's target, or "" when storage gives none (then only the size is compared)."""
    version = next((f"{k}={detail[k]}" for k in _VERSION_KEYS if detail.get(k) is not None), "")
    if detail.get("islink") and detail.get("destination"):
        version += f";->{detail['destination']}"
    return version


@dataclasses.dataclass(frozen=True)
class SourceListing:
    """Every file under a dataset's `meta/`, `data/` and `videos/`, by path relative to the root.

    A referenced file the listing does not show (a folder reached through a local symlink is not
    walked) is asked of storage once, so it is either found or known to be missing."""

    root: str
    files: Mapping[str, SourceFile]
    _extra: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # folder -> does it exist: a folder the listing shows is known; any other is asked of storage once
    _folders: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def get(self, rel: str) -> Optional[SourceFile]:
        """The file at `rel`, or None when it does not exist. Every file of a folder that does not exist is
        missing without a request of its own (a v2.x chunk folder that is gone names hundreds of
        thousands of files: one request for the folder, not one per file)."""
        found = self.files.get(rel)
        if found is not None:
            return found
        if rel not in self._extra:
            folder = posixpath.dirname(rel)
            if folder and not self._folder_exists(folder):
                return None
            self._extra[rel] = _stat(self.root, rel)
        return self._extra[rel]

    def _folder_exists(self, folder: str) -> bool:
        if not self._folders:
            for rel in self.files:
                parent = posixpath.dirname(rel)
                while parent and parent not in self._folders:
                    self._folders[parent] = True
                    parent = posixpath.dirname(parent)
            self._folders[""] = True
        if folder not in self._folders:
            parent = posixpath.dirname(folder)
            self._folders[folder] = self._folder_exists(parent) and _is_folder(self.root, folder)
        return self._folders[folder]

    def token(self, rel: str) -> str:
        found = self.get(rel)
        return found.token if found is not None else "missing"

    def size(self, rel: str) -> int:
        found = self.get(rel)
        return found.size if found is not None else 0

    def episodes_files(self) -> tuple[str, ...]:
        """`meta/episodes/<chunk>/<name>.parquet`, sorted: the episodes files an import lists."""
        prefix = META_EPISODES_DIR + "/"
        return tuple(sorted(p for p in self.files if p.startswith(prefix) and p.endswith(".parquet")
                            and p[len(prefix):].count("/") == 1))


def _stat(root: str, rel: str) -> Optional[SourceFile]:
    fs, path = storage.filesystem(storage.join(root, rel))
    try:
        detail = storage.with_retries(lambda: fs.info(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if detail.get("type") == "directory":
        return None
    return SourceFile(int(detail.get("size") or 0), version_of(detail))


def _is_folder(root: str, rel: str) -> bool:
    fs, path = storage.filesystem(storage.join(root, rel))
    try:
        detail = storage.with_retries(lambda: fs.info(path))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return detail.get("type") == "directory"


def list_sources(root: str) -> SourceListing:
    """One listing of the dataset's source trees (a missing tree is simply empty).

    Args:
        root: the dataset root, a local path or fsspec URL.
    Returns:
        The listing, paths relative to the root.
    """
    fs, base = storage.filesystem(root)
    base = base.rstrip("/")
    files: dict[str, SourceFile] = {}
    for folder in SOURCE_DIRS:
        try:
            found = storage.with_retries(lambda: fs.find(f"{base}/{folder}", detail=True))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for path, detail in found.items():
            if detail.get("type") == "directory" or not path.startswith(base + "/"):
                continue
            files[path[len(base) + 1:]] = SourceFile(int(detail.get("size") or 0), version_of(detail))
    return SourceListing(storage.normalize_root(root), files)


@dataclasses.dataclass(frozen=True)
class EpisodesFileSources:
    """Everything one episodes file's import is made from, digested.

    `digest` changes when any source changes: info.json's content, the episodes file, a referenced data
    file or MP4 (size or version, or it appearing or disappearing), or an output option. `basis` is
    the digest of what the references were read from (info.json, the episodes file, the options): while
    it holds, `data_files` and `video_files` are still the files the rows name."""

    episodes_file: str
    digest: str
    data_files: tuple[str, ...]
    video_files: tuple[str, ...]
    data_bytes: int  # sizes of the distinct data files referenced (a missing one counts 0)
    basis: str = ""
    problem: Optional[str] = None  # why the rows could not be read: the import will fail and say so
    rows: Optional[tuple[EpisodeRow, ...]] = dataclasses.field(default=None, compare=False, repr=False)

    def to_manifest(self, *, rendered: bool = True) -> dict[str, Any]:
        """What the manifest records for this episodes file, so the next run can decide without reading it.
        `rendered=False`: a v2.x group's paths stay held as what renders them (`v2.OwnPaths`), for a writer
        that renders them one entry at a time as it writes it (`writes.write_manifest`)."""
        def listed(paths: Sequence[str]) -> Sequence[str]:
            return paths if not rendered and isinstance(paths, v2.OwnPaths) else list(iter(paths))
        return {"source_digest": self.digest, "source_basis": self.basis,
                "source_data_files": listed(self.data_files), "source_video_files": listed(self.video_files)}


def missing_source(src: EpisodesFileSources, listing: SourceListing, root: str) -> Optional[LeRobotImportError]:
    """The first data file or MP4 an episodes file's rows reference that the dataset's listing does not
    hold, as the error its import would fail with (an MP4's says `--skip-videos` imports without clips);
    None when every one is there. Costs nothing beyond the listing a plan has already made."""
    for rel in src.data_files:
        if listing.get(rel) is None:
            return LeRobotImportError("file_missing", f"data file {rel} does not exist (expected at "
                                      f"{storage.join(root, rel)})", file=rel)
    for rel in src.video_files:
        if listing.get(rel) is None:
            return LeRobotImportError("file_missing", f"video file {rel} does not exist (expected at "
                                      f"{storage.join(root, rel)}){_misplaced(root, rel, src.video_files)}, so the "
                                      "episodes using it cannot be imported with their clips; --skip-videos imports "
                                      "the dataset without its video features", file=rel)
    return None


def _misplaced(root: str, rel: str, videos: Sequence[str]) -> str:
    """Where a missing MP4 is, as the import's own message says it (`hints`): the other cameras' folders
    (the second folder of the other MP4s' paths) are never taken for it."""
    from transforms.lerobot import hints
    own = rel.split("/")
    others = {v.split("/")[1] for v in videos if v.count("/") > 1} - set(own)
    try:
        return hints.misplaced_hint(root, rel, other_cameras=others)
    except (OSError, LeRobotImportError):
        return ""


def basis_digest(listing: SourceListing, info: Optional[str], episodes_file: str,
                 options: Mapping[str, Any]) -> str:
    """The digest of what an episodes file's references are read from: the options, `info_digest` (None
    when there is no info.json) and the episodes file's own size and version."""
    lines = [f"options\t{json.dumps(dict(options), sort_keys=True)}", f"info\t{info or 'missing'}",
             f"episodes\t{episodes_file}\t{listing.token(episodes_file)}"]
    return _sha256(lines)


def episodes_file_sources(listing: SourceListing, episodes_file: str, basis: str, data_files: Iterable[str],
                          video_files: Iterable[str], *, problem: Optional[str] = None,
                          rows: Optional[Sequence[EpisodeRow]] = None) -> EpisodesFileSources:
    """Digest an episodes file's sources from its basis and the current listing of its references."""
    data, videos = tuple(sorted(set(data_files))), tuple(sorted(set(video_files)))
    lines = [f"basis\t{basis}"]
    lines += [f"data\t{rel}\t{listing.token(rel)}" for rel in data]
    lines += [f"video\t{rel}\t{listing.token(rel)}" for rel in videos]
    return EpisodesFileSources(episodes_file=episodes_file, digest=_sha256(lines), data_files=data,
                               video_files=videos, data_bytes=sum(listing.size(rel) for rel in data), basis=basis,
                               problem=problem, rows=tuple(rows) if rows is not None else None)


def references(rows: Sequence[EpisodeRow]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(data files, MP4s) the rows name, each sorted and distinct."""
    return (tuple(sorted({r.data_file for r in rows})),
            tuple(sorted({v.file for r in rows for v in r.videos})))


@dataclasses.dataclass(frozen=True)
class DatasetSources:
    """A dataset's source listing and the sources of each of its episodes files, in path order."""

    root: str
    listing: SourceListing
    info: Optional[DatasetInfo]
    info_problem: Optional[str]
    files: tuple[EpisodesFileSources, ...]

    def by_file(self) -> dict[str, EpisodesFileSources]:
        return {f.episodes_file: f for f in self.files}

    def unreadable(self) -> Optional[str]:
        """Why the dataset cannot be read as a dataset at all (its root moved or gone, no episodes file
        listed), else None. An import fails such a dataset whole and removes none of its output, so
        its episodes files are not "gone"."""
        if self.info is not None and self.info.is_v2:
            if self.files or self.info_problem:
                return self.info_problem
            from transforms.lerobot.dataset import v2_groups  # the import's own words for why (its layout...)
            try:
                v2_groups(self.root, self.info)
            except LeRobotImportError as ex:
                return str(ex)
            return f"its {v2.EPISODES_JSONL} cannot be read or lists no episodes"
        if self.listing.episodes_files():
            return None
        return self.info_problem or "it lists no meta/episodes/*/*.parquet file"


#: The info.json keys an import's output depends on. The others (`total_episodes`, `total_frames`,
#: `splits`, ...) change whenever episodes are appended, and must not make every episodes file stale.
INFO_KEYS = ("codebase_version", "fps", "features", "data_path", "video_path")


def info_digest(raw: bytes) -> str:
    """The digest of what an import uses of info.json: its `INFO_KEYS`, or the whole file when it is not
    a JSON object (then it fails to import, and any edit may fix it)."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        doc = None
    if not isinstance(doc, dict):
        return hashlib.sha256(raw).hexdigest()
    used = {k: doc.get(k) for k in INFO_KEYS}
    return hashlib.sha256(json.dumps(used, sort_keys=True, default=str).encode()).hexdigest()


def load_info(root: str, *, skip_videos: bool) -> tuple[Optional[DatasetInfo], Optional[str], Optional[str]]:
    """(info, `info_digest`, problem): info.json parsed as the import parses it, or why it cannot be."""
    # Read as the import reads it (a regular file, within the size limit): a FIFO or a huge file named
    # info.json must not stall or fill the worker here, before the checks that report it have run.
    try:
        raw = storage.read_bytes(storage.dataset_file(root, INFO_PATH), what="info file", file=INFO_PATH,
                                 max_bytes=INFO_JSON_MAX_BYTES)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            return None, None, f"{INFO_PATH} does not exist under {root}: is this the root of a LeRobot v3 dataset?"
        return None, None, str(ex)
    digest = info_digest(raw)
    try:
        info = parse_info(raw, skip_videos=skip_videos)
    except LeRobotImportError as ex:
        return None, digest, str(ex)
    return info, digest, None


def scan_dataset(root: str, options: Mapping[str, Any], *, previous_manifest: Optional[Mapping] = None,
                 listing: Optional[SourceListing] = None) -> DatasetSources:
    """The sources of every episodes file of a dataset.

    Episodes files whose basis the previous manifest recorded unchanged are not read: their references
    are taken from the manifest. The others are read (several at once on an object store).

    Args:
        root: the dataset root.
        options: the output options of the run (`ImportConfig.output_options()`); `skip_videos` among
            them decides whether MP4s are sources.
        previous_manifest: the manifest of the output's last import, if any.
        listing: a listing already made of the root.
    Returns:
        The dataset's sources; `rows` is set on every v3 episodes file that was read (a v2.x group's rows
        are read again from the parsed episodes.jsonl where they are needed).
    """
    root = storage.normalize_root(root)
    listing = listing or list_sources(root)
    info, used_info, info_problem = load_info(root, skip_videos=bool(options.get("skip_videos")))
    if info is not None and info.is_v2:
        return DatasetSources(root, listing, info, info_problem, _v2_groups(root, listing, info, used_info, options))
    recorded = (previous_manifest or {}).get("episodes_files") or {}
    out: dict[str, EpisodesFileSources] = {}
    to_read: list[tuple[str, str]] = []
    for rel in listing.episodes_files():
        basis = basis_digest(listing, used_info, rel, options)
        previous = recorded.get(rel) or {}
        if info_problem is not None:
            out[rel] = episodes_file_sources(listing, rel, basis, (), (), problem=info_problem)
        elif previous.get("source_basis") == basis and isinstance(previous.get("source_data_files"), list):
            out[rel] = episodes_file_sources(listing, rel, basis, previous["source_data_files"],
                                             previous.get("source_video_files") or ())
        else:
            to_read.append((rel, basis))
    for rel, basis, rows in _read_episodes_files(root, info, to_read):
        out[rel] = _sources_from_rows(listing, rel, basis, rows)
    return DatasetSources(root, listing, info, info_problem, tuple(out[rel] for rel in sorted(out)))


def _v2_groups(root: str, listing: SourceListing, info: DatasetInfo, used_info: Optional[str],
               options: Mapping[str, Any]) -> tuple[EpisodesFileSources, ...]:
    """The sources of each group of a v2.x dataset's episodes. The basis of a group is its own lines of
    meta/episodes.jsonl (not the file's version: appending episodes rewrites the file but changes only the
    last chunk's lines), so one edited episode re-imports its chunk alone."""
    try:
        episodes = v2.load_episodes(root)
    except LeRobotImportError:
        return ()  # the import fails the dataset as a whole and says why
    out = []
    for name, positions in episodes.groups(info.chunks_size).items():
        lines = [f"options\t{json.dumps(dict(options), sort_keys=True)}", f"info\t{used_info or 'missing'}",
                 f"group\t{name}\t{v2.group_digest(episodes, positions)}"]
        basis = _sha256(lines)
        try:
            rows = v2.group_rows(episodes, info, name, positions)
        except LeRobotImportError as ex:
            out.append(episodes_file_sources(listing, name, basis, (), (), problem=str(ex)))
            continue
        data, videos = references(rows)
        found = episodes_file_sources(listing, name, basis, data, videos)
        # held as what renders them (see `v2.OwnPaths`): the same paths, without one string per episode and camera;
        # and without the group's rows, which planning reads again from the parsed episodes.jsonl (kept, they
        # would be every episode of the dataset at once)
        compact = v2.own_paths(info, [r.episode_index for r in rows])
        out.append(dataclasses.replace(found, data_files=compact[0], video_files=compact[1]))
    return tuple(sorted(out, key=lambda f: f.episodes_file))


def _sources_from_rows(listing: SourceListing, rel: str, basis: str,
                       rows: list[EpisodeRow] | LeRobotImportError) -> EpisodesFileSources:
    if isinstance(rows, LeRobotImportError):
        return episodes_file_sources(listing, rel, basis, (), (), problem=str(rows))
    data, videos = references(rows)
    return episodes_file_sources(listing, rel, basis, data, videos, rows=rows)


def _read_episodes_files(root: str, info: DatasetInfo, items: Sequence[tuple[str, str]]
                         ) -> Iterator[tuple[str, str, list[EpisodeRow] | LeRobotImportError]]:
    """(rel, basis, rows or the error) per episodes file, in order. On an object store the files are read
    by several threads at once. Each path is read literally (never expanded as a pattern: a name may
    hold `*`), and a local file resolving outside the root is refused, as the import does."""

    def read(item: tuple[str, str]) -> tuple[str, str, list[EpisodeRow] | LeRobotImportError]:
        rel, basis = item
        try:
            return rel, basis, read_episodes_file(root, rel, info)
        except LeRobotImportError as ex:
            return rel, basis, ex

    fs, _ = storage.filesystem(root)
    if _is_local(fs) or len(items) < 2:
        yield from map(read, items)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        yield from pool.map(read, items)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local", "memory")


@dataclasses.dataclass(frozen=True)
class EpisodesFileDecision:
    """What a run does with one episodes file, and why."""

    episodes_file: str
    action: str  # IMPORT | UNCHANGED | REMOVED
    reason: str  # new | sources changed | failed last run | episodes failed last run | no recorded sources |
    #              forced | unchanged | gone
    sources: Optional[EpisodesFileSources]  # None for a removed file
    previous: Optional[Mapping[str, Any]] = dataclasses.field(default=None, compare=False, repr=False)


def decide(current: Sequence[EpisodesFileSources], previous_manifest: Optional[Mapping], *,
           force: bool = False, rebuild: Optional[str] = None,
           recorded_videos: Optional[Mapping[str, str]] = None,
           video_tokens: Optional[Mapping[str, str]] = None) -> tuple[EpisodesFileDecision, ...]:
    """Per episodes file: import it, leave it (same sources, last import good), or remove its output.

    A file whose last import failed is imported again even when its sources did not change: the
    failure may have been transient, or its cause outside the sources (a storage outage). So is a file
    using an MP4 whose index the last run did not record as current (`recorded_videos`): its MP4 is
    read again only by importing a file that uses it.

    Args:
        current: the sources of the dataset's episodes files now.
        previous_manifest: the output's manifest (its `episodes_files` entries with `status` and
            `source_digest`), or None for a first import.
        force: import every episodes file.
        rebuild: import every episodes file for this reason (the output's layout is an older one).
        recorded_videos: MP4 path -> token the last run accounted for (the manifest's `video_versions`);
            None when MP4s are not carried from run to run.
        video_tokens: MP4 path -> token now (needed with `recorded_videos`).
    Returns:
        One decision per episodes file, current or previously imported, sorted by path.
    """
    recorded = (previous_manifest or {}).get("episodes_files") or {}
    decisions = []
    for src in current:
        prev = recorded.get(src.episodes_file)
        action = _action(src, prev, force)
        if action[0] == UNCHANGED and rebuild:
            action = (IMPORT, rebuild)
        elif action[0] == UNCHANGED and recorded_videos is not None and any(
                recorded_videos.get(v) != (video_tokens or {}).get(v, "missing") for v in src.video_files):
            action = (IMPORT, "MP4 index not recorded")
        decisions.append(EpisodesFileDecision(src.episodes_file, *action, src, prev))
    present = {src.episodes_file for src in current}
    for rel, prev in recorded.items():
        if rel not in present and (prev or {}).get("status") != "removed":
            decisions.append(EpisodesFileDecision(rel, REMOVED, "gone", None, prev))
    return tuple(sorted(decisions, key=lambda d: d.episodes_file))


#: Why a v2.x group imported without some episodes is imported again: errors.jsonl keeps naming them, and
#: each run tries them again (their files may be there now).
EPISODES_FAILED_REASON = "episodes failed last run"


def _action(src: EpisodesFileSources, prev: Optional[Mapping], force: bool) -> tuple[str, str]:
    if prev is None or prev.get("status") == "removed":
        return IMPORT, "new"
    if force:
        return IMPORT, "forced"
    if not prev.get("source_digest"):
        return IMPORT, "no recorded sources"
    if prev["source_digest"] != src.digest:
        return IMPORT, "sources changed"
    if prev.get("status") == DAMAGED:
        return IMPORT, DAMAGED_REASON
    if prev.get("status") not in GOOD_STATUSES:
        return IMPORT, "failed last run"
    if prev.get("episodes_failed"):  # a v2.x group imported without the episodes whose own files failed
        return IMPORT, EPISODES_FAILED_REASON
    return UNCHANGED, "unchanged"


def video_versions(listing: SourceListing, files: Iterable[str]) -> dict[str, str]:
    """MP4 path -> token now. A run records it in the manifest (`video_versions`), so the next run knows
    which MP4s changed."""
    return {rel: listing.token(rel) for rel in sorted(set(files))}


def changed_video_files(tokens: Mapping[str, str], previous: Optional[Mapping[str, str]]) -> tuple[str, ...]:
    """The MP4s whose MediaIndex must be read again: new, rewritten, or not recorded.

    Args:
        tokens: MP4 path -> its token now (`video_versions`), for the MP4s in question.
        previous: MP4 path -> token as the last run recorded it (the manifest's `video_versions`), or None.
    """
    previous = previous or {}
    return tuple(rel for rel, token in tokens.items() if previous.get(rel) != token)


def _sha256(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
