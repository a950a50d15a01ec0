"""Read an import's output back as logical episodes: frame fields as numpy, cameras as seekable videos.

`ImportReader(OUT)` opens any import output (local path or fsspec URL, default or `--inline-index`
layout). It lists the episode parts from `manifest.json` (or, without one, from the `episodes/`
folder), iterates their episodes in order, or finds one by `episode_index` reading only the row
groups whose `episode_index` statistics can hold it. In the default layout each clip's
`clip.media.index` is null and is joined back from `media_index/` by `clip.media.source.uri`: a
`MediaIndexStore` maps URIs to row groups from the footers' `uri` statistics (a row group holds
consecutive MP4s, one alone when its index is large) and fetches and caches only the row groups it
needs. The `Episode` it returns is therefore the same logical record as the `--inline-index` output
(`Episode.to_arrow()`), whichever layout was read.

The output is data and is not trusted: every part it lists must lie inside the import root, video
files are read only inside the import root and the dataset root the manifest names (or the roots the
caller gives), and each MediaIndex is checked before use (see `confine` and `mp4.arrow.read_track`).
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import copy
import dataclasses
import json
import os
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.base import storage
from transforms.output import paths
from transforms.episode import spql_types
from transforms.base.errors import LeRobotImportError
from transforms.mp4 import ranges
from transforms.reader.confine import part_uri, relocation
from transforms.reader.episode import Episode, VideoAccess, _LRU, track_tables
from transforms.reader.seek import DEFAULT_TOLERANCE, ReaderError, TrackTables, checked_number

__all__ = ["ImportReader", "MediaIndexStore", "ParquetFiles", "RowGroupRef", "fill_media_index"]

#: A manifest larger than this is not read: one entry per episodes file is about a kilobyte.
MAX_MANIFEST_BYTES = 64 << 20


# ------------------------------------------------------------------------------------------------
# Parquet access
# ------------------------------------------------------------------------------------------------

def _parquet_read(uri: str, read: Callable[[pq.ParquetFile], Any]) -> Any:
    """`read(ParquetFile)` on the file at `uri`, closed afterwards; only what `read` asks is fetched
    (the footer, then the requested row groups)."""
    fs, path = storage.filesystem(uri)
    try:
        with fs.open(path, "rb") as f:
            return read(pq.ParquetFile(f))
    except FileNotFoundError:
        raise ReaderError(f"{uri} does not exist") from None
    except (OSError, pa.ArrowException) as ex:
        raise ReaderError(f"cannot read Parquet file {uri}: {ex}") from None


def _metadata(uri: str) -> pq.FileMetaData:
    return _parquet_read(uri, lambda pf: pf.metadata)


def _row_group(uri: str, row_group: int, columns: Optional[list[str]] = None) -> pa.Table:
    return _parquet_read(uri, lambda pf: pf.read_row_group(row_group, columns=columns))


class ParquetFiles:
    """Parquet files kept open for reading, one process's: each file is opened (and its footer read) once,
    then every row group read reuses it. A random training read touches a few row groups of many files:
    opening a file again for each costs a footer read (a request on remote storage) per item.

    The footers read are also kept (within `metadata_bytes`) apart from the open files, and a forked child
    process keeps them: it opens the files again (the parent's handles are not its own) without reading or
    parsing their footers again.

    Args:
        max_files: files kept open; the least recently used one is closed beyond it.
        metadata_bytes: bytes of parsed footers kept (about 12 x a footer's size on disk).
    """

    def __init__(self, max_files: int = 64, metadata_bytes: int = 64 << 20) -> None:
        self.max_files = max(1, int(checked_number(max_files, "max_files", whole=True)))
        self.metadata_bytes = int(checked_number(metadata_bytes, "metadata_bytes", whole=True))
        self._open: collections.OrderedDict = collections.OrderedDict()
        self._footers = _LRU(self.metadata_bytes)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        #: Files opened so far (tests check that each is opened once).
        self.opened = 0
        #: Footers read and parsed so far (a forked child counts only its own).
        self.footers_read = 0

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's handles are not ours, its footers are
            self._pid, self._open, self._lock, self.opened, self.footers_read = os.getpid(), \
                collections.OrderedDict(), threading.RLock(), 0, 0
            self._footers = self._footers.copy()

    def forked(self) -> "ParquetFiles":
        """A copy for a forked child process: the footers read so far, no open file (`copy.copy` would pickle it,
        which keeps neither)."""
        new = ParquetFiles(self.max_files, self.metadata_bytes)
        new._footers = self._footers.copy()
        return new

    @staticmethod
    def _open_file(uri: str) -> tuple[Any, bool]:
        """(the file at `uri` open for reading, whether it is on a local disk): a local file is read by Arrow's
        own file, without the GIL, where a Python file object takes it for every read."""
        fs, path = storage.filesystem(uri)
        if storage.is_local(fs):
            return pa.OSFile(path), True
        return fs.open(path, "rb"), False

    def _parse(self, uri: str, f: Any, local: bool) -> pq.ParquetFile:
        """The file `f` (open at `uri`) as a ParquetFile, its footer parsed once per uri and kept."""
        md = self._footers.get(uri)
        # pre-buffering coalesces a row group's column chunks into few requests (remote storage), but hands the
        # reads to Arrow's I/O threads, which only costs on a local disk (twice the time of a read on a busy machine)
        pf = pq.ParquetFile(f, metadata=md, pre_buffer=not local)
        if md is None:
            with self._lock:
                self.footers_read += 1
            md = pf.metadata
            self._footers.put(uri, md, 12 * md.serialized_size)
        return pf

    def _file(self, uri: str) -> pq.ParquetFile:
        self._check_process()
        found = self._open.get(uri)
        if found is not None:
            self._open.move_to_end(uri)
            return found[1]
        f, local = self._open_file(uri)
        try:
            pf = self._parse(uri, f, local)
        except BaseException:
            f.close()
            raise
        self.opened += 1
        self._open[uri] = (f, pf)
        while len(self._open) > self.max_files:
            old, _ = self._open.popitem(last=False)[1]
            old.close()
        return pf

    def read(self, uri: str, read: Callable[[pq.ParquetFile], Any]) -> Any:
        """`read(ParquetFile)` on the open file at `uri` (opened on first use).

        Raises:
            ReaderError: the file is missing or is not Parquet.
        """
        self._check_process()
        with self._lock:
            try:
                return read(self._file(uri))
            except FileNotFoundError:
                raise ReaderError(f"{uri} does not exist") from None
            except (OSError, pa.ArrowException) as ex:
                self._open.pop(uri, None)  # not trusted for the next read
                raise ReaderError(f"cannot read Parquet file {uri}: {ex}") from None

    def read_each(self, uris: Sequence[str], read: Callable[[str, pq.ParquetFile], Any], threads: int = 8) -> list:
        """`read(uri, ParquetFile)` on each file, `threads` files at a time when they are not on a local disk (a
        footer and a small read of each of many files wait on storage; a local file's reads need the GIL, so
        threads only hand it around); the files are opened for this alone and closed, their footers kept.

        Returns:
            What `read` returned, in the order of `uris`.
        Raises:
            ReaderError: the first file (in `uris` order) that is missing or is not Parquet.
        """
        self._check_process()

        def one(uri: str) -> Any:
            try:
                f, local = self._open_file(uri)
                with f:
                    return read(uri, self._parse(uri, f, local))
            except FileNotFoundError:
                raise ReaderError(f"{uri} does not exist") from None
            except (OSError, pa.ArrowException) as ex:
                raise ReaderError(f"cannot read Parquet file {uri}: {ex}") from None

        if threads <= 1 or len(uris) <= 1 or all(storage.is_local(storage.filesystem(u)[0]) for u in uris):
            return [one(u) for u in uris]
        # the pool's threads end before this returns: none is left to a process forked afterwards
        with concurrent.futures.ThreadPoolExecutor(min(threads, len(uris)), thread_name_prefix="footers") as pool:
            return list(pool.map(one, uris))

    def metadata(self, uri: str) -> pq.FileMetaData:
        self._check_process()
        found = self._footers.get(uri)
        return found if found is not None else self.read(uri, lambda pf: pf.metadata)

    def row_group(self, uri: str, row_group: int, columns: Optional[list[str]] = None) -> pa.Table:
        # one thread: a row group of one file (a MediaIndex, an episode group) is read in about a millisecond,
        # less than a thread pool's hand-offs cost (3x slower with them, more in busy DataLoader workers)
        return self.read(uri, lambda pf: pf.read_row_group(row_group, columns=columns, use_threads=False))

    def __getstate__(self) -> dict:
        return {"max_files": self.max_files, "metadata_bytes": self.metadata_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_files"], state.get("metadata_bytes", 64 << 20))


def _stats_range(md: pq.FileMetaData, rg: int, column: str) -> tuple[Any, Any]:
    """(min, max) of a column in a row group, or (None, None) when the writer kept no statistics."""
    group = md.row_group(rg)
    for c in range(group.num_columns):
        col = group.column(c)
        if col.path_in_schema == column:
            st = col.statistics
            if st is not None and st.has_min_max:
                return st.min, st.max
            return None, None
    return None, None


# ------------------------------------------------------------------------------------------------
# manifest.json
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Manifest:
    """What the reader takes from manifest.json: its parts, media_index parts and dataset root."""

    parts: tuple[str, ...]
    media_index: tuple[str, ...]
    dataset: Optional[str]
    skip_videos: bool
    run_id: str = ""


def _read_manifest(root: str) -> Optional[_Manifest]:
    """The manifest of the import at `root`, checked; None when there is none."""
    uri = storage.join(root, paths.MANIFEST)
    try:
        raw = storage.read_bytes(uri, what="manifest", file=paths.MANIFEST, max_bytes=MAX_MANIFEST_BYTES)
    except LeRobotImportError as ex:
        if ex.rule == "file_missing":
            return None
        raise ReaderError(f"cannot read {uri}: {ex.message}") from None
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ReaderError(f"{uri} is not an import manifest: its JSON is nested too deeply to read") from None
    except (ValueError, MemoryError) as ex:
        raise ReaderError(f"{uri} is not valid JSON: {str(ex)[:200]}") from None
    return _manifest_of(doc, root, uri)


def _manifest_of(doc: Any, root: str, uri: str) -> _Manifest:
    def bad(what: str) -> ReaderError:
        return ReaderError(f"{uri} is not an import manifest: {what}")

    if not isinstance(doc, dict):
        raise bad(f"it holds a JSON {type(doc).__name__}, not an object")
    files = doc.get("episodes_files", {})
    if not isinstance(files, dict) or not all(isinstance(f, dict) for f in files.values()):
        raise bad("`episodes_files` is not an object of objects")
    parts = []
    for _, f in sorted(files.items()):
        if f.get("status", "imported") not in ("imported", "unchanged"):  # unchanged: kept from an earlier run
            continue
        listed = f.get("parts", [])
        if not isinstance(listed, list):
            raise bad("an episodes file's `parts` is not a list")
        parts += [part_uri(root, p, "episode part") for p in listed]
    index = doc.get("media_index", [])
    if not isinstance(index, list):
        raise bad("`media_index` is not a list")
    dataset = doc.get("dataset")
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    run_id = doc.get("run_id") if isinstance(doc.get("run_id"), str) else ""
    return _Manifest(tuple(parts), tuple(part_uri(root, p, "media_index part") for p in index),
                     dataset if isinstance(dataset, str) and dataset else None, options.get("skip_videos") is True,
                     run_id)


def _not_an_import(root: str) -> str:
    """Why `root` is no import's output, with the next step: a LeRobot dataset is imported first; a folder
    that is not there is named so."""
    what = f"{root} has no {paths.MANIFEST} and no episode parts under {paths.EPISODES_DIR}/"
    try:
        if storage.exists(storage.join(root, "meta/info.json")):
            shown = root[len("file://"):] if root.startswith("file://") else root
            return (f"{root} is a LeRobot dataset (it has meta/info.json), not an import's output: import it first, "
                    f"`lerobot-import --dataset {shown} --output OUT`, then read OUT")
        if not storage.exists(root):
            return f"{root} does not exist: give the --output folder of an import"
    except (OSError, LeRobotImportError):
        pass
    return f"{what}: is it an import's output folder?"


def _listed_parquet(folder: str) -> list[str]:
    return [u for u in storage.list_files(folder, suffix=".parquet") if not u.rsplit("/", 1)[-1].startswith(".")]


# ------------------------------------------------------------------------------------------------
# media_index/: uri -> MediaIndex, fetched by row group
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _IndexGroup:
    min_uri: Optional[str]
    max_uri: Optional[str]
    file: str
    row_group: int


class MediaIndexStore:
    """The default layout's `media_index/` parts: one MediaIndex per MP4 URI, looked up by URI.

    Only footers are read up front; a lookup reads the one row group whose `uri` statistics can hold
    the URI (the importer writes consecutive MP4s, sorted by URI, into row groups of about a MiB of
    index) and keeps its rows (within `cache_group_bytes`), so the first use of the other MP4s of that
    row group reads nothing: decoding a row group costs about a millisecond whatever its size, about as
    much as a random item's decode. Each part is opened once and kept open (`ParquetFiles`), so looking
    up many files costs one footer read per part, not one per file. `tracks(uri)` gives the file's
    `TrackTables` themselves, built once per store and file and kept within `cache_track_bytes`: what a
    frame read needs, without the Arrow record of the index being kept or copied.

    Args:
        files: the media_index/ parts.
        cache_files: row groups' rows kept for `lookup` and `tracks`, at most this many row groups ...
        cache_group_bytes: ... and this many bytes of them (the newest is always kept).
        cache_track_bytes: bytes of `TrackTables` kept for `tracks` (the least recently used go first).
        parquet: the open-file cache to read through (default: the store's own).
    """

    def __init__(self, files: Sequence[str], *, cache_files: int = 256, cache_track_bytes: int = 256 << 20,
                 cache_group_bytes: int = 64 << 20, parquet: Optional[ParquetFiles] = None) -> None:
        for name, value in (("cache_files", cache_files), ("cache_track_bytes", cache_track_bytes),
                            ("cache_group_bytes", cache_group_bytes)):
            checked_number(value, name, whole=True)
        self.files = list(files)
        self._groups: Optional[list[_IndexGroup]] = None
        self._by_min: tuple = ([], [], [])  # (groups with uri statistics, their min uris, groups without)
        self._rows = _LRU(cache_group_bytes)   # _IndexGroup -> {uri: index or None}
        self._rows_count = max(1, int(cache_files))
        self._tracks = _LRU(cache_track_bytes)
        self._lock = threading.Lock()
        self.parquet = parquet or ParquetFiles()
        #: Row groups read so far (tests check that a lookup reads one).
        self.row_groups_read = 0
        #: TrackTables built (each from one file's MediaIndex) so far.
        self.tracks_built = 0

    @property
    def shards_opened(self) -> int:
        """media_index/ parts opened so far by this process (each is opened once and kept open)."""
        return self.parquet.opened

    def forked(self, parquet: ParquetFiles) -> "MediaIndexStore":
        """This store for a forked child process, reading through `parquet`: the row groups' URI ranges, rows and
        TrackTables found so far are kept (the child inherits them instead of reading and building them again),
        locks and counters are its own."""
        new = copy.copy(self)
        new.parquet, new._lock = parquet, threading.Lock()
        new._rows, new._tracks = self._rows.copy(), self._tracks.copy()
        new.row_groups_read = new.tracks_built = 0
        return new

    def load(self) -> None:
        """Read the parts' footers now (what a first lookup does), all parts at once."""
        self._load_groups()

    def _load_groups(self) -> list[_IndexGroup]:
        with self._lock:
            if self._groups is None:
                groups = []
                for f, md in zip(self.files, self.parquet.read_each(self.files, lambda _, pf: pf.metadata)):
                    for rg in range(md.num_row_groups):
                        lo, hi = _stats_range(md, rg, "uri")
                        groups.append(_IndexGroup(lo, hi, f, rg))
                groups.sort(key=lambda g: (g.min_uri is not None, g.min_uri or ""))
                with_stats = [g for g in groups if g.min_uri is not None]
                self._groups = groups
                self._by_min = (with_stats, [g.min_uri for g in with_stats],
                                [g for g in groups if g.min_uri is None])
            return self._groups

    def _candidates(self, uri: str) -> list[_IndexGroup]:
        self._load_groups()
        with_stats, mins, no_stats = self._by_min
        # The row groups of one shard are disjoint URI ranges, but those of different shards may overlap (the
        # MP4s of two cameras under two commits interleave): every group with min <= uri <= max is a candidate.
        k = bisect.bisect_right(mins, uri)
        return [g for g in with_stats[:k] if uri <= g.max_uri] + no_stats

    def lookup(self, uri: str) -> Optional[pa.Array]:
        """The MediaIndex of `uri` as a length-1 spql.MediaIndex array; None when it has none."""
        for g in self._candidates(uri):
            index = self._group_rows(g).get(uri)
            if index is not None:
                return index
        return None

    def tracks(self, uri: str) -> Optional[TrackTables]:
        """The primary track's tables of `uri`'s MediaIndex, built on first use and kept; None when the
        file has no MediaIndex.

        Raises:
            ReaderError: the index cannot be used (naming the file), or media_index/ cannot be read.
        """
        found = self._tracks.get(uri)
        if found is not None:
            return found[0]
        index = self.lookup(uri)
        tables = None if index is None else track_tables(uri, index)
        if tables is not None:
            self.tracks_built += 1
        self._tracks.put(uri, (tables,), _track_bytes(tables))
        return tables

    def _group_rows(self, g: _IndexGroup) -> dict[str, Optional[pa.Array]]:
        """uri -> its MediaIndex (length 1, a zero-copy slice of the row group) or None, of one row group,
        read once and kept."""
        found = self._rows.get(g)
        if found is None:
            table = self.parquet.row_group(g.file, g.row_group, ["uri", "index"])
            self.row_groups_read += 1
            index = table.column("index").combine_chunks()
            valid = index.is_valid().to_numpy(zero_copy_only=False)
            found = {uri: (index.slice(i, 1) if valid[i] else None)
                     for i, uri in enumerate(table.column("uri").to_pylist())}
            # bounded by bytes and by count (a row group of one small index is still one entry of many)
            self._rows.put(g, found, max(table.nbytes, self._rows.max_size // self._rows_count))
        return found


def _track_bytes(tables: Optional[TrackTables]) -> int:
    if tables is None:
        return 64
    return sum(getattr(tables, f.name).nbytes for f in dataclasses.fields(tables)
               if isinstance(getattr(tables, f.name), np.ndarray)) + len(tables.extradata)


# ------------------------------------------------------------------------------------------------
# Filling clip.media.index back in
# ------------------------------------------------------------------------------------------------

def _rebuild_struct(arr: pa.Array, replace: dict[str, pa.Array]) -> pa.Array:
    """`arr` (struct or extension over struct) with some children replaced; type, validity kept."""
    ext = arr.type if isinstance(arr, pa.ExtensionArray) else None
    st = spql_types.storage_of(arr)
    fields = list(st.type)
    children = [replace.get(f.name, st.field(f.name)) for f in fields]
    mask = st.is_null() if st.null_count else None
    out = pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    return pa.ExtensionArray.from_storage(ext, out) if ext is not None else out


def _index_column(uris: list[Optional[str]], index: pa.Array, lookup: Callable[[str], Optional[pa.Array]]
                  ) -> Optional[pa.Array]:
    """The index column with every null index of an indexed file filled in; None when unchanged."""
    valid = index.is_valid().to_numpy(zero_copy_only=False)
    if valid.all():
        return None
    sources: list[pa.Array] = []
    position: dict[Any, int] = {}
    take = np.zeros(len(uris), np.int64)
    mask = np.zeros(len(uris), bool)
    changed = False
    for i, uri in enumerate(uris):
        if valid[i]:
            key: Any = ("row", i)
            src = index.slice(i, 1)
        else:
            src = lookup(uri) if uri is not None else None
            key = uri
            if src is None:
                mask[i] = True
                continue
            changed = True
        if key not in position:
            position[key] = len(sources)
            sources.append(spql_types.storage_of(src))
        take[i] = position[key]
    if not changed:
        return None
    storage_arr = pa.concat_arrays(sources).take(pa.array(take, mask=mask))
    # the column's own type: whichever class (ours or spiral-sdk's) read it in this process
    return pa.ExtensionArray.from_storage(index.type, storage_arr)


def fill_media_index(table: pa.Table, lookup: Callable[[str], Optional[pa.Array]]) -> pa.Table:
    """Episode rows with `videos.*.clip.media.index` joined back by the media's source URI.

    Args:
        table: episode rows as a part stores them.
        lookup: URI -> its MediaIndex (length 1) or None.
    Returns:
        The same rows, each null index of a file that has one filled in.
    """
    if "videos" not in table.column_names or table.num_rows == 0:
        return table
    videos = table.column("videos").combine_chunks()
    entries: dict[str, pa.Array] = {}
    for f in videos.type:
        entry = videos.field(f.name)
        clip = entry.field("clip")
        media = spql_types.storage_of(clip).field("media")
        uris = spql_types.storage_of(spql_types.storage_of(media).field("source")).field("uri").to_pylist()
        index = _index_column(uris, spql_types.storage_of(media).field("index"), lookup)
        if index is None:
            continue
        media = _rebuild_struct(media, {"index": index})
        clip = _rebuild_struct(clip, {"media": media})
        entries[f.name] = _rebuild_struct(entry, {"clip": clip})
    if not entries:
        return table
    new_videos = _rebuild_struct(videos, entries)
    i = table.column_names.index("videos")
    return table.set_column(i, table.schema.field(i), new_videos)


# ------------------------------------------------------------------------------------------------
# The import
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RowGroupRef:
    """One row group of one episode part: the unit of parallel reading."""

    part: str          # the part's URI
    row_group: int
    min_episode: Optional[int]
    max_episode: Optional[int]
    num_rows: int


def _ranges_text(values: np.ndarray, max_ranges: int = 20) -> str:
    """Sorted distinct integers as ranges: `1-2, 4-5, 9`."""
    if not len(values):
        return ""
    runs = np.split(values, np.flatnonzero(np.diff(values) != 1) + 1)
    parts = [f"{int(r[0])}" if len(r) == 1 else f"{int(r[0])}-{int(r[-1])}" for r in runs]
    more = f" and {len(parts) - max_ranges} more ranges" if len(parts) > max_ranges else ""
    return ", ".join(parts[:max_ranges]) + more


class ImportReader:
    """An import's output, read back: iterate episodes, look one up, seek its cameras.

    Args:
        output_uri: the import's output root (local path or fsspec URL).
        tolerance: the largest distance (s) between a requested time and the frame a seek returns.
        allowed_roots: the roots video files may be read from (default: the dataset root the manifest
            names); the import root is always allowed.
        dataset_root: where the dataset is now, when it moved or was copied after the import: each clip
            is read at its path under this root instead of the one the manifest names, once the file
            there has the size the import recorded (else a ReaderError says which file differs).
        open_file: opens a video file for range reads (default: `mp4.ranges.open_uri`), e.g. to count
            or record reads.
    Raises:
        ReaderError: the output has no manifest and no parts, or its manifest is not valid or lists
        files outside the import root.
    """

    def __init__(self, output_uri: str, *, tolerance: float = DEFAULT_TOLERANCE,
                 allowed_roots: Optional[Sequence[str]] = None,
                 open_file: Optional[Callable[[str], ranges.RangeReader]] = None,
                 dataset_root: Optional[str] = None) -> None:
        checked_number(tolerance, "tolerance")  # before anything is read: a bad argument is no output's fault
        self.root = storage.normalize_root(output_uri)
        manifest = _read_manifest(self.root)
        if manifest is None:
            self.parts = _listed_parquet(storage.join(self.root, paths.EPISODES_DIR))
            index_files = _listed_parquet(storage.join(self.root, paths.MEDIA_INDEX_DIR))
            if not self.parts:
                raise ReaderError(_not_an_import(self.root))
            manifest = _Manifest(tuple(self.parts), tuple(index_files), None, False)
        self.parts = list(manifest.parts)
        if allowed_roots is None:
            allowed_roots = [manifest.dataset] if manifest.dataset else []
        roots = (self.root,) + tuple(storage.normalize_root(r) for r in allowed_roots)
        self.relocation = None
        if dataset_root is not None:  # clips keep their URIs (the media_index keys); only the reads move
            self.relocation = relocation(self.root, manifest.dataset, str(dataset_root),
                                         max_manifest_bytes=MAX_MANIFEST_BYTES)
        self.access = VideoAccess(tolerance=tolerance, allowed_roots=roots, skip_videos=manifest.skip_videos,
                                  open_file=open_file, cache_key=f"{self.root} {manifest.run_id}",
                                  relocate=self.relocation.uri if self.relocation else None)
        #: The episode parts, kept open (one footer read per part and process).
        self.parquet = ParquetFiles()
        self.media_index = MediaIndexStore(list(manifest.media_index))
        #: TrackTables of files whose MediaIndex the episode rows carry (the --inline-index layout).
        self._inline_tracks = _LRU(256 << 20)
        self._row_groups: Optional[list[RowGroupRef]] = None
        #: Episode row groups read so far (tests check that a lookup reads only what it needs).
        self.row_groups_read = 0
        self._lock = threading.Lock()

    @property
    def tolerance(self) -> float:
        return self.access.tolerance

    def forked(self) -> "ImportReader":
        """This reader for a forked child process (a DataLoader worker): what it has read (the manifest, the parts'
        row groups and footers, media_index/'s row groups, the files' TrackTables) is kept, so the child does not
        read or build it again; open files, locks and counters are the child's own."""
        new = copy.copy(self)
        new._lock = threading.Lock()
        new.parquet = self.parquet.forked()
        new.media_index = self.media_index.forked(
            new.parquet if self.media_index.parquet is self.parquet else self.media_index.parquet.forked())
        new._inline_tracks = self._inline_tracks.copy()
        new.row_groups_read = 0
        return new

    def row_groups(self) -> list[RowGroupRef]:
        """Every row group of every part, in episode order (reads the parts' footers once, several at a time)."""
        with self._lock:
            if self._row_groups is None:
                self._scan_parts(None)
            return self._row_groups

    def _scan_parts(self, columns: Optional[list[str]]) -> list[list[pa.Table]]:
        """Reads every part's footer (`_row_groups`), and `columns` of its row groups when given, several parts
        at a time (`ParquetFiles.read_each`): one open of each part for both."""
        def one(_: str, pf: pq.ParquetFile) -> tuple:
            md = pf.metadata
            return md, [pf.read_row_group(rg, columns=columns, use_threads=False)
                        for rg in range(md.num_row_groups)] if columns is not None else []

        out, tables = [], []
        for part, (md, read) in zip(self.parts, self.parquet.read_each(self.parts, one)):
            for rg in range(md.num_row_groups):
                lo, hi = _stats_range(md, rg, "episode_index")
                out.append(RowGroupRef(part, rg, lo, hi, md.row_group(rg).num_rows))
            tables.append(read)
        self._row_groups = out
        return tables

    def read_columns(self, columns: list[str]) -> list[pa.Table]:
        """Some columns of every row group, in `row_groups()` order, several parts at a time (with the footers,
        when they are not read yet): what a reader needs of every episode up front, e.g. its index and length.

        Args:
            columns: top-level columns.
        """
        with self._lock:
            if self._row_groups is None:
                tables = [t for part in self._scan_parts(columns) for t in part]
            else:
                by_part: dict[str, list[int]] = {}
                for ref in self._row_groups:
                    by_part.setdefault(ref.part, []).append(ref.row_group)
                read = self.parquet.read_each(list(by_part), lambda uri, pf: {
                    rg: pf.read_row_group(rg, columns=columns, use_threads=False) for rg in by_part[uri]})
                found = dict(zip(by_part, read))
                tables = [found[ref.part][ref.row_group] for ref in self._row_groups]
            self.row_groups_read += len(tables)
            return tables

    def read_row_group(self, ref: RowGroupRef) -> list[Episode]:
        """The episodes of one row group, in row order, with their MediaIndex filled in.

        Args:
            ref: one of `row_groups()`.
        Returns:
            Its episodes.
        """
        table = fill_media_index(self._read(ref), self.media_index.lookup)
        return [Episode(table.slice(i, 1), access=self.access) for i in range(table.num_rows)]

    def _read(self, ref: RowGroupRef, columns: Optional[list[str]] = None) -> pa.Table:
        self.row_groups_read += 1
        return self.parquet.row_group(ref.part, ref.row_group, columns)

    def read_rows(self, ref: RowGroupRef, columns: Optional[list[str]] = None) -> pa.Table:
        """One row group's episode rows as the part stores them: in the default layout each clip's
        `clip.media.index` is null (`tracks` gives the file's tables instead of a filled-in record).

        Args:
            ref: one of `row_groups()`.
            columns: only these columns (default: all).
        """
        return self._read(ref, columns)

    def tracks(self, uri: str, inline: Optional[pa.Array] = None) -> Optional[TrackTables]:
        """The primary track's tables of the video file `uri`, built once per reader and file.

        Args:
            uri: the video file.
            inline: the MediaIndex an episode row carries for it (length 1; the --inline-index layout), or
                None to look it up in media_index/.
        Returns:
            The tables; None when the file has no MediaIndex.
        Raises:
            ReaderError: the index cannot be used, or media_index/ cannot be read.
        """
        if inline is None:
            return self.media_index.tracks(uri)
        found = self._inline_tracks.get(uri)
        if found is None:
            found = track_tables(uri, inline)
            self._inline_tracks.put(uri, found, _track_bytes(found))
        return found

    def __iter__(self) -> Iterator[Episode]:
        for ref in self.row_groups():
            yield from self.read_row_group(ref)

    def __len__(self) -> int:
        return sum(r.num_rows for r in self.row_groups())

    def episode(self, episode_index: int) -> Episode:
        """The episode with this `episode_index` (reads only row groups whose statistics can hold it).

        Args:
            episode_index: the episode's index in the dataset.
        Returns:
            The episode, its MediaIndex filled in.
        Raises:
            ReaderError: the import does not hold it (the message says which episodes it holds).
        """
        checked_number(episode_index, "episode_index", whole=True)
        for ref in self.row_groups():
            if ref.min_episode is not None and not ref.min_episode <= episode_index <= ref.max_episode:
                continue
            table = self._read(ref)
            hits = np.flatnonzero(pc.equal(table.column("episode_index"), episode_index).to_numpy(
                zero_copy_only=False))
            if len(hits):
                row = fill_media_index(table.slice(int(hits[0]), 1), self.media_index.lookup)
                return Episode(row, access=self.access)
        present = self.episode_indices()
        held = (f"episode {_ranges_text(present)} is" if len(present) == 1 else
                f"episodes {_ranges_text(present)} are") if len(present) else "it holds no episodes"
        raise ReaderError(f"episode {episode_index} is not in the import at {self.root}: {held}")

    def episode_indices(self) -> np.ndarray:
        """Every episode_index the import holds, sorted (reads the `episode_index` column of every part)."""
        found = [self.parquet.row_group(r.part, r.row_group, ["episode_index"]).column("episode_index").to_numpy()
                 for r in self.row_groups()]
        return np.unique(np.concatenate(found).astype(np.int64)) if found else np.zeros(0, np.int64)
