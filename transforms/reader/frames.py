"""Training from an import: a map-style PyTorch dataset whose items are what LeRobot's `LeRobotDataset` returns.

`ImportedFrames(OUT)` serves the frames of an import (local path or any fsspec URL, either output
layout) one item per frame, in the import's episode order. Item `i` is the dict LeRobot's
`LeRobotDataset.__getitem__` gives for the same frame:

* every frame feature as a tensor, typed as LeRobot's loader types it (it turns each value into a
  Python object and then into a tensor): floating features float32, integer features int64, booleans
  bool, shapes as the dataset declares them (a shape-[1] feature is a scalar); string features stay
  strings; `timestamp`, `frame_index`, `episode_index`, `index`, `task_index` included;
* each camera (video features and image features) as float32 C x H x W in [0, 1] (`uint8 / 255`;
  with `camera_dtype="uint8"`, LeRobot's `return_uint8=True`, a video camera's uint8 values themselves, to
  convert on the training device; image features stay float32 then, as LeRobot returns them), contiguous
  as LeRobot's (the decoder converts to planar RGB, so no transposing copy is made);
* each depth camera (`is_depth_map` in info.json; video of 12-bit codes, or 16-bit TIFF images) as
  LeRobot 0.6.1 returns it in every mode: float32 1 x H x W depth, de-quantized from the codes with the
  camera's depth_min / depth_max / shift / use_log, in millimetres rounded to whole ones (`depth_unit="m"`:
  metres, LeRobot's `depth_output_unit`);
* `language_persistent` / `language_events` (when the dataset has them): the frame's rows as LeRobot 0.6.1
  returns them, lists of row dicts (role, content, style, timestamp (persistent rows only), camera,
  tool_calls);
* `task`: the task string of the frame's `task_index` (row `task_index` of the dataset's
  meta/tasks.parquet, as LeRobot looks it up);
* with `delta_timestamps={key: [seconds]}`: the key's values at those offsets, stacked, each offset
  clamped into the episode, and `{key}_is_pad` saying which offsets fell outside it. The offsets must
  be whole frames (within `tolerance_s` of a multiple of 1/fps), as LeRobot checks. A camera window
  of one offset comes back without its window axis, as LeRobot's `squeeze(0)` leaves it;
* `image_transforms(frame)` applied to every camera of the item, after the windows;
* with `recipe=`: the frame's `messages`, `message_streams` and `target_message_indices` as
  LeRobot's `RenderMessagesStep` renders them (the task fallback included). Batch items with language
  columns or messages with `ImportedFrames.collate`.

Camera frames are decoded from the GOPs they need, read by byte range through the MediaIndex (the
MP4's moov is never read) and kept in a small per-process cache of decode streams (`GopCache`), so
the items of a batch that share a GOP decode it once. An item's cost does not depend on how episodes
are laid out in MP4s: each MP4's MediaIndex is read once per process into the numpy tables a seek
needs (`ImportReader.tracks`, shared by every episode of the file), each media_index/ shard and
episode part is opened once per process, and an episode row group is read once and served from
numpy; no item copies a file's index or builds the logical record (`ImportReader.episode()` does).
The process that makes the dataset reads every part's footer, media_index/'s footers and the dataset's tasks
once; a DataLoader worker forked from it keeps them (its reader is the parent's, with its own open files and
locks), so a worker's first batch reads only its items' row groups, MP4 tables and video bytes. The dataset
pickles without any open file or decoder and rebuilds its readers lazily in each process, so
`DataLoader(num_workers > 0)` works with any start method.

torch is needed to build one (`pip install -e ".[torch]"`); this module imports without it.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import dataclasses
import io
import json
import math
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.base import storage
from transforms.base.errors import LeRobotImportError
from transforms.lerobot import depth as depth_lib
from transforms.lerobot.tasks import TASKS_PATH, frame_tasks, read_tasks
from transforms.episode import spql_types
from transforms.reader.episode import Episode, camera_handle, field_values
from transforms.reader import read_ahead as read_ahead_lib
from transforms.reader.decoder import Decoder
from transforms.reader.gop_cache import GopCache
from transforms.reader.import_reader import ImportReader, _read_manifest
from transforms.reader.seek import DEFAULT_TOLERANCE, ReaderError, TrackTables, VideoHandle
from transforms.reader.threads import ThreadChoice

try:  # a real torch Dataset when torch is there; the module still imports without it
    from torch.utils.data import Dataset as _Dataset
except ImportError:  # pragma: no cover - exercised only where torch is absent
    _Dataset = object  # type: ignore[assignment,misc]

__all__ = ["FramesError", "ImportedFrames", "closure_starts"]

#: Frame fields that hold language annotations: lists of row dicts in every item (and rendered through
#: `recipe=`), never tensors.
LANGUAGE_FIELDS = ("language_persistent", "language_events")
#: Keys a recipe adds to an item.
MESSAGE_KEYS = ("messages", "message_streams", "target_message_indices")
#: What `camera_dtype` may be: LeRobot's float32 in [0, 1], or the decoder's uint8.
CAMERA_DTYPES = ("float32", "uint8")
#: The divisor of LeRobot's uint8 -> float32 conversion, as a float32 (so numpy divides in float32).
_255 = np.float32(255)
#: Bytes of episode row groups (their frame columns as numpy and Arrow) kept per process.
ROW_GROUP_BYTES = 256 << 20


class FramesError(ReaderError, ValueError):
    """A request `ImportedFrames` cannot serve: bad arguments (unknown keys or episodes, offsets that are
    not whole frames), or an item LeRobot could not return either (a null value, a frame missing from
    its video). It is a ValueError, as LeRobot's own checks raise."""


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("ImportedFrames needs PyTorch: pip install -e \".[torch]\" (or any torch>=2.2)") from None
    return torch


def closure_starts(track: TrackTables, samples: np.ndarray) -> np.ndarray:
    """The first decode index each sample's decode needs (its GOP's start, or the previous GOP's for
    an open-GOP leading picture): `TrackTables.closure_start` for many samples at once.

    Args:
        track: the file's tables.
        samples: decode indices.
    Returns:
        int64 decode indices, one per sample.
    """
    s = np.asarray(samples, np.int64)
    g = np.maximum(np.searchsorted(track.gop_start, s, side="right") - 1, 0)
    start = track.gop_start[g]
    leading = (g > 0) & (track.pts[s] < track.pts[start])
    return np.where(leading, track.gop_start[np.maximum(g - 1, 0)], start).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# Features as LeRobot types them
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Feature:
    """One frame field: how it becomes part of an item."""

    name: str
    kind: str                 # "numeric", "string", "image", "language"
    shape: tuple[int, ...]    # per frame ("numeric" only)
    dtype: Any                # numpy dtype of the item ("numeric" only)
    depth: Optional[depth_lib.DepthSpec] = None  # an image feature that is a depth map


def _item_dtype(t: pa.DataType) -> Optional[np.dtype]:
    """LeRobot's tensor dtype for Arrow values of type `t`: its loader makes Python numbers of them and
    `torch.tensor` makes floats float32 and ints int64."""
    if pa.types.is_floating(t):
        return np.dtype(np.float32)
    if pa.types.is_integer(t):
        return np.dtype(np.int64)
    if pa.types.is_boolean(t):
        return np.dtype(bool)
    return None


def _features(frames_type: pa.StructType, depth: Mapping[str, depth_lib.DepthSpec]) -> list[_Feature]:
    out = []
    for f in frames_type:
        t = f.type
        if f.name in LANGUAGE_FIELDS:
            out.append(_Feature(f.name, "language", (), None))
            continue
        if isinstance(t, pa.FixedShapeTensorType):
            dtype = _item_dtype(t.value_type)
            if dtype is not None:
                out.append(_Feature(f.name, "numeric", tuple(int(d) for d in t.shape), dtype))
        elif _item_dtype(t) is not None:
            out.append(_Feature(f.name, "numeric", (), _item_dtype(t)))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            out.append(_Feature(f.name, "string", (), None))
        elif isinstance(t, pa.ExtensionType) and t.extension_name == "spql.EncodedImage":
            out.append(_Feature(f.name, "image", (), None, depth.get(f.name)))
    return out


def _language_rows(value: Any) -> Any:
    """A frame's language column as LeRobot 0.6.1 returns it in an item: its list of row dicts, each with the
    fields of the column's row type in order (event rows have no `timestamp`), each tool call the JSON object
    it holds (the column stores it as JSON text, LeRobot's loader gives it parsed)."""
    if value is None:
        return None
    return [{**row, "tool_calls": [json.loads(c) if isinstance(c, str) else c for c in row["tool_calls"]]}
            if row.get("tool_calls") else dict(row) for row in value]  # copies: the group's rows stay as read


def _decode_image(data: Optional[bytes], where: str, depth: Optional[depth_lib.DepthSpec] = None,
                  depth_unit: str = "mm"):
    """An encoded image as LeRobot's loader gives it: PIL decodes it, torchvision's ToTensor makes it
    C x H x W, 8-bit images float32 in [0, 1] (with `return_uint8` too); a depth image (16-bit TIFF) its
    depth as float32 1 x H x W in `depth_unit`."""
    torch = _torch()
    if data is None:
        raise FramesError(f"{where}: the image is null (LeRobot cannot return a null image either)")
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("image features need Pillow: pip install pillow") from None
    try:
        with Image.open(io.BytesIO(data)) as img:
            mode = img.mode
            arr = np.array(img)
    except Exception as ex:  # noqa: BLE001 - any undecodable image is this frame's error
        raise FramesError(f"{where}: the image does not decode ({type(ex).__name__}: {ex})") from None
    if mode == "1":
        arr = arr.astype(np.uint8) * 255
    if depth is not None:
        if arr.ndim != 2:  # LeRobot writes a depth image as a one-channel 16-bit TIFF
            raise FramesError(f"{where}: the feature is declared a depth map (info.json `is_depth_map: true`) but "
                              f"its image is {mode} ({arr.shape[2]} channels), not one channel of depth")
        return torch.from_numpy(depth_lib.image_depth(arr, depth, depth_unit)[None])
    if arr.ndim == 2:
        arr = arr[:, :, None]
    t = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
    return t.to(torch.float32) / 255 if t.dtype == torch.uint8 else t


# ------------------------------------------------------------------------------------------------
# One episode, ready to serve items
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Clips:
    """One camera's clips over a row group's episodes, as columns (one value per episode row)."""

    valid: np.ndarray                # bool: the row has a clip
    uris: list                       # the clip's file (str or None)
    start_ns: np.ndarray             # int64, the clip on the file's clock
    end_ns: np.ndarray
    origin_ns: np.ndarray            # int64, the episode time of stream time 0
    inline: Optional[pa.Array]       # the rows' own MediaIndex (--inline-index layout); None when all null
    inline_valid: np.ndarray         # bool


def _ns_column(arr: pa.Array) -> np.ndarray:
    return np.asarray(spql_types.storage_of(arr).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False),
                      np.int64)


def _clips(videos: pa.StructArray, camera: str) -> _Clips:
    entry = videos.field(camera)
    clip_arr = entry.field("clip")
    clip = spql_types.storage_of(clip_arr)
    media = spql_types.storage_of(clip.field("media"))
    uris = spql_types.storage_of(media.field("source")).field("uri").to_pylist()
    index = media.field("index")
    inline_valid = index.is_valid().to_numpy(zero_copy_only=False)
    return _Clips(valid=clip_arr.is_valid().to_numpy(zero_copy_only=False), uris=uris,
                  start_ns=_ns_column(clip.field("start")), end_ns=_ns_column(clip.field("end")),
                  origin_ns=_ns_column(entry.field("time_origin")),
                  inline=index if inline_valid.any() else None, inline_valid=inline_valid)


@dataclasses.dataclass
class _Group:
    """One episode row group, ready to serve items: every frame column of all its episodes as one numpy
    array (episode `r`'s frames are `offsets[r]:offsets[r + 1]`), each camera's clips as columns. The
    MediaIndex is not in it: each file's tables come from the reader, once per file and process."""

    table: pa.Table                              # the rows as stored (clip.media.index null by default)
    offsets: np.ndarray                          # int64, rows + 1
    values: dict[str, np.ndarray]                # numeric features, item dtypes, (frames, *shape)
    nulls: dict[str, np.ndarray]                 # numeric features with nulls: (frames,) bool
    others: dict[str, list]                      # strings and encoded images, per frame
    timestamps: np.ndarray                       # float32 seconds
    clips: dict[str, _Clips]
    nbytes: int
    episodes: dict[int, "_Prepared"] = dataclasses.field(default_factory=dict)  # row -> prepared, as used


@dataclasses.dataclass
class _Prepared:
    episode: Episode                             # the row as stored (for tasks and language only)
    episode_index: int
    row: int                                     # the row in its group
    group: _Group
    length: int
    values: dict[str, np.ndarray]                # views of the group's arrays
    nulls: dict[str, np.ndarray]
    others: dict[str, list]
    timestamps: np.ndarray
    handles: dict[str, VideoHandle] = dataclasses.field(default_factory=dict)
    # camera -> decode index of each frame's picture in its file; None: some frame has no picture
    # within the tolerance, so frames are located one item at a time (each item's own error)
    samples: dict[str, Optional[np.ndarray]] = dataclasses.field(default_factory=dict)
    # camera -> each frame's decode closure start (a sample of `samples`), None as in `samples`
    firsts: dict[str, Optional[np.ndarray]] = dataclasses.field(default_factory=dict)
    tasks: Optional[list[Optional[str]]] = None
    rendered: Optional[list] = None


def _values(col: pa.Array, f: _Feature) -> tuple[np.ndarray, Optional[np.ndarray]]:
    raw = field_values(col)
    nulls = None
    if col.null_count and np.ma.isMaskedArray(raw):  # np.ma (imported on first use) only where there are nulls
        mask = np.ma.getmaskarray(raw)
        nulls = mask.reshape(len(mask), -1).any(axis=1)
        raw = raw.filled(0)
    return np.asarray(raw).astype(f.dtype, copy=False).reshape((-1, *f.shape)), nulls


#: Offsets of a `delta_timestamps` window are at most this far from the frame (a day) ...
MAX_OFFSET_S = 86_400.0
#: ... and a window has at most this many offsets.
MAX_WINDOW = 100_000
#: Episode indices are non-negative int64 values (as the import stores them).
_MAX_EPISODE = np.iinfo(np.int64).max


def check_arguments(delta_timestamps: Optional[Mapping[str, Sequence[float]]], episodes: Optional[Sequence[int]],
                    tolerance_s: float) -> tuple[Optional[dict[str, list[float]]], Optional[np.ndarray]]:
    """`ImportedFrames`' arguments checked before anything is read: `delta_timestamps` as {key: [finite
    seconds within MAX_OFFSET_S]}, `episodes` as whole non-negative indices, `tolerance_s` finite.

    Returns:
        (the windows as lists of floats, the episodes as an int64 array), None where not given.
    Raises:
        FramesError: naming the argument and the value that breaks the rule.
    """
    if not (isinstance(tolerance_s, (int, float)) and math.isfinite(tolerance_s) and tolerance_s >= 0):
        raise FramesError(f"tolerance_s={tolerance_s!r:.100} is not a finite number of seconds >= 0")
    windows = None
    if delta_timestamps is not None:
        if not isinstance(delta_timestamps, Mapping):
            raise FramesError(f"delta_timestamps must map feature keys to lists of offsets in seconds, not "
                              f"{type(delta_timestamps).__name__}")
        windows = {}
        for key, offsets in delta_timestamps.items():
            if isinstance(offsets, (str, bytes)) or not isinstance(offsets, (Sequence, np.ndarray)):
                raise FramesError(f"delta_timestamps[{key!r:.100}] must be a list of offsets in seconds, not "
                                  f"{type(offsets).__name__}")
            if len(offsets) > MAX_WINDOW:
                raise FramesError(f"delta_timestamps[{key!r:.100}] has {len(offsets):,} offsets; at most "
                                  f"{MAX_WINDOW:,} are served per item")
            values = []
            for x in offsets:
                try:
                    value = float(x)
                except (TypeError, ValueError, OverflowError):
                    raise FramesError(f"delta_timestamps[{key!r:.100}] holds {x!r:.100}, not a number of seconds"
                                      ) from None
                if not math.isfinite(value) or abs(value) > MAX_OFFSET_S:
                    raise FramesError(f"delta_timestamps[{key!r:.100}] holds {x!r:.100}: offsets are finite "
                                      f"seconds within +/-{MAX_OFFSET_S:g} s of the frame")
                values.append(value)
            windows[key] = values
    wanted = None
    if episodes is not None:
        try:
            raw = np.asarray(list(episodes), dtype=object).reshape(-1)
        except TypeError:
            raise FramesError(f"episodes must be a list of episode indices, not {type(episodes).__name__}") from None
        for e in raw:
            whole = isinstance(e, (int, np.integer)) and not isinstance(e, bool) or (
                isinstance(e, (float, np.floating)) and math.isfinite(e) and float(e).is_integer())
            if not whole or not 0 <= int(e) <= _MAX_EPISODE:
                raise FramesError(f"episodes holds {e!r:.100}, not an episode index (a whole number >= 0)")
        wanted = raw.astype(np.int64)
    return windows, wanted


class ImportedFrames(_Dataset):
    """The frames of an import as a map-style PyTorch dataset of LeRobot items (see the module docstring).

    Args:
        import_root: the import's output root (local path or fsspec URL).
        delta_timestamps: `{key: [offsets in seconds]}`: stacked windows with `{key}_is_pad` masks.
        episodes: serve only these episode indices (in the import's order, as LeRobot does).
        image_transforms: applied to every camera tensor of an item (e.g. torchvision transforms v2).
        recipe: a training recipe (`TrainingRecipe`, or the path/URL of its YAML file): items gain
            `messages`, `message_streams` and `target_message_indices`.
        tolerance_s: the largest distance (s) between a requested time and the video frame returned, and
            between an offset and a whole number of frames.
        allowed_roots: roots video files may be read from (default: the dataset root the manifest names;
            the import root always).
        dataset_root: where the dataset is now, when it moved after the import (see `ImportReader`); its
            meta/ files are read there too.
        cache_gops: decode streams (about a GOP of one camera each) kept per process.
        decode_threads: threads that decode an item's cameras at the same time (one camera each); None: in the
            process that made the dataset, one per camera up to the CPUs this process may use, or 1, whichever
            decoded the latest items faster (both are timed again every ~600 items: a second thread pays
            only when the process gets a second core); 1 in a DataLoader worker (the loader's processes already
            keep the CPUs busy).
        camera_dtype: "float32" (LeRobot's: C x H x W in [0, 1]) or "uint8" (LeRobot's `return_uint8=True`:
            a video camera's decoded 0..255 values, a quarter of the bytes through the DataLoader;
            `batch.float().div_(255)` on the training device gives LeRobot's tensor bit for bit; image features
            and depth cameras are float32 either way, as LeRobot returns them).
        depth_unit: the unit of depth cameras' frames, "mm" (LeRobot's default `depth_output_unit`, whole
            millimetres) or "m".
        read_ahead: requests in flight per process while a DataLoader worker's batch is read ahead (its items'
            video byte ranges fetched at once before they are built); 0: off; None (default): 16, for video files
            not on a local disk only.
        read_ahead_bytes: bytes held per process by reading ahead at most (64 MB).
        decoder: what decodes the cameras' samples (`transforms.reader.decoder.Decoder`; default: PyAV's software
            decoders, `decoder.default_decoder()`); it must give LeRobot's RGB24 pixels.
    Raises:
        FramesError: unknown `delta_timestamps` keys or episodes, offsets that are not whole frames.
        ReaderError: the import cannot be read.
        ImportError: torch is not installed.
    """

    def __init__(self, import_root: str, *, delta_timestamps: Optional[Mapping[str, Sequence[float]]] = None,
                 episodes: Optional[Sequence[int]] = None, image_transforms: Optional[Callable] = None,
                 recipe: Any = None, tolerance_s: float = DEFAULT_TOLERANCE,
                 allowed_roots: Optional[Sequence[str]] = None, cache_gops: int = 8,
                 camera_dtype: str = "float32", dataset_root: Optional[str] = None,
                 decode_threads: Optional[int] = None, depth_unit: str = "mm",
                 decoder: Optional[Decoder] = None, read_ahead: Optional[int] = None,
                 read_ahead_bytes: int = read_ahead_lib.DEFAULT_BYTES) -> None:
        _torch()
        if read_ahead is not None and not (isinstance(read_ahead, int) and read_ahead >= 0):
            raise FramesError(f"read_ahead={read_ahead!r:.100} is not a whole number >= 0 (requests in flight; 0: off; "
                              "None: on for video files not on a local disk)")
        if not (isinstance(read_ahead_bytes, int) and read_ahead_bytes >= 0):
            raise FramesError(f"read_ahead_bytes={read_ahead_bytes!r:.100} is not a whole number of bytes >= 0")
        #: Byte ranges of a batch's items fetched at once (None: reading ahead is off).
        self.read_ahead = None if read_ahead == 0 else read_ahead_lib.ReadAhead(
            read_ahead or read_ahead_lib.DEFAULT_IN_FLIGHT, read_ahead_bytes)
        self._read_ahead_remote_only = read_ahead is None
        if decode_threads is not None and not (isinstance(decode_threads, int) and decode_threads >= 1):
            raise FramesError(f"decode_threads={decode_threads!r:.100} is not a whole number >= 1 (or None: one "
                              "per camera in the main process)")
        self.decode_threads = decode_threads
        if camera_dtype not in CAMERA_DTYPES:
            raise FramesError(f"camera_dtype={camera_dtype!r} is not one of {', '.join(map(repr, CAMERA_DTYPES))}")
        self.camera_dtype = camera_dtype
        if depth_unit not in depth_lib.DEPTH_UNITS:
            raise FramesError(f"depth_unit={depth_unit!r:.100} is not one of "
                              f"{', '.join(map(repr, depth_lib.DEPTH_UNITS))} (LeRobot's depth_output_unit)")
        self.depth_unit = depth_unit
        self.root = storage.normalize_root(str(import_root))
        self.tolerance_s = float(tolerance_s)
        self.allowed_roots = None if allowed_roots is None else [str(r) for r in allowed_roots]
        self.image_transforms = image_transforms
        self.delta_timestamps, episodes = check_arguments(delta_timestamps, episodes, self.tolerance_s)
        self._init_process()
        self._gops = GopCache(cache_gops, decoder=decoder)
        manifest = _read_manifest(self.root)
        self.dataset_root = manifest.dataset if manifest is not None else None
        self.moved_to = None if dataset_root is None else storage.normalize_root(str(dataset_root))
        if self.moved_to is not None:
            self.dataset_root = self.moved_to
        # the default reads ahead only from files not on a local disk: when the dataset (whose files the
        # clips point into) is on one, a batch has nothing to plan, and planning it would cost each item's
        # lookups twice
        self._read_ahead_needless = read_ahead is None and bool(self.dataset_root) and \
            read_ahead_lib.local_uri(self.dataset_root)
        reader = self._reader()
        if not reader.parts:
            raise ReaderError(f"the import at {self.root} holds no episodes")
        schema = reader.parquet.metadata(reader.parts[0]).schema.to_arrow_schema()
        try:
            #: The depth cameras (video or image features), by name: what turns their pixels into depth.
            self.depth = depth_lib.specs_from_metadata(schema.metadata)
        except ValueError as ex:
            raise ReaderError(f"the import at {self.root}: {ex}") from None
        self.features = _features(schema.field("frames").type.value_type, self.depth)
        self.cameras = [f.name for f in schema.field("videos").type] if "videos" in schema.names else []
        self.image_keys = [f.name for f in self.features if f.kind == "image"]
        self.camera_keys = self.cameras + self.image_keys
        self.has_language = any(f.name in LANGUAGE_FIELDS for f in schema.field("frames").type.value_type)
        if self.cameras:
            self._gops.decoder.preload()  # in this process: forked workers start with it
        self._scan(episodes)
        if self.cameras:  # media_index/'s footers, here once rather than in each worker
            reader.media_index.load()
        self.fps: Optional[float] = None
        self.delta_indices: Optional[dict[str, list[int]]] = None
        if self.delta_timestamps is not None:
            self._check_windows()
        self.recipe = self._load_recipe(recipe)
        self._task_names: Optional[dict[int, str]] = None
        self._task_error: Optional[str] = None
        self._tasks()  # every item names its task: read here once rather than in each worker
        self._gop_ids: dict[str, np.ndarray] = {}

    # -- setup ---------------------------------------------------------------------------------

    def _init_process(self) -> None:
        """Per-process state: readers and caches (never pickled, dropped in a forked child)."""
        self._pid = os.getpid()
        self._thread_choice: Optional[ThreadChoice] = None
        self._import_reader: Optional[ImportReader] = None
        self._groups_cache: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.RLock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_size = 0

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            reader = self._import_reader
            self._init_process()
            if reader is not None:  # a forked child keeps what the parent read (the footers, media_index/'s groups)
                self._import_reader = reader.forked()

    def _reader(self) -> ImportReader:
        self._check_process()
        if self._import_reader is None:
            self._import_reader = ImportReader(self.root, tolerance=self.tolerance_s,
                                               allowed_roots=self.allowed_roots, open_file=self._gops.open_file,
                                               dataset_root=self.moved_to)
        return self._import_reader

    def _scan(self, episodes: Optional[Sequence[int]]) -> None:
        """Each row group's episodes and lengths (two columns read per row group); the selection."""
        rg_pos, rows, indices, lengths = [], [], [], []
        reader = self._reader()
        tables = reader.read_columns(["episode_index", "length"])  # with the parts' footers, several at a time
        self._row_groups = reader.row_groups()
        if not self._row_groups:
            raise ReaderError(f"the import at {self.root} holds no episodes")
        for k, t in enumerate(tables):
            n = t.num_rows
            rg_pos.append(np.full(n, k, np.int64))
            rows.append(np.arange(n, dtype=np.int64))
            indices.append(t.column("episode_index").to_numpy().astype(np.int64))
            lengths.append(t.column("length").to_numpy().astype(np.int64))
        rg_pos, rows = np.concatenate(rg_pos), np.concatenate(rows)
        indices, lengths = np.concatenate(indices), np.concatenate(lengths)
        if episodes is not None:
            wanted = episodes
            missing = np.setdiff1d(wanted, indices)
            if len(missing):
                raise FramesError(f"episodes {', '.join(map(str, missing[:20].tolist()))} are not in the import at "
                                  f"{self.root} (it holds {len(indices)} episodes, "
                                  f"{int(indices.min())}..{int(indices.max())})")
            keep = np.isin(indices, wanted)
            rg_pos, rows, indices, lengths = rg_pos[keep], rows[keep], indices[keep], lengths[keep]
        self.episode_indices = indices
        self._ep_rg, self._ep_row, self._ep_len = rg_pos, rows, lengths
        self._starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)

    def _dataset_file(self, relative: str, what: str) -> bytes:
        if not self.dataset_root:
            raise FramesError(f"the import at {self.root} names no dataset in its manifest, so its {relative} "
                              "cannot be read")
        try:
            return storage.read_bytes(storage.dataset_file(self.dataset_root, relative), what=what, file=relative)
        except LeRobotImportError as ex:
            raise FramesError(f"cannot read {relative} of the dataset {self.dataset_root}: {ex.message}") from None

    def _depth_from_info(self) -> dict[str, depth_lib.DepthSpec]:
        """The depth cameras of the dataset's info.json, for an import written before the episode schema carried
        them: read when a camera's video decodes to depth codes that the schema does not type ({} when the
        dataset has none or its info.json cannot be read)."""
        from transforms.lerobot.info import parse_info
        if not self.dataset_root:
            return {}
        try:
            info = parse_info(self._dataset_file("meta/info.json", "info file"))
        except (FramesError, LeRobotImportError):
            return {}
        found = {f.name: depth_lib.depth_spec(f.dtype, f.info) for f in info.features}
        return {name: spec for name, spec in found.items() if spec is not None}

    def _check_windows(self) -> None:
        """LeRobot's checks of `delta_timestamps`: known keys, whole frames within the tolerance."""
        info = self._dataset_file("meta/info.json", "info file")
        try:
            self.fps = float(json.loads(info)["fps"])
        except (ValueError, KeyError, TypeError):
            raise FramesError(f"meta/info.json of {self.dataset_root} has no numeric fps, needed to turn "
                              "delta_timestamps into frames") from None
        windowed = {f.name for f in self.features if f.kind in ("numeric", "image")} | set(self.cameras)
        unknown = sorted(set(self.delta_timestamps) - windowed)
        if unknown:
            raise FramesError(f"delta_timestamps names {', '.join(map(repr, unknown))}, which the import at "
                              f"{self.root} has no numeric, image or camera feature for (it has: "
                              f"{', '.join(sorted(windowed))})")
        fps, tol = self.fps, self.tolerance_s
        outside = {k: [d for d in v if abs(d * fps - round(d * fps)) / fps > tol]
                   for k, v in self.delta_timestamps.items()}
        outside = {k: v for k, v in outside.items() if v}
        if outside:
            raise FramesError(f"delta_timestamps {outside} are outside of the tolerance: offsets must be multiples "
                              f"of 1/{self.fps:g} s +/- tolerance_s={tol:g} (whole frames); adjust them")
        self.delta_indices = {k: [round(d * fps) for d in v] for k, v in self.delta_timestamps.items()}

    def _load_recipe(self, recipe: Any):
        if recipe is None:
            return None
        from transforms.language.recipe import TrainingRecipe, load_recipe
        return recipe if isinstance(recipe, TrainingRecipe) else load_recipe(recipe)

    # -- pickling ------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key in ("_import_reader", "_groups_cache", "_lock", "_pid", "_pool", "_pool_size"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_process()

    # -- size and layout -----------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def num_episodes(self) -> int:
        return len(self.episode_indices)

    @property
    def episode_bounds(self) -> list[tuple[int, int]]:
        """(from, to) item positions of each selected episode, in item order."""
        return [(int(a), int(b)) for a, b in zip(self._starts[:-1], self._starts[1:])]

    @property
    def bytes_read(self) -> int:
        """Bytes fetched from video files by this process."""
        self._gops._check_process()
        return self._gops.stats.bytes_read

    @property
    def gop_cache(self) -> GopCache:
        """This process's decode cache (its counters say how much was decoded)."""
        self._gops._check_process()
        return self._gops

    def gop_ids(self, camera: Optional[str] = None):
        """An id of the decode closure (the GOP) each item's frame of `camera` is decoded from.

        Args:
            camera: a camera key (default: the first camera).
        Returns:
            int64, one per item: equal ids share a GOP (the file and the closure's first sample);
            -1 for every item when the import has no camera.
        Raises:
            FramesError: an unknown camera.
        """
        if not self.cameras:
            return np.full(len(self), -1, np.int64)
        camera = camera or self.cameras[0]
        if camera not in self.cameras:
            raise FramesError(f"no camera {camera!r} in the import at {self.root} (cameras: {', '.join(self.cameras)})")
        found = self._gop_ids.get(camera)
        if found is None:
            files: dict[str, int] = {}
            parts = []
            for e in range(self.num_episodes):
                prep = self._episode(e)
                h = self._handle(prep, camera)
                samples = self._samples(prep, camera)
                if samples is None:  # raises the episode's first timing error
                    samples = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
                starts = closure_starts(h.track, samples)
                file_id = files.setdefault(h.uri, len(files))
                parts.append((np.int64(file_id) << np.int64(32)) | starts)
            found = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            self._gop_ids[camera] = found
        return found.copy()

    # -- episodes ------------------------------------------------------------------------------

    def _locate(self, i: int) -> tuple[int, int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"item {i} is out of range: the dataset has {n} items")
        i %= n
        e = bisect.bisect_right(self._starts, i) - 1
        return e, i - int(self._starts[e])

    def _episode(self, e: int) -> _Prepared:
        self._check_process()  # first: a lock copied from a parent process may be held by no one here
        with self._lock:
            group = self._group(int(self._ep_rg[e]))
            r = int(self._ep_row[e])
            found = group.episodes.get(r)
            if found is not None:
                return found
            a, b = int(group.offsets[r]), int(group.offsets[r + 1])
            prepared = _Prepared(
                episode=Episode(group.table.slice(r, 1), access=self._reader().access),
                episode_index=int(self.episode_indices[e]), row=r, group=group, length=b - a,
                values={k: v[a:b] for k, v in group.values.items()},
                nulls={k: v[a:b] for k, v in group.nulls.items() if v[a:b].any()},
                others={k: v[a:b] for k, v in group.others.items()}, timestamps=group.timestamps[a:b])
            # kept with its group (and dropped with it): the frames located for its cameras are then found again
            # by every later item of the episode, in any order, within the groups' byte budget
            group.episodes[r] = prepared
            group.nbytes += 8 * prepared.length * max(1, len(self.cameras))
            return prepared

    def _group(self, k: int) -> _Group:
        """Row group `k`, read and converted once, kept while the groups kept stay within ROW_GROUP_BYTES."""
        group = self._groups_cache.get(k)
        if group is not None:
            self._groups_cache.move_to_end(k)
            return group
        table = self._reader().read_rows(self._row_groups[k])
        frames = table.column("frames").combine_chunks()
        offsets = frames.offsets.to_numpy().astype(np.int64)
        offsets = offsets - offsets[0]
        flat = frames.flatten()
        values, nulls, others = {}, {}, {}
        for f in self.features:
            col = flat.field(f.name)
            if f.kind == "numeric":
                values[f.name], null = _values(col, f)
                if null is not None and null.any():
                    nulls[f.name] = null
            else:
                others[f.name] = list(field_values(col))
        ts = np.asarray(field_values(flat.field("timestamp")), np.float32) \
            if "timestamp" in [x.name for x in flat.type] else np.zeros(int(offsets[-1]), np.float32)
        videos = table.column("videos").combine_chunks() if self.cameras else None
        clips = {cam: _clips(videos, cam) for cam in self.cameras}
        nbytes = table.nbytes + sum(v.nbytes for v in values.values()) + ts.nbytes
        group = _Group(table, offsets, values, nulls, others, ts, clips, nbytes)
        self._groups_cache[k] = group
        total = sum(g.nbytes for g in self._groups_cache.values())
        while total > ROW_GROUP_BYTES and len(self._groups_cache) > 1:
            total -= self._groups_cache.popitem(last=False)[1].nbytes
        return group

    def _handle(self, prep: _Prepared, camera: str) -> VideoHandle:
        """`camera`'s handle on the episode: its clip from the row group's columns, its file's tables from the
        reader (built once per file and process, shared by every episode of the file)."""
        h = prep.handles.get(camera)
        if h is None:
            clips, r = prep.group.clips[camera], prep.row
            if not clips.valid[r]:
                raise ReaderError(f"episode {prep.episode_index} camera {camera} has no clip")
            uri = clips.uris[r]
            inline = clips.inline.slice(r, 1) if clips.inline is not None and clips.inline_valid[r] else None
            reader = self._reader()
            h = camera_handle(reader.access, prep.episode_index, camera, uri, lambda: reader.tracks(uri, inline),
                              start_ns=int(clips.start_ns[r]), end_ns=int(clips.end_ns[r]),
                              origin_ns=int(clips.origin_ns[r]), length=prep.length)
            prep.handles[camera] = h
        return h

    def _samples(self, prep: _Prepared, camera: str) -> Optional[np.ndarray]:
        """The decode index of every frame of the episode in `camera`'s file, located once per episode and
        camera (locating a few times at a time costs a pass over the file's tables each call); None when
        a frame has no picture within the tolerance."""
        if camera not in prep.samples:
            h = self._handle(prep, camera)
            try:
                prep.samples[camera] = h.track.order[h.locate(prep.timestamps.astype(np.float64))]
            except ReaderError:
                prep.samples[camera] = None
        return prep.samples[camera]

    def _located(self, prep: _Prepared, camera: str) -> tuple:
        """`camera`'s handle on the episode, each frame's decode index and each frame's decode closure start,
        found once per episode and camera (an item then indexes them)."""
        h = self._handle(prep, camera)  # both cached on the episode
        samples = self._samples(prep, camera)
        if camera not in prep.firsts:
            prep.firsts[camera] = None if samples is None else closure_starts(h.track, samples)
        return h, samples, prep.firsts[camera]

    # -- tasks and language ---------------------------------------------------------------------

    def _tasks(self) -> Optional[dict[int, str]]:
        """The dataset's task_index -> task, as LeRobot names them (v3.0: row `k` of meta/tasks.parquet;
        v2.x: meta/tasks.jsonl); None when they cannot be read (then an episode's only task names its frames)."""
        if self._task_names is None and self._task_error is None:
            try:
                if not self.dataset_root:
                    self._dataset_file(TASKS_PATH, "tasks file")  # says the import names no dataset
                self._task_names = read_tasks(self.dataset_root)
            except LeRobotImportError as ex:
                self._task_error = f"cannot read {ex.file or TASKS_PATH} of the dataset {self.dataset_root}: " \
                    f"{ex.message}"
            except (FramesError, KeyError, ValueError, pa.ArrowException) as ex:
                self._task_error = str(ex)
        return self._task_names

    def _frame_tasks(self, prep: _Prepared) -> list[Optional[str]]:
        if prep.tasks is None:
            names = self._tasks()
            prep.tasks = frame_tasks(prep.values.get("task_index"), names or {},
                                     prep.episode.tasks, prep.length)
        return prep.tasks

    def _task(self, prep: _Prepared, pos: int, where: str) -> str:
        """The frame's task (looked up for this frame alone: an episode's whole list costs a Python pass over
        its frames, per item when items come in a random order)."""
        if prep.tasks is not None:
            task = prep.tasks[pos]
        else:
            names = self._tasks() or {}
            index = prep.values.get("task_index")
            fallback = index is None or not names  # only then is the episode's own list needed
            task = frame_tasks(None if index is None else index[pos:pos + 1], names,
                               prep.episode.tasks if fallback else (), 1)[0]
        if task is None:
            why = (f"the dataset's tasks cannot be read ({self._task_error}) and the episode has tasks "
                   f"{prep.episode.tasks}") if self._task_error else "the dataset's tasks have no such task_index"
            raise FramesError(f"{where}: no task for task_index "
                              f"{prep.values['task_index'][pos] if 'task_index' in prep.values else '(none)'}: {why}")
        return task

    def _messages(self, prep: _Prepared, pos: int, where: str) -> dict[str, list]:
        from transforms.language.errors import RenderError
        from transforms.language.render import render_episode

        if prep.rendered is None:
            ep = prep.episode
            feats = set(ep.features)
            prep.rendered = render_episode(
                self.recipe,
                persistent=ep.column("language_persistent") if "language_persistent" in feats else None,
                events=ep.column("language_events") if "language_events" in feats else None,
                timestamps=prep.timestamps, indices=prep.values["index"] if "index" in prep.values else
                np.arange(prep.length), task=self._frame_tasks(prep), mode="processor", errors="return")
        got = prep.rendered[pos]
        if isinstance(got, RenderError):
            raise FramesError(f"{where}: the recipe cannot render this frame: {got}")
        if got is None:  # the step would drop this frame: it carries no conversation
            return {k: [] for k in MESSAGE_KEYS}
        return {k: list(got[k]) for k in MESSAGE_KEYS}

    # -- items ---------------------------------------------------------------------------------

    def _moved_hint(self, message: str) -> str:
        """When an MP4 is not where the import found it and the dataset root itself is gone: the dataset moved,
        and `dataset_root=` reads it where it is now."""
        if self.moved_to is not None or not self.dataset_root or "does not exist" not in message:
            return ""
        try:
            gone = not storage.exists(storage.join(self.dataset_root, "meta/info.json"))
        except (OSError, LeRobotImportError):
            return ""
        return (f"; the dataset {self.dataset_root} the import read is not there any more: if it moved, "
                "ImportedFrames(..., dataset_root=<where it is now>) reads it from there") if gone else ""

    def _where(self, i: int, prep: _Prepared, pos: int) -> str:
        return f"item {i} (episode {prep.episode_index}, frame {pos}) of the import at {self.root}"

    def _camera(self, prep: _Prepared, camera: str, rows: Any, where: str):
        """The pictures of frames `rows` of the episode from `camera`: float32 N x C x H x W in [0, 1] (C x H x W
        when `rows` is one frame number, not an array)."""
        torch = _torch()
        one = isinstance(rows, int)
        owned = False  # whether `frames` are this item's own arrays (else the cache's, not to be handed out)
        try:
            h, samples, firsts = self._located(prep, camera)
            if samples is None:  # some frame has no picture: locate these alone (their own error, if any)
                samples = h.track.order[h.locate(prep.timestamps[np.atleast_1d(rows)].astype(np.float64))]
                frames = self._gops.frames(h.uri, h.track, samples)
            elif one:  # a uint8 item takes the frame's array itself; a float32 one divides it into its own
                owned = self.camera_dtype == "uint8"
                frames = [self._gops.frame(h.uri, h.track, int(samples[rows]), int(firsts[rows]), own=owned)]
            else:
                frames = self._gops.frames(h.uri, h.track, samples[rows], firsts[rows])
        except ReaderError as ex:
            raise FramesError(f"{where}, camera {camera}: {ex}{self._moved_hint(str(ex))}") from None
        first = frames[0]
        spec = self.depth.get(camera)
        if spec is None and first.dtype == np.uint16:  # an import older than depth in the schema: ask info.json
            spec = self._depth_from_info().get(camera)
            if spec is not None:
                self.depth[camera] = spec
        if spec is not None or first.dtype == np.uint16:  # a depth map: its codes, de-quantized as LeRobot does
            if spec is None:
                raise FramesError(f"{where}, camera {camera}: its video holds depth codes (one plane of "
                                  f"{first.dtype.itemsize * 8}-bit pictures) but neither the import nor the "
                                  "dataset's info.json types it as a depth camera (`is_depth_map: true`)")
            if first.dtype != np.uint16:
                raise FramesError(f"{where}, camera {camera}: info.json declares a depth map but its video decodes "
                                  "to colour pictures, not depth codes")
            depth = depth_lib.dequantize(np.stack(frames), spec, self.depth_unit)  # N x H x W x 1 float32
            out = torch.from_numpy(depth).permute(0, 3, 1, 2)
            return out[0] if one else out
        if self.camera_dtype == "uint8":
            if owned:
                return torch.from_numpy(first)
            return torch.from_numpy(first.copy()) if one else torch.from_numpy(np.stack(frames))
        # uint8 -> float32 / 255 as LeRobot computes it (the same IEEE division, so the same bits); the frames
        # are channels-first already (the decoder's planar RGB), so numpy divides straight into the item's
        # contiguous tensor, one pass over each frame (casting in cache-sized blocks) where a cast to float32
        # and then a division would walk the float32 frame twice.
        out = torch.empty((len(frames), *first.shape), dtype=torch.float32)
        dst = out.numpy()
        for k, frame in enumerate(frames):
            np.divide(frame, _255, out=dst[k])
        return out[0] if one else out

    def _threads(self) -> int:
        if self.decode_threads is not None:
            return self.decode_threads
        from torch.utils.data import get_worker_info
        if get_worker_info() is not None:
            return 1
        if self._thread_choice is None:
            try:
                cpus = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):  # not on Linux
                cpus = os.cpu_count() or 1
            self._thread_choice = ThreadChoice(min(len(self.cameras), cpus))
        return self._thread_choice.threads()

    def _cameras(self, prep: _Prepared, rows: dict, where: str) -> list:
        """`_camera` of every camera, in order: the first in this thread, the others in the pool's threads at
        the same time when there are threads to spare (decoding is most of an item's work, and PyAV decodes
        without the GIL). By default the threads are chosen by timing these calls (`threads.ThreadChoice`)."""
        threads = self._threads() if len(self.cameras) > 1 else 1
        choice = self._thread_choice  # made by `_threads` only where the threads are chosen by timing
        if choice is None or choice.most == 1:
            return self._decode_cameras(prep, rows, where, threads)
        start, decoded = time.perf_counter(), self._gops.samples_decoded
        out = self._decode_cameras(prep, rows, where, threads)
        choice.record(threads, time.perf_counter() - start, self._gops.samples_decoded - decoded)
        return out

    def _decode_cameras(self, prep: _Prepared, rows: dict, where: str, threads: int) -> list:
        if threads <= 1:
            return [self._camera(prep, cam, rows[cam], where) for cam in self.cameras]
        for cam in self.cameras:  # the files' tables read here, once: the pool's threads only decode
            try:
                self._located(prep, cam)
            except ReaderError:
                pass  # raised again, as this camera's error, by its `_camera`
        if self._pool is None or self._pool_size != threads - 1:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = concurrent.futures.ThreadPoolExecutor(threads - 1, thread_name_prefix="ImportedFrames")
            self._pool_size = threads - 1
        cameras = collections.deque(enumerate(self.cameras))
        out: list = [None] * len(self.cameras)
        errors: list = [None] * len(self.cameras)

        def work() -> None:
            # this thread and the pool's each take the next camera no thread has taken yet, so a camera slower than
            # the others (a deeper GOP position, a heavier codec) holds up only the thread decoding it
            while True:
                try:
                    k, cam = cameras.popleft()
                except IndexError:
                    return
                try:
                    out[k] = self._camera(prep, cam, rows[cam], where)
                except Exception as ex:  # raised below, once every thread is done: the first camera's first
                    errors[k] = ex

        later = [self._pool.submit(work) for _ in range(threads - 1)]
        try:
            work()
        finally:
            concurrent.futures.wait(later)  # every thread done with this item before it is returned
        for error in errors:
            if error is not None:
                raise error
        return out

    def __getitem__(self, i: int) -> dict:
        """The LeRobot item of item position `i` (see the module docstring).

        Raises:
            IndexError: `i` out of range.
            FramesError: a value LeRobot could not return either (a null, a video frame not within
                `tolerance_s` of its time), naming the item, episode, frame and camera.
        """
        torch = _torch()
        e, pos = self._locate(int(i))
        prep = self._episode(e)
        where = self._where(int(i), prep, pos)
        deltas = self.delta_indices or {}
        n = prep.length
        item: dict[str, Any] = {}
        for f in self.features:
            if f.kind == "language":  # every item carries the frame's rows, as LeRobot 0.6.1 returns them
                item[f.name] = _language_rows(prep.others[f.name][pos])
                continue
            rows = pos if f.name not in deltas else np.clip(pos + np.asarray(deltas[f.name]), 0, n - 1)
            null = prep.nulls.get(f.name)
            if null is not None and np.any(null[rows]):
                raise FramesError(f"{where}: {f.name} is null (LeRobot cannot make a tensor of a null value)")
            if f.kind == "numeric":
                item[f.name] = torch.from_numpy(np.array(prep.values[f.name][rows]))
            elif f.kind == "string":
                item[f.name] = prep.others[f.name][pos]
            elif np.ndim(rows):  # images are float32 with camera_dtype="uint8" too, as LeRobot's return_uint8
                item[f.name] = torch.stack([_decode_image(prep.others[f.name][r], f"{where}, {f.name}", depth=f.depth,
                                                          depth_unit=self.depth_unit) for r in rows.tolist()])
            else:
                item[f.name] = _decode_image(prep.others[f.name][rows], f"{where}, {f.name}", depth=f.depth,
                                             depth_unit=self.depth_unit)
        for key, d in deltas.items():
            at = pos + np.asarray(d, np.int64)
            item[f"{key}_is_pad"] = torch.from_numpy((at < 0) | (at >= n))
        if self.cameras:
            rows = {cam: np.clip(pos + np.asarray(deltas[cam]), 0, n - 1) if cam in deltas else pos
                    for cam in self.cameras}
            for cam, frames in zip(self.cameras, self._cameras(prep, rows, where)):
                item[cam] = frames.squeeze(0) if cam in deltas else frames
        if self.image_transforms is not None:
            for cam in self.camera_keys:
                if cam in item:
                    item[cam] = self.image_transforms(item[cam])
        item["task"] = self._task(prep, pos, where)
        if self.recipe is not None:
            item.update(self._messages(prep, pos, where))
        return item

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The items of `indices` (a DataLoader worker's batch), `self[i]` each; with reading ahead on, the video
        bytes all of them need are fetched first, `read_ahead` requests at a time (see `read_ahead`)."""
        ra = self.read_ahead
        if ra is None or not self.cameras or self._read_ahead_needless:
            return [self[i] for i in indices]
        self._gops._check_process()
        self._gops.read_ahead = ra
        try:
            ranges = read_ahead_lib.batch_ranges(self, indices, self._read_ahead_remote_only)
            if ranges:
                readers = {uri: self._gops.open_file(uri) for uri in dict.fromkeys(r[0] for r in ranges)}
                ra.fetch(ranges, lambda uri, start, end: readers[uri].read_ranges([start], [end])[0])
            return [self[i] for i in indices]
        finally:
            ra.clear()

    @staticmethod
    def collate(batch: Sequence[dict]) -> dict:
        """`torch.utils.data.default_collate`, except that the recipe's lists (`messages`, ...) and the language
        columns stay lists of per-item values (their lengths differ between items).

        Args:
            batch: items.
        """
        from torch.utils.data import default_collate
        if not batch:
            return {}
        kept = {k: [item[k] for item in batch] for k in MESSAGE_KEYS + LANGUAGE_FIELDS if k in batch[0]}
        rest = default_collate([{k: v for k, v in item.items() if k not in kept} for item in batch])
        return {**rest, **kept}

    def __repr__(self) -> str:
        return (f"ImportedFrames({self.root!r}, items={len(self)}, episodes={self.num_episodes}, "
                f"cameras={self.cameras!r}, windows={sorted(self.delta_timestamps or {})!r})")

