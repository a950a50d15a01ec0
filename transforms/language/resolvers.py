"""Language resolvers: what a recipe binding (`active_at(t, style=subtask)`, ...) answers for one frame.

A resolver looks at a frame's language rows as LeRobot's training loader yields them (dicts with
LeRobot's keys, `tool_calls` holding parsed JSON objects) and returns one row or None; more than one
matching row raises `ValueError` with LeRobot's own message ("Ambiguous resolver ..."):

* `active_at(t, style=...)`: the persistent row whose timestamp is the latest one <= t;
* `emitted_at(t, ...)`: a persistent row within 0.1 s of t, or one of the frame's own event rows;
* `nth_prev` / `nth_next(t, style=..., offset=k)`: the persistent row k places before / after the one
  active at t.

`parse_resolver` turns a binding expression into a `ResolverSpec`; `PersistentTables` answers the
persistent resolvers of a whole episode by bisection over sorted timestamps (the fast path of
`render.render_episode`), with the same answers and errors as the functions above.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from transforms.language import columns
from transforms.language.errors import RecipeError

Row = dict[str, Any]

#: LeRobot's default bindings, in its order (the order bindings are resolved in).
DEFAULT_BINDINGS: dict[str, str] = {
    "subtask": "active_at(t, style=subtask)",
    "memory": "active_at(t, style=memory)",
    "plan": "active_at(t, style=plan)",
    "speech": "emitted_at(t, role=assistant, tool_name=say)",
    "interjection": "emitted_at(t, style=interjection)",
    "vqa": "emitted_at(t, style=vqa, role=assistant)",
    "vqa_query": "emitted_at(t, style=vqa, role=user)",
}

#: `emitted_at` takes a persistent row whose timestamp is within this many seconds of t (both ends in).
EMITTED_AT_TOLERANCE_S = 0.1

_RESOLVER_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<args>.*)\)$")
_RESOLVER_KWARGS = {
    "active_at": ("style", "role", "tool_name", "camera"),
    "emitted_at": ("style", "role", "tool_name", "camera"),
    "nth_prev": ("style", "offset", "role", "tool_name", "camera"),
    "nth_next": ("style", "offset", "role", "tool_name", "camera"),
}


# --------------------------------------------------------------------------------------------
# Row matching


def validate_persistent_resolver(name: str, style: Optional[str]) -> None:
    """Raise LeRobot's `ValueError` when resolver `name` (active_at, nth_*) is not given a persistent style.

    Args:
        name: the resolver's name, for the message.
        style: the style it was given.
    """
    if style is None:
        raise ValueError(f"{name} requires a persistent style.")
    if columns.column_for_style(style) != columns.LANGUAGE_PERSISTENT:
        raise ValueError(f"{name} cannot be used with event-only style {style!r}.")


def _row_has_tool_name(row: Row, tool_name: str) -> bool:
    for call in row.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == tool_name:
            return True
    return False


def _matches(row: Row, style: Optional[str], role: Optional[str], tool_name: Optional[str],
             camera: Optional[str]) -> bool:
    return ((style is None or row.get("style") == style)
            and (role is None or row.get("role") == role)
            and (tool_name is None or _row_has_tool_name(row, tool_name))
            and (camera is None or row.get("camera") == camera))


def _ambiguous(count: int, style: Optional[str], role: Optional[str], tool_name: Optional[str],
               camera: Optional[str]) -> ValueError:
    return ValueError(f"Ambiguous resolver for style={style!r} role={role!r} tool_name={tool_name!r} "
                      f"camera={camera!r}: {count} matching rows. Add a selector that distinguishes them.")


def _select_one(rows: Sequence[Row], style, role, tool_name, camera) -> Optional[Row]:
    if not rows:
        return None
    if len(rows) > 1:
        raise _ambiguous(len(rows), style, role, tool_name, camera)
    return rows[0]


def _ts(row: Row) -> float:
    return float(row["timestamp"])


def _sort_key(row: Row) -> tuple[float, str, str]:
    ts = row.get("timestamp")
    return (float(ts) if ts is not None else 0.0, row.get("style") or "", row.get("role") or "")


def _nth_target(anchor: Optional[int], offset: int, count: int) -> Optional[int]:
    target = (offset - 1 if offset > 0 else None) if anchor is None else anchor + offset
    if target is None or target < 0 or target >= count:
        return None
    return target


# --------------------------------------------------------------------------------------------
# The resolvers (one frame, Python rows)


def active_at(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, role: Optional[str] = None,
              tool_name: Optional[str] = None, camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row of `style` whose timestamp is the latest one <= t.

    Args:
        t: the frame's time in seconds.
        persistent: the frame's persistent rows.
        style, role, tool_name, camera: selectors; `style` must be a persistent style.

    Returns:
        The row, or None when no row is active yet. Two rows at that timestamp raise `ValueError`.
    """
    validate_persistent_resolver("active_at", style)
    matches = [r for r in persistent if _matches(r, style, role, tool_name, camera) and _ts(r) <= t]
    if not matches:
        return None
    latest = max(_ts(r) for r in matches)
    return _select_one([r for r in matches if _ts(r) == latest], style, role, tool_name, camera)


def emitted_at(t: float, *, persistent: Sequence[Row], events: Sequence[Row], style: Optional[str] = None,
               role: Optional[str] = None, tool_name: Optional[str] = None,
               camera: Optional[str] = None) -> Optional[Row]:
    """A persistent row within 0.1 s of t (for a persistent style), or one of the frame's event rows.

    Args:
        t: the frame's time in seconds.
        persistent, events: the frame's persistent and event rows.
        style, role, tool_name, camera: selectors.

    Returns:
        The one matching row or None; more than one raises `ValueError`.
    """
    if columns.column_for_style(style) == columns.LANGUAGE_PERSISTENT:
        matches = [r for r in persistent if _matches(r, style, role, tool_name, camera)
                   and abs(_ts(r) - t) <= EMITTED_AT_TOLERANCE_S]
    else:
        matches = [r for r in events if _matches(r, style, role, tool_name, camera)]
    return _select_one(matches, style, role, tool_name, camera)


def nth_prev(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, offset: int = 1,
             role: Optional[str] = None, tool_name: Optional[str] = None,
             camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row `offset` places before the one active at t (None past the first)."""
    return _nth_relative("nth_prev", t, persistent, style, -offset, role, tool_name, camera)


def nth_next(t: float, *, persistent: Sequence[Row], style: Optional[str] = None, offset: int = 1,
             role: Optional[str] = None, tool_name: Optional[str] = None,
             camera: Optional[str] = None) -> Optional[Row]:
    """The persistent row `offset` places after the one active at t (None past the last)."""
    return _nth_relative("nth_next", t, persistent, style, offset, role, tool_name, camera)


def _nth_relative(name: str, t: float, persistent: Sequence[Row], style, offset: int, role, tool_name,
                  camera) -> Optional[Row]:
    validate_persistent_resolver(name, style)
    if abs(offset) < 1:
        raise ValueError(f"{name} offset must be non-zero.")
    rows = sorted((r for r in persistent if _matches(r, style, role, tool_name, camera)), key=_sort_key)
    if not rows:
        return None
    anchor = None
    for i, row in enumerate(rows):
        if _ts(row) <= t:
            anchor = i
        else:
            break
    target = _nth_target(anchor, offset, len(rows))
    return None if target is None else rows[target]


RESOLVERS = {"active_at": active_at, "emitted_at": emitted_at, "nth_prev": nth_prev, "nth_next": nth_next}


# --------------------------------------------------------------------------------------------
# Binding expressions


@dataclass(frozen=True)
class ResolverSpec:
    """A parsed binding expression such as `nth_prev(style=memory, offset=1)`."""

    fn: str
    style: Optional[str] = None
    role: Optional[str] = None
    tool_name: Optional[str] = None
    camera: Optional[str] = None
    offset: int = 1
    #: True when the answer comes from the frame's own event rows (no time lookup).
    on_events: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_events",
                           self.fn == "emitted_at" and columns.column_for_style(self.style) == columns.LANGUAGE_EVENTS)

    def kwargs(self) -> dict[str, Any]:
        """The resolver's keyword arguments (`offset` only for nth_prev / nth_next)."""
        out: dict[str, Any] = {"style": self.style, "role": self.role, "tool_name": self.tool_name,
                               "camera": self.camera}
        if self.fn in ("nth_prev", "nth_next"):
            out["offset"] = self.offset
        return out

    def resolve(self, t: float, persistent: Sequence[Row], events: Sequence[Row]) -> Optional[Row]:
        """The resolver's answer for one frame (see the module docstring)."""
        if self.fn == "emitted_at":
            return emitted_at(t, persistent=persistent, events=events, **self.kwargs())
        return RESOLVERS[self.fn](t, persistent=persistent, **self.kwargs())

    def resolve_events(self, events: Sequence[Row]) -> Optional[Row]:
        """The answer of an `on_events` spec: the one matching event row of the frame, or None."""
        if not events:
            return None
        found = [r for r in events if _matches(r, self.style, self.role, self.tool_name, self.camera)]
        return _select_one(found, self.style, self.role, self.tool_name, self.camera)


def parse_resolver(expression: str) -> ResolverSpec:
    """Parse LeRobot's `name(t, key=value, ...)` syntax and check it as far as data allows.

    Like LeRobot: a bare `t` is ignored, quotes around values are stripped, `offset` is an int,
    arguments split on commas. Checked here rather than on the first frame (LeRobot would raise
    on every frame anyway): the resolver name, the keyword names, the style, a persistent style
    for `active_at`/`nth_*`, a non-zero offset.

    Args:
        expression: the binding's text.

    Returns:
        The spec; a broken expression raises `RecipeError`.
    """
    if not isinstance(expression, str):
        raise RecipeError(f"A binding must be a resolver expression string, got {expression!r}")
    match = _RESOLVER_RE.match(expression.strip())
    if match is None:
        raise RecipeError(f"Invalid resolver expression: {expression!r}")
    name = match.group("name")
    if name not in RESOLVERS:
        raise RecipeError(f"Unknown language resolver: {name!r}")
    kwargs = _resolver_kwargs(name, match.group("args"), expression)
    try:
        spec = ResolverSpec(fn=name, **kwargs)
        if name != "emitted_at":
            validate_persistent_resolver(name, spec.style)
            if name != "active_at" and abs(spec.offset) < 1:
                raise ValueError(f"{name} offset must be non-zero.")
    except ValueError as exc:
        raise RecipeError(f"{exc} (in {expression!r})") from None
    return spec


def _resolver_kwargs(name: str, args: str, expression: str) -> dict[str, Any]:
    """The `key=value` arguments of a resolver call, checked against the resolver's keywords."""
    kwargs: dict[str, Any] = {}
    for part in (p.strip() for p in args.split(",")) if args.strip() else ():
        if not part or part == "t":
            continue
        if "=" not in part:
            raise RecipeError(f"Invalid resolver argument: {part!r}")
        key, value = (item.strip() for item in part.split("=", 1))
        if key not in _RESOLVER_KWARGS[name]:
            raise RecipeError(f"{name}() got an unexpected keyword argument {key!r} in {expression!r}")
        if key == "offset":
            try:
                kwargs[key] = int(value)
            except ValueError:
                raise RecipeError(f"Invalid offset {value!r} in {expression!r}") from None
        else:
            kwargs[key] = value.strip("\"'")
    return kwargs


# --------------------------------------------------------------------------------------------
# One episode's persistent resolvers by bisection


class PersistentTables:
    """Per-episode answers to persistent resolvers: sorted timestamps, bisected per frame.

    Args:
        rows: the episode's persistent rows (the same on every frame of a valid episode).

    `raw_len` is the number of rows of the frame's list as stored (null rows included), which the
    processor uses to tell an unannotated frame; `task_aug` the contents of the `task_aug` user rows.
    """

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.raw_len = 0
        self.task_aug = [r.get("content") for r in rows if r.get("style") == "task_aug" and r.get("role") == "user"]
        self._tables: dict[ResolverSpec, Any] = {}

    def _table(self, spec: ResolverSpec) -> Any:
        table = self._tables.get(spec)
        if table is None:
            matches = [r for r in self.rows if _matches(r, spec.style, spec.role, spec.tool_name, spec.camera)
                       and not math.isnan(_ts(r))]
            if spec.fn == "active_at":
                groups: dict[float, list[Row]] = {}
                for r in matches:
                    groups.setdefault(_ts(r), []).append(r)
                keys = sorted(groups)
                table = (keys, [groups[k] for k in keys])
            else:
                ordered = sorted(matches, key=_ts if spec.fn == "emitted_at" else _sort_key)
                table = ([_ts(r) for r in ordered], ordered)
            self._tables[spec] = table
        return table

    def resolve(self, spec: ResolverSpec, t: float) -> Optional[Row]:
        """What `spec.resolve(t, rows, ...)` answers, for a persistent spec (not `on_events`)."""
        keys, values = self._table(spec)
        if spec.fn == "active_at":
            k = bisect.bisect_right(keys, t) - 1
            if k < 0:
                return None
            return _select_one(values[k], spec.style, spec.role, spec.tool_name, spec.camera)
        if spec.fn == "emitted_at":
            lo = bisect.bisect_left(keys, t - EMITTED_AT_TOLERANCE_S - 1e-6)
            hi = bisect.bisect_right(keys, t + EMITTED_AT_TOLERANCE_S + 1e-6)
            found = [values[i] for i in range(lo, hi) if abs(keys[i] - t) <= EMITTED_AT_TOLERANCE_S]
            return _select_one(found, spec.style, spec.role, spec.tool_name, spec.camera)
        if not values:
            return None
        anchor = bisect.bisect_right(keys, t) - 1
        offset = spec.offset if spec.fn == "nth_next" else -spec.offset
        target = _nth_target(anchor if anchor >= 0 else None, offset, len(values))
        return None if target is None else values[target]
