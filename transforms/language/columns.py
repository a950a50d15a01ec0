"""LeRobot language columns (`language_persistent`, `language_events`): canonical types, the
normalisation of what the annotation writer really puts on disk, and validation.

Canonical types (LeRobot's `datasets/language.py` schema):

    language_persistent: list<item: struct<role utf8 not null, content utf8, style utf8,
                                           timestamp float32 not null, camera utf8,
                                           tool_calls list<item: arrow.json>>>
    language_events:     the same struct without `timestamp`

Decisions LeRobot's schema leaves open (see also `normalize_language_column`):

* List items are nullable, exactly as LeRobot's `pa.list_(row_type)`. A null row survives
  normalisation (it is the on-disk value) but `validate_language` rejects it: LeRobot's renderer
  silently skips null rows and its writer never produces them.
* A null list (a frame whose cell is null) stays null, as every null of a data file stays null in
  the import; LeRobot treats null and `[]` alike, and so do the comparisons below.
* Each tool call is stored as one `arrow.json` value: compact JSON with keys sorted
  (`json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`). Sorted keys
  are what LeRobot itself sees: the writer lets pyarrow infer a struct whose fields come out
  alphabetical (`function` before `type`), and the HF loader hands those dicts to the renderer.
  Struct-encoded calls keep every struct field, including ones that are null (pyarrow's inferred
  struct is the union of the keys of all calls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Collection, Literal, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.base.errors import LeRobotImportError

LANGUAGE_PERSISTENT = "language_persistent"
LANGUAGE_EVENTS = "language_events"

PERSISTENT_ROW_FIELDS = ("role", "content", "style", "timestamp", "camera", "tool_calls")
EVENT_ROW_FIELDS = ("role", "content", "style", "camera", "tool_calls")

CORE_STYLES = frozenset({"subtask", "plan", "memory", "motion", "interjection", "vqa", "trace", "task_aug"})
PERSISTENT_STYLES = frozenset({"subtask", "plan", "memory", "motion", "task_aug"})
EVENT_ONLY_STYLES = frozenset({"interjection", "vqa", "trace"})
VIEW_DEPENDENT_STYLES = frozenset({"vqa", "trace"})

Kind = Literal["persistent", "events"]
ArrayLike = Union[pa.Array, pa.ChunkedArray]


# --------------------------------------------------------------------------------------------
# Types


def persistent_row_type() -> pa.StructType:
    """One persistent row; `role` and `timestamp` are NOT NULL as in LeRobot's schema."""
    return pa.struct([
        pa.field("role", pa.string(), nullable=False),
        pa.field("content", pa.string()),
        pa.field("style", pa.string()),
        pa.field("timestamp", pa.float32(), nullable=False),
        pa.field("camera", pa.string()),
        pa.field("tool_calls", pa.list_(pa.json_())),
    ])


def event_row_type() -> pa.StructType:
    """One event row: a persistent row without `timestamp` (the frame carries the time)."""
    return pa.struct([f for f in persistent_row_type() if f.name != "timestamp"])


def persistent_type() -> pa.ListType:
    """The `language_persistent` column type."""
    return pa.list_(persistent_row_type())


def events_type() -> pa.ListType:
    """The `language_events` column type."""
    return pa.list_(event_row_type())


def column_type(kind: Kind) -> pa.ListType:
    return persistent_type() if kind == "persistent" else events_type()


def column_for_style(style: Optional[str]) -> str:
    """The column rows of `style` belong in; `None` (speech atoms) goes to events (LeRobot rule)."""
    if style is None:
        return LANGUAGE_EVENTS
    if style in PERSISTENT_STYLES:
        return LANGUAGE_PERSISTENT
    if style in EVENT_ONLY_STYLES:
        return LANGUAGE_EVENTS
    raise ValueError(f"Unknown language style: {style!r}")


def tool_call_json(call: Any) -> str:
    """The canonical text of one tool call (compact, keys sorted, UTF-8 kept as is)."""
    return json.dumps(call, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------------------------
# Normalisation


class _ConvertError(Exception):
    """A value that cannot be converted; `position` is an index into the flat row array."""

    def __init__(self, message: str, position: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def normalize_language_column(array: ArrayLike, kind: Kind, *, feature: str,
                              frame_index: Optional[Sequence[int]] = None,
                              episode_index: Optional[int] = None) -> pa.Array:
    """Convert a language column as read from Parquet into its canonical type.

    Accepted on disk (all seen from LeRobot's writer or plausible from pandas/HF writers):
    `list` or `large_list` of structs whose fields come in any order, with optional fields
    missing or Arrow-null-typed; string fields as utf8 / large_utf8 / string_view / dictionary;
    `timestamp` as float64 (rounded to the nearest float32 — exact for the writer's
    float32-widened values; a value beyond float32's range is an error), float16/32, or an
    integer that float32 holds exactly; `tool_calls` as a list of structs, JSON strings or
    `arrow.json` (each call re-serialised canonically, see the module docstring), or a JSON
    string holding the whole list. A column of Arrow null type becomes all-null lists.

    Raises `LeRobotImportError(rule="column_type")` naming the frame (`frame_index[i]` when
    given, else the array position) and the row for anything else: an unknown field, a null
    `role`/`timestamp`, an unparseable JSON tool call, an unsupported type.
    """
    if kind not in ("persistent", "events"):
        raise ValueError(f"kind must be 'persistent' or 'events', got {kind!r}")
    target = column_type(kind)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], type=target)
    if array.type == target:
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), type=target)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise LeRobotImportError(
            "column_type", f"{feature}: expected a list of structs, found {array.type}",
            episode_index=episode_index)

    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(array) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise LeRobotImportError("column_type", f"{feature}: more than 2**31 language rows in one array",
                                 episode_index=episode_index)
    flat = array.flatten()
    try:
        rows = _normalize_rows(flat, kind)
    except _ConvertError as exc:
        where = ""
        if exc.position is not None:
            frame = int(np.searchsorted(offsets, exc.position, side="right") - 1)
            row = int(exc.position - offsets[frame])
            shown = int(frame_index[frame]) if frame_index is not None else frame
            label = "frame" if frame_index is not None else "frame at position"
            where = f" {label} {shown} row {row}:"
        raise LeRobotImportError("column_type", f"{feature}:{where} {exc.message}",
                                 episode_index=episode_index) from None
    mask = array.is_null() if array.null_count else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), rows, type=target, mask=mask)


def _normalize_rows(values: pa.Array, kind: Kind) -> pa.StructArray:
    row_type = persistent_row_type() if kind == "persistent" else event_row_type()
    n = len(values)
    if pa.types.is_null(values.type):
        return pa.nulls(n, type=row_type)
    if not pa.types.is_struct(values.type):
        raise _ConvertError(f"a row must be a struct, found {values.type}")
    names = [values.type.field(i).name for i in range(values.type.num_fields)]
    if len(set(names)) != len(names):
        raise _ConvertError(f"duplicate fields in row struct {values.type}")
    extra = [name for name in names if name not in row_type.names]
    if extra:
        raise _ConvertError(f"unexpected row field(s) {extra} (allowed: {list(row_type.names)})")
    row_valid = values.is_valid()
    children = []
    for field in row_type:
        src = pc.struct_field(values, field.name) if field.name in names else pa.nulls(n)
        if field.name == "timestamp":
            child = _to_float32(src, row_valid)
        elif field.name == "tool_calls":
            child = _to_tool_calls(src)
        else:
            child = _to_string(src, field.name)
        if not field.nullable:
            missing = pc.and_(row_valid, child.is_null())
            if pc.any(missing).as_py():
                position = int(np.flatnonzero(missing.to_numpy(zero_copy_only=False))[0])
                what = "missing" if field.name not in names else "null"
                raise _ConvertError(f"{field.name} is {what} (it is required)", position)
            if child.null_count:
                # Only under null rows: give the non-nullable child a placeholder value.
                child = pc.fill_null(child, pa.scalar("" if field.name == "role" else 0.0, child.type))
        children.append(child)
    mask = values.is_null() if values.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(row_type), mask=mask)


def _to_string(src: pa.Array, name: str) -> pa.Array:
    t = src.type
    if pa.types.is_null(t):
        return pa.nulls(len(src), pa.string())
    if pa.types.is_string(t):
        return src
    if pa.types.is_large_string(t) or pa.types.is_string_view(t) or (
            pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))):
        return src.cast(pa.string())
    raise _ConvertError(f"{name} must be a string, found {t}")


def _to_float32(src: pa.Array, row_valid: pa.Array) -> pa.Array:
    t = src.type
    if pa.types.is_null(t):
        return pa.nulls(len(src), pa.float32())
    if pa.types.is_float32(t):
        return src
    if pa.types.is_float16(t):
        return src.cast(pa.float32())
    if pa.types.is_float64(t):
        out = src.cast(pa.float32(), safe=False)
        overflow = pc.and_(pc.is_finite(src), pc.is_inf(out))
        if pc.any(overflow).as_py():
            position = int(np.flatnonzero(pc.fill_null(overflow, False).to_numpy(zero_copy_only=False))[0])
            raise _ConvertError(f"timestamp {src[position].as_py()!r} is beyond float32's range", position)
        return out
    if pa.types.is_integer(t):
        out = src.cast(pa.float32(), safe=False)
        back = out.cast(pa.float64()).cast(t, safe=False)
        lost = pc.fill_null(pc.not_equal(back, src), False)
        if pc.any(lost).as_py():
            position = int(np.flatnonzero(lost.to_numpy(zero_copy_only=False))[0])
            raise _ConvertError(f"timestamp {src[position].as_py()!r} is not exact in float32", position)
        return out
    raise _ConvertError(f"timestamp must be a number, found {t}")


_JSON_TYPE = pa.json_()
_TOOL_CALLS_TYPE = pa.list_(pa.json_())


def _is_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or (isinstance(t, pa.ExtensionType) and t.extension_name == "arrow.json"))


def _json_array(texts: list[Optional[str]]) -> pa.Array:
    return pa.ExtensionArray.from_storage(_JSON_TYPE, pa.array(texts, pa.string()))


def _to_tool_calls(src: pa.Array) -> pa.Array:
    """Lists of calls as structs / JSON text -> list<arrow.json>, Python only for present calls."""
    n = len(src)
    t = src.type
    if pa.types.is_null(t) or src.null_count == n:
        return pa.nulls(n, _TOOL_CALLS_TYPE)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        items = src.flatten()
        it = items.type
        if isinstance(it, pa.ExtensionType) and it.extension_name != "arrow.json":
            raise _ConvertError(f"tool_calls items must be structs or JSON text, found {it}")
        lengths = pc.fill_null(pc.list_value_length(src), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        row_of_item = np.repeat(np.arange(n, dtype=np.int64), lengths)
        texts: list[Optional[str]] = [None] * len(items)
        if pa.types.is_null(it) or items.null_count == len(items):
            pass
        elif pa.types.is_struct(it):
            for k, value in enumerate(items.to_pylist()):
                if value is not None:
                    texts[k] = _dump_call(value, int(row_of_item[k]))
        elif _is_text(it):
            storage = items.storage if isinstance(items, pa.ExtensionArray) else items
            for k, text in enumerate(storage.to_pylist()):
                if text is not None:
                    texts[k] = _dump_call(_parse_call(text, int(row_of_item[k])), int(row_of_item[k]))
        else:
            raise _ConvertError(f"tool_calls items must be structs or JSON text, found {it}")
        return _rebuild_list(src, _json_array(texts))
    if _is_text(t):
        storage = src.storage if isinstance(src, pa.ExtensionArray) else src
        lists: list[Optional[list[str]]] = []
        for position, text in enumerate(storage.to_pylist()):
            if text is None:
                lists.append(None)
                continue
            value = _parse_call(text, position)
            if value is None:
                lists.append(None)
            elif isinstance(value, list):
                lists.append([tool_call_json(call) for call in value])
            else:
                raise _ConvertError("tool_calls JSON text must hold a list of calls", position)
        storage_list = pa.array(lists, pa.list_(pa.string()))
        return _rebuild_list(storage_list, _json_array(storage_list.flatten().to_pylist()))
    raise _ConvertError(f"tool_calls must be a list of structs or JSON text, found {t}")


def _parse_call(text: str, position: Optional[int]) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _ConvertError(f"tool_calls holds invalid JSON {text[:80]!r}: {exc}", position) from None


def _dump_call(value: Any, position: Optional[int]) -> str:
    try:
        return tool_call_json(value)
    except (TypeError, ValueError) as exc:
        raise _ConvertError(f"a tool call does not serialise to JSON: {exc}", position) from None


def _rebuild_list(src: pa.Array, items: pa.Array) -> pa.Array:
    """A list<json> with `src`'s lengths and nulls over the (already flattened) `items`."""
    lengths = pc.fill_null(pc.list_value_length(src), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(src) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = src.is_null() if src.null_count else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=_TOOL_CALLS_TYPE, mask=mask)


# --------------------------------------------------------------------------------------------
# Python rows (what LeRobot's resolvers see)


def rows_to_python(column: ArrayLike) -> list[Optional[list[dict[str, Any]]]]:
    """A canonical column as LeRobot's resolvers see it: lists of row dicts, tool calls parsed.

    Field order follows the canonical struct; `timestamp` is the float32 widened to a double.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    out = column.to_pylist()
    if _has_tool_calls(column):
        for frame in out:
            for row in frame or ():
                if row is not None and row.get("tool_calls") is not None:
                    row["tool_calls"] = [None if c is None else json.loads(c) for c in row["tool_calls"]]
    return out


def frame_rows_to_python(column: pa.Array, i: int) -> list[dict[str, Any]]:
    """Rows of frame `i` (null list -> [], null rows dropped as LeRobot's renderer does)."""
    value = column[i].as_py()
    rows = [row for row in value or () if row is not None]
    for row in rows:
        if row.get("tool_calls") is not None:
            row["tool_calls"] = [None if c is None else json.loads(c) for c in row["tool_calls"]]
    return rows


def _has_tool_calls(column: pa.Array) -> bool:
    flat = column.flatten()
    if len(flat) == 0:
        return False
    calls = pc.struct_field(flat, "tool_calls")
    return calls.null_count < len(calls)


# --------------------------------------------------------------------------------------------
# Validation


@dataclass(frozen=True)
class _FlatRows:
    """Every row of an episode's column, with the frame (position) and row number of each."""

    rows: pa.StructArray
    frame_pos: np.ndarray
    row_no: np.ndarray
    lengths: np.ndarray


def _flatten(column: pa.Array) -> _FlatRows:
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    frame_pos = np.repeat(np.arange(len(column), dtype=np.int64), lengths)
    row_no = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[frame_pos]
    return _FlatRows(column.flatten(), frame_pos, row_no, lengths)


def _first(mask: Any) -> Optional[int]:
    if isinstance(mask, (pa.Array, pa.ChunkedArray)):
        mask = pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


@dataclass(frozen=True)
class _EpisodeFrames:
    """What validation messages and the default bounds need of an episode's frames."""

    episode_index: int
    frame_index: np.ndarray
    timestamps: np.ndarray
    cameras: list[str]

    def frame_at(self, position: int) -> int:
        """The frame_index of the frame at `position` (the position itself when frame_index is empty)."""
        return int(self.frame_index[position]) if len(self.frame_index) else int(position)

    def error(self, feature: str, position: int, row: int, problem: str) -> LeRobotImportError:
        return LeRobotImportError(
            "language", f"{feature}: episode {self.episode_index} frame {self.frame_at(position)} row {row}: "
                        f"{problem}", episode_index=self.episode_index)


def _numpy(values: Any, dtype: Any = None) -> np.ndarray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=dtype)


def validate_language(persistent: Optional[ArrayLike], events: Optional[ArrayLike], *, episode_index: int,
                      frame_index: Any, timestamps: Any, camera_keys: Collection[str],
                      episode_start: Optional[float] = None, episode_end: Optional[float] = None,
                      persistent_feature: str = LANGUAGE_PERSISTENT,
                      events_feature: str = LANGUAGE_EVENTS) -> None:
    """Check one whole episode's canonical language columns; raise on the first broken rule.

    Rules, each raising `LeRobotImportError(rule="language")` whose message names episode, frame and row:

    * a row is null;
    * a style that is not one of LeRobot's styles;
    * a row in the wrong column (`column_for_style`: persistent styles in `language_persistent`,
      event styles and `style=None` in `language_events`);
    * `vqa`/`trace` rows without a `camera` that is one of `camera_keys` (the dataset's
      `observation.images.*` features); rows of any other style with a camera (even `""`);
    * a persistent row whose timestamp lies outside `[episode_start, episode_end]` (compared in
      float32, both ends included: the writer stamps rows with frame timestamps, and a row after the
      last frame can never become active). NaN is outside;
    * persistent lists that differ between frames (the writer broadcasts one list per episode;
      a null list counts as empty).

    Args:
        persistent, events: the normalised columns of the episode's frames in frame order (either may
            be None when the dataset lacks it).
        episode_index: the episode, for messages.
        frame_index, timestamps: the frames' values (for messages and the default bounds).
        camera_keys: the dataset's image features a view-dependent row may name.
        episode_start, episode_end: the bounds of persistent timestamps; by default the episode's first
            and last frame timestamps.
        persistent_feature, events_feature: the columns' names, for messages.
    """
    frames = _EpisodeFrames(episode_index, _numpy(frame_index), _numpy(timestamps, np.float64),
                            sorted(set(camera_keys)))
    ts = frames.timestamps
    start = np.float32(episode_start if episode_start is not None else (ts.min() if len(ts) else 0.0))
    end = np.float32(episode_end if episode_end is not None else (ts.max() if len(ts) else 0.0))
    columns = []
    if persistent is not None:
        columns.append(("persistent", persistent_feature, _combine(persistent)))
    if events is not None:
        columns.append(("events", events_feature, _combine(events)))
    for kind, feature, column in columns:
        flat = _flatten(column)
        if len(flat.rows) == 0:
            continue
        problem = _row_problem(kind, flat.rows, frames.cameras, start, end)
        if problem is not None:
            k, text = problem
            raise frames.error(feature, int(flat.frame_pos[k]), int(flat.row_no[k]), text)
        if kind == "persistent":
            _check_broadcast(column, feature, frames)


def _row_problem(kind: Kind, rows: pa.StructArray, cameras: list[str], start: np.float32,
                 end: np.float32) -> Optional[tuple[int, str]]:
    """(flat row position, what is wrong) of the first row breaking a per-row rule, in the rules' order."""
    k = _first(rows.is_null())
    if k is not None:
        return k, "the row is null"
    style = pc.struct_field(rows, "style")
    problem = _style_problem(kind, style) or _camera_problem(style, pc.struct_field(rows, "camera"), cameras)
    if problem is None and kind == "persistent":
        problem = _timestamp_problem(pc.struct_field(rows, "timestamp"), start, end)
    return problem


def _style_problem(kind: Kind, style: pa.Array) -> Optional[tuple[int, str]]:
    """An unknown style, or a style in the other column."""
    known = pc.is_in(style, value_set=pa.array(sorted(CORE_STYLES)))
    k = _first(pc.and_(style.is_valid(), pc.invert(known)))
    if k is not None:
        return k, f"unknown style {style[k].as_py()!r}"
    persistent_style = pc.is_in(style, value_set=pa.array(sorted(PERSISTENT_STYLES)))
    if kind == "persistent":
        k = _first(pc.invert(pc.fill_null(persistent_style, False)))
        if k is not None:
            return k, f"style {style[k].as_py()!r} belongs in {LANGUAGE_EVENTS}"
    else:
        k = _first(persistent_style)
        if k is not None:
            return k, f"style {style[k].as_py()!r} belongs in {LANGUAGE_PERSISTENT}"
    return None


def _camera_problem(style: pa.Array, camera: pa.Array, cameras: list[str]) -> Optional[tuple[int, str]]:
    """A view-dependent row without one of the dataset's cameras, or another row with a camera."""
    view = pc.fill_null(pc.is_in(style, value_set=pa.array(sorted(VIEW_DEPENDENT_STYLES))), False)
    on_dataset_camera = pc.fill_null(pc.is_in(camera, value_set=pa.array(cameras, pa.string())), False)
    k = _first(pc.and_(view, pc.invert(on_dataset_camera)))
    if k is not None:
        return k, (f"a row of view-dependent style {style[k].as_py()!r} needs a camera that is one of the "
                   f"dataset's image features {cameras}, got camera={camera[k].as_py()!r}")
    k = _first(pc.and_(pc.invert(view), camera.is_valid()))
    if k is not None:
        return k, f"a row of style {style[k].as_py()!r} must have no camera, got camera={camera[k].as_py()!r}"
    return None


def _timestamp_problem(timestamps: pa.Array, start: np.float32, end: np.float32) -> Optional[tuple[int, str]]:
    """A persistent row stamped outside [start, end] (float32, both ends in; NaN is outside)."""
    row_ts = timestamps.to_numpy(zero_copy_only=False).astype(np.float32)
    with np.errstate(invalid="ignore"):
        inside = (row_ts >= start) & (row_ts <= end)
    k = _first(~inside)
    if k is not None:
        return k, f"timestamp {float(row_ts[k])!r} lies outside the episode [{float(start)!r}, {float(end)!r}]"
    return None


def _check_broadcast(column: pa.Array, feature: str, frames: _EpisodeFrames) -> None:
    """The persistent list must be the same on every frame (the writer broadcasts one per episode)."""
    mismatch = persistent_mismatch(column)
    if mismatch is not None:
        frame_pos, row = mismatch
        raise frames.error(feature, frame_pos, row, f"the persistent rows differ from those of frame "
                                                    f"{frames.frame_at(0)} (they must be the same on every frame)")


def _combine(column: ArrayLike) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def persistent_mismatch(column: ArrayLike) -> Optional[tuple[int, int]]:
    """(frame position, row) of the first frame whose persistent list differs from frame 0's.

    Vectorised: every frame's rows are compared field by field with the same row of frame 0.
    A frame with a different row count is reported at the first row where the lists part.
    """
    column = _combine(column)
    n = len(column)
    if n <= 1:
        return None
    flat = _flatten(column)
    lengths = flat.lengths
    ref_len = int(lengths[0])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = flat.rows
    if np.all(lengths == ref_len):
        # The common case (a valid episode): no gather on the frames' side.
        compare_frame = np.repeat(np.arange(n, dtype=np.int64), ref_len)
        compare_row = np.tile(np.arange(ref_len, dtype=np.int64), n)
        idx = None
    else:
        # Compare position r of every frame with position r of frame 0, for r < min(len, ref_len).
        common = np.minimum(lengths, ref_len)
        compare_frame = np.repeat(np.arange(n, dtype=np.int64), common)
        compare_row = np.arange(len(compare_frame), dtype=np.int64) - np.repeat(
            np.concatenate([[0], np.cumsum(common)[:-1]]), common)
        idx = pa.array(offsets[compare_frame] + compare_row)
    ref_idx = pa.array(compare_row)  # frame 0's rows start at flat index 0
    differs = np.zeros(len(compare_row), dtype=bool)
    if len(compare_row):
        a_valid = rows.is_valid() if idx is None else rows.is_valid().take(idx)
        differs |= _differs(a_valid, rows.is_valid().take(ref_idx))
        for name in rows.type.names:
            child = pc.struct_field(rows, name)
            a = child if idx is None else child.take(idx)
            b = child.take(ref_idx)
            if name == "tool_calls":
                differs |= _tool_calls_differ(a, b)
            else:
                eq = pc.equal(a, b)
                both_null = pc.and_(a.is_null(), b.is_null())
                same = pc.or_(pc.fill_null(eq, False), both_null)
                differs |= ~same.to_numpy(zero_copy_only=False)
    best: Optional[tuple[int, int]] = None
    k = _first(differs)
    if k is not None:
        best = (int(compare_frame[k]), int(compare_row[k]))
    bad_len = np.flatnonzero(lengths != ref_len)
    if len(bad_len):
        candidate = (int(bad_len[0]), int(min(lengths[bad_len[0]], ref_len)))
        if best is None or candidate < best:
            best = candidate
    return best


def _differs(a: pa.Array, b: pa.Array) -> np.ndarray:
    return pc.not_equal(a, b).to_numpy(zero_copy_only=False)


def _tool_calls_differ(a: pa.Array, b: pa.Array) -> np.ndarray:
    out = _differs(a.is_null(), b.is_null())
    present = np.flatnonzero(a.is_valid().to_numpy(zero_copy_only=False) & ~out)
    if len(present):
        a_list = a.take(pa.array(present)).to_pylist()
        b_list = b.take(pa.array(present)).to_pylist()
        for k, x, y in zip(present, a_list, b_list):
            if x != y:
                out[k] = True
    return out


def column_from_python(frames: Sequence[Optional[Sequence[dict[str, Any]]]], kind: Kind) -> pa.Array:
    """A canonical column from Python frames of row dicts (tool calls as objects)."""
    fields = PERSISTENT_ROW_FIELDS if kind == "persistent" else EVENT_ROW_FIELDS
    storage_fields = [pa.field(f.name, pa.list_(pa.string())) if f.name == "tool_calls" else f
                      for f in (persistent_row_type() if kind == "persistent" else event_row_type())]
    storage_type = pa.list_(pa.struct(storage_fields))
    data = []
    for frame in frames:
        if frame is None:
            data.append(None)
            continue
        out_rows = []
        for row in frame:
            if row is None:
                out_rows.append(None)
                continue
            item = {f: row.get(f) for f in fields}
            if item["tool_calls"] is not None:
                item["tool_calls"] = [None if c is None else tool_call_json(c) for c in item["tool_calls"]]
            out_rows.append(item)
        data.append(out_rows)
    storage = pa.array(data, storage_type)
    return normalize_language_column(storage, kind, feature=f"language_{kind}")

