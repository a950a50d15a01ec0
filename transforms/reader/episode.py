"""One logical episode read back: frame fields as numpy, cameras as seekable `VideoHandle`s."""

from __future__ import annotations

import collections
import dataclasses
import functools
import io
import threading
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from transforms.episode import spql_types
from transforms.mp4 import ranges
from transforms.reader.confine import confined
from transforms.reader.seek import DEFAULT_TOLERANCE, ReaderError, TrackTables, VideoHandle, checked_number

__all__ = ["Episode", "VideoAccess", "camera_handle", "field_values", "track_tables"]


@dataclasses.dataclass(frozen=True)
class VideoAccess:
    """How an episode's cameras are read.

    Attributes:
        tolerance: the largest distance (s) between a requested time and the frame returned.
        allowed_roots: video files are read only inside these roots; None reads any file (an Episode
            built from a record the caller trusts).
        skip_videos: the import ran with `--skip-videos` (no camera was imported), for messages.
        open_file: opens a video file for range reads (default: `ranges.open_uri`); not pickled.
        cache_key: names the output the episode comes from (its root and run): each file's TrackTables
            are built once per process and output; empty, they are built at each `video()` call.
        relocate: where a clip's file is read now, when the dataset moved (`confine.Relocation.uri`);
            the clip's own URI still names its MediaIndex.
    """

    tolerance: float = DEFAULT_TOLERANCE
    allowed_roots: Optional[tuple[str, ...]] = None
    skip_videos: bool = False
    open_file: Optional[Callable[[str], ranges.RangeReader]] = None
    cache_key: str = ""
    relocate: Optional[Callable[[str], str]] = None

    def __post_init__(self) -> None:
        checked_number(self.tolerance, "tolerance")


class _LRU:
    """A thread-safe LRU map (workers read episodes from several threads), bounded by the sizes its values
    are put with: 1 each by default, so `_LRU(64)` keeps 64 values; with byte sizes it keeps a byte budget.
    The newest value is always kept, even alone over the bound."""

    def __init__(self, max_size: int) -> None:
        self.max_size = int(max_size)
        self.size = 0
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        return None

    def put(self, key, value, size: int = 1) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.size -= old[1]
            self._items[key] = (value, int(size))
            self.size += int(size)
            while self.size > self.max_size and len(self._items) > 1:
                self.size -= self._items.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._items)

    def copy(self) -> "_LRU":
        """The same entries under a lock of its own (a forked child's copy: the parent's lock may have been held,
        at the fork, by a thread the child does not have)."""
        new = _LRU(self.max_size)
        new._items, new.size = collections.OrderedDict(self._items), self.size
        return new


#: TrackTables by (output, uri): derived once per file per process, shared by the output's episodes.
_TRACKS = _LRU(64)


def track_tables(uri: str, index: pa.Array, cache_key: str = "") -> TrackTables:
    """The primary track's tables of `uri`'s MediaIndex, built once per process, output and file.

    Args:
        uri: the video file.
        index: its MediaIndex (length 1).
        cache_key: the output the index comes from; empty: not cached (the index could be anything).
    Raises:
        ReaderError: the index is not valid (naming the file).
    """
    key = (cache_key, uri, index.nbytes)
    found = _TRACKS.get(key) if cache_key else None
    if found is None:
        try:
            found = TrackTables.from_media_index(index)
        except ReaderError as ex:
            raise ReaderError(f"the MediaIndex of {uri} cannot be used: {ex}") from None
        if cache_key:
            _TRACKS.put(key, found)
    return found


def _ns(arr: pa.Array) -> int:
    return int(spql_types.storage_of(arr).cast(pa.int64())[0].as_py())


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


def field_values(col: pa.Array):
    """A frame field's values as `Episode[name]` gives them (see there), for any run of frames."""
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


class Episode:
    """One logical episode (one row of the episode type, its clips' MediaIndex filled in).

    Frame fields come as numpy arrays of `(frames, *shape)` (`episode["observation.state"]`), straight
    from the Arrow buffers; cameras as `VideoHandle`s (`episode.video("observation.images.front")`).
    Pickles as its Arrow record (IPC), so it travels through Beam.

    Args:
        record: a one-row table of the episode type.
        access: how its cameras are read (default: any file, default tolerance).
    """

    def __init__(self, record: pa.Table, *, access: Optional[VideoAccess] = None) -> None:
        if record.num_rows != 1:
            raise ReaderError(f"an Episode is one row, got {record.num_rows}")
        self._record = record
        self.access = access or VideoAccess()
        self._frames: Optional[pa.StructArray] = None

    @property
    def tolerance(self) -> float:
        return self.access.tolerance

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
            col = self._record.column("frames")
            self._frames = (col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()).flatten()
        return self._frames

    @property
    def features(self) -> list[str]:
        return [f.name for f in self._record.schema.field("frames").type.value_type]

    def column(self, name: str) -> pa.Array:
        """A frame field as Arrow.

        Raises:
            ReaderError: the episode has no such field.
        """
        if name not in self.features:
            raise ReaderError(f"episode {self.episode_index} has no frame field {name!r} "
                              f"(fields: {', '.join(self.features)})")
        return self.frames().field(name)

    def __getitem__(self, name: str):
        """A frame field: numeric/bool tensors and scalars as numpy `(frames, *shape)` (scalars
        `(frames,)`), strings as an object array, images as a list of encoded bytes (None for a null
        image), other fields (language annotations) as Python lists."""
        return field_values(self.column(name))

    def arrays(self) -> dict[str, Any]:
        """Every frame field, as `__getitem__` gives it."""
        return {name: self[name] for name in self.features}

    # -- cameras -------------------------------------------------------------------------------

    @property
    def cameras(self) -> list[str]:
        if "videos" not in self._record.column_names:
            return []
        return [f.name for f in self._record.schema.field("videos").type]

    @property
    def depth_specs(self) -> dict:
        """The depth cameras (video or image features) by name, as `lerobot.depth.DepthSpec`: what turns their
        pixels into depth. Empty when the import has none."""
        from transforms.lerobot.depth import specs_from_metadata
        try:
            return specs_from_metadata(self._record.schema.metadata)
        except ValueError as ex:
            raise ReaderError(f"episode {self.episode_index}: {ex}") from None

    def depth_images(self, name: str, *, depth_unit: str = "mm", raw: bool = False) -> np.ndarray:
        """A depth camera stored as images (16-bit TIFF in the data files): every frame's depth, N x H x W x 1
        float32 in `depth_unit` ("mm" or "m") as LeRobot returns it, or with `raw` the stored values as they are.

        Raises:
            ReaderError: no such image feature, it is no depth map, or a frame is null or does not decode.
        """
        import io as _io

        from transforms.lerobot.depth import image_depth
        spec = self.depth_specs.get(name)
        if spec is None or spec.stored != "image":
            raise ReaderError(f"episode {self.episode_index}: {name!r} is no depth camera stored as images "
                              f"(depth cameras: {', '.join(sorted(self.depth_specs)) or 'none'})")
        try:
            from PIL import Image
        except ImportError:
            raise ImportError("image features need Pillow: pip install pillow") from None
        out = []
        for k, data in enumerate(self[name]):
            if data is None:
                raise ReaderError(f"episode {self.episode_index} frame {k}: {name} is null")
            try:
                with Image.open(_io.BytesIO(data)) as img:
                    arr = np.array(img)
            except Exception as ex:  # noqa: BLE001 - any undecodable image is this frame's error
                raise ReaderError(f"episode {self.episode_index} frame {k}: {name} does not decode "
                                  f"({type(ex).__name__}: {ex})") from None
            if arr.ndim != 2:
                raise ReaderError(f"episode {self.episode_index} frame {k}: {name} is declared a depth map but its "
                                  f"image has {arr.shape[2]} channels, not one")
            out.append(arr if raw else image_depth(arr, spec, depth_unit))
        return np.stack(out)[..., None] if out else np.zeros((0, 0, 0, 1), np.float32)

    def video(self, camera: str, *, tolerance: Optional[float] = None) -> VideoHandle:
        """A seekable handle on `camera`'s clip (a depth camera's frames are de-quantized depth, see
        `VideoHandle.frames_at`).

        Args:
            camera: the video feature's name.
            tolerance: overrides the reader's tolerance (seconds) for this handle.
        Returns:
            The handle; its times are episode times in seconds (the `timestamp` field's clock).
        Raises:
            ReaderError: no such camera (saying why when the import skipped the videos), no clip or
            MediaIndex, or a video file outside the roots the reader may read.
        """
        entry, uri = self._camera_entry(camera)
        clip = spql_types.storage_of(entry.field("clip"))
        index = spql_types.storage_of(clip.field("media")).field("index")
        valid = index.is_valid()[0].as_py()
        return camera_handle(self.access, self.episode_index, camera, uri,
                             lambda: track_tables(uri, index, self.access.cache_key) if valid else None,
                             start_ns=_ns(clip.field("start")), end_ns=_ns(clip.field("end")),
                             origin_ns=_ns(entry.field("time_origin")), length=self.length, tolerance=tolerance,
                             depth=self.depth_specs.get(camera))

    def _camera_entry(self, camera: str) -> tuple[pa.StructArray, str]:
        """(the camera's `videos` entry, its clip's file URI)."""
        if camera not in self.cameras:
            why = (": the import ran with --skip-videos, so no camera was imported (import again without it to "
                   "read frames)") if self.access.skip_videos else f" (cameras: {', '.join(self.cameras) or 'none'})"
            raise ReaderError(f"episode {self.episode_index} has no camera {camera!r}{why}")
        entry = self._record.column("videos").combine_chunks().field(camera)
        clip = entry.field("clip")
        if not clip.is_valid()[0].as_py():
            raise ReaderError(f"episode {self.episode_index} camera {camera} has no clip")
        media = spql_types.storage_of(spql_types.storage_of(clip).field("media"))
        return entry, spql_types.storage_of(media.field("source")).field("uri")[0].as_py()

    # -- pickling ------------------------------------------------------------------------------

    def __reduce__(self):
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, self._record.schema) as w:
            w.write_table(self._record)
        return _episode_from_ipc, (sink.getvalue(), dataclasses.replace(self.access, open_file=None))

    def __repr__(self) -> str:
        return (f"Episode(episode_index={self.episode_index}, length={self.length}, tasks={self.tasks!r}, "
                f"cameras={self.cameras!r})")


@functools.lru_cache(maxsize=4096)
def _confined(uri: str, roots: tuple[str, ...]) -> bool:
    """`confined`, remembered per file and roots: resolving a local path walks its symlinks (a few lstat
    calls per folder), which a random read would otherwise repeat for every episode it opens."""
    return confined(uri, roots)


def camera_handle(access: VideoAccess, episode_index: int, camera: str, uri: Optional[str],
                  tracks: Callable[[], Optional[TrackTables]], *, start_ns: int, end_ns: int, origin_ns: int,
                  length: Optional[int], tolerance: Optional[float] = None, depth: Any = None) -> VideoHandle:
    """The `VideoHandle` of one camera of one episode, its file checked against the roots the reader reads.

    Args:
        access: how the episode's cameras are read.
        episode_index, camera: for messages.
        uri: the clip's file.
        tracks: gives the file's tables (None: the file has no MediaIndex); called once the file is allowed.
        start_ns, end_ns, origin_ns: the clip on the file's clock and the episode time of stream time 0.
        length: the episode's length in frames.
        tolerance: overrides the access's tolerance (seconds).
        depth: the camera's `lerobot.depth.DepthSpec` when it is a depth map.
    Raises:
        ReaderError: the clip names no file, the file is outside the roots, or it has no MediaIndex.
    """
    if not isinstance(uri, str) or not uri:
        raise ReaderError(f"episode {episode_index} camera {camera}: its clip names no video file")
    roots = access.allowed_roots
    if roots is not None and not _confined(uri, tuple(roots)):
        raise ReaderError(f"episode {episode_index} camera {camera}: its video file {uri:.500} is not inside "
                          f"the roots this reader reads ({', '.join(roots)}); an import's clips point into its "
                          "dataset, so the output was edited or the dataset moved. Pass "
                          "ImportReader(..., allowed_roots=[...]) to read from another root")
    track = tracks()
    if track is None:
        raise ReaderError(f"episode {episode_index} camera {camera}: {uri} has no MediaIndex "
                          "(its codec is not indexed, or media_index/ lacks it)")
    if access.relocate is not None:
        uri = access.relocate(uri)
    return VideoHandle(uri=uri, clip_start_ns=start_ns, clip_end_ns=end_ns, time_origin_ns=origin_ns, track=track,
                       source=_open(access.open_file or ranges.open_uri, uri), frame_count=length,
                       tolerance=access.tolerance if tolerance is None else tolerance, depth=depth)


def _open(opener: Callable[[str], ranges.RangeReader], uri: str) -> ranges.RangeReader:
    try:
        return opener(uri)
    except Exception as ex:  # noqa: BLE001 - an unknown filesystem, a missing driver
        raise ReaderError(f"cannot open video file {uri}: {getattr(ex, 'message', ex)}") from None


def _episode_from_ipc(data: bytes, access: VideoAccess) -> Episode:
    return Episode(pa.ipc.open_stream(data).read_all(), access=access)
