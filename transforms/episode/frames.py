"""Data-file rows -> the `frames` of an episode, typed as info.json declares.

Column-at-a-time and vectorised: casts and list checks run in Arrow compute over a whole slice,
never per frame in Python. A batch of raw rows read from one data file (`lerobot.data_files`) is
converted once and then cut per episode; each episode's frames are then validated on their own.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Sequence, TypeVar, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.episode import episode_type
from transforms.language import columns
from transforms.episode import spql_types
from transforms.lerobot.data_files import IndexLayout, SliceBatch, index_layout  # noqa: F401  (re-exported)
from transforms.lerobot.episodes_files import EpisodeRow
from transforms.lerobot.info import DatasetInfo, Feature
from transforms.base.errors import LeRobotImportError

K = TypeVar("K")
#: An episode's typed frames, or the error that stops it.
FramesOrError = Union[pa.StructArray, LeRobotImportError]


def typed_frames(batch: SliceBatch[K], info: DatasetInfo) -> Iterator[tuple[K, EpisodeRow, FramesOrError]]:
    """Type a batch of raw data-file rows: (key, row, frames or error) for each of its episodes.

    The batch's rows are converted once and cut per episode; a conversion error in them is pinned to
    its episode by converting episode by episode.

    Args:
        batch: raw rows of one data file and where each episode lies in them.
        info: the dataset's info.json, which says how each column is typed.
    """
    file = batch.file
    readable = []
    for piece in batch.slices:
        if piece.error is not None:
            yield piece.key, piece.row, piece.error
        else:
            readable.append(piece)
    if not readable:
        return
    try:
        converted = convert_frames(batch.table, info, episode_index=None, file=file, validate=False)
    except LeRobotImportError:
        converted = None  # find which episode breaks the rule
    checks = EpisodeChecks.of(info)
    for piece in readable:
        key, row = piece.key, piece.row
        if converted is None:
            yield key, row, _convert_one(batch.table.slice(piece.offset, piece.length), info, row, file)
            continue
        frames = converted.slice(piece.offset, piece.length)
        try:
            validate_frames(frames, info, episode_index=row.episode_index, file=file, checks=checks)
        except LeRobotImportError as ex:
            yield key, row, ex.with_context(episode_index=row.episode_index, file=file)
            continue
        yield key, row, frames


def _convert_one(table: pa.Table, info: DatasetInfo, row: EpisodeRow, file: str) -> FramesOrError:
    try:
        return convert_frames(table, info, episode_index=row.episode_index, file=file)
    except LeRobotImportError as ex:
        return ex.with_context(episode_index=row.episode_index, file=file)


def convert_frames(table: pa.Table, info: DatasetInfo, *, episode_index: Optional[int], file: str,
                   validate: bool = True) -> pa.StructArray:
    """The frames of one episode (or a span of several, with validate=False) from data-file rows."""
    arrays = []
    for feature in info.frame_features:
        if feature.name not in table.column_names:
            raise LeRobotImportError("missing_column", f"the data file has no `{feature.name}` column",
                                     episode_index=episode_index, file=file)
        column = table.column(feature.name).combine_chunks()
        try:
            arrays.append(convert_column(column, feature))
        except LeRobotImportError as ex:
            raise ex.with_context(episode_index=episode_index, file=file)
    frame_type = episode_type.frame_type(info)
    frames = pa.StructArray.from_arrays(arrays, fields=list(frame_type))
    if validate:
        validate_frames(frames, info, episode_index=episode_index, file=file)
    return frames


class EpisodeChecks(NamedTuple):
    """Which per-episode rules a dataset's frames need (decided once per dataset, not per episode)."""

    timeline: bool  # the frames have a `timestamp`
    language: bool  # the frames have language columns

    @classmethod
    def of(cls, info: DatasetInfo) -> "EpisodeChecks":
        features = info.frame_features
        return cls(any(f.name == "timestamp" for f in features), any(f.kind == "language" for f in features))


def validate_frames(frames: pa.StructArray, info: DatasetInfo, *, episode_index: int, file: str,
                    checks: Optional[EpisodeChecks] = None) -> None:
    """Rules that need one whole episode's frames: its timeline, and the language columns."""
    checks = checks or EpisodeChecks.of(info)
    if checks.timeline:
        _validate_timeline(frames.field("timestamp"), episode_index=episode_index, file=file)
    if checks.language:
        _validate_language(frames, info, episode_index=episode_index, file=file)


def _validate_timeline(timestamps: pa.Array, *, episode_index: int, file: str) -> None:
    """`timestamp` is the episode's timeline: no NaN, never going backwards (nulls are left alone)."""
    values = timestamps.to_numpy(zero_copy_only=False).astype(np.float64)
    valid = timestamps.is_valid().to_numpy(zero_copy_only=False)
    nan = valid & np.isnan(values)
    if nan.any():
        i = int(np.flatnonzero(nan)[0])
        raise LeRobotImportError("timestamps", f"episode {episode_index}: frame {i} has timestamp NaN",
                                 episode_index=episode_index, file=file)
    present = values[valid]
    back = np.flatnonzero(np.diff(present) < 0)
    if len(back):
        frames = np.flatnonzero(valid)
        i = int(frames[back[0] + 1])
        raise LeRobotImportError("timestamps", f"episode {episode_index}: timestamp goes backwards at frame {i} "
                                 f"({float(present[back[0] + 1])!r} after {float(present[back[0]])!r})",
                                 episode_index=episode_index, file=file)


def _validate_language(frames: pa.StructArray, info: DatasetInfo, *, episode_index: int, file: str) -> None:
    names = {f.name for f in info.frame_features}

    def field(name: str):
        return frames.field(name) if name in names else None

    n = len(frames)
    frame_index = field("frame_index")
    timestamps = field("timestamp")
    try:
        columns.validate_language(
            field("language_persistent"), field("language_events"), episode_index=episode_index,
            frame_index=frame_index if frame_index is not None else np.arange(n),
            timestamps=timestamps if timestamps is not None else np.zeros(n),
            camera_keys=info.camera_keys)
    except LeRobotImportError as ex:
        raise ex.with_context(episode_index=episode_index, file=file)


def convert_column(column: pa.Array, feature: Feature) -> pa.Array:
    kind = feature.kind
    if kind != "language":
        column = spql_types.storage_of(column)
    if kind == "numeric":
        if feature.is_scalar:
            return _safe_cast(_unwrap_scalar_list(column, feature), episode_type.numeric_type(feature.dtype), feature)
        return _tensor(column, feature)
    if kind == "bool":
        return _safe_cast(_unwrap_scalar_list(column, feature), pa.bool_(), feature)
    if kind == "string":
        strings = _safe_cast(_unwrap_scalar_list(column, feature), pa.utf8(), feature)
        try:
            strings.validate(full=True)  # Parquet strings are not checked for UTF-8 when read
        except pa.ArrowInvalid as ex:
            _fail_cast(feature, column.type, pa.utf8(), f"{ex} (strings must be UTF-8)")
        return strings
    if kind == "image":
        return _image(column, feature)
    if kind == "language":
        return columns.normalize_language_column(
            column, "persistent" if feature.name == "language_persistent" else "events", feature=feature.name)
    raise LeRobotImportError("unknown_dtype", f"feature `{feature.name}` has unknown dtype `{feature.dtype}`")


def _fail_cast(feature: Feature, have: pa.DataType, want: pa.DataType, why: str) -> None:
    raise LeRobotImportError("column_type", f"column `{feature.name}` ({have}) does not convert to its declared type "
                             f"{feature.dtype} {list(feature.shape)} ({want}): {why}")


def _safe_cast(column: pa.Array, target: pa.DataType, feature: Feature) -> pa.Array:
    """Cast as the reference does (arrow-rs `cast` with safe=false): a value that does not fit the target
    is an error (integer overflow, NaN or out-of-range float to integer, invalid UTF-8), while float to
    integer truncates the fraction and integer/float to a narrower float rounds."""
    src = column.type
    if src == target:
        return column
    try:
        if pa.types.is_floating(src) and pa.types.is_integer(target):
            _check_float_to_int_range(column, target, feature)
            return pc.cast(column, options=pc.CastOptions(target, allow_float_truncate=True))
        if pa.types.is_floating(target) and (pa.types.is_integer(src) or pa.types.is_floating(src)):
            return pc.cast(column, options=pc.CastOptions(target, allow_float_truncate=True))
        return pc.cast(column, target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as ex:
        _fail_cast(feature, column.type, target, str(ex).split("\n")[0])


def _check_float_to_int_range(column: pa.Array, target: pa.DataType, feature: Feature) -> None:
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    info = np.iinfo(np.dtype(str(target)))
    with np.errstate(invalid="ignore"):
        whole = np.trunc(values)
        bad = valid & (~np.isfinite(values) | (whole >= float(info.max) + 1) | (whole < float(info.min)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _fail_cast(feature, column.type, target, f"value {values[i]!r} at row {i} does not fit {target}")


def _unwrap_scalar_list(column: pa.Array, feature: Feature) -> pa.Array:
    """A shape-[1] feature stored as one-element lists reads as its element."""
    t = column.type
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = pc.list_value_length(column)
        if pc.any(pc.not_equal(lengths, 1)).as_py():
            i = pc.index(pc.not_equal(lengths, 1), True).as_py()
            _fail_cast(feature, t, t.value_type, f"value at row {i} has length {lengths[i].as_py()}, expected 1")
        values = column.flatten()
        if column.null_count:
            values = pc.take(values, _valid_positions(column))
        return values
    return column


def _valid_positions(column: pa.Array) -> pa.Array:
    """Indices into the flattened values for each row, null where the row is null."""
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    idx = np.cumsum(valid) - 1
    return pa.array(idx, pa.int64(), mask=~valid)


def _tensor(column: pa.Array, feature: Feature) -> pa.Array:
    """Nested lists (fixed or variable, one level per dimension) -> fixed_shape_tensor storage."""
    target = episode_type.tensor_type(feature)
    value_type = episode_type.numeric_type(feature.dtype)
    mask = column.is_null() if column.null_count else None
    rows = column.drop_null() if column.null_count else column
    values = rows
    for depth, dim in enumerate(feature.shape):
        t = values.type
        if not (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
            why = ("a flat list cannot hold a multi-dimensional tensor" if depth >= 1 else "it is not a list")
            _fail_cast(feature, column.type, target.storage_type, f"{why} (expected {len(feature.shape)} list levels)")
        if values.null_count:
            _fail_cast(feature, column.type, target.storage_type, f"a null inside a frame's nested lists "
                       f"(level {depth + 1})")
        if depth == 0 and len(feature.shape) > 1 and not pa.types.is_nested(t.value_type):
            _fail_cast(feature, column.type, target.storage_type, f"a flat list cannot hold a multi-dimensional "
                       f"tensor of shape {list(feature.shape)}: it needs one list level per dimension")
        if pa.types.is_fixed_size_list(t):
            if t.list_size != dim:
                _fail_cast(feature, column.type, target.storage_type, f"lists at level {depth + 1} hold {t.list_size} "
                           f"values, expected {dim}")
        else:
            lengths = pc.list_value_length(values)
            wrong = pc.not_equal(lengths, dim)
            if pc.any(wrong).as_py():
                i = pc.index(wrong, True).as_py()
                _fail_cast(feature, column.type, target.storage_type, f"value at index {i} (level {depth + 1}) has "
                           f"length {lengths[i].as_py()}, expected {dim}")
        values = values.flatten()
    if pa.types.is_nested(values.type):
        _fail_cast(feature, column.type, target.storage_type, f"more list levels than the {len(feature.shape)} "
                   "dimensions of the declared shape")
    if values.null_count:
        _fail_cast(feature, column.type, target.storage_type, "a frame's tensor holds a null value")
    values = _safe_cast(values, value_type, feature)
    storage = pa.FixedSizeListArray.from_arrays(values, type=target.storage_type)
    if mask is not None:
        storage = pc.take(storage, _valid_positions(column))
    return pa.ExtensionArray.from_storage(target, storage)


def _image(column: pa.Array, feature: Feature) -> pa.Array:
    """`struct<bytes: binary, path: string>` -> spql.EncodedImage with the bytes inline (no header read)."""
    t = column.type
    bytes_field = t.get_field_index("bytes") if pa.types.is_struct(t) else -1
    if bytes_field < 0 or not (pa.types.is_binary(t.field(bytes_field).type)
                               or pa.types.is_large_binary(t.field(bytes_field).type)
                               or pa.types.is_binary_view(t.field(bytes_field).type)):
        raise LeRobotImportError("image_column", f"image feature `{feature.name}` is stored as {t}; only encoded "
                                 "images, structs with binary `bytes`, are read")
    data = pc.struct_field(column, [bytes_field]).cast(pa.binary())
    n = len(column)
    present = data.is_valid()
    mask = pc.invert(present)
    blob_type = spql_types.blob()
    nulls = {f.name: pa.nulls(n, f.type) for f in blob_type.storage_type}
    blob_storage = pa.StructArray.from_arrays([data if f.name == "bytes" else nulls[f.name]
                                               for f in blob_type.storage_type],
                                              fields=list(blob_type.storage_type), mask=mask)
    width, height = feature.named_dim("width"), feature.named_dim("height")
    image_type = spql_types.encoded_image()
    children = [
        pa.ExtensionArray.from_storage(blob_type, blob_storage),
        pa.nulls(n, pa.utf8()), pa.nulls(n, pa.utf8()),
        pa.array(np.full(n, width, np.uint32)) if width is not None else pa.nulls(n, pa.uint32()),
        pa.array(np.full(n, height, np.uint32)) if height is not None else pa.nulls(n, pa.uint32()),
    ]
    storage = pa.StructArray.from_arrays(children, fields=list(image_type.storage_type), mask=mask)
    return pa.ExtensionArray.from_storage(image_type, storage)


def frames_list(frames: Sequence[pa.StructArray], frame_type: pa.StructType) -> pa.ChunkedArray:
    """Per-episode frame arrays -> the `frames` column (one list per episode), one chunk per episode.

    Each chunk is a view of its episode's frames, not a copy: a part's frames are held once while the
    part is encoded, and the Parquet writer builds its levels an episode at a time (a part of a few wide
    episodes would otherwise hold its frames twice, and levels for all of them at once). The Parquet bytes
    are those of the same column in one chunk.
    """
    list_type = pa.list_(pa.field("item", frame_type, nullable=False))
    chunks = [pa.ListArray.from_arrays(pa.array([0, len(f)], pa.int32()), f, type=list_type) for f in frames]
    return pa.chunked_array(chunks, list_type)
