"""Read an import's output back as logical episodes: frame fields as numpy, cameras as seekable videos.

`ImportReader(OUT)` opens any import output (local path or fsspec URL, default or `--inline-index`
layout). It lists the episode parts from `manifest.json` (or, without one, from the `episodes/`
folder), iterates their episodes in order, or finds one by `episode_index` reading only the row
groups whose `episode_index` statistics can hold it. In the default layout each clip's
`clip.media.index` is null and is joined back from `media_index/` by `clip.media.source.uri`: a
`MediaIndexStore` maps URIs to row groups from the footers' `uri` statistics (one row group per MP4)
and fetches and caches only the row groups it needs. The `Episode` it returns is therefore the same
logical record as the `--inline-index` output (`Episode.to_arrow()`), whichever layout was read.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import io
import json
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms import storage
from transforms.episode import spql_types  # noqa: F401  (spql_types registers the extension types)
from transforms.reader.seek import (DEFAULT_TOLERANCE, FsspecRangeReader, RangeReader, ReaderError, TrackTables,
                                   VideoHandle)

__all__ = ["ImportReader", "Episode", "MediaIndexStore", "ReaderError", "RowGroupRef", "open_import"]

MANIFEST = "manifest.json"
EPISODES_DIR = "episodes"
MEDIA_INDEX_DIR = "media_index"


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


class _LRU:
    """A small thread-safe LRU map (workers read episodes from several threads)."""

    def __init__(self, max_items: int) -> None:
        self._max = max_items
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._max:
                self._items.popitem(last=False)


#: TrackTables by (uri, MediaIndex nbytes): derived once per file per process, shared by episodes.
_TRACKS = _LRU(64)


def track_tables(uri: str, index: pa.Array) -> TrackTables:
    key = (uri, index.nbytes, len(index))
    found = _TRACKS.get(key)
    if found is None:
        found = TrackTables.from_media_index(index)
        _TRACKS.put(key, found)
    return found


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
    the URI (the importer writes one row group per file, sorted by URI) and caches its rows."""

    def __init__(self, files: Sequence[str], *, cache_files: int = 256) -> None:
        self.files = list(files)
        self._groups: Optional[list[_IndexGroup]] = None
        self._cache = _LRU(cache_files)
        self._lock = threading.Lock()
        #: Row groups read so far (tests check that a lookup reads one).
        self.row_groups_read = 0

    def _load_groups(self) -> list[_IndexGroup]:
        with self._lock:
            if self._groups is None:
                groups = []
                for f in self.files:
                    md = _metadata(f)
                    for rg in range(md.num_row_groups):
                        lo, hi = _stats_range(md, rg, "uri")
                        groups.append(_IndexGroup(lo, hi, f, rg))
                groups.sort(key=lambda g: (g.min_uri is not None, g.min_uri or ""))
                self._groups = groups
            return self._groups

    def lookup(self, uri: str) -> Optional[pa.Array]:
        """The MediaIndex of `uri` as a length-1 spql.MediaIndex array; None when it has none."""
        found = self._cache.get(uri)
        if found is not None:
            return found[0]
        groups = self._load_groups()
        with_stats = [g for g in groups if g.min_uri is not None]
        mins = [g.min_uri for g in with_stats]
        # Groups are disjoint URI ranges in sorted order: the candidate is the last with min <= uri.
        k = bisect.bisect_right(mins, uri) - 1
        candidates = ([with_stats[k]] if k >= 0 and uri <= with_stats[k].max_uri else []) + \
            [g for g in groups if g.min_uri is None]
        for g in candidates:
            self._read_group(g)
            found = self._cache.get(uri)
            if found is not None:
                return found[0]
        self._cache.put(uri, (None,))
        return None

    def _read_group(self, g: _IndexGroup) -> None:
        table = _row_group(g.file, g.row_group, ["uri", "index"])
        self.row_groups_read += 1
        index = table.column("index").combine_chunks()
        for i, uri in enumerate(table.column("uri").to_pylist()):
            self._cache.put(uri, (index.slice(i, 1) if index.is_valid()[i].as_py() else None,))


# ------------------------------------------------------------------------------------------------
# Filling clip.media.index back in
# ------------------------------------------------------------------------------------------------

def _rebuild_struct(arr: pa.Array, replace: dict[str, pa.Array]) -> pa.Array:
    """`arr` (struct or extension over struct) with some children replaced; type, validity kept."""
    ext = arr.type if isinstance(arr, pa.ExtensionArray) else None
    st = arr.storage if ext is not None else arr
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
            sources.append(src.storage if isinstance(src, pa.ExtensionArray) else src)
        take[i] = position[key]
    if not changed:
        return None
    storage_arr = pa.concat_arrays(sources).take(pa.array(take, mask=mask))
    # the column's own type: whichever class (ours or spiral-sdk's) read it in this process
    return pa.ExtensionArray.from_storage(index.type, storage_arr)


def fill_media_index(table: pa.Table, lookup: Callable[[str], Optional[pa.Array]]) -> pa.Table:
    """Episode rows with `videos.*.clip.media.index` joined back by the media's source URI."""
    if "videos" not in table.column_names or table.num_rows == 0:
        return table
    videos = table.column("videos").combine_chunks()
    entries: dict[str, pa.Array] = {}
    for f in videos.type:
        entry = videos.field(f.name)
        clip = entry.field("clip")
        media = clip.storage.field("media")
        uris = media.storage.field("source").storage.field("uri").to_pylist()
        index = _index_column(uris, media.storage.field("index"), lookup)
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
# Episode
# ------------------------------------------------------------------------------------------------

def _ns(arr: pa.Array) -> int:
    st = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    return int(st.cast(pa.int64())[0].as_py())


def _numpy(col: pa.Array, shape: tuple[int, ...]) -> np.ndarray:
    """(frames, *shape) values; zero-copy when there are no nulls; a masked array when there are."""
    n = len(col)
    if col.null_count == 0:
        values = col.flatten() if shape else col
        try:
            return values.to_numpy(zero_copy_only=True).reshape((n, *shape))
        except pa.ArrowInvalid:  # bool, or null items inside a tensor
            return np.asarray(values.to_numpy(zero_copy_only=False)).reshape((n, *shape))
    rows = col.to_pylist()
    fill = next((r for r in rows if r is not None), None)
    dense = np.array([r if r is not None else fill for r in rows]).reshape((n, *shape)) if fill is not None else \
        np.zeros((n, *shape))
    mask = np.broadcast_to(np.array([r is None for r in rows]).reshape((n,) + (1,) * len(shape)), dense.shape)
    return np.ma.MaskedArray(dense, mask=mask)


class Episode:
    """One logical episode (one row of the episode type, its clips' MediaIndex filled in).

    Frame fields come as numpy arrays of `(frames, *shape)` (`episode["observation.state"]`), straight
    from the Arrow buffers; cameras as `VideoHandle`s (`episode.video("observation.images.front")`).
    Pickles as its Arrow record (IPC), so it travels through Beam."""

    def __init__(self, record: pa.Table, *, reader: Optional[RangeReader] = None,
                 tolerance: float = DEFAULT_TOLERANCE) -> None:
        if record.num_rows != 1:
            raise ReaderError(f"an Episode is one row, got {record.num_rows}")
        self._record = record
        self._reader = reader
        self.tolerance = tolerance
        self._frames: Optional[pa.StructArray] = None

    # -- record --------------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """The logical episode record: a one-row table of the episode type, index filled in."""
        return self._record

    @property
    def episode_index(self) -> int:
        return int(self._record.column("episode_index")[0].as_py())

    @property
    def length(self) -> int:
        return int(self._record.column("length")[0].as_py())

    @property
    def tasks(self) -> list[str]:
        return list(self._record.column("tasks")[0].as_py())

    # -- frames --------------------------------------------------------------------------------

    def frames(self) -> pa.StructArray:
        """The frames as an Arrow struct array (zero-copy slice of the record)."""
        if self._frames is None:
            lst = self._record.column("frames").chunk(0) if self._record.column("frames").num_chunks == 1 else \
                self._record.column("frames").combine_chunks()
            self._frames = lst.flatten()
        return self._frames

    @property
    def features(self) -> list[str]:
        return [f.name for f in self._record.schema.field("frames").type.value_type]

    def column(self, name: str) -> pa.Array:
        if name not in self.features:
            raise ReaderError(f"episode {self.episode_index} has no frame field {name!r} "
                              f"(fields: {', '.join(self.features)})")
        return self.frames().field(name)

    def __getitem__(self, name: str):
        """A frame field: numeric/bool tensors and scalars as numpy `(frames, *shape)` (scalars
        `(frames,)`), strings as an object array, images as a list of encoded bytes (None for a null
        image), other fields (language annotations) as Python lists."""
        col = self.column(name)
        t = col.type
        if isinstance(t, pa.FixedShapeTensorType):
            return _numpy(col.storage, tuple(t.shape))
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            return _numpy(col, ())
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return np.array(col.to_pylist(), dtype=object)
        if isinstance(t, pa.ExtensionType) and t.extension_name == "spql.EncodedImage":
            return col.storage.field("source").storage.field("bytes").to_pylist()
        return col.to_pylist()

    def arrays(self) -> dict[str, Any]:
        """Every frame field, as `__getitem__` gives it."""
        return {name: self[name] for name in self.features}

    # -- cameras -------------------------------------------------------------------------------

    @property
    def cameras(self) -> list[str]:
        if "videos" not in self._record.column_names:
            return []
        return [f.name for f in self._record.schema.field("videos").type]

    def video(self, camera: str, *, tolerance: Optional[float] = None) -> VideoHandle:
        """A seekable handle on `camera`'s clip (episode times in seconds on `timestamp`)."""
        if camera not in self.cameras:
            raise ReaderError(f"episode {self.episode_index} has no camera {camera!r} "
                              f"(cameras: {', '.join(self.cameras) or 'none'})")
        entry = self._record.column("videos").combine_chunks().field(camera)
        clip = entry.field("clip")
        if not clip.is_valid()[0].as_py():
            raise ReaderError(f"episode {self.episode_index} camera {camera} has no clip")
        cst = clip.storage
        media = cst.field("media").storage
        uri = media.field("source").storage.field("uri")[0].as_py()
        index = media.field("index")
        if not index.is_valid()[0].as_py():
            raise ReaderError(f"episode {self.episode_index} camera {camera}: {uri} has no MediaIndex "
                              "(its codec is not indexed, or media_index/ lacks it)")
        return VideoHandle(uri=uri, clip_start_ns=_ns(cst.field("start")), clip_end_ns=_ns(cst.field("end")),
                           time_origin_ns=_ns(entry.field("time_origin")), track=track_tables(uri, index),
                           reader=self._reader or FsspecRangeReader(),
                           tolerance=self.tolerance if tolerance is None else tolerance)

    # -- pickling ------------------------------------------------------------------------------

    def __reduce__(self):
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, self._record.schema) as w:
            w.write_table(self._record)
        return _episode_from_ipc, (sink.getvalue(), self.tolerance)

    def __repr__(self) -> str:
        return (f"Episode(episode_index={self.episode_index}, length={self.length}, tasks={self.tasks!r}, "
                f"cameras={self.cameras!r})")


def _episode_from_ipc(data: bytes, tolerance: float) -> Episode:
    return Episode(pa.ipc.open_stream(data).read_all(), tolerance=tolerance)


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


class ImportReader:
    """An import's output, read back: iterate episodes, look one up, seek its cameras."""

    def __init__(self, output_uri: str, *, reader: Optional[RangeReader] = None,
                 tolerance: float = DEFAULT_TOLERANCE) -> None:
        self.root = storage.normalize_root(output_uri)
        self.range_reader: RangeReader = reader or FsspecRangeReader()
        self.tolerance = tolerance
        manifest = storage.optional_read(storage.join(self.root, MANIFEST))
        if manifest is not None:
            doc = json.loads(manifest)
            self.parts = [storage.join(self.root, p) for _, f in sorted(doc.get("episodes_files", {}).items())
                          if f.get("status", "imported") == "imported" for p in f.get("parts", [])]
            index_files = [storage.join(self.root, p) for p in doc.get("media_index", [])]
        else:
            self.parts = [u for u in storage.list_files(storage.join(self.root, EPISODES_DIR), suffix=".parquet")
                          if not u.rsplit("/", 1)[-1].startswith(".")]
            index_files = [u for u in storage.list_files(storage.join(self.root, MEDIA_INDEX_DIR), suffix=".parquet")
                           if not u.rsplit("/", 1)[-1].startswith(".")]
            if not self.parts:
                raise ReaderError(f"{self.root} has no {MANIFEST} and no episode parts under {EPISODES_DIR}/")
        self.media_index = MediaIndexStore(index_files)
        self._row_groups: Optional[list[RowGroupRef]] = None
        #: Episode row groups read so far (tests check that a lookup reads only what it needs).
        self.row_groups_read = 0
        self._lock = threading.Lock()

    def row_groups(self) -> list[RowGroupRef]:
        """Every row group of every part, in episode order (reads the parts' footers once)."""
        with self._lock:
            if self._row_groups is None:
                out = []
                for part in self.parts:
                    md = _metadata(part)
                    for rg in range(md.num_row_groups):
                        lo, hi = _stats_range(md, rg, "episode_index")
                        out.append(RowGroupRef(part, rg, lo, hi, md.row_group(rg).num_rows))
                self._row_groups = out
            return self._row_groups

    def read_row_group(self, ref: RowGroupRef) -> list[Episode]:
        """The episodes of one row group, in row order, with their MediaIndex filled in."""
        table = fill_media_index(self._read(ref), self.media_index.lookup)
        return [Episode(table.slice(i, 1), reader=self.range_reader, tolerance=self.tolerance)
                for i in range(table.num_rows)]

    def _read(self, ref: RowGroupRef) -> pa.Table:
        self.row_groups_read += 1
        return _row_group(ref.part, ref.row_group)

    def __iter__(self) -> Iterator[Episode]:
        for ref in self.row_groups():
            yield from self.read_row_group(ref)

    def __len__(self) -> int:
        return sum(r.num_rows for r in self.row_groups())

    def episode(self, episode_index: int) -> Episode:
        """The episode with this `episode_index` (reads only row groups whose statistics can hold it)."""
        for ref in self.row_groups():
            if ref.min_episode is not None and not ref.min_episode <= episode_index <= ref.max_episode:
                continue
            table = self._read(ref)
            hits = np.flatnonzero(pc.equal(table.column("episode_index"), episode_index).to_numpy(
                zero_copy_only=False))
            if len(hits):
                row = fill_media_index(table.slice(int(hits[0]), 1), self.media_index.lookup)
                return Episode(row, reader=self.range_reader, tolerance=self.tolerance)
        raise ReaderError(f"episode {episode_index} is not in the import at {self.root} "
                          f"({len(self.parts)} part(s))")


def open_import(output_uri: str, **kwargs) -> ImportReader:
    return ImportReader(output_uri, **kwargs)
